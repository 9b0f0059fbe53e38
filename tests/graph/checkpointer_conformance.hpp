// The checkpointer conformance suite: one typed test suite every backend passes (memory, SQLite,
// PostgreSQL). A backend is a type with `static constexpr const char* kName` and
// `static Result<std::unique_ptr<Checkpointer>> open(const fs::path& scratch_file, Retention)`
// (scratch_file lies in a fresh temp dir; a server backend ignores it and opens a fresh
// database). Instantiate with INSTANTIATE_TYPED_TEST_SUITE_P(Name, CheckpointerTest, Types).
#pragma once

#include <sys/wait.h>
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

// ---- Artifacts and thread claims ------------------------------------------------------------

inline Checkpoint::Artifact artifact(std::string id, std::string bytes,
                                     std::string media_type = "application/octet-stream") {
  return {std::move(id), std::move(media_type), std::move(bytes)};
}

// A pid that no process has any more: a child that has exited and been reaped.
inline int64_t dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A claimant on another host (its pid means nothing here), with the lease given.
inline ThreadHolder remote_holder(std::string host, int64_t lease_ms) {
  ThreadHolder h = this_process_holder(new_claim_token(), lease_ms);
  h.host = std::move(host);
  return h;
}

inline constexpr const char* kBusyPattern =
    "^thread_busy: thread 't' is being run by pid [0-9]+ on host h1 since "
    "[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} UTC \\(last heartbeat [0-9]+ s ago\\); "
    "wait for it or, if that process is gone, it will be taken over after 60 s$";

// The blobs a put carries are stored with the thread in the put's transaction, byte for byte;
// one the thread already holds is kept as it was; reads of checkpoints never carry them.
TYPED_TEST_P(CheckpointerTest, ArtifactsAreStoredWithTheirCheckpoint) {
  auto& c = this->ckpt();
  const std::string bytes("\0\x01\xff\xfe binary \x80", 13);
  Checkpoint first = make_cp("t", "c1", "", 0, R"({"doc":{"$artifact":"a1"}})");
  first.artifacts = {artifact("a1", bytes, "text/plain"), artifact("empty", "")};
  ASSERT_TRUE(c.put(first));
  auto a1 = c.get_artifact("t", "a1");
  ASSERT_TRUE(a1) << a1.error().to_string();
  ASSERT_TRUE(a1->has_value());
  EXPECT_EQ((*a1)->id, "a1");
  EXPECT_EQ((*a1)->media_type, "text/plain");
  EXPECT_EQ((*a1)->bytes, bytes);
  auto empty = c.get_artifact("t", "empty");
  ASSERT_TRUE(empty && empty->has_value());
  EXPECT_EQ((*empty)->bytes, "");

  // The same id again (an ArtifactStore id is the hash of its bytes): the first is kept.
  Checkpoint second = make_cp("t", "c2", "c1", 1);
  second.artifacts = {artifact("a1", "other", "application/json"), artifact("a2", "two")};
  ASSERT_TRUE(c.put(second));
  a1 = c.get_artifact("t", "a1");
  ASSERT_TRUE(a1 && a1->has_value());
  EXPECT_EQ((*a1)->bytes, bytes);
  EXPECT_EQ((*a1)->media_type, "text/plain");
  auto a2 = c.get_artifact("t", "a2");
  ASSERT_TRUE(a2 && a2->has_value());
  EXPECT_EQ((*a2)->bytes, "two");

  // Per thread: another thread does not see them; unknown ids and threads are nullopt.
  for (auto [thread, id] : {std::pair{"t", "nope"}, std::pair{"other", "a1"}}) {
    auto none = c.get_artifact(thread, id);
    ASSERT_TRUE(none) << none.error().to_string();
    EXPECT_FALSE(none->has_value()) << thread << " " << id;
  }
  // Reads of checkpoints do not carry them.
  auto got = c.get("t", "c1");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_TRUE((*got)->artifacts.empty());

  // A put that fails stores none of its blobs.
  Checkpoint orphan = make_cp("t", "c3", "ghost", 2);
  orphan.artifacts = {artifact("a3", "three")};
  ASSERT_FALSE(c.put(orphan));
  Checkpoint dup = make_cp("t", "c2", "c1", 2);
  dup.artifacts = {artifact("a4", "four")};
  ASSERT_FALSE(c.put(dup));
  for (const char* id : {"a3", "a4"}) {
    auto none = c.get_artifact("t", id);
    ASSERT_TRUE(none);
    EXPECT_FALSE(none->has_value()) << id;
  }

  // They go with the thread.
  ASSERT_TRUE(c.delete_thread("t"));
  auto gone = c.get_artifact("t", "a1");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());
}

