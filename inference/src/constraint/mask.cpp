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
//  3b. Text runs and text masks (what keeps a miss cheap when a string holds any character,
//     where every byte value is a token): text is kPlain and well-formed UTF-8 multi-byte
//     characters; lead bytes fall in 8 groups by the shape of character they start (C2-DF,
//     E0, E1-EC, ED, EE-EF, F0, F1-F3, F4). text_ok() checks, once per DFA state and group,
//     that every character of the group takes the state where its plain step goes (stepping
//     its bytes by classes: a few states per group), so along the plain run each character
//     counts as one position, as a plain byte does; text_run_covers() asks that of the run's
//     first n states. The trie marks (VocabTrie::text) each subtree that spells text read from
//     a character boundary with the most characters a path in it starts and the bytes a token
//     below may leave its last character short (cut tokens such as a lone lead byte), and its
//     categories gain the lead groups. Two shortcuts:
//     - at the start of a walk, text_mask() ORs in the largest precomputed mask of "every
//       token that spells text of at most n characters" (VocabTrie::text_masks: n = 1..16,
//       then 20 to 63) that the state's text run covers, and the walk skips every subtree
//       whose tokens all lie in it (VocabTrie::text_total, and for the root's and wide
//       nodes' children a table of them, so that skipped children are not even read). Under
//       a budget that a cut token may not fit, the mask is taken without the cut tokens
//       (VocabTrie::text_cut) and subtrees holding one are walked;
//     - below that, a text subtree (of kTextNodes nodes or more) whose characters the run
//       covers has its node's own tokens checked as any node's and every token under it
//       taken at once (or none, when none can fit the budget).
//     A bounded string's every position gets the mask of its room (or of a little less); the
//     plain subtrees taller than the room are cut by length as in 3, from the room on.
//     Memory: text masks, 23 masks of mask_words(n_vocab) words (gpt-2 141 KiB, 151936 tokens
//     427 KiB); 2 bytes a node; one id per cut token; 256 bytes per wide node; per DFA state,
//     6 bytes. The first walk inside a fresh string checks the characters of up to 63
//     positions ahead (~1,700 steps, 2-3 ms once per string and DFA).
//  4. Budgets (budget.cpp): a plain mask is cached with the most a completion needs after any
//     token it allows (bytes where every byte is a token, else tokens). A budget above that
//     never binds and gets the plain mask; a smaller one gets a walk that keeps only the
//     tokens after which a completion fits (a subtree is taken whole when every state of its
//     plain run fits), cached by state and budget. A state met first under a budget gets that
//     walk only, which is its plain mask too when the budget refused no token (Impl::mask).
// Every shortcut is exact: the mask is the set of tokens the matcher accepts, token by token
// (tests/inference/structured_test.cpp, MaskIsExactlyTheTokensTheMatcherAccepts), and under a
// budget the set of those after which a completion still fits
// (structured_budget_test.cpp, BudgetMaskIsExactlyTheTokensThatStillFit; for text runs on a
// vocabulary of every character shape, structured_text_test.cpp).
#include <algorithm>
#include <optional>

#include "constraint/constraint_impl.hpp"

