// parse_json must never crash, hang or read out of bounds, whatever the bytes: on both of its
// paths (simdjson for small texts; Boost.JSON, with the value on slabs, from 1 MiB).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
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
  // Refusing duplicate keys refuses more, never less, and changes no value it accepts.
  auto once = weir::parse_json(
      text, "fuzz", {.max_bytes = 1 << 20, .max_depth = 64, .reject_duplicate_keys = true});
  if (once && (!r || once->value != r->value)) __builtin_trap();
  // One input in eight again, followed by 1 MiB of spaces: the large-document path (slow
  // under the sanitizers, hence not every input).
  if (size > 0 && (data[0] & 7) == 1) {
    static std::string padded(std::size_t{1} << 20, ' ');
    std::memcpy(padded.data(), data, std::min(size, padded.size()));
    std::string_view big(padded.data(), padded.size());
    auto b = weir::parse_json(big, "fuzz", {.max_bytes = 2 << 20, .max_depth = 64, .slabs = true});
    if (b && b->locate(big, "/a/1").offset > big.size()) __builtin_trap();
    // So on the large path (key hashes, then the small path's parser on a suspicion).
    auto bo = weir::parse_json(
        big, "fuzz",
        {.max_bytes = 2 << 20, .max_depth = 64, .slabs = true, .reject_duplicate_keys = true});
    if (bo && (!b || bo->value != b->value)) __builtin_trap();
    std::memset(padded.data(), ' ', std::min(size, padded.size()));
  }
  return 0;
}
