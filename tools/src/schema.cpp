#include "weir/tools/schema.hpp"

#include <cmath>
#include <string>

#include <boost/json/serialize.hpp>

#include "utf8.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::tools {

namespace json = boost::json;

namespace {

std::string where(const std::string& pointer) {
  return pointer.empty() ? "(root)" : pointer;
}

Status fail(const std::string& pointer, const std::string& what) {
  return Error(Errc::invalid_argument, where(pointer) + ": " + what);
}

std::string number_text(const json::value& v) {
  return json::serialize(v);
}

double as_double(const json::value& v) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  return v.get_double();
}

bool is_integral(const json::value& v) {
  if (v.is_int64() || v.is_uint64()) return true;
  if (!v.is_double()) return false;
  const double d = v.get_double();
  return std::isfinite(d) && std::floor(d) == d;
}

bool type_matches(std::string_view type, const json::value& v) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return is_integral(v);
  if (type == "boolean") return v.is_bool();
  if (type == "null") return v.is_null();
  return false;
}

bool known_type(std::string_view t) {
  return t == "object" || t == "array" || t == "string" || t == "number" || t == "integer" ||
         t == "boolean" || t == "null";
}

// JSON equality for enum (numbers compare by value, so 1 matches 1.0).
bool json_equal(const json::value& a, const json::value& b) {
  if (a.is_number() && b.is_number()) return as_double(a) == as_double(b);
  return a == b;
}

Status validate_at(const json::object& schema, const json::value& v, const std::string& ptr) {
  if (const auto* t = schema.if_contains("type")) {
    if (t->is_string()) {
      if (!type_matches(t->get_string(), v)) {
        if (t->get_string() == "integer" && v.is_number())
          return fail(ptr, "expected integer, got " + number_text(v));
        return fail(ptr, "expected " + std::string(t->get_string()) + ", got " + json_type_name(v));
      }
    } else if (t->is_array()) {
      bool any = false;
      std::string names;
      for (const auto& x : t->get_array()) {
        if (!x.is_string()) continue;
        any = any || type_matches(x.get_string(), v);
        names += (names.empty() ? "" : " or ") + std::string(x.get_string());
      }
      if (!any) return fail(ptr, "expected " + names + ", got " + json_type_name(v));
    }
  }
  if (const auto* e = schema.if_contains("enum"); e && e->is_array()) {
    bool found = false;
    std::string options;
    for (const auto& x : e->get_array()) {
      found = found || json_equal(x, v);
      options += (options.empty() ? "" : ", ") + json::serialize(x);
    }
    if (!found) return fail(ptr, "expected one of " + options + ", got " + json::serialize(v));
  }
  if (v.is_number()) {
    const double d = as_double(v);
    if (const auto* m = schema.if_contains("minimum"); m && m->is_number() && d < as_double(*m))
      return fail(ptr, number_text(v) + " is less than the minimum " + number_text(*m));
    if (const auto* m = schema.if_contains("maximum"); m && m->is_number() && d > as_double(*m))
      return fail(ptr, number_text(v) + " is greater than the maximum " + number_text(*m));
  }
  if (v.is_string()) {
    const std::size_t n = detail::utf8_length(v.get_string());
    if (const auto* m = schema.if_contains("minLength");
        m && is_integral(*m) && static_cast<double>(n) < as_double(*m))
      return fail(ptr, "string of " + std::to_string(n) + " characters is shorter than minLength " +
                           number_text(*m));
    if (const auto* m = schema.if_contains("maxLength");
        m && is_integral(*m) && static_cast<double>(n) > as_double(*m))
      return fail(ptr, "string of " + std::to_string(n) + " characters is longer than maxLength " +
                           number_text(*m));
  }
  if (v.is_array()) {
    const auto& a = v.get_array();
    if (const auto* m = schema.if_contains("minItems");
        m && is_integral(*m) && static_cast<double>(a.size()) < as_double(*m))
      return fail(ptr, "array of " + std::to_string(a.size()) + " items is shorter than minItems " +
                           number_text(*m));
    if (const auto* m = schema.if_contains("maxItems");
        m && is_integral(*m) && static_cast<double>(a.size()) > as_double(*m))
      return fail(ptr, "array of " + std::to_string(a.size()) + " items is longer than maxItems " +
                           number_text(*m));
    if (const auto* items = schema.if_contains("items"); items && items->is_object()) {
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (auto s = validate_at(items->get_object(), a[i], json_pointer_append(ptr, i)); !s)
          return s;
      }
    }
  }
  if (v.is_object()) {
    const auto& o = v.get_object();
    const json::object* props = nullptr;
    if (const auto* p = schema.if_contains("properties"); p && p->is_object())
      props = &p->get_object();
    if (const auto* r = schema.if_contains("required"); r && r->is_array()) {
      for (const auto& name : r->get_array()) {
        if (name.is_string() && !o.contains(name.get_string()))
          return fail(json_pointer_append(ptr, name.get_string()), "missing required property");
      }
    }
    const auto* extra = schema.if_contains("additionalProperties");
    for (const auto& [key, x] : o) {
      const std::string child = json_pointer_append(ptr, key);
      if (props) {
        if (const auto* ps = props->if_contains(key)) {
          if (ps->is_object()) {
            if (auto s = validate_at(ps->get_object(), x, child); !s) return s;
          }
          continue;
        }
      }
      if (!extra) continue;
      if (extra->is_bool() && !extra->get_bool()) {
        std::string allowed;
        if (props)
          for (const auto& [k, unused] : *props)
            allowed += (allowed.empty() ? "" : ", ") + std::string(k);
        return fail(child, "unexpected property (allowed: " +
                               (allowed.empty() ? std::string("none") : allowed) + ")");
      }
      if (extra->is_object()) {
        if (auto s = validate_at(extra->get_object(), x, child); !s) return s;
      }
    }
  }
  return {};
}

