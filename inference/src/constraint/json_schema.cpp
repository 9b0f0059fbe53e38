// JSON Schema -> grammar. What is supported and how each keyword is enforced:
// docs/structured-output.md. The rule everywhere: the grammar may allow *less* than the schema
// (e.g. no whitespace beyond one optional space, properties in declared order, integers of
// at most 18 digits), never more; a keyword that cannot be enforced is an error naming it and
// its JSON pointer.
#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "constraint/grammar.hpp"
#include "constraint/json_number.hpp"
#include "constraint/json_schema_compiler.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::inference::constraint {

Sym Compiler::fail(std::string msg) {
  if (!failed) {
    failed = true;
    err = Error(Errc::invalid_argument, std::move(msg));
  }
  return b.empty();
}

const json::value* Compiler::resolve(const std::string& ref, const std::string& ptr) {
  if (ref.empty() || ref[0] != '#') {
    fail("JSON Schema keyword '$ref' at " + at(ptr) +
         ": only local references (\"#/...\") are supported, got '" + ref + "'");
    return nullptr;
  }
  if (ref == "#") return &root;
  boost::system::error_code ec;
  const json::value* v = root.find_pointer(ref.substr(1), ec);
  if (!v) fail("JSON Schema keyword '$ref' at " + at(ptr) + ": '" + ref + "' does not resolve");
  return v;
}

const json::value* Compiler::deref(const json::value* s, const std::string& ptr) {
  for (int hops = 0; s && s->is_object() && s->as_object().contains("$ref"); ++hops) {
    const json::value& r = s->as_object().at("$ref");
    if (!r.is_string()) {
      fail("JSON Schema keyword '$ref' at " + at(ptr) + " must be a string");
      return nullptr;
    }
    if (hops == 32) {
      fail("JSON Schema keyword '$ref' at " + at(ptr) + ": '" + std::string(r.as_string()) +
           "' refers to itself through 32 or more bare references");
      return nullptr;
    }
    s = resolve(std::string(r.as_string()), ptr);
  }
  return s;
}

