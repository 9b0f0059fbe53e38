// The LangGraph API's thread operations over real HTTP on loopback: forks (a run from an earlier
// checkpoint), state updates, copies, deletes and prunes, through the one run service.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "langgraph_fixture.hpp"

namespace weir::serve {
namespace {

using namespace std::chrono_literals;

std::string my_thread(std::uint16_t port) {
  auto r = call(port, "POST", "/threads", R"({"metadata": {"owner": "me"}})");
  EXPECT_EQ(r.status, 200) << r.body;
  return std::string(body_json(r).at("thread_id").as_string());
}

json::value state_of(std::uint16_t port, const std::string& t) {
  return body_json(call(port, "GET", "/threads/" + t + "/state"));
}

std::string wait_run(std::uint16_t port, const std::string& t, const std::string& body) {
  auto r = call(port, "POST", "/threads/" + t + "/runs/wait", body);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.body;
}

TEST(LangGraphThreads, ARunFromAnEarlierCheckpointBranchesTheThread) {
  auto s = start(lg_config());
  const std::string t = my_thread(s.port);
  wait_run(s.port, t, R"({"assistant_id": "steps", "input": {"topic": "a"}})");
  const std::string end_of_first(
      state_of(s.port, t).at("checkpoint").at("checkpoint_id").as_string());
  wait_run(s.port, t, R"({"assistant_id": "steps", "input": {"topic": "b"}})");
  EXPECT_EQ(json::serialize(state_of(s.port, t).at("values").at("seen")),
            R"(["first a","second","first b","second"])");
  // From the end of the first run, with other input: the second run is not in this branch.
  wait_run(
      s.port, t,
      R"({"assistant_id": "steps", "input": {"topic": "c"}, "checkpoint": {"checkpoint_id": ")" +
          end_of_first + R"("}})");
  const auto st = state_of(s.port, t);
  EXPECT_EQ(json::serialize(st.at("values").at("seen")),
            R"(["first a","second","first c","second"])");
  // The branch hangs off that checkpoint: history walks back to it through a fork.
  auto history = body_json(call(s.port, "POST", "/threads/" + t + "/history", R"({"limit": 100})"));
  bool forked = false;
  for (const auto& h : history.as_array())
    if (h.at("metadata").at("source") == "fork")
      forked = h.at("parent_checkpoint").at("checkpoint_id") == json::value(end_of_first);
  EXPECT_TRUE(forked) << history;
  // A run without a thread has no checkpoint to start from; an unknown checkpoint is a 404.
  auto stateless = call(s.port, "POST", "/runs/wait",
                        R"({"assistant_id": "steps", "checkpoint_id": ")" + end_of_first + R"("})");
  EXPECT_EQ(stateless.status, 422);
  EXPECT_EQ(detail(stateless),
            "a run without a thread has no checkpoint to start from: 'checkpoint' needs POST "
            "/threads/{thread_id}/runs");
  auto unknown =
      call(s.port, "POST", "/threads/" + t + "/runs/wait",
           R"({"assistant_id": "steps", "checkpoint_id": "000000000001-00000000000000abcd"})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(detail(unknown),
            "checkpoint '000000000001-00000000000000abcd' is not one of thread '" + t + "'");
  auto subgraph = call(s.port, "POST", "/threads/" + t + "/runs/wait",
                       R"({"assistant_id": "steps", "checkpoint": {"checkpoint_ns": "x|y"}})");
  EXPECT_EQ(subgraph.status, 422);
}

