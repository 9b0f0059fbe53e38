#include "weir/tools/schema.hpp"

#include <cmath>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/json/serialize.hpp>

#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/text.hpp"

namespace weir::tools {

namespace json = boost::json;

namespace {

// Compiled patterns, keyed by the schema node they came from: the "pattern" string, or the
// sub-schema a "patternProperties" name maps to.
using RegexMap = std::unordered_map<const json::value*, std::regex>;

// Bounds the C++ recursion whatever the schema does (each level is a few stack frames).
constexpr std::size_t kMaxFrames = 1024;
// A branch's problem, as oneOf/anyOf repeat it, is cut to this many bytes.
constexpr std::size_t kMaxBranchMessage = 240;

std::string where(const std::string& pointer) {
  return pointer.empty() ? "(root)" : pointer;
}

Status fail(const std::string& pointer, const std::string& what) {
  return Error(Errc::invalid_argument, where(pointer) + ": " + what);
}

std::string number_text(const json::value& v) {
  return json::serialize(v);
}

// `s` as a JSON string, cut (on a character boundary) when it is long.
std::string quoted(std::string_view s, std::size_t max = 64) {
  if (s.size() <= max) return json::serialize(json::string(s));
  std::string q = json::serialize(json::string(s.substr(0, utf8_cut(s, max))));
  q.insert(q.size() - 1, "...");
  return q;
}

std::string cut(std::string s, std::size_t max) {
  if (s.size() <= max) return s;
  s.resize(utf8_cut(s, max));
  return s + "...";
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

// JSON equality for enum, const and uniqueItems: numbers compare by value (1 equals 1.0), at
// any depth; object member order does not matter.
bool json_equal(const json::value& a, const json::value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_double() || b.is_double()) return as_double(a) == as_double(b);
    if (a.is_int64() && b.is_int64()) return a.get_int64() == b.get_int64();
    if (a.is_uint64() && b.is_uint64()) return a.get_uint64() == b.get_uint64();
    const auto& s = a.is_int64() ? a : b;  // one signed, one unsigned
    const auto& u = a.is_int64() ? b : a;
    return s.get_int64() >= 0 && static_cast<std::uint64_t>(s.get_int64()) == u.get_uint64();
  }
  if (a.kind() != b.kind()) return false;
  if (a.is_array()) {
    const auto &x = a.get_array(), &y = b.get_array();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!json_equal(x[i], y[i])) return false;
    return true;
  }
  if (a.is_object()) {
    const auto &x = a.get_object(), &y = b.get_object();
    if (x.size() != y.size()) return false;
    for (const auto& [k, xv] : x) {
      const auto* yv = y.if_contains(k);
      if (!yv || !json_equal(xv, *yv)) return false;
    }
    return true;
  }
  return a == b;
}

bool is_multiple(const json::value& v, const json::value& m) {
  if ((v.is_int64() || v.is_uint64()) && (m.is_int64() || m.is_uint64())) {
    if (v.is_int64() && m.is_int64() && m.get_int64() != 0)
      return v.get_int64() % m.get_int64() == 0;
    if (v.is_uint64() && m.is_uint64() && m.get_uint64() != 0)
      return v.get_uint64() % m.get_uint64() == 0;
  }
  const double q = as_double(v) / as_double(m);
  if (!std::isfinite(q)) return false;
  return std::fabs(q - std::round(q)) <= 1e-9 * std::max(1.0, std::fabs(q));
}

std::string and_list(const std::vector<std::size_t>& xs) {
  std::string s;
  for (std::size_t i = 0; i < xs.size(); ++i)
    s += (i == 0 ? "" : i + 1 == xs.size() ? " and " : ", ") + std::to_string(xs[i]);
  return s;
}

