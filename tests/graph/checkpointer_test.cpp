#include "weir/graph/checkpointer.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "checkpointer_conformance.hpp"
#include "checkpointer_conformance_claims.hpp"

namespace weir::graph {
namespace {

using namespace conformance;  // helpers: obj, make_cp, ids, TempDir

// Runs one SQL statement on a file through the sqlite3 API directly (what a damaged or foreign
// writer would do), bypassing the checkpointer.
void raw_exec(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(h);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

struct MemoryBackend {
  static constexpr const char* kName = "Memory";
  static Result<std::unique_ptr<Checkpointer>> open(const fs::path&, Retention retention) {
    return make_memory_checkpointer(retention);
  }
};
struct SqliteBackend {
  static constexpr const char* kName = "Sqlite";
  static Result<std::unique_ptr<Checkpointer>> open(const fs::path& db, Retention retention) {
    return open_sqlite_checkpointer(db, retention);
  }
};
// The conformance suites (checkpointer_conformance*.hpp); PostgreSQL runs them in
// postgres_checkpointer_test.cpp (its own binary, label scaleout: it starts a server).
using EmbeddedBackends = ::testing::Types<MemoryBackend, SqliteBackend>;
INSTANTIATE_TYPED_TEST_SUITE_P(Embedded, CheckpointerTest, EmbeddedBackends, BackendName);
INSTANTIATE_TYPED_TEST_SUITE_P(Embedded, CheckpointerClaimsTest, EmbeddedBackends, BackendName);

TEST(NewCheckpointId, UniqueAndOrderedByStepThenCreation) {
  std::vector<std::string> made;
  for (int i = 0; i < 1000; ++i) made.push_back(new_checkpoint_id(7));
  EXPECT_TRUE(std::is_sorted(made.begin(), made.end()));
  EXPECT_EQ(std::set<std::string>(made.begin(), made.end()).size(), made.size());
  EXPECT_EQ(made.front().rfind("000000000007-", 0), 0u) << made.front();
  EXPECT_EQ(made.front().size(), 31u);
  EXPECT_LT(new_checkpoint_id(8), new_checkpoint_id(9));
  const std::string later_step = new_checkpoint_id(10);
  EXPECT_GT(later_step, new_checkpoint_id(2)) << "step first, then creation";
}

// ---- SQLite only -------------------------------------------------------------------------

Result<std::unique_ptr<Checkpointer>> open_ok(const fs::path& db) {
  auto r = open_sqlite_checkpointer(db);
  EXPECT_TRUE(r) << r.error().to_string();
  return r;
}

TEST(SqliteCheckpointer, PersistsAcrossReopen) {
  TempDir dir;
  const fs::path db = dir.path() / "persist.db";
  {
    auto c = open_ok(db);
    ASSERT_TRUE(c);
    ASSERT_TRUE((*c)->put(make_cp("t", "s1", "", 1, R"({"a":1})")));
    ASSERT_TRUE((*c)->put(make_cp("t", "s2", "s1", 2, R"({"b":2})")));
    ASSERT_TRUE((*c)->put(make_cp("t", "s3", "s2", 3, R"({"a":3})")));
    ASSERT_TRUE((*c)->put(make_cp("u", "x", "", 0)));
  }
  ASSERT_TRUE(fs::exists(db));
  auto c = open_ok(db);
  ASSERT_TRUE(c);
  auto state = (*c)->state_at("t", "s3");
  ASSERT_TRUE(state) << state.error().to_string();
  EXPECT_EQ(*state, obj(R"({"a":3,"b":2})"));
  auto threads = (*c)->threads();
  ASSERT_TRUE(threads);
  EXPECT_THAT(*threads, ::testing::ElementsAre("u", "t"));
  // The insertion order carries on after reopening.
  ASSERT_TRUE((*c)->put(make_cp("t", "s0", "s3", 4, R"({"b":4})")));
  auto latest = (*c)->latest("t");
  ASSERT_TRUE(latest && latest->has_value());
  EXPECT_EQ((*latest)->checkpoint_id, "s0");
  auto t2 = (*c)->threads();
  ASSERT_TRUE(t2);
  EXPECT_THAT(*t2, ::testing::ElementsAre("t", "u"));
}

TEST(SqliteCheckpointer, UsesWalAndTheSchemaVersionTable) {
  TempDir dir;
  const fs::path db = dir.path() / "wal.db";
  auto c = open_ok(db);
  ASSERT_TRUE(c);
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  auto scalar = [&](const char* sql) {
    sqlite3_stmt* s = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(h, sql, -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return out;
  };
  EXPECT_EQ(scalar("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(scalar("SELECT version FROM schema_version"), std::to_string(kSqliteSchemaVersion));
  sqlite3_close(h);
}

TEST(SqliteCheckpointer, TwoConnectionsOnOneFileSeeEachOthersPuts) {
  TempDir dir;
  const fs::path db = dir.path() / "shared.db";
  auto a = open_ok(db);
  auto b = open_ok(db);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->put(make_cp("t", "c1", "", 0, R"({"x":1})")));
  ASSERT_TRUE((*b)->put(make_cp("t", "c2", "c1", 1, R"({"y":2})")));
  auto state = (*a)->state_at("t", "c2");
  ASSERT_TRUE(state) << state.error().to_string();
  EXPECT_EQ(*state, obj(R"({"x":1,"y":2})"));
}

TEST(SqliteCheckpointer, CorruptRowIsCorruptDataNamingThreadAndCheckpoint) {
  TempDir dir;
  const fs::path db = dir.path() / "corrupt.db";
  auto c = open_ok(db);
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put(make_cp("t", "good", "", 0, R"({"a":1})")));
  ASSERT_TRUE((*c)->put(make_cp("t", "bad", "good", 1, R"({"b":2})")));
  raw_exec(db, "UPDATE checkpoints SET writes = '{\"b\": tru' WHERE checkpoint_id = 'bad'");

  auto state = (*c)->state_at("t", "bad");
  ASSERT_FALSE(state);
  EXPECT_TRUE(state.error().is(Errc::corrupt_data)) << state.error().to_string();
  EXPECT_THAT(state.error().message, HasSubstr("checkpoint 'bad' of thread 't'"));
  EXPECT_THAT(state.error().message, HasSubstr("column writes is not valid JSON"));
  EXPECT_THAT(state.error().message, HasSubstr(db.string()));
  auto latest = (*c)->latest("t");
  ASSERT_FALSE(latest);
  EXPECT_TRUE(latest.error().is(Errc::corrupt_data));
  // The good checkpoint is still readable.
  auto good = (*c)->state_at("t", "good");
  ASSERT_TRUE(good);
  EXPECT_EQ(*good, obj(R"({"a":1})"));

  raw_exec(db, "UPDATE checkpoints SET metadata = '[1,2]' WHERE checkpoint_id = 'good'");
  auto got = (*c)->get("t", "good");
  ASSERT_FALSE(got);
  EXPECT_TRUE(got.error().is(Errc::corrupt_data));
  EXPECT_THAT(got.error().message, HasSubstr("column metadata is not a JSON object"));
}

TEST(SqliteCheckpointer, BrokenOrLoopingParentChainIsCorruptData) {
  TempDir dir;
  const fs::path db = dir.path() / "chain.db";
  auto c = open_ok(db);
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put(make_cp("t", "a", "", 0, R"({"x":1})")));
  ASSERT_TRUE((*c)->put(make_cp("t", "b", "a", 1, R"({"y":1})")));
  raw_exec(db, "UPDATE checkpoints SET parent_id = 'b' WHERE checkpoint_id = 'a'");
  auto loop = (*c)->state_at("t", "b");
  ASSERT_FALSE(loop);
  EXPECT_TRUE(loop.error().is(Errc::corrupt_data));
  EXPECT_THAT(loop.error().message, HasSubstr("loops"));

  raw_exec(db, "DELETE FROM checkpoints WHERE checkpoint_id = 'a'");
  auto broken = (*c)->state_at("t", "b");
  ASSERT_FALSE(broken);
  EXPECT_TRUE(broken.error().is(Errc::corrupt_data));
  EXPECT_THAT(broken.error().message, HasSubstr("names parent 'a', which is missing"));
}

TEST(SqliteCheckpointer, NonSqliteFileIsRefusedNamingThePath) {
  TempDir dir;
  const fs::path db = dir.path() / "notes.txt";
  {
    std::ofstream f(db);
    for (int i = 0; i < 64; ++i) f << "this is a text file, not an SQLite database\n";
  }
  auto c = open_sqlite_checkpointer(db);
  ASSERT_FALSE(c);
  EXPECT_TRUE(c.error().is(Errc::corrupt_data)) << c.error().to_string();
  EXPECT_THAT(c.error().message, HasSubstr(db.string()));
  EXPECT_THAT(c.error().message, HasSubstr("not an SQLite database"));
}

TEST(SqliteCheckpointer, UnopenablePathIsIoErrorNamingThePath) {
  TempDir dir;
  auto is_dir = open_sqlite_checkpointer(dir.path());
  ASSERT_FALSE(is_dir);
  EXPECT_TRUE(is_dir.error().is(Errc::io_error)) << is_dir.error().to_string();
  EXPECT_THAT(is_dir.error().message, HasSubstr(dir.path().string()));

  const fs::path orphan = dir.path() / "no" / "such" / "dir" / "c.db";
  auto missing = open_sqlite_checkpointer(orphan);
  ASSERT_FALSE(missing);
  EXPECT_TRUE(missing.error().is(Errc::io_error)) << missing.error().to_string();
  EXPECT_THAT(missing.error().message, HasSubstr(orphan.string()));
  EXPECT_THAT(missing.error().message, HasSubstr("parent directory exists"));
}

TEST(SqliteCheckpointer, UnreadableFileIsIoErrorNamingThePath) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  TempDir dir;
  const fs::path db = dir.path() / "locked.db";
  { ASSERT_TRUE(open_ok(db)); }
  fs::permissions(db, fs::perms::none);
  auto c = open_sqlite_checkpointer(db);
  fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_FALSE(c);
  EXPECT_TRUE(c.error().is(Errc::io_error)) << c.error().to_string();
  EXPECT_THAT(c.error().message, HasSubstr(db.string()));
}

// The schema as weir 0.2 wrote it: version 1, and version 2 (artifacts, thread_holders) on top.
// Copied here rather than taken from the implementation, so a change there cannot hide a file
// that no longer opens.
constexpr const char* kWrittenV1 = R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE checkpoints (
  thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT NOT NULL DEFAULT '',
  step INTEGER NOT NULL, seq INTEGER NOT NULL, writes TEXT NOT NULL, pending TEXT NOT NULL,
  metadata TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (thread_id, checkpoint_id));
CREATE INDEX checkpoints_latest ON checkpoints (thread_id, seq);
CREATE TABLE threads (thread_id TEXT NOT NULL PRIMARY KEY, updated_seq INTEGER NOT NULL,
  updated_at INTEGER NOT NULL);
CREATE INDEX threads_recent ON threads (updated_seq);
INSERT INTO schema_version (version) VALUES (1);
INSERT INTO checkpoints VALUES ('t', 'a', '', 0, 1, '{"x":1}', '{}', '{}', 1700000000000);
INSERT INTO checkpoints VALUES ('t', 'b', 'a', 1, 2, '{"x":2,"$snapshot":true}', '{}', '{}',
  1700000000001);
INSERT INTO threads VALUES ('t', 2, 1700000000001);
)sql";
constexpr const char* kWrittenV2 = R"sql(
CREATE TABLE artifacts (thread_id TEXT NOT NULL, artifact_id TEXT NOT NULL,
  media_type TEXT NOT NULL, bytes BLOB NOT NULL, created_at INTEGER NOT NULL,
  PRIMARY KEY (thread_id, artifact_id));
CREATE TABLE thread_holders (thread_id TEXT NOT NULL PRIMARY KEY, token TEXT NOT NULL,
  host TEXT NOT NULL, pid INTEGER NOT NULL, lease_ms INTEGER NOT NULL, since INTEGER NOT NULL,
  heartbeat INTEGER NOT NULL);
UPDATE schema_version SET version = 2;
INSERT INTO artifacts VALUES ('t', 'doc', 'text/plain', X'00ff41', 1700000000001);
INSERT INTO thread_holders VALUES ('t', 'tok', 'elsewhere', 42, 30000, 1700000000000,
  1700000000001);
)sql";

