#include "constraint/grammar.hpp"

#include <algorithm>

namespace weir::inference::constraint {

GrammarBuilder::GrammarBuilder(std::chrono::milliseconds time_limit)
    : deadline_(std::chrono::steady_clock::now() + time_limit), limit_(time_limit) {}

std::uint32_t GrammarBuilder::new_rule(std::string name) {
  rules_.emplace_back();
  g_.names.push_back(std::move(name));
  return static_cast<std::uint32_t>(rules_.size() - 1);
}

std::uint32_t GrammarBuilder::find_or_new_rule(const std::string& name) {
  for (std::size_t i = 0; i < g_.names.size(); ++i)
    if (g_.names[i] == name) return static_cast<std::uint32_t>(i);
  return new_rule(name);
}

bool GrammarBuilder::has_alts(std::uint32_t rule) const {
  return !rules_[rule].empty();
}

bool GrammarBuilder::check_budget() {
  if (failed_) return false;
  if (n_elems_ > kMaxGrammarElements || rules_.size() > kMaxRules) {
    fail(Error(Errc::invalid_argument,
               "constraint too large: it compiles to more than " +
                   std::to_string(kMaxGrammarElements) + " grammar elements or " +
                   std::to_string(kMaxRules) +
                   " rules (lower maxLength/maxItems bounds or simplify the schema)"));
    return false;
  }
  if (std::chrono::steady_clock::now() > deadline_) {
    fail(Error(Errc::invalid_argument, "constraint compilation took longer than " +
                                           std::to_string(limit_.count()) +
                                           " ms; simplify the schema or grammar"));
    return false;
  }
  return true;
}

void GrammarBuilder::add_alt(std::uint32_t rule, const Seq& seq) {
  if (failed_) return;
  n_elems_ += seq.size() + 1;
  if ((++n_alts_ & 255) == 0 || n_elems_ > kMaxGrammarElements) {
    if (!check_budget()) return;
  }
  rules_[rule].push_back(seq);
}

void GrammarBuilder::fail(Error e) {
  if (failed_) return;
  failed_ = true;
  error_ = std::move(e);
}

Sym GrammarBuilder::byte_class(const std::bitset<256>& set) {
  // Classes repeat a lot (digits, string characters): share them.
  for (std::size_t i = g_.classes.size(); i-- > 0 && g_.classes.size() - i <= 64;) {
    if (g_.classes[i] == set) return {false, static_cast<std::uint32_t>(i)};
  }
  g_.classes.push_back(set);
  return {false, static_cast<std::uint32_t>(g_.classes.size() - 1)};
}

Sym GrammarBuilder::byte(unsigned char c) {
  std::bitset<256> s;
  s.set(c);
  return byte_class(s);
}

void GrammarBuilder::append_literal(Seq& seq, std::string_view s) {
  for (char c : s) seq.push_back(byte(static_cast<unsigned char>(c)));
}

Sym GrammarBuilder::cp_class(std::vector<CpRange> ranges) {
  std::bitset<256> ascii;
  std::vector<Seq> alts;
  for (const auto& r : ranges) {
    if (r.lo > r.hi) continue;
    for (auto& seq : utf8_sequences(r.lo, std::min<std::uint32_t>(r.hi, 0x10FFFF))) {
      if (seq.size() == 1) {
        for (unsigned c = seq[0].first; c <= seq[0].second; ++c) ascii.set(c);
        continue;
      }
      Seq q;
      for (auto [a, z] : seq) {
        std::bitset<256> s;
        for (unsigned c = a; c <= z; ++c) s.set(c);
        q.push_back(byte_class(s));
      }
      alts.push_back(std::move(q));
    }
  }
  if (alts.empty()) return byte_class(ascii);  // possibly empty: matches nothing
  if (ascii.any()) alts.insert(alts.begin(), Seq{byte_class(ascii)});
  return group(alts, "char");
}

Sym GrammarBuilder::group(const std::vector<Seq>& alternatives, std::string name) {
  const std::uint32_t r = new_rule(std::move(name));
  for (const auto& a : alternatives) add_alt(r, a);
  return {true, r};
}

Sym GrammarBuilder::empty() {
  return group({Seq{}}, "empty");
}

Sym GrammarBuilder::optional(const Seq& body) {
  return group({body, Seq{}}, "opt");
}

Sym GrammarBuilder::star(const Seq& body) {
  // r ::= body r | ""   (right recursion: the matcher never loops)
  const std::uint32_t r = new_rule("star");
  Seq a = body;
  a.push_back({true, r});
  add_alt(r, a);
  add_alt(r, Seq{});
  return {true, r};
}

Sym GrammarBuilder::plus(const Seq& body) {
  Seq a = body;
  a.push_back(star(body));
  return group({a}, "plus");
}

Sym GrammarBuilder::repeat(const Seq& body, std::int64_t min, std::int64_t max) {
  if (max >= 0 && max < min) return group({}, "never");  // no alternative: matches nothing
  if ((max >= 0 && max - min > static_cast<std::int64_t>(kMaxGrammarElements)) ||
      min > static_cast<std::int64_t>(kMaxGrammarElements)) {
    fail(Error(Errc::invalid_argument, "constraint too large: a repetition bound of " +
                                           std::to_string(std::max(min, max)) +
                                           " is over the limit"));
    return empty();
  }
  Seq out;
  for (std::int64_t i = 0; i < min && !failed_; ++i)
    out.insert(out.end(), body.begin(), body.end());
  if (max < 0) {
    out.push_back(star(body));
  } else if (max > min) {
    // body (body (body)?)? ... nested optionals, innermost first.
    Sym tail = optional(body);
    for (std::int64_t i = min + 1; i < max && !failed_; ++i) {
      Seq b = body;
      b.push_back(tail);
      tail = optional(b);
    }
    out.push_back(tail);
  }
  if (out.size() == 1 && out[0].is_rule) return out[0];
  return group({out}, "repeat");
}

Result<Grammar> GrammarBuilder::finish(std::uint32_t root) {
  if (failed_) return error_;
  if (!check_budget()) return error_;
  const std::size_t n = rules_.size();
  for (std::size_t r = 0; r < n; ++r) {
    for (const auto& a : rules_[r])
      for (const auto& s : a)
        if (s.is_rule && s.value >= n) return Error(Errc::invalid_argument, "bad rule reference");
  }
  // Nullable rules (fixpoint).
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& a : rules_[r]) {
        bool all = std::all_of(a.begin(), a.end(),
                               [&](const Sym& s) { return s.is_rule && nullable[s.value]; });
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a rule reachable from itself through leftmost (nullable-prefix) symbols.
  std::vector<std::vector<std::uint32_t>> left(n);
  for (std::size_t r = 0; r < n; ++r) {
    for (const auto& a : rules_[r]) {
      for (const auto& s : a) {
        if (!s.is_rule) break;
        left[r].push_back(s.value);
        if (!nullable[s.value]) break;
      }
    }
  }
  std::vector<char> color(n, 0);  // 0 new, 1 on stack, 2 done
  for (std::size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<std::uint32_t, std::size_t>> st{{static_cast<std::uint32_t>(start), 0}};
    color[start] = 1;
    while (!st.empty()) {
      auto& [r, i] = st.back();
      if (i < left[r].size()) {
        std::uint32_t c = left[r][i++];
        if (color[c] == 1) {
          return Error(Errc::invalid_argument,
                       "rule '" + g_.names[c] +
                           "' is left-recursive (it can start with itself); rewrite it with "
                           "repetition, e.g. x ::= y (\",\" y)*");
        }
        if (color[c] == 0) {
          color[c] = 1;
          st.emplace_back(c, 0);
        }
      } else {
        color[r] = 2;
        st.pop_back();
      }
    }
  }
  // Productive rules: derive at least one finite string.
  std::vector<char> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (const auto& a : rules_[r]) {
        bool all = std::all_of(a.begin(), a.end(), [&](const Sym& s) {
          return s.is_rule ? productive[s.value] != 0 : g_.classes[s.value].any();
        });
        if (all) {
          productive[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  if (!productive[root]) {
    return Error(Errc::invalid_argument,
                 "the constraint matches no finite output (an empty enum, contradictory "
                 "bounds, or a recursion that never ends)");
  }
  // Lay out: unproductive alternatives are dropped (they could only lead to dead ends).
  g_.alts.assign(n, {});
  for (std::size_t r = 0; r < n; ++r) {
    for (const auto& a : rules_[r]) {
      bool ok = std::all_of(a.begin(), a.end(), [&](const Sym& s) {
        return s.is_rule ? productive[s.value] != 0 : g_.classes[s.value].any();
      });
      if (!ok) continue;
      g_.alts[r].push_back(static_cast<std::uint32_t>(g_.elems.size()));
      for (const auto& s : a)
        g_.elems.push_back({s.is_rule ? Element::rule : Element::bytes, s.value});
      g_.elems.push_back({Element::end, 0});
    }
  }
  g_.root = root;
  rules_.clear();
  return std::move(g_);
}

// --- UTF-8 -------------------------------------------------------------------------------

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

using ByteSeq = std::vector<std::pair<unsigned char, unsigned char>>;

// The utf8-ranges algorithm (as in RE2 and Rust's regex-syntax): split [lo, hi] until both
// ends have the same length and every byte position is a plain range.
void split_utf8(std::uint32_t lo, std::uint32_t hi, std::vector<ByteSeq>& out) {
  if (lo > hi) return;
  for (std::uint32_t b : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= b && b < hi) {
      split_utf8(lo, b, out);
      split_utf8(b + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<unsigned char>(lo), static_cast<unsigned char>(hi)}});
    return;
  }
  const int n = lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const std::uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, z;
  append_utf8(a, lo);
  append_utf8(z, hi);
  ByteSeq seq;
  for (std::size_t i = 0; i < a.size(); ++i)
    seq.emplace_back(static_cast<unsigned char>(a[i]), static_cast<unsigned char>(z[i]));
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<ByteSeq> utf8_sequences(std::uint32_t lo, std::uint32_t hi) {
  std::vector<ByteSeq> out;
  if (lo <= 0xD7FF) split_utf8(lo, std::min<std::uint32_t>(hi, 0xD7FF), out);
  if (hi >= 0xE000) split_utf8(std::max<std::uint32_t>(lo, 0xE000), hi, out);
  return out;
}

}  // namespace weir::inference::constraint
