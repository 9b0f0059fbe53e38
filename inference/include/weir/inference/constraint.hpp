// Structured output: constraints on what the model may emit (a JSON Schema, any JSON object,
// a regular expression, a choice among strings, or a GBNF grammar), compiled once against a
// vocabulary and applied by the engine as a mask over the logits at every decode step.
//
// A Constraint compiles to a byte-level context-free grammar (constraint/grammar.hpp). A
// ConstraintMatcher is one sequence's position in it: a set of parse stacks (a pushdown
// automaton, as llama.cpp's grammar sampler keeps them), advanced byte by byte by each
// accepted token. The mask of tokens that may come next is found by walking a trie of the
// vocabulary's token bytes with those stacks, pruning every subtree whose prefix no stack
// accepts; masks are cached in the Constraint by parse state (a crew sends the same tool schema
// thousands of times, and most states repeat), so a repeated state costs a lookup and a copy.
// Supported schema keywords, the regex subset, GBNF support and errors:
// docs/structured-output.md.
//
// Never fail open: a keyword or construct that cannot be enforced is an invalid_argument error
// at compile time naming it (and the JSON pointer or the text position); where the grammar
// allows less than the schema (one optional space as whitespace, properties in declared
// order, bounded digit counts) the output is still always valid.
//
// Budgets: a value must also end in time. For every parse state the constraint knows the
// fewest tokens of its vocabulary that complete a value from there (min_tokens: the fewest
// tokens that spell one of the shortest completions, in bytes). Given the tokens a sequence
// may still generate (its budget: max_tokens, the context, a cap of the caller's), the mask
// allows only tokens after which a completion still fits, so strings close, arrays end,
// optional members are left out and required ones take their shortest form as the budget
// runs out; while the budget is larger than every allowed token's need, the mask is the plain
// one (the rule costs nothing until the end is near). A budget below min_tokens() of the
// start can never produce a valid value: callers refuse such a request up front.
//
// Thread safety: compile_constraint may be called from any thread. A Constraint is immutable
// to its users and shared across requests and threads (its mask cache is internally locked).
// A ConstraintMatcher belongs to one sequence and is used by one thread at a time.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference {

namespace constraint {
struct Trigger;  // a trigger's table (inference/src/constraint/)
}

struct ConstraintSpec {
  enum class Kind { json_schema, json_object, regex, choice, gbnf } kind = Kind::json_schema;
  std::string text;                  // schema JSON, regex or GBNF (unused for json_object, choice)
  std::vector<std::string> choices;  // Kind::choice: the output is exactly one of these
};

// A budget (tokens that may still be generated, the next one included) that never binds.
inline constexpr std::int32_t kNoBudget = std::numeric_limits<std::int32_t>::max();
// min_tokens() of a parse state from which no completion was found (only possible when the
// parse state was cut: 128 alternatives at once, or recursion 256 deep).
inline constexpr std::int32_t kNoCompletion = std::numeric_limits<std::int32_t>::max() / 2;

// A compiled constraint: grammar + the vocabulary's token trie + a mask cache.
class Constraint {
 public:
  struct Impl;
  explicit Constraint(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::int32_t n_vocab() const;
  // The fewest tokens of this vocabulary that make a whole value from the start (0 when the
  // empty output is one). Computed on first use and kept.
  std::int32_t min_tokens() const;
  // Grammar size (elements), for logs and limits.
  std::size_t grammar_size() const;
  // Masks computed (walks of the trie) and served from the cache, since compilation.
  std::uint64_t mask_walks() const;
  std::uint64_t mask_cache_hits() const;
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// Compiles `spec` for the vocabulary of `tokenizer`. Results are cached (keyed by kind, text,
// choices and the vocabulary): compiling the same spec again returns the same Constraint.
// Errors (nothing is cached): invalid_argument naming the JSON Schema keyword and its JSON
// pointer ("unsupported JSON Schema keyword 'not' at /properties/x"), the regex offset
// ("regex at offset 3: ..."), or the GBNF position ("gbnf line 2 column 7: ..."); a spec
// past the size (grammar elements) or time bound (2 s) says so.
Result<std::shared_ptr<const Constraint>> compile_constraint(const ConstraintSpec& spec,
                                                             const Tokenizer& tokenizer);

// One sequence's progress through a Constraint, optionally after a trigger: free text until
// the trigger's text appears (e.g. "<tool_call>"), then a value; the bytes of the token that
// completed the trigger past its end are the value's first bytes.
// Invariant: the bytes accepted so far (after the trigger) are a prefix of at least one output
// the constraint allows, unless dead() (no token can continue: only possible when a depth bound
// cut the only continuations of a recursive grammar). With budgets given to every fill_mask
// and only allowed tokens accepted, a value that starts is complete when its budget runs out.
class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<const Constraint> constraint,
                             std::string trigger = {});

  // Writes the mask of tokens that may come next: bit (id % 64) of words[id / 64], within a
  // budget of `budget` tokens (this one included; REQUIRES budget >= 1): a token is allowed
  // only when a value can still be completed after it within budget - 1 tokens. The
  // tokenizer's end-of-generation tokens are set only when complete(). In free text before
  // the trigger every token is allowed but those that would start, continue or complete the
  // trigger when the value after it could not be finished in time (or whose bytes after the
  // trigger no value starts with). Returns false, leaving `words` untouched, when every token
  // is allowed (free text far from the budget). REQUIRES: words.size() >= (n_vocab + 63) / 64.
  bool fill_mask(std::span<std::uint64_t> words, std::int32_t budget = kNoBudget) const;
  // Advances by one token's bytes. Returns false (state unchanged) when the token is not
  // allowed. An end-of-generation token is accepted (no bytes) only when complete().
  bool accept(std::int32_t token);
  bool accept_bytes(std::string_view bytes);
  // The value has started (no trigger, or the trigger has appeared).
  bool active() const { return active_; }
  // The output so far is a whole value, or free text before the trigger: ending is allowed.
  bool complete() const;
  // The value is complete, and nothing can follow: generation should end.
  bool finished() const;
  // Nothing can follow and the output is not complete.
  bool dead() const;
  // The fewest tokens that complete the value from here (0 in free text before the trigger).
  std::int32_t min_tokens() const;
  // The parse state as bytes (with the trigger's progress): matchers with equal keys allow the
  // same futures. For tests and searches over outputs.
  std::string state_key() const;
  const Constraint& constraint() const { return *c_; }

 private:
  std::shared_ptr<const Constraint> c_;
  std::vector<std::uint32_t> state_;                    // the parse stacks, flattened
  std::shared_ptr<const constraint::Trigger> trigger_;  // null: none
  std::int32_t matched_ = 0;  // before the trigger: its bytes matched at the end of the output
  bool active_ = true;
};

// Words of a token mask over `n_vocab` tokens.
inline std::size_t mask_words(std::int32_t n_vocab) {
  return (static_cast<std::size_t>(n_vocab) + 63) / 64;
}

}  // namespace weir::inference