// A file of an older schema opens: it is migrated to the current version in place, keeps its
// checkpoints, artifacts and claims, and prunes (its old snapshot counts as an ordinary
// checkpoint, so prune keeps the chain to the root: more, never less).
TEST(SqliteCheckpointer, MigratesVersion1And2Files) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    TempDir dir;
    const fs::path db = dir.path() / "old.db";
    raw_exec(db, kWrittenV1);
    if (version == 2) raw_exec(db, kWrittenV2);
    {
      auto c = open_ok(db);
      ASSERT_TRUE(c);
      ASSERT_TRUE((*c)->put(make_cp("t", "c", "b", 2, R"({"y":3,"$snapshot":true})")));
      ASSERT_TRUE((*c)->put(make_cp("t", "d", "c", 3, R"({"y":4})")));
      auto state = (*c)->state_at("t", "b");
      ASSERT_TRUE(state) << state.error().to_string();
      EXPECT_EQ(*state, obj(R"({"x":2})"));
      auto all = (*c)->list("t");
      ASSERT_TRUE(all);
      EXPECT_THAT(ids(*all), ::testing::ElementsAre("d", "c", "b", "a"));
      auto art = (*c)->get_artifact("t", "doc");
      ASSERT_TRUE(art);
      auto holder = (*c)->thread_holder("t");
      ASSERT_TRUE(holder);
      if (version == 2) {
        ASSERT_TRUE(*art);
        EXPECT_EQ((**art).bytes, std::string("\0\xff"
                                             "A",
                                             3));
        EXPECT_EQ((**art).media_type, "text/plain");
        ASSERT_TRUE(*holder);
        EXPECT_EQ((**holder).token, "tok");
        EXPECT_EQ((**holder).host, "elsewhere");
      } else {
        EXPECT_FALSE(*art);
        EXPECT_FALSE(*holder);
      }
      // Keep 1 ("d"): it reaches back to "c", written as a snapshot by this version, so "a" and
      // "b" go ("b" was a snapshot too, but written before the column existed).
      Retention keep;
      keep.keep_last = 1;
      auto n = (*c)->prune("t", keep);
      ASSERT_TRUE(n) << n.error().to_string();
      EXPECT_EQ(*n, 2u);
      auto st = (*c)->state_at("t", "d");
      ASSERT_TRUE(st) << st.error().to_string();
      EXPECT_EQ(*st, obj(R"({"y":4})"));
    }
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(h, "SELECT version FROM schema_version", -1, &q, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(q, 0), kSqliteSchemaVersion);
    EXPECT_EQ(sqlite3_step(q), SQLITE_DONE) << "one version row";
    sqlite3_finalize(q);
    sqlite3_close(h);
  }
}