// One runner per thread: a live claim refuses another (the message names the holder), the holder
// itself may claim again, renew and release; a released claim is not renewed.
TYPED_TEST_P(CheckpointerTest, AClaimIsExclusiveUntilReleased) {
  auto& c = this->ckpt();
  auto none = c.thread_holder("t");
  ASSERT_TRUE(none) << none.error().to_string();
  EXPECT_FALSE(none->has_value());

  const ThreadHolder a = remote_holder("h1", 60000);
  auto claimed = c.claim_thread("t", a);
  ASSERT_TRUE(claimed) << claimed.error().to_string();
  EXPECT_EQ(claimed->token, a.token);
  EXPECT_EQ(claimed->host, "h1");
  EXPECT_EQ(claimed->pid, a.pid);
  EXPECT_EQ(claimed->lease_ms, 60000);
  EXPECT_GT(claimed->since_ms, 1'600'000'000'000);
  EXPECT_EQ(claimed->heartbeat_ms, claimed->since_ms);
  auto held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_EQ((*held)->token, a.token);
  EXPECT_EQ((*held)->since_ms, claimed->since_ms);

  // Another runner, on another host, while the claim is live.
  const ThreadHolder b = remote_holder("h2", 60000);
  auto busy = c.claim_thread("t", b);
  ASSERT_FALSE(busy);
  EXPECT_TRUE(busy.error().is(Errc::thread_busy));
  EXPECT_THAT(busy.error().to_string(), ::testing::ContainsRegex(kBusyPattern));
  auto b_renew = c.renew_thread("t", b.token);
  ASSERT_FALSE(b_renew);
  EXPECT_TRUE(b_renew.error().is(Errc::thread_busy));
  EXPECT_THAT(b_renew.error().message,
              ::testing::ContainsRegex("^thread 't' is no longer held by this runner: it was "
                                       "taken over by pid [0-9]+ on host h1 at .* UTC"));
  ASSERT_TRUE(c.release_thread("t", b.token));  // not b's: nothing happens
  held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_EQ((*held)->token, a.token);

  // The holder again: the claim stands, since unchanged; a renewal moves the heartbeat.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto again = c.claim_thread("t", a);
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->since_ms, claimed->since_ms);
  EXPECT_GE(again->heartbeat_ms, claimed->heartbeat_ms + 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(c.renew_thread("t", a.token));
  held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_GE((*held)->heartbeat_ms, again->heartbeat_ms + 5);

  // Released: unclaimed, renewing fails, and anyone may claim.
  ASSERT_TRUE(c.release_thread("t", a.token));
  ASSERT_TRUE(c.release_thread("t", a.token));  // idempotent
  held = c.thread_holder("t");
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->has_value());
  auto renew = c.renew_thread("t", a.token);
  ASSERT_FALSE(renew);
  EXPECT_EQ(renew.error().to_string(),
            "thread_busy: thread 't' is no longer held by this runner: its claim was released; "
            "this run stops without writing");
  ASSERT_TRUE(c.claim_thread("t", b));
  // Claims are per thread.
  ASSERT_TRUE(c.claim_thread("u", a));
}

// A claim that is no longer live is taken over: one whose heartbeat is older than its lease
// (any host), or one on the claimant's host whose process is gone (at once).
TYPED_TEST_P(CheckpointerTest, ALapsedOrDeadClaimIsTakenOver) {
  auto& c = this->ckpt();
  const ThreadHolder silent = remote_holder("far", 50);
  ASSERT_TRUE(c.claim_thread("t", silent));
  ThreadHolder me = this_process_holder(new_claim_token(), 30000);
  auto busy = c.claim_thread("t", me);
  ASSERT_FALSE(busy);
  EXPECT_THAT(busy.error().message,
              HasSubstr("is being run by pid " + std::to_string(::getpid()) + " on host far"));
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  auto taken = c.claim_thread("t", me);
  ASSERT_TRUE(taken) << taken.error().to_string();
  EXPECT_EQ(taken->token, me.token);
  auto renew = c.renew_thread("t", silent.token);
  ASSERT_FALSE(renew);
  EXPECT_THAT(renew.error().message,
              ::testing::ContainsRegex(
                  "^thread 't' is no longer held by this runner: it was taken over by pid [0-9]+ "
                  "on host [^ ]+ at .* UTC \\(this runner's heartbeat had lapsed\\); this run "
                  "stops without writing$"));

  // Same host, its process gone: taken over though its lease has a minute left.
  ThreadHolder dead = this_process_holder(new_claim_token(), 60000);
  dead.pid = dead_pid();
  ASSERT_TRUE(c.claim_thread("u", dead));
  auto over = c.claim_thread("u", me);
  ASSERT_TRUE(over) << over.error().to_string();
  // A live process on this host (this one) is not.
  ThreadHolder live = this_process_holder(new_claim_token(), 60000);
  ASSERT_TRUE(c.claim_thread("v", live));
  auto refused = c.claim_thread("v", me);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(Errc::thread_busy));
}

