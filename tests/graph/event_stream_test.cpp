// Streaming: event order and content, backpressure with a slow consumer, a consumer that goes
// away.
#include <algorithm>

#include <gtest/gtest.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/runtime/artifact_store.hpp"

namespace weir::graph {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using testing::run;
using testing::run_with;

std::shared_ptr<const CompiledGraph> counting_chain(int length, std::shared_ptr<int> executed) {
  StateGraph b;
  b.add_channel("n", {.default_value = 0});
  std::string prev = "START";
  for (int i = 0; i < length; ++i) {
    std::string name = "n" + std::to_string(i);
    b.add_node(name, [executed](const StateView& s, NodeContext&) -> Result<Update> {
      ++*executed;
      return Update().set("n", s.get("n").as_int64() + 1);
    });
    b.add_edge(prev, name);
    prev = name;
  }
  b.add_edge(prev, "END");
  return *b.compile({.recursion_limit = 100});
}

std::string describe(const Event& e) {
  std::string s = event_kind_name(e.kind);
  if (!e.node.empty()) s += " " + e.node;
  if (!e.name.empty()) s += " " + e.name;
  if (!e.data.is_null()) s += " " + json::serialize(e.data);
  return s;
}

// Capacity 2 and a consumer that takes 1 ms per event: the run waits for it. At no time are
// more than 2 events queued, and the run is never more than a few nodes ahead of what the
// consumer has seen (without backpressure it would finish all 20 before the first read).
TEST(EventStream, SlowConsumerWithCapacityTwoBoundsTheRun) {
  auto executed = std::make_shared<int>(0);
  auto g = counting_chain(20, executed);
  auto events = std::make_shared<EventStream>(2);
  EXPECT_EQ(events->capacity(), 2u);
  std::size_t max_queued = 0, received = 0;
  int finished_seen = 0, max_lead = 0;
  bool saw_end = false;
  auto consumer = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor);
    while (auto e = co_await events->async_next()) {
      ++received;
      max_queued = std::max(max_queued, events->size());
      if (e->kind == EventKind::node_finished) ++finished_seen;
      max_lead = std::max(max_lead, *executed - finished_seen);
      t.expires_after(1ms);
      co_await t.async_wait(asio::use_awaitable);
    }
    saw_end = true;
  };
  GraphRuntime rt;
  auto r = run_with(rt, g, {}, {.events = events}, consumer);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("n").as_int64(), 20);
  EXPECT_TRUE(saw_end);
  EXPECT_EQ(received, 1u + 20u * 2u + 1u);  // run_started, started+finished per node, finished
  EXPECT_LE(max_queued, 2u);
  EXPECT_LE(max_lead, 3);
  EXPECT_GE(max_lead, 1);
}

// The order of a run's events, custom events in emit order before their node's node_finished,
// node_finished carrying the update with a large value as an artifact reference, state events.
TEST(EventStream, EventsArriveInOrderWithCustomEventsAndUpdates) {
  auto store = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  StateGraph b;
  b.add_channel("doc", {});
  b.add_channel("log", {.reducer = ReducerKind::append});
  b.add_node("fetch", [](const StateView&, NodeContext& c) -> Result<Update> {
    c.emit("progress", 1);
    c.emit("progress", 2);
    c.emit("done", json::object{{"bytes", 100}});
    return Update().set("doc", json::string(std::string(100, 'x')));
  });
  b.add_async_node("note", [](StateView, NodeContext& c) -> asio::awaitable<Result<Update>> {
    asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
    co_await t.async_wait(asio::use_awaitable);
    c.emit("waited", "1ms");
    co_return Update().set("log", "noted");
  });
  b.add_edge("START", "fetch").add_edge("fetch", "note").add_edge("note", "END");
  auto g = *b.compile({.inline_limit = 50});
  auto events = std::make_shared<EventStream>();
  std::vector<std::string> seen;
  std::vector<std::int64_t> steps;
  auto consumer = [&]() -> asio::awaitable<void> {
    while (auto e = co_await events->async_next()) {
      seen.push_back(describe(*e));
      steps.push_back(e->step);
      EXPECT_EQ(e->run_id, "r1");
    }
  };
  GraphRuntime rt({.artifacts = store.get()});
  auto r = run_with(rt, g, {{"log", "start"}},
                    {.run_id = "r1", .events = events, .stream_state = true}, consumer);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(seen.size(), 12u);
  EXPECT_EQ(seen[0], R"(run_started {"log":"start"})");
  EXPECT_EQ(seen[1], "node_started fetch");
  EXPECT_EQ(seen[2], "custom fetch progress 1");
  EXPECT_EQ(seen[3], "custom fetch progress 2");
  EXPECT_EQ(seen[4], R"(custom fetch done {"bytes":100})");
  // 100 bytes are over inline_limit=50: the update carries the reference, as state does.
  EXPECT_EQ(seen[5].rfind(R"(node_finished fetch {"doc":{"$artifact":")", 0), 0u) << seen[5];
  EXPECT_EQ(seen[6].rfind(R"(state {"doc":{"$artifact":")", 0), 0u) << seen[6];
  EXPECT_EQ(seen[7], "node_started note");
  EXPECT_EQ(seen[8], R"(custom note waited "1ms")");
  EXPECT_EQ(seen[9], R"(node_finished note {"log":"noted"})");
  EXPECT_EQ(seen[10].rfind(R"(state {"doc":{"$artifact":")", 0), 0u) << seen[10];
  EXPECT_NE(seen[10].find(R"("log":["start","noted"]})"), std::string::npos) << seen[10];
  EXPECT_EQ(seen[11], R"(run_finished {"steps":2})");
  EXPECT_EQ(steps, (std::vector<std::int64_t>{0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2}));
}

TEST(EventStream, StateEventsAreOptInAndAFailureEndsTheStream) {
  StateGraph b;
  b.add_channel("x", {});
  b.add_node("ok",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("x", 1); });
  b.add_node("boom", [](const StateView&, NodeContext&) -> Result<Update> {
    return Error(Errc::tool_failed, "the search backend is down");
  });
  b.add_edge("START", "ok").add_edge("ok", "boom").add_edge("boom", "END");
  auto events = std::make_shared<EventStream>(4);
  std::vector<std::string> seen;
  bool ended = false;
  auto consumer = [&]() -> asio::awaitable<void> {
    while (auto e = co_await events->async_next()) seen.push_back(describe(*e));
    ended = !(co_await events->async_next()).has_value();  // stays ended
  };
  GraphRuntime rt;
  auto r = run_with(rt, *b.compile(), {}, {.events = events}, consumer);
  ASSERT_FALSE(r);
  EXPECT_TRUE(ended);
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "run_started {}", "node_started ok", R"(node_finished ok {"x":1})",
                      "node_started boom",
                      R"(run_failed {"code":"tool_failed","message":"node 'boom': the search )"
                      R"(backend is down"})"}));
}