// An old snapshot (version 1 or 2 did not mark it) makes prune keep the chain to the root.
TEST(SqliteCheckpointer, AnUnmarkedOldSnapshotKeepsMore) {
  TempDir dir;
  const fs::path db = dir.path() / "old.db";
  raw_exec(db, kWrittenV1);
  raw_exec(db, kWrittenV2);
  auto c = open_ok(db);
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->put(make_cp("t", "c", "b", 2, R"({"y":3})")));
  Retention keep;
  keep.keep_last = 1;
  auto n = (*c)->prune("t", keep);
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 0u) << "c reaches back through b (not marked) to a";
  auto st = (*c)->state_at("t", "c");
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, obj(R"({"x":2,"y":3})"));
}

TEST(SqliteCheckpointer, NewerSchemaVersionIsRefused) {
  TempDir dir;
  const fs::path db = dir.path() / "future.db";
  { ASSERT_TRUE(open_ok(db)); }
  raw_exec(db, "UPDATE schema_version SET version = 99");
  auto c = open_sqlite_checkpointer(db);
  ASSERT_FALSE(c);
  EXPECT_TRUE(c.error().is(Errc::unsupported)) << c.error().to_string();
  EXPECT_THAT(c.error().message, HasSubstr("schema version 99, newer than this weir build reads"));
  EXPECT_THAT(c.error().message, HasSubstr(db.string()));
}

