// OTLP/JSON back into spans, and the tree `weir trace` prints. Outside input: every field is
// checked before use, and the tree is drawn without recursion (a parent chain may be as long as
// the input).
#include "weir/runtime/trace_read.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <unordered_map>

#include <boost/json.hpp>

#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/text.hpp"

namespace weir::trace {

namespace json = boost::json;

namespace {

// Where a field is, for messages.
struct Reader {
  std::string_view source;

  Error bad(const std::string& pointer, std::string_view what) const {
    return Error(Errc::corrupt_data,
                 std::string(source) + ": " + pointer + ": " + std::string(what));
  }

  Result<const json::array*> array_at(const json::object& o, std::string_view key,
                                      const std::string& at) const {
    static const json::array empty;
    const json::value* v = o.if_contains(key);
    if (!v || v->is_null()) return &empty;
    if (!v->is_array()) return bad(json_pointer_append(at, key), "expected an array");
    return &v->as_array();
  }

  Result<const json::object*> object_of(const json::value& v, const std::string& at) const {
    if (!v.is_object()) return bad(at, "expected an object");
    return &v.as_object();
  }

  Result<std::string> string_at(const json::object& o, std::string_view key,
                                const std::string& at) const {
    const json::value* v = o.if_contains(key);
    if (!v || v->is_null()) return std::string();
    if (!v->is_string()) return bad(json_pointer_append(at, key), "expected a string");
    return std::string(v->as_string());
  }

  // A 64-bit integer: a JSON number or a decimal string (the protobuf JSON mapping).
  Result<std::int64_t> int_at(const json::object& o, std::string_view key,
                              const std::string& at) const {
    const json::value* v = o.if_contains(key);
    if (!v || v->is_null()) return std::int64_t{0};
    if (v->is_int64()) return v->as_int64();
    if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
      return static_cast<std::int64_t>(v->as_uint64());
    if (v->is_string()) {
      const auto& s = v->as_string();
      std::int64_t x = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
      if (ec == std::errc() && p == s.data() + s.size()) return x;
    }
    return bad(json_pointer_append(at, key), "expected a 64-bit integer");
  }

  // A time (OTLP fixed64, unsigned): a JSON number or a decimal string. Kept as an int64: one
  // from 2^63 up (past the year 2262) is held at INT64_MAX, so durations cannot overflow.
  Result<std::int64_t> time_at(const json::object& o, std::string_view key,
                               const std::string& at) const {
    const json::value* v = o.if_contains(key);
    if (!v || v->is_null()) return std::int64_t{0};
    std::uint64_t x = 0;
    bool ok = false;
    if (v->is_uint64()) {
      x = v->as_uint64(), ok = true;
    } else if (v->is_int64() && v->as_int64() >= 0) {
      x = static_cast<std::uint64_t>(v->as_int64()), ok = true;
    } else if (v->is_string()) {
      const auto& s = v->as_string();
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
      ok = ec == std::errc() && p == s.data() + s.size() && !s.empty();
    }
    if (!ok) return bad(json_pointer_append(at, key), "expected an unsigned 64-bit integer");
    return static_cast<std::int64_t>(std::min<std::uint64_t>(x, INT64_MAX));
  }

  Result<AttributeValue> any_value(const json::value& v, const std::string& at) const {
    auto o = object_of(v, at);
    if (!o) return std::move(o).error();
    const json::object& x = **o;
    if (const auto* s = x.if_contains("stringValue")) {
      if (!s->is_string()) return bad(at + "/stringValue", "expected a string");
      return AttributeValue(std::string(s->as_string()));
    }
    if (const auto* b = x.if_contains("boolValue")) {
      if (!b->is_bool()) return bad(at + "/boolValue", "expected true or false");
      return AttributeValue(b->as_bool());
    }
    if (x.contains("intValue")) {
      auto i = int_at(x, "intValue", at);
      if (!i) return std::move(i).error();
      return AttributeValue(*i);
    }
    if (const auto* d = x.if_contains("doubleValue")) {
      if (d->is_number()) return AttributeValue(d->to_number<double>());
      if (d->is_string()) {
        const auto& s = d->as_string();
        if (s == "NaN") return AttributeValue(std::nan(""));
        if (s == "Infinity") return AttributeValue(HUGE_VAL);
        if (s == "-Infinity") return AttributeValue(-HUGE_VAL);
      }
      return bad(at + "/doubleValue", "expected a number");
    }
    if (const auto* a = x.if_contains("arrayValue")) {
      const std::string aat = at + "/arrayValue";
      auto ao = object_of(*a, aat);
      if (!ao) return std::move(ao).error();
      auto values = array_at(**ao, "values", aat);
      if (!values) return std::move(values).error();
      std::vector<std::string> out;
      for (std::size_t i = 0; i < (*values)->size(); ++i) {
        const json::value& e = (**values)[i];
        const json::value* s = e.is_object() ? e.as_object().if_contains("stringValue") : nullptr;
        out.push_back(s && s->is_string() ? std::string(s->as_string()) : json::serialize(e));
      }
      return AttributeValue(std::move(out));
    }
    // kvlistValue, bytesValue, or nothing: kept as its JSON.
    return AttributeValue(json::serialize(x));
  }

