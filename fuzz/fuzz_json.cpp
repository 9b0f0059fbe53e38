// parse_json must never crash, hang or read out of bounds, whatever the bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weir/runtime/json_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = weir::parse_json(text, "fuzz", {.max_bytes = 1 << 20, .max_depth = 64});
  if (r) {
    // Locating a value (and one that does not exist) stays inside the text.
    for (const char* pointer : {"", "/0", "/a/1", "/nodes/x/kind"}) {
      if (r->locate(text, pointer).offset > size) __builtin_trap();
    }
  }
  return 0;
}
