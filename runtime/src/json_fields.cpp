#include "weir/runtime/json_fields.hpp"

#include <algorithm>
#include <regex>

#include <boost/json.hpp>

#include "weir/runtime/text.hpp"

namespace weir {

namespace json = boost::json;

// The pointer and the message quote the file's own keys and values: escaped (escape_control),
// so that a key holding ESC or a newline can neither drive the terminal nor split the line.
std::string Diagnostic::to_string() const {
  const std::string p = escape_control(pointer), m = escape_control(message);
  if (line == 0) return pointer.empty() ? m : file + ": " + p + ": " + m;
  std::string s = file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  if (!pointer.empty()) s += p + ": ";
  return s + m;
}

const char* json_kind_phrase(const json::value& v) noexcept {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "an integer";
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value";
}

const char* json_type_name(const json::value& v) noexcept {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "number";
    case json::kind::string:
      return "string";
    case json::kind::array:
      return "array";
    case json::kind::object:
      return "object";
  }
  return "unknown";
}

std::optional<std::int64_t> parse_byte_size(const json::value& v) {
  if (v.is_int64()) return v.as_int64() >= 0 ? std::optional(v.as_int64()) : std::nullopt;
  if (v.is_uint64())
    return v.as_uint64() <= INT64_MAX ? std::optional(static_cast<std::int64_t>(v.as_uint64()))
                                      : std::nullopt;
  if (!v.is_string()) return std::nullopt;
  static const std::regex re(R"(^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*$)");
  std::smatch m;
  const std::string s(v.as_string());
  if (!std::regex_match(s, m, re)) return std::nullopt;
  const double n = std::stod(m[1]);
  const std::string unit = m[2];
  const double mult = unit == "KiB"   ? 1024.0
                      : unit == "MiB" ? 1048576.0
                      : unit == "GiB" ? 1073741824.0
                      : unit == "KB"  ? 1e3
                      : unit == "MB"  ? 1e6
                      : unit == "GB"  ? 1e9
                                      : 1.0;
  const double bytes = n * mult;
  if (!(bytes < 9.2e18)) return std::nullopt;  // past INT64_MAX
  return static_cast<std::int64_t>(bytes);
}

JsonFields::JsonFields(std::string file, Locator locate, std::size_t max_diagnostics)
    : file_(std::move(file)), locate_(std::move(locate)), max_(max_diagnostics) {}

void JsonFields::error(std::string_view pointer, std::string message) {
  if (diagnostics_.size() >= max_) {
    ++suppressed_;
    return;
  }
  Diagnostic d{file_, 0, 0, std::string(pointer), std::move(message)};
  if (locate_) {
    const JsonLocation loc = locate_(pointer);
    d.line = loc.line;
    d.column = loc.column;
  }
  diagnostics_.push_back(std::move(d));
}

void JsonFields::add(Diagnostic d) {
  if (diagnostics_.size() >= max_) {
    ++suppressed_;
    return;
  }
  diagnostics_.push_back(std::move(d));
}

std::vector<Diagnostic> JsonFields::diagnostics() const {
  std::vector<Diagnostic> out = diagnostics_;
  if (suppressed_)
    out.push_back({file_, 0, 0, "",
                   file_ + ": " + std::to_string(suppressed_) + " more error" +
                       (suppressed_ == 1 ? "" : "s") + " not shown"});
  return out;
}

std::string JsonFields::report() const {
  std::string s;
  for (const auto& d : diagnostics()) s += (s.empty() ? "" : "\n") + d.to_string();
  return s;
}

void JsonFields::check_keys(const json::object& o, std::string_view ptr,
                            std::span<const std::string_view> allowed) {
  for (const auto& [k, v] : o) {
    if (std::find(allowed.begin(), allowed.end(), std::string_view(k)) != allowed.end()) continue;
    std::string msg = "unknown key '" + std::string(k) + "'";
    if (auto m = did_you_mean(k, allowed); !m.empty()) {
      msg += m;
    } else {
      msg += " (expected one of: ";
      for (std::size_t i = 0; i < allowed.size(); ++i)
        msg += (i ? ", " : "") + std::string(allowed[i]);
      msg += ")";
    }
    error(json_pointer_append(ptr, k), std::move(msg));
  }
}

const json::object* JsonFields::object_at(const json::object& o, std::string_view key,
                                          std::string_view ptr, bool required) {
  const json::value* v = o.if_contains(key);
  if (!v) {
    if (required) error(ptr, "missing required key '" + std::string(key) + "'");
    return nullptr;
  }
  if (!v->is_object()) {
    error(json_pointer_append(ptr, key),
          std::string("expected an object, got ") + json_kind_phrase(*v));
    return nullptr;
  }
  return &v->as_object();
}

