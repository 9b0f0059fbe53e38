#include "weir/graph/ids.hpp"

#include <cstdint>
#include <string>

namespace weir::graph {
namespace {

constexpr const char* kRule = "; an id is 1 to 1024 bytes of UTF-8 text without control characters";

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not valid UTF-8 (overlong
// forms, surrogates and code points above U+10FFFF included).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n;
  std::uint32_t min, cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

std::string hex_byte(unsigned char c) {
  constexpr char kDigits[] = "0123456789abcdef";
  return std::string("0x") + kDigits[c >> 4] + kDigits[c & 0xF];
}

// The valid text before offset `at`, for the message: at most 40 bytes, cut on a character.
std::string before(std::string_view id, std::size_t at) {
  std::size_t n = std::min<std::size_t>(at, 40);
  while (n > 0 && n < at && (static_cast<unsigned char>(id[n]) & 0xC0) == 0x80) --n;
  std::string out(id.substr(0, n));
  return "'" + out + (n < at ? "...'" : "'");
}

}  // namespace

Status check_id(std::string_view what, std::string_view id) {
  if (id.empty()) return Error(Errc::invalid_argument, std::string(what) + " is empty" + kRule);
  for (std::size_t i = 0; i < id.size();) {
    const auto c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c == 0x7F)
      return Error(Errc::invalid_argument,
                   std::string(what) + " holds a control character (byte " + hex_byte(c) +
                       " at offset " + std::to_string(i) +
                       (i > 0 ? ", after " + before(id, i) : std::string()) + ")" + kRule);
    const std::size_t n = utf8_sequence(id, i);
    if (n == 0)
      return Error(Errc::invalid_argument,
                   std::string(what) + " is not valid UTF-8 (byte " + hex_byte(c) + " at offset " +
                       std::to_string(i) + (i > 0 ? ", after " + before(id, i) : std::string()) +
                       ")" + kRule);
    i += n;
  }
  if (id.size() > kMaxIdBytes)  // after the scan: the part shown is valid text
    return Error(Errc::invalid_argument, std::string(what) + " is " + std::to_string(id.size()) +
                                             " bytes long (" + before(id, id.size()) + ")" + kRule);
  return {};
}

}  // namespace weir::graph
