// The regex subset (docs/structured-output.md): literals, escapes (\d \w \s \D \W \S \n \t \r
// \f \v \xHH \uHHHH and escaped punctuation), classes [...] with ranges and negation, '.',
// groups ( ), (?: ) and (?<name> ), alternation |, quantifiers * + ? {n} {n,} {n,m} (a lazy
// '?' suffix is accepted: it does not change what matches), ^ at the start and $ at the end.
// Not supported (an error naming the offset): back-references, lookaround, \b \B, anchors
// elsewhere, possessive quantifiers.
#include <algorithm>

#include "constraint/grammar.hpp"

namespace weir::inference::constraint {

namespace {

constexpr std::uint32_t kMaxCp = 0x10FFFF;
constexpr std::int64_t kMaxRepeat = 10000;

std::vector<CpRange> normalise(std::vector<CpRange> r) {
  std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
  std::vector<CpRange> out;
  for (auto x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, x.hi);
    else
      out.push_back(x);
  }
  return out;
}

std::vector<CpRange> complement(const std::vector<CpRange>& in) {
  std::vector<CpRange> out;
  std::uint32_t next = 0;
  for (auto x : normalise(in)) {
    if (x.lo > next) out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}

struct Parser {
  GrammarBuilder& b;
  std::string_view s;
  bool json;
  std::size_t base = 0;  // offsets are into the whole pattern (a leading '^' was taken off)
  std::size_t i = 0;
  bool failed = false;
  Error err;

  std::string where(std::size_t at) const { return "regex at offset " + std::to_string(at + base); }
  bool fail(const std::string& what) {
    if (!failed) {
      failed = true;
      err = Error(Errc::invalid_argument, where(i) + ": " + what);
    }
    return false;
  }
  bool eof() const { return i >= s.size(); }

  std::uint32_t next_cp() {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (c >= 0x80 && c < 0xC0) len = 1;
    if (i + len > s.size()) len = 1;
    std::uint32_t cp = len == 1 ? c : c & (0xFF >> (len + 1));
    for (std::size_t k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += len;
    return cp;
  }

  int hex(std::size_t n) {
    if (i + n > s.size()) return fail("expected " + std::to_string(n) + " hex digits"), -1;
    int v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      char c = s[i + k];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return fail("expected a hex digit"), -1;
      v = v * 16 + d;
    }
    i += n;
    return v;
  }

  // After a backslash: a class escape (\d ...) fills `set` and returns true; a character
  // escape sets `cp`.
  bool escape(std::vector<CpRange>& set, std::uint32_t& cp, bool& is_set) {
    if (eof()) return fail("a pattern cannot end with '\\'");
    const char c = s[i++];
    is_set = true;
    const std::vector<CpRange> d = {{'0', '9'}};
    const std::vector<CpRange> w = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const std::vector<CpRange> sp = {{'\t', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd':
        set = d;
        return true;
      case 'D':
        set = complement(d);
        return true;
      case 'w':
        set = w;
        return true;
      case 'W':
        set = complement(w);
        return true;
      case 's':
        set = sp;
        return true;
      case 'S':
        set = complement(sp);
        return true;
      default:
        break;
    }
    is_set = false;
    switch (c) {
      case 'n':
        cp = '\n';
        return true;
      case 't':
        cp = '\t';
        return true;
      case 'r':
        cp = '\r';
        return true;
      case 'f':
        cp = '\f';
        return true;
      case 'v':
        cp = '\v';
        return true;
      case '0':
        cp = 0;
        return true;
      case 'x': {
        int v = hex(2);
        cp = static_cast<std::uint32_t>(v);
        return v >= 0;
      }
      case 'u': {
        int v = hex(4);
        cp = static_cast<std::uint32_t>(v);
        return v >= 0;
      }
      case 'b':
      case 'B':
        --i;
        return fail("word boundaries (\\b, \\B) are not supported");
      default:
        if (c >= '1' && c <= '9') {
          --i;
          return fail("back-references are not supported");
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          --i;
          return fail(std::string("unknown escape \\") + c);
        }
        --i;
        cp = next_cp();
        return true;
    }
  }

  // One code point from `set` as symbols (JSON-escaped when in a JSON string). An empty set
  // (the class written at offset `at`) matches nothing, and says so if nothing else matches.
  Seq emit_set(std::vector<CpRange> set, std::size_t at = 0) {
    set = normalise(std::move(set));
    if (set.empty()) return {b.never(where(at) + ": the character class matches no character")};
    if (!json) return {b.cp_class(set)};
    std::vector<Seq> alts;
    std::vector<CpRange> plain;
    auto special = [&](std::uint32_t cp) {
      static const char* hexd = "0123456789abcdef";
      std::string lit;
      switch (cp) {
        case '"':
          lit = "\\\"";
          break;
        case '\\':
          lit = "\\\\";
          break;
        case '\n':
          lit = "\\n";
          break;
        case '\t':
          lit = "\\t";
          break;
        case '\r':
          lit = "\\r";
          break;
        case '\b':
          lit = "\\b";
          break;
        case '\f':
          lit = "\\f";
          break;
        default:
          lit = std::string("\\u00") + hexd[cp >> 4] + hexd[cp & 15];
      }
      alts.push_back(b.literal(lit));
    };
    for (auto r : set) {
      for (std::uint32_t cp = r.lo; cp <= std::min<std::uint32_t>(r.hi, 0x1F); ++cp) special(cp);
      std::uint32_t lo = std::max<std::uint32_t>(r.lo, 0x20);
      while (lo <= r.hi) {
        if (lo == '"' || lo == '\\') {
          special(lo++);
          continue;
        }
        std::uint32_t end = r.hi;
        if (lo < '"' && end >= '"')
          end = '"' - 1;
        else if (lo < '\\' && end >= '\\')
          end = '\\' - 1;
        plain.push_back({lo, end});
        lo = end + 1;
      }
    }
    if (!plain.empty()) alts.push_back({b.cp_class(plain)});
    if (alts.empty()) return {b.byte_class({})};
    if (alts.size() == 1) return alts[0];
    return {b.group(alts, "char")};
  }

  Seq any_char() { return emit_set({{0, '\n' - 1}, {'\n' + 1, kMaxCp}}); }

  Seq parse_class() {  // after '['
    const std::size_t at = i - 1;
    bool neg = false;
    if (!eof() && s[i] == '^') neg = true, ++i;
    std::vector<CpRange> set;
    bool first = true;
    while (true) {
      if (eof()) return fail("unterminated character class"), Seq{};
      if (s[i] == ']' && !first) {
        ++i;
        break;
      }
      first = false;
      std::uint32_t lo;
      if (s[i] == '\\') {
        ++i;
        std::vector<CpRange> sub;
        bool is_set = false;
        if (!escape(sub, lo, is_set)) return {};
        if (is_set) {
          set.insert(set.end(), sub.begin(), sub.end());
          continue;
        }
      } else {
        lo = next_cp();
      }
      std::uint32_t hi = lo;
      if (i + 1 < s.size() && s[i] == '-' && s[i + 1] != ']') {
        ++i;
        if (s[i] == '\\') {
          ++i;
          std::vector<CpRange> sub;
          bool is_set = false;
          if (!escape(sub, hi, is_set)) return {};
          if (is_set) return fail("a class escape cannot end a range"), Seq{};
        } else {
          hi = next_cp();
        }
        if (hi < lo) return fail("range out of order in character class"), Seq{};
      }
      set.push_back({lo, hi});
    }
    return emit_set(neg ? complement(set) : set, at);
  }

  bool parse_count(std::int64_t& v) {
    if (eof() || s[i] < '0' || s[i] > '9') return false;
    v = 0;
    while (!eof() && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + (s[i++] - '0');
      if (v > kMaxRepeat) return fail("repetition count over " + std::to_string(kMaxRepeat));
    }
    return true;
  }

  // Sequence: atoms with quantifiers, until '|' or ')' or end.
  Seq parse_seq() {
    Seq out;
    while (!eof() && s[i] != '|' && s[i] != ')' && !failed) {
      if (!b.check_budget()) return fail("constraint too large"), Seq{};
      Seq atom;
      const char c = s[i];
      if (c == '(') {
        ++i;
        if (!eof() && s[i] == '?') {
          if (i + 1 < s.size() && s[i + 1] == ':') {
            i += 2;
          } else if (i + 1 < s.size() && s[i + 1] == '<' && i + 2 < s.size() && s[i + 2] != '=' &&
                     s[i + 2] != '!') {
            auto close = s.find('>', i);
            if (close == std::string_view::npos) return fail("unterminated group name"), Seq{};
            i = close + 1;
          } else {
            return fail("lookaround and inline flags ((?=, (?!, (?<=, (?i) ...) are not supported"),
                   Seq{};
          }
        }
        atom = {parse_alternation()};
        if (failed) return {};
        if (eof() || s[i] != ')') return fail("missing ')'"), Seq{};
        ++i;
      } else if (c == '[') {
        ++i;
        atom = parse_class();
      } else if (c == '.') {
        ++i;
        atom = any_char();
      } else if (c == '\\') {
        ++i;
        std::vector<CpRange> set;
        std::uint32_t cp = 0;
        bool is_set = false;
        if (!escape(set, cp, is_set)) return {};
        atom = emit_set(is_set ? set : std::vector<CpRange>{{cp, cp}});
      } else if (c == '^' || c == '$') {
        return fail(std::string("'") + c + "' is supported only at the start / end of the pattern"),
               Seq{};
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return fail(std::string("nothing to repeat before '") + c + "'"), Seq{};
      } else {
        std::uint32_t cp = next_cp();
        atom = emit_set({{cp, cp}});
      }
      if (failed) return {};
      // Quantifier.
      if (!eof()) {
        std::int64_t lo = -1, hi = -1;
        const std::size_t at = i;
        if (s[i] == '*')
          lo = 0, hi = -1, ++i;
        else if (s[i] == '+')
          lo = 1, hi = -1, ++i;
        else if (s[i] == '?')
          lo = 0, hi = 1, ++i;
        else if (s[i] == '{') {
          ++i;
          if (!parse_count(lo)) {
            if (failed) return {};
            i = at;  // a literal '{' (as ECMAScript allows)
            lo = -1;
          } else if (!eof() && s[i] == '}') {
            hi = lo, ++i;
          } else if (!eof() && s[i] == ',') {
            ++i;
            if (!eof() && s[i] == '}') {
              hi = -1, ++i;
            } else if (parse_count(hi) && !eof() && s[i] == '}') {
              ++i;
              if (hi < lo) return fail("{n,m} with m < n"), Seq{};
            } else {
              return fail("malformed {n,m}"), Seq{};
            }
          } else {
            return fail("malformed {n,m}"), Seq{};
          }
        }
        if (i == at && lo == -1 && s[i] == '{') {
          // literal brace
          out.insert(out.end(), atom.begin(), atom.end());
          ++i;
          auto brace = emit_set({{'{', '{'}});
          out.insert(out.end(), brace.begin(), brace.end());
          continue;
        }
        if (lo >= 0) {
          if (!eof() && s[i] == '?') ++i;  // lazy: same language
          if (!eof() && s[i] == '+') return fail("possessive quantifiers are not supported"), Seq{};
          atom = {b.repeat(atom, lo, hi)};
        }
      }
      out.insert(out.end(), atom.begin(), atom.end());
    }
    return out;
  }

  Sym parse_alternation() {
    std::vector<Seq> alts;
    alts.push_back(parse_seq());
    while (!failed && !eof() && s[i] == '|') {
      ++i;
      alts.push_back(parse_seq());
    }
    return b.group(alts, "regex");
  }
};

}  // namespace

Result<std::uint32_t> compile_regex(GrammarBuilder& b, std::string_view re, bool json_string,
                                    bool anchored) {
  bool start = anchored, end = anchored;
  std::string_view body = re;
  if (!body.empty() && body.front() == '^') start = true, body.remove_prefix(1);
  if (!body.empty() && body.back() == '$' && (body.size() < 2 || body[body.size() - 2] != '\\'))
    end = true, body.remove_suffix(1);
  Parser p{b, body, json_string, static_cast<std::size_t>(body.data() - re.data())};
  Sym main = p.parse_alternation();
  if (!p.failed && !p.eof()) p.fail("unmatched ')'");
  if (p.failed) return p.err;
  Seq seq;
  if (!start) seq.push_back(b.star(p.any_char()));
  seq.push_back(main);
  if (!end) seq.push_back(b.star(p.any_char()));
  const std::uint32_t r = b.new_rule("regex_root");
  b.add_alt(r, seq);
  return r;
}

}  // namespace weir::inference::constraint
