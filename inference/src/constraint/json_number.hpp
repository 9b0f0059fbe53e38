// JSON Schema numbers with bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) as
// exact grammars over their decimal text: the bounds are read as the decimals they were
// written as (a double's shortest form: 0.1 is 0.1, 1e30 is a 1 and 30 zeros), integers of any
// length and fractions of at most kMaxFractionDigits digits, no exponent. Where no number of
// that form lies within the bounds, the rule has no alternative and a note
// (GrammarBuilder::never) names the keywords and why: they contradict each other, they leave
// no integer between them, or no number of at most 15 fraction digits (the grammar's limit).
#pragma once

#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "constraint/grammar.hpp"

namespace weir::inference::constraint {

inline constexpr int kMaxFractionDigits = 15;
// Digits of an integer part when no bound asks for more (a bound with more digits raises it).
inline constexpr int kMaxIntegerDigits = 18;

// A bound as written: its keyword, its text for messages, and its value as a decimal.
struct NumberBound {
  std::string keyword;  // "minimum", "exclusiveMinimum", ...
  std::string text;     // "0.1", "1e+30"
  bool negative = false;
  std::string int_digits;   // no leading zeros ("0" for zero)
  std::string frac_digits;  // no trailing zeros ("" for an integer)
  bool exclusive = false;
};
struct NumberBounds {
  std::optional<NumberBound> lo, hi;
  bool any() const { return lo || hi; }
};

// The bounds of schema object `o` at JSON pointer `where` (the stricter of minimum and
// exclusiveMinimum, of maximum and exclusiveMaximum). Errors: invalid_argument naming the
// keyword when it is not a number or not finite.
Result<NumberBounds> number_bounds(const boost::json::object& o, const std::string& where);

// Integers within `bd` (at least one bound): [1-9][0-9]* ranges, "0", "-" ranges.
Sym integer_in(GrammarBuilder& b, const NumberBounds& bd, const std::string& where);
// Numbers within `bd` (at least one bound): integers and decimals `i.f`, no exponent.
Sym number_in(GrammarBuilder& b, const NumberBounds& bd, const std::string& where);

}  // namespace weir::inference::constraint
