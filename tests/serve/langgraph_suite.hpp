// The LangGraph Server API on each backend of the run service (included with runs_api_suite.hpp
// by the in-process and the PostgreSQL instances): threads, runs, interrupts, forks, state
// updates, copies, deletes and prunes behave the same on both.
#pragma once

#include "langgraph_text_suite.hpp"
#include "runs_api_suite.hpp"
#include "test_server.hpp"

namespace weir::serve::runs_suite {

// a -> b -> c, each appending its name to `log`: the workflow of the run-semantics tests.
inline constexpr const char* kLineWorkflow = R"({"name": "line",
 "state": {"log": {"reducer": "append"}, "topic": {"default": ""}}, "input": ["topic"],
 "nodes": {"a": {"kind": "set", "values": {"log": "a"}},
           "b": {"kind": "set", "values": {"log": "b"}},
           "c": {"kind": "set", "values": {"log": "c"}}},
 "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "b"}, {"from": "b", "to": "c"},
           {"from": "c", "to": "END"}]})";

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
  auto state = [&](const std::string& id) {
    return object_of(get("/threads/" + id + "/state").body);
  };

  // A run that stops at its interrupt; the state updated under it; the run resumed.
  auto paused = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "review"})");
  ASSERT_EQ(paused.status, 200) << paused.body;
  EXPECT_TRUE(object_of(paused.body).contains("__interrupt__")) << paused.body;
  const std::string at_ask(state(t)["checkpoint"].at("checkpoint_id").as_string());
  // Anything but its answer is refused before a run starts; the thread still waits.
  auto no_answer =
      post("/threads/" + t + "/runs/wait", R"({"assistant_id": "review", "command": {}})");
  EXPECT_EQ(no_answer.status, 422);
  EXPECT_EQ(detail_of(no_answer),
            "thread '" + t +
                "' waits at the interrupt of node 'ask': answer it with 'command.resume', or "
                "start from a checkpoint ('checkpoint_id')");
  EXPECT_EQ(object_of(get("/threads/" + t).body)["status"], "interrupted");
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
                       "checkpoint_id": ")" +
                       at_ask + R"("})");
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
  auto pruned =
      post("/threads/prune", R"({"thread_ids": [")" + c + R"("], "strategy": "keep_latest"})");
  ASSERT_EQ(pruned.status, 200) << pruned.body;
  // One checkpoint holds the state now, and the root state before it.
  EXPECT_EQ(json::parse(post("/threads/" + c + "/history", "{}").body).as_array().size(), 2u);
  EXPECT_EQ(state(c)["values"].at("verdict"), "no");

  // A thread with a run on it is not changed under the run.
  auto slow = post("/threads/" + c + "/runs", R"({"assistant_id": "slow", "input": {"left": 50}})");
  ASSERT_EQ(slow.status, 200) << slow.body;
  const std::string run(object_of(slow.body)["run_id"].as_string());
  auto busy = call(port_, "DELETE", "/threads/" + c);
  EXPECT_EQ(busy.status, 409);
  EXPECT_EQ(detail_of(busy),
            "thread '" + c + "' has a run in progress (" + run + "); wait for it to end");
  auto copied = post("/threads/" + c + "/copy", "");
  EXPECT_EQ(copied.status, 409);
  EXPECT_EQ(detail_of(copied), detail_of(busy));
  EXPECT_EQ(post("/threads/" + c + "/runs/" + run + "/cancel?wait=1", "").status, 204);
  EXPECT_EQ(call(port_, "DELETE", "/threads/" + c).status, 204);
}

// interrupt_before / interrupt_after stop a run before or after the nodes named, with the
// thread interrupted and no interrupt of a node; a run without input (or a command.resume)
// continues it, after command.update's values when it has some. config.recursion_limit lowers the
// workflow's cap; names and caps it cannot take are 422s naming them.
TEST_P(RunsApi, LangGraphBreakpointsAndARunsRecursionLimit) {
  write("line", kLineWorkflow);
  start();
  auto thread = [&] {
    return std::string(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  };
  auto state = [&](const std::string& id) {
    return object_of(get("/threads/" + id + "/state").body);
  };
  const std::string t = thread();
  auto before = post("/threads/" + t + "/runs/wait",
                     R"({"assistant_id": "line", "input": {"topic": "x"},
                         "interrupt_before": ["b"]})");
  ASSERT_EQ(before.status, 200) << before.body;
  EXPECT_EQ(object_of(get("/threads/" + t).body)["status"], "interrupted")
      << get("/v1/runs?limit=1").body;  // the run's error, if it failed
  auto st = state(t);
  EXPECT_EQ(json::serialize(st["values"].at("log")), R"(["a"])");
  EXPECT_EQ(json::serialize(st["next"]), R"(["b"])");
  EXPECT_EQ(json::serialize(st["interrupts"]), "[]");
  EXPECT_EQ(json::serialize(st["tasks"].at(0).at("interrupts")), "[]");
  auto other = post("/threads/" + t + "/runs/wait",
                    R"({"assistant_id": "line", "input": {"topic": "new"}})");
  EXPECT_EQ(other.status, 422);
  EXPECT_EQ(detail_of(other), "thread '" + t +
                                  "' stopped at a breakpoint before node 'b': continue it with "
                                  "no 'input' (or 'command.resume'), or start from a checkpoint "
                                  "('checkpoint_id')");
  // command.update sets channels before the run goes on; a reducer's channel is refused.
  auto merged = post("/threads/" + t + "/runs/wait",
                     R"({"assistant_id": "line", "command": {"update": {"log": ["z"]}}})");
  EXPECT_EQ(merged.status, 422);
  EXPECT_EQ(detail_of(merged),
            "'command.update.log': channel 'log' is merged by reducer 'append'; weir's state "
            "update sets channels without a reducer only (docs/langgraph-api.md)");
  auto go_on = post("/threads/" + t + "/runs/wait",
                    R"({"assistant_id": "line", "command": {"update": [["topic", "y"]]}})");
  ASSERT_EQ(go_on.status, 200) << go_on.body;
  EXPECT_EQ(json::serialize(object_of(go_on.body)["log"]), R"(["a","b","c"])");
  EXPECT_EQ(state(t)["values"].at("topic"), "y");
  EXPECT_EQ(object_of(get("/threads/" + t).body)["status"], "idle");

  const std::string u = thread();
  auto after =
      post("/threads/" + u + "/runs/wait", R"({"assistant_id": "line", "interrupt_after": "*"})");
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(json::serialize(state(u)["next"]), R"(["b"])");
  auto resumed = post("/threads/" + u + "/runs/wait",
                      R"({"assistant_id": "line", "command": {"resume": null},
                          "interrupt_after": ["b"]})");
  ASSERT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_EQ(json::serialize(state(u)["next"]), R"(["c"])");
  auto last = post("/threads/" + u + "/runs/wait", R"({"assistant_id": "line", "input": null})");
  ASSERT_EQ(last.status, 200) << last.body;
  EXPECT_EQ(json::serialize(object_of(last.body)["log"]), R"(["a","b","c"])");

  auto unknown = post("/threads/" + thread() + "/runs/wait",
                      R"({"assistant_id": "line", "interrupt_before": ["b", "nope"]})");
  EXPECT_EQ(unknown.status, 422);
  EXPECT_EQ(detail_of(unknown),
            "'interrupt_before' names node 'nope', which line does not have (its nodes: a, b, "
            "c; \"*\" for all)");
  auto star = post("/runs/wait", R"({"assistant_id": "line", "interrupt_after": "all"})");
  EXPECT_EQ(star.status, 422);
  EXPECT_EQ(detail_of(star), R"('interrupt_after' must be "*" or a list of node names, got "all")");
  auto high = post("/runs/wait", R"({"assistant_id": "line", "config": {"recursion_limit": 500}})");
  EXPECT_EQ(high.status, 422);
  EXPECT_EQ(detail_of(high),
            "'recursion_limit' 500 is not within 1 to 25, line's cap (its "
            "limits.recursion_limit): a run may lower its cap, not raise it");
  auto low = post("/runs", R"({"assistant_id": "line", "config": {"recursion_limit": 2}})");
  ASSERT_EQ(low.status, 200) << low.body;
  const auto lo = object_of(low.body);
  const std::string run(lo.at("run_id").as_string()), on(lo.at("thread_id").as_string());
  auto joined = get("/threads/" + on + "/runs/" + run + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  auto rec = object_of(get("/threads/" + on + "/runs/" + run).body);
  EXPECT_EQ(rec["status"], "error");
  EXPECT_NE(joined.body.find("the run's recursion_limit=2"), std::string::npos) << joined.body;
}

