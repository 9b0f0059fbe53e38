#include "constraint/grammar.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>

namespace weir::inference::constraint {

GrammarBuilder::GrammarBuilder(std::chrono::milliseconds time_limit)
    : deadline_(std::chrono::steady_clock::now() + time_limit), limit_(time_limit) {}

std::uint32_t GrammarBuilder::new_rule(std::string name, RuleOrigin origin) {
  rules_.emplace_back();
  g_.names.push_back(std::move(name));
  origins_.push_back(std::move(origin));
  return static_cast<std::uint32_t>(rules_.size() - 1);
}

Sym GrammarBuilder::never(std::string why) {
  const std::uint32_t r = new_rule("never");
  notes_.emplace_back(r, std::move(why));
  return {true, r};
}

void GrammarBuilder::prefix_notes(std::size_t mark, const std::string& prefix) {
  for (std::size_t i = mark; i < notes_.size(); ++i) notes_[i].second = prefix + notes_[i].second;
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
                   " rules (lower maxLength/maxItems bounds, or use fewer properties, enum "
                   "values or anyOf branches)"));
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
  // r ::= body r | ""   (right recursion: the matcher never loops; a body that can match the
  // empty string is made non-empty by finish())
  const std::uint32_t r = new_rule("star");
  Seq a = body;
  a.push_back({true, r});
  add_alt(r, a);
  add_alt(r, Seq{});
  stars_.emplace_back(r, body);
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

void GrammarBuilder::normalise_nullable_stars(std::vector<char>& nullable) {
  // Rules added below are not in `nullable` yet; each derives non-empty strings only.
  auto is_nullable = [&](const Sym& x) {
    return x.is_rule && x.value < nullable.size() && nullable[x.value];
  };
  std::unordered_map<std::uint32_t, std::uint32_t> non_empty;  // rule -> its non-empty forms
  // The non-empty forms of a sequence: for each symbol whose prefix can be empty, that
  // symbol's non-empty forms followed by the rest.
  std::function<std::vector<Seq>(const Seq&)> forms;
  std::function<std::uint32_t(std::uint32_t)> rule_forms = [&](std::uint32_t r) {
    if (auto it = non_empty.find(r); it != non_empty.end()) return it->second;
    const std::uint32_t nr = new_rule(g_.names[r] + "+");
    non_empty.emplace(r, nr);
    const std::vector<Seq> alts = rules_[r];  // a copy: new rules grow rules_
    for (const Seq& a : alts)
      for (const Seq& f : forms(a)) add_alt(nr, f);
    return nr;
  };
  forms = [&](const Seq& seq) {
    std::vector<Seq> out;
    for (std::size_t i = 0; i < seq.size(); ++i) {
      Seq f;
      f.push_back(seq[i].is_rule ? Sym{true, rule_forms(seq[i].value)} : seq[i]);
      f.insert(f.end(), seq.begin() + static_cast<std::ptrdiff_t>(i) + 1, seq.end());
      out.push_back(std::move(f));
      if (!is_nullable(seq[i])) break;
    }
    return out;
  };
  const auto stars = stars_;
  for (const auto& [r, body] : stars) {
    if (failed_ || !std::all_of(body.begin(), body.end(), is_nullable)) continue;
    const std::uint32_t nb = new_rule("star body");
    for (const Seq& f : forms(body)) add_alt(nb, f);
    rules_[r][0] = Seq{{true, nb}, {true, r}};
  }
  nullable.resize(rules_.size(), 0);  // every rule added derives non-empty strings only
}

Error GrammarBuilder::left_recursion_error(const std::vector<std::uint32_t>& cycle) const {
  for (std::uint32_t r : cycle) {
    const RuleOrigin& o = origins_[r];
    if (o.kind == RuleOrigin::gbnf_rule)
      return Error(Errc::invalid_argument,
                   "rule '" + o.name +
                       "' is left-recursive (it can start with itself); rewrite it with "
                       "repetition, e.g. x ::= y (\",\" y)*");
    if (o.kind == RuleOrigin::schema_ref)
      return Error(Errc::invalid_argument,
                   "JSON Schema '$ref' to '" + o.name +
                       "' is left-recursive: the schema can start with itself before any text "
                       "is written; put the reference inside an object or an array");
  }
  return Error(Errc::invalid_argument,
               "the constraint can start with itself before any text is written (a left "
               "recursion)");
}

