#include "weir/tools/calculator.hpp"

#include <boost/json/parse.hpp>

#include "weir/tools/builtin.hpp"

namespace weir::tools {

namespace json = boost::json;

namespace {

class CalculatorTool final : public BasicTool {
 public:
  CalculatorTool()
      : BasicTool(
            "calculator",
            "Evaluates an arithmetic expression exactly as written and returns the number. "
            "Operators: + - * / % ^ (power) and parentheses; functions: sqrt abs min max floor "
            "ceil round log exp sin cos; constants: pi e. Example: \"(2+3)^2 / sqrt(16)\".",
            json::parse(R"json({
          "type": "object",
          "properties": {
            "expression": {"type": "string", "minLength": 1, "maxLength": 4096,
                           "description": "the expression, e.g. \"2^10 - 1\""}
          },
          "required": ["expression"],
          "additionalProperties": false
        })json")
                .as_object()) {}
  ToolOptions options() const override {
    ToolOptions o;
    o.timeout = std::chrono::milliseconds(2000);
    o.max_concurrency = 64;
    o.json_output = true;  // a workflow's tool node writes the number
    return o;
  }
  boost::asio::awaitable<Result<std::string>> invoke(json::object args,
                                                     const ToolContext& ctx) override {
    co_return run(args);
  }
  static Result<std::string> run(const json::object& args) {
    const auto* e = args.if_contains("expression");
    if (!e || !e->is_string())
      return Error(Errc::invalid_argument,
                   "calculator: argument 'expression' (a string) is required");
    auto v = evaluate_expression(e->get_string());
    if (!v) return Error(Errc::invalid_argument, "calculator: " + v.error().message);
    return format_number(*v);
  }

 private:
};

}  // namespace

std::shared_ptr<Tool> make_calculator() {
  return std::make_shared<CalculatorTool>();
}

}  // namespace weir::tools
