// The calculator's expression parser (what a model's calculator call and a workflow's $expr
// run): any bytes give a number or an error, never a crash, with or without names, evaluated or
// only checked.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weir/tools/calculator.hpp"

namespace {

class Names final : public weir::tools::ExpressionScope {
 public:
  std::optional<weir::Result<double>> value(std::string_view name) const override {
    if (name == "n" || name == "a-b") return weir::Result<double>(3.0);
    if (name == "s")
      return weir::Result<double>(weir::Error(weir::Errc::invalid_argument, "not a number"));
    return std::nullopt;
  }
  std::optional<weir::Result<double>> length(std::string_view name) const override {
    return value(name) ? std::optional<weir::Result<double>>(2.0) : std::nullopt;
  }
  std::string unknown(std::string_view name) const override {
    return "unknown name '" + std::string(name) + "'";
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Names names;
  for (const weir::tools::ExpressionScope* scope :
       {static_cast<const weir::tools::ExpressionScope*>(nullptr),
        static_cast<const weir::tools::ExpressionScope*>(&names)}) {
    auto r = weir::tools::evaluate_expression(text, {}, scope);
    if (r && !std::isfinite(*r)) __builtin_trap();  // an overflow or a nan is an error
    if (!r && r.error().message.empty()) __builtin_trap();
  }
  (void)weir::tools::check_expression(text, names);
  return 0;
}
