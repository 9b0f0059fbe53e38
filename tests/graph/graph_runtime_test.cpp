// GraphRuntime: retries, deadline, cancellation, token budget, offload, state cap, checkpoints,
// interrupts and resume, streaming, concurrency.
#include <gtest/gtest.h>

#include <filesystem>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>

#include "weir/graph/checkpointer.hpp"
#include "weir/graph/runtime.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/executor.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/metrics.hpp"

namespace weir::graph {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using AsyncResult = asio::awaitable<Result<Update>>;

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

std::string S(std::string_view s) {
  return std::string(s);
}

struct GraphRuntimeTest : ::testing::Test {
  Executor ex{2};
  Registry reg;
  MemoryBudget budget;
  std::unique_ptr<ArtifactStore> store = *ArtifactStore::open({});
  std::unique_ptr<Checkpointer> ckpt = make_memory_checkpointer();
  GraphRuntime rt{ex, &budget, store.get(), &reg, ckpt.get()};
};

TEST_F(GraphRuntimeTest, RetriesRetryableErrorsWithBackoffThenSucceed) {
  StateGraph g;
  auto out = g.add_channel(ChannelDef::last_value("out"));
  std::atomic<int> attempts{0};
  NodeOptions o;
  o.retry.max_attempts = 3;
  o.retry.initial_backoff = 10ms;
  o.retry.jitter = 0;
  g.add_node(
      "flaky",
      [&, out](StateView, NodeContext& ctx) -> Result<Update> {
        ++attempts;
        if (ctx.attempt() < 3) return Error(Errc::tool_timeout, "slow tool");
        return Update().set(out, ctx.attempt());
      },
      o);
  g.add_edge(S(kStart), "flaky");
  g.add_edge("flaky", S(kEnd));
  auto t0 = std::chrono::steady_clock::now();
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(r->get("out"), 3);
  EXPECT_EQ(r->stats.retries, 2);
  EXPECT_GE(took, 30ms);  // 10 ms + 20 ms of backoff
}

TEST_F(GraphRuntimeTest, RetriesAreCappedAndOnlyForRetryableErrors) {
  StateGraph g;
  std::atomic<int> a{0}, b{0};
  NodeOptions o;
  o.retry.max_attempts = 4;
  o.retry.initial_backoff = 1ms;
  g.add_node(
      "always_fails",
      [&](StateView, NodeContext&) -> Result<Update> {
        ++a;
        return Error(Errc::tool_failed, "boom");
      },
      o);
  g.add_edge(S(kStart), "always_fails");
  g.add_edge("always_fails", S(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(a.load(), 4);
  EXPECT_EQ(r.error().to_string(),
            "tool_failed: node 'always_fails' failed: node 'always_fails' failed after 4 attempts "
            "(retry.max_attempts=4): boom");

  StateGraph h;
  h.add_node(
      "bad_input",
      [&](StateView, NodeContext&) -> Result<Update> {
        ++b;
        return Error(Errc::invalid_argument, "no");
      },
      o);
  h.add_edge(S(kStart), "bad_input");
  h.add_edge("bad_input", S(kEnd));
  ASSERT_FALSE(rt.invoke(*std::move(h).compile(), nullptr));
  EXPECT_EQ(b.load(), 1);
}

TEST_F(GraphRuntimeTest, DeadlineStopsASlowNode) {
  StateGraph g;
  g.add_async_node("slow", [](StateView, NodeContext&) -> AsyncResult {
    co_await sleep_for(2s);
    co_return Update();
  });
  g.add_edge(S(kStart), "slow");
  g.add_edge("slow", S(kEnd));
  RunConfig cfg;
  cfg.limits = RunLimits{};
  cfg.limits->deadline = 50ms;
  auto t0 = std::chrono::steady_clock::now();
  auto r = rt.invoke(*std::move(g).compile(), nullptr, cfg);
  ASSERT_FALSE(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(r.error().to_string(),
            "deadline_exceeded: run exceeded its deadline of 50 ms (limits.deadline) in superstep "
            "1 while running: slow — raise limits.deadline or make the node faster");
}

TEST_F(GraphRuntimeTest, CancellationEndsTheRunWithCancelled) {
  StateGraph g;
  g.add_async_node("slow", [](StateView, NodeContext&) -> AsyncResult {
    co_await sleep_for(5s);
    co_return Update();
  });
  g.add_edge(S(kStart), "slow");
  g.add_edge("slow", S(kEnd));
  auto cg = *std::move(g).compile();
  asio::cancellation_signal sig;
  auto fut = asio::co_spawn(ex.get_executor(), rt.async_invoke(cg, nullptr),
                            asio::bind_cancellation_slot(sig.slot(), asio::use_future));
  std::this_thread::sleep_for(30ms);
  asio::post(ex.get_executor(), [&] { sig.emit(asio::cancellation_type::terminal); });
  ASSERT_EQ(fut.wait_for(2s), std::future_status::ready);
  auto r = fut.get();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::cancelled)) << r.error().to_string();
}

TEST_F(GraphRuntimeTest, TokenBudgetEndsTheRunNamingTheNode) {
  StateGraph g;
  auto n = g.add_channel(ChannelDef::last_value("n", 0));
  g.add_node("llm", [n](StateView s, NodeContext& ctx) -> Result<Update> {
    (void)ctx.charge_tokens(40);
    return Update().set(n, s[n].as_int64() + 1);
  });
  g.add_edge(S(kStart), "llm");
  g.add_conditional_edges("llm", [](StateView) -> Result<Route> { return Route("llm"); }, {},
                          {"llm", S(kEnd)});
  RunConfig cfg;
  cfg.limits = RunLimits{};
  cfg.limits->token_budget = 100;
  auto r = rt.invoke(*std::move(g).compile(), nullptr, cfg);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "token_budget_exceeded: run spent 120 tokens, over its token budget of 100 "
            "(limits.token_budget); node 'llm' — raise limits.token_budget");
}

TEST_F(GraphRuntimeTest, LargeWritesAreOffloadedAndReadBySlice) {
  StateGraph g;
  auto doc = g.add_channel(ChannelDef::last_value("doc"));
  auto head = g.add_channel(ChannelDef::last_value("head"));
  g.add_node("load", [doc](StateView, NodeContext&) -> Result<Update> {
    std::string big(1 << 20, 'a');
    big.replace(0, 5, "HELLO");
    return Update().set(doc, json::value(big));
  });
  g.add_node("read", [doc, head](StateView s, NodeContext& ctx) -> Result<Update> {
    EXPECT_TRUE(s[doc].is_object());             // a reference, not 1 MB
    auto slice = ctx.fetch_range(s[doc], 1, 5);  // skip the JSON quote
    if (!slice) return std::move(slice).error();
    return Update().set(head, json::value(*slice));
  });
  g.add_edge(S(kStart), "load");
  g.add_edge("load", "read");
  g.add_edge("read", S(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("head"), "HELLO");
  ASSERT_TRUE(ArtifactRef::from_json(r->get("doc")));
  EXPECT_EQ(r->stats.offloaded, 1);
  EXPECT_LT(r->stats.state_peak_bytes, 64u * 1024);
}

TEST_F(GraphRuntimeTest, AFailedRunReleasesItsArtifacts) {
  StateGraph g;
  auto doc = g.add_channel(ChannelDef::last_value("doc"));
  g.add_node("load", [doc](StateView, NodeContext&) -> Result<Update> {
    return Update().set(doc, json::value(std::string(100000, 'z')));
  });
  g.add_node("fail", [](StateView, NodeContext&) -> Result<Update> {
    return Error(Errc::invalid_argument, "bad document");
  });
  g.add_edge(S(kStart), "load");
  g.add_edge("load", "fail");
  g.add_edge("fail", S(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(store->stats().memory_blobs, 0u);
  EXPECT_EQ(budget.used(BudgetCategory::run_state), 0u);
}

TEST_F(GraphRuntimeTest, PerRunStateCapFailsOnlyThatRun) {
  StateGraph g;
  auto items = g.add_channel(ChannelDef::append("items"));
  g.add_node("grow", [items](StateView s, NodeContext&) -> Result<Update> {
    json::array a;
    for (int i = 0; i < 2000; ++i) a.push_back(json::value("item " + std::to_string(i)));
    return Update().set(items, json::value(std::move(a)));
  });
  g.add_edge(S(kStart), "grow");
  g.add_edge("grow", S(kEnd));
  auto cg = *std::move(g).compile();
  RunConfig small;
  small.limits = RunLimits{};
  small.limits->max_state_bytes = 16 * 1024;
  auto r = rt.invoke(cg, nullptr, small);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::memory_budget_exceeded)) << r.error().to_string();
  EXPECT_EQ(budget.used(BudgetCategory::run_state), 0u);
  auto ok = rt.invoke(cg, nullptr);  // default cap: fine
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->get("items").as_array().size(), 2000u);
}

TEST_F(GraphRuntimeTest, CheckpointsHoldOnlyTheChannelsChangedInTheStep) {
  StateGraph g;
  auto big = g.add_channel(ChannelDef::last_value("history"));
  auto n = g.add_channel(ChannelDef::last_value("n", 0));
  for (const char* name : {"a", "b", "c"})
    g.add_node(name, [n](StateView s, NodeContext&) -> Result<Update> {
      return Update().set(n, s[n].as_int64() + 1);
    });
  (void)big;
  g.add_edge(S(kStart), "a");
  g.add_edge("a", "b");
  g.add_edge("b", "c");
  g.add_edge("c", S(kEnd));
  RunConfig cfg;
  cfg.thread_id = "t1";
  auto r =
      rt.invoke(*std::move(g).compile(), json::parse(R"({"history": "long text", "n": 0})"), cfg);
  ASSERT_TRUE(r) << r.error().to_string();
  auto list = *ckpt->list("t1");
  ASSERT_EQ(list.size(), 4u);  // input + 3 steps
  EXPECT_EQ(list[0].pending.at("status"), "done");
  EXPECT_EQ(list[0].writes, json::parse(R"({"n": 3})").as_object());
  EXPECT_EQ(list[3].writes.size(), 2u);  // the input wrote both
  EXPECT_EQ(list[2].pending.at("next"), json::parse(R"(["b"])"));
  auto state = *ckpt->state_at("t1", list[0].checkpoint_id);
  EXPECT_EQ(state.at("history"), "long text");
  EXPECT_EQ(state.at("n"), 3);
}

std::shared_ptr<const CompiledGraph> approval_graph(std::atomic<int>* review_calls) {
  StateGraph g;
  auto draft = g.add_channel(ChannelDef::last_value("draft"));
  auto verdict = g.add_channel(ChannelDef::last_value("verdict"));
  g.add_node("write", [draft](StateView, NodeContext&) -> Result<Update> {
    return Update().set(draft, "v1");
  });
  g.add_node("review", [verdict, review_calls](StateView s, NodeContext& ctx) -> Result<Update> {
    ++*review_calls;
    if (!ctx.resume_value()) return ctx.interrupt(json::object{{"question", "approve?"}});
    return Update().set(verdict, *ctx.resume_value());
  });
  g.add_edge(S(kStart), "write");
  g.add_edge("write", "review");
  g.add_edge("review", S(kEnd));
  return *std::move(g).compile();
}

TEST_F(GraphRuntimeTest, InterruptSuspendsAndResumeContinues) {
  std::atomic<int> calls{0};
  auto cg = approval_graph(&calls);
  RunConfig cfg;
  cfg.thread_id = "t-approve";
  auto r = rt.invoke(cg, nullptr, cfg);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(r->interrupted);
  EXPECT_EQ(r->interrupted_node, "review");
  EXPECT_EQ(r->interrupt_payload, json::parse(R"({"question":"approve?"})"));
  auto latest = **ckpt->latest("t-approve");
  EXPECT_EQ(latest.pending.at("status"), "interrupted");

  auto again = rt.invoke(cg, nullptr, cfg);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().message,
            "thread 't-approve' is interrupted at node 'review'; call resume() with a value to "
            "continue");

