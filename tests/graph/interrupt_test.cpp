// Human in the loop: NodeContext::interrupt, the "interrupted" checkpoint, async_resume.
#include <filesystem>
#include <map>
#include <set>

#include <unistd.h>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph {
namespace {

namespace json = boost::json;
using testing::resume;
using testing::run;

// draft -> {approve, notify} -> publish. approve asks a human (interrupt) unless resumed;
// notify runs in the same superstep, so its write is discarded and it runs again on resume.
std::shared_ptr<const CompiledGraph> approval_graph(std::shared_ptr<int> notify_runs) {
  StateGraph b;
  b.add_channel("draft", {});
  b.add_channel("approved", {});
  b.add_channel("published", {.default_value = false});
  b.add_channel("log", {.reducer = ReducerKind::append});
  b.add_node("draft", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("draft", "weir 1.0 is out").set("log", "drafted");
  });
  b.add_node("approve", [](const StateView& s, NodeContext& c) -> Result<Update> {
    if (const json::value* answer = c.resume_value())
      return Update().set("approved", *answer).set("log", "approved");
    return c.interrupt(json::object{{"question", "publish this?"}, {"draft", s.get("draft")}});
  });
  b.add_node("notify", [notify_runs](const StateView&, NodeContext&) -> Result<Update> {
    ++*notify_runs;
    return Update().set("log", "notified");
  });
  b.add_node("publish", [](const StateView& s, NodeContext& c) -> Result<Update> {
    EXPECT_EQ(c.resume_value(), nullptr);  // only the interrupted node, only its step
    return Update().set("published", s.get("approved") == "yes");
  });
  b.add_edge("START", "draft").add_edge("draft", "approve").add_edge("draft", "notify");
  b.add_edge("approve", "publish").add_edge("notify", "publish").add_edge("publish", "END");
  return *b.compile();
}

std::filesystem::path temp_db(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("weir_" + name + "_" + std::to_string(::getpid()) + ".sqlite");
  std::filesystem::remove(p);
  return p;
}

// The run stops at approve; a new runtime with a new SQLite connection (a restarted process)
// resumes it with the human's answer and runs to the end.
TEST(Interrupt, ResumeWithAValueAfterARestartWithSqlite) {
  const auto db = temp_db("interrupt");
  auto notify_runs = std::make_shared<int>(0);
  auto g = approval_graph(notify_runs);
  {
    auto cp = open_sqlite_checkpointer(db);
    ASSERT_TRUE(cp) << cp.error().message;
    GraphRuntime rt;
    auto r = run(rt, g, {}, {.checkpointer = cp->get(), .thread_id = "t1"});
    ASSERT_TRUE(r) << r.error().message;  // an interrupt is not an error
    EXPECT_TRUE(r->interrupted);
    EXPECT_EQ(r->interrupted_node, "approve");
    EXPECT_EQ(json::serialize(r->interrupt_payload),
              R"({"question":"publish this?","draft":"weir 1.0 is out"})");
    EXPECT_EQ(r->steps, 1);
    EXPECT_EQ(json::serialize(r->state.at("log")), R"(["drafted"])");  // notify's write dropped
    EXPECT_TRUE(r->state.at("approved").is_null());
    auto list = (*cp)->list("t1");
    ASSERT_TRUE(list);
    ASSERT_FALSE(list->empty());
    const Checkpoint& last = list->front();
    EXPECT_EQ(last.checkpoint_id, r->checkpoint_id);
    EXPECT_EQ(json::serialize(last.pending.at("status")), R"("interrupted")");
    EXPECT_EQ(json::serialize(last.pending.at("next")), R"(["approve","notify"])");
    EXPECT_EQ(json::serialize(last.pending.at("interrupt").at("node")), R"("approve")");
    EXPECT_TRUE(last.writes.empty());
  }
  EXPECT_EQ(*notify_runs, 1);
  auto cp = open_sqlite_checkpointer(db);
  ASSERT_TRUE(cp) << cp.error().message;
  GraphRuntime rt;
  auto r = resume(rt, g, "t1", "yes", {.checkpointer = cp->get()});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->interrupted);
  EXPECT_TRUE(r->resumed);
  EXPECT_EQ(r->steps, 2);  // the re-run step and publish
  EXPECT_EQ(r->state.at("approved"), "yes");
  EXPECT_EQ(r->state.at("published"), true);
  EXPECT_EQ(json::serialize(r->state.at("log")), R"(["drafted","approved","notified"])");
  EXPECT_EQ(*notify_runs, 2);
  auto latest = (*cp)->latest("t1");
  ASSERT_TRUE(latest && *latest);
  EXPECT_EQ(json::serialize((*latest)->pending.at("status")), R"("done")");
  std::filesystem::remove(db);
}

