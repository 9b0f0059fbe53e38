#include "weir/graph/state_graph.hpp"

#include <atomic>
#include <filesystem>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/graph/checkpointer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/executor.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::graph {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

Result<RunResult> invoke(GraphRuntime& rt, std::shared_ptr<const CompiledGraph> g,
                         json::object input, RunOptions options = {}) {
  asio::io_context io;
  Result<RunResult> out = Error(Errc::cancelled, "not run");
  auto task = [&]() -> asio::awaitable<void> {
    out = co_await rt.async_invoke(g, std::move(input), std::move(options));
  };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  return out;
}

SyncNode inc(std::string ch) {
  return [ch](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set(ch, s.get(ch).to_number<std::int64_t>() + 1);
  };
}

TEST(StateGraph, ChainOfThreeNodes) {
  StateGraph b;
  b.add_channel("counter", {.default_value = 0});
  b.add_node("a", inc("counter")).add_node("b", inc("counter")).add_node("c", inc("counter"));
  b.add_edge("START", "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", "END");
  auto g = b.compile();
  ASSERT_TRUE(g) << g.error().message;
  GraphRuntime rt;
  auto r = invoke(rt, *g, {});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("counter").as_int64(), 3);
  EXPECT_EQ(r->steps, 3);
}

TEST(StateGraph, FanOutRunsInOneSuperstepAndReducersMerge) {
  StateGraph b;
  b.add_channel("items", {.reducer = ReducerKind::append});
  b.add_channel("count", {});
  std::vector<std::string> workers;
  for (int i = 0; i < 5; ++i) {
    std::string name = "w" + std::to_string(i);
    workers.push_back(name);
    b.add_node(name, [i](const StateView&, NodeContext&) -> Result<Update> {
      return Update().set("items", i);
    });
    b.add_edge("START", name).add_edge(name, "join");
  }
  b.add_node("join", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("count", static_cast<std::int64_t>(s.get("items").as_array().size()));
  });
  b.add_edge("join", "END");
  GraphRuntime rt;
  auto r = invoke(rt, *b.compile(), {});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(json::serialize(r->state.at("items")), "[0,1,2,3,4]");
  EXPECT_EQ(r->state.at("count").as_int64(), 5);
  EXPECT_EQ(r->steps, 2);
}

TEST(StateGraph, TwoWritesToALastValueChannelNameBothNodes) {
  StateGraph b;
  b.add_channel("x", {});
  b.add_node("left",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("x", 1); });
  b.add_node("right",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("x", 2); });
  b.add_edge("START", "left")
      .add_edge("START", "right")
      .add_edge("left", "END")
      .add_edge("right", "END");
  GraphRuntime rt;
  auto r = invoke(rt, *b.compile(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "conflicting_writes: nodes 'left' and 'right' both wrote channel 'x' in superstep 1; a "
            "last-value channel "
            "takes one write per step: give it a reducer (e.g. append) or write it from one node");
}

TEST(StateGraph, LoopsStopAtTheirCapsWithTypedErrors) {
  StateGraph b;
  b.add_channel("n", {.default_value = 0});
  b.add_node("tick", inc("n"));
  b.add_node("check", [](const StateView&, NodeContext&) -> Result<Update> { return Update(); });
  b.add_edge("START", "tick").add_edge("tick", "check");
  b.add_conditional_edges(
      "check", [](const StateView&) { return std::vector<std::string>{"tick"}; }, {"tick", "END"});
  auto g = b.compile({.recursion_limit = 10});
  ASSERT_TRUE(g);
  // One cycle: the strongly connected component {tick, check}, in definition order.
  ASSERT_EQ((*g)->cycles().size(), 1u);
  EXPECT_EQ((*g)->cycles()[0], (std::vector<std::string>{"tick", "check"}));
  GraphRuntime rt;
  auto r = invoke(rt, *g, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "step_limit_exceeded: run stopped after 10 supersteps (recursion_limit=10); nodes "
            "active in the last step: "
            "tick; raise limits.recursion_limit or add an exit condition");

  StateGraph v;
  v.add_channel("n", {.default_value = 0});
  v.add_node("tick", inc("n"), {.max_visits = 3});
  v.add_edge("START", "tick");
  v.add_conditional_edges("tick", [](const StateView&) { return std::vector<std::string>{"tick"}; },
                          {"tick", "END"});
  auto r2 = invoke(rt, *v.compile(), {});
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().to_string(),
            "visit_limit_exceeded: node 'tick' would run a 4th time (max_visits=3)");
}

