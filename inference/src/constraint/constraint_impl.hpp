// Constraint::Impl: a compiled constraint (its grammar, the vocabulary trie, the initial parse
// state) with its mask cache and the pool of lazily built DFAs the mask walks share.
// How a mask is computed: the top of constraint/mask.cpp.
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <deque>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
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
  // or cut whole by the state's plain run (see the top of mask.cpp).
  void walk(const std::vector<std::uint32_t>& state, std::span<std::uint64_t> words) const;

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
  std::int32_t plain_step(Dfa& dfa, std::int32_t pid) const;

  // The transition of `pid` on byte c, computed (and memoised in dfa.next) for c and every
  // byte that no stack top's class tells apart from it: those advance the same way.
  std::int32_t step(Dfa& dfa, std::int32_t pid, unsigned char c) const;

  // The plain run of `pid` (Dfa::run), computed along the chain of plain steps and memoised.
  unsigned plain_run(Dfa& dfa, std::int32_t pid) const;
  static constexpr std::size_t kMaxDfaStates = 16384;  // ~4 KiB each; then start afresh
  mutable std::mutex dfa_mu;
  mutable std::vector<std::unique_ptr<Dfa>> dfas;  // GUARDED_BY(dfa_mu)
  std::unique_ptr<Dfa> take_dfa() const;
  void give_dfa(std::unique_ptr<Dfa> d) const;

  void mask(const std::vector<std::uint32_t>& state, std::span<std::uint64_t> words) const;
};

}  // namespace weir::inference