// put() with a claim token commits only while the token holds the thread, and refreshes the
// claim's heartbeat; refused, it stores nothing (nor its blobs).
TYPED_TEST_P(CheckpointerTest, APutWithAClaimTokenChecksTheClaim) {
  auto& c = this->ckpt();
  const ThreadHolder a = remote_holder("h1", 60000);
  auto claimed = c.claim_thread("t", a);
  ASSERT_TRUE(claimed);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Checkpoint cp = make_cp("t", "c1", "", 0);
  cp.claim_token = a.token;
  ASSERT_TRUE(c.put(cp));
  auto held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_GE((*held)->heartbeat_ms, claimed->heartbeat_ms + 5) << "the put refreshed the claim";

  // Another runner's token: refused, naming the holder; nothing stored.
  Checkpoint other = make_cp("t", "c2", "c1", 1);
  other.claim_token = new_claim_token();
  other.artifacts = {artifact("x", "y")};
  auto refused = c.put(other);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(Errc::thread_busy));
  EXPECT_THAT(refused.error().message, HasSubstr("it was taken over by pid "));
  EXPECT_THAT(refused.error().message, HasSubstr(" on host h1 at "));
  auto all = c.list("t");
  ASSERT_TRUE(all);
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("c1"));
  auto blob = c.get_artifact("t", "x");
  ASSERT_TRUE(blob);
  EXPECT_FALSE(blob->has_value());

  // Released: a put with the old token is refused; one without a token is not checked.
  ASSERT_TRUE(c.release_thread("t", a.token));
  Checkpoint late = make_cp("t", "c3", "c1", 1);
  late.claim_token = a.token;
  auto put = c.put(late);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().to_string(),
            "thread_busy: thread 't' is no longer held by this runner: its claim was released; "
            "this run stops without writing");
  late.claim_token.clear();
  ASSERT_TRUE(c.put(late));
}

TYPED_TEST_P(CheckpointerTest, AnInvalidClaimIsRefused) {
  auto& c = this->ckpt();
  ThreadHolder no_token = this_process_holder("", 1000);
  auto e1 = c.claim_thread("t", no_token);
  ASSERT_FALSE(e1);
  EXPECT_EQ(e1.error().to_string(),
            "invalid_argument: claim_thread: the token is empty; use new_claim_token()");
  ThreadHolder no_lease = this_process_holder(new_claim_token(), 0);
  auto e2 = c.claim_thread("t", no_lease);
  ASSERT_FALSE(e2);
  EXPECT_EQ(e2.error().to_string(), "invalid_argument: claim_thread: lease_ms must be positive");
  auto held = c.thread_holder("t");
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->has_value());
}

// delete_thread removes the claim with the thread; a prune that empties the thread removes its
// blobs but not its claim (a runner may hold it).
TYPED_TEST_P(CheckpointerTest, DeleteThreadDropsTheClaimAndPruneKeepsIt) {
  auto& c = this->ckpt();
  // "pruned" is claimed by a runner whose claim lapses at once; "busy" by a live one.
  for (const char* t : {"deleted", "pruned", "busy"}) {
    Checkpoint cp = make_cp(t, "c1", "", 0);
    cp.artifacts = {artifact("blob", "bytes")};
    ASSERT_TRUE(c.put(cp));
    ASSERT_TRUE(c.claim_thread(t, remote_holder("h1", std::string(t) == "pruned" ? 1 : 60000)));
  }
  ASSERT_TRUE(c.delete_thread("deleted"));
  auto gone = c.thread_holder("deleted");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());

  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Retention ttl;
  ttl.max_age = std::chrono::milliseconds(10);
  // Age-based retention never deletes a thread a live claim holds (its run's next checkpoint
  // needs its parent): it names the holder and removes nothing.
  auto busy = c.prune("busy", ttl);
  ASSERT_FALSE(busy);
  EXPECT_THAT(busy.error().to_string(),
              ::testing::MatchesRegex("^thread_busy: thread 'busy' is being run by pid [0-9]+ "
                                      "on host h1 since .*"));
  auto still = c.latest("busy");
  ASSERT_TRUE(still);
  EXPECT_TRUE(still->has_value());
  auto n = c.prune("pruned", ttl);
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 1u);
  auto blob = c.get_artifact("pruned", "blob");
  ASSERT_TRUE(blob);
  EXPECT_FALSE(blob->has_value());
  auto kept = c.thread_holder("pruned");
  ASSERT_TRUE(kept);
  EXPECT_TRUE(kept->has_value());
  // A partial prune keeps every blob (a later checkpoint may reference any of them).
  Checkpoint first = make_cp("partial", "p1", "", 0);
  first.artifacts = {artifact("old", "o")};
  ASSERT_TRUE(c.put(first));
  ASSERT_TRUE(c.put(make_cp("partial", "p2", "", 1)));
  Retention keep;
  keep.keep_last = 1;
  auto pruned = c.prune("partial", keep);
  ASSERT_TRUE(pruned);
  EXPECT_EQ(*pruned, 1u);
  auto old = c.get_artifact("partial", "old");
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->has_value());
}