  auto done = rt.resume(cg, "t-approve", "yes");
  ASSERT_TRUE(done) << done.error().to_string();
  EXPECT_FALSE(done->interrupted);
  EXPECT_EQ(done->get("verdict"), "yes");
  EXPECT_EQ(done->get("draft"), "v1");
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ((**ckpt->latest("t-approve")).pending.at("status"), "done");

  auto nothing = rt.resume(cg, "no-such-thread", 1);
  ASSERT_FALSE(nothing);
  EXPECT_TRUE(nothing.error().is(Errc::not_found));
}

TEST(GraphRuntimeSqlite, ResumeInANewProcessFromSqlite) {
  auto dir =
      std::filesystem::temp_directory_path() / ("weir_graph_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto db = dir / "ckpt.db";
  std::atomic<int> calls{0};
  auto cg = approval_graph(&calls);
  {
    Executor ex(1);
    auto cp = *open_sqlite_checkpointer(db);
    GraphRuntime rt(ex, nullptr, nullptr, nullptr, cp.get());
    auto r = rt.invoke(cg, nullptr, {.thread_id = "t"});
    ASSERT_TRUE(r && r->interrupted);
  }
  {  // "a new process": fresh executor, runtime and database handle
    Executor ex(1);
    auto cp = *open_sqlite_checkpointer(db);
    GraphRuntime rt(ex, nullptr, nullptr, nullptr, cp.get());
    auto r = rt.resume(cg, "t", "approved");
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->get("verdict"), "approved");
    EXPECT_EQ(r->get("draft"), "v1");
  }
  std::filesystem::remove_all(dir);
}