// A refused run changes nothing: its command.update and its fork are written only once every
// check passed (the input, the thread's state), and a stateless run's update says it needs a
// thread.
TEST_P(RunsApi, LangGraphARefusedRunWritesNothing) {
  start();
  auto history = [&](const std::string& t) {
    return json::parse(post("/threads/" + t + "/history", R"({"limit": 100})").body)
        .as_array()
        .size();
  };
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto first = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "review", "input": {}})");
  ASSERT_EQ(first.status, 200) << first.body;  // waits at its interrupt
  const std::size_t before = history(t);
  const auto values = object_of(get("/threads/" + t + "/state").body)["values"];
  auto bad_input = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "review",
      "input": {"bogus": 1}, "command": {"update": {"draft": "LEAK"}}})");
  EXPECT_EQ(bad_input.status, 422) << bad_input.body;
  auto unanswered = post("/threads/" + t + "/runs/wait",
                         R"({"assistant_id": "review", "command": {"update": {"draft": "LEAK"}}})");
  EXPECT_EQ(unanswered.status, 422);
  EXPECT_EQ(
      detail_of(unanswered).rfind("thread '" + t + "' waits at the interrupt of node 'ask'", 0), 0u)
      << unanswered.body;
  EXPECT_EQ(history(t), before);
  EXPECT_EQ(object_of(get("/threads/" + t + "/state").body)["values"], values);
  // Answered, then a resume of a finished thread: refused, and the update with it.
  ASSERT_EQ(post("/threads/" + t + "/runs/wait",
                 R"({"assistant_id": "review", "command": {"resume": "ok"}})")
                .status,
            200);
  const std::size_t done = history(t);
  auto again = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "review",
      "command": {"resume": "twice", "update": {"draft": "LEAK"}}})");
  EXPECT_EQ(again.status, 422);
  EXPECT_EQ(detail_of(again), "thread '" + t +
                                  "' is not interrupted (its last step is done): only an "
                                  "interrupted thread can be resumed");
  EXPECT_EQ(history(t), done);
  EXPECT_EQ(object_of(get("/threads/" + t + "/state").body)["values"].at("draft"), "a draft");

  // An input the workflow does not take, with an update, on a finished thread of `slow`.
  const std::string u(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  ASSERT_EQ(
      post("/threads/" + u + "/runs/wait", R"({"assistant_id": "slow", "input": {"left": 1}})")
          .status,
      200);
  const std::size_t slow_before = history(u);
  auto not_taken = post("/threads/" + u + "/runs/wait", R"({"assistant_id": "slow",
      "input": {"bogus": 1}, "command": {"update": {"slept": "LEAK"}}})");
  EXPECT_EQ(not_taken.status, 422);
  EXPECT_EQ(detail_of(not_taken),
            "'input' sets 'bogus', which slow does not take as input (its \"input\": left, ms)")
      << not_taken.body;
  EXPECT_EQ(history(u), slow_before);

  auto stateless =
      post("/runs/wait", R"({"assistant_id": "review", "command": {"update": {"draft": "x"}}})");
  EXPECT_EQ(stateless.status, 422);
  EXPECT_EQ(detail_of(stateless),
            "'command.update' needs a thread: POST /threads/{thread_id}/runs (a stateless run's "
            "'input' sets its first state)");
}

