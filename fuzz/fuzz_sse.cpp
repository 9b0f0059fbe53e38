// Bytes -> SseReader in pieces of varying size: no crash, and the reader stays within its bound.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "weir/http/sse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t step = 1 + data[0] % 17;
  weir::http::SseReader reader(256);
  std::vector<weir::http::SseReader::Event> events;
  for (std::size_t i = 0; i < in.size(); i += step) reader.push(in.substr(i, step), events);
  for (const auto& e : events)
    if (e.data.size() > 256 + step) std::abort();  // an event past the bound got through
  return 0;
}