TEST_F(GraphRuntimeTest, ThreadContinuesFromItsLastStateAndForksFromAnEarlierCheckpoint) {
  StateGraph g;
  auto n = g.add_channel(ChannelDef::last_value("n", 0));
  g.add_node("inc", [n](StateView s, NodeContext&) -> Result<Update> {
    return Update().set(n, s[n].as_int64() + 1);
  });
  g.add_edge(S(kStart), "inc");
  g.add_edge("inc", S(kEnd));
  auto cg = *std::move(g).compile();
  RunConfig cfg{.thread_id = "conv"};
  ASSERT_EQ(rt.invoke(cg, nullptr, cfg)->get("n"), 1);
  ASSERT_EQ(rt.invoke(cg, nullptr, cfg)->get("n"), 2);
  auto list = *ckpt->list("conv");
  // Fork from the first run's input checkpoint (n=0, next=[inc]).
  RunConfig fork{.thread_id = "conv", .checkpoint_id = list.back().checkpoint_id};
  auto r = rt.invoke(cg, nullptr, fork);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("n"), 1);
}

TEST_F(GraphRuntimeTest, StreamingDeliversEventsInOrderWithBackpressure) {
  StateGraph g;
  auto n = g.add_channel(ChannelDef::last_value("n", 0));
  g.add_node("a", [n](StateView s, NodeContext& ctx) -> Result<Update> {
    ctx.emit("hello");
    return Update().set(n, 1);
  });
  g.add_edge(S(kStart), "a");
  g.add_edge("a", S(kEnd));
  auto cg = *std::move(g).compile();
  auto stream = std::make_shared<EventStream>(ex.get_executor(), 1);
  auto consumer = [](std::shared_ptr<EventStream> s) -> asio::awaitable<std::vector<std::string>> {
    std::vector<std::string> kinds;
    for (;;) {
      std::optional<Event> e = co_await s->async_next();
      if (!e) break;
      co_await sleep_for(2ms);  // a slow consumer
      std::string k = event_kind_name(e->kind);
      if (!e->node.empty()) k += ":" + e->node;
      kinds.push_back(std::move(k));
    }
    co_return kinds;
  };
  auto fut = asio::co_spawn(ex.get_executor(), consumer(stream), asio::use_future);
  auto r = rt.invoke(cg, nullptr, {.events = stream});
  ASSERT_TRUE(r);
  EXPECT_EQ(fut.get(), (std::vector<std::string>{"run_started", "node_started:a", "custom:a",
                                                 "node_finished:a", "run_finished"}));
}

