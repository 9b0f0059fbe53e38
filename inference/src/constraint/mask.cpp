// Masks: which tokens may come next in a parse state, by walking the vocabulary trie with the
// parse stacks (Constraint::Impl, constraint_impl.hpp).
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
//     while advancing the same way on each accepted plain byte and refusing every other one
//     (every stack top's class holds the same plain bytes A or none of them); a string body is
//     such a run over all of kPlain (unbounded for a `*` string, up to the remaining maxLength
//     for a bounded one, where the nested optionals make every position a distinct state), a
//     pattern or format string one over its class (`[a-z0-9_/.-]{1,40}`: up to 40 bytes of
//     those). A run's bytes are kept as categories (lowercase, uppercase, digits, space, each
//     punctuation mark: VocabTrie's plain_category), and the trie marks each subtree made
//     only of plain bytes with its height and the categories in it. A walk takes such a
//     subtree whole when the run covers its height and holds its categories, and, at the top
//     of a maximal plain subtree when the run ends in a state that refuses every plain byte
//     (a maxLength reached), takes the tokens no longer than the run from the subtree's tokens
//     sorted by length (VocabTrie::by_len). Otherwise it walks the subtree as in 2 (a mixed
//     subtree's children are tried whole in turn). The largest plain subtrees keep their
//     tokens as a mask, ORed in word by word.
//     In the spirit of XGrammar's split of tokens into those the current element decides
//     alone and those that need the whole stack, kept to the element that dominates JSON
//     masks: string characters. The trie's plain marks live in a byte Node had as padding, its
//     categories in 8 bytes a node; by_len is one token id per token; the subtree masks, at
//     most kRootMaskBytes per vocabulary; per DFA state, 19 bytes (bounded by kMaxDfaStates).
//  4. Budgets (budget.cpp): a plain mask is cached with the most a completion needs after any
//     token it allows (bytes where every byte is a token, else tokens). A budget above that
//     never binds and gets the plain mask; a smaller one gets a walk that keeps only the
//     tokens after which a completion fits (a subtree is taken whole when every state of its
//     plain run fits), cached by state and budget.
// Every shortcut is exact: the mask is the set of tokens the matcher accepts, token by token
// (tests/inference/structured_test.cpp, MaskIsExactlyTheTokensTheMatcherAccepts), and under a
// budget the set of those after which a completion still fits
// (structured_budget_test.cpp, BudgetMaskIsExactlyTheTokensThatStillFit).
#include <algorithm>
#include <optional>

#include "constraint/constraint_impl.hpp"

