// compile_constraint (with its cache), the vocabulary trie, and the matcher: parse stacks
// advanced byte by byte, and masks computed by walking the trie with them.
//
// How a mask is computed (Constraint::Impl::mask):
//  1. Cache: masks are kept by exact parse state (the normalised stacks), up to
//     kMaskCacheBytes; a repeated state costs a lookup and a copy.
//  2. Miss: a preorder walk of the vocabulary trie. Each trie depth holds the parse state
//     reached by the bytes above it; a subtree is skipped as soon as its first byte is refused.
//     Parse states are interned into a lazily built DFA (state x byte -> state) that outlives
//     the walk, and a transition computed for byte c is stored for every byte that no stack
//     top's class tells apart from c (advancing depends on the byte only through those
//     classes), so a UTF-8 lead or continuation byte costs one advance per class, not per byte.
//  3. Plain runs (what keeps a miss inside a JSON string cheap): kPlain is printable ASCII but
//     '"' and '\\'. For a DFA state, plain_run() counts how many plain bytes in a row it accepts
//     while advancing the same way on every plain byte (each stack top's class holds all of
//     kPlain or none of it); a string body is such a run (unbounded for a `*` string, up to
//     the remaining maxLength for a bounded one, where the nested optionals make every
//     position a distinct state). The trie marks each subtree made only of plain bytes with
//     its height. A walk takes such a subtree whole when the run covers its height, and, at
//     the top of a maximal plain subtree when the run ends in a state that refuses every plain
//     byte (a maxLength reached), takes the tokens no longer than the run from the subtree's
//     tokens sorted by length (VocabTrie::by_len). Otherwise it walks the subtree as in 2.
//     The largest plain subtrees keep their tokens as a mask, ORed in word by word.
//     In the spirit of XGrammar's split of tokens into those the current element decides
//     alone and those that need the whole stack, kept to the element that dominates JSON
//     masks: string characters. The trie's plain marks live in a byte Node had as padding;
//     by_len is one token id per token; the subtree masks, at most kRootMaskBytes per
//     vocabulary; per DFA state, 3 bytes (bounded by kMaxDfaStates).
// Every shortcut is exact: the mask is the set of tokens the matcher accepts, token by token
// (tests/inference/structured_test.cpp, MaskIsExactlyTheTokensTheMatcherAccepts).
#include "weir/inference/constraint.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "constraint/grammar.hpp"

