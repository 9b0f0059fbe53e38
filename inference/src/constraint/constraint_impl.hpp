// Constraint::Impl: a compiled constraint (its grammar, the vocabulary trie, the initial parse
// state) with its mask cache and the pool of lazily built DFAs the mask walks share.
// How a mask is computed: the top of constraint/mask.cpp; budgets (the fewest tokens that
// complete a value): the top of constraint/budget.cpp; triggers: constraint/trigger.cpp.
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "constraint/grammar.hpp"
#include "constraint/parse_stacks.hpp"
#include "constraint/vocab_trie.hpp"
#include "weir/inference/constraint.hpp"

namespace weir::inference {

using constraint::Element;
using constraint::Grammar;
using constraint::kMaxRun;
using constraint::kPlain;
using constraint::Stacks;
using constraint::VocabTrie;

constexpr std::size_t kMaskCacheBytes = 64u << 20;

// What a trigger costs, per position in it (ConstraintMatcher's free text before a value).
namespace constraint {
struct Trigger {
  std::string text;
  std::vector<std::int32_t> fail;  // KMP: the longest proper border of text[0, m)
  // Per matched length m (0 <= m < text.size()): the tokens that, after m matched bytes,
  // complete the trigger or leave part of it matched, each with the tokens that must follow
  // it (kNoCompletion: never allowed: its bytes after the trigger start no value).
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> needs;
  std::vector<std::int32_t> max_need;  // [m] the largest need of needs[m] (0 if none)
  // The matched length after `piece` from m, or -1 - (offset past the trigger's end) when the
  // piece completes it.
  std::int32_t advance(std::int32_t m, std::string_view piece) const;
};
}  // namespace constraint

struct Constraint::Impl {
  Grammar grammar;
  std::shared_ptr<const VocabTrie> vocab;
  std::vector<std::uint32_t> initial;
  mutable std::shared_mutex mu;
  // A parse state's mask without a budget, with what a completion needs after the tokens it
  // allows at most (Impl::walk): a budget of more than that never binds.
  struct PlainMask {
    std::vector<std::uint64_t> words;
    std::uint32_t need = 0;
  };
  mutable std::unordered_map<std::string, PlainMask> masks;  // GUARDED_BY(mu), by parse state
  // Masks under a budget that binds, by parse state and the budget's limit (tokens after).
  mutable std::unordered_map<std::string, std::vector<std::uint64_t>>
      budget_masks;  // GUARDED_BY(mu)
  // Parse states met first under a budget that cut tokens (so no plain mask came of that
  // walk): met again, their plain mask is walked for (Impl::mask).
  mutable std::unordered_set<std::string> cut_once;  // GUARDED_BY(mu)
  mutable std::size_t mask_bytes = 0;                // GUARDED_BY(mu): the three
  mutable std::atomic<std::uint64_t> walks{0}, hits{0};
  mutable std::atomic<std::int32_t> initial_min{-1};  // min_tokens() of `initial`, once known
  mutable std::mutex trigger_mu;
  mutable std::map<std::string, std::shared_ptr<const constraint::Trigger>>
      triggers;  // GUARDED_BY(trigger_mu)

  // The trie walk: every token some stack of `state` accepts whole (and, with limit >= 0,
  // after which a completion of at most `limit` tokens remains). Parse states met during the
  // walk are interned and their transitions memoised (a DFA built lazily for this walk):
  // inside a string, say, almost every byte leads back to the same state, so most trie nodes
  // cost one table lookup instead of advancing and expanding stacks. Plain subtrees are taken
  // or cut whole by the state's plain run (see the top of mask.cpp).
  struct Walked {
    std::uint32_t need = 0;  // the most a completion needs after an allowed token
    bool cut = false;        // the limit refused a token the state may allow
  };
  Walked walk(const std::vector<std::uint32_t>& state, std::span<std::uint64_t> words,
              std::int32_t limit = -1) const;

