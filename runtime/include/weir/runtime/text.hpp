// Small text helpers shared by modules that read outside input (URLs, connection strings,
// tool output, model text, configuration files): percent-decoding, UTF-8 validation, cutting
// and repair, and the "did you mean" suggestion for a misspelt name.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
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

// At most `max` bytes of `s`, cut on a character boundary, with "..." after when it was cut:
// how a message shows a long value ("expression \"((((...\": ...").
std::string utf8_abbreviate(std::string_view s, std::size_t max);

// Text from outside as a log line or a terminal shows it: control characters escaped (\n, \r,
// \t, else \xNN, C1 controls too), and so is each byte of an invalid UTF-8 sequence; at most
// `max` bytes of the input are shown, with "..." after when it was cut. A peer's garbage can
// neither drive the terminal (ESC) nor forge a line.
std::string escape_control(std::string_view s, std::size_t max = std::string_view::npos);

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

// Whether a and b are equal with ASCII letters compared without case (header names, schemes).
bool iequals(std::string_view a, std::string_view b) noexcept;

// --- suggestions -----------------------------------------------------------------------------

// Levenshtein distance, ASCII letters compared without case ("Calculator" is 0 from
// "calculator").
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word` when it is within max(2, |word| / 3) edits and shares
// something with it (ties: the first), for "did you mean" hints; nullopt otherwise.
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates);
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string_view> candidates);

// "unknown channel 'countr'; did you mean 'counter'?"; when no name is close, the names known:
// " (known: a, b)", " (42 are defined)" past 20 of them, " (none are defined)". Past 5000
// names no suggestion is looked for (it costs an edit distance each).
std::string unknown_name_message(std::string_view what, std::string_view name,
                                 std::span<const std::string> known);

// ^[A-Za-z_][A-Za-z0-9_-]*$: the names of a configuration file's channels, nodes, tools,
// models, servers ("fs" in "fs/read_file" must hold no '/').
bool is_plain_name(std::string_view s) noexcept;

// "; did you mean 'summarize'?" when closest_match finds one, else "".
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates);

}  // namespace weir