// The bytes SQLite stores per checkpoint row do not grow with the step (deltas only).
TEST(SqliteCheckpointer, StoredRowBytesAreIndependentOfStep) {
  TempDir dir;
  const fs::path db = dir.path() / "size.db";
  auto c = open_ok(db);
  ASSERT_TRUE(c);
  std::string parent;
  for (int s = 0; s < 100; ++s) {
    Checkpoint cp = make_cp("t", new_checkpoint_id(s), parent, s);
    char value[16];
    std::snprintf(value, sizeof value, "v%03d", s);
    cp.writes["counter"] = value;
    ASSERT_TRUE((*c)->put(cp));
    parent = cp.checkpoint_id;
  }
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(h,
                               "SELECT step, length(checkpoint_id) + length(parent_id) + "
                               "length(writes) + length(pending) + length(metadata) "
                               "FROM checkpoints WHERE step > 0 ORDER BY step",
                               -1, &q, nullptr),
            SQLITE_OK);
  std::set<int64_t> row_bytes;
  int rows = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    row_bytes.insert(sqlite3_column_int64(q, 1));
    ++rows;
  }
  sqlite3_finalize(q);
  sqlite3_close(h);
  EXPECT_EQ(rows, 99);
  EXPECT_EQ(row_bytes.size(), 1u) << "step 99 stores as many bytes as step 1";
  EXPECT_LT(*row_bytes.begin(), 200);
}