TEST(LangGraphThreads, AStateUpdateIsANewCheckpointTheNextRunReads) {
  auto s = start(lg_config());
  const std::string t = my_thread(s.port);
  const std::string empty = my_thread(s.port);
  auto none = call(s.port, "POST", "/threads/" + empty + "/state", R"({"values": {"topic": "z"}})");
  EXPECT_EQ(none.status, 422);
  EXPECT_EQ(detail(none), "thread " + empty + " has no state yet: start a run on it first");

  wait_run(s.port, t, R"({"assistant_id": "steps", "input": {"topic": "a"}})");
  auto up = call(s.port, "POST", "/threads/" + t + "/state",
                 R"({"values": {"topic": "z"}, "as_node": "first"})");
  ASSERT_EQ(up.status, 200) << up.body;
  const auto id = body_json(up).at("checkpoint").at("checkpoint_id");
  const auto st = state_of(s.port, t);
  EXPECT_EQ(st.at("checkpoint").at("checkpoint_id"), id);
  EXPECT_EQ(st.at("values").at("topic"), "z");
  EXPECT_EQ(st.at("metadata").at("source"), "update");
  EXPECT_EQ(st.at("metadata").at("as_node"), "first");
  wait_run(s.port, t, R"({"assistant_id": "steps", "input": {}})");
  EXPECT_EQ(json::serialize(state_of(s.port, t).at("values").at("seen")),
            R"(["first a","second","first z","second"])");

  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"values": {"seen": ["x"]}})",
       "'values.seen': channel 'seen' is merged by reducer 'append'; weir's state update sets "
       "channels without a reducer only (docs/langgraph-api.md)"},
      {R"({"values": {"nope": 1}})",
       "'values' sets 'nope', which steps does not have (its channels: topic, seen, done)"},
      {R"({"values": {"topic": "q"}, "as_node": "zz"})", "'as_node' 'zz' is not a node of steps"},
      {R"({"values": [["topic", "q"]]})",
       "'values' must be an object of channel values (weir does not take a list of updates), "
       "got an array"},
  };
  for (const auto& [body, why] : refused) {
    auto r = call(s.port, "POST", "/threads/" + t + "/state", body);
    EXPECT_EQ(r.status, 422) << body;
    EXPECT_EQ(detail(r), why) << body;
  }
  auto at =
      call(s.port, "POST", "/threads/" + t + "/state",
           R"({"values": {"topic": "q"}, "checkpoint_id": "000000000001-00000000000000abcd"})");
  EXPECT_EQ(at.status, 404);
  EXPECT_EQ(state_of(s.port, t).at("values").at("topic"), "z");  // nothing of q was written
}

TEST(LangGraphThreads, CopyDeleteAndPrune) {
  auto s = start(lg_config());
  const std::string t = my_thread(s.port);
  wait_run(s.port, t, R"({"assistant_id": "steps", "input": {"topic": "a"}})");
  wait_run(s.port, t, R"({"assistant_id": "steps", "input": {"topic": "b"}})");
  auto copy = call(s.port, "POST", "/threads/" + t + "/copy", "");
  ASSERT_EQ(copy.status, 200) << copy.body;
  const std::string c(body_json(copy).at("thread_id").as_string());
  EXPECT_NE(c, t);
  EXPECT_EQ(body_json(copy).at("metadata").at("owner"), "me");
  EXPECT_EQ(state_of(s.port, c).at("values"), state_of(s.port, t).at("values"));
  auto h = [&](const std::string& id) {
    return body_json(call(s.port, "POST", "/threads/" + id + "/history", R"({"limit": 1000})"))
        .as_array()
        .size();
  };
  EXPECT_EQ(h(c), h(t));

  auto del = call(s.port, "DELETE", "/threads/" + t);
  EXPECT_EQ(del.status, 204);
  EXPECT_EQ(call(s.port, "GET", "/threads/" + t).status, 404);
  EXPECT_EQ(call(s.port, "DELETE", "/threads/" + t).status, 404);
  EXPECT_EQ(state_of(s.port, c).at("values").at("topic"), "b");  // the copy stands alone

  const auto values = state_of(s.port, c).at("values");
  const std::size_t before = h(c);
  auto keep =
      call(s.port, "POST", "/threads/prune",
           R"({"thread_ids": [")" + c + R"(", "no-such-thread"], "strategy": "keep_latest"})");
  ASSERT_EQ(keep.status, 200) << keep.body;
  EXPECT_EQ(body_json(keep).at("pruned_count"), 1);
  EXPECT_GT(before, 1u);
  EXPECT_EQ(h(c), 2u);  // one checkpoint holds the state now (and the root state before it)
  EXPECT_EQ(state_of(s.port, c).at("values"), values);
  auto gone = call(s.port, "POST", "/threads/prune", R"({"thread_ids": [")" + c + R"("]})");
  EXPECT_EQ(body_json(gone).at("pruned_count"), 1);
  EXPECT_EQ(call(s.port, "GET", "/threads/" + c).status, 404);
  auto bad = call(s.port, "POST", "/threads/prune", R"({"thread_ids": ["a"], "strategy": "all"})");
  EXPECT_EQ(bad.status, 422);
}

