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

namespace weir::graph {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using ::testing::HasSubstr;

json::object obj(std::string_view text) {
  return json::parse(text).as_object();
}

Checkpoint make_cp(std::string thread, std::string id, std::string parent, int64_t step,
                   std::string_view writes = "{}") {
  Checkpoint cp;
  cp.thread_id = std::move(thread);
  cp.checkpoint_id = std::move(id);
  cp.parent_id = std::move(parent);
  cp.step = step;
  cp.writes = obj(writes);
  cp.pending = obj(R"({"status":"running","next":["agent"]})");
  cp.metadata = obj(R"({"source":"loop"})");
  return cp;
}

std::vector<std::string> ids(const std::vector<Checkpoint>& cps) {
  std::vector<std::string> out;
  for (const auto& cp : cps) out.push_back(cp.checkpoint_id);
  return out;
}

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "weir_ckpt_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

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
  static Result<std::unique_ptr<Checkpointer>> open(const fs::path&) {
    return make_memory_checkpointer();
  }
};
struct SqliteBackend {
  static constexpr const char* kName = "Sqlite";
  static Result<std::unique_ptr<Checkpointer>> open(const fs::path& db) {
    return open_sqlite_checkpointer(db);
  }
};

template <class Backend>
class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = Backend::open(dir_.path() / "checkpoints.db");
    ASSERT_TRUE(r) << r.error().to_string();
    cp_ = std::move(*r);
  }
  Checkpointer& ckpt() { return *cp_; }

  TempDir dir_;
  std::unique_ptr<Checkpointer> cp_;
};

struct BackendName {
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};
using Backends = ::testing::Types<MemoryBackend, SqliteBackend>;
TYPED_TEST_SUITE(CheckpointerTest, Backends, BackendName);

// A snapshot checkpoint holds every channel: state_at stops there (an older key the snapshot
// does not hold is not seen), and the marker itself is not part of the state.
TYPED_TEST(CheckpointerTest, StateAtStopsAtASnapshot) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("t", "c1", "", 1, R"({"stale":9,"x":1})")));
  ASSERT_TRUE(c.put(make_cp("t", "c2", "c1", 32, R"({"x":2,"y":3,"$snapshot":true})")));
  ASSERT_TRUE(c.put(make_cp("t", "c3", "c2", 33, R"({"y":4})")));
  auto st = c.state_at("t", "c3");
  ASSERT_TRUE(st) << st.error().to_string();
  EXPECT_EQ(json::serialize(*st), R"({"y":4,"x":2})");
  auto before = c.state_at("t", "c1");
  ASSERT_TRUE(before);
  EXPECT_EQ(json::serialize(*before), R"({"stale":9,"x":1})");
}