namespace weir::inference {

using constraint::Element;
using constraint::Grammar;

namespace {

// Bounds on a parse state. Stacks deeper than kMaxDepth (recursive schemas nested that deep)
// and states with more than kMaxStacks stacks are cut: the matcher then allows less, never more.
constexpr std::size_t kMaxDepth = 256;
constexpr std::size_t kMaxStacks = 128;
constexpr int kExpandBudget = 20000;  // rule expansions per advance
constexpr std::size_t kMaskCacheBytes = 64u << 20;

// Printable ASCII but for '"' and '\\': the bytes that continue a JSON string (and most
// free-text rules) all the same way: "plain runs" at the top of this file.
const std::bitset<256> kPlain = [] {
  std::bitset<256> s;
  for (int c = 0x20; c < 0x7F; ++c) s.set(static_cast<std::size_t>(c));
  s.reset('"');
  s.reset('\\');
  return s;
}();
constexpr unsigned kMaxRun = 255;  // plain runs are counted up to this many bytes

// The vocabulary as a trie in preorder: node i's subtree is [i, end).
struct VocabTrie {
  static constexpr std::uint8_t kPlainHeight = 0x7F, kPlainRoot = 0x80;
  struct Node {
    std::uint32_t end;
    std::uint16_t depth;
    std::uint8_t byte;
    // & kPlainHeight: the height of this node's subtree (1 for a leaf) when every byte in it,
    // this node's included, is in kPlain and the height is at most 127; otherwise 0.
    // & kPlainRoot: such a subtree whose parent's is not (its tokens are sorted in by_len).
    std::uint8_t plain;
  };
  static_assert(sizeof(Node) == 8);
  std::vector<Node> nodes;               // [0] is the root
  std::vector<std::uint32_t> tok_begin;  // [nodes + 1] CSR into toks
  std::vector<std::int32_t> toks;        // token ids ending at each node
  // toks, but each kPlainRoot subtree's range sorted by token length (shortest first).
  std::vector<std::int32_t> by_len;
  // The tokens of the kPlainRoot subtrees holding at least kMaskedRoot of them, as masks
  // ([mask_words(n_vocab)], keyed by node): one OR of words instead of a bit per token. The
  // largest subtrees first, up to kRootMaskBytes in all (gpt-2: 21 masks, 130 KiB).
  static constexpr std::uint32_t kMaskedRoot = 512;
  static constexpr std::size_t kRootMaskBytes = 1u << 20;
  std::unordered_map<std::uint32_t, std::vector<std::uint64_t>> root_masks;
  std::vector<std::string> pieces;  // [n_vocab] bytes of each token ("" = never allowed)
  std::vector<std::int32_t> eog;    // end-of-generation ids
  std::int32_t n_vocab = 0;
  std::size_t max_depth = 0;
};

std::shared_ptr<const VocabTrie> build_trie(const Tokenizer& t) {
  auto v = std::make_shared<VocabTrie>();
  v->n_vocab = t.n_vocab();
  v->eog = t.eog_tokens();
  v->pieces.resize(static_cast<std::size_t>(v->n_vocab));
  std::vector<std::int32_t> ids;
  for (std::int32_t id = 0; id < v->n_vocab; ++id) {
    if (t.is_control(id) || t.is_eog(id)) continue;
    std::string p = t.token_to_piece(id);
    if (p.empty() || p.size() > 0xFFFF) continue;
    v->pieces[static_cast<std::size_t>(id)] = std::move(p);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](std::int32_t a, std::int32_t b) {
    return v->pieces[static_cast<std::size_t>(a)] < v->pieces[static_cast<std::size_t>(b)];
  });
  v->nodes.push_back({0, 0, 0, 0});
  std::vector<std::uint32_t> path = {0};                   // node index at each depth
  std::vector<std::pair<std::uint32_t, std::int32_t>> at;  // (node, token)
  std::string_view prev;
  for (std::int32_t id : ids) {
    std::string_view p = v->pieces[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    while (common < prev.size() && common < p.size() && prev[common] == p[common]) ++common;
    while (path.size() > common + 1) {
      v->nodes[path.back()].end = static_cast<std::uint32_t>(v->nodes.size());
      path.pop_back();
    }
    for (std::size_t k = common; k < p.size(); ++k) {
      path.push_back(static_cast<std::uint32_t>(v->nodes.size()));
      v->nodes.push_back(
          {0, static_cast<std::uint16_t>(k + 1), static_cast<std::uint8_t>(p[k]), 0});
    }
    v->max_depth = std::max(v->max_depth, p.size());
    at.emplace_back(path.back(), id);
    prev = p;
  }
  while (!path.empty()) {
    v->nodes[path.back()].end = static_cast<std::uint32_t>(v->nodes.size());
    path.pop_back();
  }
  // Plain heights, children before parents (reverse preorder).
  for (std::size_t i = v->nodes.size(); i-- > 1;) {
    auto& node = v->nodes[i];
    if (!kPlain.test(node.byte)) continue;
    unsigned h = 1;
    for (std::uint32_t c = static_cast<std::uint32_t>(i) + 1; c < node.end && h != 0;
         c = v->nodes[c].end) {
      const unsigned ch = v->nodes[c].plain;
      h = ch == 0 || ch + 1 > VocabTrie::kPlainHeight ? 0 : std::max(h, ch + 1);
    }
    node.plain = static_cast<std::uint8_t>(h);
  }
  v->tok_begin.assign(v->nodes.size() + 1, 0);
  for (auto [n, id] : at) ++v->tok_begin[n + 1];
  for (std::size_t i = 1; i < v->tok_begin.size(); ++i) v->tok_begin[i] += v->tok_begin[i - 1];
  v->toks.resize(at.size());
  std::vector<std::uint32_t> fill(v->tok_begin.begin(), v->tok_begin.end() - 1);
  for (auto [n, id] : at) v->toks[fill[n]++] = id;
  v->by_len = v->toks;
  std::vector<std::uint32_t> at_depth(v->max_depth + 1, 0);  // the last node seen per depth
  std::vector<std::pair<std::uint32_t, std::uint32_t>> big;  // (tokens, node) to mask
  for (std::uint32_t i = 1; i < v->nodes.size(); ++i) {
    auto& node = v->nodes[i];
    at_depth[node.depth] = i;
    if (node.plain == 0 || (node.depth > 1 && v->nodes[at_depth[node.depth - 1]].plain != 0))
      continue;
    node.plain |= VocabTrie::kPlainRoot;
    std::stable_sort(v->by_len.begin() + v->tok_begin[i],
                     v->by_len.begin() + v->tok_begin[node.end],
                     [&](std::int32_t a, std::int32_t b) {
                       return v->pieces[static_cast<std::size_t>(a)].size() <
                              v->pieces[static_cast<std::size_t>(b)].size();
                     });
    const std::uint32_t count = v->tok_begin[node.end] - v->tok_begin[i];
    if (count >= VocabTrie::kMaskedRoot) big.emplace_back(count, i);
  }
  std::sort(big.rbegin(), big.rend());
  const std::size_t words = mask_words(v->n_vocab);
  for (std::size_t k = 0; k < big.size() && (k + 1) * words * 8 <= VocabTrie::kRootMaskBytes; ++k) {
    const std::uint32_t i = big[k].second;
    auto& m = v->root_masks[i];
    m.assign(words, 0);
    for (std::uint32_t t = v->tok_begin[i]; t < v->tok_begin[v->nodes[i].end]; ++t) {
      const auto id = static_cast<std::uint32_t>(v->toks[t]);
      m[id >> 6] |= std::uint64_t{1} << (id & 63);
    }
  }
  return v;
}

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

