#include "weir/runtime/error.hpp"

namespace weir {
namespace {

constexpr const char* kNames[] = {
    "ok",
    "overloaded",
    "memory_budget_exceeded",
    "step_limit_exceeded",
    "visit_limit_exceeded",
    "deadline_exceeded",
    "token_budget_exceeded",
    "invalid_workflow",
    "invalid_argument",
    "tool_failed",
    "tool_timeout",
    "model_error",
    "kv_cache_exhausted",
    "cancelled",
    "not_found",
    "corrupt_data",
    "io_error",
    "interrupted",
    "conflicting_writes",
    "unsupported",
    "thread_busy",
    "attempts_exhausted",
    "unavailable",
};
constexpr int kNameCount = static_cast<int>(sizeof(kNames) / sizeof(kNames[0]));

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "weir"; }
  std::string message(int ev) const override {
    return ev >= 0 && ev < kNameCount ? kNames[ev] : "unknown weir error";
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

const char* errc_name(std::error_code code) noexcept {
  if (code.category() != error_category()) return "unknown";
  int v = code.value();
  return v >= 0 && v < kNameCount ? kNames[v] : "unknown";
}

std::string Error::to_string() const {
  std::string s = code.category() == error_category() ? errc_name(code) : code.message();
  if (!message.empty()) {
    s += ": ";
    s += message;
  }
  return s;
}

Exception::Exception(Error error)
    : std::runtime_error(error.to_string()), error_(std::move(error)) {}

}  // namespace weir