namespace weir::inference {

// One loop that applies the shortcuts of the notes above in their order (~150 lines: they
// share the loop's state, the levels and the ranges); their checks live in plain_run(),
// text_below() and text_mask().
Constraint::Impl::Walked Constraint::Impl::walk(const std::vector<std::uint32_t>& state,
                                                std::span<std::uint64_t> words,
                                                std::int32_t limit) const {
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
  // else tokens): with a limit, whether a state's tokens fit it (`cut` when not), and the
  // most of it over those allowed.
  Walked out;
  std::uint32_t& need = out.need;
  const bool by_bytes = v.every_byte_a_token;
  auto allowed = [&](std::int32_t sid) {
    if (limit >= 0 && !fits(dfa, sid, limit)) return !(out.cut = true);
    need = std::max(need, by_bytes ? dfa.min_bytes[static_cast<std::size_t>(sid)]
                                   : static_cast<std::uint32_t>(min_tokens(dfa, sid)));
    return true;
  };
  // The same for every state a plain run from `pid` passes (a subtree taken whole).
  auto run_allowed = [&](std::int32_t pid) {
    const auto pi = static_cast<std::size_t>(pid);
    if (limit >= 0 && !(by_bytes && dfa.run_max_bytes[pi] <= static_cast<std::uint32_t>(limit)) &&
        run_max_tokens(dfa, pid) > limit)
      return !(out.cut = true);
    need = std::max(need, by_bytes ? dfa.run_max_bytes[pi]
                                   : static_cast<std::uint32_t>(run_max_tokens(dfa, pid)));
    return true;
  };
  if (levels.size() < v.max_depth + 1) levels.resize(v.max_depth + 1);
  levels[0] = dfa.intern(st, state);
  // Text masks: when the state's text run takes every token of a bucket (inside a string),
  // they are allowed at once, and the walk skips the subtrees the bucket holds.
  // (Under a budget the mask may hold only the tokens that end at a character's end: then
  // subtrees with tokens cut inside one are walked.)
  bool text_whole_only = false;
  const unsigned text_chars =
      by_bytes ? text_mask(dfa, levels[0], words, limit, need, text_whole_only) : 0;
  const std::uint8_t skip_cut = text_whole_only ? VocabTrie::kHasCut : 0;
  // Whether a subtree (its text_total) is in the text mask.
  auto in_text_mask = [&](std::uint8_t total) {
    return total != 0 && (total & ~VocabTrie::kHasCut) <= text_chars && (total & skip_cut) == 0;
  };
  // Preorder over ranges of sibling subtrees ([next, end)): the whole trie, and below a node
  // with many children of which the state takes few, just those children's subtrees.
  thread_local std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
  // Children of the root or of a wide node (`table`, with their text_total in `totals`): those
  // the state `first` takes and no text mask holds, as ranges (reading no node of the others).
  auto push_children = [&](const std::array<std::uint32_t, 256>& table,
                           const std::array<std::uint8_t, 256>& totals,
                           const std::bitset<256>& first) {
    for (unsigned c = 256; c-- > 0;)
      if (const std::uint32_t child = table[c];
          child != 0 && first.test(c) && !in_text_mask(totals[c]))
        ranges.emplace_back(child, v.nodes[child].end);
  };
  ranges.clear();
  if (text_chars != 0)
    push_children(v.root_child, v.root_total, dfa.first[static_cast<std::size_t>(levels[0])]);
  else
    ranges.emplace_back(1u, static_cast<std::uint32_t>(v.nodes.size()));
  while (!ranges.empty()) {
    auto& [i, stop] = ranges.back();
    if (i >= stop) {
      ranges.pop_back();
      continue;
    }
    const auto& node = v.nodes[i];
    if (text_chars != 0 && in_text_mask(v.text_total[i])) {
      i = node.end;  // in the text mask already
      continue;
    }
    const std::int32_t pid = levels[node.depth - 1];
    if (const unsigned height = node.plain & VocabTrie::kPlainHeight; height != 0) {
      const unsigned run = plain_run(dfa, pid);
      const std::uint32_t b = v.tok_begin[i], e = v.tok_begin[node.end];
      const bool ends_in_run =
          run >= height || ((node.plain & VocabTrie::kPlainRoot) &&
                            dfa.run_then_reject[static_cast<std::size_t>(pid)]);
      if (limit >= 0 && ends_in_run && run_min_tokens(dfa, pid) > limit) {
        out.cut = true;
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
        // (Those of at most text_chars bytes are in the text mask already when the path to
        // the node spells text.)
        const std::size_t max_len = node.depth - 1u + run;
        auto up_to = [&](std::size_t len) {
          const auto* bytes = v.by_len_bytes.data();
          return v.by_len.data() + (std::upper_bound(bytes + b, bytes + e, len) - bytes);
        };
        set_all(v.text_total[i] != 0 ? up_to(text_chars) : v.by_len.data() + b, up_to(max_len));
        i = node.end;
        continue;
      }
    }
    // A text subtree (no plain one) whose characters the text run takes: the node's own
    // tokens as any node's (below), and every token under it at once (or none).
    const Below below = by_bytes && (v.text[i] & VocabTrie::kTextHeight) != 0
                            ? text_below(dfa, pid, i, limit, need)
                            : Below::walk;
    if (below == Below::none) out.cut = true;
    if (below == Below::none && v.tok_begin[i] == v.tok_begin[i + 1]) {  // nor a token of its own
      i = node.end;
      continue;
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
    if (below != Below::walk) {
      if (below == Below::take)
        set_all(v.toks.data() + v.tok_begin[i + 1], v.toks.data() + v.tok_begin[node.end]);
      i = node.end;
      continue;
    }
    if (v.is_wide[i]) {
      if (const auto& next = dfa.first[static_cast<std::size_t>(nid)];
          text_chars != 0 || next.count() <= 64) {
        const auto& [table, totals] = v.wide.find(i)->second;
        i = node.end;  // (`i` is not used after the pushes below)
        push_children(table, totals, next);
        continue;
      }
    }
    ++i;
  }
  give_dfa(std::move(dfa_owner));
  return out;
}

std::int32_t Constraint::Impl::plain_step(Dfa& dfa, std::int32_t pid) const {
  if (const std::int32_t known = dfa.plain_next[static_cast<std::size_t>(pid)];
      known != kUnknownStep)
    return known;
  const std::int32_t nid = plain_step_of(dfa, pid);
  dfa.plain_next[static_cast<std::size_t>(pid)] = nid;
  return nid;
}

std::int32_t Constraint::Impl::plain_step_of(Dfa& dfa, std::int32_t pid) const {
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

bool Constraint::Impl::text_ok(Dfa& dfa, std::int32_t pid, unsigned groups) const {
  using constraint::kAtBoundary;
  const auto pi = static_cast<std::size_t>(pid);
  if (groups & dfa.text_bad[pi]) return false;
  groups &= ~static_cast<unsigned>(dfa.text_ok[pi]);
  if (groups == 0) return true;
  // Each character of the groups, byte by byte (a decoder's place and the state reached: a
  // few pairs, as a character's bytes advance alike by classes), must end where the plain
  // step goes, and no byte of one may be refused.
  const std::int32_t target = plain_step(dfa, pid);
  thread_local std::vector<std::pair<std::uint8_t, std::int32_t>> todo, seen;
  for (unsigned g = 0; g < constraint::kLeadGroups; ++g) {
    if (!(groups >> g & 1)) continue;
    bool ok = target >= 0;
    todo.clear();
    seen.clear();
    for (unsigned c = 0xC2; c <= 0xF4 && ok; ++c) {
      if (constraint::utf8_lead_group(static_cast<unsigned char>(c)) != static_cast<int>(g))
        continue;
      std::int32_t n = dfa.next[pi][c];
      if (n == -2) n = step(dfa, pid, static_cast<unsigned char>(c));
      const std::pair<std::uint8_t, std::int32_t> at{
          constraint::utf8_next(kAtBoundary, static_cast<unsigned char>(c)), n};
      if (n < 0) {
        ok = false;
      } else if (std::find(seen.begin(), seen.end(), at) == seen.end()) {
        seen.push_back(at);
        todo.push_back(at);
      }
    }
    while (ok && !todo.empty()) {
      const auto [at, s] = todo.back();
      todo.pop_back();
      for (unsigned c = 0x80; c < 0xC0 && ok; ++c) {
        const std::uint8_t after = constraint::utf8_next(at, static_cast<unsigned char>(c));
        if (after == constraint::kUtf8Invalid) continue;
        std::int32_t n = dfa.next[static_cast<std::size_t>(s)][c];
        if (n == -2) n = step(dfa, s, static_cast<unsigned char>(c));
        if (n < 0 || (after == kAtBoundary && n != target)) {
          ok = false;
        } else if (after != kAtBoundary &&
                   std::find(seen.begin(), seen.end(), std::pair{after, n}) == seen.end()) {
          seen.emplace_back(after, n);
          todo.emplace_back(after, n);
        }
      }
    }
    (ok ? dfa.text_ok : dfa.text_bad)[pi] |= static_cast<std::uint8_t>(1u << g);
    if (!ok) return false;
  }
  return true;
}

Constraint::Impl::Below Constraint::Impl::text_below(Dfa& dfa, std::int32_t pid, std::uint32_t i,
                                                     std::int32_t limit,
                                                     std::uint32_t& need) const {
  // (Not worth it below kTextNodes nodes: a check may step through every character shape.)
  constexpr std::uint32_t kTextNodes = 16;
  const VocabTrie& v = *vocab;
  const auto pi = static_cast<std::size_t>(pid);
  const unsigned height = v.text[i] & VocabTrie::kTextHeight;
  constexpr std::uint64_t kPlainCats = (std::uint64_t{1} << constraint::kLeadCategory) - 1;
  const auto groups = static_cast<unsigned>(v.cats[i] >> constraint::kLeadCategory) & 0xFFu;
  if (v.nodes[i].end - i < kTextNodes || plain_run(dfa, pid) == 0 ||
      (v.cats[i] & kPlainCats & ~dfa.run_cats[pi]) != 0 ||
      !text_run_covers(dfa, pid, height, groups))
    return Below::walk;
  // A token below leaves a state of the run, or one inside a character (at most `tail` bytes
  // short of the next state of the run; at least one token more).
  const std::uint32_t tail = v.text[i] >> VocabTrie::kTextTailShift;
  const std::uint32_t most = dfa.run_max_bytes[pi] + tail;
  if (limit < 0 || most <= static_cast<std::uint32_t>(limit) ||
      (tail == 0 && run_max_tokens(dfa, pid) <= limit)) {
    need = std::max(need, most);
    return Below::take;
  }
  if (run_min_tokens(dfa, pid) > limit && (tail == 0 || limit < 1)) return Below::none;
  return Below::walk;
}

unsigned Constraint::Impl::text_mask(Dfa& dfa, std::int32_t pid, std::span<std::uint64_t> words,
                                     std::int32_t limit, std::uint32_t& need,
                                     bool& whole_only) const {
  const VocabTrie& v = *vocab;
  const auto pi = static_cast<std::size_t>(pid);
  if (plain_run(dfa, pid) == 0) return 0;
  constexpr std::uint64_t kPlainCats = (std::uint64_t{1} << constraint::kLeadCategory) - 1;
  for (std::size_t b = v.text_masks.size(); b-- > 0;) {
    const auto& m = v.text_masks[b];
    if ((m.cats & kPlainCats & ~dfa.run_cats[pi]) != 0) continue;
    const auto groups = static_cast<unsigned>(m.cats >> constraint::kLeadCategory) & 0xFFu;
    if (!text_run_covers(dfa, pid, m.chars, groups)) continue;
    // Every token of the bucket leaves a state of the run, or one inside a character (at
    // most `tail` bytes short of the next state of the run).
    // Without a cut one, each leaves a state of the run (run_max_tokens: the most tokens a
    // completion needs from one).
    const std::uint32_t most = dfa.run_max_bytes[pi] + m.tail;
    whole_only = limit >= 0 && most > static_cast<std::uint32_t>(limit);
    if (whole_only && dfa.run_max_bytes[pi] > static_cast<std::uint32_t>(limit) &&
        run_max_tokens(dfa, pid) > limit)
      return 0;  // (a smaller bucket would not fit either)
    // (Its cut tokens, when left out, are taken or refused by the walk.)
    need = std::max(need, whole_only ? dfa.run_max_bytes[pi] : most);
    for (std::size_t w = 0; w < words.size(); ++w) words[w] |= m.words[w];
    if (whole_only) {
      for (std::uint32_t k = 0; k < m.cut; ++k) {
        const auto id = static_cast<std::uint32_t>(v.text_cut[k]);
        words[id >> 6] &= ~(std::uint64_t{1} << (id & 63));
      }
    }
    return m.chars;
  }
  return 0;
}

bool Constraint::Impl::text_run_covers(Dfa& dfa, std::int32_t pid, unsigned chars,
                                       unsigned groups) const {
  // Each state of the chain of plain steps takes a character (a plain byte of the run, or one
  // of the groups) to the next; a state that steps to itself (a `*` string) does so for ever.
  for (std::int32_t s = pid; chars > 0; --chars) {
    const std::int32_t next = plain_step(dfa, s);
    if (next < 0 || !text_ok(dfa, s, groups)) return false;
    if (next == s) return true;
    s = next;
  }
  return true;
}

std::unique_ptr<Constraint::Impl::Dfa> Constraint::Impl::take_dfa() const {
  std::lock_guard lock(dfa_mu);
  if (dfas.empty()) return std::make_unique<Dfa>();
  auto d = std::move(dfas.back());
  dfas.pop_back();
  return d;
}

void Constraint::Impl::give_dfa(std::unique_ptr<Dfa> d) const {
  if (d->states.size() > kMaxDfaStates || d->bytes > kMaxPlanBytes) d = std::make_unique<Dfa>();
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
  bool have_plain = false, met = false;
  {
    std::shared_lock lock(mu);
    const auto it = masks.find(key);
    if (it != masks.end() && !binds(it->second.need)) return copy_out(it->second.words);
    if (limit >= 0)
      if (auto jt = budget_masks.find(budget_key); jt != budget_masks.end())
        return copy_out(jt->second);
    have_plain = it != masks.end();
    met = !have_plain && cut_once.count(key) != 0;
  }
  auto store = [&](auto& map, const std::string& k, auto value) {
    const std::size_t bytes = words.size() * 8 + k.size() + 16;
    std::unique_lock lock(mu);
    if (mask_bytes + bytes <= kMaskCacheBytes && !map.count(k)) {
      map.emplace(k, std::move(value));
      mask_bytes += bytes;
    }
  };
  auto copy = [&] { return std::vector<std::uint64_t>(words.begin(), words.end()); };
  // A state met for the first time under a budget gets one walk, the budget's. When the budget
  // cut no token, that is its plain mask too; else the state is marked, and met again it is
  // walked for its plain mask, which every budget that does not bind shares. (Near the end of
  // a budget, where it binds, generation meets each state once: two walks, plain then the
  // budget's, were the slowest masks.)
  if (limit >= 0 && !have_plain && !met) {
    const Walked w = walk(state, words, limit);
    walks.fetch_add(1, std::memory_order_relaxed);
    if (!w.cut) {
      store(masks, key, PlainMask{copy(), w.need});
      if (binds(w.need)) store(budget_masks, budget_key, copy());
      return;
    }
    store(budget_masks, budget_key, copy());
    std::unique_lock lock(mu);
    if (mask_bytes + key.size() + 16 <= kMaskCacheBytes && cut_once.insert(key).second)
      mask_bytes += key.size() + 16;
    return;
  }
  if (!have_plain) {
    const std::uint32_t need = walk(state, words).need;
    walks.fetch_add(1, std::memory_order_relaxed);
    store(masks, key, PlainMask{copy(), need});
    if (!binds(need)) return;
  }
  walk(state, words, limit);
  walks.fetch_add(1, std::memory_order_relaxed);
  store(budget_masks, budget_key, copy());
}

}  // namespace weir::inference
