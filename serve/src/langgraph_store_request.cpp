#include "langgraph_store_request.hpp"

#include <boost/json/serialize.hpp>

#include "langgraph_request.hpp"
#include "runs_path.hpp"
#include "weir/runtime/json_fields.hpp"

namespace weir::serve {

namespace json = boost::json;

namespace {

Error bad(std::string why) {
  return Error(Errc::invalid_argument, std::move(why));
}

// A field's value when it is present and not null.
const json::value* field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}

// `index`, `ttl` and `query` do something weir's store cannot: refused by name unless null.
Status refuse_unsupported(const json::object& b, std::string_view route,
                          std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    if (field(b, key))
      return Error(Errc::unsupported,
                   std::string(route) + ": '" + key +
                       "' is not supported by weir yet (its store has no semantic search and no "
                       "TTLs; docs/langgraph-api.md)");
  return {};
}

Result<graph::Namespace> labels(const json::object& b, const char* key, bool required) {
  const auto* v = field(b, key);
  if (!v) {
    if (required) return bad(std::string("'") + key + "' is required: a list of strings");
    return graph::Namespace{};
  }
  if (!v->is_array())
    return bad(std::string("'") + key + "' must be a list of strings, got " + json_kind_phrase(*v));
  graph::Namespace ns;
  for (std::size_t i = 0; i < v->as_array().size(); ++i) {
    const auto& l = v->as_array()[i];
    if (!l.is_string())
      return bad(std::string("'") + key + "[" + std::to_string(i) + "]' must be a string, got " +
                 json_kind_phrase(l));
    ns.emplace_back(l.as_string());
  }
  return ns;
}

Result<std::string> key_of(const json::object& b) {
  const auto* k = field(b, "key");
  if (!k) return bad("'key' is required: a string");
  if (!k->is_string())
    return bad(std::string("'key' must be a string, got ") + json_kind_phrase(*k));
  return std::string(k->as_string());
}

Result<StoreItemAsk> item_ask(const json::object& b, const graph::StoreLimits& limits) {
  auto ns = labels(b, "namespace", true);
  if (!ns) return std::move(ns).error();
  auto key = key_of(b);
  if (!key) return std::move(key).error();
  if (auto s = graph::check_store_namespace(*ns, limits, "namespace"); !s)
    return std::move(s).error();
  if (auto s = graph::check_store_key(*key, limits); !s) return std::move(s).error();
  return StoreItemAsk{std::move(*ns), std::move(*key), nullptr};
}

}  // namespace

Result<StoreItemAsk> read_store_put(const json::object& b, const graph::StoreLimits& limits) {
  if (auto s = refuse_unsupported(b, "PUT /store/items", {"index", "ttl"}); !s)
    return std::move(s).error();
  auto a = item_ask(b, limits);
  if (!a) return a;
  const auto* v = b.if_contains("value");
  if (!v) return bad("'value' is required: a JSON object (or null to delete the item)");
  if (auto s = graph::check_store_value(*v, limits); !s) return std::move(s).error();
  a->value = *v;
  return a;
}

Result<StoreItemAsk> read_store_delete(const json::object& b, const graph::StoreLimits& limits) {
  return item_ask(b, limits);
}

Result<StoreItemAsk> read_store_get(std::string_view target, const graph::StoreLimits& limits) {
  // URLSearchParams (the JS SDK) and httpx (the Python SDK) send a space as '+'.
  auto param = [&](std::string_view name) -> std::optional<std::string> {
    const auto q = target.find('?');
    if (q == std::string_view::npos) return std::nullopt;
    std::string plus(target);
    for (std::size_t i = q; i < plus.size(); ++i)
      if (plus[i] == '+') plus[i] = ' ';
    return query_value(plus, name);
  };
  json::object b;
  if (auto ns = param("namespace")) {
    json::array labels_array;
    if (!ns->empty())
      for (std::size_t i = 0;;) {
        const auto j = ns->find('.', i);
        labels_array.emplace_back(ns->substr(i, j == std::string::npos ? j : j - i));
        if (j == std::string::npos) break;
        i = j + 1;
      }
    b["namespace"] = std::move(labels_array);
  }
  if (auto key = param("key")) b["key"] = *key;
  auto a = item_ask(b, limits);
  if (!a && a.error().message.rfind("'namespace' is required", 0) == 0)
    return bad("'namespace' is required: the labels joined with '.' (?namespace=users.u1&key=k)");
  return a;
}

Result<graph::StoreSearch> read_store_search(const json::object& b,
                                             const graph::StoreLimits& limits) {
  if (auto s = refuse_unsupported(b, "POST /store/items/search", {"query"}); !s)
    return std::move(s).error();
  graph::StoreSearch q;
  auto ns = labels(b, "namespace_prefix", false);
  if (!ns) return std::move(ns).error();
  q.namespace_prefix = std::move(*ns);
  if (const auto* f = field(b, "filter")) {
    if (!f->is_object())
      return bad(std::string("'filter' must be an object, got ") + json_kind_phrase(*f));
    q.filter = f->as_object();
  }
  auto page = read_langgraph_page(b);
  if (!page) return std::move(page).error();
  q.limit = page->limit;
  q.offset = page->offset;
  if (auto s = graph::check_store_search(q, limits); !s) return std::move(s).error();
  return q;
}

Result<graph::NamespaceQuery> read_store_namespaces(const json::object& b,
                                                    const graph::StoreLimits& limits) {
  graph::NamespaceQuery q;
  for (auto [key, dst] : {std::pair{"prefix", &q.prefix}, std::pair{"suffix", &q.suffix}}) {
    auto ns = labels(b, key, false);
    if (!ns) return std::move(ns).error();
    *dst = std::move(*ns);
  }
  if (const auto* d = field(b, "max_depth")) {
    if (!d->is_int64() || d->as_int64() < 1 || d->as_int64() > 1000)
      return bad("'max_depth' must be an integer from 1 to 1000, got " + json::serialize(*d));
    q.max_depth = static_cast<std::size_t>(d->as_int64());
  }
  auto page = read_langgraph_page(b);
  if (!page) return std::move(page).error();
  q.limit = field(b, "limit") ? page->limit : 100;
  q.offset = page->offset;
  if (auto s = graph::check_namespace_query(q, limits); !s) return std::move(s).error();
  return q;
}

}  // namespace weir::serve