Error GrammarBuilder::empty_language_error(std::uint32_t root,
                                           const std::vector<char>& productive) const {
  // What the user wrote that leaves no value, searched from the root through the rules that
  // have none: the notes of never(), else the first named rule that never ends.
  std::unordered_map<std::uint32_t, const std::string*> note_of;
  for (const auto& [r, why] : notes_) note_of.emplace(r, &why);
  std::vector<char> seen(rules_.size(), 0);
  std::vector<std::uint32_t> order = {root};
  seen[root] = 1;
  std::string notes;
  int n_notes = 0;
  std::optional<std::uint32_t> named;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::uint32_t r = order[k];
    if (auto it = note_of.find(r); it != note_of.end() && n_notes < 3)
      notes += (n_notes++ ? "; " : "") + *it->second;
    if (!named && origins_[r].kind != RuleOrigin::internal) named = r;
    for (const Seq& a : rules_[r])
      for (const Sym& x : a)
        if (x.is_rule && !productive[x.value] && !seen[x.value]) {
          seen[x.value] = 1;
          order.push_back(x.value);
        }
  }
  std::string why;
  if (!notes.empty()) {
    why = notes;
  } else if (named && origins_[*named].kind == RuleOrigin::gbnf_rule) {
    why = "rule '" + origins_[*named].name +
          "' never ends (each of its alternatives refers to a rule that never ends)";
  } else if (named) {
    why = "the '$ref' to '" + origins_[*named].name +
          "' never ends (every value it allows contains another one)";
  } else {
    why = "it allows nothing";
  }
  return Error(Errc::invalid_argument, "the constraint matches no finite output: " + why);
}

void GrammarBuilder::compute_rest_bytes() {
  constexpr std::uint64_t kCap = 1u << 30;
  const std::size_t n = g_.alts.size();
  std::vector<std::uint64_t> min_len(n, kCap);
  auto alt_len = [&](std::uint32_t at) {
    std::uint64_t len = 0;
    for (std::uint32_t e = at; g_.elems[e].kind != Element::end; ++e)
      len += g_.elems[e].kind == Element::bytes ? 1 : min_len[g_.elems[e].value];
    return std::min(len, kCap);
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r)
      for (std::uint32_t at : g_.alts[r])
        if (const std::uint64_t len = alt_len(at); len < min_len[r])
          min_len[r] = len, changed = true;
  }
  g_.rest_bytes.assign(g_.elems.size(), 0);
  for (std::size_t e = g_.elems.size(); e-- > 0;) {
    const Element x = g_.elems[e];
    if (x.kind == Element::end) continue;
    const std::uint64_t own = x.kind == Element::bytes ? 1 : min_len[x.value];
    g_.rest_bytes[e] = static_cast<std::uint32_t>(std::min(own + g_.rest_bytes[e + 1], kCap));
  }
}

Result<Grammar> GrammarBuilder::finish(std::uint32_t root) {
  if (failed_) return error_;
  if (!check_budget()) return error_;
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    for (const auto& a : rules_[r])
      for (const auto& s : a)
        if (s.is_rule && s.value >= rules_.size())
          return Error(Errc::invalid_argument, "bad rule reference");
  }
  // Nullable rules (fixpoint).
  std::vector<char> nullable(rules_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < rules_.size(); ++r) {
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
  normalise_nullable_stars(nullable);
  if (failed_ || !check_budget()) return error_;
  const std::size_t n = rules_.size();
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
          std::vector<std::uint32_t> cycle;
          auto at = std::find_if(st.begin(), st.end(), [&](const auto& f) { return f.first == c; });
          for (; at != st.end(); ++at) cycle.push_back(at->first);
          return left_recursion_error(cycle);
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
  if (!productive[root]) return empty_language_error(root, productive);
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
  compute_rest_bytes();
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
