// The LangGraph Server API's store routes on `weir serve` (serve/src/langgraph_store.hpp) over
// real HTTP on loopback: the shapes a LangGraph client reads, the errors it gets; then the
// official JS client's store calls (tests/langgraph/clients/store_flows.mjs), skipped, saying
// why, without node or the package.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "langgraph_fixture.hpp"

namespace weir::serve {
namespace {

// An ISO time as the API writes them: 2026-11-28T06:38:06.057Z.
bool iso(const json::value& v) {
  return v.is_string() && v.as_string().size() == 24 && v.as_string()[10] == 'T' &&
         v.as_string().back() == 'Z';
}

// Put, get, search (prefix, filter, page), namespaces, delete: what LangGraph's store does.
TEST(LangGraphStore, PutGetSearchListAndDeleteItems) {
  auto s = start(lg_config());
  auto put = [&](std::string_view body) {
    auto r = call(s.port, "PUT", "/store/items", std::string(body));
    EXPECT_EQ(r.status, 204) << r.body;
    EXPECT_EQ(r.body, "");
  };
  put(R"({"namespace": ["users", "u1"], "key": "prefs", "value": {"theme": "dark", "lang": "en"}})");
  put(R"({"namespace": ["users", "u1", "memories"], "key": "m1", "value": {"kind": "fact", "n": 1}})");
  put(R"({"namespace": ["users", "u1", "memories"], "key": "m2", "value": {"kind": "pref", "n": 2}})");
  put(R"({"namespace": ["users", "u2"], "key": "prefs", "value": {"theme": "light"}, "index": null, "ttl": null})");

  auto got = call(s.port, "GET", "/store/items?namespace=users.u1&key=prefs");
  ASSERT_EQ(got.status, 200) << got.body;
  const json::value item = body_json(got);
  EXPECT_EQ(json::serialize(item.at("namespace")), R"(["users","u1"])");
  EXPECT_EQ(item.at("key"), "prefs");
  EXPECT_EQ(json::serialize(item.at("value")), R"({"theme":"dark","lang":"en"})");
  EXPECT_TRUE(iso(item.at("created_at"))) << got.body;
  EXPECT_EQ(item.at("created_at"), item.at("updated_at"));

  auto found = call(s.port, "POST", "/store/items/search",
                    R"({"namespace_prefix": ["users", "u1"], "filter": {"kind": "fact"}})");
  ASSERT_EQ(found.status, 200) << found.body;
  const json::value found_json = body_json(found);
  const auto& items = found_json.at("items").as_array();
  ASSERT_EQ(items.size(), 1u) << found.body;
  EXPECT_EQ(items[0].at("key"), "m1");
  EXPECT_EQ(json::serialize(items[0].at("namespace")), R"(["users","u1","memories"])");
  EXPECT_EQ(items[0].at("score"), nullptr);
  auto newest = body_json(call(s.port, "POST", "/store/items/search",
                               R"({"namespace_prefix": ["users"], "limit": 2, "offset": 1})"));
  ASSERT_EQ(newest.at("items").as_array().size(), 2u);
  EXPECT_EQ(newest.at("items").at(0).at("key"), "m2");  // newest first: u2's prefs skipped
  EXPECT_EQ(newest.at("items").at(1).at("key"), "m1");

  auto spaces = call(s.port, "POST", "/store/namespaces", R"({"prefix": ["users"]})");
  ASSERT_EQ(spaces.status, 200) << spaces.body;
  EXPECT_EQ(json::serialize(body_json(spaces)),
            R"({"namespaces":[["users","u1"],["users","u1","memories"],["users","u2"]]})");
  auto cut = call(s.port, "POST", "/store/namespaces",
                  R"({"suffix": ["memories"], "max_depth": 2, "limit": 5})");
  EXPECT_EQ(json::serialize(body_json(cut)), R"({"namespaces":[["users","u1"]]})");

  auto removed =
      call(s.port, "DELETE", "/store/items", R"({"namespace": ["users", "u1"], "key": "prefs"})");
  EXPECT_EQ(removed.status, 204) << removed.body;
  auto gone = call(s.port, "GET", "/store/items?namespace=users.u1&key=prefs");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(detail(gone), "Item not found: key 'prefs' in namespace 'users.u1'");
  // A put with a null value deletes too; deleting what is gone is fine.
  put(R"({"namespace": ["users", "u2"], "key": "prefs", "value": null})");
  EXPECT_EQ(call(s.port, "GET", "/store/items?namespace=users.u2&key=prefs").status, 404);
  EXPECT_EQ(
      call(s.port, "DELETE", "/store/items", R"({"namespace": ["users", "u2"], "key": "prefs"})")
          .status,
      204);
  // Query strings decode '+' and escapes (a key with a space, as URLSearchParams sends it).
  put(R"({"namespace": ["a b"], "key": "k 1", "value": {"x": 1}})");
  auto spaced = call(s.port, "GET", "/store/items?namespace=a+b&key=k%201");
  EXPECT_EQ(spaced.status, 200) << spaced.body;
}

// Bad bodies: a clear 4xx naming the field; what weir's store does not do: 501 naming it.
TEST(LangGraphStore, BadRequestsSayWhatIsWrong) {
  auto s = start(lg_config());
  auto expect = [&](const char* method, const char* path, std::string body, int status,
                    const std::string& text) {
    auto r = call(s.port, method, path, body);
    EXPECT_EQ(r.status, status) << method << " " << path << " " << body << ": " << r.body;
    EXPECT_EQ(detail(r), text) << method << " " << path << " " << body;
  };
  expect("PUT", "/store/items", "{not json", 400, "the request body:1:2: syntax error");
  expect("PUT", "/store/items", R"({"key": "k", "value": {}})", 422,
         "'namespace' is required: a list of strings");
  expect("PUT", "/store/items", R"({"namespace": "a", "key": "k", "value": {}})", 422,
         "'namespace' must be a list of strings, got a string");
  expect("PUT", "/store/items", R"({"namespace": ["a", 5], "key": "k", "value": {}})", 422,
         "'namespace[1]' must be a string, got an integer");
  expect("PUT", "/store/items", R"({"namespace": ["a.b"], "key": "k", "value": {}})", 422,
         "'namespace[0]' ('a.b') contains '.': namespace labels cannot contain periods (the "
         "LangGraph SDKs join a namespace with '.')");
  expect("PUT", "/store/items", R"({"namespace": [], "key": "k", "value": {}})", 422,
         "'namespace' is empty: give at least one label, e.g. [\"users\", \"u1\"]");
  expect("PUT", "/store/items", R"({"namespace": ["a"], "value": {}})", 422,
         "'key' is required: a string");
  expect("PUT", "/store/items", R"({"namespace": ["a"], "key": "k"})", 422,
         "'value' is required: a JSON object (or null to delete the item)");
  expect("PUT", "/store/items", R"({"namespace": ["a"], "key": "k", "value": [1]})", 422,
         "'value' must be a JSON object (or null to delete the item), got an array");
  expect("PUT", "/store/items",
         R"({"namespace": ["a"], "key": "k", "value": {}, "index": ["text"]})", 501,
         "PUT /store/items: 'index' is not supported by weir yet (its store has no semantic "
         "search and no TTLs; docs/langgraph-api.md)");
  expect("PUT", "/store/items", R"({"namespace": ["a"], "key": "k", "value": {}, "ttl": 5})", 501,
         "PUT /store/items: 'ttl' is not supported by weir yet (its store has no semantic search "
         "and no TTLs; docs/langgraph-api.md)");
  expect("POST", "/store/items/search", R"({"query": "what does the user like?"})", 501,
         "POST /store/items/search: 'query' is not supported by weir yet (its store has no "
         "semantic search and no TTLs; docs/langgraph-api.md)");
  expect("POST", "/store/items/search", R"({"filter": {"n": {"$in": [1]}}})", 422,
         "'filter.n.$in': unknown filter operator; the store knows $eq, $ne, $gt, $gte, $lt and "
         "$lte (an object with one $-key holds operators only)");
  expect("POST", "/store/items/search", R"({"filter": [1]})", 422,
         "'filter' must be an object, got an array");
  expect("POST", "/store/items/search", R"({"limit": 0})", 422,
         "'limit' must be an integer from 1 to 1000, got 0");
  expect("POST", "/store/namespaces", R"({"max_depth": 0})", 422,
         "'max_depth' must be an integer from 1 to 1000, got 0");
  expect("DELETE", "/store/items", R"({"namespace": ["a"]})", 422, "'key' is required: a string");
  expect("GET", "/store/items?key=k", "", 422,
         "'namespace' is required: the labels joined with '.' (?namespace=users.u1&key=k)");
  expect("GET", "/store/items?namespace=a..b&key=k", "", 422,
         "'namespace[1]' is empty; a namespace label is 1 to 256 bytes of UTF-8 text without "
         "control characters or '.'");
  expect("GET", "/store/items?namespace=a&key=k%00", "", 422,
         "'key' holds a control character (byte 0x00 at offset 1, after 'k'); a key is 1 to "
         "1024 bytes of UTF-8 text without control characters");
  expect("POST", "/store/items", "{}", 501,
         "POST /store/items is not implemented by weir yet (docs/langgraph-api.md lists the "
         "endpoints it serves)");
  // Nothing was stored by any of them.
  auto all = call(s.port, "POST", "/store/items/search", "{}");
  EXPECT_EQ(json::serialize(body_json(all)), R"({"items":[]})");
}

// The official JS client's store calls, as a user's program makes them.
TEST(LangGraphStore, TheOfficialJsClientsStoreCallsWork) {
  if (auto why = no_js_client(); !why.empty()) GTEST_SKIP() << why;
  auto s = start(lg_config());
  const json::value v = run_client_script("store_flows.mjs", {loopback(s.port)});
  ASSERT_TRUE(v.is_object());
  const std::string all = json::serialize(v);
  EXPECT_EQ(v.at("put"), nullptr) << all;  // putItem resolves to nothing (204)
  const auto& got = v.at("got");
  EXPECT_EQ(json::serialize(got.at("value")), R"({"theme":"dark","lang":"en"})") << all;
  EXPECT_EQ(json::serialize(got.at("namespace")), R"(["users","u1"])");
  EXPECT_EQ(got.at("createdAt"), got.at("created_at"));  // the SDK's camelCase copies
  EXPECT_EQ(json::serialize(v.at("prefix_keys")), R"(["m2","m1","prefs"])") << all;
  EXPECT_EQ(json::serialize(v.at("filtered_keys")), R"(["m1"])") << all;
  EXPECT_EQ(json::serialize(v.at("paged_keys")), R"(["m1"])") << all;
  EXPECT_EQ(json::serialize(v.at("namespaces")),
            R"([["users","u1"],["users","u1","memories"],["users","u2"]])")
      << all;
  EXPECT_EQ(json::serialize(v.at("memories")), R"([["users","u1","memories"]])") << all;
  EXPECT_EQ(json::serialize(v.at("depth1")), R"([["users"]])") << all;
  EXPECT_EQ(v.at("deleted").at("status"), 404) << all;
  EXPECT_EQ(v.at("missing").at("status"), 404) << all;
  EXPECT_NE(v.at("missing").at("thrown").as_string().find("Item not found"), std::string::npos)
      << all;
  EXPECT_EQ(v.at("bad_label").at("thrown"),
            "Invalid namespace label 'a.b'. Namespace labels cannot contain periods ('.')")
      << all;  // the SDK refuses it before sending
  EXPECT_EQ(v.at("query").at("status"), 501) << all;
}

}  // namespace
}  // namespace weir::serve