  Result<std::vector<Attribute>> attributes(const json::object& o, const std::string& at) const {
    auto list = array_at(o, "attributes", at);
    if (!list) return std::move(list).error();
    std::vector<Attribute> out;
    const std::string lat = json_pointer_append(at, "attributes");
    for (std::size_t i = 0; i < (*list)->size(); ++i) {
      const std::string kat = json_pointer_append(lat, i);
      auto kv = object_of((**list)[i], kat);
      if (!kv) return std::move(kv).error();
      auto key = string_at(**kv, "key", kat);
      if (!key) return std::move(key).error();
      const json::value* val = (*kv)->if_contains("value");
      if (!val) {
        out.push_back({std::move(*key), std::string()});
        continue;
      }
      auto v = any_value(*val, kat + "/value");
      if (!v) return std::move(v).error();
      out.push_back({std::move(*key), std::move(*v)});
    }
    return out;
  }

  Result<SpanData> span(const json::value& v, const std::string& at) const {
    auto o = object_of(v, at);
    if (!o) return std::move(o).error();
    const json::object& x = **o;
    SpanData s;
    auto trace_id = string_at(x, "traceId", at);
    if (!trace_id) return std::move(trace_id).error();
    auto tid = parse_trace_id(*trace_id);
    if (!tid) return bad(at + "/traceId", "expected 32 hex digits, not all zero");
    s.trace_id = *tid;
    auto span_id = string_at(x, "spanId", at);
    if (!span_id) return std::move(span_id).error();
    auto sid = parse_span_id(*span_id);
    if (!sid) return bad(at + "/spanId", "expected 16 hex digits, not all zero");
    s.span_id = *sid;
    auto parent = string_at(x, "parentSpanId", at);
    if (!parent) return std::move(parent).error();
    if (!parent->empty()) {
      auto pid = parse_span_id(*parent);
      if (!pid) return bad(at + "/parentSpanId", "expected 16 hex digits or nothing");
      s.parent_span_id = *pid;
    }
    auto name = string_at(x, "name", at);
    if (!name) return std::move(name).error();
    s.name = std::move(*name);
    auto state = string_at(x, "traceState", at);
    if (!state) return std::move(state).error();
    s.trace_state = std::move(*state);
    auto kind = int_at(x, "kind", at);
    if (!kind) return std::move(kind).error();
    s.kind = *kind >= 1 && *kind <= 3 ? static_cast<SpanKind>(*kind) : SpanKind::internal;
    auto start = time_at(x, "startTimeUnixNano", at);
    if (!start) return std::move(start).error();
    auto end = time_at(x, "endTimeUnixNano", at);
    if (!end) return std::move(end).error();
    s.start_unix_ns = *start;
    s.end_unix_ns = *end;
    auto attrs = attributes(x, at);
    if (!attrs) return std::move(attrs).error();
    s.attributes = std::move(*attrs);
    auto events = array_at(x, "events", at);
    if (!events) return std::move(events).error();
    for (std::size_t i = 0; i < (*events)->size(); ++i) {
      const std::string eat = json_pointer_append(at + "/events", i);
      auto eo = object_of((**events)[i], eat);
      if (!eo) return std::move(eo).error();
      SpanEvent e;
      auto en = string_at(**eo, "name", eat);
      if (!en) return std::move(en).error();
      e.name = std::move(*en);
      auto t = time_at(**eo, "timeUnixNano", eat);
      if (!t) return std::move(t).error();
      e.time_unix_ns = *t;
      auto ea = attributes(**eo, eat);
      if (!ea) return std::move(ea).error();
      e.attributes = std::move(*ea);
      s.events.push_back(std::move(e));
    }
    if (const json::value* st = x.if_contains("status"); st && !st->is_null()) {
      auto so = object_of(*st, at + "/status");
      if (!so) return std::move(so).error();
      auto code = int_at(**so, "code", at + "/status");
      if (!code) return std::move(code).error();
      s.status = *code == 1 ? StatusCode::ok : *code == 2 ? StatusCode::error : StatusCode::unset;
      auto msg = string_at(**so, "message", at + "/status");
      if (!msg) return std::move(msg).error();
      s.status_message = std::move(*msg);
    }
    return s;
  }
};

std::string service_of(const std::vector<Attribute>& attrs) {
  for (const auto& a : attrs)
    if (a.key == "service.name")
      if (const auto* s = std::get_if<std::string>(&a.value)) return *s;
  return {};
}

}  // namespace

Result<std::vector<ReadSpan>> parse_otlp_json(std::string_view body, std::string_view source) {
  auto parsed = parse_json(body, source);
  if (!parsed) return std::move(parsed).error();
  const Reader r{source};
  auto root = r.object_of(parsed->value, "");
  if (!root) return r.bad("/", "expected an object with \"resourceSpans\"");
  auto rs = r.array_at(**root, "resourceSpans", "");
  if (!rs) return std::move(rs).error();
  std::vector<ReadSpan> out;
  for (std::size_t i = 0; i < (*rs)->size(); ++i) {
    const std::string rat = json_pointer_append("/resourceSpans", i);
    auto ro = r.object_of((**rs)[i], rat);
    if (!ro) return std::move(ro).error();
    std::string service;
    if (const json::value* res = (*ro)->if_contains("resource"); res && !res->is_null()) {
      auto reso = r.object_of(*res, rat + "/resource");
      if (!reso) return std::move(reso).error();
      auto attrs = r.attributes(**reso, rat + "/resource");
      if (!attrs) return std::move(attrs).error();
      service = service_of(*attrs);
    }
    auto ss = r.array_at(**ro, "scopeSpans", rat);
    if (!ss) return std::move(ss).error();
    for (std::size_t j = 0; j < (*ss)->size(); ++j) {
      const std::string sat = json_pointer_append(rat + "/scopeSpans", j);
      auto so = r.object_of((**ss)[j], sat);
      if (!so) return std::move(so).error();
      auto spans = r.array_at(**so, "spans", sat);
      if (!spans) return std::move(spans).error();
      for (std::size_t k = 0; k < (*spans)->size(); ++k) {
        auto s = r.span((**spans)[k], json_pointer_append(sat + "/spans", k));
        if (!s) return std::move(s).error();
        out.push_back({std::move(*s), service});
      }
    }
  }
  return out;
}

Result<std::vector<ReadSpan>> parse_otlp_json_lines(std::string_view text,
                                                    std::string_view source) {
  std::vector<ReadSpan> out;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = std::string(source) + ":" + std::to_string(line_no);
    auto spans = parse_otlp_json(line, where);
    if (!spans) return std::move(spans).error();
    for (auto& s : *spans) out.push_back(std::move(s));
  }
  return out;
}