TYPED_TEST(CheckpointerTest, PutThenLatestGetAndListNewestFirst) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("t", "c1", "", 1, R"({"a":1})")));
  ASSERT_TRUE(c.put(make_cp("t", "c2", "c1", 2, R"({"b":"x"})")));
  ASSERT_TRUE(c.put(make_cp("t", "c3", "c2", 3, R"({"a":[1,2,{"k":null}]})")));

  auto latest = c.latest("t");
  ASSERT_TRUE(latest) << latest.error().to_string();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->checkpoint_id, "c3");

  auto got = c.get("t", "c2");
  ASSERT_TRUE(got && got->has_value());
  const Checkpoint& cp = **got;
  EXPECT_EQ(cp.thread_id, "t");
  EXPECT_EQ(cp.parent_id, "c1");
  EXPECT_EQ(cp.step, 2);
  EXPECT_EQ(cp.writes, obj(R"({"b":"x"})"));
  EXPECT_EQ(cp.pending, obj(R"({"status":"running","next":["agent"]})"));
  EXPECT_EQ(cp.metadata, obj(R"({"source":"loop"})"));
  EXPECT_GT(cp.created_at_ms, 1'600'000'000'000);

  auto all = c.list("t");
  ASSERT_TRUE(all);
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("c3", "c2", "c1"));
  auto two = c.list("t", 2);
  ASSERT_TRUE(two);
  EXPECT_THAT(ids(*two), ::testing::ElementsAre("c3", "c2"));
  auto none = c.list("t", 0);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TYPED_TEST(CheckpointerTest, StateAtFoldsDeltasAlongTheParentChain) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("t", "s1", "", 1, R"({"answer":"draft"})")));
  ASSERT_TRUE(c.put(make_cp("t", "s2", "s1", 2, R"({"notes":["n1"]})")));
  ASSERT_TRUE(c.put(make_cp("t", "s3", "s2", 3, R"({"answer":"final"})")));

  auto s1 = c.state_at("t", "s1");
  ASSERT_TRUE(s1) << s1.error().to_string();
  EXPECT_EQ(*s1, obj(R"({"answer":"draft"})"));
  auto s2 = c.state_at("t", "s2");
  ASSERT_TRUE(s2);
  EXPECT_EQ(*s2, obj(R"({"answer":"draft","notes":["n1"]})"));
  auto s3 = c.state_at("t", "s3");
  ASSERT_TRUE(s3);
  EXPECT_EQ(*s3, obj(R"({"answer":"final","notes":["n1"]})"));
  // The checkpoint itself still holds only its delta.
  auto g3 = c.get("t", "s3");
  ASSERT_TRUE(g3 && g3->has_value());
  EXPECT_EQ((*g3)->writes, obj(R"({"answer":"final"})"));
}

TYPED_TEST(CheckpointerTest, ResumeFromAnEarlierCheckpointBranches) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("t", "root", "", 0, R"({"a":1})")));
  ASSERT_TRUE(c.put(make_cp("t", "left", "root", 1, R"({"a":2,"b":1})")));
  // Time travel: resume from root with a different update.
  ASSERT_TRUE(c.put(make_cp("t", "right", "root", 1, R"({"b":9})")));

  auto left = c.state_at("t", "left");
  ASSERT_TRUE(left);
  EXPECT_EQ(*left, obj(R"({"a":2,"b":1})"));
  auto right = c.state_at("t", "right");
  ASSERT_TRUE(right);
  EXPECT_EQ(*right, obj(R"({"a":1,"b":9})"));

  auto latest = c.latest("t");
  ASSERT_TRUE(latest && latest->has_value());
  EXPECT_EQ((*latest)->checkpoint_id, "right");  // put order, not id order
  auto all = c.list("t");
  ASSERT_TRUE(all);
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("right", "left", "root"));
}

TYPED_TEST(CheckpointerTest, DeleteThreadRemovesOnlyThatThread) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("doomed", "d1", "", 0, R"({"x":1})")));
  ASSERT_TRUE(c.put(make_cp("doomed", "d2", "d1", 1, R"({"x":2})")));
  ASSERT_TRUE(c.put(make_cp("kept", "k1", "", 0, R"({"y":1})")));

  ASSERT_TRUE(c.delete_thread("doomed"));
  auto latest = c.latest("doomed");
  ASSERT_TRUE(latest);
  EXPECT_FALSE(latest->has_value());
  auto all = c.list("doomed");
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->empty());
  auto state = c.state_at("doomed", "d2");
  ASSERT_FALSE(state);
  EXPECT_TRUE(state.error().is(Errc::not_found));
  auto threads = c.threads();
  ASSERT_TRUE(threads);
  EXPECT_THAT(*threads, ::testing::ElementsAre("kept"));
  auto kept = c.state_at("kept", "k1");
  ASSERT_TRUE(kept);
  EXPECT_EQ(*kept, obj(R"({"y":1})"));

  EXPECT_TRUE(c.delete_thread("doomed"));  // idempotent
  EXPECT_TRUE(c.delete_thread("never-existed"));
  // The ids are free again.
  ASSERT_TRUE(c.put(make_cp("doomed", "d1", "", 0, R"({"x":10})")));
  auto again = c.state_at("doomed", "d1");
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, obj(R"({"x":10})"));
}

