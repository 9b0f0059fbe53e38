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
// With an ExpressionScope (a workflow's `$expr` over its channels) a name may also be one of
// the scope's (they win over pi and e) and may contain '-' where the scope has such a name
// ("my-count + 1"; the longest name the scope has wins, so "n-1" is n minus 1 unless a name
// "n-1" exists), and len(NAME) counts the items NAME holds.
//
// Thread safety: free functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weir/runtime/error.hpp"

namespace weir::tools {

struct CalculatorLimits {
  std::size_t max_length = 4096;  // bytes of expression
  std::size_t max_depth = 64;     // nesting of parentheses, unary signs and powers
};

// The names an expression may read besides pi and e. Called during one evaluation only.
class ExpressionScope {
 public:
  virtual ~ExpressionScope() = default;
  // The number `name` stands for; nullopt when the scope has no such name. An error's message
  // is reported with the name's column ("channel 'x' is not a number at column 5").
  virtual std::optional<Result<double>> value(std::string_view name) const = 0;
  // len(name): how many items `name` holds; nullopt when the scope has no such name.
  virtual std::optional<Result<double>> length(std::string_view name) const = 0;
  // The message for a name that is neither the scope's nor a constant (no column is added:
  // the name says where), e.g. "unknown channel 'countr'; did you mean 'counter'?".
  virtual std::string unknown(std::string_view name) const = 0;
};

// Errors: invalid_argument with the message (no "calculator: " prefix).
Result<double> evaluate_expression(std::string_view expr, const CalculatorLimits& limits = {},
                                   const ExpressionScope* scope = nullptr);

// Checks an expression without computing it (a workflow file's `$expr`, when it is loaded):
// its length, depth and syntax, function names and arities, and that every name is the
// scope's or a constant. The scope's value() and length() are asked only whether a name
// exists. Returns every unknown name's message and then the first syntax error; empty when the
// expression would run (its values may still divide by zero).
std::vector<std::string> check_expression(std::string_view expr, const ExpressionScope& scope,
                                          const CalculatorLimits& limits = {});

// Up to 15 significant digits, no trailing zeros: 0.1+0.2 -> "0.3", 1024 -> "1024",
// 1e20 -> "1e+20", -0 -> "0".
std::string format_number(double v);

}  // namespace weir::tools