  // Union of the byte classes at the tops: the bytes that can come next.
  void first_bytes(const std::uint32_t* in, std::size_t n, std::bitset<256>& out) const {
    out.reset();
    for (std::size_t i = 0; i < n; i += in[i] + 1)
      if (in[i]) out |= g.classes[g.elems[in[i + in[i]]].value];
  }
};

}  // namespace

struct Constraint::Impl {
  Grammar grammar;
  std::shared_ptr<const VocabTrie> vocab;
  std::vector<std::uint32_t> initial;
  mutable std::shared_mutex mu;
  mutable std::unordered_map<std::string, std::vector<std::uint64_t>> masks;  // GUARDED_BY(mu)
  mutable std::size_t mask_bytes = 0;                                         // GUARDED_BY(mu)
  mutable std::atomic<std::uint64_t> walks{0}, hits{0};

  // The trie walk: every token some stack of `state` accepts whole. Parse states met during
  // the walk are interned and their transitions memoised (a DFA built lazily for this walk):
  // inside a string, say, almost every byte leads back to the same state, so most trie nodes
  // cost one table lookup instead of advancing and expanding stacks. Plain subtrees are taken
  // or cut whole by the state's plain run (see the top of this file).
  void walk(const std::vector<std::uint32_t>& state, std::span<std::uint64_t> words) const {
    std::fill(words.begin(), words.end(), 0);
    const Stacks st{grammar};
    const VocabTrie& v = *vocab;
    std::unique_ptr<Dfa> dfa_owner = take_dfa();
    Dfa& dfa = *dfa_owner;
    thread_local std::vector<std::int32_t> levels;
    auto set_all = [&](const std::int32_t* first, const std::int32_t* last) {
      for (; first != last; ++first) {
        const auto id = static_cast<std::uint32_t>(*first);
        words[id >> 6] |= std::uint64_t{1} << (id & 63);
      }
    };
    if (levels.size() < v.max_depth + 1) levels.resize(v.max_depth + 1);
    levels[0] = dfa.intern(st, state);
    const auto n = static_cast<std::uint32_t>(v.nodes.size());
    for (std::uint32_t i = 1; i < n;) {
      const auto& node = v.nodes[i];
      const std::int32_t pid = levels[node.depth - 1];
      if (const unsigned height = node.plain & VocabTrie::kPlainHeight; height != 0) {
        const unsigned run = plain_run(dfa, pid);
        const std::uint32_t b = v.tok_begin[i], e = v.tok_begin[node.end];
        if (run >= height) {  // every token below is allowed
          const auto masked =
              e - b >= VocabTrie::kMaskedRoot ? v.root_masks.find(i) : v.root_masks.end();
          if (masked != v.root_masks.end()) {
            const auto& m = masked->second;
            for (std::size_t w = 0; w < m.size(); ++w) words[w] |= m[w];
          } else {
            set_all(v.toks.data() + b, v.toks.data() + e);
          }
          i = node.end;
          continue;
        }
        if ((node.plain & VocabTrie::kPlainRoot) &&
            dfa.run_then_reject[static_cast<std::size_t>(pid)]) {
          // The tokens below that end within the run are allowed, the longer ones are not.
          const std::size_t max_len = node.depth - 1u + run;
          const auto* last =
              std::partition_point(v.by_len.data() + b, v.by_len.data() + e, [&](std::int32_t id) {
                return v.pieces[static_cast<std::size_t>(id)].size() <= max_len;
              });
          set_all(v.by_len.data() + b, last);
          i = node.end;
          continue;
        }
      }
      if (!dfa.first[static_cast<std::size_t>(pid)].test(node.byte)) {
        i = node.end;
        continue;
      }
      std::int32_t nid = dfa.next[static_cast<std::size_t>(pid)][node.byte];
      if (nid == -2) nid = step(dfa, pid, node.byte);
      if (nid < 0) {
        i = node.end;
        continue;
      }
      levels[node.depth] = nid;
      set_all(v.toks.data() + v.tok_begin[i], v.toks.data() + v.tok_begin[i + 1]);
      ++i;
    }
    give_dfa(std::move(dfa_owner));
  }