// Two nodes of one step both ask (found by the breaking pass: each resume answered one, threw
// its write away with the step and the other asked again, forever). Each answer is kept for its
// task while the step is asked again; the step ends once every question has its answer.
TEST(Interrupt, TwoNodesThatAskInOneStepEachGetTheirOwnAnswer) {
  StateGraph b;
  b.add_channel("answers", {.reducer = ReducerKind::append});
  auto ask = [](const StateView&, NodeContext& c) -> Result<Update> {
    if (const json::value* a = c.resume_value())
      return Update().set("answers",
                          json::string(std::string(c.node()) + "=" + json::serialize(*a)));
    return c.interrupt(json::string(c.node()));
  };
  b.add_node("ask_a", ask);
  b.add_node("ask_b", ask);
  b.add_edge("START", "ask_a").add_edge("START", "ask_b");
  b.add_edge("ask_a", "END").add_edge("ask_b", "END");
  auto g = b.compile();
  ASSERT_TRUE(g) << g.error().message;
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto r = run(rt, *g, {}, {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(r && r->interrupted) << (r ? "" : r.error().message);
  const std::string first = r->interrupted_node;
  EXPECT_EQ(r->interrupt_payload, json::string(first));
  r = resume(rt, *g, "t", "1", {.checkpointer = cp.get()});
  ASSERT_TRUE(r && r->interrupted) << (r ? "" : r.error().message);
  const std::string second = r->interrupted_node;
  EXPECT_NE(second, first);
  EXPECT_EQ(r->interrupt_payload, json::string(second));
  r = resume(rt, *g, "t", "2", {.checkpointer = cp.get()});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->interrupted);
  std::set<std::string> got;
  for (const auto& a : r->state.at("answers").as_array()) got.insert(std::string(a.as_string()));
  EXPECT_EQ(got, (std::set<std::string>{first + "=\"1\"", second + "=\"2\""}));
}

// A node Sent three items asks about each (found by the breaking pass: one answer went to all
// three, and items b and c were never asked). Each Send task is asked and answered in turn.
TEST(Interrupt, EachSendTaskOfANodeIsAskedAndAnsweredOnItsOwn) {
  StateGraph b;
  b.add_channel("items", {});
  b.add_channel("answers", {.reducer = ReducerKind::append});
  b.add_node("map", [](const StateView& s, NodeContext&) -> Result<Update> {
    Update u;
    for (const auto& it : s.get("items").as_array()) u.sends.push_back({"ask", it});
    return u;
  });
  b.add_node("ask", [](const StateView&, NodeContext& c) -> Result<Update> {
    const std::string item(c.input().as_string());
    if (const json::value* a = c.resume_value())
      return Update().set("answers", json::string(item + "=" + std::string(a->as_string())));
    return c.interrupt(json::object{{"approve", item}});
  });
  b.add_edge("START", "map");
  b.add_sends("map", {"ask"});
  b.add_edge("ask", "END");
  auto g = b.compile();
  ASSERT_TRUE(g) << g.error().message;
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto r = run(rt, *g, {{"items", json::array{"a", "b", "c"}}},
               {.checkpointer = cp.get(), .thread_id = "t"});
  for (const char* item : {"a", "b", "c"}) {
    ASSERT_TRUE(r && r->interrupted) << item << ": " << (r ? "finished" : r.error().message);
    EXPECT_EQ(json::serialize(r->interrupt_payload), std::string(R"({"approve":")") + item + "\"}");
    r = resume(rt, *g, "t", json::string(std::string("yes-for-") + item),
               {.checkpointer = cp.get()});
  }
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->interrupted);
  EXPECT_EQ(json::serialize(r->state.at("answers")),
            R"(["a=yes-for-a","b=yes-for-b","c=yes-for-c"])");
}