namespace {

std::string duration_text(std::int64_t ns) {
  if (ns < 0) ns = 0;
  char buf[32];
  const double ms = static_cast<double>(ns) / 1e6;
  if (ms < 1)
    std::snprintf(buf, sizeof buf, "%.0f µs", ms * 1000);
  else if (ms < 10'000)
    std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
  return buf;
}

std::string value_text(const AttributeValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *d);
    return buf;
  }
  if (const auto* s = std::get_if<std::string>(&v)) return json::serialize(json::string(*s));
  json::array a;
  for (const auto& s : std::get<std::vector<std::string>>(v)) a.push_back(json::string(s));
  return json::serialize(a);
}

// Text from the input as the tree shows it (escape_control): a name cannot drive the terminal.
std::string shown(std::string_view text) {
  return escape_control(text);
}

// One line of the tree: the span's name, its duration and, when it failed, why.
std::string span_line(const SpanData& s) {
  std::string line = shown(s.name) + "  " + duration_text(s.end_unix_ns - s.start_unix_ns);
  if (s.status == StatusCode::error) {
    line += "  !";
    if (const auto* t = s.attribute(attr::kErrorType))
      if (const auto* ts = std::get_if<std::string>(t)) line += " " + shown(*ts) + ":";
    line += " " + shown(s.status_message);
  }
  return line;
}

}  // namespace

