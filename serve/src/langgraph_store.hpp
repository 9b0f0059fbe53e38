// The LangGraph Server API's store routes (docs/langgraph-api.md "The store"): long-term memory
// shared by a server's runs and clients, on the graph::Store `LangGraphApi::store` holds (memory,
// or PostgreSQL on `weir serve --db`).
//   PUT    /store/items           {namespace, key, value}  -> 204 (value null: the item is deleted)
//   GET    /store/items?namespace=a.b&key=k                -> the item; 404 when there is none
//   DELETE /store/items           {namespace, key}         -> 204 (a missing item too)
//   POST   /store/items/search    {namespace_prefix, filter, limit, offset} -> {"items": [...]}
//   POST   /store/namespaces      {prefix, suffix, max_depth, limit, offset} -> {"namespaces":
//   [...]}
// An item is {"namespace": [...], "key", "value", "created_at", "updated_at"} (ISO times; a
// search's items add "score": null). Errors are the API's {"detail": text}: 400 a body that is
// not JSON, 422 a bad field (named), 404 a missing item, 413 a memory store that is full, 501
// `index`, `ttl` or `query` (semantic search), 503 a database that cannot be reached. Store calls
// run on the blocking pool, never on the I/O thread.
#pragma once

#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "langgraph_api.hpp"

namespace weir::serve {

// `s`: the path's segments, s[0] == "store".
boost::asio::awaitable<void> route_langgraph_store(const LangGraphApi& api, const http::Request& rq,
                                                   const std::vector<std::string>& s,
                                                   http::Response& out);

}  // namespace weir::serve