// A run enqueued behind one that stops at a breakpoint continues the thread when it has no
// input (as `input: null` at the door); with input it fails saying why.
TEST_P(RunsApi, LangGraphARunEnqueuedBehindABreakpointContinuesIt) {
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto first = post("/threads/" + t + "/runs", R"({"assistant_id": "slow",
      "input": {"left": 3, "ms": 100}, "interrupt_after": ["tick"]})");
  ASSERT_EQ(first.status, 200) << first.body;
  auto second = post("/threads/" + t + "/runs",
                     R"({"assistant_id": "slow", "multitask_strategy": "enqueue"})");
  ASSERT_EQ(second.status, 200) << second.body;
  const std::string run2(object_of(second.body)["run_id"].as_string());
  auto joined = get("/threads/" + t + "/runs/" + run2 + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  EXPECT_EQ(object_of(joined.body)["n"], 3) << joined.body;
  EXPECT_EQ(object_of(get("/threads/" + t + "/runs/" + run2).body)["status"], "success");

  auto stop = post("/threads/" + t + "/runs", R"({"assistant_id": "slow",
      "input": {"left": 2, "ms": 100}, "interrupt_after": ["tick"]})");
  ASSERT_EQ(stop.status, 200) << stop.body;
  auto with_input = post("/threads/" + t + "/runs", R"({"assistant_id": "slow",
      "input": {"left": 1}, "multitask_strategy": "enqueue"})");
  ASSERT_EQ(with_input.status, 200) << with_input.body;
  const std::string run4(object_of(with_input.body)["run_id"].as_string());
  auto failed = get("/threads/" + t + "/runs/" + run4 + "/join");
  ASSERT_EQ(failed.status, 200) << failed.body;
  EXPECT_NE(failed.body.find("stopped at a breakpoint before node 'check' (the run before this "
                             "one stopped it): a run without input continues it"),
            std::string::npos)
      << failed.body;
}

// A run enqueued behind a delayed run waits for it, and starts at once when that one is
// cancelled (on PostgreSQL it kept the cancelled run's delay: pending for up to a day).
TEST_P(RunsApi, LangGraphARunBehindACancelledDelayedRunStartsAtOnce) {
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto later = post("/threads/" + t + "/runs",
                    R"({"assistant_id": "slow", "input": {"left": 1}, "after_seconds": 3600})");
  ASSERT_EQ(later.status, 200) << later.body;
  auto behind = post("/threads/" + t + "/runs", R"({"assistant_id": "slow",
      "input": {"left": 1, "ms": 1}, "multitask_strategy": "enqueue"})");
  ASSERT_EQ(behind.status, 200) << behind.body;
  const std::string first(object_of(later.body)["run_id"].as_string());
  const std::string second(object_of(behind.body)["run_id"].as_string());
  EXPECT_EQ(post("/threads/" + t + "/runs/" + first + "/cancel?wait=1", "").status, 204);
  const auto t0 = std::chrono::steady_clock::now();
  auto joined = get("/threads/" + t + "/runs/" + second + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  EXPECT_EQ(object_of(joined.body)["n"], 1) << joined.body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// A breakpoint before a step of Sends (a map's workers): the thread's `next` names each task's
// node, one entry a task, as LangGraph's does, and each task has its own id.
TEST_P(RunsApi, LangGraphABreakpointBeforeSendsNamesEachTask) {
  write("squares", R"({"name": "squares",
 "state": {"numbers": {"default": [1, 2, 3]}, "total": {"reducer": "sum", "default": 0}},
 "nodes": {"fan": {"kind": "map", "over": "numbers", "node": "square"},
           "square": {"kind": "set", "values": {"total": 1}}},
 "edges": [{"from": "START", "to": "fan"}, {"from": "square", "to": "END"}]})");
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto stopped = post("/threads/" + t + "/runs/wait",
                      R"({"assistant_id": "squares", "interrupt_before": ["square"]})");
  ASSERT_EQ(stopped.status, 200) << stopped.body;
  const auto st = object_of(get("/threads/" + t + "/state").body);
  EXPECT_EQ(json::serialize(st.at("next")), R"(["square","square","square"])")
      << json::serialize(st);
  const auto& tasks = st.at("tasks").as_array();
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_NE(tasks[0].at("id"), tasks[1].at("id"));
  auto done = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "squares", "input": null})");
  ASSERT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(object_of(done.body)["total"], 3);
}

// command.goto: the run's first step runs the nodes named instead of START's targets, after
// its input; Sends run their node with their own input; names the workflow lacks and goto with
// resume are refused with what to do.
TEST_P(RunsApi, LangGraphCommandGotoStartsAtTheNodesNamed) {
  write("line", kLineWorkflow);
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto jumped = post("/threads/" + t + "/runs/wait",
                     R"({"assistant_id": "line", "input": {"topic": "x"},
                         "command": {"goto": "b"}})");
  ASSERT_EQ(jumped.status, 200) << jumped.body;
  EXPECT_EQ(json::serialize(object_of(jumped.body)["log"]), R"(["b","c"])");
  EXPECT_EQ(object_of(jumped.body)["topic"], "x");
  auto again = post("/threads/" + t + "/runs/wait",
                    R"({"assistant_id": "line", "command": {"goto": ["c"]}})");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::serialize(object_of(again.body)["log"]), R"(["b","c","c"])");
  auto stateless =
      post("/runs/wait", R"({"assistant_id": "line", "input": {}, "command": {"goto": "c"}})");
  ASSERT_EQ(stateless.status, 200) << stateless.body;
  EXPECT_EQ(json::serialize(object_of(stateless.body)["log"]), R"(["c"])");

  auto unknown = post("/runs/wait", R"({"assistant_id": "line", "command": {"goto": "nope"}})");
  EXPECT_EQ(unknown.status, 422);
  EXPECT_EQ(detail_of(unknown),
            "'command.goto' names node 'nope', which line does not have (its nodes: a, b, c)");
  // Sends: each runs its node with its own input ({{item}} in the node's templates), beside the
  // nodes named; then the run goes on from them as usual.
  write("fan", R"({"name": "fan",
 "state": {"log": {"reducer": "append"}}, "input": [],
 "nodes": {"start": {"kind": "set", "values": {"log": "start"}},
           "work": {"kind": "set", "values": {"log": "work {{item.n}}"}},
           "done": {"kind": "set", "values": {"log": "done"}}},
 "edges": [{"from": "START", "to": "start"},
           {"from": "start", "route": {"when": {"channel": "log", "op": "contains", "value": "more"},
                                      "then": "work", "else": "done"}},
           {"from": "work", "to": "done"}, {"from": "done", "to": "END"}]})");
  svc_.reset();
  start();
  const std::string f(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto sent = post("/threads/" + f + "/runs/wait", R"({"assistant_id": "fan",
      "command": {"goto": [{"node": "work", "input": {"n": 1}}, {"node": "work", "input": {"n": 2}},
                           "start"]}})");
  ASSERT_EQ(sent.status, 200) << sent.body;
  auto log = object_of(sent.body)["log"].as_array();
  ASSERT_EQ(log.size(), 4u) << sent.body;
  std::multiset<std::string> first{std::string(log[0].as_string()), std::string(log[1].as_string()),
                                   std::string(log[2].as_string())};
  EXPECT_EQ(first, (std::multiset<std::string>{"start", "work 1", "work 2"})) << sent.body;
  EXPECT_EQ(log[3], "done") << "the nodes after them run once";
  auto bad_send = post("/runs/wait", R"({"assistant_id": "fan",
                                         "command": {"goto": {"node": "wrok", "input": {}}}})");
  EXPECT_EQ(bad_send.status, 422);
  EXPECT_EQ(detail_of(bad_send),
            "'command.goto' names node 'wrok', which fan does not have (its nodes: start, work, "
            "done)");
  auto malformed = post("/runs/wait", R"({"assistant_id": "fan",
                                          "command": {"goto": {"node": "work", "args": 1}}})");
  EXPECT_EQ(malformed.status, 422);
  EXPECT_EQ(detail_of(malformed),
            R"(a Send in 'command.goto' is {"node": <a node name>, "input": <its input>}, got )"
            R"({"node":"work","args":1})");
  auto with_resume = post("/threads/" + t + "/runs/wait",
                          R"({"assistant_id": "line", "command": {"goto": "b", "resume": 1}})");
  EXPECT_EQ(with_resume.status, 501);
  EXPECT_NE(detail_of(with_resume).find("'command.goto' with 'command.resume'"), std::string::npos)
      << with_resume.body;
  auto wrong = post("/runs/wait", R"({"assistant_id": "line", "command": {"goto": 3}})");
  EXPECT_EQ(wrong.status, 422);
  EXPECT_EQ(detail_of(wrong),
            R"('command.goto' must be a node name, a Send ({"node", "input"}) or a list of them, )"
            "got 3");
}