namespace weir::inference {

std::uint32_t Constraint::Impl::walk(const std::vector<std::uint32_t>& state,
                                     std::span<std::uint64_t> words, std::int32_t limit) const {
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
  // What a completion needs after the allowed tokens (bytes where every byte is a token,
  // else tokens): with a limit, whether a state's tokens fit it; without, the most of it.
  std::uint32_t need = 0;
  const bool by_bytes = v.every_byte_a_token;
  auto allowed = [&](std::int32_t sid) {
    if (limit >= 0) return fits(dfa, sid, limit);
    need = std::max(need, by_bytes ? dfa.min_bytes[static_cast<std::size_t>(sid)]
                                   : static_cast<std::uint32_t>(min_tokens(dfa, sid)));
    return true;
  };
  // The same for every state a plain run from `pid` passes (a subtree taken whole).
  auto run_allowed = [&](std::int32_t pid) {
    const auto pi = static_cast<std::size_t>(pid);
    if (limit >= 0)
      return (by_bytes && dfa.run_max_bytes[pi] <= static_cast<std::uint32_t>(limit)) ||
             run_max_tokens(dfa, pid) <= limit;
    need = std::max(need, by_bytes ? dfa.run_max_bytes[pi]
                                   : static_cast<std::uint32_t>(run_max_tokens(dfa, pid)));
    return true;
  };
  if (levels.size() < v.max_depth + 1) levels.resize(v.max_depth + 1);
  levels[0] = dfa.intern(st, state);
  // Preorder over ranges of sibling subtrees ([next, end)): the whole trie, and below a node
  // with many children of which the state takes few, just those children's subtrees.
  thread_local std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
  ranges.assign(1, {1u, static_cast<std::uint32_t>(v.nodes.size())});
  while (!ranges.empty()) {
    auto& [i, stop] = ranges.back();
    if (i >= stop) {
      ranges.pop_back();
      continue;
    }
    const auto& node = v.nodes[i];
    const std::int32_t pid = levels[node.depth - 1];
    if (const unsigned height = node.plain & VocabTrie::kPlainHeight; height != 0) {
      const unsigned run = plain_run(dfa, pid);
      const std::uint32_t b = v.tok_begin[i], e = v.tok_begin[node.end];
      const bool ends_in_run =
          run >= height || ((node.plain & VocabTrie::kPlainRoot) &&
                            dfa.run_then_reject[static_cast<std::size_t>(pid)]);
      if (limit >= 0 && ends_in_run && run_min_tokens(dfa, pid) > limit) {
        i = node.end;  // no token below leaves a completion that fits
        continue;
      }
      // Whether the run accepts every byte of the subtree (the run refuses the plain bytes
      // outside its categories).
      const bool held = (v.cats[i] & ~dfa.run_cats[static_cast<std::size_t>(pid)]) == 0;
      if (run >= height && held && run_allowed(pid)) {  // every token below is allowed
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
      if (run < height && held && (node.plain & VocabTrie::kPlainRoot) &&
          dfa.run_then_reject[static_cast<std::size_t>(pid)] && run_allowed(pid)) {
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
    if (v.tok_begin[i] < v.tok_begin[i + 1] && allowed(nid))
      set_all(v.toks.data() + v.tok_begin[i], v.toks.data() + v.tok_begin[i + 1]);
    if (v.is_wide[i]) {
      if (const auto& next = dfa.first[static_cast<std::size_t>(nid)]; next.count() <= 64) {
        const auto& table = v.wide.find(i)->second;
        i = node.end;  // (`i` is not used after the pushes below)
        for (unsigned c = 256; c-- > 0;)
          if (const std::uint32_t child = table[c]; child != 0 && next.test(c))
            ranges.emplace_back(child, v.nodes[child].end);
        continue;
      }
    }
    ++i;
  }
  give_dfa(std::move(dfa_owner));
  return need;
}

std::int32_t Constraint::Impl::plain_step(Dfa& dfa, std::int32_t pid) const {
  const auto& ps = dfa.states[static_cast<std::size_t>(pid)];
  std::bitset<256> accepted;
  bool any = false;
  for (std::size_t i = 0; i < ps.size(); i += ps[i] + 1) {
    if (ps[i] == 0) continue;
    const std::bitset<256> in = grammar.classes[grammar.elems[ps[i + ps[i]]].value] & kPlain;
    if (in.none()) continue;
    if (any && in != accepted) return kNotUniform;
    accepted = in;
    any = true;
  }
  if (!any) return kRejectsPlain;
  const auto held = constraint::categories_held(accepted);
  dfa.step_cats[static_cast<std::size_t>(pid)] = held;
  std::size_t c = 0;
  while (!accepted.test(c)) ++c;
  std::int32_t nid = dfa.next[static_cast<std::size_t>(pid)][c];
  if (nid == -2) nid = step(dfa, pid, static_cast<unsigned char>(c));
  return nid < 0 ? kRejectsPlain : nid;
}

std::int32_t Constraint::Impl::step(Dfa& dfa, std::int32_t pid, unsigned char c) const {
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

unsigned Constraint::Impl::plain_run(Dfa& dfa, std::int32_t pid) const {
  constexpr std::int16_t kOnChain = -3;
  if (dfa.run[static_cast<std::size_t>(pid)] >= 0)
    return static_cast<unsigned>(dfa.run[static_cast<std::size_t>(pid)]);
  // chain[k + 1] is the plain step of chain[k]; `after` is the run of the last one's step,
  // or -1 when that step fails (the last one's run is then 0); every state of the chain ends
  // its run in the same state, which rejects every plain byte or not (`reject`). `tail`: the
  // most bytes a completion needs from a state the last one's run passes; `cats`: the
  // categories every position of the run after the last one's step accepts.
  dfa.chain.clear();
  int after = -1;
  bool reject = false;
  std::uint32_t tail = 0;
  std::uint64_t cats = ~std::uint64_t{0};
  for (std::int32_t s = pid;;) {
    dfa.run[static_cast<std::size_t>(s)] = kOnChain;
    dfa.chain.push_back(s);
    s = plain_step(dfa, s);
    if (s < 0) {
      reject = s == kRejectsPlain;
      break;
    }
    const auto si = static_cast<std::size_t>(s);
    const std::int16_t r = dfa.run[si];
    if (r >= 0) {
      after = r;
      reject = dfa.run_then_reject[si] != 0;
      tail = std::max(dfa.min_bytes[si], dfa.run_max_bytes[si]);
      if (r > 0) cats = dfa.run_cats[si];
      break;
    }
    if (r == kOnChain) {  // a cycle of plain steps: unbounded
      after = static_cast<int>(kMaxRun);
      for (auto k = std::find(dfa.chain.begin(), dfa.chain.end(), s); k != dfa.chain.end(); ++k) {
        tail = std::max(tail, dfa.min_bytes[static_cast<std::size_t>(*k)]);
        cats &= dfa.step_cats[static_cast<std::size_t>(*k)];
      }
      break;
    }
    if (dfa.chain.size() == kMaxRun) {  // counted no further: understated, never overstated
      after = 0;
      tail = dfa.min_bytes[si];
      break;
    }
  }
  for (std::size_t k = dfa.chain.size(); k-- > 0;) {
    const auto ck = static_cast<std::size_t>(dfa.chain[k]);
    after = after < 0 ? 0 : std::min(after + 1, static_cast<int>(kMaxRun));
    dfa.run[ck] = static_cast<std::int16_t>(after);
    dfa.run_then_reject[ck] = reject && after < static_cast<int>(kMaxRun);
    dfa.run_max_bytes[ck] = tail;
    tail = std::max(tail, dfa.min_bytes[ck]);
    if (after > 0) cats &= dfa.step_cats[ck];
    dfa.run_cats[ck] = cats;
  }
  return static_cast<unsigned>(dfa.run[static_cast<std::size_t>(pid)]);
}

std::unique_ptr<Constraint::Impl::Dfa> Constraint::Impl::take_dfa() const {
  std::lock_guard lock(dfa_mu);
  if (dfas.empty()) return std::make_unique<Dfa>();
  auto d = std::move(dfas.back());
  dfas.pop_back();
  return d;
}

void Constraint::Impl::give_dfa(std::unique_ptr<Dfa> d) const {
  if (d->states.size() > kMaxDfaStates) d = std::make_unique<Dfa>();
  std::lock_guard lock(dfa_mu);
  dfas.push_back(std::move(d));
}

void Constraint::Impl::mask(const std::vector<std::uint32_t>& state, std::span<std::uint64_t> words,
                            std::int32_t budget) const {
  const std::string key(reinterpret_cast<const char*>(state.data()),
                        state.size() * sizeof(std::uint32_t));
  // A budget binds when a token may leave more to write than it allows (limit: the tokens
  // after this one); then the mask is the budget's own, cached by state and limit.
  const std::int32_t limit = budget == kNoBudget ? -1 : budget - 1;
  std::string budget_key = key;  // (only budget_masks holds keys of this length for a state)
  budget_key.append(reinterpret_cast<const char*>(&limit), sizeof limit);
  auto binds = [&](std::uint32_t need) {
    return limit >= 0 && static_cast<std::uint32_t>(limit) < need;
  };
  auto copy_out = [&](const std::vector<std::uint64_t>& m) {
    std::copy(m.begin(), m.end(), words.begin());
    hits.fetch_add(1, std::memory_order_relaxed);
  };
  bool have_plain = false;
  {
    std::shared_lock lock(mu);
    if (auto it = masks.find(key); it != masks.end()) {
      if (!binds(it->second.need)) return copy_out(it->second.words);
      if (auto jt = budget_masks.find(budget_key); jt != budget_masks.end())
        return copy_out(jt->second);
      have_plain = true;
    }
  }
  auto store = [&](auto& map, const std::string& k, auto value) {
    const std::size_t bytes = words.size() * 8 + k.size() + 16;
    std::unique_lock lock(mu);
    if (mask_bytes + bytes <= kMaskCacheBytes && !map.count(k)) {
      map.emplace(k, std::move(value));
      mask_bytes += bytes;
    }
  };
  if (!have_plain) {
    const std::uint32_t need = walk(state, words);
    walks.fetch_add(1, std::memory_order_relaxed);
    store(masks, key, PlainMask{std::vector<std::uint64_t>(words.begin(), words.end()), need});
    if (!binds(need)) return;
  }
  walk(state, words, limit);
  walks.fetch_add(1, std::memory_order_relaxed);
  store(budget_masks, budget_key, std::vector<std::uint64_t>(words.begin(), words.end()));
}

}  // namespace weir::inference