TEST_F(GraphRuntimeTest, TenThousandConcurrentRunsAllFinish) {
  StateGraph g;
  auto n = g.add_channel(ChannelDef::last_value("n", 0));
  for (const char* name : {"a", "b", "c"})
    g.add_async_node(name, [n](StateView s, NodeContext&) -> AsyncResult {
      auto v = s[n].as_int64();
      co_await sleep_for(1ms);
      co_return Update().set(n, v + 1);
    });
  g.add_edge(S(kStart), "a");
  g.add_edge("a", "b");
  g.add_edge("b", "c");
  g.add_edge("c", S(kEnd));
  auto cg = *std::move(g).compile();
  Executor pool(2);
  GraphRuntime big(pool, &budget, nullptr, &reg, nullptr, {.max_concurrent_runs = 20000});
  constexpr int kRuns = 10000;
  auto body = [&]() -> asio::awaitable<int> {
    std::atomic<int> ok{0}, done{0};
    auto ex2 = co_await asio::this_coro::executor;
    for (int i = 0; i < kRuns; ++i)
      asio::co_spawn(ex2, big.async_invoke(cg, nullptr),
                     [&](std::exception_ptr e, Result<RunResult> r) {
                       if (!e && r && r->get("n") == 3) ++ok;
                       ++done;
                     });
    // Poll: a timer cancelled from another pool thread would race with its own destruction.
    while (done.load() < kRuns) co_await sleep_for(1ms);
    co_return ok.load();
  };
  EXPECT_EQ(pool.run_sync(body()), kRuns);
  EXPECT_EQ(big.active_runs(), 0u);
  EXPECT_EQ(budget.used(BudgetCategory::run_state), 0u);
}

TEST_F(GraphRuntimeTest, BatchHonoursMaxConcurrencyAndKeepsOrder) {
  StateGraph g;
  auto n = g.add_channel(ChannelDef::last_value("n", 0));
  std::atomic<int> running{0}, peak{0};
  g.add_async_node("a", [&, n](StateView s, NodeContext&) -> AsyncResult {
    int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    auto v = s[n].as_int64();
    co_await sleep_for(2ms);
    --running;
    co_return Update().set(n, v * 2);
  });
  g.add_edge(S(kStart), "a");
  g.add_edge("a", S(kEnd));
  std::vector<json::value> inputs;
  for (int i = 0; i < 20; ++i) inputs.push_back(json::object{{"n", i}});
  auto out = rt.batch(*std::move(g).compile(), std::move(inputs), 4);
  ASSERT_EQ(out.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(out[i]->get("n"), 2 * i);
  EXPECT_LE(peak.load(), 4);
}

}  // namespace
}  // namespace weir::graph
