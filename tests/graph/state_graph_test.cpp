// StateGraph: channels and reducers, supersteps, edges, validation, caps, DOT.
#include <gtest/gtest.h>

#include "weir/graph/runtime.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/runtime/executor.hpp"
#include "weir/runtime/metrics.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>

namespace weir::graph {
namespace {

Update inc(StateView s, ChannelId c) {
  return Update().set(c, s[c].as_int64() + 1);
}

struct Fixture : ::testing::Test {
  Executor ex{2};
  Registry reg;
  GraphRuntime rt{ex, nullptr, nullptr, &reg, nullptr};
};
using StateGraphTest = Fixture;

std::shared_ptr<const CompiledGraph> chain3(ChannelId* out = nullptr) {
  StateGraph g;
  auto c = g.add_channel(ChannelDef::last_value("counter", 0));
  for (const char* n : {"a", "b", "c"})
    g.add_node(n, [c](StateView s, NodeContext&) -> Result<Update> { return inc(s, c); });
  g.add_edge(std::string(kStart), "a");
  g.add_edge("a", "b");
  g.add_edge("b", "c");
  g.add_edge("c", std::string(kEnd));
  if (out) *out = c;
  return *std::move(g).compile();
}

TEST_F(StateGraphTest, ChainRunsEachNodeOnceInOrder) {
  auto r = rt.invoke(chain3(), json::parse(R"({"counter": 10})"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("counter"), 13);
  EXPECT_EQ(r->stats.steps, 3);
  EXPECT_EQ(r->stats.node_calls, 3);
}

TEST_F(StateGraphTest, InputNamingUnknownChannelIsRejected) {
  auto r = rt.invoke(chain3(), json::parse(R"({"countr": 1})"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "run input names unknown channel 'countr'");
}

TEST_F(StateGraphTest, ConditionalEdgeLoopsUntilRouterSaysEnd) {
  StateGraph g;
  auto c = g.add_channel(ChannelDef::last_value("n", 0));
  g.add_node("step", [c](StateView s, NodeContext&) -> Result<Update> { return inc(s, c); });
  g.add_edge(std::string(kStart), "step");
  g.add_conditional_edges(
      "step",
      [c](StateView s) -> Result<Route> { return Route(s[c].as_int64() < 5 ? "again" : "done"); },
      {{"again", "step"}, {"done", std::string(kEnd)}});
  auto cg = *std::move(g).compile();
  ASSERT_EQ(cg->cycles().size(), 1u);
  EXPECT_EQ(cg->cycles()[0], std::vector<std::string>{"step"});
  auto r = rt.invoke(cg, nullptr);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("n"), 5);
  EXPECT_EQ(r->stats.steps, 5);
}

TEST_F(StateGraphTest, RecursionLimitNamesCapValueAndNodes) {
  StateGraph g;
  auto c = g.add_channel(ChannelDef::last_value("n", 0));
  g.add_node("a", [c](StateView s, NodeContext&) -> Result<Update> { return inc(s, c); });
  g.add_edge(std::string(kStart), "a");
  g.add_conditional_edges("a", [](StateView) -> Result<Route> { return Route("a"); }, {},
                          {"a", std::string(kEnd)});
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::step_limit_exceeded));
  EXPECT_EQ(r.error().to_string(),
            "step_limit_exceeded: run stopped after 25 supersteps (recursion_limit=25); nodes "
            "active in the last step: a — raise limits.recursion_limit or add an exit condition");
}

TEST_F(StateGraphTest, MaxVisitsStopsALoop) {
  StateGraph g;
  auto c = g.add_channel(ChannelDef::last_value("n", 0));
  NodeOptions o;
  o.max_visits = 3;
  g.add_node(
      "a", [c](StateView s, NodeContext&) -> Result<Update> { return inc(s, c); }, o);
  g.add_edge(std::string(kStart), "a");
  g.add_conditional_edges("a", [](StateView) -> Result<Route> { return Route("a"); }, {},
                          {"a", std::string(kEnd)});
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "visit_limit_exceeded: node 'a' reached max_visits=3 (it would run a 4th time in "
            "superstep 4) — raise its max_visits or add an exit condition");
}