// run_failed carries the step the run failed in, as node_started does, also when another task
// of that step asked a question (the failure goes first): it said step 0.
TEST(EventStream, RunFailedNamesTheStepThatFailed) {
  auto boom = [](const StateView&, NodeContext&) -> Result<Update> {
    return Error(Errc::tool_failed, "the search backend is down");
  };
  StateGraph b;
  b.add_channel("x", {});
  b.add_node("ok",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("x", 1); });
  b.add_node("ask", [](const StateView&, NodeContext& c) -> Result<Update> {
    return c.interrupt("proceed?");
  });
  b.add_node("boom", boom);
  b.add_edge("START", "ok").add_edge("ok", "ask").add_edge("ok", "boom");
  b.add_edge("ask", "END").add_edge("boom", "END");
  auto events = std::make_shared<EventStream>();
  std::vector<std::string> seen;
  auto consumer = [&]() -> asio::awaitable<void> {
    while (auto e = co_await events->async_next())
      seen.push_back(std::to_string(e->step) + " " + describe(*e));
  };
  GraphRuntime rt;
  auto cp = make_memory_checkpointer();
  auto r = run_with(rt, *b.compile(), {},
                    {.checkpointer = cp.get(), .thread_id = "t", .events = events}, consumer);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "node 'boom': the search backend is down");
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "0 run_started {}", "1 node_started ok", R"(1 node_finished ok {"x":1})",
                      "2 node_started ask", "2 node_started boom",
                      R"(2 run_failed {"code":"tool_failed","message":"node 'boom': the search )"
                      R"(backend is down"})"}));
}

// A consumer that closes the stream, or drops it while the run waits on a full stream, does
// not hang the run: later pushes are no-ops.
TEST(EventStream, AConsumerThatGoesAwayDoesNotHangTheRun) {
  auto executed = std::make_shared<int>(0);
  auto g = counting_chain(10, executed);
  GraphRuntime rt;
  {
    auto events = std::make_shared<EventStream>(1);
    int taken = 0;
    auto consumer = [&]() -> asio::awaitable<void> {
      auto e = co_await events->async_next();
      taken += e.has_value();
      events->close();
      EXPECT_FALSE((co_await events->async_next()).has_value());
    };
    auto r = run_with(rt, g, {}, {.events = events}, consumer);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->state.at("n").as_int64(), 10);
    EXPECT_EQ(taken, 1);
    EXPECT_TRUE(events->closed());
  }
  {
    // Nobody reads; the only owner drops the stream 5 ms in, while the run's push waits.
    auto events = std::make_shared<EventStream>(1);
    std::weak_ptr<EventStream> weak = events;
    auto dropper = [&]() -> asio::awaitable<void> {
      asio::steady_timer t(co_await asio::this_coro::executor, 5ms);
      co_await t.async_wait(asio::use_awaitable);
      EXPECT_LT(*executed, 20);  // the run is stuck on the full stream
      events.reset();
    };
    *executed = 10;
    RunOptions o;
    o.events = events;
    auto r = run_with(rt, g, {}, std::move(o), dropper);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(*executed, 20);
    EXPECT_TRUE(weak.expired());
  }
}

TEST(EventStream, KindNames) {
  EXPECT_STREQ(event_kind_name(EventKind::run_started), "run_started");
  EXPECT_STREQ(event_kind_name(EventKind::node_finished), "node_finished");
  EXPECT_STREQ(event_kind_name(EventKind::run_interrupted), "run_interrupted");
  EXPECT_STREQ(event_kind_name(static_cast<EventKind>(99)), "unknown");
}

}  // namespace
}  // namespace weir::graph