// Decodes one token of a URI-fragment JSON pointer: %XX first, then ~1 and ~0.
std::optional<std::string> pointer_token(std::string_view raw) {
  std::string pct;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '%') {
      pct += raw[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= raw.size()) return std::nullopt;
    const int hi = hex(raw[i + 1]), lo = hex(raw[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    pct += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  std::string out;
  for (std::size_t i = 0; i < pct.size(); ++i) {
    if (pct[i] != '~') {
      out += pct[i];
    } else if (i + 1 < pct.size() && (pct[i + 1] == '0' || pct[i + 1] == '1')) {
      out += pct[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// What a local "$ref" ("#", "#/$defs/x", "#/any/json/pointer") points at in `root`: nullopt
// when it does not resolve, a null pointer for the root itself.
std::optional<const json::value*> resolve_ref(const json::object& root, std::string_view ref) {
  if (ref.empty() || ref[0] != '#') return std::nullopt;
  ref.remove_prefix(1);
  if (ref.empty()) return static_cast<const json::value*>(nullptr);
  if (ref[0] != '/') return std::nullopt;
  const json::object* obj = &root;
  const json::value* at = nullptr;
  while (!ref.empty()) {
    ref.remove_prefix(1);
    const auto slash = ref.find('/');
    auto token = pointer_token(ref.substr(0, slash));
    ref = slash == std::string_view::npos ? std::string_view() : ref.substr(slash);
    if (!token) return std::nullopt;
    if (obj) {
      at = obj->if_contains(*token);
    } else if (at && at->is_array()) {
      const auto& a = at->get_array();
      std::size_t i = 0;
      if (token->empty() || (token->size() > 1 && (*token)[0] == '0')) return std::nullopt;
      for (char c : *token) {
        if (c < '0' || c > '9' || i > a.size()) return std::nullopt;
        i = i * 10 + static_cast<std::size_t>(c - '0');
      }
      at = i < a.size() ? &a[i] : nullptr;
    } else {
      return std::nullopt;
    }
    if (!at) return std::nullopt;
    obj = at->if_object();
  }
  return at;
}

std::string unresolved_ref(std::string_view ref) {
  if (ref.empty() || ref[0] != '#')
    return "cannot resolve $ref " + quoted(ref) +
           " (only local references, \"#/$defs/name\", are supported)";
  return "cannot resolve $ref " + quoted(ref) + " (no such definition in the schema)";
}

// libstdc++'s default executor backtracks with one stack frame per input character, which
// overflows the stack on strings of a few thousand bytes; __polynomial selects its Thompson-NFA
// executor instead (bounded stack, time linear in the input), which refuses back-references.
#if defined(__GLIBCXX__)
constexpr auto kRegexFlags = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
#error "schema.cpp needs libstdc++'s polynomial regex executor (see kMaxPatternInput)"
#endif

// Compiles `pattern`; the message says why it is not a valid ECMAScript regex.
Result<std::regex> compile_regex(std::string_view pattern) {
  try {
    return std::regex(pattern.begin(), pattern.end(), kRegexFlags);
  } catch (const std::regex_error& e) {
    return Error(Errc::invalid_argument,
                 "invalid regular expression " + quoted(pattern) + ": " + e.what());
  }
}

class Validator {
 public:
  Validator(const json::value& root, const RegexMap* compiled) : root_(root), compiled_(compiled) {}

  Status run(const json::value& schema, const json::value& v) { return at(schema, v, "", 0); }

 private:
  struct RefFrame {
    const json::value* target;
    const json::value* instance;
    std::string_view ref;
  };

  // Counts the frames in progress (see kMaxFrames).
  struct FrameGuard {
    explicit FrameGuard(std::size_t& n) : n_(++n) {}
    ~FrameGuard() { --n_; }
    std::size_t& n_;
  };

  Status at(const json::value& schema, const json::value& v, const std::string& ptr,
            std::size_t depth) {
    if (schema.is_bool()) {
      if (schema.get_bool()) return {};
      return fail(ptr, "no value is allowed here (the schema is false)");
    }
    const auto* s = schema.if_object();
    if (!s) return {};
    FrameGuard guard(frames_);
    if (frames_ > kMaxFrames)
      return fail(ptr, "the schema and the value nest too deeply to validate (more than " +
                           std::to_string(kMaxFrames) + " levels)");
    if (depth > kMaxValueDepth)
      return fail(ptr, "value nested more than " + std::to_string(kMaxValueDepth) + " levels deep");
    if (const auto* r = s->if_contains("$ref"); r && r->is_string()) {
      if (auto st = ref(r->get_string(), v, ptr, depth); !st) return st;
    }
    if (auto st = type_and_values(*s, v, ptr); !st) return st;
    if (v.is_number()) {
      if (auto st = number(*s, v, ptr); !st) return st;
    } else if (v.is_string()) {
      if (auto st = string(*s, v.get_string(), ptr); !st) return st;
    } else if (v.is_array()) {
      if (auto st = array(*s, v.get_array(), ptr, depth); !st) return st;
    } else if (v.is_object()) {
      if (auto st = object(*s, v.get_object(), ptr, depth); !st) return st;
    }
    return combinators(*s, v, ptr, depth);
  }

  Status ref(std::string_view r, const json::value& v, const std::string& ptr, std::size_t depth) {
    const auto target_or = root_.is_object() ? resolve_ref(root_.get_object(), r) : std::nullopt;
    if (!target_or) return fail(ptr, unresolved_ref(r));
    const json::value* target = *target_or ? *target_or : &root_;
    for (std::size_t i = 0; i < refs_.size(); ++i) {
      if (refs_[i].target != target || refs_[i].instance != &v) continue;
      std::string chain;
      for (std::size_t j = i; j < refs_.size(); ++j) chain += std::string(refs_[j].ref) + " -> ";
      return fail(ptr, "$ref cycle that consumes no input: " + chain + std::string(r));
    }
    if (refs_.size() >= kMaxRefDepth)
      return fail(ptr, "more than " + std::to_string(kMaxRefDepth) + " nested $refs (at " +
                           quoted(r) + ")");
    refs_.push_back({target, &v, r});
    auto st = at(*target, v, ptr, depth);
    refs_.pop_back();
    return st;
  }

  Status type_and_values(const json::object& s, const json::value& v, const std::string& ptr) {
    if (const auto* t = s.if_contains("type")) {
      if (t->is_string()) {
        if (!type_matches(t->get_string(), v)) {
          if (t->get_string() == "integer" && v.is_number())
            return fail(ptr, "expected integer, got " + number_text(v));
          return fail(ptr,
                      "expected " + std::string(t->get_string()) + ", got " + json_type_name(v));
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
    if (const auto* e = s.if_contains("enum"); e && e->is_array()) {
      bool found = false;
      std::string options;
      for (const auto& x : e->get_array()) {
        found = found || json_equal(x, v);
        options += (options.empty() ? "" : ", ") + json::serialize(x);
      }
      if (!found)
        return fail(ptr, "expected one of " + options + ", got " + cut(json::serialize(v), 80));
    }
    if (const auto* c = s.if_contains("const"); c && !json_equal(*c, v))
      return fail(
          ptr, "expected " + cut(json::serialize(*c), 80) + ", got " + cut(json::serialize(v), 80));
    return {};
  }

  Status number(const json::object& s, const json::value& v, const std::string& ptr) {
    const double d = as_double(v);
    if (const auto* m = s.if_contains("minimum"); m && m->is_number() && d < as_double(*m))
      return fail(ptr, number_text(v) + " is less than the minimum " + number_text(*m));
    if (const auto* m = s.if_contains("maximum"); m && m->is_number() && d > as_double(*m))
      return fail(ptr, number_text(v) + " is greater than the maximum " + number_text(*m));
    if (const auto* m = s.if_contains("exclusiveMinimum");
        m && m->is_number() && d <= as_double(*m))
      return fail(ptr,
                  number_text(v) + " is not greater than the exclusive minimum " + number_text(*m));
    if (const auto* m = s.if_contains("exclusiveMaximum");
        m && m->is_number() && d >= as_double(*m))
      return fail(ptr,
                  number_text(v) + " is not less than the exclusive maximum " + number_text(*m));
    if (const auto* m = s.if_contains("multipleOf");
        m && m->is_number() && as_double(*m) > 0 && !is_multiple(v, *m))
      return fail(ptr, number_text(v) + " is not a multiple of " + number_text(*m));
    return {};
  }

  Status string(const json::object& s, json::string_view str, const std::string& ptr) {
    const std::size_t n = utf8_length(str);
    if (const auto* m = s.if_contains("minLength");
        m && is_integral(*m) && static_cast<double>(n) < as_double(*m))
      return fail(ptr, "string of " + std::to_string(n) + " characters is shorter than minLength " +
                           number_text(*m));
    if (const auto* m = s.if_contains("maxLength");
        m && is_integral(*m) && static_cast<double>(n) > as_double(*m))
      return fail(ptr, "string of " + std::to_string(n) + " characters is longer than maxLength " +
                           number_text(*m));
    if (const auto* p = s.if_contains("pattern"); p && p->is_string()) {
      auto matched = matches(*p, p->get_string(), str);
      if (!matched) return fail(ptr, matched.error().message);
      if (!*matched)
        return fail(ptr,
                    quoted(str) + " does not match the pattern " + quoted(p->get_string(), 200));
    }
    return {};
  }

  Status array(const json::object& s, const json::array& a, const std::string& ptr,
               std::size_t depth) {
    if (const auto* m = s.if_contains("minItems");
        m && is_integral(*m) && static_cast<double>(a.size()) < as_double(*m))
      return fail(ptr, "array of " + std::to_string(a.size()) + " items is shorter than minItems " +
                           number_text(*m));
    if (const auto* m = s.if_contains("maxItems");
        m && is_integral(*m) && static_cast<double>(a.size()) > as_double(*m))
      return fail(ptr, "array of " + std::to_string(a.size()) + " items is longer than maxItems " +
                           number_text(*m));
    if (const auto* u = s.if_contains("uniqueItems"); u && u->is_bool() && u->get_bool()) {
      for (std::size_t i = 0; i < a.size(); ++i)
        for (std::size_t j = i + 1; j < a.size(); ++j)
          if (json_equal(a[i], a[j]))
            return fail(ptr, "items " + std::to_string(i) + " and " + std::to_string(j) +
                                 " are equal (uniqueItems)");
    }
    std::size_t first = 0;
    if (const auto* p = s.if_contains("prefixItems"); p && p->is_array()) {
      const auto& prefix = p->get_array();
      for (; first < prefix.size() && first < a.size(); ++first)
        if (auto st = at(prefix[first], a[first], json_pointer_append(ptr, first), depth + 1); !st)
          return st;
      first = prefix.size();
    }
    if (const auto* items = s.if_contains("items")) {
      for (std::size_t i = first; i < a.size(); ++i)
        if (auto st = at(*items, a[i], json_pointer_append(ptr, i), depth + 1); !st) return st;
    }
    return {};
  }

  Status object(const json::object& s, const json::object& o, const std::string& ptr,
                std::size_t depth) {
    if (const auto* r = s.if_contains("required"); r && r->is_array()) {
      for (const auto& name : r->get_array()) {
        if (name.is_string() && !o.contains(name.get_string()))
          return fail(json_pointer_append(ptr, name.get_string()), "missing required property");
      }
    }
    if (const auto* m = s.if_contains("minProperties");
        m && is_integral(*m) && static_cast<double>(o.size()) < as_double(*m))
      return fail(ptr, "object of " + std::to_string(o.size()) +
                           " properties has fewer than minProperties " + number_text(*m));
    if (const auto* m = s.if_contains("maxProperties");
        m && is_integral(*m) && static_cast<double>(o.size()) > as_double(*m))
      return fail(ptr, "object of " + std::to_string(o.size()) +
                           " properties has more than maxProperties " + number_text(*m));
    const json::object* props = nullptr;
    if (const auto* p = s.if_contains("properties"); p && p->is_object()) props = &p->get_object();
    const json::object* patterns = nullptr;
    if (const auto* p = s.if_contains("patternProperties"); p && p->is_object())
      patterns = &p->get_object();
    const auto* names = s.if_contains("propertyNames");
    const auto* extra = s.if_contains("additionalProperties");
    for (const auto& [key, x] : o) {
      const std::string child = json_pointer_append(ptr, key);
      if (names) {
        const json::value name(key);
        if (auto st = at(*names, name, "", depth + 1); !st) {
          std::string why = st.error().message;
          if (why.rfind("(root): ", 0) == 0) why.erase(0, 8);
          return fail(child, "invalid property name: " + why);
        }
      }
      bool matched = false;
      if (props) {
        if (const auto* ps = props->if_contains(key)) {
          matched = true;
          if (auto st = at(*ps, x, child, depth + 1); !st) return st;
        }
      }
      if (patterns) {
        for (const auto& [pattern, sub] : *patterns) {
          auto m = matches(sub, pattern, key);
          if (!m) return fail(child, m.error().message);
          if (!*m) continue;
          matched = true;
          if (auto st = at(sub, x, child, depth + 1); !st) return st;
        }
      }
      if (matched || !extra) continue;
      if (extra->is_bool() && !extra->get_bool()) {
        std::string allowed;
        if (props)
          for (const auto& [k, unused] : *props)
            allowed += (allowed.empty() ? "" : ", ") + std::string(k);
        if (patterns)
          for (const auto& [pattern, unused] : *patterns)
            allowed += (allowed.empty() ? "" : ", ") + std::string("names matching ") +
                       quoted(pattern, 200);
        return fail(child, "unexpected property (allowed: " +
                               (allowed.empty() ? std::string("none") : allowed) + ")");
      }
      if (auto st = at(*extra, x, child, depth + 1); !st) return st;
    }
    return {};
  }

  Status combinators(const json::object& s, const json::value& v, const std::string& ptr,
                     std::size_t depth) {
    if (const auto* all = s.if_contains("allOf"); all && all->is_array()) {
      for (const auto& b : all->get_array())
        if (auto st = at(b, v, ptr, depth); !st) return st;
    }
    if (const auto* any = s.if_contains("anyOf"); any && any->is_array()) {
      std::string why;
      bool ok = false;
      for (std::size_t i = 0; i < any->get_array().size() && !ok; ++i) {
        auto st = at(any->get_array()[i], v, ptr, depth);
        ok = static_cast<bool>(st);
        if (!ok) why += branch(i, st);
      }
      if (!ok) return fail(ptr, "matches none of the anyOf branches (" + why + ")");
    }
    if (const auto* one = s.if_contains("oneOf"); one && one->is_array()) {
      std::string why;
      std::vector<std::size_t> matched;
      for (std::size_t i = 0; i < one->get_array().size(); ++i) {
        auto st = at(one->get_array()[i], v, ptr, depth);
        if (st)
          matched.push_back(i);
        else
          why += branch(i, st);
      }
      if (matched.empty()) return fail(ptr, "matches none of the oneOf branches (" + why + ")");
      if (matched.size() > 1)
        return fail(ptr, "matches oneOf branches " + and_list(matched) + ", expected exactly one");
    }
    if (const auto* n = s.if_contains("not")) {
      if (at(*n, v, ptr, depth))
        return fail(
            ptr, "must not match the schema under \"not\" (" + cut(json::serialize(*n), 120) + ")");
    }
    if (const auto* i = s.if_contains("if")) {
      const auto* then = s.if_contains("then");
      const auto* otherwise = s.if_contains("else");
      if (then || otherwise) {
        const bool holds = static_cast<bool>(at(*i, v, ptr, depth));
        if (holds && then) return at(*then, v, ptr, depth);
        if (!holds && otherwise) return at(*otherwise, v, ptr, depth);
      }
    }
    return {};
  }

  static std::string branch(std::size_t i, const Status& st) {
    return (i == 0 ? "" : "; ") + std::to_string(i) + ": " +
           cut(st.error().message, kMaxBranchMessage);
  }

  // Whether `pattern` (the regex of schema node `node`) matches somewhere in `s`.
  Result<bool> matches(const json::value& node, std::string_view pattern, std::string_view s) {
    const std::regex* re = nullptr;
    if (compiled_) {
      if (auto it = compiled_->find(&node); it != compiled_->end()) re = &it->second;
    }
    if (!re) {
      auto it = lazy_.find(&node);
      if (it == lazy_.end()) {
        auto r = compile_regex(pattern);
        if (!r) return Error(Errc::invalid_argument, "the schema has an " + r.error().message);
        it = lazy_.emplace(&node, std::move(*r)).first;
      }
      re = &it->second;
    }
    if (s.size() > kMaxPatternInput)
      return Error(Errc::invalid_argument, "string of " + std::to_string(s.size()) +
                                               " bytes is too long to match against the pattern " +
                                               quoted(pattern, 200) + " (at most " +
                                               std::to_string(kMaxPatternInput) + " bytes)");
    try {
      return std::regex_search(s.begin(), s.end(), *re);
    } catch (const std::regex_error& e) {
      return Error(Errc::invalid_argument,
                   "could not match the pattern " + quoted(pattern, 200) + ": " + e.what());
    }
  }

  const json::value& root_;
  const RegexMap* compiled_;  // from Schema::compile, or null
  RegexMap lazy_;             // compiled during this validation
  std::vector<RefFrame> refs_;
  std::size_t frames_ = 0;
};

// ---- check_schema ----

Status bad_keyword(const std::string& ptr, const char* expected, const json::value& got) {
  return Error(Errc::invalid_argument,
               "schema " + where(ptr) + ": expected " + expected + ", got " + json_type_name(got));
}

Status bad_schema(const std::string& ptr, const std::string& what) {
  return Error(Errc::invalid_argument, "schema " + where(ptr) + ": " + what);
}

class Checker {
 public:
  Checker(const json::object& root, RegexMap* out) : root_(root), out_(out) {}

  Status schema(const json::value& v, const std::string& ptr, int depth) {
    if (v.is_bool()) return {};
    if (!v.is_object()) return bad_keyword(ptr, "a schema (an object or a boolean)", v);
    return object(v.get_object(), ptr, depth);
  }

  Status object(const json::object& schema, const std::string& ptr, int depth) {
    if (depth > 64) return bad_schema(ptr, "nested too deeply");
    for (const auto& [key, v] : schema) {
      const std::string p = json_pointer_append(ptr, key);
      if (auto s = keyword(key, v, p, depth); !s) return s;
    }
    return {};
  }

 private:
  Status regex(const json::value& node, std::string_view pattern, const std::string& p) {
    auto r = compile_regex(pattern);
    if (!r) return bad_schema(p, r.error().message);
    if (out_) out_->emplace(&node, std::move(*r));
    return {};
  }

  Status keyword(std::string_view key, const json::value& v, const std::string& p, int depth) {
    if (key == "type") {
      if (v.is_string()) {
        if (!known_type(v.get_string()))
          return bad_schema(p, "unknown type \"" + std::string(v.get_string()) + "\"");
      } else if (v.is_array()) {
        for (std::size_t i = 0; i < v.get_array().size(); ++i) {
          const auto& x = v.get_array()[i];
          if (!x.is_string()) return bad_keyword(json_pointer_append(p, i), "a string", x);
          if (!known_type(x.get_string()))
            return bad_schema(json_pointer_append(p, i),
                              "unknown type \"" + std::string(x.get_string()) + "\"");
        }
      } else {
        return bad_keyword(p, "a string or an array of strings", v);
      }
    } else if (key == "properties" || key == "$defs" || key == "definitions" ||
               key == "patternProperties") {
      if (!v.is_object()) return bad_keyword(p, "an object", v);
      for (const auto& [name, sub] : v.get_object()) {
        const std::string q = json_pointer_append(p, name);
        if (key == "patternProperties")
          if (auto s = regex(sub, name, q); !s) return s;
        if (auto s = schema(sub, q, depth + 1); !s) return s;
      }
    } else if (key == "additionalProperties" || key == "items" || key == "not" || key == "if" ||
               key == "then" || key == "else" || key == "propertyNames") {
      return schema(v, p, depth + 1);
    } else if (key == "allOf" || key == "anyOf" || key == "oneOf" || key == "prefixItems") {
      if (!v.is_array() || v.get_array().empty())
        return bad_keyword(p, "a non-empty array of schemas", v);
      for (std::size_t i = 0; i < v.get_array().size(); ++i)
        if (auto s = schema(v.get_array()[i], json_pointer_append(p, i), depth + 1); !s) return s;
    } else if (key == "required") {
      if (!v.is_array()) return bad_keyword(p, "an array of strings", v);
      for (std::size_t i = 0; i < v.get_array().size(); ++i)
        if (!v.get_array()[i].is_string())
          return bad_keyword(json_pointer_append(p, i), "a string", v.get_array()[i]);
    } else if (key == "enum") {
      if (!v.is_array()) return bad_keyword(p, "an array", v);
    } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" ||
               key == "exclusiveMaximum") {
      if (!v.is_number()) return bad_keyword(p, "a number", v);
    } else if (key == "multipleOf") {
      if (!v.is_number()) return bad_keyword(p, "a number greater than 0", v);
      if (as_double(v) <= 0)
        return bad_schema(p, "expected a number greater than 0, got " + json::serialize(v));
    } else if (key == "minLength" || key == "maxLength" || key == "minItems" || key == "maxItems" ||
               key == "minProperties" || key == "maxProperties") {
      if (!is_integral(v) || as_double(v) < 0) {
        if (v.is_number())
          return bad_schema(p, "expected a non-negative integer, got " + json::serialize(v));
        return bad_keyword(p, "a non-negative integer", v);
      }
    } else if (key == "uniqueItems") {
      if (!v.is_bool()) return bad_keyword(p, "a boolean", v);
    } else if (key == "pattern") {
      if (!v.is_string()) return bad_keyword(p, "a string (a regular expression)", v);
      return regex(v, v.get_string(), p);
    } else if (key == "$ref") {
      if (!v.is_string()) return bad_keyword(p, "a string", v);
      if (!resolve_ref(root_, v.get_string())) return bad_schema(p, unresolved_ref(v.get_string()));
    }
    return {};
  }

  const json::object& root_;
  RegexMap* out_;  // where compiled patterns go, or null
};

}  // namespace

Status validate(const json::value& schema, const json::value& v) {
  return validate(schema, v, schema);
}

Status validate(const json::value& schema, const json::value& v, const json::value& root_schema) {
  Validator validator(root_schema, nullptr);
  return validator.run(schema, v);
}

Status check_schema(const json::object& schema) {
  return Checker(schema, nullptr).object(schema, "", 0);
}

struct Schema::Compiled {
  json::value root;
  RegexMap regexes;  // keyed by nodes of `root`
};

Result<Schema> Schema::compile(json::value schema) {
  auto c = std::make_shared<Compiled>();
  c->root = std::move(schema);
  if (c->root.is_object()) {
    if (auto s = Checker(c->root.get_object(), &c->regexes).object(c->root.get_object(), "", 0); !s)
      return std::move(s).error();
  } else if (!c->root.is_bool()) {
    return bad_keyword("", "a schema (an object or a boolean)", c->root).error();
  }
  return Schema(std::move(c));
}

Status Schema::validate(const json::value& v) const {
  Validator validator(compiled_->root, &compiled_->regexes);
  return validator.run(compiled_->root, v);
}

const json::value& Schema::json() const noexcept {
  return compiled_->root;
}

}  // namespace weir::tools