TEST_F(StateGraphTest, TwoWritesToLastValueInOneStepConflict) {
  StateGraph g;
  auto c = g.add_channel(ChannelDef::last_value("answer"));
  g.add_node("left", [c](StateView, NodeContext&) -> Result<Update> { return Update().set(c, 1); });
  g.add_node("right",
             [c](StateView, NodeContext&) -> Result<Update> { return Update().set(c, 2); });
  g.add_edge(std::string(kStart), "left");
  g.add_edge(std::string(kStart), "right");
  g.add_edge("left", std::string(kEnd));
  g.add_edge("right", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(
      r.error().to_string(),
      "conflicting_writes: channel 'answer' (last-value) was written by both 'left' and "
      "'right' in superstep 1; give it a reducer (append or custom) or let one node write it");
}

TEST_F(StateGraphTest, FanOutWritesMergeInNodeOrderThenJoinRunsOnce) {
  StateGraph g;
  auto items = g.add_channel(ChannelDef::append("items"));
  auto count = g.add_channel(ChannelDef::last_value("count", 0));
  std::vector<std::string> workers;
  for (int i = 0; i < 5; ++i) {
    std::string name = "w" + std::to_string(i);
    g.add_node(name, [items, i](StateView, NodeContext&) -> Result<Update> {
      return Update().set(items, i);
    });
    g.add_edge(std::string(kStart), name);
    g.add_edge(name, "join");
  }
  int join_calls = 0;
  g.add_node("join", [&join_calls, items, count](StateView s, NodeContext&) -> Result<Update> {
    ++join_calls;
    return Update().set(count, static_cast<std::int64_t>(s[items].as_array().size()));
  });
  g.add_edge("join", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("items"), json::parse("[0,1,2,3,4]"));
  EXPECT_EQ(r->get("count"), 5);
  EXPECT_EQ(join_calls, 1);
}

TEST_F(StateGraphTest, AppendChannelDropsOldestBeyondMaxItems) {
  StateGraph g;
  auto log = g.add_channel(ChannelDef::append("log", 3));
  g.add_node("a", [log](StateView, NodeContext&) -> Result<Update> {
    return Update().set(log, json::parse("[1,2,3,4,5]"));
  });
  g.add_edge(std::string(kStart), "a");
  g.add_edge("a", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get("log"), json::parse("[3,4,5]"));
  EXPECT_EQ(r->stats.items_dropped, 2);
}

TEST_F(StateGraphTest, MessagesWindowKeepsSystemPromptAndSummarizes) {
  StateGraph g;
  auto def = ChannelDef::messages("messages", 2);
  int summarized = 0;
  def.summarize = [&](const json::value& prev, const json::array& evicted) -> Result<json::value> {
    summarized += static_cast<int>(evicted.size());
    return json::value("summary of " + std::to_string(summarized) + " turns");
  };
  auto m = g.add_channel(std::move(def));
  g.add_node("chat", [m](StateView, NodeContext&) -> Result<Update> {
    return Update().set(m, json::parse(R"([{"role":"user","content":"u1"},
      {"role":"assistant","content":"a1"},{"role":"user","content":"u2"},
      {"role":"assistant","content":"a2"}])"));
  });
  g.add_edge(std::string(kStart), "chat");
  g.add_edge("chat", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(),
                     json::parse(R"({"messages":[{"role":"system","content":"be brief"}]})"));
  ASSERT_TRUE(r) << r.error().to_string();
  const auto& a = r->get("messages").as_array();
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].at("content"), "be brief");
  EXPECT_EQ(a[1].at("name"), "summary");
  EXPECT_EQ(a[1].at("content"), "summary of 2 turns");
  EXPECT_EQ(a[1].at("archived"), 2);
  EXPECT_EQ(a[2].at("content"), "u2");
  EXPECT_EQ(a[3].at("content"), "a2");
}

TEST_F(StateGraphTest, MessagesWindowByTokensUsesTheCounter) {
  StateGraph g;
  auto def = ChannelDef::messages("messages", 0, 10);
  def.token_counter = [](const json::value& m) -> std::size_t {
    return m.at("content").as_string().size();
  };
  auto m = g.add_channel(std::move(def));
  g.add_node("chat", [m](StateView, NodeContext&) -> Result<Update> {
    return Update().set(m, json::parse(R"([{"role":"user","content":"aaaaa"},
      {"role":"user","content":"bbbbb"},{"role":"user","content":"ccccc"}])"));
  });
  g.add_edge(std::string(kStart), "chat");
  g.add_edge("chat", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_TRUE(r) << r.error().to_string();
  const auto& a = r->get("messages").as_array();
  // 15 tokens > 10: the oldest turn goes; the (empty) summary marker costs 0 tokens here.
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].at("name"), "summary");
  EXPECT_EQ(a[1].at("content"), "bbbbb");
  EXPECT_EQ(r->stats.items_dropped, 1);
}

