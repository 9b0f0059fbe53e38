// The LangGraph Server API's store requests, read (langgraph_store.hpp serves them). No Asio:
// the fuzz build compiles this file alone (fuzz/fuzz_langgraph_store.cpp).
//
// Every reader returns a value or an Error whose code decides the HTTP status and whose message
// is the answer's "detail": invalid_argument (422: a field of the wrong type, or outside the
// store's rules: graph::check_store_namespace and friends, so a bad body is refused before it
// reaches a backend), unsupported (501: `index`, `ttl` or `query` set to anything but null, which
// weir's store does not do, named). `refresh_ttl` is ignored (nothing has a TTL), as are unknown
// fields.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/graph/store.hpp"
#include "weir/runtime/error.hpp"

namespace weir::serve {

// An item a request names; `value` is the put's (an object, or null to delete).
struct StoreItemAsk {
  graph::Namespace ns;
  std::string key;
  boost::json::value value;
};

// PUT /store/items: {namespace, key, value, index?, ttl?}
Result<StoreItemAsk> read_store_put(const boost::json::object& body,
                                    const graph::StoreLimits& limits);
// DELETE /store/items: {namespace, key}
Result<StoreItemAsk> read_store_delete(const boost::json::object& body,
                                       const graph::StoreLimits& limits);
// GET /store/items?namespace=a.b&key=k: the namespace's labels joined with '.' (as the SDKs
// send it; '+' and percent escapes decoded).
Result<StoreItemAsk> read_store_get(std::string_view target, const graph::StoreLimits& limits);
// POST /store/items/search: {namespace_prefix, filter, limit (default 10), offset, query?}
Result<graph::StoreSearch> read_store_search(const boost::json::object& body,
                                             const graph::StoreLimits& limits);
// POST /store/namespaces: {prefix, suffix, max_depth, limit (default 100), offset}
Result<graph::NamespaceQuery> read_store_namespaces(const boost::json::object& body,
                                                    const graph::StoreLimits& limits);

}  // namespace weir::serve