// POST /assistants makes an assistant of a graph with settings of its own: found by search and
// get, drawn as its graph, versioned by PATCH (and set back with /latest), lending its runs its
// recursion_limit and its id; a graph's default assistant cannot be changed or deleted.
TEST_P(RunsApi, LangGraphAssistantsMadeForAGraph) {
  write("line", kLineWorkflow);
  start();
  auto made = post("/assistants", R"({"graph_id": "line", "name": "Short line",
                                      "config": {"recursion_limit": 2},
                                      "metadata": {"team": "docs"}})");
  ASSERT_EQ(made.status, 200) << made.body;
  const auto a = object_of(made.body);
  const std::string id(a.at("assistant_id").as_string());
  EXPECT_EQ(id.size(), 36u);
  EXPECT_EQ(a.at("graph_id"), "line");
  EXPECT_EQ(a.at("name"), "Short line");
  EXPECT_EQ(a.at("version"), 1);
  EXPECT_EQ(json::serialize(a.at("config")), R"({"recursion_limit":2})");
  EXPECT_EQ(object_of(get("/assistants/" + id).body), a);
  EXPECT_EQ(get("/assistants/" + id + "/graph").body, get("/assistants/line/graph").body);
  auto both = json::parse(post("/assistants/search", R"({"graph_id": "line"})").body).as_array();
  EXPECT_EQ(both.size(), 2u);
  auto docs =
      json::parse(post("/assistants/search", R"({"metadata": {"team": "docs"}})").body).as_array();
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].at("assistant_id"), json::value(id));
  EXPECT_EQ(post("/assistants/count", R"({"name": "short"})").body, "1");

  // Its runs: its recursion_limit (2 of the graph's 3 steps) and its id.
  auto run = post("/runs/wait", R"({"assistant_id": ")" + id + R"(", "input": {}})");
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_NE(run.body.find("the run's recursion_limit=2"), std::string::npos) << run.body;
  auto own = post("/runs/wait", R"({"assistant_id": ")" + id +
                                    R"(", "input": {}, "config": {"recursion_limit": 5}})");
  ASSERT_EQ(own.status, 200) << own.body;
  EXPECT_EQ(json::serialize(object_of(own.body)["log"]), R"(["a","b","c"])");
  auto bg = post("/runs", R"({"assistant_id": ")" + id + R"(", "input": {}})");
  ASSERT_EQ(bg.status, 200) << bg.body;
  EXPECT_EQ(object_of(bg.body)["assistant_id"], json::value(id));

  // Versions.
  auto patched = call(port_, "PATCH", "/assistants/" + id,
                      R"({"config": {}, "metadata": {"reviewed": true}})");
  ASSERT_EQ(patched.status, 200) << patched.body;
  const auto v2 = object_of(patched.body);
  EXPECT_EQ(v2.at("version"), 2);
  EXPECT_EQ(json::serialize(v2.at("config")), "{}");
  EXPECT_EQ(json::serialize(v2.at("metadata")), R"({"team":"docs","reviewed":true})");
  auto versions = json::parse(post("/assistants/" + id + "/versions", "{}").body).as_array();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0].at("version"), 2);
  EXPECT_EQ(versions[1].at("version"), 1);
  auto back = post("/assistants/" + id + "/latest", R"({"version": 1})");
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(json::serialize(object_of(back.body)["config"]), R"({"recursion_limit":2})");
  auto none = post("/assistants/" + id + "/latest", R"({"version": 9})");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(detail_of(none), "assistant '" + id + "' has no version 9 (it keeps 2, 1)");

  // Ids: given, taken, the graph's own.
  auto given = post("/assistants", R"({"graph_id": "line", "assistant_id": "my-line"})");
  ASSERT_EQ(given.status, 200) << given.body;
  EXPECT_EQ(object_of(given.body)["name"], "Untitled");
  auto taken = post("/assistants", R"({"graph_id": "line", "assistant_id": "my-line"})");
  EXPECT_EQ(taken.status, 409);
  EXPECT_EQ(detail_of(taken),
            "assistant 'my-line' exists already ('if_exists': \"do_nothing\" answers it instead)");
  auto kept = post("/assistants", R"({"graph_id": "line", "assistant_id": "my-line",
                                      "name": "other", "if_exists": "do_nothing"})");
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(object_of(kept.body)["name"], "Untitled");
  auto fixed = call(port_, "PATCH", "/assistants/line", R"({"name": "x"})");
  EXPECT_EQ(fixed.status, 409);
  EXPECT_EQ(detail_of(fixed),
            "assistant 'line' is graph line's default assistant, which is the graph itself: make "
            "an assistant of your own with POST /assistants to change its settings");
  EXPECT_EQ(call(port_, "DELETE", "/assistants/line").status, 409);
  auto nograph = post("/assistants", R"({"graph_id": "nope"})");
  EXPECT_EQ(nograph.status, 404);
  EXPECT_EQ(detail_of(nograph).rfind("graph 'nope' not found (this server's graphs: ", 0), 0u)
      << nograph.body;
  auto high = post("/assistants", R"({"graph_id": "line", "config": {"recursion_limit": 99}})");
  EXPECT_EQ(high.status, 422);
  EXPECT_EQ(detail_of(high),
            "'recursion_limit' 99 is not within 1 to 25, line's cap (its limits.recursion_limit): "
            "a run may lower its cap, not raise it");

  EXPECT_EQ(call(port_, "DELETE", "/assistants/" + id).status, 204);
  EXPECT_EQ(get("/assistants/" + id).status, 404);
  auto gone = post("/runs/wait", R"({"assistant_id": ")" + id + R"(", "input": {}})");
  EXPECT_EQ(gone.status, 404);
}

