// GBNF, llama.cpp's grammar format: `name ::= alternatives`, string literals with escapes,
// character classes [...] (negation, ranges), '.', rule references, groups, and the
// quantifiers * + ? {m} {m,} {m,n}; '#' comments. The start rule is `root`. A rule may span
// lines: it ends where the next `name ::=` begins.
#include <algorithm>
#include <unordered_map>

#include "constraint/grammar.hpp"

namespace weir::inference::constraint {

namespace {

constexpr std::int64_t kMaxRepeat = 10000;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

struct GbnfParser {
  GrammarBuilder& b;
  std::string_view s;
  std::size_t i = 0;
  bool failed = false;
  Error err;
  std::vector<std::pair<std::uint32_t, std::size_t>> refs;  // rule, offset of first use
  // The user's rules by name (weir's own helper rules have names too: never looked up).
  std::unordered_map<std::string, std::uint32_t> rules;

  std::uint32_t rule(const std::string& n) {
    auto [it, inserted] = rules.try_emplace(n, 0);
    if (inserted) it->second = b.new_rule(n, {RuleOrigin::gbnf_rule, n});
    return it->second;
  }

  std::string where(std::size_t at) const {
    int line = 1, col = 1;
    for (std::size_t k = 0; k < at && k < s.size(); ++k) {
      if (s[k] == '\n')
        ++line, col = 1;
      else if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80)
        ++col;
    }
    return "gbnf line " + std::to_string(line) + " column " + std::to_string(col);
  }

  bool fail(const std::string& what, std::size_t at) {
    if (failed) return false;
    failed = true;
    err = Error(Errc::invalid_argument, where(at) + ": " + what);
    return false;
  }
  bool fail(const std::string& what) { return fail(what, i); }
  bool eof() const { return i >= s.size(); }

  // Skips blanks and comments; newlines too when `newlines`.
  void space(bool newlines) {
    while (!eof()) {
      char c = s[i];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i;
      } else if (c == '#') {
        while (!eof() && s[i] != '\n') ++i;
      } else {
        break;
      }
    }
  }

  // At a line break outside parentheses: does the rule continue on the next line?
  bool continues() {
    std::size_t save = i;
    space(true);
    if (eof()) return false;
    std::size_t k = i;
    while (k < s.size() && is_name_char(s[k])) ++k;
    bool new_rule = false;
    if (k > i) {
      std::size_t m = k;
      while (m < s.size() && (s[m] == ' ' || s[m] == '\t')) ++m;
      new_rule = s.substr(m, 3) == "::=";
    }
    if (new_rule) {
      i = save;
      return false;
    }
    return true;
  }

  std::string name() {
    std::size_t st = i;
    while (!eof() && is_name_char(s[i])) ++i;
    return std::string(s.substr(st, i - st));
  }

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

