// parse_json must never crash, hang or read out of bounds, whatever the bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weir/runtime/json_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = weir::parse_json(text, "fuzz",
                            {.max_bytes = 1 << 20, .max_depth = 64, .record_locations = true});
  if (r) {
    for (const auto& [pointer, offset] : r->offsets) {
      if (offset > size) __builtin_trap();
    }
  }
  return 0;
}
