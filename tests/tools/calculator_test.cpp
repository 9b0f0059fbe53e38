#include "weir/tools/calculator.hpp"

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>

#include "weir/tools/builtin.hpp"

namespace weir::tools {
namespace {

namespace json = boost::json;

std::string calc(std::string_view expr) {
  auto v = evaluate_expression(expr);
  if (!v) return "error: " + v.error().message;
  return format_number(*v);
}

TEST(CalculatorTest, Values) {
  EXPECT_EQ(calc("0.1+0.2"), "0.3");
  EXPECT_EQ(calc("2^10"), "1024");
  EXPECT_EQ(calc("1 + 2 * 3"), "7");
  EXPECT_EQ(calc("(1 + 2) * 3"), "9");
  EXPECT_EQ(calc("2^3^2"), "512");  // right-associative
  EXPECT_EQ(calc("-2^2"), "-4");
  EXPECT_EQ(calc("2^-1"), "0.5");
  EXPECT_EQ(calc("--3"), "3");
  EXPECT_EQ(calc("7 % 3"), "1");
  EXPECT_EQ(calc("10 / 4"), "2.5");
  EXPECT_EQ(calc("1e3 + 2.5E-1"), "1000.25");
  EXPECT_EQ(calc(".5 * 4"), "2");
  EXPECT_EQ(calc("sqrt(16) + abs(-3)"), "7");
  EXPECT_EQ(calc("min(4, 2, 8) + max(1, 9)"), "11");
  EXPECT_EQ(calc("floor(2.7) + ceil(2.1) + round(2.5)"), "8");
  EXPECT_EQ(calc("log(e)"), "1");
  EXPECT_EQ(calc("exp(0) + cos(0) + sin(0)"), "2");
  EXPECT_EQ(calc("pi"), "3.14159265358979");
  EXPECT_EQ(calc("1e20"), "1e+20");
  EXPECT_EQ(calc("-0"), "0");
  EXPECT_EQ(calc("1/3"), "0.333333333333333");
}

TEST(CalculatorTest, ErrorsNameTheColumn) {
  EXPECT_EQ(calc("(1+2))"), "error: unexpected ')' at column 6");
  EXPECT_EQ(calc("1 + * 2"), "error: unexpected '*' at column 5");
  EXPECT_EQ(calc("1 +"), "error: unexpected end of expression at column 4");
  EXPECT_EQ(calc("(1 + 2"), "error: missing ')' for the '(' at column 1");
  EXPECT_EQ(calc("2 * foo(3)"), "error: unknown function 'foo' at column 5");
  EXPECT_EQ(calc("x + 1"), "error: unknown name 'x' (constants: pi, e) at column 1");
  EXPECT_EQ(calc("1 / 0"), "error: division by zero at column 3");
  EXPECT_EQ(calc("5 % (2-2)"), "error: modulo by zero at column 3");
  EXPECT_EQ(calc("sqrt(-4)"), "error: sqrt of a negative number at column 1");
  EXPECT_EQ(calc("log(0)"), "error: log of a non-positive number at column 1");
  EXPECT_EQ(calc("sqrt(1, 2)"), "error: sqrt takes 1 argument, got 2 at column 1");
  EXPECT_EQ(calc("min()"), "error: min takes at least 1 argument, got 0 at column 1");
  EXPECT_EQ(calc("10^400"), "error: overflow at column 3");
  EXPECT_EQ(calc("1e999"), "error: number '1e999' is too large at column 1");
  EXPECT_EQ(calc("1e+"), "error: malformed exponent in number '1e+' at column 1");
  EXPECT_EQ(calc("(-8)^0.5"),
            "error: a negative number to a fractional power is not real at column 5");
  EXPECT_EQ(calc("   "), "error: empty expression");
  // Columns count characters, not bytes.
  EXPECT_EQ(calc("\u00e9 + 1"), "error: unexpected '\u00e9' at column 1");
  EXPECT_EQ(calc("1 + \u00e9"), "error: unexpected '\u00e9' at column 5");
  EXPECT_EQ(calc("(\u00e9\u00e9)"), "error: unexpected '\u00e9' at column 2");
}

TEST(CalculatorTest, LengthAndDepthCaps) {
  std::string long_expr(5000, '1');
  EXPECT_EQ(calc(long_expr), "error: the expression is 5000 bytes; the limit is 4096");
  std::string deep = std::string(100, '(') + "1" + std::string(100, ')');
  EXPECT_EQ(calc(deep), "error: the expression nests deeper than 64 levels at column 65");
  std::string ok = std::string(30, '(') + "1" + std::string(30, ')');
  EXPECT_EQ(calc(ok), "1");
  EXPECT_EQ(calc(std::string(500, '-') + "1"),
            "error: the expression nests deeper than 64 levels at column 65");
  // 200 KB of parentheses is refused by its length before anything recurses.
  EXPECT_EQ(calc(std::string(100000, '(') + "1" + std::string(100000, ')')),
            "error: the expression is 200001 bytes; the limit is 4096");
  EXPECT_EQ(calc("."), "error: malformed number '.' at column 1");
  EXPECT_EQ(calc("1.2.3"), "error: unexpected '.' at column 4");
}

// Names as a workflow's channels give them: n = 6, my-count = 3, n-1 = 100 (a name with '-'),
// items (3 of them), label (not a number).
class TestScope final : public ExpressionScope {
 public:
  std::optional<Result<double>> value(std::string_view name) const override {
    if (name == "n") return Result<double>(6.0);
    if (name == "my-count") return Result<double>(3.0);
    if (name == "n-1") return Result<double>(100.0);
    if (name == "items") return Result<double>(Error(Errc::invalid_argument, "'items' is a list"));
    if (name == "label")
      return Result<double>(Error(Errc::invalid_argument, "channel 'label' is not a number"));
    return std::nullopt;
  }
  std::optional<Result<double>> length(std::string_view name) const override {
    if (name == "items") return Result<double>(3.0);
    if (name == "n")
      return Result<double>(Error(Errc::invalid_argument, "len(n): n holds no list"));
    return value(name) ? std::optional<Result<double>>(0.0) : std::nullopt;
  }
  std::string unknown(std::string_view name) const override {
    return "unknown channel '" + std::string(name) + "'";
  }
};

std::string calc_in(std::string_view expr) {
  TestScope scope;
  auto v = evaluate_expression(expr, {}, &scope);
  if (!v) return "error: " + v.error().message;
  return format_number(*v);
}

TEST(CalculatorTest, NamesOfAScope) {
  EXPECT_EQ(calc_in("(n + 4) * 2 - n / 3"), "18");
  EXPECT_EQ(calc_in("n^2 + len(items) + pi - pi"), "39");
  EXPECT_EQ(calc_in("my-count * 2"), "6");  // '-' inside a name the scope has
  EXPECT_EQ(calc_in("my-count-1"), "2");    // ... and the longest such name wins
  EXPECT_EQ(calc_in("n-1"), "100");         // a name "n-1" exists
  EXPECT_EQ(calc_in("n - 1"), "5");         // spaces make it a subtraction
  EXPECT_EQ(calc_in("len( items )"), "3");
  EXPECT_EQ(calc_in("countr + 1"), "error: unknown channel 'countr'");
  EXPECT_EQ(calc_in("len(itms)"), "error: unknown channel 'itms'");
  EXPECT_EQ(calc_in("2 * label"), "error: channel 'label' is not a number at column 5");
  EXPECT_EQ(calc_in("len(n)"), "error: len(n): n holds no list at column 5");
  EXPECT_EQ(calc_in("len(1)"), "error: len takes one name, as in len(items) at column 5");
  EXPECT_EQ(calc_in("len(items, n)"), "error: len takes one name, as in len(items) at column 5");
  EXPECT_EQ(calc_in("len(items"), "error: missing ')' for the '(' at column 4");
  // Without a scope there are no names but the constants, and no len.
  EXPECT_EQ(calc("n + 1"), "error: unknown name 'n' (constants: pi, e) at column 1");
  EXPECT_EQ(calc("len(n)"), "error: unknown function 'len' at column 1");
}

TEST(CalculatorTest, CheckingFindsEveryUnknownNameAndTheSyntaxErrorWithoutComputing) {
  TestScope scope;
  using V = std::vector<std::string>;
  EXPECT_EQ(check_expression("n / (n - 6) + sqrt(-1) + log(0)", scope), V{});
  EXPECT_EQ(check_expression("countr + len(itms) * n", scope),
            (V{"unknown channel 'countr'", "unknown channel 'itms'"}));
  EXPECT_EQ(check_expression("countr + * 2", scope),
            (V{"unknown channel 'countr'", "unexpected '*' at column 10"}));
  EXPECT_EQ(check_expression(".", scope), V{"malformed number '.' at column 1"});
  EXPECT_EQ(check_expression("1.2.3", scope), V{"unexpected '.' at column 4"});
  EXPECT_EQ(check_expression("sqrt(1, 2)", scope), V{"sqrt takes 1 argument, got 2 at column 1"});
  EXPECT_EQ(check_expression(std::string(5000, '1'), scope),
            V{"the expression is 5000 bytes; the limit is 4096"});
  EXPECT_EQ(check_expression(std::string(100, '(') + "1" + std::string(100, ')'), scope),
            V{"the expression nests deeper than 64 levels at column 65"});
}

TEST(CalculatorTest, ToolPrefixesErrors) {
  auto tool = make_calculator();
  EXPECT_EQ(tool->name(), "calculator");
  boost::asio::io_context io;
  auto run = [&](const char* args) {
    auto f = boost::asio::co_spawn(io, tool->invoke(json::parse(args).as_object(), ToolContext{}),
                                   boost::asio::use_future);
    io.restart();
    io.run();
    return f.get();
  };
  auto ok = run(R"({"expression":"2^10"})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, "1024");
  auto bad = run(R"json({"expression":"(1+2))"})json");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(Errc::invalid_argument));
  EXPECT_EQ(bad.error().message, "calculator: unexpected ')' at column 6");
}

}  // namespace
}  // namespace weir::tools