Status bad_keyword(const std::string& ptr, const char* expected, const json::value& got) {
  return Error(Errc::invalid_argument,
               "schema " + where(ptr) + ": expected " + expected + ", got " + json_type_name(got));
}

Status check_at(const json::object& schema, const std::string& ptr, int depth) {
  if (depth > 64)
    return Error(Errc::invalid_argument, "schema " + where(ptr) + ": nested too deeply");
  for (const auto& [key, v] : schema) {
    const std::string p = json_pointer_append(ptr, key);
    if (key == "type") {
      if (v.is_string()) {
        if (!known_type(v.get_string()))
          return Error(Errc::invalid_argument,
                       "schema " + p + ": unknown type \"" + std::string(v.get_string()) + "\"");
      } else if (v.is_array()) {
        for (std::size_t i = 0; i < v.get_array().size(); ++i) {
          const auto& x = v.get_array()[i];
          if (!x.is_string()) return bad_keyword(json_pointer_append(p, i), "a string", x);
          if (!known_type(x.get_string()))
            return Error(Errc::invalid_argument, "schema " + json_pointer_append(p, i) +
                                                     ": unknown type \"" +
                                                     std::string(x.get_string()) + "\"");
        }
      } else {
        return bad_keyword(p, "a string or an array of strings", v);
      }
    } else if (key == "properties") {
      if (!v.is_object()) return bad_keyword(p, "an object", v);
      for (const auto& [name, sub] : v.get_object()) {
        const std::string q = json_pointer_append(p, name);
        if (!sub.is_object()) return bad_keyword(q, "an object (a schema)", sub);
        if (auto s = check_at(sub.get_object(), q, depth + 1); !s) return s;
      }
    } else if (key == "required") {
      if (!v.is_array()) return bad_keyword(p, "an array of strings", v);
      for (std::size_t i = 0; i < v.get_array().size(); ++i)
        if (!v.get_array()[i].is_string())
          return bad_keyword(json_pointer_append(p, i), "a string", v.get_array()[i]);
    } else if (key == "additionalProperties") {
      if (v.is_object()) {
        if (auto s = check_at(v.get_object(), p, depth + 1); !s) return s;
      } else if (!v.is_bool()) {
        return bad_keyword(p, "a boolean or an object (a schema)", v);
      }
    } else if (key == "items") {
      if (!v.is_object()) return bad_keyword(p, "an object (a schema)", v);
      if (auto s = check_at(v.get_object(), p, depth + 1); !s) return s;
    } else if (key == "enum") {
      if (!v.is_array()) return bad_keyword(p, "an array", v);
    } else if (key == "minimum" || key == "maximum") {
      if (!v.is_number()) return bad_keyword(p, "a number", v);
    } else if (key == "minLength" || key == "maxLength" || key == "minItems" || key == "maxItems") {
      if (!is_integral(v) || as_double(v) < 0) {
        if (v.is_number())
          return Error(
              Errc::invalid_argument,
              "schema " + p + ": expected a non-negative integer, got " + json::serialize(v));
        return bad_keyword(p, "a non-negative integer", v);
      }
    }
  }
  return {};
}

}  // namespace

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

Status validate(const json::value& schema, const json::value& v) {
  if (!schema.is_object()) return {};
  return validate_at(schema.get_object(), v, "");
}

Status check_schema(const json::object& schema) {
  return check_at(schema, "", 0);
}

}  // namespace weir::tools
