// The PostgreSQL store against a throwaway server (pg_server.hpp): the conformance suite, then
// what only a server backend has (two connections on one database, its error texts). Skipped,
// saying why, where the PostgreSQL server programs are not installed; a server that is installed
// and does not start fails (pg_server.hpp).
#include <map>
#include <mutex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pg_server.hpp"
#include "store_conformance.hpp"
#include "weir/graph/store.hpp"

namespace weir::graph {
namespace {

using namespace store_conformance;
using ::testing::HasSubstr;
using weir::testing::PgServer;

std::string no_server_programs() {
  const std::string& e = PgServer::get().error();
  return e.rfind("no PostgreSQL server programs", 0) == 0 ? e : "";
}

// One database per scratch file: a store opened again on the same file reaches the same one.
std::string conninfo_for(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, std::string> dbs;
  std::lock_guard lock(mu);
  auto& c = dbs[file];
  if (c.empty()) {
    const std::string db = weir::testing::fresh_database();
    if (!db.empty()) c = PgServer::get().conninfo(db);
  }
  return c;
}

struct PostgresBackend {
  static constexpr const char* kName = "Postgres";
  static constexpr bool kPersistent = true;
  static std::string unavailable() { return no_server_programs(); }
  static Result<std::unique_ptr<Store>> open(const fs::path& file, StoreLimits limits) {
    const std::string conninfo = conninfo_for(file.string());
    if (conninfo.empty()) return Error(Errc::io_error, "no PostgreSQL test server");
    return open_postgres_store(conninfo, limits);
  }
};
using ServerBackends = ::testing::Types<PostgresBackend>;
INSTANTIATE_TYPED_TEST_SUITE_P(Server, StoreTest, ServerBackends, StoreBackendName);

// Two stores (two processes' connections) on one database see one another's items, in one put
// order; opening the tables twice at once is fine.
TEST(PostgresStore, TwoConnectionsShareOneStore) {
  if (auto why = no_server_programs(); !why.empty()) GTEST_SKIP() << why;
  const std::string conninfo = conninfo_for("two-connections");
  ASSERT_NE(conninfo, "");
  auto a = open_postgres_store(conninfo);
  auto b = open_postgres_store(conninfo);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->put({"users", "u1"}, "k1", json::parse(R"({"by": "a"})")));
  ASSERT_TRUE((*b)->put({"users", "u1"}, "k2", json::parse(R"({"by": "b"})")));
  auto found = (*a)->search(StoreSearch{{"users"}, {}, 10, 0});
  ASSERT_TRUE(found) << found.error().to_string();
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[0].key, "k2");
  EXPECT_EQ((*found)[1].value.at("by"), "a");
  auto ns = (*b)->list_namespaces({});
  ASSERT_TRUE(ns);
  ASSERT_EQ(ns->size(), 1u);
  EXPECT_EQ((*ns)[0], (Namespace{"users", "u1"}));
}

// A store on a table of its own (the LangGraph API's thread list) holds items apart from the
// default table's; a table name that is not plain is refused before anything is opened.
TEST(PostgresStore, ATableOfItsOwnKeepsItsItemsApart) {
  auto bad = open_postgres_store("host=127.0.0.1 port=1", {}, std::chrono::milliseconds(10),
                                 "items; DROP TABLE x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "a store's table name is 1 to 48 of a-z and _, got 'items; DROP TABLE x'");
  if (auto why = no_server_programs(); !why.empty()) GTEST_SKIP() << why;
  const std::string conninfo = conninfo_for("own-table");
  ASSERT_NE(conninfo, "");
  auto users = open_postgres_store(conninfo);
  auto own = open_postgres_store(conninfo, {}, std::chrono::milliseconds(10000), "weir_own_items");
  ASSERT_TRUE(users && own);
  ASSERT_TRUE((*own)->put({"threads"}, "t1", json::parse(R"({"n": 1})")));
  auto seen = (*users)->list_namespaces({});
  ASSERT_TRUE(seen);
  EXPECT_TRUE(seen->empty());
  auto got = (*own)->get({"threads"}, "t1");
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((**got).value.at("n"), 1);
}

// A value the table holds that is not JSON (written by hand) is corrupt_data naming the item.
TEST(PostgresStore, ACorruptValueIsCorruptDataNamingTheItem) {
  if (auto why = no_server_programs(); !why.empty()) GTEST_SKIP() << why;
  const std::string conninfo = conninfo_for("corrupt");
  ASSERT_NE(conninfo, "");
  auto s = open_postgres_store(conninfo);
  ASSERT_TRUE(s);
  ASSERT_TRUE((*s)->put({"a"}, "k", json::parse(R"({"v": 1})")));
  const std::string db =
      conninfo.substr(conninfo.find("dbname=") + 7,
                      conninfo.find(' ', conninfo.find("dbname=")) - conninfo.find("dbname=") - 7);
  ASSERT_EQ(PgServer::get().exec_admin(
                "UPDATE weir_store_items SET value = convert_to('{broken', 'UTF8')", db),
            "");
  auto got = (*s)->get({"a"}, "k");
  ASSERT_FALSE(got);
  EXPECT_TRUE(got.error().is(Errc::corrupt_data));
  EXPECT_THAT(got.error().message,
              HasSubstr("the value at namespace 'a' key 'k' is not valid JSON"));
}

TEST(PostgresStore, AnUnreachableServerIsUnavailableNamingIt) {
  auto s = open_postgres_store("host=127.0.0.1 port=1 user=weir dbname=x connect_timeout=2", {},
                               std::chrono::milliseconds(0));
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().is(Errc::unavailable)) << s.error().to_string();
  EXPECT_THAT(s.error().message, HasSubstr("postgres 'weir@127.0.0.1:1/x'"));
}

}  // namespace
}  // namespace weir::graph