// Eight runners race for one thread: exactly one wins.
TYPED_TEST_P(CheckpointerTest, ConcurrentClaimsHaveOneWinner) {
  auto& c = this->ckpt();
  std::atomic<int> won{0}, busy{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      auto r = c.claim_thread("t", remote_holder("h" + std::to_string(i), 60000));
      if (r)
        ++won;
      else if (r.error().is(Errc::thread_busy))
        ++busy;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(busy.load(), 7);
}

// Ids follow one rule in every backend (weir/graph/ids.hpp): 1 to 1024 bytes of UTF-8 text
// without control characters. What PostgreSQL text could not hold (a NUL) or would show garbled
// is refused as invalid_argument naming the byte, and nothing is stored; any other text is kept
// exactly.
TYPED_TEST_P(CheckpointerTest, IdsThatAreNotTextAreRefusedEverywhere) {
  auto& c = this->ckpt();
  const std::string rule = "; an id is 1 to 1024 bytes of UTF-8 text without control characters";
  struct Bad {
    std::string thread, id, message;
  };
  const Bad bad[] = {
      {std::string("a\0b", 3), "c1",
       "checkpoint put: thread_id holds a control character (byte 0x00 at offset 1, after 'a')"},
      {"t", "line\nbreak",
       "checkpoint put: checkpoint_id holds a control character (byte 0x0a at offset 4, after "
       "'line')"},
      {"\x7f", "c1", "checkpoint put: thread_id holds a control character (byte 0x7f at offset 0)"},
      {"caf\xc3", "c1",
       "checkpoint put: thread_id is not valid UTF-8 (byte 0xc3 at offset 3, after 'caf')"},
      {"\xc0\xaf", "c1",
       "checkpoint put: thread_id is not valid UTF-8 (byte 0xc0 at offset 0)"},  // overlong '/'
      {"\xed\xa0\x80", "c1",
       "checkpoint put: thread_id is not valid UTF-8 (byte 0xed at offset 0)"},  // a surrogate
      {std::string(1025, 'x'), "c1",
       "checkpoint put: thread_id is 1025 bytes long ('" + std::string(40, 'x') + "...')"},
  };
  for (const auto& b : bad) {
    auto s = c.put(make_cp(b.thread, b.id, "", 0));
    ASSERT_FALSE(s) << b.message;
    EXPECT_TRUE(s.error().is(Errc::invalid_argument)) << s.error().to_string();
    EXPECT_EQ(s.error().message, b.message + rule);
  }
  auto claim = c.claim_thread(std::string("a\0b", 3), remote_holder("h", 1000));
  ASSERT_FALSE(claim);
  EXPECT_EQ(claim.error().message,
            "claim_thread: thread_id holds a control character (byte 0x00 at offset 1, after "
            "'a')" +
                rule);
  auto threads = c.threads();
  ASSERT_TRUE(threads);
  EXPECT_TRUE(threads->empty()) << "a refused id stored something";
  // Text of any script, up to the limit, is an id.
  const std::string longest(1024, 'y');
  for (const std::string& id :
       {std::string("thread-\xe2\x9c\x93 \xf0\x9f\x98\x80 / 'x'"), longest}) {
    ASSERT_TRUE(c.put(make_cp(id, "c1", "", 0))) << id;
    auto back = c.latest(id);
    ASSERT_TRUE(back && back->has_value());
    EXPECT_EQ((*back)->thread_id, id);
  }
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
    PruneByAgeDeletesAnIdleThread, ArtifactsAreStoredWithTheirCheckpoint,
    AClaimIsExclusiveUntilReleased, ALapsedOrDeadClaimIsTakenOver,
    APutWithAClaimTokenChecksTheClaim, AnInvalidClaimIsRefused,
    DeleteThreadDropsTheClaimAndPruneKeepsIt, ConcurrentClaimsHaveOneWinner,
    IdsThatAreNotTextAreRefusedEverywhere);

}  // namespace weir::graph::conformance
