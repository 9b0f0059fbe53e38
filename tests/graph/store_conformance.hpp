// The store conformance suite (weir/graph/store.hpp): one typed test suite every backend passes
// (memory, SQLite, PostgreSQL). A backend is a type with `static constexpr const char* kName`,
// `static constexpr bool kPersistent` (a store opened again on the same scratch file sees what the
// first one put), `static std::string unavailable()` ("" when the backend can run here; else why
// not, and its tests skip saying so) and `static Result<std::unique_ptr<Store>> open(const
// fs::path& scratch_file, StoreLimits)` (scratch_file lies in a fresh temp dir per test; a server
// backend opens a fresh database for a new scratch file and the same one for the same file).
// Instantiate with INSTANTIATE_TYPED_TEST_SUITE_P(Name, StoreTest, Types, StoreBackendName).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "weir/graph/store.hpp"

namespace weir::graph::store_conformance {

namespace fs = std::filesystem;
namespace json = boost::json;

inline json::value js(std::string_view text) {
  return json::parse(text);
}

template <class Backend>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = Backend::unavailable(); !why.empty()) GTEST_SKIP() << why;
    static std::atomic<int> n{0};
    dir_ = fs::temp_directory_path() /
           ("weir-store-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::create_directories(dir_);
    auto s = open();
    ASSERT_TRUE(s) << s.error().to_string();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  Result<std::unique_ptr<Store>> open(StoreLimits limits = {}) {
    return Backend::open(dir_ / "store.db", limits);
  }
  Store& store() { return *store_; }

  void put(const Namespace& ns, const std::string& key, std::string_view value) {
    auto s = store_->put(ns, key, js(value));
    ASSERT_TRUE(s) << s.error().to_string();
  }
  std::vector<std::string> keys(const StoreSearch& q) {
    auto r = store_->search(q);
    EXPECT_TRUE(r) << r.error().to_string();
    std::vector<std::string> out;
    if (r)
      for (const auto& i : *r) out.push_back(i.key);
    return out;
  }
  std::vector<std::string> namespaces(const NamespaceQuery& q) {
    auto r = store_->list_namespaces(q);
    EXPECT_TRUE(r) << r.error().to_string();
    std::vector<std::string> out;
    if (r)
      for (const auto& ns : *r) {
        std::string j;
        for (const auto& l : ns) j += (j.empty() ? "" : "/") + l;
        out.push_back(j);
      }
    return out;
  }
  template <class R>
  std::string refusal(const R& s) {
    EXPECT_FALSE(s);
    if (s) return "(accepted)";
    EXPECT_TRUE(s.error().is(Errc::invalid_argument)) << s.error().to_string();
    return s.error().message;
  }

  fs::path dir_;
  std::unique_ptr<Store> store_;
};

TYPED_TEST_SUITE_P(StoreTest);

// put upserts: a second put replaces the value and updated_at and keeps created_at.
TYPED_TEST_P(StoreTest, PutThenGetReturnsTheItemAndAPutReplacesIt) {
  auto& s = this->store();
  this->put({"users", "u1"}, "prefs", R"({"theme": "dark", "n": 1})");
  auto got = s.get({"users", "u1"}, "prefs");
  ASSERT_TRUE(got) << got.error().to_string();
  ASSERT_TRUE(got->has_value());
  const StoreItem first = **got;
  EXPECT_EQ(json::serialize(first.value), R"({"theme":"dark","n":1})");
  EXPECT_EQ(first.ns, (Namespace{"users", "u1"}));
  EXPECT_EQ(first.key, "prefs");
  EXPECT_GT(first.created_at_ms, 1'600'000'000'000);
  EXPECT_EQ(first.created_at_ms, first.updated_at_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  this->put({"users", "u1"}, "prefs", R"({"theme": "light"})");
  auto again = s.get({"users", "u1"}, "prefs");
  ASSERT_TRUE(again && again->has_value());
  EXPECT_EQ(json::serialize((**again).value), R"({"theme":"light"})");
  EXPECT_EQ((**again).created_at_ms, first.created_at_ms);
  EXPECT_GT((**again).updated_at_ms, first.updated_at_ms);
  // Another namespace, same key: another item.
  auto other = s.get({"users", "u2"}, "prefs");
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_value());
}