std::string render_tree(const std::vector<ReadSpan>& spans, const TreeOptions& options) {
  // Traces in order of their first span; within one, children by start time.
  std::map<std::string, std::vector<std::size_t>> by_trace;  // trace id -> spans
  std::vector<std::string> order;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    auto [it, fresh] = by_trace.try_emplace(spans[i].span.trace_id.hex());
    if (fresh) order.push_back(it->first);
    it->second.push_back(i);
  }
  auto earlier = [&](std::size_t a, std::size_t b) {
    const auto& x = spans[a].span;
    const auto& y = spans[b].span;
    return x.start_unix_ns != y.start_unix_ns ? x.start_unix_ns < y.start_unix_ns : a < b;
  };
  std::string out;
  for (const auto& tid : order) {
    auto& members = by_trace[tid];
    std::sort(members.begin(), members.end(), earlier);
    std::unordered_map<std::string, std::size_t> index;  // span id -> span
    for (auto i : members) index.emplace(spans[i].span.span_id.hex(), i);
    std::unordered_map<std::size_t, std::vector<std::size_t>> children;
    std::vector<std::size_t> roots;
    std::int64_t first = INT64_MAX, last = INT64_MIN;
    for (auto i : members) {
      const auto& s = spans[i].span;
      first = std::min(first, s.start_unix_ns);
      last = std::max(last, s.end_unix_ns);
      auto p = s.parent_span_id.valid() ? index.find(s.parent_span_id.hex()) : index.end();
      if (p == index.end() || p->second == i)
        roots.push_back(i);
      else
        children[p->second].push_back(i);
    }
    out += "trace " + tid + " (" + std::to_string(members.size()) + " span" +
           (members.size() == 1 ? "" : "s") + ", " + duration_text(last - first) + ")\n";
    // Depth-first with an explicit stack; a span is drawn once (a parent cycle in the input
    // leaves its members unreached until they are drawn as roots below).
    std::vector<bool> drawn(spans.size());
    struct Item {
      std::size_t span;
      std::string prefix;  // drawn before the connector
      bool last;
      bool root;
      std::size_t depth;
    };
    // Past this depth the indentation stops growing (output stays linear in the input).
    constexpr std::size_t kMaxIndent = 40;
    auto draw = [&](std::size_t root) {
      std::vector<Item> stack{{root, "", true, true, 0}};
      while (!stack.empty()) {
        Item it = std::move(stack.back());
        stack.pop_back();
        if (drawn[it.span]) continue;
        drawn[it.span] = true;
        const auto& s = spans[it.span].span;
        const std::string connector = it.root ? "" : (it.last ? "└─ " : "├─ ");
        out += it.prefix + connector + span_line(s) + "\n";
        const std::string child_prefix =
            it.root || it.depth >= kMaxIndent ? it.prefix : it.prefix + (it.last ? "   " : "│  ");
        if (options.attributes) {
          const auto kids = children.find(it.span);
          const std::string bar = kids != children.end() && !kids->second.empty() ? "│ " : "  ";
          for (const auto& a : s.attributes)
            out += child_prefix + bar + "  " + shown(a.key) + " = " + value_text(a.value) + "\n";
          for (const auto& e : s.events) {
            out += child_prefix + bar + "  event " + shown(e.name) + " at +" +
                   duration_text(e.time_unix_ns - s.start_unix_ns);
            for (const auto& a : e.attributes)
              out += " " + shown(a.key) + "=" + value_text(a.value);
            out += "\n";
          }
        }
        auto kids = children.find(it.span);
        if (kids == children.end()) continue;
        const auto& k = kids->second;
        for (std::size_t j = k.size(); j-- > 0;)
          stack.push_back({k[j], child_prefix, j + 1 == k.size(), false, it.depth + 1});
      }
    };
    for (auto r : roots) draw(r);
    for (auto i : members)
      if (!drawn[i]) draw(i);
  }
  return out;
}

}  // namespace weir::trace