TEST(LangGraphThreads, ABusyThreadIsNotChangedUnderItsRun) {
  auto s = start(lg_config());
  const std::string t = my_thread(s.port);
  auto run = call(s.port, "POST", "/threads/" + t + "/runs", R"({"assistant_id": "slow"})");
  ASSERT_EQ(run.status, 200);
  const std::string id(body_json(run).at("run_id").as_string());
  const std::string busy =
      "thread '" + t + "' has a run in progress (" + id + "); wait for it to end";
  auto del = call(s.port, "DELETE", "/threads/" + t);
  EXPECT_EQ(del.status, 409);
  EXPECT_EQ(detail(del), busy);
  std::this_thread::sleep_for(300ms);  // a checkpoint or two
  auto up = call(s.port, "POST", "/threads/" + t + "/state", R"({"values": {"slept": 1}})");
  EXPECT_EQ(up.status, 409);
  EXPECT_EQ(detail(up), busy);
  auto cancel = call(s.port, "POST", "/threads/" + t + "/runs/" + id + "/cancel?wait=1");
  EXPECT_EQ(cancel.status, 204);
  EXPECT_EQ(call(s.port, "DELETE", "/threads/" + t).status, 204);
}

TEST(LangGraphRuns, ABatchStartsEveryRunOrNoneWhenOneIsBad) {
  auto s = start(lg_config());
  auto made = call(s.port, "POST", "/runs/batch",
                   R"([{"assistant_id": "steps", "input": {"topic": "x"}},
                       {"assistant_id": "chat", "metadata": {"n": 2}}])");
  ASSERT_EQ(made.status, 200) << made.body;
  const auto runs = body_json(made).as_array();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].at("metadata").at("n"), 2);
  for (const auto& r : runs) {  // each its own thread, and each ends
    const std::string path = "/runs/" + std::string(r.at("run_id").as_string());
    auto joined = call(s.port, "GET",
                       "/threads/" + std::string(r.at("thread_id").as_string()) + "/runs/" +
                           std::string(r.at("run_id").as_string()) + "/join");
    EXPECT_EQ(joined.status, 200) << path << " " << joined.body;
  }
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"assistant_id": "steps"})",
       "POST /runs/batch takes a list of runs (1 to 100 run requests)"},
      {"[]", "POST /runs/batch takes a list of runs (1 to 100 run requests)"},
      {R"([{"assistant_id": "steps"}, 7])", "run 1 of the batch must be an object, got an integer"},
      {R"([{"assistant_id": "steps"}, {"assistant_id": "steps", "command": {"resume": 1}}])",
       "run 1 of the batch: a run without a thread has nothing to resume or fork "
       "('command.resume', 'checkpoint')"},
  };
  for (const auto& [body, why] : refused) {
    auto r = call(s.port, "POST", "/runs/batch", body);
    EXPECT_EQ(r.status, 422) << body;
    EXPECT_EQ(detail(r), why) << body;
  }
  auto unknown = call(s.port, "POST", "/runs/batch",
                      R"([{"assistant_id": "steps"}, {"assistant_id": "nope"}])");
  EXPECT_EQ(unknown.status, 404);
  // Nothing of a refused batch started: only the first two runs exist.
  EXPECT_EQ(body_json(call(s.port, "POST", "/threads/count", "{}")), 0);
}