// A node that fails in the step where others ask: the run fails at once, whatever the order of
// the nodes (it asked every question first when the failing node came between the askers; found
// by the second breaking pass).
TEST(Interrupt, AFailureInTheStepGoesBeforeItsQuestions) {
  for (const char* middle : {"bad", "qa"}) {
    StateGraph b;
    b.add_channel("answers", {.reducer = ReducerKind::append});
    auto ask = [](const StateView&, NodeContext& c) -> Result<Update> {
      if (const json::value* a = c.resume_value()) return Update().set("answers", *a);
      return c.interrupt(json::string(c.node()));
    };
    const std::string first = std::string(middle) == "bad" ? "qa" : "bad";
    for (const std::string name : {first, std::string(middle), std::string("qb")}) {
      if (name == "bad")
        b.add_node(name, [](const StateView&, NodeContext&) -> Result<Update> {
          return Error(Errc::tool_failed, "division by zero");
        });
      else
        b.add_node(name, ask);
      b.add_edge("START", name).add_edge(name, "END");
    }
    auto g = b.compile();
    ASSERT_TRUE(g) << g.error().message;
    auto cp = make_memory_checkpointer();
    GraphRuntime rt;
    auto r = run(rt, *g, {}, {.checkpointer = cp.get(), .thread_id = "t"});
    ASSERT_FALSE(r) << middle << ": " << (r->interrupted ? "interrupted" : "finished");
    EXPECT_EQ(r.error().to_string(), "tool_failed: node 'bad': division by zero");
  }
}

TEST(Interrupt, ResumeAndInvokeRefuseThreadsInTheWrongState) {
  auto notify_runs = std::make_shared<int>(0);
  auto g = approval_graph(notify_runs);
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;

  auto none = resume(rt, g, "nope", "yes", {.checkpointer = cp.get()});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().to_string(), "not_found: thread 'nope' has no checkpoint to resume");

  auto no_cp = resume(rt, g, "t1", "yes", {});
  ASSERT_FALSE(no_cp);
  EXPECT_EQ(no_cp.error().to_string(),
            "unsupported: async_resume of thread 't1' needs a checkpointer: set "
            "RunOptions.checkpointer");

  auto first = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t1"});
  ASSERT_TRUE(first && first->interrupted);
  auto again = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t1"});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().to_string(),
            "invalid_argument: thread 't1' is interrupted at node 'approve'; call async_resume "
            "with a value to continue it");

  auto done = resume(rt, g, "t1", "no", {.checkpointer = cp.get()});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->state.at("published"), false);
  auto twice = resume(rt, g, "t1", "yes", {.checkpointer = cp.get()});
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().to_string(),
            "invalid_argument: thread 't1' is not interrupted (its last run finished)");
}

TEST(Interrupt, WithoutACheckpointerTheRunFailsClearly) {
  auto g = approval_graph(std::make_shared<int>(0));
  GraphRuntime rt;
  auto r = run(rt, g, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "unsupported: node 'approve' called interrupt(), which needs a checkpoint to resume "
            "from: set RunOptions.checkpointer and RunOptions.thread_id");
}

// The stream ends with run_interrupted naming the node and carrying the payload.
TEST(Interrupt, StreamEndsWithRunInterrupted) {
  auto g = approval_graph(std::make_shared<int>(0));
  auto cp = make_memory_checkpointer();
  auto events = std::make_shared<EventStream>();
  std::optional<Event> last;
  auto consumer = [&]() -> boost::asio::awaitable<void> {
    while (auto e = co_await events->async_next()) last = std::move(e);
  };
  GraphRuntime rt;
  auto r = testing::run_with(
      rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t9", .events = events}, consumer);
  ASSERT_TRUE(r && r->interrupted);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->kind, EventKind::run_interrupted);
  EXPECT_EQ(last->node, "approve");
  EXPECT_EQ(last->step, 2);
  EXPECT_EQ(json::serialize(last->data),
            R"({"payload":{"question":"publish this?","draft":"weir 1.0 is out"}})");
}

// a -> b -> c, each appending its name to "log" and counting its runs; b asks a human when
// `b_asks` (interrupt() unless it has a resume value, which it writes to "answer").
std::shared_ptr<const CompiledGraph> line_graph(std::shared_ptr<std::map<std::string, int>> runs,
                                                bool b_asks = false) {
  StateGraph b;
  b.add_channel("log", {.reducer = ReducerKind::append});
  b.add_channel("answer", {});
  for (const char* name : {"a", "b", "c"}) {
    const std::string n = name;
    b.add_node(n, [runs, n, b_asks](const StateView&, NodeContext& c) -> Result<Update> {
      ++(*runs)[n];
      if (n != "b") {
        EXPECT_EQ(c.resume_value(), nullptr) << n;
        return Update().set("log", json::value(n));
      }
      if (const json::value* v = c.resume_value())
        return Update().set("answer", *v).set("log", json::value(n));
      if (b_asks) return c.interrupt("b asks");
      return Update().set("log", json::value(n));
    });
  }
  b.add_edge("START", "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", "END");
  return *b.compile();
}