// A missing item is no error; remove and put(null) delete, and deleting twice is fine.
TYPED_TEST_P(StoreTest, RemoveAndPutNullDeleteAndAreIdempotent) {
  auto& s = this->store();
  ASSERT_TRUE(s.remove({"a"}, "nothing"));
  this->put({"a"}, "k1", R"({"v": 1})");
  this->put({"a"}, "k2", R"({"v": 2})");
  ASSERT_TRUE(s.remove({"a"}, "k1"));
  ASSERT_TRUE(s.remove({"a"}, "k1"));
  ASSERT_TRUE(s.put({"a"}, "k2", nullptr));
  for (const char* k : {"k1", "k2"}) {
    auto g = s.get({"a"}, k);
    ASSERT_TRUE(g) << g.error().to_string();
    EXPECT_FALSE(g->has_value()) << k;
  }
  EXPECT_TRUE(this->keys({}).empty());
  EXPECT_TRUE(this->namespaces({}).empty());  // a namespace exists while it holds items
}

// search: under a namespace prefix (label by label: ["users"] is not ["usersx"]), the most
// recently put first, paged.
TYPED_TEST_P(StoreTest, SearchListsAPrefixNewestFirstAndPages) {
  this->put({"users", "u1"}, "a", R"({"n": 1})");
  this->put({"users", "u2"}, "b", R"({"n": 2})");
  this->put({"usersx"}, "c", R"({"n": 3})");
  this->put({"users", "u1", "notes"}, "d", R"({"n": 4})");
  this->put({"users"}, "e", R"({"n": 5})");
  this->put({"users", "u1"}, "a", R"({"n": 6})");  // a again: now the newest
  StoreSearch q;
  q.namespace_prefix = {"users"};
  EXPECT_THAT(this->keys(q), ::testing::ElementsAre("a", "e", "d", "b"));
  q.namespace_prefix = {"users", "u1"};
  EXPECT_THAT(this->keys(q), ::testing::ElementsAre("a", "d"));
  q.namespace_prefix = {};
  EXPECT_THAT(this->keys(q), ::testing::ElementsAre("a", "e", "d", "c", "b"));
  q.limit = 2;
  q.offset = 1;
  EXPECT_THAT(this->keys(q), ::testing::ElementsAre("e", "d"));
  q.offset = 4;
  EXPECT_THAT(this->keys(q), ::testing::ElementsAre("b"));
  q.offset = 9;
  EXPECT_TRUE(this->keys(q).empty());
  auto items = this->store().search(StoreSearch{{"users", "u2"}, {}, 10, 0});
  ASSERT_TRUE(items && items->size() == 1u);
  EXPECT_EQ((*items)[0].ns, (Namespace{"users", "u2"}));
  EXPECT_EQ(json::serialize((*items)[0].value), R"({"n":2})");
}

