#include "langgraph_store.hpp"

#include <boost/json.hpp>

#include "langgraph_answer.hpp"
#include "langgraph_request.hpp"
#include "langgraph_shapes.hpp"
#include "langgraph_store_request.hpp"
#include "run_follow.hpp"
#include "weir/graph/store.hpp"

namespace weir::serve {

namespace json = boost::json;
using boost::asio::awaitable;

namespace {

json::object item_json(const graph::StoreItem& item) {
  json::array ns;
  for (const auto& l : item.ns) ns.emplace_back(l);
  return json::object{{"namespace", std::move(ns)},
                      {"key", item.key},
                      {"value", item.value},
                      {"created_at", iso_time(item.created_at_ms)},
                      {"updated_at", iso_time(item.updated_at_ms)}};
}

std::string joined(const graph::Namespace& ns) {
  std::string out;
  for (const auto& l : ns) out += (out.empty() ? "" : ".") + l;
  return out;
}

}  // namespace

awaitable<void> route_langgraph_store(const LangGraphApi& api, const http::Request& rq,
                                      const std::vector<std::string>& s, http::Response& out) {
  const bool items = s.size() == 2 && s[1] == "items";
  const bool search = s.size() == 3 && s[1] == "items" && s[2] == "search" && rq.method == "POST";
  const bool spaces = s.size() == 2 && s[1] == "namespaces" && rq.method == "POST";
  const bool known = search || spaces ||
                     (items && (rq.method == "PUT" || rq.method == "GET" || rq.method == "DELETE"));
  if (!known || !api.store) {
    std::string route = "/store";
    for (std::size_t i = 1; i < s.size(); ++i) route += "/" + s[i];
    out = detail(501, rq.method + " " + route +
                          " is not implemented by weir yet (docs/langgraph-api.md lists the "
                          "endpoints it serves)");
    co_return;
  }
  graph::Store* store = api.store.get();
  const graph::StoreLimits& limits = store->limits();
  auto body = rq.method == "GET" ? Result<json::object>(json::object{}) : langgraph_body(rq.body);
  if (!body) {
    out = from_error(body.error());
    co_return;
  }
  if (items && rq.method == "GET") {
    auto ask = read_store_get(rq.target, limits);
    if (!ask) {
      out = from_error(ask.error());
      co_return;
    }
    auto got = co_await off_thread(*api.blocking, [&] { return store->get(ask->ns, ask->key); });
    if (!got)
      out = from_error(got.error());
    else if (!*got)
      out = detail(404,
                   "Item not found: key '" + ask->key + "' in namespace '" + joined(ask->ns) + "'");
    else
      out = answer(200, item_json(**got));
    co_return;
  }
  if (items) {  // PUT, DELETE
    auto ask =
        rq.method == "PUT" ? read_store_put(*body, limits) : read_store_delete(*body, limits);
    if (!ask) {
      out = from_error(ask.error());
      co_return;
    }
    auto done = co_await off_thread(*api.blocking, [&] {
      return rq.method == "PUT" ? store->put(ask->ns, ask->key, ask->value)
                                : store->remove(ask->ns, ask->key);
    });
    out = done ? http::Response{204, "", {}, ""} : from_error(done.error());
    co_return;
  }
  if (search) {
    auto q = read_store_search(*body, limits);
    if (!q) {
      out = from_error(q.error());
      co_return;
    }
    auto found = co_await off_thread(*api.blocking, [&] { return store->search(*q); });
    if (!found) {
      out = from_error(found.error());
      co_return;
    }
    json::array list;
    for (const auto& item : *found) {
      json::object j = item_json(item);
      j["score"] = nullptr;
      list.push_back(std::move(j));
    }
    out = answer(200, json::object{{"items", std::move(list)}});
    co_return;
  }
  auto q = read_store_namespaces(*body, limits);
  if (!q) {
    out = from_error(q.error());
    co_return;
  }
  auto found = co_await off_thread(*api.blocking, [&] { return store->list_namespaces(*q); });
  if (!found) {
    out = from_error(found.error());
    co_return;
  }
  json::array list;
  for (const auto& ns : *found) {
    json::array labels;
    for (const auto& l : ns) labels.emplace_back(l);
    list.push_back(std::move(labels));
  }
  out = answer(200, json::object{{"namespaces", std::move(list)}});
}

}  // namespace weir::serve
