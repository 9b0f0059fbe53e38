// A safe arithmetic evaluator (what the "calculator" tool runs).
//
// Grammar (recursive descent, no code execution, no state):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/' | '%') unary)*
//   unary   := ('-' | '+') unary | power
//   power   := primary ('^' unary)?          right-associative; -2^2 = -4
//   primary := number | name | name '(' expr (',' expr)* ')' | '(' expr ')'
// Numbers: 12, 1.5, .5, 1e-3. Names: pi, e. Functions: sqrt abs min max floor ceil round log
// (natural) exp sin cos. Errors name the 1-based column (in characters): "unexpected ')' at
// column 7"; division or modulo by zero, a domain error (sqrt of a negative, log of a
// non-positive) and overflow are errors, never inf or nan.
//
// Thread safety: free functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "weir/runtime/error.hpp"

namespace weir::tools {

struct CalculatorLimits {
  std::size_t max_length = 4096;  // bytes of expression
  std::size_t max_depth = 64;     // nesting of parentheses, unary signs and powers
};

// Errors: invalid_argument with the message (no "calculator: " prefix).
Result<double> evaluate_expression(std::string_view expr, const CalculatorLimits& limits = {});

// Up to 15 significant digits, no trailing zeros: 0.1+0.2 -> "0.3", 1024 -> "1024",
// 1e20 -> "1e+20", -0 -> "0".
std::string format_number(double v);

}  // namespace weir::tools