// Filters as LangGraph's stores read them: equality of fields (numbers by value, objects field by
// field), operators, a missing field as null; paging counts matches.
TYPED_TEST_P(StoreTest, SearchFiltersOnValueFields) {
  this->put({"m"}, "1",
            R"({"kind": "fact", "score": 3, "tags": ["x", "y"], "who": {"id": 1, "n": "a"}})");
  this->put({"m"}, "2", R"({"kind": "fact", "score": 7.5})");
  this->put({"m"}, "3", R"({"kind": "pref", "score": 5})");
  this->put({"m"}, "4", R"({"kind": "fact", "score": 3.0, "extra": null})");
  auto by = [&](std::string_view filter, std::size_t limit = 10, std::size_t offset = 0) {
    StoreSearch q;
    q.filter = js(filter).as_object();
    q.limit = limit;
    q.offset = offset;
    return this->keys(q);
  };
  using ::testing::ElementsAre;
  EXPECT_THAT(by(R"({"kind": "fact"})"), ElementsAre("4", "2", "1"));
  EXPECT_THAT(by(R"({"kind": "fact", "score": 3})"), ElementsAre("4", "1"));  // 3 == 3.0
  EXPECT_THAT(by(R"({"who": {"id": 1}})"), ElementsAre("1"));
  EXPECT_THAT(by(R"({"tags": ["x", "y"]})"), ElementsAre("1"));
  EXPECT_THAT(by(R"({"tags": ["x"]})"), ElementsAre());
  EXPECT_THAT(by(R"({"score": {"$gt": 3}})"), ElementsAre("3", "2"));
  EXPECT_THAT(by(R"({"score": {"$gte": 3, "$lt": 7}})"), ElementsAre("4", "3", "1"));
  EXPECT_THAT(by(R"({"kind": {"$ne": "fact"}})"), ElementsAre("3"));
  EXPECT_THAT(by(R"({"extra": null})"), ElementsAre("4", "3", "2", "1"));  // missing is null
  EXPECT_THAT(by(R"({"kind": {"$lt": "g"}})"), ElementsAre("4", "2", "1"));
  EXPECT_THAT(by(R"({"kind": {"$gt": 1}})"), ElementsAre());  // a string is not above a number
  EXPECT_THAT(by(R"({"kind": "fact"})", 1, 1), ElementsAre("2"));
  StoreSearch q;
  q.filter = js(R"({"score": {"$in": [3]}})").as_object();
  EXPECT_EQ(this->refusal(this->store().search(q)),
            "'filter.score.$in': unknown filter operator; the store knows $eq, $ne, $gt, $gte, "
            "$lt and $lte (an object with one $-key holds operators only)");
}

// list_namespaces: matched label by label ("*" any one), cut to max_depth, without repeats, in
// label order, paged.
TYPED_TEST_P(StoreTest, ListNamespacesMatchesCutsSortsAndPages) {
  this->put({"users", "u2", "memories"}, "k", "{}");
  this->put({"users", "u1", "memories"}, "k", "{}");
  this->put({"users", "u1", "prefs"}, "k", "{}");
  this->put({"users", "u1"}, "k", "{}");
  this->put({"users-old", "u9"}, "k", "{}");
  this->put({"orgs", "o1", "memories"}, "k", "{}");
  using ::testing::ElementsAre;
  EXPECT_THAT(this->namespaces({}),
              ElementsAre("orgs/o1/memories", "users/u1", "users/u1/memories", "users/u1/prefs",
                          "users/u2/memories", "users-old/u9"));
  EXPECT_THAT(this->namespaces({{"users"}, {}, std::nullopt, 100, 0}),
              ElementsAre("users/u1", "users/u1/memories", "users/u1/prefs", "users/u2/memories"));
  EXPECT_THAT(this->namespaces({{}, {"memories"}, std::nullopt, 100, 0}),
              ElementsAre("orgs/o1/memories", "users/u1/memories", "users/u2/memories"));
  EXPECT_THAT(this->namespaces({{"*", "u1"}, {}, std::nullopt, 100, 0}),
              ElementsAre("users/u1", "users/u1/memories", "users/u1/prefs"));
  EXPECT_THAT(this->namespaces({{"users"}, {}, 2, 100, 0}), ElementsAre("users/u1", "users/u2"));
  EXPECT_THAT(this->namespaces({{}, {}, 1, 100, 0}), ElementsAre("orgs", "users", "users-old"));
  EXPECT_THAT(this->namespaces({{}, {}, 1, 1, 1}), ElementsAre("users"));
  EXPECT_THAT(this->namespaces({{"users", "u1", "memories", "x"}, {}, std::nullopt, 100, 0}),
              ElementsAre());
}