  // The lazily built DFAs (parse state x byte -> parse state) outlive a walk, so later walks
  // (other states of the same schema, other requests) reuse the transitions already computed.
  // A walk takes one from the pool and gives it back: concurrent walks never share one.
  struct Dfa {
    std::vector<std::vector<std::uint32_t>> states;
    std::vector<std::bitset<256>> first;
    // A deque: growing it never copies the tables (nor faults in a doubled copy mid-walk).
    std::deque<std::array<std::int32_t, 256>> next;  // -2 unknown, -1 dead
    // Plain run: how many bytes of kPlain, any of them in any order, the state accepts
    // while advancing the same way on each (kMaxRun: unbounded); -1 unknown.
    std::vector<std::int16_t> run;
    // 1 when the state the run ends in rejects every plain byte (a maxLength reached), so
    // longer plain tokens are refused without walking them.
    std::vector<std::uint8_t> run_then_reject;
    std::unordered_map<std::string, std::int32_t> ids;
    std::vector<std::uint32_t> out, tmp;
    std::vector<std::int32_t> chain;

    std::int32_t intern(const Stacks& st, const std::vector<std::uint32_t>& s) {
      std::string key(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(std::uint32_t));
      auto [it, inserted] =
          ids.try_emplace(std::move(key), static_cast<std::int32_t>(states.size()));
      if (inserted) {
        states.push_back(s);
        first.emplace_back();
        st.first_bytes(s.data(), s.size(), first.back());
        next.emplace_back();
        next.back().fill(-2);
        run.push_back(-1);
        run_then_reject.push_back(0);
      }
      return it->second;
    }
  };

