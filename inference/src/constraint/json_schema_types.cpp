// JSON Schema -> grammar, per JSON type: strings (length, pattern, format), integers and numbers
// (bounds: json_number.hpp), objects (properties in declared order, additional keys), arrays
// (items, prefixItems, counts), and any JSON value. The overview is in json_schema.cpp.
#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "constraint/grammar.hpp"
#include "constraint/json_number.hpp"
#include "constraint/json_schema_compiler.hpp"
#include "weir/runtime/json_parse.hpp"

namespace weir::inference::constraint {

Sym Compiler::digits(int lo, int hi) {
  std::bitset<256> d;
  for (char c = '0'; c <= '9'; ++c) d.set(static_cast<unsigned char>(c));
  return b.repeat({b.byte_class(d)}, lo, hi);
}

Sym Compiler::ws() {
  if (!ws_) ws_ = b.optional(b.literal(" "));
  return *ws_;
}

Sym Compiler::json_char() {
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

Sym Compiler::string_any() {
  if (string_) return *string_;
  Seq q = b.literal("\"");
  q.push_back(b.star({json_char()}));
  b.append_literal(q, "\"");
  string_ = b.group({q}, "string");
  return *string_;
}

Sym Compiler::number_any() {
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

Sym Compiler::int_part() {
  std::bitset<256> nz;
  for (char c = '1'; c <= '9'; ++c) nz.set(static_cast<unsigned char>(c));
  return b.group({b.literal("0"), {b.byte_class(nz), digits(0, 17)}}, "int");
}

Sym Compiler::any_value() {
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

Sym Compiler::int_any() {
  std::bitset<256> nz;
  for (char c = '1'; c <= '9'; ++c) nz.set(static_cast<unsigned char>(c));
  Seq neg = b.literal("-");
  neg.insert(neg.end(), {b.byte_class(nz), digits(0, 17)});
  return b.group({{int_part()}, neg}, "integer");
}

Sym Compiler::bounded(const json::object& o, const std::string& ptr, bool integer) {
  auto bd = number_bounds(o, at(ptr));
  if (!bd) return fail(bd.error().message);
  if (!bd->any()) return integer ? int_any() : number_any();
  return integer ? integer_in(b, *bd, at(ptr)) : number_in(b, *bd, at(ptr));
}

std::int64_t Compiler::count_of(const json::object& o, const char* k, const std::string& ptr,
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

Sym Compiler::string_schema(const json::object& o, const std::string& ptr) {
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

Sym Compiler::extra_key(const std::vector<std::string>& names) {
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

Sym Compiler::object_schema(const json::object& o, const std::string& ptr) {
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

Sym Compiler::array_schema(const json::object& o, const std::string& ptr) {
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

}  // namespace weir::inference::constraint
