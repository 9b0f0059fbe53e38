// The expression evaluator behind the calculator tool and a workflow's `$expr`
// (weir/tools/calculator.hpp).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include "weir/runtime/text.hpp"
#include "weir/tools/calculator.hpp"

namespace weir::tools {

namespace {

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

class Parser {
 public:
  // `problems`: check mode (check_expression): nothing is computed that can fail, and unknown
  // names are recorded there instead of ending the parse.
  Parser(std::string_view s, const CalculatorLimits& limits, const ExpressionScope* scope,
         std::vector<std::string>* problems = nullptr)
      : s_(s), limits_(limits), scope_(scope), problems_(problems) {}

  Result<double> parse() {
    skip_space();
    if (pos_ == s_.size()) return Error(Errc::invalid_argument, "empty expression");
    auto v = expr();
    if (!v) return v;
    skip_space();
    if (pos_ < s_.size()) return unexpected();
    return v;
  }

 private:
  std::size_t column(std::size_t at) const { return utf8_length(s_.substr(0, at)) + 1; }
  std::string at_col(std::size_t at) const { return " at column " + std::to_string(column(at)); }
  Error err(const std::string& what, std::size_t at) const {
    return Error(Errc::invalid_argument, what + at_col(at));
  }
  Error unexpected() const {
    if (pos_ >= s_.size()) return err("unexpected end of expression", s_.size());
    const std::size_t n = 1 + utf8_skip_continuation(s_.substr(pos_ + 1));
    return err("unexpected '" + std::string(s_.substr(pos_, n)) + "'", pos_);
  }
  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Result<double> checked(double v, std::size_t at) const {
    if (problems_) return v;
    if (std::isnan(v)) return err("the result is not a number", at);
    if (std::isinf(v)) return err("overflow", at);
    return v;
  }

  struct Depth {
    explicit Depth(std::size_t& d) : d_(d) { ++d_; }
    ~Depth() { --d_; }
    std::size_t& d_;
  };

  Result<double> expr() {
    auto lhs = term();
    if (!lhs) return lhs;
    double v = *lhs;
    for (;;) {
      skip_space();
      const std::size_t at = pos_;
      if (!eat('+') && !eat('-')) return v;
      const char op = s_[at];
      auto rhs = term();
      if (!rhs) return rhs;
      auto r = checked(op == '+' ? v + *rhs : v - *rhs, at);
      if (!r) return r;
      v = *r;
    }
  }

  Result<double> term() {
    auto lhs = unary();
    if (!lhs) return lhs;
    double v = *lhs;
    for (;;) {
      skip_space();
      const std::size_t at = pos_;
      if (!eat('*') && !eat('/') && !eat('%')) return v;
      const char op = s_[at];
      auto rhs = unary();
      if (!rhs) return rhs;
      if (op == '*') {
        auto r = checked(v * *rhs, at);
        if (!r) return r;
        v = *r;
      } else {
        if (*rhs == 0 && !problems_)
          return err(op == '/' ? "division by zero" : "modulo by zero", at);
        auto r = checked(op == '/' ? v / *rhs : std::fmod(v, *rhs), at);
        if (!r) return r;
        v = *r;
      }
    }
  }

  Result<double> unary() {
    skip_space();
    if (depth_ >= limits_.max_depth)
      return err(
          "the expression nests deeper than " + std::to_string(limits_.max_depth) + " levels",
          pos_);
    Depth d(depth_);
    if (eat('-')) {
      auto v = unary();
      if (!v) return v;
      return -*v;
    }
    if (eat('+')) return unary();
    return power();
  }

  Result<double> power() {
    auto base = primary();
    if (!base) return base;
    skip_space();
    const std::size_t at = pos_;
    if (!eat('^')) return base;
    auto exp = unary();
    if (!exp) return exp;
    if (problems_) return 1.0;
    if (*base == 0 && *exp < 0) return err("division by zero (0 to a negative power)", at);
    const double v = std::pow(*base, *exp);
    if (std::isnan(v)) return err("a negative number to a fractional power is not real", at);
    return checked(v, at);
  }

  Result<double> number() {
    const std::size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    if (pos_ - start == 1 && s_[start] == '.') return err("malformed number '.'", start);
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      std::size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
        while (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) ++p;
        pos_ = p;
      } else {
        return err(
            "malformed exponent in number '" + std::string(s_.substr(start, p - start)) + "'",
            start);
      }
    }
    double v = 0;
    auto [ptr, ec] = std::from_chars(s_.data() + start, s_.data() + pos_, v);
    if (ec == std::errc::result_out_of_range) {
      // Tiny values underflow to 0 harmlessly; huge ones are an overflow.
      bool huge = false;
      const std::string text(s_.substr(start, pos_ - start));
      const double approx = std::strtod(text.c_str(), nullptr);
      huge = std::isinf(approx);
      if (huge) return err("number '" + text + "' is too large", start);
      return approx;
    }
    if (ec != std::errc() || ptr != s_.data() + pos_)
      return err("malformed number '" + std::string(s_.substr(start, pos_ - start)) + "'", start);
    return v;
  }