// The bounds, with the same words in every backend; a refused put stores nothing.
TYPED_TEST_P(StoreTest, OutOfBoundsInputIsRefusedNamingTheField) {
  StoreLimits limits;
  limits.max_namespace_depth = 3;
  limits.max_label_bytes = 8;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 64;
  this->store_.reset();
  auto opened = this->open(limits);
  ASSERT_TRUE(opened) << opened.error().to_string();
  this->store_ = std::move(*opened);
  auto& s = this->store();
  EXPECT_EQ(this->refusal(s.put({"a"}, "k", js("[1, 2]"))),
            "'value' must be a JSON object (or null to delete the item), got an array");
  EXPECT_EQ(this->refusal(s.put({"a"}, "k", js("\"text\""))),
            "'value' must be a JSON object (or null to delete the item), got a string");
  EXPECT_EQ(this->refusal(s.put({"a"}, "k", js(R"({"text": ")" + std::string(80, 'x') + "\"}"))),
            "'value' is 91 bytes of JSON, more than the store's 64 per item; keep large documents "
            "elsewhere and store a reference");
  EXPECT_EQ(this->refusal(s.put({}, "k", js("{}"))),
            "'namespace' is empty: give at least one label, e.g. [\"users\", \"u1\"]");
  EXPECT_EQ(this->refusal(s.put({"a", "b", "c", "d"}, "k", js("{}"))),
            "'namespace' has 4 labels, more than the store's 3");
  EXPECT_EQ(this->refusal(s.put({"a", "b.c"}, "k", js("{}"))),
            "'namespace[1]' ('b.c') contains '.': namespace labels cannot contain periods (the "
            "LangGraph SDKs join a namespace with '.')");
  EXPECT_EQ(this->refusal(s.put({"a", ""}, "k", js("{}"))),
            "'namespace[1]' is empty; a namespace label is 1 to 8 bytes of UTF-8 text without "
            "control characters or '.'");
  EXPECT_EQ(this->refusal(s.put({"abcdefghi"}, "k", js("{}"))),
            "'namespace[0]' is 9 bytes long ('abcdefghi'); a namespace label is 1 to 8 bytes of "
            "UTF-8 text without control characters or '.'");
  EXPECT_EQ(this->refusal(s.put({"a"}, std::string("k\0x", 3), js("{}"))),
            "'key' holds a control character (byte 0x00 at offset 1, after 'k'); a key is 1 to "
            "16 bytes of UTF-8 text without control characters");
  EXPECT_EQ(this->refusal(s.put({"a"}, "\xff", js("{}"))),
            "'key' is not valid UTF-8 (byte 0xff at offset 0); a key is 1 to 16 bytes of UTF-8 "
            "text without control characters");
  EXPECT_EQ(this->refusal(s.put({"a"}, std::string(17, 'k'), js("{}"))),
            "'key' is 17 bytes long ('kkkkkkkkkkkkkkkkk'); a key is 1 to 16 bytes of UTF-8 text "
            "without control characters");
  EXPECT_EQ(this->refusal(s.get({"a.b"}, "k")),
            "'namespace[0]' ('a.b') contains '.': namespace labels cannot contain periods (the "
            "LangGraph SDKs join a namespace with '.')");
  EXPECT_EQ(this->refusal(s.search(StoreSearch{{}, {}, 0, 0})), "'limit' must be 1 to 1000, got 0");
  EXPECT_EQ(this->refusal(s.list_namespaces({{}, {}, 0, 10, 0})),
            "'max_depth' must be at least 1, got 0");
  // Keys may hold '.'; within the bounds everything is accepted.
  ASSERT_TRUE(s.put({"a", "b", "c"}, "file.txt", js(R"({"ok": true})")));
  EXPECT_THAT(this->keys({}), ::testing::ElementsAre("file.txt"));
}

// Any thread may call any method at once; nothing is lost.
TYPED_TEST_P(StoreTest, ConcurrentPutsAreAllStored) {
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (!this->store_->put({"t" + std::to_string(t)}, "k" + std::to_string(i),
                               js(R"({"i": )" + std::to_string(i) + "}")))
          ++failures;
        (void)this->store_->search(StoreSearch{{}, {}, 5, 0});
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(this->keys(StoreSearch{{}, {}, 1000, 0}).size(), std::size_t{kThreads * kEach});
  EXPECT_EQ(this->namespaces({}).size(), std::size_t{kThreads});
}