TEST(StateGraph, CompileReportsEveryProblem) {
  StateGraph b;
  b.add_node("summarize", inc("x")).add_node("orphan", inc("x")).add_node("dead_end", inc("x"));
  b.add_edge("START", "summarize")
      .add_edge("summarize", "sumarize")
      .add_edge("summarize", "END")
      .add_edge("summarize", "dead_end");
  auto g = b.compile();
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().message,
            "edge from 'summarize' to 'sumarize': unknown node; did you mean 'summarize'?\n"
            "node 'orphan' is not reachable from START\n"
            "node 'dead_end' cannot reach END");
}

TEST(StateGraph, SendFansOutAndConditionalRoutesOnState) {
  StateGraph b;
  b.add_channel("todo", {});
  b.add_channel("squares", {.reducer = ReducerKind::append});
  b.add_channel("total", {.reducer = ReducerKind::sum, .default_value = 0});
  b.add_node("plan", [](const StateView& s, NodeContext&) -> Result<Update> {
    Update u;
    for (const auto& x : s.get("todo").as_array()) u.sends.push_back({"square", x});
    return u;
  });
  b.add_node("square", [](const StateView&, NodeContext& c) -> Result<Update> {
    auto v = c.input().as_int64();
    return Update().set("squares", v * v).set("total", v * v);
  });
  b.add_node("report", [](const StateView&, NodeContext&) -> Result<Update> { return Update(); });
  b.add_edge("START", "plan").add_edge("plan", "report").add_edge("report", "END");
  b.add_sends("plan", {"square"});
  GraphRuntime rt;
  auto r = invoke(rt, *b.compile(), {{"todo", json::array{1, 2, 3, 4}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("total").as_int64(), 30);
  EXPECT_EQ(r->state.at("squares").as_array().size(), 4u);
}

// A node writing 1 MB: state holds a reference, a later node reads a slice of it.
TEST(StateGraph, LargeValuesMoveToTheArtifactStore) {
  auto store = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  StateGraph b;
  b.add_channel("doc", {});
  b.add_channel("head", {});
  b.add_node("fetch", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("doc", json::string(std::string(1 << 20, 'x') + "tail"));
  });
  b.add_node("read", [](const StateView& s, NodeContext& c) -> Result<Update> {
    auto slice = c.fetch(s.get("doc"), (1 << 20) - 2, 6);
    if (!slice) return slice.error();
    return Update().set("head", json::string(*slice));
  });
  b.add_edge("START", "fetch").add_edge("fetch", "read").add_edge("read", "END");
  GraphRuntime rt({.artifacts = store.get()});
  auto r = invoke(rt, *b.compile(), {});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("head").as_string(), "xxtail");
  auto ref = ArtifactRef::from_json(r->state.at("doc"));
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->bytes, (1u << 20) + 4);
  EXPECT_EQ(r->offloaded, 1u);
  EXPECT_LT(r->peak_state_bytes, 64u * 1024);
}

TEST(StateGraph, RunStateOverItsCapFailsThatRunOnly) {
  BudgetLimits lim;
  MemoryBudget budget(lim);
  StateGraph b;
  b.add_channel("blob", {});
  b.add_node("big", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("blob", json::string(std::string(100000, 'y')));
  });
  b.add_edge("START", "big").add_edge("big", "END");
  GraphRuntime rt({.budget = &budget});
  auto r = invoke(rt, *b.compile({.inline_limit = 1 << 30, .max_state_bytes = 32 * 1024}), {},
                  {.run_id = "capped-run-with-a-long-id"});
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::memory_budget_exceeded));
  // The message names the run by its id (made when the message is).
  EXPECT_NE(r.error().message.find("run capped-run-with-a-long-id state would grow to "),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(budget.used(BudgetCategory::run_state), 0u);
}

