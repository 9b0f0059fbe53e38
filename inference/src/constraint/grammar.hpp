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
// terminate), and the root derives at least one finite string.
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
  std::vector<std::string> names;                // rule id -> name (for messages)
  std::uint32_t root = 0;
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

  std::uint32_t new_rule(std::string name);
  // Adds an alternative to `rule`. Fails (sets error()) past the size limits.
  void add_alt(std::uint32_t rule, const Seq& seq);
  std::uint32_t find_or_new_rule(const std::string& name);  // GBNF: names refer to one rule
  bool has_alts(std::uint32_t rule) const;

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
  // Checks limits and time; returns false (and sets the error) when exceeded.
  bool check_budget();

  // Validates the invariants above and returns the grammar. Errors: what fail() recorded;
  // invalid_argument for an undefined or left-recursive rule or an empty language.
  Result<Grammar> finish(std::uint32_t root);

 private:
  Grammar g_;
  std::vector<std::vector<Seq>> rules_;
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
