// The grammar every constraint compiles to: a context-free grammar over bytes.
//
// Rules are lists of alternatives; an alternative is a sequence of elements, each a byte class
// (a 256-bit set) or a reference to a rule. All alternatives live in one flat array, each
// ended by an `end` element, so a parse position is one index into `elems` (llama.cpp's
// layout). Code-point classes (JSON string characters, GBNF `[...]`, regex classes) are
// lowered to byte sequences with exact UTF-8 ranges (no overlongs, no surrogates), so the
// matcher never sees anything but bytes and every accepted output is valid UTF-8.
//
// Invariants after GrammarBuilder::finish(): every rule has at least one alternative, every
// rule reference is defined, no rule is left-recursive (the matcher's expansion would not
// terminate), and the root derives at least one finite string. A repetition whose body can
// match the empty string (regex `(a*)*`, GBNF `("a"?)*`) repeats the body's non-empty forms
// instead, which matches the same strings without the left recursion.
//
// Refusals speak the user's syntax: rules the front ends create for their own use have no
// origin and are never named; a GBNF rule is named as the user wrote it, a JSON Schema $ref by
// its target, and a construct with no value (an empty enum, an empty character class) by the
// note its front end left with GrammarBuilder::never().
#pragma once

#include <bitset>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weir/runtime/error.hpp"

namespace weir::inference::constraint {

struct Element {
  enum Kind : std::uint8_t { bytes, rule, end };
  Kind kind = end;
  std::uint32_t value = 0;  // bytes: index into Grammar::classes; rule: rule id
};

struct Grammar {
  std::vector<Element> elems;                    // alternatives, each ended by `end`
  std::vector<std::vector<std::uint32_t>> alts;  // rule id -> start index of each alternative
  std::vector<std::bitset<256>> classes;         // byte classes
  std::vector<std::string> names;                // rule id -> name (for logs)
  std::uint32_t root = 0;
  // Minimum length in bytes of what the rest of an alternative derives, from each element
  // to its alternative's end ([elems.size()]; an `end` element's is 0): a parse stack's
  // shortest completion is the sum over its positions (the budget rule, constraint.hpp).
  std::vector<std::uint32_t> rest_bytes;
};

// Where a rule comes from, for messages: front ends name the rules a user wrote.
struct RuleOrigin {
  enum Kind : std::uint8_t { internal, gbnf_rule, schema_ref } kind = internal;
  std::string name;  // gbnf_rule: the rule's name; schema_ref: the reference ("#/$defs/x")
};

// Limits on what a constraint may compile to (a bound on compile time and on memory).
inline constexpr std::size_t kMaxGrammarElements = 400000;
inline constexpr std::size_t kMaxRules = 100000;

// Inclusive code-point ranges.
struct CpRange {
  std::uint32_t lo, hi;
};

// A symbol of an alternative while building: a byte class or a rule.
struct Sym {
  bool is_rule = false;
  std::uint32_t value = 0;
};
using Seq = std::vector<Sym>;

class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::chrono::milliseconds time_limit = std::chrono::milliseconds(2000));

  // `name` is for logs; `origin` says whether messages may name the rule (RuleOrigin).
  std::uint32_t new_rule(std::string name, RuleOrigin origin = {});
  // Adds an alternative to `rule`. Fails (sets error()) past the size limits.
  void add_alt(std::uint32_t rule, const Seq& seq);
  bool has_alts(std::uint32_t rule) const;
  // A rule with no alternative (it matches nothing), and why, in the user's terms ("'enum' at
  // /x is empty"): finish() says so when the whole constraint is left with no value.
  Sym never(std::string why);
  // The notes left by never() since `mark` (notes().size() earlier) get `prefix` in front.
  const std::vector<std::pair<std::uint32_t, std::string>>& notes() const { return notes_; }
  void prefix_notes(std::size_t mark, const std::string& prefix);

  Sym byte_class(const std::bitset<256>& set);
  Sym byte(unsigned char c);
  // The bytes of `s` in order, appended to `seq`.
  void append_literal(Seq& seq, std::string_view s);
  Seq literal(std::string_view s) {
    Seq q;
    append_literal(q, s);
    return q;
  }
  // One code point from `ranges` (sorted or not; surrogates are dropped) as a symbol.
  Sym cp_class(std::vector<CpRange> ranges);
  // A rule matching `body` (one alternative); helpers for repetition.
  Sym group(const std::vector<Seq>& alternatives, std::string name = "group");
  Sym optional(const Seq& body);
  Sym star(const Seq& body);
  Sym plus(const Seq& body);
  // body{min,max}; max < 0: unbounded.
  Sym repeat(const Seq& body, std::int64_t min, std::int64_t max);
  // A rule deriving nothing but the empty string.
  Sym empty();

  // Records the first error (kept; later calls are ignored once failed).
  void fail(Error e);
  bool failed() const { return failed_; }
  const Error& error() const { return error_; }  // REQUIRES: failed()
  // Checks limits and time; returns false (and sets the error) when exceeded.
  bool check_budget();

  // Validates the invariants above and returns the grammar. Errors: what fail() recorded;
  // invalid_argument for an undefined or left-recursive rule or an empty language, naming
  // what the user wrote (a GBNF rule, a $ref, the note of a never()).
  Result<Grammar> finish(std::uint32_t root);

 private:
  // Rewrites each star whose body can match the empty string to repeat the body's non-empty
  // forms. `nullable`: per rule, grown for the rules this adds.
  void normalise_nullable_stars(std::vector<char>& nullable);
  Error left_recursion_error(const std::vector<std::uint32_t>& cycle) const;
  Error empty_language_error(std::uint32_t root, const std::vector<char>& productive) const;
  void compute_rest_bytes();

  Grammar g_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<RuleOrigin> origins_;
  std::vector<std::pair<std::uint32_t, Seq>> stars_;          // star rule, its body
  std::vector<std::pair<std::uint32_t, std::string>> notes_;  // never() rule, why
  bool failed_ = false;
  Error error_;
  std::size_t n_elems_ = 0;
  std::size_t n_alts_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds limit_;
};

// Code points -> UTF-8 byte-range sequences (exact: lengths, overlongs, surrogates).
// Each result is a sequence of byte ranges [lo, hi], one per byte of the encoding.
std::vector<std::vector<std::pair<unsigned char, unsigned char>>> utf8_sequences(std::uint32_t lo,
                                                                                 std::uint32_t hi);

// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, std::uint32_t cp);

// --- front ends (each in its own file) ------------------------------------------------------

// A regular expression (the documented subset) as a rule. `json_string` escapes what JSON
// strings must escape (the regex then describes a string's decoded content). `anchored`: the
// whole input must match; otherwise (JSON Schema `pattern`) a match anywhere, ^ and $
// anchoring it. Errors: invalid_argument "regex at offset N: problem".
Result<std::uint32_t> compile_regex(GrammarBuilder& b, std::string_view re, bool json_string,
                                    bool anchored);

// GBNF text (llama.cpp's grammar format); the root rule is `root`. Errors: invalid_argument
// "gbnf line L column C: problem".
Result<std::uint32_t> compile_gbnf(GrammarBuilder& b, std::string_view text);

// A JSON Schema (the documented subset). Errors: invalid_argument naming the keyword and its
// JSON pointer, e.g. "unsupported JSON Schema keyword 'not' at /properties/x".
Result<std::uint32_t> compile_json_schema(GrammarBuilder& b, std::string_view schema_text);

// Any JSON object (json_object kind).
std::uint32_t json_any_object(GrammarBuilder& b);

}  // namespace weir::inference::constraint