// Async nodes of one step run concurrently (they interleave on timers), bounded by
// max_concurrency; a failing node retries with backoff, then the error names it.
TEST(StateGraph, AsyncNodesRetriesAndThousandsOfRuns) {
  std::atomic<int> attempts{0};
  StateGraph b;
  b.add_channel("log", {.reducer = ReducerKind::append});
  for (int i = 0; i < 3; ++i) {
    b.add_async_node("slow" + std::to_string(i),
                     [i](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
                       asio::steady_timer t(co_await asio::this_coro::executor,
                                            std::chrono::milliseconds(5 * (3 - i)));
                       co_await t.async_wait(asio::use_awaitable);
                       co_return Update().set("log", i);
                     });
    b.add_edge("START", "slow" + std::to_string(i)).add_edge("slow" + std::to_string(i), "END");
  }
  auto g = *b.compile();
  Executor ex(2);
  GraphRuntime rt({.max_concurrent_runs = 256});
  std::atomic<int> ok{0};
  auto run = [&]() -> asio::awaitable<void> {
    json::object input;  // a local: no temporary inside a co_await (GCC 12)
    auto r = co_await rt.async_invoke(g, std::move(input));
    if (r && json::serialize(r->state.at("log")) == "[0,1,2]") ++ok;
  };
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i) ex.spawn(run());
  ex.shutdown(60s);
  EXPECT_EQ(ok.load(), 2000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);

  StateGraph f;
  f.add_channel("x", {});
  f.add_async_node("flaky",
                   [&](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
                     ++attempts;
                     co_return Error(Errc::tool_failed, "the search backend is down");
                   },
                   {.max_attempts = 3, .backoff = 1ms});
  f.add_edge("START", "flaky").add_edge("flaky", "END");
  GraphRuntime rt2;
  auto r = invoke(rt2, *f.compile(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(r.error().to_string(), "tool_failed: node 'flaky': the search backend is down");
}

// A node that throws fails its run with the exception's text, whichever way the node is run
// (a lone async node, a node with retries, a node among concurrent ones); the runtime keeps
// serving.
TEST(StateGraph, ANodeThatThrowsFailsItsRunWithTheExceptionText) {
  auto thrower = [](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
    throw std::runtime_error("the parser blew up");
    co_return Update();
  };
  auto ok = [](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
    co_return Update().set("x", 1);
  };
  GraphRuntime rt;
  {
    StateGraph b;
    b.add_channel("x", {});
    b.add_async_node("parse", thrower);
    b.add_edge("START", "parse").add_edge("parse", "END");
    auto r = invoke(rt, *b.compile(), {});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().to_string(), "tool_failed: node 'parse': threw: the parser blew up");
  }
  {
    StateGraph b;
    b.add_channel("x", {});
    b.add_async_node("parse", thrower, {.max_attempts = 2, .backoff = 1ms});
    b.add_edge("START", "parse").add_edge("parse", "END");
    auto r = invoke(rt, *b.compile(), {});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().to_string(), "tool_failed: node 'parse': threw: the parser blew up");
  }
  {
    StateGraph b;
    b.add_channel("x", {.reducer = ReducerKind::sum});
    b.add_async_node("fine", ok);
    b.add_async_node("parse", thrower);
    b.add_edge("START", "fine").add_edge("START", "parse");
    b.add_edge("fine", "END").add_edge("parse", "END");
    auto r = invoke(rt, *b.compile(), {});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().to_string(), "tool_failed: node 'parse': threw: the parser blew up");
  }
  StateGraph b;
  b.add_channel("x", {});
  b.add_async_node("fine", ok);
  b.add_edge("START", "fine").add_edge("fine", "END");
  auto r = invoke(rt, *b.compile(), {});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->state.at("x"), 1);
  EXPECT_EQ(rt.active_runs(), 0u);
}

