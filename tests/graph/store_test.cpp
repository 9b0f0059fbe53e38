// The store (weir/graph/store.hpp): the conformance suite on memory and SQLite (PostgreSQL's is in
// postgres_store_test.cpp), then what only one backend has: the memory store's byte bound and
// budget, an SQLite file that is not a database.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store_conformance.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/store.hpp"

namespace weir::graph {
namespace {

using namespace store_conformance;
using ::testing::HasSubstr;

struct MemoryBackend {
  static constexpr const char* kName = "Memory";
  static constexpr bool kPersistent = false;
  static std::string unavailable() { return ""; }
  static Result<std::unique_ptr<Store>> open(const fs::path&, StoreLimits limits) {
    MemoryStoreOptions o;
    o.limits = limits;
    return make_memory_store(o);
  }
};
struct SqliteBackend {
  static constexpr const char* kName = "Sqlite";
  static constexpr bool kPersistent = true;
  static std::string unavailable() { return ""; }
  static Result<std::unique_ptr<Store>> open(const fs::path& file, StoreLimits limits) {
    return open_sqlite_store(file, limits);
  }
};
using LocalBackends = ::testing::Types<MemoryBackend, SqliteBackend>;
INSTANTIATE_TYPED_TEST_SUITE_P(Local, StoreTest, LocalBackends, StoreBackendName);

// The memory store is bounded: its items' bytes are charged to max_bytes and to a MemoryBudget
// category; over either a put is memory_budget_exceeded naming the limit, and a delete gives the
// bytes back.
TEST(MemoryStore, ItsBytesAreBoundedAndChargedToTheBudget) {
  MemoryBudget budget;
  MemoryStoreOptions o;
  o.max_bytes = 1024;
  o.budget = &budget;
  auto store = make_memory_store(o);
  const json::value big = js(R"({"text": ")" + std::string(600, 'x') + "\"}");
  ASSERT_TRUE(store->put({"a"}, "one", big));
  const std::size_t one = 1 + 3 + 611 + kMemoryStoreItemOverhead;  // "a", "one", the JSON text
  EXPECT_EQ(budget.used(BudgetCategory::history), one);
  auto over = store->put({"a"}, "two", big);
  ASSERT_FALSE(over);
  EXPECT_TRUE(over.error().is(Errc::memory_budget_exceeded));
  EXPECT_EQ(over.error().message,
            "memory store: putting namespace 'a' key 'two' needs 743 B more but 743 B of its "
            "1.0 KiB limit (max_bytes) is in use; delete items, or use the SQLite or PostgreSQL "
            "store");
  auto none = store->get({"a"}, "two");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  // Replacing an item charges only the difference; deleting returns its bytes.
  ASSERT_TRUE(store->put({"a"}, "one", js(R"({"small": 1})")));
  EXPECT_EQ(budget.used(BudgetCategory::history), 1 + 3 + 11 + kMemoryStoreItemOverhead);
  ASSERT_TRUE(store->put({"a"}, "two", big));
  ASSERT_TRUE(store->remove({"a"}, "one"));
  ASSERT_TRUE(store->remove({"a"}, "two"));
  EXPECT_EQ(budget.used(BudgetCategory::history), 0u);

  // The budget's own limit refuses with the budget's words.
  BudgetLimits tight;
  tight.category[static_cast<int>(BudgetCategory::history)] = 512;
  MemoryBudget small(tight);
  MemoryStoreOptions o2;
  o2.budget = &small;
  auto s2 = make_memory_store(o2);
  auto refused = s2->put({"a"}, "one", big);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(Errc::memory_budget_exceeded));
  EXPECT_THAT(refused.error().message,
              HasSubstr("memory store: putting namespace 'a' key 'one': history needs 743 B"));
  EXPECT_EQ(small.used(BudgetCategory::history), 0u);
}

// A store's bytes go back to the budget with the store.
TEST(MemoryStore, DestroyingTheStoreReturnsItsBytes) {
  MemoryBudget budget;
  MemoryStoreOptions o;
  o.budget = &budget;
  {
    auto store = make_memory_store(o);
    ASSERT_TRUE(store->put({"a"}, "k", js(R"({"v": 1})")));
    EXPECT_GT(budget.used(BudgetCategory::history), 0u);
  }
  EXPECT_EQ(budget.used(BudgetCategory::history), 0u);
}

TEST(SqliteStore, AFileThatIsNotADatabaseIsCorruptDataNamingIt) {
  const auto path = fs::temp_directory_path() / ("weir-store-junk-" + std::to_string(::getpid()));
  std::ofstream(path) << std::string(4096, 'j');
  auto s = open_sqlite_store(path);
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().is(Errc::corrupt_data)) << s.error().to_string();
  EXPECT_THAT(s.error().message, HasSubstr("sqlite store '" + path.string() + "'"));
  fs::remove(path);
}

// The store shares a file with the checkpointer: each keeps to its own tables.
TEST(SqliteStore, SharesAFileWithTheCheckpointer) {
  const auto path = fs::temp_directory_path() / ("weir-store-shared-" + std::to_string(::getpid()));
  fs::remove(path);
  {
    auto cp = open_sqlite_checkpointer(path);
    ASSERT_TRUE(cp) << cp.error().to_string();
    auto store = open_sqlite_store(path);
    ASSERT_TRUE(store) << store.error().to_string();
    ASSERT_TRUE((*store)->put({"a"}, "k", js(R"({"v": 1})")));
  }
  auto cp = open_sqlite_checkpointer(path);
  EXPECT_TRUE(cp) << cp.error().to_string();
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path.string() + suffix);
}

}  // namespace
}  // namespace weir::graph