// A value a run moved to the artifact store comes back whole from the thread's artifacts route
// (the state holds its reference); an id the thread does not hold is a 404 naming both.
TEST_P(RunsApi, LangGraphThreadArtifactsDownload) {
  write("doc", R"({"name": "doc", "limits": {"inline_limit": 4096},
 "state": {"document": {}}, "tools": {"generate": {"builtin": "lorem"}},
 "nodes": {"produce": {"kind": "tool", "tool": "generate", "args": {"bytes": 10000},
                       "output": "document"}},
 "edges": [{"from": "START", "to": "produce"}, {"from": "produce", "to": "END"}]})");
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto ran = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "doc", "input": {}})");
  ASSERT_EQ(ran.status, 200) << ran.body;
  const auto ref = object_of(ran.body)["document"];
  ASSERT_TRUE(ref.is_object() && ref.as_object().contains("$artifact")) << ran.body;
  const std::string id(ref.at("$artifact").as_string());
  auto got = get("/threads/" + t + "/artifacts/" + id);
  ASSERT_EQ(got.status, 200) << got.body.substr(0, 200);
  EXPECT_EQ(got.body.size(), 10000u);
  EXPECT_EQ(got.header("content-type"), "text/plain; charset=utf-8");
  EXPECT_EQ(got.header("x-content-type-options"), "nosniff");
  EXPECT_EQ(got.header("content-disposition"),
            "attachment; filename=\"artifact-" + id.substr(0, 16) + "\"");
  auto none = get("/threads/" + t + "/artifacts/nope");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(detail_of(none), "Artifact nope not found on thread " + t);
  EXPECT_EQ(get("/threads/no-such-thread/artifacts/" + id).status, 404);
}

// In-process, /metrics counts the runs by state (weir_runs{state}): one running, one enqueued
// behind it on its thread, one delayed; on PostgreSQL the queue is the database's (no series).
TEST_P(RunsApi, MetricsCountTheRunsByState) {
  start(1);
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto slow = post("/threads/" + t + "/runs",
                   R"({"assistant_id": "slow", "input": {"left": 100, "ms": 20}})");
  ASSERT_EQ(slow.status, 200) << slow.body;
  auto behind = post("/threads/" + t + "/runs", R"({"assistant_id": "slow",
      "input": {"left": 1}, "multitask_strategy": "enqueue"})");
  ASSERT_EQ(behind.status, 200) << behind.body;
  auto later = post("/runs", R"({"assistant_id": "slow", "input": {"left": 1},
                                 "after_seconds": 600})");
  ASSERT_EQ(later.status, 200) << later.body;
  auto metric = [&](std::uint16_t, const std::string& series) {  // NaN: no such series
    const std::string text = get("/metrics").body;
    const auto at = text.find("\n" + series + " ");
    return at == std::string::npos ? NAN : std::stod(text.substr(at + series.size() + 2));
  };
  if (GetParam() == "postgres") {
    EXPECT_TRUE(std::isnan(metric(port_, "weir_runs{state=\"running\"}")));
  } else {
    for (int i = 0; i < 200 && metric(port_, "weir_runs{state=\"running\"}") != 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(metric(port_, "weir_runs{state=\"running\"}"), 1);
    EXPECT_EQ(metric(port_, "weir_runs{state=\"queued\"}"), 1);
    EXPECT_EQ(metric(port_, "weir_runs{state=\"pending\"}"), 1);
  }
  for (const auto& r : {slow, behind, later}) {
    const auto o = object_of(r.body);
    const std::string run(o.at("run_id").as_string()), on(o.at("thread_id").as_string());
    EXPECT_EQ(post("/threads/" + on + "/runs/" + run + "/cancel?wait=1", "").status, 204);
  }
}

// A run keeps what its request said of it (metadata, multitask_strategy), and joining an older
// run answers that run's own last values, not what later runs made of the thread.
TEST_P(RunsApi, LangGraphRunsKeepTheirOwnRequestAndAnswer) {
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto a = post("/threads/" + t + "/runs/wait",
                R"({"assistant_id": "slow", "input": {"left": 1, "ms": 1},
                    "metadata": {"who": "me"}, "multitask_strategy": "enqueue"})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(object_of(a.body)["n"], 1);
  auto b = post("/threads/" + t + "/runs/wait",
                R"({"assistant_id": "slow", "input": {"left": 2, "ms": 1}})");
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(object_of(b.body)["n"], 3);
  auto listed = json::parse(get("/threads/" + t + "/runs").body).as_array();
  ASSERT_EQ(listed.size(), 2u);
  const auto& first = listed.at(1).as_object();  // newest first
  const std::string run(first.at("run_id").as_string());
  EXPECT_EQ(json::serialize(first.at("metadata")), R"({"who":"me"})");
  EXPECT_EQ(first.at("multitask_strategy"), "enqueue");
  EXPECT_EQ(json::serialize(object_of(get("/threads/" + t + "/runs/" + run).body)["metadata"]),
            R"({"who":"me"})");
  auto joined = get("/threads/" + t + "/runs/" + run + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  EXPECT_EQ(object_of(joined.body)["n"], 1) << "the older run's own answer";
}