// Admission: runs beyond max_concurrent_runs wait in a bounded queue and run when a permit
// frees; beyond the queue a run is refused at once with `overloaded`, naming the limits.
TEST(StateGraph, RunsBeyondTheLimitQueueAndBeyondTheQueueAreRefused) {
  StateGraph b;
  b.add_channel("order", {.reducer = ReducerKind::append});
  b.add_async_node("work", [](StateView, NodeContext& ctx) -> asio::awaitable<Result<Update>> {
    asio::steady_timer t(co_await asio::this_coro::executor, 20ms);
    co_await t.async_wait(asio::use_awaitable);
    co_return Update().set("order", json::string(ctx.run_id()));
  });
  b.add_edge("START", "work").add_edge("work", "END");
  auto g = *b.compile();
  GraphRuntime rt({.max_concurrent_runs = 1, .max_queued_runs = 1});
  asio::io_context io;
  std::vector<Result<RunResult>> out(3, Error(Errc::cancelled, "not run"));
  std::vector<std::string> finished;
  auto one = [&](int i) -> asio::awaitable<void> {  // outlives the coroutines
    RunOptions o;
    o.run_id = "r" + std::to_string(i);
    json::object input;  // a local: no temporary inside a co_await (GCC 12)
    out[i] = co_await rt.async_invoke(g, std::move(input), std::move(o));
    finished.push_back("r" + std::to_string(i));
  };
  for (int i = 0; i < 3; ++i) asio::co_spawn(io, one(i), asio::detached);
  io.run();
  ASSERT_TRUE(out[0]) << out[0].error().to_string();
  ASSERT_TRUE(out[1]) << out[1].error().to_string();
  EXPECT_EQ(json::serialize(out[0]->state.at("order")), R"(["r0"])");
  EXPECT_EQ(json::serialize(out[1]->state.at("order")), R"(["r1"])");
  ASSERT_FALSE(out[2]);
  EXPECT_EQ(out[2].error().code, Errc::overloaded);
  EXPECT_EQ(out[2].error().message,
            "run limiter (limits.max_concurrent_runs=1, limits.max_queued_runs=1): all 1 permits "
            "in use and 1 waiting, the queue's limit; retry later or raise the limits");
  EXPECT_EQ(finished, (std::vector<std::string>{"r2", "r0", "r1"}));
  EXPECT_EQ(rt.active_runs(), 0u);
  EXPECT_EQ(rt.queued_runs(), 0u);
}

// A run still in flight when its thread ends, destroyed with an io_context that outlives the
// thread's pools of Runner blocks, is freed plainly (ASan: no use of the destroyed pools).
GraphRuntime& long_lived_runtime() {
  static GraphRuntime rt;
  return rt;
}
asio::awaitable<void> invoke_and_forget(std::shared_ptr<const CompiledGraph> g) {
  json::object input;  // a local: no temporary inside a co_await (GCC 12)
  (void)co_await long_lived_runtime().async_invoke(g, std::move(input));
}

TEST(StateGraph, ARunOutlivingItsThreadsPoolsIsFreedPlainly) {
  StateGraph b;
  b.add_channel("x", {});
  b.add_async_node("wait", [](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
    co_await t.async_wait(asio::use_awaitable);
    co_return Update().set("x", 1);
  });
  b.add_edge("START", "wait").add_edge("wait", "END");
  auto g = *b.compile();
  std::thread th([g] {
    // Constructed before the pools (which the run creates), so destroyed after them.
    thread_local std::optional<asio::io_context> io;
    io.emplace();
    asio::co_spawn(*io, invoke_and_forget(g), asio::detached);
    io->poll();  // the run starts and waits on its node's timer
    EXPECT_EQ(long_lived_runtime().active_runs(), 1u);
  });
  th.join();
  EXPECT_EQ(long_lived_runtime().active_runs(), 0u);
}