  Result<double> call(const std::string& fn, std::size_t at, const std::vector<double>& a) {
    auto arity = [&](std::size_t n) -> Status {
      if (a.size() == n) return {};
      return err(fn + " takes " + std::to_string(n) + " argument" + (n == 1 ? "" : "s") + ", got " +
                     std::to_string(a.size()),
                 at);
    };
    if (fn == "min" || fn == "max") {
      if (a.empty()) return err(fn + " takes at least 1 argument, got 0", at);
      double v = a[0];
      for (double x : a) v = fn == "min" ? std::min(v, x) : std::max(v, x);
      return v;
    }
    if (auto s = arity(1); !s) return std::move(s).error();
    if (problems_) return 1.0;
    const double x = a[0];
    if (fn == "sqrt") {
      if (x < 0) return err("sqrt of a negative number", at);
      return std::sqrt(x);
    }
    if (fn == "abs") return std::fabs(x);
    if (fn == "floor") return std::floor(x);
    if (fn == "ceil") return std::ceil(x);
    if (fn == "round") return std::round(x);
    if (fn == "log") {
      if (x <= 0) return err("log of a non-positive number", at);
      return std::log(x);
    }
    if (fn == "exp") return checked(std::exp(x), at);
    if (fn == "sin") return std::sin(x);
    if (fn == "cos") return std::cos(x);
    return err("unknown function '" + fn + "'", at);
  }

  Result<double> primary() {
    skip_space();
    if (pos_ >= s_.size()) return unexpected();
    const char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (c == '(') {
      const std::size_t open = pos_++;
      auto v = expr();
      if (!v) return v;
      if (!eat(')')) {
        if (pos_ >= s_.size())
          return Error(Errc::invalid_argument,
                       "missing ')' for the '(' at column " + std::to_string(column(open)));
        return unexpected();
      }
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const std::size_t start = pos_;
      const std::string id = name();
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == '(') {
        if (scope_ && id == "len") return len();
        static constexpr const char* kFns[] = {"sqrt",  "abs", "min", "max", "floor", "ceil",
                                               "round", "log", "exp", "sin", "cos"};
        bool known = false;
        for (const char* f : kFns) known = known || id == f;
        if (!known) return err("unknown function '" + id + "'", start);
        const std::size_t open = pos_++;
        std::vector<double> args;
        skip_space();
        if (!eat(')')) {
          for (;;) {
            auto v = expr();
            if (!v) return v;
            args.push_back(*v);
            if (eat(',')) continue;
            if (eat(')')) break;
            if (pos_ >= s_.size())
              return Error(Errc::invalid_argument,
                           "missing ')' for the '(' at column " + std::to_string(column(open)));
            return unexpected();
          }
        }
        return call(id, start, args);
      }
      if (scope_)
        if (auto v = scope_->value(id)) {
          if (!*v) return err(v->error().message, start);
          return **v;
        }
      if (id == "pi") return std::numbers::pi;
      if (id == "e") return std::numbers::e;
      if (scope_) return unknown_name(id);
      return err("unknown name '" + id + "' (constants: pi, e)", start);
    }
    return unexpected();
  }

  // A name at pos_. With a scope, '-' joins parts when the scope has the longer name (channel
  // names may hold '-'); the longest such name wins.
  std::string name() {
    const std::size_t start = pos_;
    while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    if (scope_) {
      for (std::size_t j = pos_; j + 1 < s_.size() && s_[j] == '-' && name_char(s_[j + 1]);) {
        for (++j; j < s_.size() && name_char(s_[j]);) ++j;
        if (scope_->value(s_.substr(start, j - start))) pos_ = j;
      }
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  Result<double> unknown_name(const std::string& id) {
    if (!problems_) return Error(Errc::invalid_argument, scope_->unknown(id));
    problems_->push_back(scope_->unknown(id));
    return 1.0;  // check mode: go on to find the other problems
  }

  // len(NAME), after "len"; pos_ is at '('.
  Result<double> len() {
    const std::size_t open = pos_++;
    skip_space();
    const std::size_t at = pos_;
    if (pos_ >= s_.size() ||
        !(std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      return err("len takes one name, as in len(items)", at);
    const std::string id = name();
    if (!eat(')')) {
      if (pos_ >= s_.size())
        return Error(Errc::invalid_argument,
                     "missing ')' for the '(' at column " + std::to_string(column(open)));
      return err("len takes one name, as in len(items)", at);
    }
    auto n = scope_->length(id);
    if (!n) return unknown_name(id);
    if (!*n) return err(n->error().message, at);
    return **n;
  }

  std::string_view s_;
  const CalculatorLimits& limits_;
  const ExpressionScope* scope_;
  std::vector<std::string>* problems_;
  std::size_t pos_ = 0;
  std::size_t depth_ = 0;
};

// The checks before parsing: the length and the encoding.
Status precheck(std::string_view expr, const CalculatorLimits& limits) {
  if (expr.size() > limits.max_length)
    return Error(Errc::invalid_argument, "the expression is " + std::to_string(expr.size()) +
                                             " bytes; the limit is " +
                                             std::to_string(limits.max_length));
  if (auto bad = find_invalid_utf8(expr))
    return Error(Errc::invalid_argument,
                 "invalid UTF-8 at byte " + std::to_string(*bad) + " of the expression");
  return {};
}

}  // namespace

Result<double> evaluate_expression(std::string_view expr, const CalculatorLimits& limits,
                                   const ExpressionScope* scope) {
  if (auto s = precheck(expr, limits); !s) return std::move(s).error();
  return Parser(expr, limits, scope).parse();
}

std::vector<std::string> check_expression(std::string_view expr, const ExpressionScope& scope,
                                          const CalculatorLimits& limits) {
  if (auto s = precheck(expr, limits); !s) return {s.error().message};
  std::vector<std::string> problems;
  if (auto r = Parser(expr, limits, &scope, &problems).parse(); !r)
    problems.push_back(r.error().message);
  return problems;
}

std::string format_number(double v) {
  if (v == 0) return "0";  // also -0
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

}  // namespace weir::tools