// Several clients sending `interrupt` (or `rollback`) runs to one busy thread at once: each is
// taken (each makes way for the runs before it), none is refused, and the thread ends idle.
TEST_P(RunsApi, LangGraphConcurrentInterruptsAreAllTaken) {
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto slow =
      post("/threads/" + t + "/runs", R"({"assistant_id": "slow", "input": {"left": 500}})");
  ASSERT_EQ(slow.status, 200) << slow.body;
  for (const char* strategy : {"interrupt", "rollback"}) {
    std::vector<Reply> replies(4);
    std::vector<std::thread> clients;
    for (std::size_t i = 0; i < replies.size(); ++i)
      clients.emplace_back([&, i] {
        replies[i] = post("/threads/" + t + "/runs",
                          std::string(R"({"assistant_id": "slow", "input": {"left": 200},
                                          "multitask_strategy": ")") +
                              strategy + "\"}");
      });
    for (auto& c : clients) c.join();
    for (const auto& r : replies) EXPECT_EQ(r.status, 200) << strategy << ": " << r.body;
  }
  auto runs = json::parse(get("/threads/" + t + "/runs").body).as_array();
  const std::string last(runs.at(0).at("run_id").as_string());
  EXPECT_EQ(post("/threads/" + t + "/runs/" + last + "/cancel?wait=1", "").status, 204);
}