  // The state that every byte of kPlain leads to from `pid`; kNotUniform when they do not all
  // advance the same way, kRejectsPlain when none of them is accepted. Advancing by byte c
  // depends on c only through which stack tops' classes hold it, so when every top's class
  // holds all of kPlain or none of it, one advance stands for all of them.
  static constexpr std::int32_t kNotUniform = -1, kRejectsPlain = -2;
  std::int32_t plain_step(Dfa& dfa, std::int32_t pid) const {
    const auto& ps = dfa.states[static_cast<std::size_t>(pid)];
    bool any = false;
    for (std::size_t i = 0; i < ps.size(); i += ps[i] + 1) {
      if (ps[i] == 0) continue;
      const std::bitset<256> in = grammar.classes[grammar.elems[ps[i + ps[i]]].value] & kPlain;
      if (in.none()) continue;
      if (in != kPlain) return kNotUniform;
      any = true;
    }
    if (!any) return kRejectsPlain;
    std::int32_t nid = dfa.next[static_cast<std::size_t>(pid)][' '];
    if (nid == -2) nid = step(dfa, pid, ' ');
    return nid < 0 ? kRejectsPlain : nid;
  }

  // The transition of `pid` on byte c, computed (and memoised in dfa.next) for c and every
  // byte that no stack top's class tells apart from it: those advance the same way.
  std::int32_t step(Dfa& dfa, std::int32_t pid, unsigned char c) const {
    const Stacks st{grammar};
    std::bitset<256> same;
    same.set();
    {
      const auto& ps = dfa.states[static_cast<std::size_t>(pid)];
      for (std::size_t i = 0; i < ps.size(); i += ps[i] + 1) {
        if (ps[i] == 0) continue;
        const auto& cls = grammar.classes[grammar.elems[ps[i + ps[i]]].value];
        same &= cls.test(c) ? cls : ~cls;
      }
      st.advance(ps.data(), ps.size(), c, dfa.out, dfa.tmp);
    }
    const std::int32_t nid = dfa.out.empty() ? -1 : dfa.intern(st, dfa.out);
    auto& next = dfa.next[static_cast<std::size_t>(pid)];  // after intern: it may reallocate
    for (std::size_t b = 0; b < 256; ++b)
      if (same.test(b)) next[b] = nid;
    return nid;
  }

  // The plain run of `pid` (Dfa::run), computed along the chain of plain steps and memoised.
  unsigned plain_run(Dfa& dfa, std::int32_t pid) const {
    constexpr std::int16_t kOnChain = -3;
    if (dfa.run[static_cast<std::size_t>(pid)] >= 0)
      return static_cast<unsigned>(dfa.run[static_cast<std::size_t>(pid)]);
    // chain[k + 1] is the plain step of chain[k]; `after` is the run of the last one's step,
    // or -1 when that step fails (the last one's run is then 0); every state of the chain ends
    // its run in the same state, which rejects every plain byte or not (`reject`).
    dfa.chain.clear();
    int after = -1;
    bool reject = false;
    for (std::int32_t s = pid;;) {
      dfa.run[static_cast<std::size_t>(s)] = kOnChain;
      dfa.chain.push_back(s);
      s = plain_step(dfa, s);
      if (s < 0) {
        reject = s == kRejectsPlain;
        break;
      }
      const std::int16_t r = dfa.run[static_cast<std::size_t>(s)];
      if (r >= 0) {
        after = r;
        reject = dfa.run_then_reject[static_cast<std::size_t>(s)] != 0;
        break;
      }
      if (r == kOnChain) {  // a cycle of plain steps: unbounded
        after = static_cast<int>(kMaxRun);
        break;
      }
      if (dfa.chain.size() == kMaxRun) {  // counted no further: understated, never overstated
        after = 0;
        break;
      }
    }
    for (std::size_t k = dfa.chain.size(); k-- > 0;) {
      after = after < 0 ? 0 : std::min(after + 1, static_cast<int>(kMaxRun));
      dfa.run[static_cast<std::size_t>(dfa.chain[k])] = static_cast<std::int16_t>(after);
      dfa.run_then_reject[static_cast<std::size_t>(dfa.chain[k])] =
          reject && after < static_cast<int>(kMaxRun);
    }
    return static_cast<unsigned>(dfa.run[static_cast<std::size_t>(pid)]);
  }
  static constexpr std::size_t kMaxDfaStates = 16384;  // ~4 KiB each; then start afresh
  mutable std::mutex dfa_mu;
  mutable std::vector<std::unique_ptr<Dfa>> dfas;  // GUARDED_BY(dfa_mu)
  std::unique_ptr<Dfa> take_dfa() const {
    std::lock_guard lock(dfa_mu);
    if (dfas.empty()) return std::make_unique<Dfa>();
    auto d = std::move(dfas.back());
    dfas.pop_back();
    return d;
  }
  void give_dfa(std::unique_ptr<Dfa> d) const {
    if (d->states.size() > kMaxDfaStates) d = std::make_unique<Dfa>();
    std::lock_guard lock(dfa_mu);
    dfas.push_back(std::move(d));
  }

