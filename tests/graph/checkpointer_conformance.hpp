// The checkpointer conformance suite: one typed test suite every backend passes (memory, SQLite,
// PostgreSQL). A backend is a type with `static constexpr const char* kName` and
// `static Result<std::unique_ptr<Checkpointer>> open(const fs::path& scratch_file, Retention)`
// (scratch_file lies in a fresh temp dir; a server backend ignores it and opens a fresh
// database). This part: checkpoints (put, get, list, state_at, branches, deletes, values) and
// retention. Artifacts, thread claims and ids: checkpointer_conformance_claims.hpp. Instantiate
// both: INSTANTIATE_TYPED_TEST_SUITE_P(Name, CheckpointerTest, Types, BackendName) and the same
// with CheckpointerClaimsTest.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "weir/graph/checkpointer.hpp"

namespace weir::graph::conformance {

namespace fs = std::filesystem;
namespace json = boost::json;
using ::testing::HasSubstr;

inline json::object obj(std::string_view text) {
  return json::parse(text).as_object();
}

inline Checkpoint make_cp(std::string thread, std::string id, std::string parent, int64_t step,
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

inline std::vector<std::string> ids(const std::vector<Checkpoint>& cps) {
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

struct BackendName {
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};

template <class Backend>
class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = Backend::open(dir_.path() / "checkpoints.db", {});
    ASSERT_TRUE(r) << r.error().to_string();
    cp_ = std::move(*r);
  }
  Checkpointer& ckpt() { return *cp_; }

  TempDir dir_;
  std::unique_ptr<Checkpointer> cp_;
};

TYPED_TEST_SUITE_P(CheckpointerTest);

// A snapshot checkpoint holds every channel: state_at stops there (an older key the snapshot
// does not hold is not seen), and the marker itself is not part of the state.
TYPED_TEST_P(CheckpointerTest, StateAtStopsAtASnapshot) {
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

TYPED_TEST_P(CheckpointerTest, PutThenLatestGetAndListNewestFirst) {
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

TYPED_TEST_P(CheckpointerTest, StateAtFoldsDeltasAlongTheParentChain) {
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

TYPED_TEST_P(CheckpointerTest, ResumeFromAnEarlierCheckpointBranches) {
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

TYPED_TEST_P(CheckpointerTest, DeleteThreadRemovesOnlyThatThread) {
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

TYPED_TEST_P(CheckpointerTest, UnknownThreadOrCheckpointIsNulloptOrNotFound) {
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

TYPED_TEST_P(CheckpointerTest, InvalidPutsAreRefusedAndStoreNothing) {
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

TYPED_TEST_P(CheckpointerTest, ThreadsMostRecentlyUpdatedFirst) {
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

TYPED_TEST_P(CheckpointerTest, ConcurrentPutsFromEightThreads) {
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
TYPED_TEST_P(CheckpointerTest, CheckpointSizeIsIndependentOfStep) {
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
TYPED_TEST_P(CheckpointerTest, PutCopiesValuesOutOfTheCallersStorage) {
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
inline json::value nested(std::size_t arrays) {
  json::value v = 1;
  for (std::size_t i = 0; i < arrays; ++i) {
    json::array a;
    a.push_back(std::move(v));
    v = std::move(a);
  }
  return v;
}

TYPED_TEST_P(CheckpointerTest, ValuesOutsideJsonAreRefusedEverywhere) {
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

TYPED_TEST_P(CheckpointerTest, ValuesRoundTripExactly) {
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

// ---- Retention --------------------------------------------------------------------------

// A thread of `steps` supersteps shaped as the executor writes them: channel "step" every step,
// channel "c<k>" (k = step % 7) every step, and every 32nd step a "$snapshot" holding all
// channels. Returns the ids, oldest first.
inline std::vector<std::string> put_executor_like_thread(Checkpointer& c, const std::string& thread,
                                                         int steps) {
  std::vector<std::string> out;
  std::string parent;
  json::object all;
  for (int s = 0; s < steps; ++s) {
    Checkpoint cp = make_cp(thread, new_checkpoint_id(s), parent, s);
    all["step"] = s;
    all["c" + std::to_string(s % 7)] = s;
    if (s > 0 && s % 32 == 0) {
      cp.writes = all;
      cp.writes["$snapshot"] = true;
    } else {
      cp.writes["step"] = s;
      cp.writes["c" + std::to_string(s % 7)] = s;
    }
    auto st = c.put(cp);
    EXPECT_TRUE(st) << st.error().to_string();
    if (!st) break;
    parent = cp.checkpoint_id;
    out.push_back(cp.checkpoint_id);
  }
  return out;
}

// The state after step `s` of put_executor_like_thread.
inline json::object executor_like_state(int s) {
  json::object st;
  st["step"] = s;
  for (int k = 0; k < 7 && k <= s; ++k) {
    int last = s - ((s - k) % 7 + 7) % 7;
    st["c" + std::to_string(k)] = last;
  }
  return st;
}

// keep_last=100 as an option: 10,000 steps leave a bounded number of checkpoints and every
// kept checkpoint still restores exactly the state it had.
TYPED_TEST_P(CheckpointerTest, RetentionKeepsAThreadBoundedAndStateAtExact) {
  Retention keep;
  keep.keep_last = 100;
  auto r = TypeParam::open(this->dir_.path() / "retained.db", keep);
  ASSERT_TRUE(r) << r.error().to_string();
  Checkpointer& c = **r;
  const int kSteps = 10'000;
  auto all_ids = put_executor_like_thread(c, "long", kSteps);
  ASSERT_EQ(all_ids.size(), static_cast<std::size_t>(kSteps));
  ASSERT_TRUE(c.put(make_cp("other", "o1", "", 0, R"({"x":1})")));

  auto stored = c.list("long", 1'000'000);
  ASSERT_TRUE(stored) << stored.error().to_string();
  EXPECT_GE(stored->size(), 100u);
  EXPECT_LE(stored->size(), 100u + kPruneSlack + 32) << "a thread's storage stays bounded";
  // The newest 100 are all there, and each restores its exact state.
  for (int back = 0; back < 100; ++back) {
    const int s = kSteps - 1 - back;
    auto st = c.state_at("long", all_ids[s]);
    ASSERT_TRUE(st) << "step " << s << ": " << st.error().to_string();
    EXPECT_EQ(*st, executor_like_state(s)) << "step " << s;
  }
  // What was pruned is gone, as a missing checkpoint of a known thread.
  auto gone = c.state_at("long", all_ids[10]);
  ASSERT_FALSE(gone);
  EXPECT_TRUE(gone.error().is(Errc::not_found));
  EXPECT_THAT(gone.error().message, HasSubstr("thread 'long' has no checkpoint"));
  // Other threads are untouched.
  auto other = c.state_at("other", "o1");
  ASSERT_TRUE(other);
}

// prune() on demand keeps the checkpoints a kept one's state_at needs: back to the snapshot.
TYPED_TEST_P(CheckpointerTest, PruneKeepsTheAncestorsStateAtNeeds) {
  auto& c = this->ckpt();
  auto all_ids = put_executor_like_thread(c, "t", 80);  // snapshots at 32 and 64
  Retention keep;
  keep.keep_last = 5;  // steps 75..79; their chain reaches back to the snapshot at 64
  auto n = c.prune("t", keep);
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 64u);
  auto stored = c.list("t", 1000);
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->size(), 16u);
  EXPECT_EQ(stored->back().checkpoint_id, all_ids[64]);
  auto st = c.state_at("t", all_ids[75]);
  ASSERT_TRUE(st) << st.error().to_string();
  EXPECT_EQ(*st, executor_like_state(75));
  // Nothing more to do; an unknown thread and a disabled policy remove nothing.
  auto again = c.prune("t", keep);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0u);
  auto unknown = c.prune("nope", keep);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(*unknown, 0u);
  auto off = c.prune("t", Retention{});
  ASSERT_TRUE(off);
  EXPECT_EQ(*off, 0u);
}

// A branch's chain is kept too: keeping the two newest (one per branch) keeps both roots.
TYPED_TEST_P(CheckpointerTest, PruneKeepsEveryKeptBranchsChain) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("t", "root", "", 0, R"({"a":1})")));
  ASSERT_TRUE(c.put(make_cp("t", "left", "root", 1, R"({"b":1})")));
  ASSERT_TRUE(c.put(make_cp("t", "right", "root", 1, R"({"b":2})")));
  Retention keep;
  keep.keep_last = 2;
  auto n = c.prune("t", keep);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 0u);
  auto left = c.state_at("t", "left");
  ASSERT_TRUE(left);
  EXPECT_EQ(*left, obj(R"({"b":1,"a":1})"));
}

// A TTL: checkpoints older than max_age go; a thread that is all older goes as a whole.
TYPED_TEST_P(CheckpointerTest, PruneByAgeDeletesAnIdleThread) {
  auto& c = this->ckpt();
  ASSERT_TRUE(c.put(make_cp("idle", "i1", "", 0, R"({"a":1})")));
  ASSERT_TRUE(c.put(make_cp("idle", "i2", "i1", 1, R"({"a":2})")));
  // Margins a loaded machine keeps (under ASan, 40 ms between the fresh put and its prune were
  // once not enough): idle is 600 ms old, fresh has 300 ms to spare.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_TRUE(c.put(make_cp("fresh", "f1", "", 0, R"({"b":1})")));
  Retention ttl;
  ttl.max_age = std::chrono::milliseconds(300);
  auto idle = c.prune("idle", ttl);
  ASSERT_TRUE(idle) << idle.error().to_string();
  EXPECT_EQ(*idle, 2u);
  auto fresh = c.prune("fresh", ttl);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(*fresh, 0u);
  auto threads = c.threads();
  ASSERT_TRUE(threads);
  EXPECT_THAT(*threads, ::testing::ElementsAre("fresh"));
  auto latest = c.latest("idle");
  ASSERT_TRUE(latest);
  EXPECT_FALSE(latest->has_value());
}

REGISTER_TYPED_TEST_SUITE_P(
    CheckpointerTest, StateAtStopsAtASnapshot, PutThenLatestGetAndListNewestFirst,
    StateAtFoldsDeltasAlongTheParentChain, ResumeFromAnEarlierCheckpointBranches,
    DeleteThreadRemovesOnlyThatThread, UnknownThreadOrCheckpointIsNulloptOrNotFound,
    InvalidPutsAreRefusedAndStoreNothing, ThreadsMostRecentlyUpdatedFirst,
    ConcurrentPutsFromEightThreads, CheckpointSizeIsIndependentOfStep,
    PutCopiesValuesOutOfTheCallersStorage, ValuesOutsideJsonAreRefusedEverywhere,
    ValuesRoundTripExactly, RetentionKeepsAThreadBoundedAndStateAtExact,
    PruneKeepsTheAncestorsStateAtNeeds, PruneKeepsEveryKeptBranchsChain,
    PruneByAgeDeletesAnIdleThread);

}  // namespace weir::graph::conformance
