// The LangGraph Server API on each backend of the run service (included with runs_api_suite.hpp
// by the in-process and the PostgreSQL instances): threads, runs, interrupts, forks, state
// updates, copies, deletes and prunes behave the same on both.
#pragma once

#include "runs_api_suite.hpp"

namespace weir::serve::runs_suite {

inline std::string detail_of(const Reply& r) {
  auto v = json::parse(r.body);
  if (!v.is_object() || !v.as_object().contains("detail")) return "(no detail) " + r.body;
  return std::string(v.at("detail").as_string());
}

TEST_P(RunsApi, LangGraphThreadsBehaveTheSameOnThisBackend) {
  start();
  auto made = post("/threads", R"({"metadata": {"who": "suite"}})");
  ASSERT_EQ(made.status, 200) << made.body;
  const std::string t(object_of(made.body)["thread_id"].as_string());
  auto state = [&](const std::string& id) { return object_of(get("/threads/" + id + "/state").body); };

  // A run that stops at its interrupt; the state updated under it; the run resumed.
  auto paused = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "review"})");
  ASSERT_EQ(paused.status, 200) << paused.body;
  EXPECT_TRUE(object_of(paused.body).contains("__interrupt__")) << paused.body;
  const std::string at_ask(state(t)["checkpoint"].at("checkpoint_id").as_string());
  auto up = post("/threads/" + t + "/state", R"({"values": {"draft": "edited"}})");
  ASSERT_EQ(up.status, 200) << up.body;
  auto st = state(t);
  EXPECT_EQ(st["values"].at("draft"), "edited");
  EXPECT_EQ(json::serialize(st["next"]), R"(["ask"])");  // still waiting at the interrupt
  EXPECT_EQ(object_of(get("/threads/" + t).body)["status"], "interrupted");
  auto done = post("/threads/" + t + "/runs/wait",
                   R"({"assistant_id": "review", "command": {"resume": "yes"}})");
  ASSERT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(object_of(done.body)["draft"], "edited");
  EXPECT_EQ(object_of(done.body)["published"], true);

  // A fork from the interrupt, before the update: resumed with another answer.
  auto fork = post("/threads/" + t + "/runs/wait",
                   R"({"assistant_id": "review", "command": {"resume": "no"},
                       "checkpoint_id": ")" + at_ask + R"("})");
  ASSERT_EQ(fork.status, 200) << fork.body;
  EXPECT_EQ(object_of(fork.body)["draft"], "a draft");
  EXPECT_EQ(object_of(fork.body)["verdict"], "no");

  // Copy, delete, prune.
  auto copy = post("/threads/" + t + "/copy", "");
  ASSERT_EQ(copy.status, 200) << copy.body;
  const std::string c(object_of(copy.body)["thread_id"].as_string());
  EXPECT_EQ(state(c)["values"], state(t)["values"]);
  EXPECT_EQ(call(port_, "DELETE", "/threads/" + t).status, 204);
  EXPECT_EQ(get("/threads/" + t).status, 404);
  auto pruned = post("/threads/prune", R"({"thread_ids": [")" + c + R"("], "strategy": "keep_latest"})");
  ASSERT_EQ(pruned.status, 200) << pruned.body;
  EXPECT_EQ(json::parse(post("/threads/" + c + "/history", "{}").body).as_array().size(), 1u);
  EXPECT_EQ(state(c)["values"].at("verdict"), "no");

  // A thread with a run on it is not changed under the run.
  auto slow = post("/threads/" + c + "/runs", R"({"assistant_id": "slow", "input": {"left": 50}})");
  ASSERT_EQ(slow.status, 200) << slow.body;
  const std::string run(object_of(slow.body)["run_id"].as_string());
  auto busy = call(port_, "DELETE", "/threads/" + c);
  EXPECT_EQ(busy.status, 409);
  EXPECT_EQ(detail_of(busy),
            "thread '" + c + "' has a run in progress (" + run + "); wait for it to end");
  EXPECT_EQ(post("/threads/" + c + "/runs/" + run + "/cancel?wait=1", "").status, 204);
  EXPECT_EQ(call(port_, "DELETE", "/threads/" + c).status, 204);
}

}  // namespace weir::serve::runs_suite
