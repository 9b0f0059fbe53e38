// Bytes -> SseReader in pieces of varying size: no crash, and the reader stays within its bound.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "weir/http/sse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t step = 1 + data[0] % 17;
  weir::http::SseReader reader(
      weir::http::SseLimits{.max_line_bytes = 128, .max_event_bytes = 256});
  auto check = [](weir::http::SseEvent& e) -> weir::Status {
    if (e.data.size() > 256) std::abort();  // an event past the bound got through
    return {};
  };
  for (std::size_t i = 0; i < in.size(); i += step)
    if (!reader.feed(in.substr(i, step), check)) break;
  return 0;
}
