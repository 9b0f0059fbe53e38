// Parse stacks: a set of positions in a constraint's grammar (a pushdown automaton's state, as
// llama.cpp's grammar sampler keeps it), expanded, advanced byte by byte and normalised.
#pragma once

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <vector>

#include "constraint/grammar.hpp"

namespace weir::inference::constraint {

// Bounds on a parse state. Stacks deeper than kMaxDepth (recursive schemas nested that deep)
// and states with more than kMaxStacks stacks are cut: the matcher then allows less, never more.
constexpr std::size_t kMaxDepth = 256;
constexpr std::size_t kMaxStacks = 128;
constexpr int kExpandBudget = 20000;  // rule expansions per advance

// Parse stacks, flattened: [len, e_1 .. e_len] repeated; the top of a stack is its last element.
// A stack of length 0 means the whole output is complete.
struct Stacks {
  const Grammar& g;

  void expand(std::vector<std::uint32_t>& st, std::vector<std::uint32_t>& out, int& budget) const {
    if (st.empty()) {
      out.push_back(0);
      return;
    }
    const std::uint32_t top = st.back();
    const Element e = g.elems[top];
    if (e.kind == Element::bytes) {
      out.push_back(static_cast<std::uint32_t>(st.size()));
      out.insert(out.end(), st.begin(), st.end());
      return;
    }
    if (st.size() > kMaxDepth || --budget < 0) return;  // cut: allows less, never more
    st.pop_back();
    const bool cont = g.elems[top + 1].kind != Element::end;
    if (cont) st.push_back(top + 1);
    for (std::uint32_t alt : g.alts[e.value]) {
      if (g.elems[alt].kind != Element::end) {
        st.push_back(alt);
        expand(st, out, budget);
        st.pop_back();
      } else {
        expand(st, out, budget);
      }
    }
    if (cont) st.pop_back();
    st.push_back(top);
  }

  // Sorts and deduplicates the stacks of `s` (and caps their number).
  static void normalise(std::vector<std::uint32_t>& s) {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> spans;  // offset, len
    for (std::size_t i = 0; i < s.size(); i += s[i] + 1)
      spans.emplace_back(static_cast<std::uint32_t>(i), s[i]);
    if (spans.size() <= 1) return;
    auto less = [&](auto a, auto b) {
      return std::lexicographical_compare(s.begin() + a.first, s.begin() + a.first + a.second + 1,
                                          s.begin() + b.first, s.begin() + b.first + b.second + 1);
    };
    auto eq = [&](auto a, auto b) {
      return a.second == b.second &&
             std::equal(s.begin() + a.first, s.begin() + a.first + a.second + 1,
                        s.begin() + b.first);
    };
    std::sort(spans.begin(), spans.end(), less);
    spans.erase(std::unique(spans.begin(), spans.end(), eq), spans.end());
    if (spans.size() > kMaxStacks) spans.resize(kMaxStacks);
    std::vector<std::uint32_t> out;
    out.reserve(s.size());
    for (auto [o, n] : spans) out.insert(out.end(), s.begin() + o, s.begin() + o + n + 1);
    s.swap(out);
  }

  void initial(std::vector<std::uint32_t>& out) const {
    out.clear();
    std::vector<std::uint32_t> st;
    int budget = kExpandBudget;
    for (std::uint32_t alt : g.alts[g.root]) {
      st.clear();
      if (g.elems[alt].kind != Element::end) st.push_back(alt);
      expand(st, out, budget);
    }
    normalise(out);
  }

  // out = the stacks of `in` after byte c. tmp: scratch.
  void advance(const std::uint32_t* in, std::size_t n, unsigned char c,
               std::vector<std::uint32_t>& out, std::vector<std::uint32_t>& tmp) const {
    out.clear();
    int budget = kExpandBudget;
    std::size_t count = 0;
    for (std::size_t i = 0; i < n; i += in[i] + 1) {
      const std::uint32_t len = in[i];
      if (len == 0) continue;
      const std::uint32_t top = in[i + len];
      if (!g.classes[g.elems[top].value].test(c)) continue;
      tmp.assign(in + i + 1, in + i + len);  // without the top
      if (g.elems[top + 1].kind != Element::end) tmp.push_back(top + 1);
      expand(tmp, out, budget);
      ++count;
    }
    if (count > 1 || out.size() != (out.empty() ? 0 : out[0] + 1)) normalise(out);
  }

  // The fewest bytes that complete the output from the stacks of `in` (0 when one is empty:
  // complete), and in `tight` the bytes that start such a shortest completion (the tops of
  // the stacks that need that many). A stack's completion is the rest of the alternative at
  // each of its positions (Grammar::rest_bytes).
  std::uint32_t min_bytes(const std::uint32_t* in, std::size_t n, std::bitset<256>& tight) const {
    std::uint64_t best = ~std::uint64_t{0};
    tight.reset();
    for (std::size_t i = 0; i < n; i += in[i] + 1) {
      std::uint64_t cost = 0;
      for (std::uint32_t k = 1; k <= in[i]; ++k) cost += g.rest_bytes[in[i + k]];
      if (cost > best) continue;
      if (cost < best) best = cost, tight.reset();
      if (in[i]) tight |= g.classes[g.elems[in[i + in[i]]].value];
    }
    return best == ~std::uint64_t{0}
               ? 0
               : static_cast<std::uint32_t>(std::min<std::uint64_t>(best, 1u << 30));
  }

  // Union of the byte classes at the tops: the bytes that can come next.
  void first_bytes(const std::uint32_t* in, std::size_t n, std::bitset<256>& out) const {
    out.reset();
    for (std::size_t i = 0; i < n; i += in[i] + 1)
      if (in[i]) out |= g.classes[g.elems[in[i + in[i]]].value];
  }
};

}  // namespace weir::inference::constraint