// A bounded memory checkpointer (weir serve's in-process threads): checkpoints cost their JSON
// text, are charged to the budget, a put past the bound stores nothing and says so, and
// deleting a thread (or the checkpointer) gives the bytes back.
TEST(MemoryCheckpointer, ItsCheckpointsAreBoundedAndCharged) {
  MemoryBudget budget;
  MemoryCheckpointerOptions o;
  o.max_bytes = 4608;
  o.budget = &budget;
  auto c = make_memory_checkpointer(o);
  const std::string big = R"({"seen":")" + std::string(1000, 'x') + "\"}";
  ASSERT_TRUE(c->put(make_cp("t", "c1", "", 1, big)));
  const std::size_t one = budget.used(BudgetCategory::history);
  EXPECT_GT(one, 1000u);
  EXPECT_LT(one, 1600u);
  ASSERT_TRUE(c->put(make_cp("t", "c2", "c1", 2, big)));
  const std::size_t two = budget.used(BudgetCategory::history);
  EXPECT_LT(two, one + 400) << "c2 shares c1's long string: it costs its framing only";
  const std::string other = R"({"seen":")" + std::string(1000, 'y') + "\"}";
  ASSERT_TRUE(c->put(make_cp("t", "c2b", "c1", 2, other)));
  const std::size_t three = budget.used(BudgetCategory::history);
  EXPECT_GT(three, two + 1000);  // a new string costs its bytes
  auto full = c->put(make_cp("u", "d1", "", 1, big + ""));
  ASSERT_TRUE(full);  // three 1000-byte strings and four checkpoints fit in 4608
  const std::string third = R"({"seen":")" + std::string(1000, 'z') + "\"}";
  auto over = c->put(make_cp("t", "c3", "c2", 3, third));
  ASSERT_FALSE(over);
  EXPECT_TRUE(over.error().is(Errc::memory_budget_exceeded));
  EXPECT_EQ(over.error().message.rfind("in-memory checkpoints: thread 't' needs ", 0), 0u)
      << over.error().message;
  EXPECT_NE(over.error().message.find("limit is in use; delete or prune threads, or keep "
                                      "checkpoints in a database"),
            std::string::npos)
      << over.error().message;
  auto list = c->list("t");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), 3u);  // nothing stored
  ASSERT_TRUE(c->delete_thread("u"));
  EXPECT_EQ(budget.used(BudgetCategory::history), three);
  ASSERT_TRUE(c->put(make_cp("t", "c3", "c2", 3, third)));  // room again
  ASSERT_TRUE(c->delete_thread("t"));
  EXPECT_EQ(budget.used(BudgetCategory::history), 0u);
  ASSERT_TRUE(c->put(make_cp("v", "e1", "", 1, "{}")));
  c.reset();
  EXPECT_EQ(budget.used(BudgetCategory::history), 0u);
}

