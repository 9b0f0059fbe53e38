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
#include "weir/runtime/json_parse.hpp"

namespace weir::inference::constraint {

namespace json = boost::json;

namespace {

struct Compiler {
  GrammarBuilder& b;
  const json::value& root;
  std::unordered_map<std::string, std::uint32_t> refs;
  std::deque<json::value> arena;  // merged schemas (allOf, siblings of anyOf)
  std::optional<Sym> any_value_, string_, json_char_, ws_;
  bool failed = false;
  Error err;

  Sym fail(std::string msg) {
    if (!failed) {
      failed = true;
      err = Error(Errc::invalid_argument, std::move(msg));
    }
    return b.empty();
  }
  static std::string at(const std::string& ptr) { return ptr.empty() ? "(root)" : ptr; }

  Sym digits(int lo, int hi) {
    std::bitset<256> d;
    for (char c = '0'; c <= '9'; ++c) d.set(static_cast<unsigned char>(c));
    return b.repeat({b.byte_class(d)}, lo, hi);
  }
  Sym ws() {
    if (!ws_) ws_ = b.optional(b.literal(" "));
    return *ws_;
  }
  Sym json_char() {
    if (json_char_) return *json_char_;
    std::bitset<256> esc;
    for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<unsigned char>(c));
    std::bitset<256> hexd, hex_nd, d0_7, d8_f, hex_ef;
    for (char c : std::string("0123456789abcdefABCDEF")) hexd.set(static_cast<unsigned char>(c));
    // \uXXXX without surrogates: [0-9a-cA-C]XXX | [dD][0-7]XX | [e-fE-F]XXX
    for (char c : std::string("0123456789abcABC")) hex_nd.set(static_cast<unsigned char>(c));
    for (char c : std::string("01234567")) d0_7.set(static_cast<unsigned char>(c));
    for (char c : std::string("efEF")) hex_ef.set(static_cast<unsigned char>(c));
    std::bitset<256> dD;
    dD.set('d'), dD.set('D');
    const Sym h = b.byte_class(hexd);
    Sym plain = b.cp_class({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
    Seq e1 = b.literal("\\");
    e1.push_back(b.byte_class(esc));
    Seq u1 = b.literal("\\u"), u2 = b.literal("\\u"), u3 = b.literal("\\u");
    u1.insert(u1.end(), {b.byte_class(hex_nd), h, h, h});
    u2.insert(u2.end(), {b.byte_class(dD), b.byte_class(d0_7), h, h});
    u3.insert(u3.end(), {b.byte_class(hex_ef), h, h, h});
    json_char_ = b.group({{plain}, e1, u1, u2, u3}, "json_char");
    return *json_char_;
  }
  Sym string_any() {
    if (string_) return *string_;
    Seq q = b.literal("\"");
    q.push_back(b.star({json_char()}));
    b.append_literal(q, "\"");
    string_ = b.group({q}, "string");
    return *string_;
  }
  Sym number_any() {
    Seq q = {b.optional(b.literal("-")), int_part()};
    Seq frac = b.literal(".");
    frac.push_back(digits(1, 15));
    q.push_back(b.optional(frac));
    std::bitset<256> e, sign;
    e.set('e'), e.set('E'), sign.set('-'), sign.set('+');
    // Two exponent digits: with 18 integer digits a value stays within a double (1e117 at
    // most); three allowed 4E870, which no JSON reader holds (found by the breaking pass: a
    // forced tool call's arguments then failed to parse and came back as text).
    Seq exp = {b.byte_class(e), b.optional({b.byte_class(sign)}), digits(1, 2)};
    q.push_back(b.optional(exp));
    return b.group({q}, "number");
  }
  Sym int_part() {  // 0 | [1-9][0-9]{0,17}
    std::bitset<256> nz;
    for (char c = '1'; c <= '9'; ++c) nz.set(static_cast<unsigned char>(c));
    return b.group({b.literal("0"), {b.byte_class(nz), digits(0, 17)}}, "int");
  }
  Sym any_value() {
    if (any_value_) return *any_value_;
    const std::uint32_t v = b.new_rule("value");
    any_value_ = Sym{true, v};
    const Sym s = string_any();
    // object ::= "{" ( kv ("," ws kv)* )? "}"
    Seq kv = {s, b.byte(':'), ws(), *any_value_};
    Seq more = b.literal(",");
    more.push_back(ws());
    more.insert(more.end(), kv.begin(), kv.end());
    Seq members = kv;
    members.push_back(b.star(more));
    Seq obj = b.literal("{");
    obj.push_back(b.optional(members));
    b.append_literal(obj, "}");
    Seq item_more = b.literal(",");
    item_more.push_back(ws());
    item_more.push_back(*any_value_);
    Seq items = {*any_value_, b.star(item_more)};
    Seq arr = b.literal("[");
    arr.push_back(b.optional(items));
    b.append_literal(arr, "]");
    for (const Seq& a : {obj, arr, Seq{s}, Seq{number_any()}, b.literal("true"), b.literal("false"),
                         b.literal("null")})
      b.add_alt(v, a);
    return *any_value_;
  }

  // Integers: "0", [1-9][0-9]{0,17} and their negatives (not "-0").
  Sym int_any() {
    std::bitset<256> nz;
    for (char c = '1'; c <= '9'; ++c) nz.set(static_cast<unsigned char>(c));
    Seq neg = b.literal("-");
    neg.insert(neg.end(), {b.byte_class(nz), digits(0, 17)});
    return b.group({{int_part()}, neg}, "integer");
  }
  // An integer or a number with the schema's bounds (json_number.hpp) or without any.
  Sym bounded(const json::object& o, const std::string& ptr, bool integer) {
    auto bd = number_bounds(o, at(ptr));
    if (!bd) return fail(bd.error().message);
    if (!bd->any()) return integer ? int_any() : number_any();
    return integer ? integer_in(b, *bd, at(ptr)) : number_in(b, *bd, at(ptr));
  }

  // A count keyword (minLength, maxItems, ...): a whole number (2.0 is 2), `def` when absent.
  // One past the grammar's size limit is refused by name (a repetition that long cannot fit).
  std::int64_t count_of(const json::object& o, const char* k, const std::string& ptr,
                        std::int64_t def) {
    const json::value* v = o.if_contains(k);
    if (!v) return def;
    const double d = v->is_number() ? v->to_number<double>() : -1;
    if (!(d >= 0) || std::floor(d) != d) {
      fail("JSON Schema keyword '" + std::string(k) + "' at " + at(ptr) +
           " must be a non-negative integer");
      return def;
    }
    if (d > static_cast<double>(kMaxGrammarElements)) {
      fail("JSON Schema keyword '" + std::string(k) + "' at " + at(ptr) + " is " +
           json::serialize(*v) + ", over the " + std::to_string(kMaxGrammarElements) +
           " repetitions weir's grammar can hold; lower it");
      return def;
    }
    return static_cast<std::int64_t>(d);
  }

  Sym string_schema(const json::object& o, const std::string& ptr) {
    auto count = [&](const char* k, std::int64_t def) { return count_of(o, k, ptr, def); };
    const std::int64_t min = count("minLength", 0), max = count("maxLength", -1);
    const bool has_len = o.contains("minLength") || o.contains("maxLength");
    const json::value* pattern = o.if_contains("pattern");
    const json::value* format = o.if_contains("format");
    if (pattern && format)
      return fail("JSON Schema keywords 'pattern' and 'format' together at " + at(ptr) +
                  " are not supported (use one)");
    std::string re;
    std::string kw;
    if (format) {
      if (!format->is_string())
        return fail("JSON Schema keyword 'format' at " + at(ptr) + " must be a string");
      const std::string f(format->as_string());
      // RFC 3339's full-date: each month's days, and 29 February in leap years only (found by
      // the breaking pass: 31 April and 31 February were written).
      static const std::string date =
          "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
          "02-(0[1-9]|1[0-9]|2[0-8]))|([0-9]{2}(0[48]|[2468][048]|[13579][26])|"
          "([02468][048]|[13579][26])00)-02-29)";
      static const std::string time =
          "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5]["
          "0-9])";
      static const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
      if (f == "date")
        re = date;
      else if (f == "time")
        re = time;
      else if (f == "date-time")
        re = date + "T" + time;
      else if (f == "uuid")
        re = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
      else if (f == "email")
        re = "[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-"
             "Za-z0-9-]{0,61}[A-Za-z0-9])?){0,4}\\.[A-Za-z]{2,24}";
      else if (f == "ipv4")
        re = octet + "(\\." + octet + "){3}";
      else
        return fail("unsupported JSON Schema format '" + f + "' at " + at(ptr) +
                    "/format (supported: date, time, date-time, uuid, email, ipv4)");
      re = "^" + re + "$";
      kw = "format";
    } else if (pattern) {
      if (!pattern->is_string())
        return fail("JSON Schema keyword 'pattern' at " + at(ptr) + " must be a string");
      re = std::string(pattern->as_string());
      kw = "pattern";
    }
    if (!re.empty() || pattern) {
      if (has_len)
        return fail("JSON Schema keyword '" + kw + "' with minLength/maxLength at " + at(ptr) +
                    " is not supported (put the length into the pattern)");
      const std::size_t mark = b.notes().size();
      auto r = compile_regex(b, re, true, false);
      b.prefix_notes(mark, "JSON Schema keyword '" + kw + "' at " + at(ptr) + "/" + kw + ": ");
      if (!r)
        return fail("JSON Schema keyword '" + kw + "' at " + at(ptr) + "/" + kw + ": " +
                    r.error().message);
      Seq q = b.literal("\"");
      q.push_back({true, *r});
      b.append_literal(q, "\"");
      return b.group({q}, "string");
    }
    if (!has_len) return string_any();
    if (max >= 0 && max < min)
      return b.never("'minLength' " + std::to_string(min) + " and 'maxLength' " +
                     std::to_string(max) + " at " + at(ptr) + " contradict each other");
    Seq q = b.literal("\"");
    q.push_back(b.repeat({json_char()}, min, max));
    b.append_literal(q, "\"");
    return b.group({q}, "string");
  }

  // Keys of additional properties: [A-Za-z0-9_-]* other than the declared names (a subset of
  // what the schema allows, chosen so that the complement of a finite set stays small).
  Sym extra_key(const std::vector<std::string>& names) {
    std::bitset<256> sigma;
    for (int c = 0; c < 256; ++c)
      if (std::isalnum(c) || c == '_' || c == '-') sigma.set(static_cast<std::size_t>(c));
    const Sym any = b.star({b.byte_class(sigma)});
    struct Node {
      std::map<unsigned char, int> kids;
      bool end = false;
    };
    std::vector<Node> t(1);
    for (const auto& n : names) {
      if (!std::all_of(n.begin(), n.end(),
                       [&](char c) { return sigma.test(static_cast<unsigned char>(c)); }))
        continue;
      int at = 0;
      for (char c : n) {
        auto [it, inserted] =
            t[static_cast<std::size_t>(at)].kids.try_emplace(static_cast<unsigned char>(c), 0);
        if (inserted) {
          it->second = static_cast<int>(t.size());
          t.emplace_back();
        }
        at = it->second;
      }
      t[static_cast<std::size_t>(at)].end = true;
    }
    std::function<Sym(int)> rule = [&](int n) -> Sym {
      const Node& node = t[static_cast<std::size_t>(n)];
      std::vector<Seq> alts;
      if (!node.end) alts.push_back({});
      std::bitset<256> other = sigma;
      for (auto [c, k] : node.kids) other.reset(c);
      if (other.any()) alts.push_back({b.byte_class(other), any});
      for (auto [c, k] : node.kids) alts.push_back({b.byte(c), rule(k)});
      return b.group(alts, "key");
    };
    Seq q = b.literal("\"");
    q.push_back(rule(0));
    b.append_literal(q, "\"");
    return b.group({q}, "extra_key");
  }

  Sym object_schema(const json::object& o, const std::string& ptr) {
    struct Prop {
      std::string name;
      const json::value* schema;
      std::string ptr;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (const auto* r = o.if_contains("required")) {
      if (!r->is_array())
        return fail("JSON Schema keyword 'required' at " + at(ptr) + " must be an array");
      for (const auto& x : r->as_array()) {
        if (!x.is_string())
          return fail("JSON Schema keyword 'required' at " + at(ptr) + " must hold strings");
        required.insert(std::string(x.as_string()));
      }
    }
    const json::value* addl = o.if_contains("additionalProperties");
    static const json::value kTrue = true;
    const bool extra = addl && !(addl->is_bool() && !addl->as_bool());
    if (const auto* p = o.if_contains("properties")) {
      if (!p->is_object())
        return fail("JSON Schema keyword 'properties' at " + at(ptr) + " must be an object");
      for (const auto& kv : p->as_object()) {
        const std::string name(kv.key());
        props.push_back({name, &kv.value(),
                         json_pointer_append(json_pointer_append(ptr, "properties"), name),
                         required.count(name) > 0});
      }
    }
    for (const auto& r : required) {
      if (std::any_of(props.begin(), props.end(), [&](const Prop& p) { return p.name == r; }))
        continue;
      if (addl && addl->is_bool() && !addl->as_bool())
        return fail("JSON Schema keyword 'required' at " + at(ptr) + " names '" + r +
                    "', which additionalProperties false forbids");
      props.push_back(
          {r, addl ? addl : &kTrue, json_pointer_append(ptr, "additionalProperties"), true});
    }
    if (!o.contains("properties") && !addl && required.empty()) {
      // {"type": "object"}: any object.
      addl = &kTrue;
    }
    const bool any_extra = extra || (addl == &kTrue && !o.contains("properties"));
    std::vector<std::string> names;
    for (const auto& p : props) names.push_back(p.name);
    std::optional<Seq> extra_kv;
    if (any_extra) {
      Seq kv;
      kv.push_back(props.empty() ? string_any() : extra_key(names));
      kv.push_back(b.byte(':'));
      kv.push_back(ws());
      kv.push_back(compile(*addl, json_pointer_append(ptr, "additionalProperties")));
      extra_kv = kv;
    }
    auto comma = [&] {
      Seq q = b.literal(",");
      q.push_back(ws());
      return q;
    };
    // B: after at least one member; A: none yet.
    Sym B, A;
    if (extra_kv) {
      Seq more = comma();
      more.insert(more.end(), extra_kv->begin(), extra_kv->end());
      B = b.star(more);
      Seq first = *extra_kv;
      first.push_back(B);
      A = b.optional(first);
    } else {
      B = b.empty();
      A = B;
    }
    for (std::size_t i = props.size(); i-- > 0;) {
      if (failed) return b.empty();
      const Prop& p = props[i];
      Seq kv = b.literal(json::serialize(json::value(p.name)));
      kv.push_back(b.byte(':'));
      kv.push_back(ws());
      kv.push_back(compile(*p.schema, p.ptr));
      Seq nb = comma();
      nb.insert(nb.end(), kv.begin(), kv.end());
      nb.push_back(B);
      Seq na = kv;
      na.push_back(B);
      Sym newB = p.required ? b.group({nb}, "props") : b.group({nb, {B}}, "props");
      Sym newA = p.required ? b.group({na}, "props") : b.group({na, {A}}, "props");
      A = newA, B = newB;
    }
    Seq q = b.literal("{");
    q.push_back(A);
    b.append_literal(q, "}");
    return b.group({q}, "object");
  }

  Sym array_schema(const json::object& o, const std::string& ptr) {
    auto count = [&](const char* k, std::int64_t def) { return count_of(o, k, ptr, def); };
    const std::int64_t min = count("minItems", 0), max = count("maxItems", -1);
    if (const auto* u = o.if_contains("uniqueItems");
        u && !(u->is_bool() && !u->as_bool()) && (max < 0 || max > 1))
      return fail("unsupported JSON Schema keyword 'uniqueItems' at " + at(ptr) + "/uniqueItems");
    std::vector<Sym> prefix;
    if (const auto* p = o.if_contains("prefixItems")) {
      if (!p->is_array())
        return fail("JSON Schema keyword 'prefixItems' at " + at(ptr) + " must be an array");
      std::size_t i = 0;
      for (const auto& s : p->as_array())
        prefix.push_back(
            compile(s, json_pointer_append(json_pointer_append(ptr, "prefixItems"), i++)));
    }
    const json::value* items = o.if_contains("items");
    std::optional<Sym> item;
    if (!items)
      item = any_value();
    else if (!(items->is_bool() && !items->as_bool()))
      item = compile(*items, json_pointer_append(ptr, "items"));
    const auto k = static_cast<std::int64_t>(prefix.size());
    auto sep = [&](std::int64_t i) {
      Seq q;
      if (i > 0) {
        b.append_literal(q, ",");
        q.push_back(ws());
      }
      return q;
    };
    // Rest after the k prefix items.
    Sym rest;
    {
      const std::int64_t lo = std::max<std::int64_t>(0, min - k);
      const std::int64_t hi = max < 0 ? -1 : max - k;
      if (max >= 0 && max < min)
        rest = b.never("'minItems' " + std::to_string(min) + " and 'maxItems' " +
                       std::to_string(max) + " at " + at(ptr) + " contradict each other");
      else if (!item)
        rest = lo > 0 ? b.never("'minItems' " + std::to_string(min) + " at " + at(ptr) +
                                " needs more items than 'prefixItems' holds ('items' is false)")
                      : b.empty();
      else if (hi == 0)
        rest = b.empty();
      else if (k > 0) {
        Seq one = sep(1);
        one.push_back(*item);
        rest = b.repeat(one, lo, hi);
      } else {
        Seq one = sep(1);
        one.push_back(*item);
        Seq first = {*item, b.repeat(one, std::max<std::int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1)};
        rest = lo == 0 ? b.optional(first) : b.group({first}, "items");
      }
    }
    // P_i: i prefix items emitted.
    Sym P = rest;
    for (std::int64_t i = k; i-- > 0;) {
      std::vector<Seq> alts;
      if (i >= min) alts.push_back({});
      if (max < 0 || i + 1 <= max) {
        Seq q = sep(i);
        q.push_back(prefix[static_cast<std::size_t>(i)]);
        q.push_back(P);
        alts.push_back(q);
      }
      P = b.group(alts, "prefix");
    }
    Seq q = b.literal("[");
    q.push_back(P);
    b.append_literal(q, "]");
    return b.group({q}, "array");
  }

  // --- structure ------------------------------------------------------------------------

  const json::value* resolve(const std::string& ref, const std::string& ptr) {
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

  // Follows a chain of bare {"$ref": ...} objects (at most 32 hops, so a cycle is an error
  // rather than a hang). Returns nullptr, with the error recorded, when a reference is not a
  // string, does not resolve, or loops.
  const json::value* deref(const json::value* s, const std::string& ptr) {
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

  static bool annotation(std::string_view k) {
    static const std::set<std::string_view> a = {
        "$schema",    "$id",      "$comment",  "title", "description", "default", "examples",
        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor"};
    return a.count(k) > 0;
  }
  static bool supported(std::string_view k) {
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

  // Merges schema objects for allOf (and siblings of anyOf/oneOf). Errors when a keyword
  // cannot be combined.
  json::value merge(const json::value& a0, const json::value& b0, const std::string& ptr,
                    int depth = 0) {
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
      } else if ((k == "minimum" || k == "exclusiveMinimum" || k == "minLength" ||
                  k == "minItems") &&
                 cur->is_number() && kv.value().is_number()) {
        if (kv.value().to_number<double>() > cur->to_number<double>()) *cur = kv.value();
      } else if ((k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" ||
                  k == "maxItems") &&
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

  // The JSON types a schema can produce (for oneOf disjointness); "any" for all.
  std::set<std::string> types_of(const json::value& s0, const std::string& ptr, int depth = 0) {
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
  // A required property with a const (or single enum) value: its serialised value.
  std::map<std::string, std::string> discriminators(const json::value& s0, const std::string& ptr) {
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
  bool disjoint(const json::value& x, const json::value& y, const std::string& ptr) {
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

  // A schema, top to bottom: a boolean; otherwise its keywords checked, then the first of
  // these that it has decides its shape: $ref (a rule per reference), allOf (merged into one
  // schema), anyOf / oneOf (one branch each), enum / const (their values' text), type (each
  // type's grammar; without type, the types its keywords imply).
  Sym compile(const json::value& s, const std::string& ptr) {
    if (failed) return b.empty();
    if (!b.check_budget()) return fail("constraint too large");
    if (s.is_bool())
      return s.as_bool() ? any_value()
                         : b.never("the schema at " + at(ptr) + " is false (it allows nothing)");
    if (!s.is_object())
      return fail("JSON Schema at " + at(ptr) + " must be an object or a boolean");
    const auto& o = s.as_object();
    if (auto bad = unsupported_keyword(o, ptr)) return fail(*bad);
    if (!constraining(o)) return any_value();
    if (o.contains("$ref")) return ref_schema(o, ptr);
    // Siblings of a combinator go into each branch (or the merge).
    json::object siblings;
    for (const auto& kv : o)
      if (kv.key() != "allOf" && kv.key() != "anyOf" && kv.key() != "oneOf" &&
          !annotation(kv.key()))
        siblings[kv.key()] = kv.value();
    if (o.contains("allOf")) return all_of(o, siblings, ptr);
    if (o.contains("anyOf") || o.contains("oneOf")) return any_of(o, siblings, ptr);
    if (o.contains("const") || o.contains("enum")) return enum_values(o, ptr);
    return typed(o, ptr);
  }

  // The first keyword weir cannot enforce, as the error to give; nullopt when all are known.
  std::optional<std::string> unsupported_keyword(const json::object& o, const std::string& ptr) {
    for (const auto& kv : o)
      if (!annotation(kv.key()) && !supported(kv.key()))
        return "unsupported JSON Schema keyword '" + std::string(kv.key()) + "' at " +
               json_pointer_append(ptr, kv.key());
    return std::nullopt;
  }
  // Has a keyword beyond annotations (a schema of annotations only allows any value).
  static bool constraining(const json::object& o) {
    return std::any_of(o.begin(), o.end(), [](const auto& kv) { return !annotation(kv.key()); });
  }

  // {"$ref": "#/..."}: one rule per reference, so recursive schemas refer back to it.
  Sym ref_schema(const json::object& o, const std::string& ptr) {
    const json::value& r = o.at("$ref");
    if (!r.is_string())
      return fail("JSON Schema keyword '$ref' at " + at(ptr) + " must be a string");
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

  // allOf: the branches and the siblings merged into one schema, compiled in their place.
  Sym all_of(const json::object& o, const json::object& siblings, const std::string& ptr) {
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

  // anyOf / oneOf: one alternative per branch, the siblings merged into each; oneOf only
  // when its branches are provably disjoint.
  Sym any_of(const json::object& o, const json::object& siblings, const std::string& ptr) {
    if (o.contains("anyOf") && o.contains("oneOf"))
      return fail("JSON Schema keywords 'anyOf' and 'oneOf' together at " + at(ptr) +
                  " are not supported");
    const std::string comb = o.contains("anyOf") ? "anyOf" : "oneOf";
    const json::value& a = o.at(comb);
    if (!a.is_array() || a.as_array().empty())
      return fail("JSON Schema keyword '" + comb + "' at " + at(ptr) +
                  " must be a non-empty array");
    const auto& arr = a.as_array();
    const std::string cptr = json_pointer_append(ptr, comb);
    if (comb == "oneOf") {
      for (std::size_t i = 0; i < arr.size(); ++i)
        for (std::size_t j = i + 1; j < arr.size(); ++j)
          if (!disjoint(arr[i], arr[j], ptr))
            return fail("JSON Schema keyword 'oneOf' at " + cptr + ": branches " +
                        std::to_string(i) + " and " + std::to_string(j) +
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

  // enum / const: the values' compact JSON text (with `type` beside them, those of its types).
  Sym enum_values(const json::object& o, const std::string& ptr) {
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
        return b.never(kw + " at " + at(ptr) +
                       (o.contains("const") && o.contains("enum") ? " does not hold the 'const'"
                                                                  : " is empty"));
      std::string names;
      for (const auto& t : types) names += (names.empty() ? "" : " or ") + t;
      return b.never(kw + " at " + at(ptr) + " has no value of type " + names);
    }
    return b.group(alts, "enum");
  }

  // The schema's types (from `type`, or implied by its keywords), each by its own grammar.
  Sym typed(const json::object& o, const std::string& ptr) {
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

  // No type: the keywords present say which (a subset of what the schema allows).
  static std::vector<std::string> implied_types(const json::object& o) {
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
};

}  // namespace

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