  // The lazily built DFAs (parse state x byte -> parse state) outlive a walk, so later walks
  // (other states of the same schema, other requests) reuse the transitions already computed.
  // A walk takes one from the pool and gives it back: concurrent walks never share one.
  struct Dfa {
    // The tables a state has besides its stacks (next, first, tight and the per-state values).
    static constexpr std::size_t kStateBytes = 256 * sizeof(std::int32_t) + 2 * 32 + 128;
    std::vector<std::vector<std::uint32_t>> states;
    std::vector<std::bitset<256>> first;
    // A deque: growing it never copies the tables (nor faults in a doubled copy mid-walk).
    std::deque<std::array<std::int32_t, 256>> next;  // -2 unknown, -1 dead
    // Plain run: how many plain bytes in a row the state accepts while advancing the same way
    // on each (kMaxRun: unbounded); -1 unknown. The run holds bytes of the categories in
    // run_cats (those every state it passes accepts; each refuses every other plain byte):
    // all of kPlain in a string body, a pattern's class in a pattern string.
    std::vector<std::int16_t> run;
    std::vector<std::uint64_t> run_cats;
    std::vector<std::uint64_t> step_cats;  // the categories plain_step() advances on
    std::vector<std::int32_t> plain_next;  // plain_step(), memoised (kUnknownStep: not yet)
    // 1 when the state the run ends in rejects every plain byte (a maxLength reached), so
    // longer plain tokens are refused without walking them.
    std::vector<std::uint8_t> run_then_reject;
    // Text runs (mask.cpp): the UTF-8 lead groups (constraint::utf8_lead_group) whose every
    // well-formed character is known to take the state where its plain step goes, and those
    // known not to.
    std::vector<std::uint8_t> text_ok, text_bad;
    // Budgets (budget.cpp): the fewest bytes that complete a value from the state; the bytes
    // that start such a shortest completion ("tight" bytes); the fewest tokens with each
    // slack 0..kSlack (-1 unknown); the most bytes / tokens a completion needs after any
    // plain byte run from the state (over the states the run passes; run_max_tokens -1
    // unknown).
    static constexpr int kSlack = 4;
    std::vector<std::uint32_t> min_bytes;
    std::vector<std::bitset<256>> tight;
    std::vector<std::array<std::int32_t, kSlack + 1>> min_tokens;
    std::vector<std::uint32_t> run_max_bytes;
    std::vector<std::int32_t> run_max_tokens, run_min_tokens;
    std::unordered_map<std::string, std::int32_t> ids;
    std::vector<std::uint32_t> out, tmp;
    std::vector<std::int32_t> chain;
    // About what the states hold (their stacks, twice with the ids' keys, and the tables):
    // min_tokens stops planning past kMaxPlanBytes (Impl::min_tokens), setting `plan_cut`.
    std::size_t bytes = 0;
    bool plan_cut = false;

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
        run_cats.push_back(0);
        step_cats.push_back(0);
        plain_next.push_back(kUnknownStep);
        run_then_reject.push_back(0);
        text_ok.push_back(0);
        text_bad.push_back(0);
        tight.emplace_back();
        min_bytes.push_back(st.min_bytes(s.data(), s.size(), tight.back()));
        min_tokens.emplace_back().fill(-1);
        run_max_bytes.push_back(0);
        run_max_tokens.push_back(-1);
        run_min_tokens.push_back(-1);
        bytes += s.size() * 2 * sizeof(std::uint32_t) + kStateBytes;
      }
      return it->second;
    }
  };

  // The state that every plain byte `pid` accepts leads to, when they all advance the same
  // way and every other plain byte is refused (dfa.step_cats: the categories they make up);
  // kNotUniform when not, kRejectsPlain when no plain byte is accepted. Advancing by byte c
  // depends on c only through which stack tops' classes hold it, so when every top's class
  // holds the same plain bytes A or none of them, one advance stands for all of A.
  static constexpr std::int32_t kNotUniform = -1, kRejectsPlain = -2, kUnknownStep = -3;
  std::int32_t plain_step(Dfa& dfa, std::int32_t pid) const;
  std::int32_t plain_step_of(Dfa& dfa, std::int32_t pid) const;  // (not memoised)

  // The transition of `pid` on byte c, computed (and memoised in dfa.next) for c and every
  // byte that no stack top's class tells apart from it: those advance the same way.
  std::int32_t step(Dfa& dfa, std::int32_t pid, unsigned char c) const;

  // The plain run of `pid` (Dfa::run), computed along the chain of plain steps and memoised.
  unsigned plain_run(Dfa& dfa, std::int32_t pid) const;
  // Whether every well-formed character of the lead groups `groups` (a bit each) takes `pid`
  // where its plain step goes (memoised in Dfa::text_ok / text_bad), and whether the chain of
  // plain steps from `pid` does so for `chars` characters in a row: its text run.
  bool text_ok(Dfa& dfa, std::int32_t pid, unsigned groups) const;
  bool text_run_covers(Dfa& dfa, std::int32_t pid, unsigned chars, unsigned groups) const;
  // Below the text subtree of trie node `node` (not a plain one), from `pid`: take when the
  // text run takes every token under the node (and each fits `limit`; without one, `need`
  // takes the most bytes one leaves to write), none when none can fit, else walk.
  enum class Below { walk, take, none };
  Below text_below(Dfa& dfa, std::int32_t pid, std::uint32_t node, std::int32_t limit,
                   std::uint32_t& need) const;
  // ORs into `words` the largest of VocabTrie::text_masks whose every token `pid` allows (and,
  // with limit >= 0, after which a completion fits; without, `need` takes the most bytes one
  // leaves to write); returns its characters, or 0 when none. `whole_only`: under the budget
  // only its tokens that end at a character's end were taken (the cut ones may not fit).
  unsigned text_mask(Dfa& dfa, std::int32_t pid, std::span<std::uint64_t> words, std::int32_t limit,
                     std::uint32_t& need, bool& whole_only) const;
  static constexpr std::size_t kMaxDfaStates = 16384;  // ~4 KiB each; then start afresh
  // What planning a value's fewest tokens may hold (Dfa::bytes), once: a schema whose shortest
  // value is so long that its plan needs more (nested minItems in the thousands: a million
  // states) is refused at compile, never planned on a request's thread.
  static constexpr std::size_t kMaxPlanBytes = 64u << 20;
  mutable std::mutex dfa_mu;
  mutable std::vector<std::unique_ptr<Dfa>> dfas;  // GUARDED_BY(dfa_mu)
  std::unique_ptr<Dfa> take_dfa() const;
  void give_dfa(std::unique_ptr<Dfa> d) const;

  // The mask of `state` within `budget` (kNoBudget: none), from the cache or a walk.
  void mask(const std::vector<std::uint32_t>& state, std::span<std::uint64_t> words,
            std::int32_t budget = kNoBudget) const;

  // Budgets (budget.cpp). The fewest tokens that complete a value from DFA state `sid`
  // (kNoCompletion when none is found), memoised in the DFA.
  std::int32_t min_tokens(Dfa& dfa, std::int32_t sid) const;
  // The same for a parse state (a DFA from the pool).
  std::int32_t min_tokens(const std::vector<std::uint32_t>& state) const;
  // The most / fewest tokens a completion needs after each plain byte run from `pid`
  // (plain_run()), over the states the run passes; memoised.
  std::int32_t run_max_tokens(Dfa& dfa, std::int32_t pid) const;
  std::int32_t run_min_tokens(Dfa& dfa, std::int32_t pid) const {
    run_max_tokens(dfa, pid);
    return dfa.run_min_tokens[static_cast<std::size_t>(pid)];
  }
  // Whether, from `sid`, a completion of at most `limit` tokens remains.
  bool fits(Dfa& dfa, std::int32_t sid, std::int32_t limit) const {
    if (vocab->every_byte_a_token &&
        dfa.min_bytes[static_cast<std::size_t>(sid)] <= static_cast<std::uint32_t>(limit))
      return true;  // one byte a token: min_tokens <= min_bytes
    return min_tokens(dfa, sid) <= limit;
  }

  // The trigger `text`'s table (trigger.cpp), built on first use and kept.
  std::shared_ptr<const constraint::Trigger> trigger(const std::string& text) const;
};

}  // namespace weir::inference