// One thread cannot take the whole bound: past max_thread_bytes its puts are refused, naming the
// thread and what to do, while other threads go on putting.
TEST(MemoryCheckpointer, OneThreadCannotFillTheWholeBound) {
  MemoryCheckpointerOptions o;
  o.max_bytes = 1u << 20;
  o.max_thread_bytes = 8u << 10;
  auto c = make_memory_checkpointer(o);
  std::string parent;
  Status last;
  int stored = 0;
  for (int i = 0; i < 100 && last; ++i) {
    const std::string id = "c" + std::to_string(100 + i);
    last = c->put(make_cp("big", id, parent, i + 1,
                          R"({"x":")" + std::string(1000, static_cast<char>('a' + i % 26)) +
                              std::to_string(i) + "\"}"));
    if (last) ++stored, parent = id;
  }
  ASSERT_FALSE(last);
  EXPECT_TRUE(last.error().is(Errc::memory_budget_exceeded));
  EXPECT_GT(stored, 3);
  EXPECT_LT(stored, 9);
  EXPECT_EQ(last.error().message.rfind("in-memory checkpoints: thread 'big' holds ", 0), 0u)
      << last.error().message;
  EXPECT_NE(last.error().message.find("more would take it past 8.0 KiB, a thread's share of the "
                                      "1.0 MiB limit; prune the thread or keep checkpoints in a "
                                      "database"),
            std::string::npos)
      << last.error().message;
  EXPECT_TRUE(c->put(make_cp("small", "s1", "", 1, R"({"x":1})")));
}

// A chat thread's checkpoints repeat its window: the memory checkpointer keeps each long string
// once per thread (shared by the checkpoints that hold it), so 100 checkpoints of a 20-message
// window cost about one window of text plus their framing, not 100 windows. What is read back
// is what was put, including strings that look like its own placeholders (a leading NUL).
TEST(MemoryCheckpointer, ItsCheckpointsShareTheirLongStrings) {
  MemoryBudget budget;
  MemoryCheckpointerOptions o;
  o.max_bytes = 64u << 20;
  o.budget = &budget;
  o.retention.keep_last = 50;
  auto c = make_memory_checkpointer(o);
  auto message = [](int i) {
    return boost::json::object{{"role", i % 2 ? "assistant" : "user"},
                               {"content", "turn " + std::to_string(i) + std::string(512, 'x')}};
  };
  std::string parent;
  std::size_t window_text = 0;
  for (int step = 1; step <= 100; ++step) {
    boost::json::array window;
    for (int i = std::max(1, step - 19); i <= step; ++i) window.push_back(message(i));
    if (step == 100) window_text = boost::json::serialize(window).size();
    Checkpoint cp;
    cp.thread_id = "chat";
    cp.checkpoint_id = "c" + std::to_string(1000 + step);
    cp.parent_id = parent;
    cp.step = step;
    cp.writes["messages"] = std::move(window);
    cp.writes["$snapshot"] = true;  // each holds every channel: retention keeps just 50
    cp.writes["odd"] = std::string("\0") + "x";  // a short string with a leading NUL
    cp.writes["odd_long"] = std::string(1, '\0') + std::string(300, 'n');
    cp.writes["nul"] = std::string(1, '\0');
    ASSERT_TRUE(c->put(cp)) << step;
    parent = cp.checkpoint_id;
  }
  ASSERT_TRUE(c->prune("chat", o.retention));
  // 50 kept checkpoints of 20 messages: 1,000 message texts put, 69 distinct ones held.
  const std::size_t used = budget.used(BudgetCategory::history);
  EXPECT_LT(used, 69 * 530 + 50 * (256 + 20 * 80) + 400) << used;
  EXPECT_GT(window_text, 20u * 512);
  auto latest = c->latest("chat");
  ASSERT_TRUE(latest && latest->has_value());
  const auto& w = (*latest)->writes;
  ASSERT_EQ(w.at("messages").as_array().size(), 20u);
  EXPECT_EQ(w.at("messages").as_array()[19], boost::json::value(message(100)));
  EXPECT_EQ(w.at("messages").as_array()[0], boost::json::value(message(81)));
  EXPECT_EQ(w.at("odd"), boost::json::value(std::string("\0") + "x"));
  EXPECT_EQ(w.at("odd_long").as_string().size(), 301u);
  EXPECT_EQ(w.at("odd_long").as_string()[0], '\0');
  EXPECT_EQ(w.at("nul"), boost::json::value(std::string(1, '\0')));
  auto state = c->state_at("chat", (*latest)->checkpoint_id);
  ASSERT_TRUE(state);
  EXPECT_EQ(state->at("messages"), w.at("messages"));
  auto listed = c->list("chat", 100);
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 50u);
  EXPECT_EQ(listed->back().writes.at("messages").as_array()[0], boost::json::value(message(32)));
  ASSERT_TRUE(c->delete_thread("chat"));
  EXPECT_EQ(budget.used(BudgetCategory::history), 0u) << "the shared strings went with it";
}

}  // namespace
}  // namespace weir::graph
