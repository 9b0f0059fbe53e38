// Small text helpers shared by modules that read outside input (URLs, connection strings,
// tool output, model text): percent-decoding and UTF-8 validation and cutting.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace weir {

// "%41b%2Fc" -> "Ab/c": each %XX with two hex digits becomes that byte; anything else (a lone
// '%', "%zz") is kept as written. '+' is not a space here (paths and URIs, not form data).
std::string percent_decode(std::string_view s);

// --- UTF-8 ---------------------------------------------------------------------------------

// Byte offset of the first invalid sequence (overlong, surrogate, > U+10FFFF, truncated), or
// nullopt when `s` is valid UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept;

// The largest n <= max such that s[0, n) does not end inside a multi-byte character.
std::size_t utf8_cut(std::string_view s, std::size_t max) noexcept;

// Bytes to skip at the start of `s` so it does not begin with continuation bytes (at most 3).
std::size_t utf8_skip_continuation(std::string_view s) noexcept;

// Code points in `s` (continuation bytes are not counted).
std::size_t utf8_length(std::string_view s) noexcept;

// Validates a stream given in chunks of any size.
class Utf8Stream {
 public:
  // False once an invalid sequence or a NUL byte was seen.
  bool feed(std::string_view chunk) noexcept;
  // True when everything fed was valid and no character is left unfinished.
  bool finish() const noexcept { return ok_ && need_ == 0; }

 private:
  bool ok_ = true;
  int need_ = 0;  // continuation bytes still expected
  unsigned cp_ = 0;
  unsigned min_ = 0;
};

}  // namespace weir