TEST_F(StateGraphTest, CustomReducerAndItsErrorNameTheChannel) {
  StateGraph g;
  auto sum = g.add_channel(ChannelDef::custom(
      "sum",
      [](const json::value& cur, const json::value& up) -> Result<json::value> {
        if (!up.is_int64()) return Error(Errc::invalid_argument, "expected an integer");
        return json::value(cur.as_int64() + up.as_int64());
      },
      0));
  g.add_node("a",
             [sum](StateView, NodeContext&) -> Result<Update> { return Update().set(sum, 5); });
  g.add_node("b",
             [sum](StateView, NodeContext&) -> Result<Update> { return Update().set(sum, 7); });
  g.add_edge(std::string(kStart), "a");
  g.add_edge(std::string(kStart), "b");
  g.add_edge("a", std::string(kEnd));
  g.add_edge("b", std::string(kEnd));
  auto cg = *std::move(g).compile();
  auto r = rt.invoke(cg, nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get("sum"), 12);
  auto bad = rt.invoke(cg, json::parse(R"({"sum":"x"})"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "reducer of channel 'sum': expected an integer");
}

TEST_F(StateGraphTest, ChannelByteCapIsATypedErrorNamingChannelAndCap) {
  StateGraph g;
  auto def = ChannelDef::last_value("doc");
  def.max_bytes = 100;
  auto d = g.add_channel(std::move(def));
  g.add_node("w", [d](StateView, NodeContext&) -> Result<Update> {
    return Update().set(d, json::value(std::string(500, 'x')));
  });
  g.add_edge(std::string(kStart), "w");
  g.add_edge("w", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::invalid_argument));
  EXPECT_EQ(r.error().message,
            "channel 'doc' would hold more than 100 bytes (max_bytes=100) after a write by 'w' — "
            "raise its max_bytes, bound it (max_items / window), or offload");
}

TEST_F(StateGraphTest, SendFansOutOverInputsWithinMaxConcurrency) {
  StateGraph g;
  auto out = g.add_channel(ChannelDef::append("out"));
  std::atomic<int> running{0}, peak{0};
  g.add_node("plan", [](StateView, NodeContext&) -> Result<Update> {
    Update u;
    for (int i = 0; i < 8; ++i) u.send("work", i);
    return u;
  });
  g.add_async_node("work",
                   [&, out](StateView, NodeContext& ctx) -> boost::asio::awaitable<Result<Update>> {
                     int now = ++running;
                     peak = std::max(peak.load(), now);
                     boost::asio::steady_timer t(co_await boost::asio::this_coro::executor,
                                                 std::chrono::milliseconds(5));
                     co_await t.async_wait(boost::asio::use_awaitable);
                     --running;
                     co_return Update().set(out, ctx.input().as_int64() * 10);
                   });
  g.add_edge(std::string(kStart), "plan");
  g.add_send_edge("plan", "work");
  g.add_edge("work", std::string(kEnd));
  g.add_edge("plan", std::string(kEnd));
  RunConfig cfg;
  cfg.limits = RunLimits{};
  cfg.limits->max_concurrency = 3;
  auto r = rt.invoke(*std::move(g).compile(), nullptr, cfg);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("out"), json::parse("[0,10,20,30,40,50,60,70]"));
  EXPECT_LE(peak.load(), 3);
  EXPECT_GE(peak.load(), 2);
}

TEST_F(StateGraphTest, ValidationNamesUnknownUnreachableAndDeadEndNodes) {
  StateGraph g;
  auto noop = [](StateView, NodeContext&) -> Result<Update> { return Update(); };
  g.add_node("a", noop);
  g.add_edge(std::string(kStart), "a");
  g.add_edge("a", "sumarize");
  auto r = g.compile();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::invalid_workflow));
  EXPECT_EQ(r.error().message, "edge from 'a' to 'sumarize': unknown node 'sumarize'");

  StateGraph h;
  h.add_node("a", noop);
  h.add_node("orphan", noop);
  h.add_node("sink", noop);
  h.add_edge(std::string(kStart), "a");
  h.add_edge("a", std::string(kEnd));
  h.add_edge("a", "sink");
  h.add_edge("orphan", std::string(kEnd));
  auto r2 = h.compile();
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().message,
            "node 'orphan' is unreachable from START\nnode 'sink' cannot reach END: add an edge "
            "to END or a route out of its loop");
}