  void mask(const std::vector<std::uint32_t>& state, std::span<std::uint64_t> words) const {
    const std::string key(reinterpret_cast<const char*>(state.data()),
                          state.size() * sizeof(std::uint32_t));
    {
      std::shared_lock lock(mu);
      auto it = masks.find(key);
      if (it != masks.end()) {
        std::copy(it->second.begin(), it->second.end(), words.begin());
        hits.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    walk(state, words);
    walks.fetch_add(1, std::memory_order_relaxed);
    const std::size_t bytes = words.size() * 8 + key.size();
    std::unique_lock lock(mu);
    if (mask_bytes + bytes <= kMaskCacheBytes && !masks.count(key)) {
      masks.emplace(key, std::vector<std::uint64_t>(words.begin(), words.end()));
      mask_bytes += bytes;
    }
  }
};

std::int32_t Constraint::n_vocab() const {
  return impl_->vocab->n_vocab;
}
std::size_t Constraint::grammar_size() const {
  return impl_->grammar.elems.size();
}
std::uint64_t Constraint::mask_walks() const {
  return impl_->walks.load();
}
std::uint64_t Constraint::mask_cache_hits() const {
  return impl_->hits.load();
}

// --- compile + caches -----------------------------------------------------------------------

namespace {

std::string vocab_key(const Tokenizer& t) {
  // The tokenizer's address, size and a sample of its tokens: a freed tokenizer whose address
  // is reused by another vocabulary differs in the sample.
  std::string k =
      std::to_string(reinterpret_cast<std::uintptr_t>(&t)) + ":" + std::to_string(t.n_vocab());
  const std::int32_t n = t.n_vocab();
  for (std::int32_t i = 0; i < 64 && n > 0; ++i) {
    const std::int32_t id = static_cast<std::int32_t>((static_cast<std::int64_t>(i) * 7919) % n);
    k += '\x1f';
    k += t.token_text(id);
  }
  return k;
}

struct Caches {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<const VocabTrie>> tries;
  // LRU of compiled constraints.
  std::list<std::pair<std::string, std::shared_ptr<const Constraint>>> lru;
  std::unordered_map<std::string, decltype(lru)::iterator> index;
  static constexpr std::size_t kMax = 256;
};
Caches& caches() {
  static Caches c;
  return c;
}

}  // namespace

Result<std::shared_ptr<const Constraint>> compile_constraint(const ConstraintSpec& spec,
                                                             const Tokenizer& tokenizer) {
  const std::string vk = vocab_key(tokenizer);
  std::string key = std::to_string(static_cast<int>(spec.kind)) + '\x1e' + spec.text;
  for (const auto& c : spec.choices) key += '\x1e' + std::to_string(c.size()) + ':' + c;
  key += '\x1d' + vk;
  auto& cache = caches();
  std::shared_ptr<const VocabTrie> trie;
  {
    std::lock_guard lock(cache.mu);
    if (auto it = cache.index.find(key); it != cache.index.end()) {
      cache.lru.splice(cache.lru.begin(), cache.lru, it->second);
      return it->second->second;
    }
    if (auto it = cache.tries.find(vk); it != cache.tries.end()) trie = it->second.lock();
  }
  constraint::GrammarBuilder b;
  Result<std::uint32_t> root = std::uint32_t{0};
  switch (spec.kind) {
    case ConstraintSpec::Kind::json_schema:
      root = constraint::compile_json_schema(b, spec.text);
      break;
    case ConstraintSpec::Kind::json_object:
      root = constraint::json_any_object(b);
      break;
    case ConstraintSpec::Kind::regex:
      root = constraint::compile_regex(b, spec.text, false, true);
      break;
    case ConstraintSpec::Kind::gbnf:
      root = constraint::compile_gbnf(b, spec.text);
      break;
    case ConstraintSpec::Kind::choice: {
      if (spec.choices.empty()) return Error(Errc::invalid_argument, "choice: no choices given");
      const std::uint32_t r = b.new_rule("root");
      for (const auto& c : spec.choices) {
        if (c.empty())
          return Error(Errc::invalid_argument, "choice: an empty string is not a valid choice");
        b.add_alt(r, b.literal(c));
      }
      root = r;
      break;
    }
  }
  if (!root) return std::move(root).error();
  auto g = b.finish(*root);
  if (!g) return std::move(g).error();
  if (!trie) trie = build_trie(tokenizer);
  auto impl = std::make_shared<Constraint::Impl>();
  impl->grammar = std::move(*g);
  impl->vocab = trie;
  Stacks{impl->grammar}.initial(impl->initial);
  auto c = std::make_shared<const Constraint>(std::move(impl));
  std::lock_guard lock(cache.mu);
  cache.tries[vk] = trie;
  if (auto it = cache.index.find(key); it != cache.index.end()) return it->second->second;
  cache.lru.emplace_front(key, c);
  cache.index[key] = cache.lru.begin();
  if (cache.lru.size() > Caches::kMax) {
    cache.index.erase(cache.lru.back().first);
    cache.lru.pop_back();
  }
  return std::shared_ptr<const Constraint>(c);
}

// --- matcher -------------------------------------------------------------------------------

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const Constraint> constraint)
    : c_(std::move(constraint)), state_(c_->impl().initial) {}

bool ConstraintMatcher::complete() const {
  for (std::size_t i = 0; i < state_.size(); i += state_[i] + 1)
    if (state_[i] == 0) return true;
  return false;
}

bool ConstraintMatcher::finished() const {
  if (state_.empty()) return false;
  for (std::size_t i = 0; i < state_.size(); i += state_[i] + 1)
    if (state_[i] != 0) return false;
  return true;
}

bool ConstraintMatcher::dead() const {
  return state_.empty();
}

void ConstraintMatcher::fill_mask(std::span<std::uint64_t> words) const {
  const auto& impl = c_->impl();
  assert(words.size() >= mask_words(impl.vocab->n_vocab));
  words = words.first(mask_words(impl.vocab->n_vocab));
  if (finished() || dead()) {
    std::fill(words.begin(), words.end(), 0);
  } else {
    impl.mask(state_, words);
  }
  if (complete()) {
    for (std::int32_t id : impl.vocab->eog)
      if (id >= 0 && id < impl.vocab->n_vocab)
        words[static_cast<std::size_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
  }
}

bool ConstraintMatcher::accept_bytes(std::string_view bytes) {
  const Stacks st{c_->impl().grammar};
  std::vector<std::uint32_t> cur = state_, next, tmp;
  for (char ch : bytes) {
    st.advance(cur.data(), cur.size(), static_cast<unsigned char>(ch), next, tmp);
    if (next.empty()) return false;
    cur.swap(next);
  }
  state_.swap(cur);
  return true;
}

bool ConstraintMatcher::accept(std::int32_t token) {
  const auto& v = *c_->impl().vocab;
  if (token < 0 || token >= v.n_vocab) return false;
  if (std::find(v.eog.begin(), v.eog.end(), token) != v.eog.end()) return complete();
  const std::string& p = v.pieces[static_cast<std::size_t>(token)];
  if (p.empty()) return false;
  return accept_bytes(p);
}

}  // namespace weir::inference