std::optional<std::string> JsonFields::string_at(const json::object& o, std::string_view key,
                                                 std::string_view ptr, bool required) {
  const json::value* v = o.if_contains(key);
  if (!v) {
    if (required) error(ptr, "missing required key '" + std::string(key) + "'");
    return std::nullopt;
  }
  if (!v->is_string()) {
    error(json_pointer_append(ptr, key),
          std::string("expected a string, got ") + json_kind_phrase(*v));
    return std::nullopt;
  }
  return std::string(v->as_string());
}

std::optional<std::int64_t> JsonFields::int_at(const json::object& o, std::string_view key,
                                               std::string_view ptr, std::int64_t min,
                                               std::int64_t max) {
  const json::value* v = o.if_contains(key);
  if (!v) return std::nullopt;
  std::optional<std::int64_t> n;
  if (v->is_int64())
    n = v->as_int64();
  else if (v->is_uint64() && v->as_uint64() <= INT64_MAX)
    n = static_cast<std::int64_t>(v->as_uint64());
  if (!n) {
    error(json_pointer_append(ptr, key),
          std::string("expected an integer, got ") + json_kind_phrase(*v));
    return std::nullopt;
  }
  if (*n < min) {
    error(json_pointer_append(ptr, key),
          "must be at least " + std::to_string(min) + ", got " + std::to_string(*n));
    return std::nullopt;
  }
  if (*n > max) {
    error(json_pointer_append(ptr, key),
          "must be at most " + std::to_string(max) + ", got " + std::to_string(*n));
    return std::nullopt;
  }
  return n;
}

std::optional<std::int64_t> JsonFields::ms_at(const json::object& o, std::string_view key,
                                              std::string_view ptr, std::int64_t min) {
  const json::value* v = o.if_contains(key);
  if (v && (v->is_int64() || v->is_uint64()) &&
      (v->is_uint64() ? v->as_uint64() > static_cast<std::uint64_t>(kMaxMilliseconds)
                      : v->as_int64() > kMaxMilliseconds)) {
    error(json_pointer_append(ptr, key), "must be at most " + std::to_string(kMaxMilliseconds) +
                                             " (30 days), got " + json::serialize(*v));
    return std::nullopt;
  }
  return int_at(o, key, ptr, min);
}

std::optional<double> JsonFields::number_at(const json::object& o, std::string_view key,
                                            std::string_view ptr) {
  const json::value* v = o.if_contains(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    error(json_pointer_append(ptr, key),
          std::string("expected a number, got ") + json_kind_phrase(*v));
    return std::nullopt;
  }
  return v->to_number<double>();
}

std::optional<bool> JsonFields::bool_at(const json::object& o, std::string_view key,
                                        std::string_view ptr) {
  const json::value* v = o.if_contains(key);
  if (!v) return std::nullopt;
  if (!v->is_bool()) {
    error(json_pointer_append(ptr, key),
          std::string("expected true or false, got ") + json_kind_phrase(*v));
    return std::nullopt;
  }
  return v->as_bool();
}

std::optional<std::int64_t> JsonFields::bytes_at(const json::object& o, std::string_view key,
                                                 std::string_view ptr) {
  const json::value* v = o.if_contains(key);
  if (!v) return std::nullopt;
  auto n = parse_byte_size(*v);
  if (!n) error(json_pointer_append(ptr, key), "expected a byte size like 4096 or \"256MiB\"");
  return n;
}

std::optional<std::vector<std::string>> JsonFields::strings_at(const json::object& o,
                                                               std::string_view key,
                                                               std::string_view ptr) {
  const json::value* v = o.if_contains(key);
  if (!v) return std::nullopt;
  const std::string p = json_pointer_append(ptr, key);
  if (!v->is_array()) {
    error(p, std::string("expected an array of strings, got ") + json_kind_phrase(*v));
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  for (std::size_t i = 0; i < v->as_array().size(); ++i) {
    const auto& x = v->as_array()[i];
    if (x.is_string()) {
      out.emplace_back(x.as_string());
    } else {
      error(json_pointer_append(p, i),
            std::string("expected a string, got ") + json_kind_phrase(x));
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<std::map<std::string, std::string>> JsonFields::string_map_at(const json::object& o,
                                                                            std::string_view key,
                                                                            std::string_view ptr) {
  const json::value* v = o.if_contains(key);
  if (!v) return std::nullopt;
  const std::string p = json_pointer_append(ptr, key);
  if (!v->is_object()) {
    error(p, std::string("expected an object of strings, got ") + json_kind_phrase(*v));
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  bool ok = true;
  for (const auto& [k, x] : v->as_object()) {
    if (x.is_string()) {
      out[std::string(k)] = std::string(x.as_string());
    } else {
      error(json_pointer_append(p, k),
            std::string("expected a string, got ") + json_kind_phrase(x));
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace weir