Result<RunResult> invoke_on(GraphRuntime& rt, std::shared_ptr<const CompiledGraph> g,
                            json::object input, RunOptions o) {
  asio::io_context io;
  Result<RunResult> out = Error(Errc::cancelled, "not run");
  auto task = [&]() -> asio::awaitable<void> {
    out = co_await rt.async_invoke(g, std::move(input), std::move(o));
  };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  return out;
}

// A chain whose middle node fails the first `failures` times it runs.
std::shared_ptr<const CompiledGraph> flaky_chain(std::shared_ptr<int> failures) {
  StateGraph b;
  b.add_channel("counter", {.default_value = 0});
  b.add_channel("log", {.reducer = ReducerKind::append});
  b.add_node("a", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("counter", s.get("counter").as_int64() + 1).set("log", "a");
  });
  b.add_node("b", [failures](const StateView& s, NodeContext&) -> Result<Update> {
    if ((*failures)-- > 0) return Error(Errc::model_error, "the model crashed");
    return Update().set("counter", s.get("counter").as_int64() + 1).set("log", "b");
  });
  b.add_node("c", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("counter", s.get("counter").as_int64() + 1).set("log", "c");
  });
  b.add_edge("START", "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", "END");
  return *b.compile();
}

// Each superstep's checkpoint holds only what that step wrote; a failed run resumes where it
// stopped, without re-running what had finished.
TEST(StateGraphCheckpoints, DeltasPerStepAndResumeAfterAFailure) {
  auto cp = make_memory_checkpointer();
  auto failures = std::make_shared<int>(1);
  auto g = flaky_chain(failures);
  GraphRuntime rt;
  auto first = invoke_on(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t1"});
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().to_string(), "model_error: node 'b': the model crashed");
  auto list = cp->list("t1");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);  // after step 1 (node a); step 2 failed and wrote nothing
  EXPECT_EQ(json::serialize((*list)[0].writes), R"({"counter":1,"log":["a"]})");
  EXPECT_EQ(json::serialize((*list)[0].pending.at("next")), R"(["b"])");

  auto second = invoke_on(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t1"});
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE(second->resumed);
  EXPECT_EQ(second->steps, 2);  // b and c only
  EXPECT_EQ(second->state.at("counter").as_int64(), 3);
  EXPECT_EQ(json::serialize(second->state.at("log")), R"(["a","b","c"])");
  auto all = *cp->list("t1");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(json::serialize(all[0].pending.at("status")), R"("done")");
  EXPECT_EQ(all[0].writes.size(), 2u);  // counter and log of step c: a delta, not the whole state

  // A finished thread starts a new run from START on top of its state (the next turn).
  auto third = invoke_on(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t1"});
  ASSERT_TRUE(third);
  EXPECT_FALSE(third->resumed);
  EXPECT_EQ(third->state.at("counter").as_int64(), 6);
}

// A long thread: every 32nd step's checkpoint is a full snapshot, so restoring the thread folds
// at most 32 checkpoints however long it gets, and the state stays exact across snapshots.
TEST(StateGraphCheckpoints, LongThreadsWriteSnapshotsEvery32Steps) {
  auto cp = make_memory_checkpointer();
  auto g = flaky_chain(std::make_shared<int>(0));
  GraphRuntime rt;
  for (int turn = 1; turn <= 30; ++turn) {  // 30 turns of 3 steps: 90 steps
    auto r = invoke_on(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "long"});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->state.at("counter").as_int64(), 3 * turn);
  }
  auto all = *cp->list("long", 1000);
  ASSERT_EQ(all.size(), 90u);
  int snapshots = 0;
  for (const auto& c : all) {
    if (!c.writes.contains("$snapshot")) continue;
    ++snapshots;
    EXPECT_EQ(c.step % 32, 0);
    EXPECT_TRUE(c.writes.contains("counter") && c.writes.contains("log")) << c.step;
  }
  EXPECT_EQ(snapshots, 2);  // steps 32 and 64
  auto st = cp->state_at("long", all[0].checkpoint_id);
  ASSERT_TRUE(st);
  EXPECT_FALSE(st->contains("$snapshot"));
  EXPECT_EQ(st->at("counter").as_int64(), 90);
}

