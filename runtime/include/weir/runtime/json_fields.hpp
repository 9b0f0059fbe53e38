// Reading the fields of a JSON configuration document with positioned diagnostics: the one set
// of typed readers behind weir's file formats (workflow files, crew and group-chat files) and
// behind the sections of them that the layers above weir::graph own (tools, MCP servers,
// models, agents). Every problem is recorded, not only the first, each like a compiler's:
//   flow.json:14:13: /models/far/timeout_ms: must be at least 1, got 0
//
//   JsonFields f("flow.json", [&](std::string_view ptr) { return doc.locate(text, ptr); });
//   f.check_keys(o, "/models/far", {"provider", "base_url", "timeout_ms"});
//   auto t = f.int_at(o, "timeout_ms", "/models/far", 1);   // nullopt when absent or wrong
//   if (!f.ok()) return Error(Errc::invalid_workflow, f.report());
//
// Thread safety: a JsonFields is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/json_parse.hpp"

namespace weir {

struct Diagnostic {
  std::string file;
  int line = 0, column = 0;  // 0: not located (the pointer says where, if there is one)
  std::string pointer;       // JSON pointer of the offending value
  std::string message;
  // "file:line:column: pointer: message"; without a line "file: pointer: message"; the message
  // alone when it has neither (it says where itself: a JSON syntax error, a count).
  std::string to_string() const;
};

// "null", "a boolean", "an integer", "a number", "a string", "an array", "an object": what a
// message says a value was ("expected a string, got an integer").
const char* json_kind_phrase(const boost::json::value& v) noexcept;

// JSON Schema's name of a value's type: "null", "boolean", "number" (integers too), "string",
// "array", "object" (what a schema validator says: "expected string, got number").
const char* json_type_name(const boost::json::value& v) noexcept;

// "256MiB", "1.5 GiB", "4096", 4096 -> bytes (units B, KiB, MiB, GiB, KB, MB, GB); nullopt
// when malformed or negative.
std::optional<std::int64_t> parse_byte_size(const boost::json::value& v);

class JsonFields {
 public:
  // The location of a JSON pointer in the document's text. Without one, diagnostics carry the
  // pointer only (a document built in code, or checked again once its text is gone).
  using Locator = std::function<JsonLocation(std::string_view pointer)>;

  // `file` names the document in every diagnostic. Problems past `max_diagnostics` are counted
  // and summed up in one last diagnostic, not located (a broken generated file must not cost
  // time in proportion to its errors times its size).
  explicit JsonFields(std::string file, Locator locate = {}, std::size_t max_diagnostics = 100);

  const std::string& file() const noexcept { return file_; }

  // Records a problem with the value at `pointer`.
  void error(std::string_view pointer, std::string message);
  // Records a diagnostic made elsewhere (another document's: a subgraph file's), as it is.
  void add(Diagnostic d);

  // Each key of `o` that `allowed` lacks: "unknown key 'x'; did you mean 'y'?", or the keys
  // that are allowed when none is close.
  void check_keys(const boost::json::object& o, std::string_view ptr,
                  std::span<const std::string_view> allowed);
  void check_keys(const boost::json::object& o, std::string_view ptr,
                  std::initializer_list<std::string_view> allowed) {
    check_keys(o, ptr, std::span<const std::string_view>(allowed.begin(), allowed.size()));
  }

  // The typed readers: o[key] at `ptr` (the pointer of `o`). Absent: nullopt, and "missing
  // required key 'key'" at `ptr` when `required`. Of the wrong kind or out of range: nullopt
  // and a diagnostic at ptr/key ("expected a string, got an integer", "must be at least 1,
  // got 0").
  const boost::json::object* object_at(const boost::json::object& o, std::string_view key,
                                       std::string_view ptr, bool required = false);
  std::optional<std::string> string_at(const boost::json::object& o, std::string_view key,
                                       std::string_view ptr, bool required = false);
  std::optional<std::int64_t> int_at(const boost::json::object& o, std::string_view key,
                                     std::string_view ptr, std::int64_t min,
                                     std::int64_t max = INT64_MAX);
  // A duration in milliseconds (a "*_ms" key): at least `min`, at most kMaxMilliseconds, so
  // that a deadline computed from it cannot overflow the clock.
  static constexpr std::int64_t kMaxMilliseconds = std::int64_t{30} * 24 * 3600 * 1000;  // 30 days
  std::optional<std::int64_t> ms_at(const boost::json::object& o, std::string_view key,
                                    std::string_view ptr, std::int64_t min);
  std::optional<double> number_at(const boost::json::object& o, std::string_view key,
                                  std::string_view ptr);
  std::optional<bool> bool_at(const boost::json::object& o, std::string_view key,
                              std::string_view ptr);
  // A byte size (parse_byte_size).
  std::optional<std::int64_t> bytes_at(const boost::json::object& o, std::string_view key,
                                       std::string_view ptr);
  // An array of strings; each element that is not one is reported at its own pointer.
  std::optional<std::vector<std::string>> strings_at(const boost::json::object& o,
                                                     std::string_view key, std::string_view ptr);
  // An object whose values are strings (an environment, headers).
  std::optional<std::map<std::string, std::string>> string_map_at(const boost::json::object& o,
                                                                  std::string_view key,
                                                                  std::string_view ptr);

  bool ok() const noexcept { return diagnostics_.empty() && suppressed_ == 0; }
  // Every problem so far, located ones first, then "N more errors not shown".
  std::vector<Diagnostic> diagnostics() const;
  // diagnostics(), each to_string(), one a line (no trailing newline).
  std::string report() const;

 private:
  std::string file_;
  Locator locate_;
  std::size_t max_;
  std::vector<Diagnostic> diagnostics_;
  std::size_t suppressed_ = 0;
};

}  // namespace weir