// interrupt_before stops the run before the step that would run the node: an interrupted
// checkpoint naming it, no payload, the node not run; a resume runs that step without handing
// the value to anyone and without stopping at the same breakpoint again.
TEST(Breakpoints, InterruptBeforeStopsAndAResumeRunsTheStep) {
  auto runs = std::make_shared<std::map<std::string, int>>();
  auto g = line_graph(runs);
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  RunOptions o{.checkpointer = cp.get(), .thread_id = "t"};
  o.interrupt_before = {"b"};
  auto r = run(rt, g, {}, o);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->interrupted);
  EXPECT_EQ(r->breakpoint, "before");
  EXPECT_EQ(r->interrupted_node, "b");
  EXPECT_TRUE(r->interrupt_payload.is_null());
  EXPECT_EQ(json::serialize(r->state.at("log")), R"(["a"])");
  EXPECT_EQ((*runs)["b"], 0);
  auto latest = cp->latest("t");
  ASSERT_TRUE(latest && *latest);
  EXPECT_EQ(json::serialize((*latest)->pending.at("status")), R"("interrupted")");
  EXPECT_EQ(json::serialize((*latest)->pending.at("next")), R"(["b"])");
  EXPECT_EQ(json::serialize((*latest)->pending.at("interrupt")),
            R"({"node":"b","payload":null,"breakpoint":"before"})");
  RunOptions again{.checkpointer = cp.get()};
  again.interrupt_before = {"b"};
  auto done = resume(rt, g, "t", "ignored", again);
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_FALSE(done->interrupted);
  EXPECT_EQ(json::serialize(done->state.at("log")), R"(["a","b","c"])");
  EXPECT_TRUE(done->state.at("answer").is_null());  // b was not handed the value
  EXPECT_EQ((*runs)["b"], 1);
}

// "*" stops before every step; interrupt_after stops after a step that ran the node, before the
// next one (and not when the run ends there).
TEST(Breakpoints, EveryNodeAndAfterANode) {
  auto runs = std::make_shared<std::map<std::string, int>>();
  auto g = line_graph(runs);
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  RunOptions o{.checkpointer = cp.get(), .thread_id = "all"};
  o.interrupt_before = {"*"};
  auto r = run(rt, g, {}, o);
  std::vector<std::string> stops;
  while (r && r->interrupted) {
    stops.push_back(r->interrupted_node);
    RunOptions next{.checkpointer = cp.get()};
    next.interrupt_before = {"*"};
    r = resume(rt, g, "all", nullptr, next);
  }
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(stops, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(json::serialize(r->state.at("log")), R"(["a","b","c"])");

  RunOptions after{.checkpointer = cp.get(), .thread_id = "after"};
  after.interrupt_after = {"a", "c"};
  auto first = run(rt, g, {}, after);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->interrupted);
  EXPECT_EQ(first->breakpoint, "after");
  EXPECT_EQ(first->interrupted_node, "b");  // the step that runs next
  EXPECT_EQ(json::serialize(first->state.at("log")), R"(["a"])");
  RunOptions go_on{.checkpointer = cp.get()};
  go_on.interrupt_after = {"a", "c"};
  auto end = resume(rt, g, "after", nullptr, go_on);
  ASSERT_TRUE(end) << end.error().message;
  EXPECT_FALSE(end->interrupted);  // c is the last step: nothing to stop before
  EXPECT_EQ(json::serialize(end->state.at("log")), R"(["a","b","c"])");
}