// Through SQLite the resume works in a new runtime and a new connection (a new process).
TEST(StateGraphCheckpoints, ResumeAcrossARestartWithSqlite) {
  auto db = std::filesystem::temp_directory_path() /
            ("weir_resume_" + std::to_string(::getpid()) + ".sqlite");
  std::filesystem::remove(db);
  auto failures = std::make_shared<int>(1);
  {
    auto cp = open_sqlite_checkpointer(db);
    ASSERT_TRUE(cp) << cp.error().message;
    GraphRuntime rt;
    auto r = invoke_on(rt, flaky_chain(failures), {{"counter", 10}},
                       {.checkpointer = cp->get(), .thread_id = "job-7"});
    ASSERT_FALSE(r);
  }
  auto cp = open_sqlite_checkpointer(db);
  ASSERT_TRUE(cp);
  GraphRuntime rt;
  auto r =
      invoke_on(rt, flaky_chain(failures), {}, {.checkpointer = cp->get(), .thread_id = "job-7"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->resumed);
  EXPECT_EQ(r->state.at("counter").as_int64(), 13);
  std::filesystem::remove(db);
}

// An async node that waits 10 s for a timer, saying whether its wait was cancelled.
std::shared_ptr<const CompiledGraph> sleeper(std::shared_ptr<std::atomic<bool>> cut,
                                             NodeOptions options = {}, GraphLimits limits = {}) {
  StateGraph b;
  b.add_channel("x", {});
  b.add_async_node(
      "slow",
      [cut](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
        asio::steady_timer t(co_await asio::this_coro::executor, 10s);
        auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        if (ec) {
          cut->store(true);
          co_return Error(Errc::cancelled, "the wait was cancelled");
        }
        co_return Update().set("x", 1);
      },
      options);
  b.add_edge("START", "slow");
  b.add_edge("slow", "END");
  return *b.compile(limits);
}

// A node's timeout, the run's cancel flag and its deadline each stop an async node while it
// runs (its wait is cancelled: a model's generation stops the same way), not after it.
TEST(StateGraph, ATimeoutACancelOrTheDeadlineStopsARunningNode) {
  GraphRuntime rt;
  {
    auto cut = std::make_shared<std::atomic<bool>>(false);
    auto r = invoke(rt, sleeper(cut, {.timeout = 100ms}), {});
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(Errc::tool_timeout)) << r.error().to_string();
    EXPECT_EQ(r.error().message, "node 'slow': timed out after 100 ms (its timeout_ms)");
    EXPECT_TRUE(cut->load()) << "the node's wait was cancelled";
  }
  {
    auto cut = std::make_shared<std::atomic<bool>>(false);
    auto cancel = std::make_shared<std::atomic<bool>>(false);
    std::thread later([cancel] {
      std::this_thread::sleep_for(100ms);
      cancel->store(true);
    });
    auto r = invoke(rt, sleeper(cut), {}, {.cancel = cancel});
    later.join();
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(Errc::cancelled)) << r.error().to_string();
    EXPECT_EQ(r.error().message, "node 'slow': run cancelled while it ran");
    EXPECT_TRUE(cut->load());
  }
  {
    auto cut = std::make_shared<std::atomic<bool>>(false);
    auto r = invoke(rt, sleeper(cut, {}, {.deadline = 100ms}), {});
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(Errc::deadline_exceeded)) << r.error().to_string();
    EXPECT_EQ(r.error().message,
              "node 'slow': run stopped after 100 ms (limits.deadline_ms) while it ran");
    EXPECT_TRUE(cut->load());
  }
}

}  // namespace
}  // namespace weir::graph
