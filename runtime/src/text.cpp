#include "weir/runtime/text.hpp"

namespace weir {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool Utf8Stream::feed(std::string_view chunk) noexcept {
  for (unsigned char c : chunk) {
    if (!ok_) return false;
    if (need_ > 0) {
      if ((c & 0xC0) != 0x80) return ok_ = false;
      cp_ = (cp_ << 6) | (c & 0x3F);
      if (--need_ == 0) {
        if (cp_ < min_ || cp_ > 0x10FFFF || (cp_ >= 0xD800 && cp_ <= 0xDFFF)) return ok_ = false;
      }
      continue;
    }
    if (c == 0) return ok_ = false;
    if (c < 0x80) continue;
    if ((c & 0xE0) == 0xC0) {
      need_ = 1, cp_ = c & 0x1F, min_ = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      need_ = 2, cp_ = c & 0x0F, min_ = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      need_ = 3, cp_ = c & 0x07, min_ = 0x10000;
    } else {
      return ok_ = false;
    }
  }
  return ok_;
}

std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int need;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) {
      need = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      need = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      need = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (s.size() - i <= static_cast<std::size_t>(need)) return i;  // truncated at the end
    for (int k = 1; k <= need; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += need + 1;
  }
  return std::nullopt;
}

std::size_t utf8_cut(std::string_view s, std::size_t max) noexcept {
  if (max >= s.size()) return s.size();
  std::size_t n = max;
  // Step back over continuation bytes to the start of the character that straddles `max`.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80 && max - n < 4) --n;
  return n;
}

std::size_t utf8_skip_continuation(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size() && i < 3 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  return i;
}

std::size_t utf8_length(std::string_view s) noexcept {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace weir
