// What a run's input does on a thread: it is applied once however often the run is continued
// (after a failed node, a crash, or a repeated resume), the steps it adds are numbered after the
// thread's, a workflow's "input" list bounds the channels it may set, and a value over the
// inline limit goes to the artifact store like any value a node writes.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/runtime/artifact_store.hpp"

namespace weir::graph {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using testing::resume;
using testing::run;

// Channels under every reducer an input can meet. `add` runs `rounds` times (a loop through
// `check`); the node fails once, at the visit `*fail_at` names (0: never), as a node whose
// tool was down would, leaving the thread unfinished.
std::shared_ptr<const CompiledGraph> reducers_graph(std::shared_ptr<int> fail_at) {
  StateGraph b;
  b.add_channel("total", {.reducer = ReducerKind::sum, .default_value = json::value(0)});
  b.add_channel("log", {.reducer = ReducerKind::append});
  b.add_channel("best", {.reducer = ReducerKind::max, .default_value = json::value(0)});
  b.add_channel("tags", {.reducer = ReducerKind::merge});
  b.add_channel("last", {});
  b.add_channel("rounds", {.reducer = ReducerKind::sum, .default_value = json::value(0)});
  auto visits = std::make_shared<int>(0);
  b.add_node("add", [fail_at, visits](const StateView& s, NodeContext&) -> Result<Update> {
    if (++*visits == *fail_at) {
      *fail_at = 0;
      return Error(Errc::tool_failed, "the tool is down");
    }
    return Update()
        .set("total", 1)
        .set("log", json::array{"add"})
        .set("last", s.get("rounds"))
        .set("rounds", -1);
  });
  b.add_node("check", [](const StateView&, NodeContext&) -> Result<Update> { return Update(); });
  b.add_edge("START", "add").add_edge("add", "check");
  b.add_conditional_edges("check",
                          [](const StateView& s) -> std::vector<std::string> {
                            return {s.get("rounds").as_int64() > 0 ? "add" : "END"};
                          },
                          {"add", "END"});
  return *b.compile({.recursion_limit = 100});
}

json::object the_input() {
  return json::object{{"total", 5000},   {"log", json::array{"in"}},
                      {"best", 7},       {"tags", json::object{{"k", "v"}}},
                      {"last", "given"}, {"rounds", 4}};
}

// Every checkpoint of the thread, oldest first.
std::vector<Checkpoint> history(const Checkpointer& cp, const std::string& thread) {
  auto l = cp.list(thread, 1000);
  EXPECT_TRUE(l) << l.error().message;
  std::vector<Checkpoint> out(l->rbegin(), l->rend());
  return out;
}

void expect_steps_increase(const std::vector<Checkpoint>& h) {
  for (std::size_t i = 1; i < h.size(); ++i)
    EXPECT_LT(h[i - 1].step, h[i].step)
        << "checkpoint " << i << " repeats or goes back to step " << h[i].step;
}

// The same input given again to a run that stopped unfinished continues it without applying
// the input a second time: the end state is an uninterrupted run's, under every reducer, and
// however many times it stopped.
TEST(RunInput, ContinuingAnUnfinishedRunDoesNotApplyItsInputAgain) {
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto straight = run(rt, reducers_graph(std::make_shared<int>(0)), the_input(),
                      {.checkpointer = cp.get(), .thread_id = "straight"});
  ASSERT_TRUE(straight) << straight.error().message;
  EXPECT_EQ(json::serialize(straight->state),
            R"({"total":5004,"log":["in","add","add","add","add"],"best":7,"tags":{"k":"v"},)"
            R"("last":1,"rounds":0})");

  // Fails at its 2nd visit, then (a fresh graph, as in a new process) at its 2nd visit again.
  auto first = run(rt, reducers_graph(std::make_shared<int>(2)), the_input(),
                   {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().message, "node 'add': the tool is down");
  auto second = run(rt, reducers_graph(std::make_shared<int>(2)), the_input(),
                    {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_FALSE(second);
  auto third = run(rt, reducers_graph(std::make_shared<int>(0)), the_input(),
                   {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_TRUE(third->resumed);
  EXPECT_EQ(json::serialize(third->state), json::serialize(straight->state));
  const auto h = history(*cp, "t");
  expect_steps_increase(h);
  EXPECT_EQ(h.size(), history(*cp, "straight").size());
}

// A finished thread's next run applies its input on top (a chat's next turn), and its steps are
// numbered after the thread's: the input's step is a step of its own.
TEST(RunInput, ANewRunOnAFinishedThreadNumbersItsStepsAfterTheThreads) {
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto g = reducers_graph(std::make_shared<int>(0));
  ASSERT_TRUE(run(rt, g, the_input(), {.checkpointer = cp.get(), .thread_id = "t"}));
  auto next = run(rt, g, json::object{{"total", 1}, {"rounds", 1}},
                  {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->state.at("total"), 5006);  // 5004 + 1 given + 1 added
  expect_steps_increase(history(*cp, "t"));
}

// A different input given to an unfinished run is a new request: it is applied (once), and the
// pending nodes run on.
TEST(RunInput, ADifferentInputOnAnUnfinishedThreadIsAppliedOnce) {
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  ASSERT_FALSE(run(rt, reducers_graph(std::make_shared<int>(2)), the_input(),
                   {.checkpointer = cp.get(), .thread_id = "t"}));
  auto other = run(rt, reducers_graph(std::make_shared<int>(0)), json::object{{"total", 100}},
                   {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->state.at("total"), 5104);
  expect_steps_increase(history(*cp, "t"));
}

// `weir resume` repeated after the resumed run stopped past its interrupt continues it; the
// node that interrupted does not see the value twice.
TEST(RunInput, ARepeatedResumeContinuesTheRunItStarted) {
  auto fail_after = std::make_shared<bool>(true);
  auto build = [&] {
    StateGraph b;
    b.add_channel("verdict", {});
    b.add_channel("count", {.reducer = ReducerKind::sum, .default_value = json::value(0)});
    b.add_node("ask", [](const StateView&, NodeContext& c) -> Result<Update> {
      if (const json::value* v = c.resume_value())
        return Update().set("verdict", *v).set("count", 1);
      return c.interrupt("ok?");
    });
    b.add_node("after", [fail_after](const StateView&, NodeContext&) -> Result<Update> {
      if (*fail_after) {
        *fail_after = false;
        return Error(Errc::tool_failed, "the tool is down");
      }
      return Update().set("count", 10);
    });
    b.add_edge("START", "ask").add_edge("ask", "after").add_edge("after", "END");
    return *b.compile();
  };
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto g = build();
  auto paused = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(paused && paused->interrupted);
  auto failed = resume(rt, g, "t", "yes", {.checkpointer = cp.get()});
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "node 'after': the tool is down");
  auto again = resume(rt, g, "t", "yes", {.checkpointer = cp.get()});
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(json::serialize(again->state), R"({"verdict":"yes","count":11})");
  // Another value is not this run's: the thread is not interrupted any more.
  auto other = resume(rt, g, "t", "no", {.checkpointer = cp.get()});
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().to_string(),
            "invalid_argument: thread 't' is not interrupted (its last run finished)");
  expect_steps_increase(history(*cp, "t"));
}

// The checkpoint that records an interrupt is numbered as the step it paused (it repeated the
// step before it), and the resumed step comes after it.
TEST(RunInput, AnInterruptedThreadNeverRepeatsAStepNumber) {
  StateGraph b;
  b.add_channel("draft", {});
  b.add_channel("verdict", {});
  b.add_node("write", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("draft", "d");
  });
  b.add_node("ask", [](const StateView&, NodeContext& c) -> Result<Update> {
    if (const json::value* v = c.resume_value()) return Update().set("verdict", *v);
    return c.interrupt("ok?");
  });
  b.add_edge("START", "write").add_edge("write", "ask").add_edge("ask", "END");
  auto g = *b.compile();
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto paused =
      run(rt, g, json::object{{"draft", "x"}}, {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(paused && paused->interrupted);
  auto done = resume(rt, g, "t", "yes", {.checkpointer = cp.get()});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->state.at("verdict"), "yes");
  expect_steps_increase(history(*cp, "t"));
}

const char* kIoWorkflow = R"({"name": "io",
  "state": {"topic": {}, "n": {"default": 1}, "scratch": {}},
  "input": ["topic"], "output": ["n", "topic"],
  "nodes": {"a": {"kind": "set", "values": {"n": {"$expr": "n + 1"}, "scratch": "x"}}},
  "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})";

// The workflow's "input" list bounds what any caller of the graph may set: the check is the
// executor's, so the CLI, the runs API, MCP and a C++ caller get the same answer.
TEST(RunInput, AWorkflowsInputListIsCheckedByTheExecutor) {
  auto load = load_workflow_text(kIoWorkflow, fs::temp_directory_path() / "io.json");
  ASSERT_TRUE(load.ok()) << load.report();
  auto built = build_workflow_graph(*load.spec);
  ASSERT_TRUE(built) << built.error().message;
  GraphRuntime rt;
  auto bad = run(rt, built->graph, json::object{{"topic", "t"}, {"scratch", 1}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().to_string(),
            "invalid_argument: the input sets 'scratch', which io does not take as input (its "
            "\"input\": topic)");
  EXPECT_EQ(check_input_channels(load.spec->input, "io", json::object{{"n", 2}}, "--input")
                .error()
                .message,
            "--input sets 'n', which io does not take as input (its \"input\": topic)");
  EXPECT_TRUE(check_input_channels(load.spec->input, "io", json::object{{"topic", 2}}, "--input"));
  EXPECT_TRUE(check_input_channels({}, "any", json::object{{"x", 2}}, "--input"));
  auto ok = run(rt, built->graph, json::object{{"topic", "t"}});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->state.at("n"), 2);
}

// An input value over the inline limit is stored as an artifact and the state (and the input's
// checkpoint) holds its reference, as for a node's large write.
TEST(RunInput, AnInputOverTheInlineLimitGoesToTheArtifactStore) {
  const fs::path dir = fs::temp_directory_path() / ("weir_run_input_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto store = ArtifactStore::open({dir, 1 << 20, 16 << 20, 200, nullptr});
  ASSERT_TRUE(store) << store.error().message;
  StateGraph b;
  b.add_channel("doc", {});
  b.add_channel("size", {});
  b.add_node("measure", [](const StateView& s, NodeContext& c) -> Result<Update> {
    auto text = c.fetch(s.get("doc"));
    if (!text) return text.error();
    return Update().set("size", static_cast<std::int64_t>(text->size()));
  });
  b.add_edge("START", "measure").add_edge("measure", "END");
  auto g = *b.compile({.inline_limit = 1024});
  GraphRuntime rt({.artifacts = store->get()});
  auto cp = make_memory_checkpointer();
  auto r = run(rt, g, json::object{{"doc", std::string(5000, 'x')}},
               {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("size"), 5000);
  ASSERT_TRUE(ArtifactRef::from_json(r->state.at("doc"))) << json::serialize(r->state.at("doc"));
  EXPECT_EQ(r->offloaded, 1u);
  const auto h = history(*cp, "t");
  ASSERT_FALSE(h.empty());
  EXPECT_TRUE(ArtifactRef::from_json(h.front().writes.at("doc")));
  store->reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weir::graph