  bool hex(std::size_t n, std::uint32_t& v) {
    v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      if (eof()) return fail("expected " + std::to_string(n) + " hex digits");
      char c = s[i];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return fail("expected a hex digit");
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++i;
    }
    if (v > 0x10FFFF) return fail("code point out of range");
    return true;
  }

  // One character of a literal or class (escapes decoded).
  bool chr(std::uint32_t& cp) {
    if (eof()) return fail("unexpected end of grammar");
    if (s[i] != '\\') {
      cp = next_cp();
      return true;
    }
    ++i;
    if (eof()) return fail("unexpected end after '\\'");
    char c = s[i++];
    switch (c) {
      case 'n':
        cp = '\n';
        return true;
      case 'r':
        cp = '\r';
        return true;
      case 't':
        cp = '\t';
        return true;
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '\'':
        cp = static_cast<unsigned char>(c);
        return true;
      case 'x':
        return hex(2, cp);
      case 'u':
        return hex(4, cp);
      case 'U':
        return hex(8, cp);
      default:
        --i;
        return fail(std::string("unknown escape '\\") + c + "'");
    }
  }

  bool count(std::int64_t& v) {
    if (eof() || s[i] < '0' || s[i] > '9') return fail("expected a number");
    v = 0;
    while (!eof() && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + (s[i++] - '0');
      if (v > kMaxRepeat) return fail("repetition count over " + std::to_string(kMaxRepeat));
    }
    return true;
  }

  Seq sequence(bool nested) {
    Seq out;
    while (!failed) {
      space(nested);
      if (!nested && !eof() && s[i] == '\n') {
        if (!continues()) break;
        continue;
      }
      if (eof() || s[i] == '|' || s[i] == ')') break;
      if (!b.check_budget()) return fail("grammar too large"), Seq{};
      Seq atom;
      const std::size_t at = i;
      const char c = s[i];
      if (c == '"') {
        ++i;
        std::string lit;
        while (true) {
          if (eof() || s[i] == '\n') return fail("unterminated string literal", at), Seq{};
          if (s[i] == '"') {
            ++i;
            break;
          }
          std::uint32_t cp;
          if (!chr(cp)) return {};
          append_utf8(lit, cp);
        }
        atom = b.literal(lit);
        if (atom.empty()) atom = {b.empty()};
      } else if (c == '[') {
        ++i;
        bool neg = false;
        if (!eof() && s[i] == '^') neg = true, ++i;
        std::vector<CpRange> set;
        while (true) {
          if (eof() || s[i] == '\n') return fail("unterminated character class", at), Seq{};
          if (s[i] == ']') {
            ++i;
            break;
          }
          std::uint32_t lo, hi;
          if (!chr(lo)) return {};
          hi = lo;
          if (i + 1 < s.size() && s[i] == '-' && s[i + 1] != ']') {
            ++i;
            if (s[i] == '\n') return fail("unterminated character class", at), Seq{};
            if (!chr(hi)) return {};
            if (hi < lo) return fail("range out of order in character class"), Seq{};
          }
          set.push_back({lo, hi});
        }
        if (neg) {
          std::sort(set.begin(), set.end(), [](auto x, auto y) { return x.lo < y.lo; });
          std::vector<CpRange> comp;
          std::uint32_t next = 0;
          for (auto r : set) {
            if (r.lo > next) comp.push_back({next, r.lo - 1});
            next = std::max(next, r.hi + 1);
          }
          if (next <= 0x10FFFF) comp.push_back({next, 0x10FFFF});
          set = comp;
        }
        if (std::none_of(set.begin(), set.end(), [](CpRange r) { return r.lo <= r.hi; }))
          atom = {b.never(where(at) + ": the character class matches no character")};
        else
          atom = {b.cp_class(set)};
      } else if (c == '.') {
        ++i;
        atom = {b.cp_class({{0, 0x10FFFF}})};
      } else if (c == '(') {
        ++i;
        atom = {alternation(true)};
        if (failed) return {};
        space(true);
        if (eof() || s[i] != ')') return fail("missing ')'", at), Seq{};
        ++i;
      } else if (is_name_char(c)) {
        std::string n = name();
        std::uint32_t r = rule(n);
        refs.emplace_back(r, at);
        atom = {Sym{true, r}};
      } else {
        return fail(std::string("unexpected '") + c + "'"), Seq{};
      }
      // Quantifier (directly after the atom).
      if (!eof()) {
        const char q = s[i];
        if (q == '*' || q == '+' || q == '?') {
          ++i;
          atom = {q == '*' ? b.star(atom) : q == '+' ? b.plus(atom) : b.optional(atom)};
        } else if (q == '{') {
          ++i;
          std::int64_t lo = 0, hi = 0;
          space(true);
          if (!count(lo)) return {};
          space(true);
          if (!eof() && s[i] == '}') {
            hi = lo;
          } else if (!eof() && s[i] == ',') {
            ++i;
            space(true);
            if (!eof() && s[i] == '}')
              hi = -1;
            else if (!count(hi))
              return {};
            space(true);
            if (hi >= 0 && hi < lo) return fail("{m,n} with n < m"), Seq{};
          }
          if (eof() || s[i] != '}') return fail("expected '}'"), Seq{};
          ++i;
          atom = {b.repeat(atom, lo, hi)};
        }
      }
      out.insert(out.end(), atom.begin(), atom.end());
    }
    return out;
  }

  Sym alternation(bool nested) {
    std::vector<Seq> alts;
    alts.push_back(sequence(nested));
    while (!failed && !eof() && s[i] == '|') {
      ++i;
      space(true);
      alts.push_back(sequence(nested));
    }
    return b.group(alts, "alt");
  }
};

}  // namespace

Result<std::uint32_t> compile_gbnf(GrammarBuilder& b, std::string_view text) {
  GbnfParser p{b, text};
  std::vector<char> defined;
  while (!p.failed) {
    p.space(true);
    if (p.eof()) break;
    const std::size_t at = p.i;
    std::string n = p.name();
    if (n.empty()) {
      p.fail("expected a rule name");
      break;
    }
    p.space(false);
    if (text.substr(p.i, 3) != "::=") {
      p.fail("expected '::=' after rule name '" + n + "'");
      break;
    }
    p.i += 3;
    p.space(true);
    const std::uint32_t r = p.rule(n);
    if (defined.size() <= r) defined.resize(r + 1, 0);
    if (defined[r]) {
      p.fail("rule '" + n + "' is defined twice", at);
      break;
    }
    defined[r] = 1;
    Sym body = p.alternation(false);
    if (p.failed) break;
    if (!p.eof() && p.s[p.i] == ')') {
      p.fail("unmatched ')'");
      break;
    }
    b.add_alt(r, {body});
  }
  if (p.failed) return p.err;
  for (auto [r, at] : p.refs) {
    if (r >= defined.size() || !defined[r]) {
      std::size_t k = at;
      while (k < text.size() && is_name_char(text[k])) ++k;
      p.fail("undefined rule '" + std::string(text.substr(at, k - at)) + "'", at);
      return p.err;
    }
  }
  const auto root_it = p.rules.find("root");
  const std::uint32_t root = root_it == p.rules.end() ? 0 : root_it->second;
  if (root_it == p.rules.end() || root >= defined.size() || !defined[root])
    return Error(Errc::invalid_argument,
                 "gbnf: no 'root' rule (the start rule must be named root)");
  return root;
}

}  // namespace weir::inference::constraint