// A batch the run queue cannot take whole is refused whole: the runs it started before the
// queue filled are cancelled, and the answer names them.
TEST(LangGraphRuns, ABatchTheQueueCannotTakeWholeLeavesNoRunGoing) {
  auto c = lg_config();
  c.max_runs = 1;
  c.max_queued_runs = 2;
  auto s = start(c);
  std::string batch = "[";
  for (int i = 0; i < 6; ++i) batch += std::string(i ? "," : "") + R"({"assistant_id": "slow"})";
  batch += "]";
  auto r = call(s.port, "POST", "/runs/batch", batch);
  ASSERT_EQ(r.status, 429) << r.body;
  const std::string why = detail(r);
  const std::string cut = "started before it were cancelled: ";
  const auto at = why.find(cut);
  ASSERT_NE(at, std::string::npos) << why;
  std::vector<std::string> ids;
  for (std::size_t p = at + cut.size(); p + 18 <= why.size(); p += 20)
    ids.push_back(why.substr(p, 18));
  ASSERT_FALSE(ids.empty()) << why;
  for (const auto& id : ids) {
    auto joined = call(s.port, "GET", "/threads/" + id + "/runs/" + id + "/join");
    EXPECT_EQ(joined.status, 200) << id << " " << joined.body;
    auto rec = body_json(call(s.port, "GET", "/threads/" + id + "/runs/" + id));
    EXPECT_EQ(rec.at("status"), "interrupted") << id;
  }
}

TEST(LangGraphRuns, CancelManyStopsTheRunsNamedOrAThreads) {
  auto s = start(lg_config());
  const std::string t = my_thread(s.port);
  auto first = call(s.port, "POST", "/threads/" + t + "/runs", R"({"assistant_id": "slow"})");
  const std::string r1(body_json(first).at("run_id").as_string());
  auto second = call(s.port, "POST", "/threads/" + t + "/runs",
                     R"({"assistant_id": "slow", "multitask_strategy": "enqueue"})");
  const std::string r2(body_json(second).at("run_id").as_string());
  auto c =
      call(s.port, "POST", "/runs/cancel", R"({"thread_id": ")" + t + R"(", "status": "pending"})");
  EXPECT_EQ(c.status, 204) << c.body;
  auto status = [&](const std::string& r) {
    return std::string(
        body_json(call(s.port, "GET", "/threads/" + t + "/runs/" + r)).at("status").as_string());
  };
  EXPECT_EQ(status(r2), "interrupted");  // the pending one
  EXPECT_EQ(status(r1), "running");
  auto all = call(s.port, "POST", "/runs/cancel", R"({"run_ids": [")" + r1 + R"("]})");
  EXPECT_EQ(all.status, 204);
  (void)call(s.port, "GET", "/threads/" + t + "/runs/" + r1 + "/join");
  EXPECT_EQ(status(r1), "interrupted");
  auto elsewhere =
      call(s.port, "POST", "/runs/cancel",
           R"({"thread_id": ")" + my_thread(s.port) + R"(", "run_ids": [")" + r1 + R"("]})");
  EXPECT_EQ(elsewhere.status, 404);
  auto none = call(s.port, "POST", "/runs/cancel", "{}");
  EXPECT_EQ(none.status, 422);
  EXPECT_EQ(detail(none), "POST /runs/cancel needs 'thread_id' or 'run_ids'");
}

TEST(LangGraphRuns, HistoryWithACheckpointListsThatOne) {
  auto s = start(lg_config());
  const std::string t = my_thread(s.port);
  wait_run(s.port, t, R"({"assistant_id": "steps", "input": {"topic": "a"}})");
  auto all = body_json(call(s.port, "POST", "/threads/" + t + "/history", R"({"limit": 100})"));
  ASSERT_GE(all.as_array().size(), 3u);
  const std::string id(all.at(2).at("checkpoint").at("checkpoint_id").as_string());
  auto one = body_json(call(s.port, "POST", "/threads/" + t + "/history",
                            R"({"checkpoint": {"checkpoint_id": ")" + id + R"("}})"));
  ASSERT_EQ(one.as_array().size(), 1u) << one;
  EXPECT_EQ(one.at(0), all.at(2));
}

}  // namespace
}  // namespace weir::serve