// update() reads and writes one item atomically: it sees nullopt for a missing item, an error
// from the change writes nothing, null removes the item; and concurrent increments, from threads
// and (persistent backends) from a second store on the same file or database, all count.
TYPED_TEST_P(StoreTest, UpdateIsAnAtomicReadModifyWrite) {
  const Namespace ns{"counters"};
  auto bump = [](const std::optional<StoreItem>& now) -> Result<json::value> {
    const int64_t n = now ? now->value.at("n").as_int64() : 0;
    return json::value(json::object{{"n", n + 1}});
  };
  bool saw_none = false;
  ASSERT_TRUE(this->store_->update(ns, "c", [&](const std::optional<StoreItem>& now) {
    saw_none = !now.has_value();
    return bump(now);
  }));
  EXPECT_TRUE(saw_none);
  auto refused = this->store_->update(ns, "c", [](const std::optional<StoreItem>&) {
    return Result<json::value>(Error(Errc::invalid_argument, "no, thanks"));
  });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "no, thanks");
  auto bad = this->store_->update(
      ns, "c", [](const std::optional<StoreItem>&) { return Result<json::value>(json::value(7)); });
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(Errc::invalid_argument)) << bad.error().to_string();
  auto one = this->store_->get(ns, "c");
  ASSERT_TRUE(one && one->has_value());
  EXPECT_EQ(json::serialize((**one).value), R"({"n":1})");

  std::unique_ptr<Store> second;
  if (TypeParam::kPersistent) {
    auto s = this->open();
    ASSERT_TRUE(s) << s.error().to_string();
    second = std::move(*s);
  }
  constexpr int kThreads = 4, kEach = 25;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Store& on = second && t % 2 == 1 ? *second : *this->store_;
      for (int i = 0; i < kEach; ++i) {
        if (!on.update(ns, "c", bump)) ++failures;
        if (!on.update(ns, "fresh" + std::to_string(i), bump)) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto all = this->store_->get(ns, "c");
  ASSERT_TRUE(all && all->has_value());
  EXPECT_EQ((**all).value.at("n"), 1 + kThreads * kEach);
  for (int i = 0; i < kEach; ++i) {
    auto f = this->store_->get(ns, "fresh" + std::to_string(i));
    ASSERT_TRUE(f && f->has_value());
    EXPECT_EQ((**f).value.at("n"), kThreads) << "fresh" << i;
  }
  ASSERT_TRUE(this->store_->update(
      ns, "c", [](const std::optional<StoreItem>&) { return Result<json::value>(json::value()); }));
  auto gone = this->store_->get(ns, "c");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());
}

// A persistent store opened again holds what was put.
TYPED_TEST_P(StoreTest, APersistentStoreKeepsItsItemsAcrossOpens) {
  if (!TypeParam::kPersistent) GTEST_SKIP() << "the memory store lives with its process";
  this->put({"users", "u1"}, "prefs", R"({"theme": "dark"})");
  this->store_.reset();
  auto again = this->open();
  ASSERT_TRUE(again) << again.error().to_string();
  auto got = (*again)->get({"users", "u1"}, "prefs");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(json::serialize((**got).value), R"({"theme":"dark"})");
}

REGISTER_TYPED_TEST_SUITE_P(StoreTest, PutThenGetReturnsTheItemAndAPutReplacesIt,
                            RemoveAndPutNullDeleteAndAreIdempotent,
                            SearchListsAPrefixNewestFirstAndPages, SearchFiltersOnValueFields,
                            ListNamespacesMatchesCutsSortsAndPages,
                            OutOfBoundsInputIsRefusedNamingTheField, ConcurrentPutsAreAllStored,
                            UpdateIsAnAtomicReadModifyWrite,
                            APersistentStoreKeepsItsItemsAcrossOpens);

struct StoreBackendName {
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};

}  // namespace weir::graph::store_conformance
