// weir's error model.
//
// Expected failures (caps hit, bad input, overload, tool failures) are values: an Error holds a
// std::error_code from weir's own category plus a message written for the user, saying what
// happened and which setting to change. Result<T> carries either a T or an Error.
// Exceptions are for bugs and broken invariants; weir::Exception exists to carry an Error
// across a boundary that can only throw (a memory_resource allocation, a coroutine body) and
// is turned back into a value at the run boundary.
//
// Thread safety: all types here are values; error_category() is safe to call from any thread.
#pragma once

#include <cassert>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

namespace weir {

// Codes of weir's error category. Values are stable: they appear in logs and JSON output.
enum class Errc : int {
  ok = 0,
  overloaded = 1,              // admission queue full; retry later or raise the limit
  memory_budget_exceeded = 2,  // a MemoryBudget category or total would go over its limit
  step_limit_exceeded = 3,     // recursion_limit (supersteps) reached
  visit_limit_exceeded = 4,    // a node's max_visits reached
  deadline_exceeded = 5,       // run deadline or a wait's timeout passed
  token_budget_exceeded = 6,   // a run's token budget is spent
  invalid_workflow = 7,        // a graph or workflow file is malformed
  invalid_argument = 8,        // an API was called with bad input
  tool_failed = 9,             // a tool threw or returned an error
  tool_timeout = 10,           // a tool did not answer within its timeout
  model_error = 11,            // a model file is unusable or the model failed
  kv_cache_exhausted = 12,     // a request can never fit in the KV cache
  cancelled = 13,              // the operation was cancelled
  not_found = 14,              // a named thing (artifact, thread, node) does not exist
  corrupt_data = 15,           // stored or given data failed validation
  io_error = 16,               // the operating system refused a file operation
  interrupted = 17,            // a run suspended at interrupt(); resume it to continue
  conflicting_writes = 18,     // two nodes wrote one last-value channel in one superstep
  unsupported = 19,            // a feature or format weir does not handle
  thread_busy = 20,            // another runner holds the thread (one runner per thread)
  attempts_exhausted = 21,     // a queued run lost its worker's lease max_attempts times
  unavailable = 22,            // a server (the database) cannot be reached or dropped the
                               // connection, and retrying did not bring it back in time; the
                               // request itself was fine: try again later or hand the work on
};

}  // namespace weir

template <>
struct std::is_error_code_enum<weir::Errc> : std::true_type {};

namespace weir {

const std::error_category& error_category() noexcept;
std::error_code make_error_code(Errc e) noexcept;

// The short, stable name of a code ("memory_budget_exceeded"); "unknown" for other categories.
const char* errc_name(std::error_code code) noexcept;

// An error as a value: a code (for programs) and a message (for people).
struct Error {
  std::error_code code;
  std::string message;

  Error() = default;
  Error(Errc e, std::string msg) : code(make_error_code(e)), message(std::move(msg)) {}
  Error(std::error_code c, std::string msg) : code(c), message(std::move(msg)) {}

  bool is(Errc e) const noexcept { return code == make_error_code(e); }
  // "memory_budget_exceeded: <message>"
  std::string to_string() const;
};

// Carries an Error through code that can only throw. Caught at run boundaries.
class Exception : public std::runtime_error {
 public:
  explicit Exception(Error error);
  Exception(Errc e, std::string msg) : Exception(Error(e, std::move(msg))) {}
  const Error& error() const noexcept { return error_; }

 private:
  Error error_;
};

// Either a T or an Error. A small std::expected for C++20.
template <class T>
class [[nodiscard]] Result {
 public:
  // An error (cancelled, "the operation did not complete"): what asio's co_spawn yields when a
  // coroutine ends without producing a value. Not meant to be used otherwise.
  Result() : v_(std::in_place_index<1>, Errc::cancelled, "the operation did not complete") {}
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT
  template <class... A>
  explicit Result(std::in_place_t, A&&... a) : v_(std::in_place_index<0>, std::forward<A>(a)...) {}

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  // REQUIRES: has_value(). value() throws weir::Exception with the error otherwise.
  T& value() & {
    check();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // REQUIRES: !has_value().
  const Error& error() const& {
    assert(!has_value());
    return std::get<1>(v_);
  }
  Error&& error() && {
    assert(!has_value());
    return std::get<1>(std::move(v_));
  }

 private:
  void check() const {
    if (!has_value()) throw Exception(std::get<1>(v_));
  }
  std::variant<T, Error> v_;
};

// Success or an Error. A success holds no Error (std::optional): making and dropping one, as
// every step of a run does many times, costs a flag.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design

  bool has_value() const noexcept { return !error_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  void value() const {
    if (error_) throw Exception(*error_);
  }
  const Error& error() const& {
    assert(error_);
    return *error_;
  }
  Error&& error() && {
    assert(error_);
    return std::move(*error_);
  }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

}  // namespace weir