bool Compiler::annotation(std::string_view k) {
  static const std::set<std::string_view> a = {
      "$schema",    "$id",      "$comment",  "title", "description", "default", "examples",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor"};
  return a.count(k) > 0;
}

bool Compiler::supported(std::string_view k) {
  static const std::set<std::string_view> s = {"type",
                                               "properties",
                                               "required",
                                               "additionalProperties",
                                               "items",
                                               "prefixItems",
                                               "minItems",
                                               "maxItems",
                                               "uniqueItems",
                                               "enum",
                                               "const",
                                               "anyOf",
                                               "oneOf",
                                               "allOf",
                                               "$ref",
                                               "minLength",
                                               "maxLength",
                                               "pattern",
                                               "format",
                                               "minimum",
                                               "maximum",
                                               "exclusiveMinimum",
                                               "exclusiveMaximum"};
  return s.count(k) > 0;
}

json::value Compiler::merge(const json::value& a0, const json::value& b0, const std::string& ptr,
                            int depth) {
  if (depth > 32) {
    fail("allOf at " + at(ptr) + " nests too deeply");
    return json::object();
  }
  const json::value* a = &a0;
  const json::value* bb = &b0;
  for (auto** x : {&a, &bb}) {
    *x = deref(*x, ptr);
    if (!*x || failed) return json::object();
    if ((*x)->is_bool()) {
      if (!(*x)->as_bool()) return json::value(false);
    }
  }
  if (a->is_bool()) return *bb;
  if (bb->is_bool()) return *a;
  if (!a->is_object() || !bb->is_object()) {
    fail("allOf at " + at(ptr) + ": every branch must be a schema object");
    return json::object();
  }
  json::object out = a->as_object();
  const auto& bo = bb->as_object();
  auto extra_ok = [&](const json::object& with_addl, const json::object& other) {
    if (!with_addl.contains("additionalProperties")) return true;
    const auto* wp = with_addl.if_contains("properties");
    const auto* op = other.if_contains("properties");
    if (!op || !op->is_object()) return true;
    for (const auto& kv : op->as_object())
      if (!wp || !wp->is_object() || !wp->as_object().contains(kv.key())) return false;
    return true;
  };
  if (!extra_ok(a->as_object(), bo) || !extra_ok(bo, a->as_object())) {
    fail("allOf at " + at(ptr) +
         ": a branch with additionalProperties cannot be combined with "
         "properties it does not declare");
    return json::object();
  }
  for (const auto& kv : bo) {
    const std::string_view k = kv.key();
    auto* cur = out.if_contains(k);
    if (!cur) {
      out[k] = kv.value();
      continue;
    }
    if (*cur == kv.value()) continue;
    if (k == "required" && cur->is_array() && kv.value().is_array()) {
      for (const auto& x : kv.value().as_array())
        if (std::find(cur->as_array().begin(), cur->as_array().end(), x) == cur->as_array().end())
          cur->as_array().push_back(x);
    } else if (k == "properties" && cur->is_object() && kv.value().is_object()) {
      for (const auto& p : kv.value().as_object()) {
        auto* q = cur->as_object().if_contains(p.key());
        if (!q)
          cur->as_object()[p.key()] = p.value();
        else if (*q != p.value()) {
          json::value m = merge(
              *q, p.value(), json_pointer_append(json_pointer_append(ptr, "properties"), p.key()),
              depth + 1);
          cur->as_object()[p.key()] = std::move(m);
        }
      }
    } else if ((k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") &&
               cur->is_number() && kv.value().is_number()) {
      if (kv.value().to_number<double>() > cur->to_number<double>()) *cur = kv.value();
    } else if ((k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") &&
               cur->is_number() && kv.value().is_number()) {
      if (kv.value().to_number<double>() < cur->to_number<double>()) *cur = kv.value();
    } else if (k == "type") {
      auto set = [](const json::value& t) {
        std::set<std::string> s;
        if (t.is_string())
          s.insert(std::string(t.as_string()));
        else if (t.is_array())
          for (const auto& x : t.as_array())
            if (x.is_string()) s.insert(std::string(x.as_string()));
        return s;
      };
      auto s1 = set(*cur), s2 = set(kv.value());
      json::array both;
      for (const auto& t : s1) {
        if (s2.count(t))
          both.emplace_back(t);
        else if (t == "number" && s2.count("integer"))
          both.emplace_back("integer");
        else if (t == "integer" && s2.count("number"))
          both.emplace_back("integer");
      }
      *cur = std::move(both);
    } else if (annotation(k)) {
      // keep the first
    } else {
      fail("allOf at " + at(ptr) + ": keyword '" + std::string(k) +
           "' differs between branches and weir cannot combine it");
      return json::object();
    }
  }
  return out;
}

std::set<std::string> Compiler::types_of(const json::value& s0, const std::string& ptr, int depth) {
  const json::value* s = &s0;
  if (depth > 16) return {"any"};
  s = deref(s, ptr);
  if (!s || !s->is_object()) return {"any"};
  const auto& o = s->as_object();
  auto tname = [](const json::value& v) -> std::string {
    if (v.is_null()) return "null";
    if (v.is_bool()) return "boolean";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
  };
  if (const auto* c = o.if_contains("const")) return {tname(*c)};
  if (const auto* e = o.if_contains("enum"); e && e->is_array()) {
    std::set<std::string> r;
    for (const auto& v : e->as_array()) r.insert(tname(v));
    return r;
  }
  if (const auto* t = o.if_contains("type")) {
    std::set<std::string> r;
    auto add = [&](std::string x) { r.insert(x == "integer" ? "number" : x); };
    if (t->is_string())
      add(std::string(t->as_string()));
    else if (t->is_array())
      for (const auto& x : t->as_array())
        if (x.is_string()) add(std::string(x.as_string()));
    return r;
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (const auto* a = o.if_contains(k); a && a->is_array()) {
      std::set<std::string> r;
      for (const auto& x : a->as_array()) {
        auto t = types_of(x, ptr, depth + 1);
        r.insert(t.begin(), t.end());
      }
      return r;
    }
  }
  return {"any"};
}

std::map<std::string, std::string> Compiler::discriminators(const json::value& s0,
                                                            const std::string& ptr) {
  std::map<std::string, std::string> r;
  const json::value* s = &s0;
  s = deref(s, ptr);
  if (!s || !s->is_object()) return r;
  const auto& o = s->as_object();
  const auto* props = o.if_contains("properties");
  const auto* req = o.if_contains("required");
  if (!props || !props->is_object() || !req || !req->is_array()) return r;
  for (const auto& x : req->as_array()) {
    if (!x.is_string()) continue;
    const auto* p = props->as_object().if_contains(x.as_string());
    if (!p || !p->is_object()) continue;
    if (const auto* c = p->as_object().if_contains("const"))
      r[std::string(x.as_string())] = json::serialize(*c);
    else if (const auto* e = p->as_object().if_contains("enum");
             e && e->is_array() && e->as_array().size() == 1)
      r[std::string(x.as_string())] = json::serialize(e->as_array()[0]);
  }
  return r;
}

bool Compiler::disjoint(const json::value& x, const json::value& y, const std::string& ptr) {
  auto tx = types_of(x, ptr), ty = types_of(y, ptr);
  if (!tx.count("any") && !ty.count("any")) {
    bool overlap = false;
    for (const auto& t : tx) overlap |= ty.count(t) > 0;
    if (!overlap) return true;
  }
  auto dx = discriminators(x, ptr), dy = discriminators(y, ptr);
  for (const auto& [k, v] : dx) {
    auto it = dy.find(k);
    if (it != dy.end() && it->second != v) return true;
  }
  return false;
}

Sym Compiler::compile(const json::value& s, const std::string& ptr) {
  if (failed) return b.empty();
  if (!b.check_budget()) return fail("constraint too large");
  if (s.is_bool())
    return s.as_bool() ? any_value()
                       : b.never("the schema at " + at(ptr) + " is false (it allows nothing)");
  if (!s.is_object()) return fail("JSON Schema at " + at(ptr) + " must be an object or a boolean");
  const auto& o = s.as_object();
  if (auto bad = unsupported_keyword(o, ptr)) return fail(*bad);
  if (!constraining(o)) return any_value();
  if (o.contains("$ref")) return ref_schema(o, ptr);
  // Siblings of a combinator go into each branch (or the merge).
  json::object siblings;
  for (const auto& kv : o)
    if (kv.key() != "allOf" && kv.key() != "anyOf" && kv.key() != "oneOf" && !annotation(kv.key()))
      siblings[kv.key()] = kv.value();
  if (o.contains("allOf")) return all_of(o, siblings, ptr);
  if (o.contains("anyOf") || o.contains("oneOf")) return any_of(o, siblings, ptr);
  if (o.contains("const") || o.contains("enum")) return enum_values(o, ptr);
  return typed(o, ptr);
}

std::optional<std::string> Compiler::unsupported_keyword(const json::object& o,
                                                         const std::string& ptr) {
  for (const auto& kv : o)
    if (!annotation(kv.key()) && !supported(kv.key()))
      return "unsupported JSON Schema keyword '" + std::string(kv.key()) + "' at " +
             json_pointer_append(ptr, kv.key());
  return std::nullopt;
}

bool Compiler::constraining(const json::object& o) {
  return std::any_of(o.begin(), o.end(), [](const auto& kv) { return !annotation(kv.key()); });
}

Sym Compiler::ref_schema(const json::object& o, const std::string& ptr) {
  const json::value& r = o.at("$ref");
  if (!r.is_string()) return fail("JSON Schema keyword '$ref' at " + at(ptr) + " must be a string");
  const std::string ref(r.as_string());
  for (const auto& kv : o) {
    if (kv.key() != "$ref" && !annotation(kv.key()))
      return fail("JSON Schema keyword '" + std::string(kv.key()) + "' beside '$ref' at " +
                  at(ptr) + " is not supported (wrap them in allOf)");
  }
  auto it = refs.find(ref);
  if (it != refs.end()) return {true, it->second};
  const json::value* target = resolve(ref, ptr);
  if (!target) return b.empty();
  const std::uint32_t rule = b.new_rule("ref " + ref, {RuleOrigin::schema_ref, ref});
  refs.emplace(ref, rule);
  Sym body = compile(*target, ref.substr(1));
  b.add_alt(rule, {body});
  return {true, rule};
}

Sym Compiler::all_of(const json::object& o, const json::object& siblings, const std::string& ptr) {
  const json::value& all = o.at("allOf");
  if (!all.is_array() || all.as_array().empty())
    return fail("JSON Schema keyword 'allOf' at " + at(ptr) + " must be a non-empty array");
  json::value m = json::object(siblings);
  std::size_t i = 0;
  for (const auto& x : all.as_array()) {
    m = merge(m, x, json_pointer_append(json_pointer_append(ptr, "allOf"), i++));
    if (failed) return b.empty();
  }
  json::object rest = o;
  rest.erase("allOf");
  for (const auto& kv : siblings) rest.erase(kv.key());
  if (m.is_object())
    for (const auto& kv : m.as_object()) rest[kv.key()] = kv.value();
  else
    return b.never("'allOf' at " + at(ptr) + " has a branch that allows nothing");
  arena.emplace_back(std::move(rest));
  return compile(arena.back(), ptr);
}

Sym Compiler::any_of(const json::object& o, const json::object& siblings, const std::string& ptr) {
  if (o.contains("anyOf") && o.contains("oneOf"))
    return fail("JSON Schema keywords 'anyOf' and 'oneOf' together at " + at(ptr) +
                " are not supported");
  const std::string comb = o.contains("anyOf") ? "anyOf" : "oneOf";
  const json::value& a = o.at(comb);
  if (!a.is_array() || a.as_array().empty())
    return fail("JSON Schema keyword '" + comb + "' at " + at(ptr) + " must be a non-empty array");
  const auto& arr = a.as_array();
  const std::string cptr = json_pointer_append(ptr, comb);
  if (comb == "oneOf") {
    for (std::size_t i = 0; i < arr.size(); ++i)
      for (std::size_t j = i + 1; j < arr.size(); ++j)
        if (!disjoint(arr[i], arr[j], ptr))
          return fail("JSON Schema keyword 'oneOf' at " + cptr + ": branches " + std::to_string(i) +
                      " and " + std::to_string(j) +
                      " may both match; weir enforces oneOf only when the branches differ in "
                      "type or in a required const property (use anyOf)");
  }
  std::vector<Seq> alts;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const std::string bptr = json_pointer_append(cptr, i);
    if (siblings.empty()) {
      alts.push_back({compile(arr[i], bptr)});
    } else {
      arena.push_back(merge(json::value(siblings), arr[i], bptr));
      alts.push_back({compile(arena.back(), bptr)});
    }
    if (failed) return b.empty();
  }
  return b.group(alts, comb);
}

Sym Compiler::enum_values(const json::object& o, const std::string& ptr) {
  for (const auto& kv : o) {
    if (kv.key() != "const" && kv.key() != "enum" && kv.key() != "type" && !annotation(kv.key()))
      return fail("JSON Schema keyword '" + std::string(kv.key()) + "' beside enum/const at " +
                  at(ptr) + " is not supported");
  }
  std::vector<json::value> values;
  if (const auto* c = o.if_contains("const")) values.push_back(*c);
  if (const auto* e = o.if_contains("enum")) {
    if (!e->is_array())
      return fail("JSON Schema keyword 'enum' at " + at(ptr) + " must be an array");
    if (o.contains("const")) {
      if (std::find(e->as_array().begin(), e->as_array().end(), values[0]) == e->as_array().end())
        values.clear();
    } else {
      values.assign(e->as_array().begin(), e->as_array().end());
    }
  }
  std::set<std::string> types;
  if (const auto* t = o.if_contains("type")) {
    if (t->is_string())
      types.insert(std::string(t->as_string()));
    else if (t->is_array())
      for (const auto& x : t->as_array())
        if (x.is_string()) types.insert(std::string(x.as_string()));
  }
  std::vector<Seq> alts;
  for (const auto& v : values) {
    if (!types.empty()) {
      bool ok =
          (v.is_null() && types.count("null")) || (v.is_bool() && types.count("boolean")) ||
          (v.is_string() && types.count("string")) || (v.is_array() && types.count("array")) ||
          (v.is_object() && types.count("object")) || (v.is_number() && types.count("number"));
      if (v.is_number() && types.count("integer")) {
        const double d = v.to_number<double>();
        ok = ok || std::floor(d) == d;
      }
      if (!ok) continue;
    }
    alts.push_back(b.literal(json::serialize(v)));
  }
  if (alts.empty()) {
    const std::string kw = o.contains("enum") ? "'enum'" : "'const'";
    if (values.empty())
      return b.never(
          kw + " at " + at(ptr) +
          (o.contains("const") && o.contains("enum") ? " does not hold the 'const'" : " is empty"));
    std::string names;
    for (const auto& t : types) names += (names.empty() ? "" : " or ") + t;
    return b.never(kw + " at " + at(ptr) + " has no value of type " + names);
  }
  return b.group(alts, "enum");
}

Sym Compiler::typed(const json::object& o, const std::string& ptr) {
  std::vector<std::string> types;
  if (const auto* t = o.if_contains("type")) {
    if (t->is_string())
      types.emplace_back(t->as_string());
    else if (t->is_array()) {
      for (const auto& x : t->as_array()) {
        if (!x.is_string())
          return fail("JSON Schema keyword 'type' at " + at(ptr) + " must hold strings");
        types.emplace_back(x.as_string());
      }
    } else {
      return fail("JSON Schema keyword 'type' at " + at(ptr) + " must be a string or an array");
    }
  } else {
    types = implied_types(o);
    if (types.empty()) return any_value();
  }
  std::vector<Seq> alts;
  for (const auto& t : types) {
    if (t == "null")
      alts.push_back(b.literal("null"));
    else if (t == "boolean")
      alts.push_back({b.group({b.literal("true"), b.literal("false")}, "bool")});
    else if (t == "integer")
      alts.push_back({bounded(o, ptr, true)});
    else if (t == "number")
      alts.push_back({bounded(o, ptr, false)});
    else if (t == "string")
      alts.push_back({string_schema(o, ptr)});
    else if (t == "object")
      alts.push_back({object_schema(o, ptr)});
    else if (t == "array")
      alts.push_back({array_schema(o, ptr)});
    else
      return fail("JSON Schema keyword 'type' at " + at(ptr) + ": unknown type '" + t + "'");
    if (failed) return b.empty();
  }
  if (alts.empty()) return b.never("'type' at " + at(ptr) + " allows no type");
  if (alts.size() == 1 && alts[0].size() == 1 && alts[0][0].is_rule) return alts[0][0];
  return b.group(alts, "type");
}

std::vector<std::string> Compiler::implied_types(const json::object& o) {
  std::vector<std::string> types;
  if (o.contains("properties") || o.contains("required") || o.contains("additionalProperties"))
    types.push_back("object");
  if (o.contains("items") || o.contains("prefixItems") || o.contains("minItems") ||
      o.contains("maxItems"))
    types.push_back("array");
  if (o.contains("minLength") || o.contains("maxLength") || o.contains("pattern") ||
      o.contains("format"))
    types.push_back("string");
  if (o.contains("minimum") || o.contains("maximum") || o.contains("exclusiveMinimum") ||
      o.contains("exclusiveMaximum"))
    types.push_back("number");
  return types;
}

std::uint32_t json_any_object(GrammarBuilder& b) {
  static const json::value root = json::object();
  Compiler c{b, root};
  json::value schema = {{"type", "object"}};
  Sym s = c.compile(schema, "");
  const std::uint32_t r = b.new_rule("root");
  b.add_alt(r, {c.ws(), s});  // one optional leading space: SPM vocabularies write " {".
  return r;
}

Result<std::uint32_t> compile_json_schema(GrammarBuilder& b, std::string_view schema_text) {
  JsonParseOptions opt;
  opt.max_bytes = 1u << 20;
  opt.max_depth = 64;
  auto parsed = parse_json(schema_text, "schema", opt);
  if (!parsed) return Error(Errc::invalid_argument, "JSON Schema: " + parsed.error().message);
  Compiler c{b, parsed->value};
  Sym s = c.compile(parsed->value, "");
  // (The builder's own error first: it names the limit a schema went past.)
  if (b.failed()) return b.error();
  if (c.failed) return c.err;
  const std::uint32_t r = b.new_rule("root");
  b.add_alt(r, {c.ws(), s});  // one optional leading space: SPM vocabularies write " {".
  return r;
}

}  // namespace weir::inference::constraint