// go_to (LangGraph's command.goto): the run's first step runs the named nodes instead of
// START's targets, after the input is applied, with or without a thread; on a thread whose
// last run finished it is the next turn's first step. A node the graph lacks is refused before
// any node runs; a resume value with go_to is refused (resume first).
TEST(GoTo, TheFirstStepRunsTheNamedNodes) {
  auto runs = std::make_shared<std::map<std::string, int>>();
  auto g = line_graph(runs);
  GraphRuntime rt;
  RunOptions jump;
  jump.go_to = {"b"};
  auto r = run(rt, g, {{"answer", "given"}}, jump);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(json::serialize(r->state.at("log")), R"(["b","c"])");
  EXPECT_EQ(json::serialize(r->state.at("answer")), R"("given")");
  EXPECT_EQ((*runs)["a"], 0);

  auto cp = make_memory_checkpointer();
  ASSERT_TRUE(run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t"}));
  RunOptions turn{.checkpointer = cp.get(), .thread_id = "t"};
  turn.go_to = {"c"};
  auto next = run(rt, g, {}, turn);
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(json::serialize(next->state.at("log")), R"(["a","b","c","c"])");
  EXPECT_EQ((*runs)["a"], 1);
  // The jump is in the thread's checkpoints: the step before c names it next.
  auto history = cp->list("t", 2);
  ASSERT_TRUE(history && history->size() == 2u);
  EXPECT_EQ(json::serialize(history->at(1).pending.at("next")), R"(["c"])");

  RunOptions nope;
  nope.go_to = {"c", "nope"};
  auto bad = run(rt, g, {}, nope);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(Errc::invalid_argument));
  EXPECT_EQ(bad.error().message,
            "go_to names node 'nope', which the graph does not have (its nodes: a, b, c)");
  EXPECT_EQ((*runs)["c"], 3) << "nothing ran";

  auto asks = line_graph(runs, /*b_asks=*/true);
  ASSERT_TRUE(run(rt, asks, {}, {.checkpointer = cp.get(), .thread_id = "i"}));
  RunOptions both{.checkpointer = cp.get()};
  both.go_to = {"c"};
  auto refused = resume(rt, asks, "i", "yes", both);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(Errc::unsupported));
  EXPECT_EQ(refused.error().message,
            "go_to with a resume value: resume the interrupted thread, then go_to in a run of "
            "its own");
}

// A breakpoint before a node that itself asks a human: the breakpoint first, then the node's own
// interrupt, whose resume value the node gets.
TEST(Breakpoints, ABreakpointThenTheNodesOwnInterrupt) {
  auto runs = std::make_shared<std::map<std::string, int>>();
  auto g = line_graph(runs, true);
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  RunOptions o{.checkpointer = cp.get(), .thread_id = "t"};
  o.interrupt_before = {"b"};
  auto r = run(rt, g, {}, o);
  ASSERT_TRUE(r && r->interrupted);
  EXPECT_EQ(r->breakpoint, "before");
  auto asks = resume(rt, g, "t", nullptr, {.checkpointer = cp.get()});
  ASSERT_TRUE(asks) << asks.error().message;
  EXPECT_TRUE(asks->interrupted);
  EXPECT_EQ(asks->breakpoint, "");
  EXPECT_EQ(asks->interrupt_payload, "b asks");
  auto done = resume(rt, g, "t", "yes", {.checkpointer = cp.get()});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->state.at("answer"), "yes");
  EXPECT_EQ(json::serialize(done->state.at("log")), R"(["a","b","c"])");
}

TEST(Breakpoints, WithoutACheckpointerTheRunFailsClearly) {
  auto g = line_graph(std::make_shared<std::map<std::string, int>>());
  GraphRuntime rt;
  RunOptions o;
  o.interrupt_after = {"a"};
  auto r = run(rt, g, {}, o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "unsupported: interrupt_after (node 'b') needs a checkpoint to resume from: set "
            "RunOptions.checkpointer and RunOptions.thread_id");
}

// A run's own recursion_limit replaces the graph's, and its error says whose cap it was.
TEST(Breakpoints, ARunsRecursionLimitIsItsCap) {
  auto g = line_graph(std::make_shared<std::map<std::string, int>>());
  GraphRuntime rt;
  RunOptions o;
  o.recursion_limit = 2;
  auto r = run(rt, g, {}, o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "step_limit_exceeded: run stopped after 2 supersteps (the run's recursion_limit=2); "
            "nodes active in the last step: c; give the run a higher recursion_limit or add an "
            "exit condition");
  RunOptions enough;
  enough.recursion_limit = 3;
  auto ok = run(rt, g, {}, enough);
  ASSERT_TRUE(ok) << ok.error().message;
}

}  // namespace
}  // namespace weir::graph