TYPED_TEST(CheckpointerTest, UnknownThreadOrCheckpointIsNulloptOrNotFound) {
  auto& c = this->ckpt();
  auto latest = c.latest("nope");
  ASSERT_TRUE(latest);
  EXPECT_FALSE(latest->has_value());
  auto got = c.get("nope", "c1");
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
  auto all = c.list("nope");
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->empty());
  auto state = c.state_at("nope", "c1");
  ASSERT_FALSE(state);
  EXPECT_TRUE(state.error().is(Errc::not_found));
  EXPECT_THAT(state.error().message, HasSubstr("unknown thread 'nope'"));

  ASSERT_TRUE(c.put(make_cp("t", "c1", "", 0)));
  auto missing = c.get("t", "zzz");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(missing->has_value());
  auto missing_state = c.state_at("t", "zzz");
  ASSERT_FALSE(missing_state);
  EXPECT_TRUE(missing_state.error().is(Errc::not_found));
  EXPECT_THAT(missing_state.error().message, HasSubstr("thread 't' has no checkpoint 'zzz'"));
}

TYPED_TEST(CheckpointerTest, InvalidPutsAreRefusedAndStoreNothing) {
  auto& c = this->ckpt();
  auto no_thread = c.put(make_cp("", "c1", "", 0));
  ASSERT_FALSE(no_thread);
  EXPECT_TRUE(no_thread.error().is(Errc::invalid_argument));
  EXPECT_THAT(no_thread.error().message, HasSubstr("thread_id is empty"));

  auto no_id = c.put(make_cp("t", "", "", 0));
  ASSERT_FALSE(no_id);
  EXPECT_TRUE(no_id.error().is(Errc::invalid_argument));
  EXPECT_THAT(no_id.error().message, HasSubstr("checkpoint_id is empty"));

  auto orphan = c.put(make_cp("t", "c1", "ghost", 1));
  ASSERT_FALSE(orphan);
  EXPECT_TRUE(orphan.error().is(Errc::invalid_argument));
  EXPECT_THAT(orphan.error().message, HasSubstr("parent 'ghost' is not stored in that thread"));

  auto threads = c.threads();
  ASSERT_TRUE(threads);
  EXPECT_TRUE(threads->empty()) << "a failed put must store nothing";

  ASSERT_TRUE(c.put(make_cp("t", "c1", "", 0, R"({"v":1})")));
  auto dup = c.put(make_cp("t", "c1", "", 0, R"({"v":2})"));
  ASSERT_FALSE(dup);
  EXPECT_TRUE(dup.error().is(Errc::invalid_argument));
  EXPECT_THAT(dup.error().message, HasSubstr("'c1' is already stored in thread 't'"));
  // A parent from another thread does not count.
  auto cross = c.put(make_cp("other", "o1", "c1", 1));
  ASSERT_FALSE(cross);
  EXPECT_TRUE(cross.error().is(Errc::invalid_argument));

  auto all = c.list("t");
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ(all->front().writes, obj(R"({"v":1})"));
  auto t2 = c.threads();
  ASSERT_TRUE(t2);
  EXPECT_THAT(*t2, ::testing::ElementsAre("t"));
}

TYPED_TEST(CheckpointerTest, ThreadsMostRecentlyUpdatedFirst) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("t1", "a", "", 0)));
  ASSERT_TRUE(c.put(make_cp("t2", "a", "", 0)));
  ASSERT_TRUE(c.put(make_cp("t3", "a", "", 0)));
  ASSERT_TRUE(c.put(make_cp("t1", "b", "a", 1)));
  auto all = c.threads();
  ASSERT_TRUE(all);
  EXPECT_THAT(*all, ::testing::ElementsAre("t1", "t3", "t2"));
  auto two = c.threads(2);
  ASSERT_TRUE(two);
  EXPECT_THAT(*two, ::testing::ElementsAre("t1", "t3"));
}

