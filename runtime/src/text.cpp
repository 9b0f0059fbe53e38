#include "weir/runtime/text.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

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

std::string utf8_abbreviate(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  std::string out(s.substr(0, utf8_cut(s, max)));
  out += "...";
  return out;
}

std::string escape_control(std::string_view s, std::size_t max) {
  const bool cut = s.size() > max;
  if (cut) s = s.substr(0, utf8_cut(s, max));
  std::string out;
  out.reserve(s.size());
  auto hex = [&](unsigned char u) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", u);
    out += buf;
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x80) {
      if (u >= 0x20 && u != 0x7f)
        out += s[i];
      else if (u == '\n')
        out += "\\n";
      else if (u == '\r')
        out += "\\r";
      else if (u == '\t')
        out += "\\t";
      else
        hex(u);
      ++i;
      continue;
    }
    const std::size_t len = u >= 0xf0 ? 4 : u >= 0xe0 ? 3 : u >= 0xc0 ? 2 : 1;
    const auto seq = s.substr(i, len);
    const bool c1 = u == 0xc2 && seq.size() == 2 && static_cast<unsigned char>(seq[1]) < 0xa0;
    if (len == 1 || seq.size() < len || c1 || find_invalid_utf8(seq)) {
      hex(u);  // a stray byte, a cut or invalid sequence, a C1 control: byte by byte
      ++i;
    } else {
      out += seq;
      i += len;
    }
  }
  if (cut) out += "...";
  return out;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

namespace {

template <class S>
std::optional<std::string> closest(std::string_view word, std::span<const S> candidates) {
  std::optional<std::string> best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    // The distance is at least the difference of the lengths: skip what cannot win.
    const std::size_t gap =
        c.size() > word.size() ? c.size() - word.size() : word.size() - c.size();
    if (gap >= best_d) continue;
    // A candidate that shares nothing with the word is no suggestion ("ab" for "xy").
    if (const std::size_t d = edit_distance(word, c);
        d < best_d && d < std::max(word.size(), c.size())) {
      best_d = d;
      best = std::string(c);
    }
  }
  return best;
}

template <class S>
std::string suggestion(std::string_view word, std::span<const S> candidates) {
  auto m = closest(word, candidates);
  return m ? "; did you mean '" + *m + "'?" : std::string();
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates) {
  return closest(word, candidates);
}
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string_view> candidates) {
  return closest(word, candidates);
}
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  return suggestion(word, candidates);
}
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
  return suggestion(word, candidates);
}

std::string unknown_name_message(std::string_view what, std::string_view name,
                                 std::span<const std::string> known) {
  std::string msg = "unknown " + std::string(what) + " '" + std::string(name) + "'";
  if (known.size() <= 5000)
    if (auto m = closest_match(name, known)) return msg + "; did you mean '" + *m + "'?";
  if (known.empty()) return msg + " (none are defined)";
  if (known.size() > 20) return msg + " (" + std::to_string(known.size()) + " are defined)";
  msg += " (known: ";
  for (std::size_t i = 0; i < known.size(); ++i) msg += (i ? ", " : "") + known[i];
  return msg + ")";
}

bool is_plain_name(std::string_view s) noexcept {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (s.empty() || !alpha(s[0])) return false;
  return std::all_of(s.begin() + 1, s.end(),
                     [&](char c) { return alpha(c) || (c >= '0' && c <= '9') || c == '-'; });
}

}  // namespace weir