TEST_F(StateGraphTest, RouterWithoutDeclaredTargetsMayReachAnyNode) {
  StateGraph g;
  auto noop = [](StateView, NodeContext&) -> Result<Update> { return Update(); };
  g.add_node("a", noop);
  g.add_node("b", noop);
  g.add_edge(std::string(kStart), "a");
  g.add_conditional_edges("a", [](StateView) -> Result<Route> { return Route("b"); });
  g.add_edge("b", std::string(kEnd));
  ASSERT_TRUE(g.compile());
}

TEST_F(StateGraphTest, DotShowsDashedLabelledConditionalEdgesAndSubgraphClusters) {
  StateGraph child;
  auto noop = [](StateView, NodeContext&) -> Result<Update> { return Update(); };
  child.add_node("inner", noop);
  child.add_edge(std::string(kStart), "inner");
  child.add_edge("inner", std::string(kEnd));
  auto cc = *std::move(child).compile();
  StateGraph g;
  g.add_node("a", noop);
  g.add_subgraph("sub", cc);
  g.add_edge(std::string(kStart), "a");
  g.add_conditional_edges("a", [](StateView) -> Result<Route> { return Route("more"); },
                          {{"more", "sub"}, {"stop", std::string(kEnd)}});
  g.add_edge("sub", std::string(kEnd));
  auto dot = (*std::move(g).compile({.name = "demo"}))->to_dot();
  EXPECT_NE(dot.find("digraph \"demo\" {"), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"a\" -> \"sub\" [style=dashed, label=\"more\"];"), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"a\" -> \"__end__\" [style=dashed, label=\"stop\"];"), std::string::npos);
  EXPECT_NE(dot.find("subgraph \"cluster_sub/\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"sub/inner\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"__start__\" -> \"a\";"), std::string::npos);
}

TEST_F(StateGraphTest, SubgraphMapsChannelsInAndOut) {
  StateGraph child;
  auto x = child.add_channel(ChannelDef::last_value("x", 0));
  child.add_node("double", [x](StateView s, NodeContext&) -> Result<Update> {
    return Update().set(x, s[x].as_int64() * 2);
  });
  child.add_edge(std::string(kStart), "double");
  child.add_edge("double", std::string(kEnd));
  auto cc = *std::move(child).compile();
  StateGraph g;
  g.add_channel(ChannelDef::last_value("value", 0));
  g.add_subgraph("sub", cc, {.input_map = {{"value", "x"}}, .output_map = {{"x", "value"}}});
  g.add_edge(std::string(kStart), "sub");
  g.add_edge("sub", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), json::parse(R"({"value": 21})"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("value"), 42);
}

TEST_F(StateGraphTest, GotoAddsNextNodes) {
  StateGraph g;
  auto c = g.add_channel(ChannelDef::last_value("n", 0));
  g.add_node("a", [](StateView, NodeContext&) -> Result<Update> { return Update().go("b"); });
  g.add_node("b", [c](StateView s, NodeContext&) -> Result<Update> { return inc(s, c); });
  g.add_edge(std::string(kStart), "a");
  g.add_conditional_edges("a", [](StateView) -> Result<Route> { return Route(std::string(kEnd)); },
                          {}, {"b", std::string(kEnd)});
  g.add_edge("b", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->get("n"), 1);
}

TEST_F(StateGraphTest, NodeErrorFailsTheRunNamingTheNode) {
  StateGraph g;
  g.add_node("bad", [](StateView, NodeContext&) -> Result<Update> {
    return Error(Errc::invalid_argument, "no input");
  });
  g.add_edge(std::string(kStart), "bad");
  g.add_edge("bad", std::string(kEnd));
  auto r = rt.invoke(*std::move(g).compile(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(), "invalid_argument: node 'bad' failed: no input");
}

}  // namespace
}  // namespace weir::graph