TYPED_TEST(CheckpointerTest, ConcurrentPutsFromEightThreads) {
  auto& c = this->ckpt();
  constexpr int kThreads = 8;
  constexpr int kSteps = 40;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads; ++w) {
    workers.emplace_back([&, w] {
      const std::string thread = "thread-" + std::to_string(w);
      std::string parent;
      for (int s = 0; s < kSteps; ++s) {
        Checkpoint cp = make_cp(thread, new_checkpoint_id(s), parent, s);
        cp.writes["step"] = s;
        cp.writes["worker_" + std::to_string(w)] = "w";
        if (auto st = c.put(cp); !st) {
          failures[w] = st.error().to_string();
          return;
        }
        parent = cp.checkpoint_id;
        // Readers interleave with other threads' writers.
        auto latest = c.latest(thread);
        if (!latest || !latest->has_value() || (*latest)->checkpoint_id != parent) {
          failures[w] = "latest is not the checkpoint just put";
          return;
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  for (int w = 0; w < kThreads; ++w) EXPECT_EQ(failures[w], "") << "worker " << w;

  auto threads = c.threads();
  ASSERT_TRUE(threads);
  EXPECT_EQ(threads->size(), static_cast<std::size_t>(kThreads));
  for (int w = 0; w < kThreads; ++w) {
    const std::string thread = "thread-" + std::to_string(w);
    auto all = c.list(thread, 1000);
    ASSERT_TRUE(all);
    ASSERT_EQ(all->size(), static_cast<std::size_t>(kSteps));
    EXPECT_EQ(all->front().step, kSteps - 1);
    auto state = c.state_at(thread, all->front().checkpoint_id);
    ASSERT_TRUE(state) << state.error().to_string();
    EXPECT_EQ(state->at("step"), kSteps - 1);
    EXPECT_EQ(state->size(), 2u) << "only this worker's channels";
  }
}

// Deltas, not full state: with one small channel written per step, what a checkpoint holds does
// not grow with the step number. (The SQLite test below measures the stored row bytes.)
TYPED_TEST(CheckpointerTest, CheckpointSizeIsIndependentOfStep) {
  auto& c = this->ckpt();
  std::string parent;
  std::vector<std::string> all_ids;
  for (int s = 0; s < 100; ++s) {
    Checkpoint cp = make_cp("t", new_checkpoint_id(s), parent, s);
    char value[16];
    std::snprintf(value, sizeof value, "v%03d", s);
    cp.writes["channel_" + std::to_string(s % 10)] = value;
    ASSERT_TRUE(c.put(cp));
    parent = cp.checkpoint_id;
    all_ids.push_back(cp.checkpoint_id);
  }
  std::set<std::size_t> sizes;
  for (const auto& id : all_ids) {
    auto got = c.get("t", id);
    ASSERT_TRUE(got && got->has_value());
    sizes.insert(json::serialize((*got)->writes).size());
  }
  EXPECT_EQ(sizes.size(), 1u) << "writes of step 99 must be as small as those of step 1";
  auto state = c.state_at("t", all_ids.back());
  ASSERT_TRUE(state);
  EXPECT_EQ(state->size(), 10u);
  EXPECT_EQ(state->at("channel_9"), "v099");
  EXPECT_EQ(state->at("channel_0"), "v090");
}

// A run's state lives on the run's (accounting) memory resource; the checkpointer must not keep
// pointers into it after put returns.
TYPED_TEST(CheckpointerTest, PutCopiesValuesOutOfTheCallersStorage) {
  auto& c = this->ckpt();
  {
    json::monotonic_resource run_memory;
    json::storage_ptr sp(&run_memory);
    Checkpoint cp = make_cp("t", "c1", "", 0);
    cp.writes = json::object(sp);
    cp.writes["messages"] = json::array({"hello", "a longer string that does not fit inline"}, sp);
    cp.pending = json::object(sp);
    cp.pending["status"] = "done";
    ASSERT_TRUE(c.put(cp));
  }  // run_memory is gone
  auto got = c.get("t", "c1");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->writes,
            obj(R"({"messages":["hello","a longer string that does not fit inline"]})"));
  EXPECT_EQ((*got)->pending, obj(R"({"status":"done"})"));
  auto state = c.state_at("t", "c1");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->at("messages").as_array().size(), 2u);
}

// `arrays` nested arrays around the number 1.
json::value nested(std::size_t arrays) {
  json::value v = 1;
  for (std::size_t i = 0; i < arrays; ++i) {
    json::array a;
    a.push_back(std::move(v));
    v = std::move(a);
  }
  return v;
}

TYPED_TEST(CheckpointerTest, ValuesOutsideJsonAreRefusedEverywhere) {
  auto& c = this->ckpt();
  Checkpoint nan = make_cp("t", "c1", "", 0);
  nan.writes["score"] = json::array({1.0, std::nan("")});
  auto s = c.put(nan);
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().is(Errc::invalid_argument));
  EXPECT_THAT(s.error().message, HasSubstr("writes['score'] holds a non-finite number"));

  Checkpoint inf = make_cp("t", "c1", "", 0);
  inf.metadata["cost"] = std::numeric_limits<double>::infinity();
  auto si = c.put(inf);
  ASSERT_FALSE(si);
  EXPECT_THAT(si.error().message, HasSubstr("metadata['cost'] holds a non-finite number"));

  // The checkpoint object is level 1, so a channel value may nest kMaxJsonDepth - 1 levels.
  Checkpoint too_deep = make_cp("t", "c1", "", 0);
  too_deep.writes["tree"] = nested(kMaxJsonDepth);
  auto sd = c.put(too_deep);
  ASSERT_FALSE(sd);
  EXPECT_TRUE(sd.error().is(Errc::invalid_argument));
  EXPECT_THAT(sd.error().message, HasSubstr("writes['tree'] is nested deeper than 1000 levels"));
  auto threads = c.threads();
  ASSERT_TRUE(threads);
  EXPECT_TRUE(threads->empty());

  Checkpoint deepest = make_cp("t", "c1", "", 0);
  deepest.writes["tree"] = nested(kMaxJsonDepth - 1);
  ASSERT_TRUE(c.put(deepest));
  auto got = c.get("t", "c1");
  ASSERT_TRUE(got) << got.error().to_string();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->writes, deepest.writes);
}

TYPED_TEST(CheckpointerTest, ValuesRoundTripExactly) {
  auto& c = this->ckpt();
  Checkpoint cp = make_cp("t", "c1", "", 0);
  constexpr char kBytes[] = "tool said \xff\xfe\0 then stopped";  // invalid UTF-8 and a NUL
  cp.writes["bytes"] = std::string(kBytes, sizeof kBytes - 1);
  cp.writes["u64"] = std::numeric_limits<uint64_t>::max();
  cp.writes["i64"] = std::numeric_limits<int64_t>::min();
  cp.writes["pi"] = 3.141592653589793;
  cp.writes["empty"] = json::object();
  cp.writes["unicode"] = "h\u00e9llo \u2603";
  ASSERT_TRUE(c.put(cp));
  auto got = c.get("t", "c1");
  ASSERT_TRUE(got) << got.error().to_string();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->writes, cp.writes);
  EXPECT_EQ((*got)->writes.at("bytes").as_string().size(), sizeof kBytes - 1);
  EXPECT_TRUE((*got)->writes.at("u64").is_uint64());
}

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

}  // namespace
}  // namespace weir::graph
