// The store's rules (store.hpp) and what its backends share (store_common.hpp). No Asio, no
// database: the fuzz build compiles this file with the LangGraph store routes' readers.
#include "store_common.hpp"
#include "weir/runtime/json_fields.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "weir/graph/checkpointer.hpp"
#include "weir/graph/ids.hpp"

namespace weir::graph {

namespace json = boost::json;

namespace {

Error bad(std::string why) {
  return Error(Errc::invalid_argument, std::move(why));
}

// check_id's words, with the rule of the thing checked instead of an id's.
Status check_text(std::string_view what, std::string_view text, std::string_view rule) {
  auto s = check_id(what, text);
  if (s) return s;
  std::string m = std::move(s).error().message;
  if (auto p = m.find("; an id is "); p != std::string::npos) m = m.substr(0, p);
  return bad(m + "; " + std::string(rule));
}

std::string shown(std::string_view s) {
  constexpr std::size_t kShown = 40;
  return "'" + std::string(s.substr(0, kShown)) + (s.size() > kShown ? "...'" : "'");
}

// --- filters ---------------------------------------------------------------------------------

constexpr std::string_view kOperators[] = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"};

bool is_operator_object(const json::object& o) {
  return std::any_of(o.begin(), o.end(),
                     [](const auto& kv) { return !kv.key().empty() && kv.key()[0] == '$'; });
}

// -1, 0, 1; nullopt when either is not a number.
std::optional<int> compare_numbers(const json::value& a, const json::value& b) {
  if (!a.is_number() || !b.is_number()) return std::nullopt;
  auto integral = [](const json::value& v) { return v.is_int64() || v.is_uint64(); };
  if (integral(a) && integral(b)) {
    auto wide = [](const json::value& v) -> __int128 {
      return v.is_int64() ? __int128(v.get_int64()) : __int128(v.get_uint64());
    };
    const __int128 x = wide(a), y = wide(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  const double x = a.to_number<double>(), y = b.to_number<double>();
  return x < y ? -1 : x > y ? 1 : 0;
}

bool equal_json(const json::value& a, const json::value& b) {
  if (auto c = compare_numbers(a, b)) return *c == 0;
  if (a.kind() != b.kind()) return false;
  if (a.is_array()) {
    const auto &x = a.get_array(), &y = b.get_array();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!equal_json(x[i], y[i])) return false;
    return true;
  }
  if (a.is_object()) {
    const auto &x = a.get_object(), &y = b.get_object();
    if (x.size() != y.size()) return false;
    for (const auto& kv : x) {
      const auto* o = y.if_contains(kv.key());
      if (!o || !equal_json(kv.value(), *o)) return false;
    }
    return true;
  }
  return a == b;
}

const json::value kNull;

bool apply_operator(const json::value& have, std::string_view op, const json::value& want) {
  if (op == "$eq") return equal_json(have, want);
  if (op == "$ne") return !equal_json(have, want);
  int c;
  if (auto n = compare_numbers(have, want)) {
    c = *n;
  } else if (have.is_string() && want.is_string()) {
    const auto x = std::string_view(have.get_string()), y = std::string_view(want.get_string());
    c = x < y ? -1 : x > y ? 1 : 0;
  } else {
    return false;  // ordering between other kinds: no match
  }
  if (op == "$gt") return c > 0;
  if (op == "$gte") return c >= 0;
  if (op == "$lt") return c < 0;
  return c <= 0;  // $lte (check_store_filter admits no other)
}

// LangGraph's _compare_values: an operator object applies each operator; a plain object matches
// field by field (the item may have more); an array element by element; a scalar by equality.
bool matches(const json::value& have, const json::value& want) {
  if (want.is_object()) {
    const auto& w = want.get_object();
    if (is_operator_object(w)) {
      for (const auto& kv : w)
        if (!apply_operator(have, kv.key(), kv.value())) return false;
      return true;
    }
    if (!have.is_object()) return false;
    for (const auto& kv : w) {
      const auto* h = have.get_object().if_contains(kv.key());
      if (!matches(h ? *h : kNull, kv.value())) return false;
    }
    return true;
  }
  if (want.is_array()) {
    if (!have.is_array() || have.get_array().size() != want.get_array().size()) return false;
    for (std::size_t i = 0; i < want.get_array().size(); ++i)
      if (!matches(have.get_array()[i], want.get_array()[i])) return false;
    return true;
  }
  return equal_json(have, want);
}

Status check_filter_value(const json::value& v, const std::string& path, std::size_t depth) {
  if (depth > kMaxJsonDepth) return bad("'" + path + "' is nested too deeply");
  if (v.is_array()) {
    for (std::size_t i = 0; i < v.get_array().size(); ++i)
      if (auto s =
              check_filter_value(v.get_array()[i], path + "[" + std::to_string(i) + "]", depth + 1);
          !s)
        return s;
    return {};
  }
  if (!v.is_object()) return {};
  const auto& o = v.get_object();
  const bool ops = is_operator_object(o);
  for (const auto& kv : o) {
    const std::string sub = path + "." + std::string(kv.key());
    if (ops &&
        std::find(std::begin(kOperators), std::end(kOperators), kv.key()) == std::end(kOperators))
      return bad("'" + sub +
                 "': unknown filter operator; the store knows $eq, $ne, $gt, $gte, $lt and $lte "
                 "(an object with one $-key holds operators only)");
    if (auto s = check_filter_value(kv.value(), sub, depth + 1); !s) return s;
  }
  return {};
}

}  // namespace

// --- the rules -------------------------------------------------------------------------------

Status check_store_namespace(const Namespace& ns, const StoreLimits& limits, std::string_view what,
                             bool allow_empty) {
  const std::string w(what);
  if (ns.empty() && !allow_empty)
    return bad("'" + w + "' is empty: give at least one label, e.g. [\"users\", \"u1\"]");
  if (ns.size() > limits.max_namespace_depth)
    return bad("'" + w + "' has " + std::to_string(ns.size()) + " labels, more than the store's " +
               std::to_string(limits.max_namespace_depth));
  const std::string rule = "a namespace label is 1 to " + std::to_string(limits.max_label_bytes) +
                           " bytes of UTF-8 text without control characters or '.'";
  for (std::size_t i = 0; i < ns.size(); ++i) {
    const std::string field = w + "[" + std::to_string(i) + "]";
    const auto& label = ns[i];
    if (label.size() > limits.max_label_bytes)
      return bad("'" + field + "' is " + std::to_string(label.size()) + " bytes long (" +
                 shown(label) + "); " + rule);
    if (label.find('.') != std::string::npos)
      return bad("'" + field + "' (" + shown(label) +
                 ") contains '.': namespace labels cannot contain periods (the LangGraph SDKs "
                 "join a namespace with '.')");
    if (auto s = check_text("'" + field + "'", label, rule); !s) return s;
  }
  return {};
}

Status check_store_key(std::string_view key, const StoreLimits& limits) {
  const std::string rule = "a key is 1 to " + std::to_string(limits.max_key_bytes) +
                           " bytes of UTF-8 text without control characters";
  if (key.size() > limits.max_key_bytes)
    return bad("'key' is " + std::to_string(key.size()) + " bytes long (" + shown(key) + "); " +
               rule);
  return check_text("'key'", key, rule);
}

Status check_store_value(const json::value& value, const StoreLimits& limits, std::string* text) {
  if (value.is_null()) return {};
  if (!value.is_object())
    return bad("'value' must be a JSON object (or null to delete the item), got " +
               std::string(json_kind_phrase(value)));
  struct Item {
    const json::value* v;
    std::size_t depth;
  };
  std::vector<Item> stack{{&value, 1}};
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    const json::value& v = *it.v;
    if (v.is_double() && !std::isfinite(v.get_double()))
      return bad("'value' holds a non-finite number (NaN or Infinity), which JSON cannot store");
    if ((v.is_array() || v.is_object()) && it.depth > kMaxJsonDepth)
      return bad("'value' is nested deeper than " + std::to_string(kMaxJsonDepth) +
                 " levels of arrays and objects");
    if (v.is_array())
      for (const auto& e : v.get_array()) stack.push_back({&e, it.depth + 1});
    else if (v.is_object())
      for (const auto& kv : v.get_object()) stack.push_back({&kv.value(), it.depth + 1});
  }
  std::string s = json::serialize(value);
  if (s.size() > limits.max_value_bytes)
    return bad("'value' is " + std::to_string(s.size()) + " bytes of JSON, more than the store's " +
               std::to_string(limits.max_value_bytes) +
               " per item; keep large documents elsewhere and store a reference");
  if (text) *text = std::move(s);
  return {};
}

Status check_store_filter(const json::object& filter) {
  for (const auto& kv : filter)
    if (auto s = check_filter_value(kv.value(), "filter." + std::string(kv.key()), 2); !s) return s;
  return {};
}

bool store_filter_matches(const json::object& value, const json::object& filter) {
  for (const auto& kv : filter) {
    const auto* have = value.if_contains(kv.key());
    if (!matches(have ? *have : kNull, kv.value())) return false;
  }
  return true;
}

namespace {
Status check_page(std::size_t limit) {
  if (limit < 1 || limit > kMaxStorePage)
    return bad("'limit' must be 1 to " + std::to_string(kMaxStorePage) + ", got " +
               std::to_string(limit));
  return {};
}
}  // namespace

Status check_store_search(const StoreSearch& q, const StoreLimits& limits) {
  if (auto s = check_store_namespace(q.namespace_prefix, limits, "namespace_prefix", true); !s)
    return s;
  if (auto s = check_store_filter(q.filter); !s) return s;
  return check_page(q.limit);
}

Status check_namespace_query(const NamespaceQuery& q, const StoreLimits& limits) {
  if (auto s = check_store_namespace(q.prefix, limits, "prefix", true); !s) return s;
  if (auto s = check_store_namespace(q.suffix, limits, "suffix", true); !s) return s;
  if (q.max_depth && *q.max_depth < 1)
    return bad("'max_depth' must be at least 1, got " + std::to_string(*q.max_depth));
  return check_page(q.limit);
}

// --- what the backends share ----------------------------------------------------------------

namespace store_detail {

std::string join_namespace(const Namespace& ns) {
  std::string out;
  for (const auto& l : ns) {
    if (!out.empty()) out += '.';
    out += l;
  }
  return out;
}

Namespace split_namespace(std::string_view joined) {
  Namespace out;
  std::size_t i = 0;
  for (;;) {
    const auto j = joined.find('.', i);
    out.emplace_back(
        joined.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  return out;
}

PrefixRange prefix_range(const std::string& joined_prefix) {
  return {joined_prefix, joined_prefix + ".", joined_prefix + "/"};
}

Namespace literal_prefix(const Namespace& prefix) {
  Namespace out;
  for (const auto& l : prefix) {
    if (l == "*") break;
    out.push_back(l);
  }
  return out;
}

std::string describe_item(const Namespace& ns, std::string_view key) {
  return "namespace '" + join_namespace(ns) + "' key '" + std::string(key) + "'";
}

Result<StoreItem> item_of(StoredRow row, std::string_view where) {
  json::parse_options options;
  options.max_depth = kMaxJsonDepth;
  options.allow_invalid_utf8 = true;
  boost::system::error_code ec;
  json::value v = json::parse(row.value, ec, {}, options);
  StoreItem item;
  item.ns = split_namespace(row.ns);
  if (ec || !v.is_object())
    return Error(
        Errc::corrupt_data,
        std::string(where) + ": the value at " + describe_item(item.ns, row.key) + " is " +
            (ec ? "not valid JSON (" + ec.message() + ")" : std::string("not a JSON object")));
  item.key = std::move(row.key);
  item.value = std::move(v.as_object());
  item.created_at_ms = row.created_at_ms;
  item.updated_at_ms = row.updated_at_ms;
  return item;
}

Result<std::vector<StoreItem>> search_rows(const StoreSearch& q, const FetchRows& fetch,
                                           std::string_view where) {
  constexpr std::size_t kBatch = 256;
  std::vector<StoreItem> out;
  std::size_t skip = q.offset;
  std::optional<int64_t> below;
  for (;;) {
    // Without a filter every row counts: read no more than the page needs.
    const std::size_t want =
        q.filter.empty() ? std::min(kBatch, skip + q.limit - out.size()) : kBatch;
    auto rows = fetch(below, std::max<std::size_t>(want, 1));
    if (!rows) return std::move(rows).error();
    if (rows->empty()) return out;
    for (auto& row : *rows) {
      below = row.seq;
      if (q.filter.empty() && skip > 0) {  // skipped unread
        --skip;
        continue;
      }
      auto item = item_of(std::move(row), where);
      if (!item) return std::move(item).error();
      if (!store_filter_matches(item->value, q.filter)) continue;
      if (skip > 0) {
        --skip;
        continue;
      }
      out.push_back(std::move(*item));
      if (out.size() >= q.limit) return out;
    }
    if (rows->size() < std::max<std::size_t>(want, 1)) return out;
  }
}

std::vector<Namespace> select_namespaces(const std::vector<std::string>& joined,
                                         const NamespaceQuery& q) {
  auto label_matches = [](const std::string& want, const std::string& have) {
    return want == "*" || want == have;
  };
  std::vector<Namespace> all;
  for (const auto& j : joined) {
    Namespace ns = split_namespace(j);
    if (ns.size() < q.prefix.size() || ns.size() < q.suffix.size()) continue;
    bool ok = true;
    for (std::size_t i = 0; ok && i < q.prefix.size(); ++i) ok = label_matches(q.prefix[i], ns[i]);
    const std::size_t from = ns.size() - q.suffix.size();
    for (std::size_t i = 0; ok && i < q.suffix.size(); ++i)
      ok = label_matches(q.suffix[i], ns[from + i]);
    if (!ok) continue;
    if (q.max_depth && ns.size() > *q.max_depth) ns.resize(*q.max_depth);
    all.push_back(std::move(ns));
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  std::vector<Namespace> page;
  for (std::size_t i = q.offset; i < all.size() && page.size() < q.limit; ++i)
    page.push_back(std::move(all[i]));
  return page;
}

}  // namespace store_detail
}  // namespace weir::graph