// A second run on a busy thread, with each of LangGraph's multitask strategies.
TEST_P(RunsApi, LangGraphDoubleTextingFollowsTheStrategyAsked) {
  // Ticks until `left` (a sum: each run's input adds to it) is used up.
  write("ticker", R"({"name": "ticker",
 "state": {"n": {"reducer": "sum", "default": 0}, "left": {"reducer": "sum", "default": 0},
           "slept": {}},
 "input": ["left"],
 "tools": {"wait": {"builtin": "sleep"}},
 "limits": {"recursion_limit": 100000},
 "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": 30}, "output": "slept"},
           "tick": {"kind": "set", "values": {"n": 1, "left": -1}}},
 "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "tick"},
           {"from": "tick", "route": {"when": {"channel": "left", "op": "<=", "value": 0},
                                      "then": "END", "else": "nap"}}]})");
  start();
  auto thread = [&] {
    return std::string(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  };
  auto background = [&](const std::string& t, const std::string& body) {
    auto r = post("/threads/" + t + "/runs", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return std::string(object_of(r.body)["run_id"].as_string());
  };
  auto status = [&](const std::string& t, const std::string& run) {
    return std::string(object_of(get("/threads/" + t + "/runs/" + run).body)["status"].as_string());
  };
  auto n_of = [&](const std::string& t) {
    return object_of(get("/threads/" + t + "/state").body)["values"].at("n").as_int64();
  };
  auto ticked = [&](const std::string& t) {  // the long run has done a step or two
    return eventually([&] {
      auto v = object_of(get("/threads/" + t + "/state").body)["values"];
      return v.is_object() && v.as_object().contains("n") && v.at("n").as_int64() >= 2;
    });
  };
  // A long run; a run of one tick whatever `left` the thread holds.
  const std::string kLong = R"({"assistant_id": "ticker", "input": {"left": 1000000000000}})";
  const std::string kShort = R"({"assistant_id": "ticker", "input": {"left": -10000000000000}, )";

  // reject (the default): 409, the first goes on.
  const std::string t1 = thread();
  const std::string r1 = background(t1, kLong);
  auto second =
      post("/threads/" + t1 + "/runs/wait", kShort + R"("multitask_strategy": "reject"})");
  EXPECT_EQ(second.status, 409);
  EXPECT_EQ(detail_of(second),
            "thread '" + t1 + "' has a run in progress (" + r1 + "); wait for it to end");
  EXPECT_TRUE(status(t1, r1) == "pending" || status(t1, r1) == "running");

  // interrupt: the first is cancelled and what it did is kept; the second starts afresh on it.
  ASSERT_TRUE(ticked(t1));
  auto after =
      post("/threads/" + t1 + "/runs/wait", kShort + R"("multitask_strategy": "interrupt"})");
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(status(t1, r1), "interrupted");
  const auto kept = object_of(after.body)["n"].as_int64();
  EXPECT_GE(kept, 3);  // two or more of the first run's ticks, and one of its own
  EXPECT_EQ(n_of(t1), kept);

  // rollback: the first is cancelled and undone; the thread is as it was before it.
  const std::string t2 = thread();
  ASSERT_EQ(
      post("/threads/" + t2 + "/runs/wait", R"({"assistant_id": "ticker", "input": {"left": 1}})")
          .status,
      200);
  EXPECT_EQ(n_of(t2), 1);
  const std::string r2 = background(t2, kLong);
  ASSERT_TRUE(ticked(t2));
  ASSERT_TRUE(eventually([&] { return n_of(t2) >= 3; }));
  auto back =
      post("/threads/" + t2 + "/runs/wait", kShort + R"("multitask_strategy": "rollback"})");
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(status(t2, r2), "interrupted");
  EXPECT_EQ(object_of(back.body)["n"], 2);  // the first run's 1, then this one's tick

  // enqueue: the second waits for the first and then runs.
  const std::string t3 = thread();
  const std::string r3 = background(t3, R"({"assistant_id": "ticker", "input": {"left": 5}})");
  const std::string r4 = background(
      t3, R"({"assistant_id": "ticker", "input": {"left": 1}, "multitask_strategy": "enqueue"})");
  // Pending (on PostgreSQL a worker may hold it a moment, finding its thread busy).
  EXPECT_NE(status(t3, r4), "success");
  auto joined = get("/threads/" + t3 + "/runs/" + r4 + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  EXPECT_EQ(status(t3, r3), "success");
  EXPECT_EQ(status(t3, r4), "success");
  EXPECT_EQ(object_of(joined.body)["n"], 6);  // five, then one more after them
}

// Concurrent writers of one thread's record lose nothing: metadata merges of different keys all
// stay, and of several creates of one id exactly one makes it (the others are told it exists).
TEST_P(RunsApi, LangGraphConcurrentThreadWritesLoseNothing) {
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  constexpr int kPatches = 40;
  std::vector<int> statuses(kPatches, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < kPatches; ++i)
    clients.emplace_back([&, i] {
      statuses[i] =
          call(port_, "PATCH", "/threads/" + t,
               R"({"metadata": {"k)" + std::to_string(i) + R"(": )" + std::to_string(i) + "}}")
              .status;
    });
  for (auto& c : clients) c.join();
  clients.clear();
  for (int i = 0; i < kPatches; ++i) EXPECT_EQ(statuses[i], 200) << "PATCH " << i;
  auto meta = object_of(get("/threads/" + t).body)["metadata"].as_object();
  for (int i = 0; i < kPatches; ++i)
    EXPECT_EQ(meta["k" + std::to_string(i)], i) << "key k" << i << " of " << json::serialize(meta);

  const std::string id = "same-" + std::to_string(::getpid());
  std::vector<Reply> made(8);
  for (std::size_t i = 0; i < made.size(); ++i)
    clients.emplace_back([&, i] {
      made[i] = post("/threads", R"({"thread_id": ")" + id + R"(", "metadata": {"by": )" +
                                     std::to_string(i) + "}}");
    });
  for (auto& c : clients) c.join();
  int created = 0;
  for (const auto& r : made) {
    if (r.status == 200) {
      ++created;
      continue;
    }
    EXPECT_EQ(r.status, 409) << r.body;
    EXPECT_EQ(detail_of(r), "Thread " + id + " already exists");
  }
  EXPECT_EQ(created, 1);
}

// Runs enqueued on a thread start as the ones before them end: five short runs end within
// seconds (on PostgreSQL each used to wait about a lease, 10 s, after the one before it).
TEST_P(RunsApi, LangGraphEnqueuedRunsStartWhenTheRunsBeforeThemEnd) {
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  const auto began = std::chrono::steady_clock::now();
  std::vector<std::string> runs;
  for (int i = 0; i < 5; ++i) {
    auto r = post("/threads/" + t + "/runs",
                  R"({"assistant_id": "slow", "input": {"left": 1, "ms": 200},
                      "multitask_strategy": "enqueue"})");
    ASSERT_EQ(r.status, 200) << r.body;
    runs.emplace_back(object_of(r.body)["run_id"].as_string());
  }
  auto joined = get("/threads/" + t + "/runs/" + runs.back() + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - began)
                        .count();
  EXPECT_EQ(object_of(joined.body)["n"], 5);  // each run counted once, the last after the others
  for (const auto& run : runs)
    EXPECT_EQ(object_of(get("/threads/" + t + "/runs/" + run).body)["status"], "success") << run;
  RecordProperty("five_enqueued_runs_ms", std::to_string(took));
  EXPECT_LT(took, 15000) << "five enqueued runs of 0.2 s took " << took << " ms";
}

// after_seconds: the run is queued at once (pending, its thread busy, counted against
// --max-queued-runs) and starts no earlier than that; a cancel ends it before it starts.
TEST_P(RunsApi, LangGraphAfterSecondsQueuesTheRunAndStartsItLater) {
  start(8, 2);
  auto thread = [&] {
    return std::string(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  };
  const std::string t = thread();
  auto soon =
      post("/threads/" + t + "/runs",
           R"({"assistant_id": "slow", "input": {"left": 1, "ms": 1}, "after_seconds": 1})");
  ASSERT_EQ(soon.status, 200) << soon.body;
  EXPECT_EQ(object_of(soon.body)["status"], "pending");
  const std::string run(object_of(soon.body)["run_id"].as_string());
  auto joined = get("/threads/" + t + "/runs/" + run + "/join");
  ASSERT_EQ(joined.status, 200) << joined.body;
  EXPECT_EQ(object_of(joined.body)["n"], 1);
  auto rec = object_of(get("/v1/runs/" + run).body);
  ASSERT_TRUE(rec["started_at_ms"].is_int64()) << json::serialize(rec);
  EXPECT_GE(rec["started_at_ms"].as_int64() - rec["created_at_ms"].as_int64(), 1000)
      << json::serialize(rec);

  // A run enqueued behind a delayed one does not pass it: it starts after that delay too.
  const std::string w = thread();
  auto first =
      post("/threads/" + w + "/runs",
           R"({"assistant_id": "slow", "input": {"left": 1, "ms": 1}, "after_seconds": 1})");
  ASSERT_EQ(first.status, 200) << first.body;
  auto behind = post("/threads/" + w + "/runs",
                     R"({"assistant_id": "slow", "input": {"left": 1, "ms": 1},
                         "multitask_strategy": "enqueue"})");
  ASSERT_EQ(behind.status, 200) << behind.body;
  const std::string first_id(object_of(first.body)["run_id"].as_string());
  const std::string behind_id(object_of(behind.body)["run_id"].as_string());
  ASSERT_EQ(get("/threads/" + w + "/runs/" + behind_id + "/join").status, 200);
  ASSERT_EQ(get("/threads/" + w + "/runs/" + first_id + "/join").status, 200);
  auto f = object_of(get("/v1/runs/" + first_id).body),
       b = object_of(get("/v1/runs/" + behind_id).body);
  EXPECT_EQ(f["state"], "succeeded");
  EXPECT_EQ(b["state"], "succeeded");
  ASSERT_TRUE(b["started_at_ms"].is_int64()) << json::serialize(b);
  EXPECT_GE(b["started_at_ms"].as_int64() - f["created_at_ms"].as_int64(), 1000)
      << json::serialize(b);
  EXPECT_EQ(object_of(get("/threads/" + w + "/state").body)["values"].at("n"), 2);

  // A day away: pending, holding its thread, and one of the two the queue takes.
  const std::string u = thread(), v = thread();
  const std::string kLater = R"({"assistant_id": "slow", "after_seconds": 86400})";
  auto far = post("/threads/" + u + "/runs", kLater);
  ASSERT_EQ(far.status, 200) << far.body;
  const std::string far_id(object_of(far.body)["run_id"].as_string());
  EXPECT_EQ(object_of(get("/threads/" + u).body)["status"], "busy");
  auto second = post("/threads/" + u + "/runs/wait", R"({"assistant_id": "slow"})");
  EXPECT_EQ(second.status, 409);
  EXPECT_EQ(detail_of(second),
            "thread '" + u + "' has a run in progress (" + far_id + "); wait for it to end");
  ASSERT_EQ(post("/threads/" + v + "/runs", kLater).status, 200);
  auto full = post("/runs", kLater);
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_NE(detail_of(full).find("the run queue is full"), std::string::npos) << full.body;

  // Cancelled before it started: it never runs, and its thread takes the next run at once.
  EXPECT_EQ(post("/threads/" + u + "/runs/" + far_id + "/cancel?wait=1", "").status, 204);
  auto gone = object_of(get("/threads/" + u + "/runs/" + far_id).body);
  EXPECT_EQ(gone["status"], "interrupted");
  EXPECT_TRUE(object_of(get("/v1/runs/" + far_id).body)["started_at_ms"].is_null());
  EXPECT_EQ(object_of(get("/threads/" + u).body)["status"], "idle");
  auto next = post("/threads/" + u + "/runs/wait", R"({"assistant_id": "slow"})");
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(object_of(next.body)["n"], 1);
}

// The head and the JSON body of a request the test server received.
inline std::pair<std::string, json::object> hook_request(const std::string& raw) {
  const auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return {raw, {}};
  return {raw.substr(0, end), object_of(raw.substr(end + 4))};
}

// A webhook is one POST a try: a receiver that closes the connection without answering gets the
// try again only after the backoff (a kept-alive connection is not reused for it, where the
// HTTP client's retry of a stale connection would POST the same try twice).
TEST_P(RunsApi, LangGraphWebhookTriesArePostedOnce) {
  weir::testing::TestServer hook([](int n, const std::string&) {
    weir::testing::Action a;
    if (n == 1) return weir::testing::reply(200, "{}");  // kept alive
    a.reset = true;                                      // read, then closed unanswered
    return a;
  });
  webhook_hosts_ = {"127.0.0.1"};
  start();
  const std::string url = "http://127.0.0.1:" + std::to_string(hook.port()) + "/hook";
  const std::string body =
      R"({"assistant_id": "slow", "input": {"left": 1, "ms": 1}, "webhook": ")" + url + R"("})";
  ASSERT_EQ(post("/runs/wait", body).status, 200);
  ASSERT_TRUE(eventually([&] { return hook.requests() >= 1; }));
  ASSERT_EQ(post("/runs/wait", body).status, 200);
  ASSERT_TRUE(eventually([&] { return hook.requests() >= 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the backoff is 1 s
  EXPECT_EQ(hook.requests(), 2) << "the first try of the second webhook was POSTed twice";
}

// webhook: POSTed the run when it ends (retried after a 5xx), a cancelled one too; a receiver
// that hangs holds neither the run nor the server; a host --webhook-hosts does not name is a 422.
TEST_P(RunsApi, LangGraphWebhookIsPostedWhenTheRunEnds) {
  weir::testing::TestServer hook(
      [](int n, const std::string&) { return weir::testing::reply(n == 1 ? 500 : 200, "{}"); });
  weir::testing::TestServer hung([](int, const std::string&) {
    weir::testing::Action a;
    a.hang = true;
    return a;
  });
  webhook_hosts_ = {"127.0.0.1"};
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  const std::string url = "http://127.0.0.1:" + std::to_string(hook.port()) + "/hook?from=weir";
  auto done = post("/threads/" + t + "/runs/wait",
                   R"({"assistant_id": "slow", "input": {"left": 1, "ms": 1},
                       "metadata": {"who": "suite"}, "webhook": ")" +
                       url + R"("})");
  ASSERT_EQ(done.status, 200) << done.body;
  const std::string loc(done.header("content-location"));
  const std::string run = loc.substr(loc.rfind('/') + 1);
  ASSERT_TRUE(eventually([&] { return hook.requests() >= 2; })) << hook.requests();
  for (const auto& raw : hook.received()) {  // the 500, then the same again after a pause
    auto [head, body] = hook_request(raw);
    EXPECT_EQ(head.rfind("POST /hook?from=weir HTTP/1.1\r\n", 0), 0u) << head;
    EXPECT_NE(head.find("Content-Type: application/json"), std::string::npos) << head;
    EXPECT_EQ(body["run_id"], run.c_str());
    EXPECT_EQ(body["thread_id"], t.c_str());
    EXPECT_EQ(body["status"], "success");
    EXPECT_EQ(json::serialize(body["metadata"]), R"({"who":"suite"})");
    EXPECT_EQ(body["values"].at("n"), 1) << json::serialize(body);
    for (const char* k : {"run_started_at", "run_ended_at", "webhook_sent_at", "created_at"})
      EXPECT_TRUE(body[k].is_string()) << k << ": " << json::serialize(body);
  }
  EXPECT_EQ(hook.requests(), 2);

  // A run cancelled before it started: its webhook says so, with no values.
  auto far = post("/threads/" + t + "/runs",
                  R"({"assistant_id": "slow", "after_seconds": 600, "webhook": ")" + url + R"("})");
  ASSERT_EQ(far.status, 200) << far.body;
  const std::string far_id(object_of(far.body)["run_id"].as_string());
  EXPECT_EQ(post("/threads/" + t + "/runs/" + far_id + "/cancel?wait=1", "").status, 204);
  ASSERT_TRUE(eventually([&] { return hook.requests() >= 3; }));
  auto [head, cancelled] = hook_request(hook.received().back());
  EXPECT_EQ(cancelled["run_id"], far_id.c_str());
  EXPECT_EQ(cancelled["status"], "interrupted");
  EXPECT_TRUE(cancelled["values"].is_null());
  EXPECT_TRUE(cancelled["run_started_at"].is_null());

  // A receiver that never answers: the run ends, the server goes on serving.
  const std::string stuck = "http://127.0.0.1:" + std::to_string(hung.port()) + "/";
  auto quick = post(
      "/threads/" + t + "/runs/wait",
      R"({"assistant_id": "slow", "input": {"left": 1, "ms": 1}, "webhook": ")" + stuck + R"("})");
  ASSERT_EQ(quick.status, 200) << quick.body;
  ASSERT_TRUE(eventually([&] { return hung.requests() >= 1; }));
  EXPECT_EQ(get("/ok").status, 200);
  auto after = post("/threads/" + t + "/runs/wait", R"({"assistant_id": "slow"})");
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(hung.requests(), 1);  // still waiting for its answer

  // Only the hosts of --webhook-hosts.
  auto other =
      post("/threads/" + t + "/runs", R"({"assistant_id": "slow", "webhook": "http://localhost:)" +
                                          std::to_string(hook.port()) + R"(/hook"})");
  EXPECT_EQ(other.status, 422);
  EXPECT_EQ(detail_of(other), "'webhook': host 'localhost:" + std::to_string(hook.port()) +
                                  "' is not one this server may call (--webhook-hosts "
                                  "127.0.0.1)");
}

}  // namespace weir::serve::runs_suite
