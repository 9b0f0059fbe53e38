// Subgraphs: channel mapping in and out, the child's own caps, shared token budget, events.
#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph {
namespace {

namespace json = boost::json;
using testing::run;
using testing::run_with;

// question -> plan -> write -> answer; notes collects what each node did.
std::shared_ptr<const CompiledGraph> research_graph(std::int64_t tokens_per_node = 0) {
  StateGraph b;
  b.add_channel("question", {});
  b.add_channel("notes", {.reducer = ReducerKind::append});
  b.add_channel("answer", {});
  b.add_node("plan", [=](const StateView& s, NodeContext& c) -> Result<Update> {
    if (auto st = c.charge_tokens(tokens_per_node); !st) return st.error();
    c.emit("planning", s.get("question"));
    return Update().set("notes",
                        json::string("plan for " + std::string(s.get("question").as_string())));
  });
  b.add_node("write", [=](const StateView& s, NodeContext& c) -> Result<Update> {
    if (auto st = c.charge_tokens(tokens_per_node); !st) return st.error();
    return Update()
        .set("answer", json::string("answer to " + std::string(s.get("question").as_string())))
        .set("notes", "written");
  });
  b.add_edge("START", "plan").add_edge("plan", "write").add_edge("write", "END");
  return *b.compile();
}

TEST(Subgraph, MapsChannelsInAndOut) {
  StateGraph p;
  p.add_channel("topic", {});
  p.add_channel("report", {});
  p.add_channel("notes", {.reducer = ReducerKind::append});
  p.add_subgraph("research", research_graph(),
                 {.input = {{"topic", "question"}, {"notes", "notes"}},
                  .output = {{"answer", "report"}, {"notes", "notes"}}});
  p.add_node("review", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("notes",
                        json::string("reviewed " + std::string(s.get("report").as_string())));
  });
  p.add_edge("START", "research").add_edge("research", "review").add_edge("review", "END");
  auto g = p.compile();
  ASSERT_TRUE(g) << g.error().message;
  auto events = std::make_shared<EventStream>();
  std::vector<std::string> nodes;
  auto consumer = [&]() -> boost::asio::awaitable<void> {
    while (auto e = co_await events->async_next()) {
      if (e->kind == EventKind::node_started || e->kind == EventKind::custom)
        nodes.push_back(std::string(event_kind_name(e->kind)) + " " + e->node);
    }
  };
  GraphRuntime rt;
  auto r = run_with(rt, *g, {{"topic", "tides"}, {"notes", "from the user"}}, {.events = events},
                    consumer);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("report"), "answer to tides");
  // The child got the parent's notes and added two; only the two come back (no duplicates).
  EXPECT_EQ(json::serialize(r->state.at("notes")),
            R"(["from the user","plan for tides","written","reviewed answer to tides"])");
  EXPECT_EQ(r->steps, 2);
  EXPECT_EQ(nodes, (std::vector<std::string>{"node_started research", "node_started research/plan",
                                             "custom research/plan", "node_started research/write",
                                             "node_started review"}));
}

// Without maps, the channels both graphs have are shared by name.
TEST(Subgraph, SameNamedChannelsByDefault) {
  StateGraph p;
  p.add_channel("question", {});
  p.add_channel("answer", {});
  p.add_channel("unrelated", {.default_value = 7});
  p.add_subgraph("research", research_graph());
  p.add_edge("START", "research").add_edge("research", "END");
  GraphRuntime rt;
  auto r = run(rt, *p.compile(), {{"question", "wind"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("answer"), "answer to wind");
  EXPECT_EQ(r->state.at("unrelated"), 7);
}

// The child runs under its own caps; its error fails the subgraph node, code kept, message
// prefixed with the node's name.
TEST(Subgraph, ChildCapErrorNamesTheSubgraphNode) {
  StateGraph c;
  c.add_channel("n", {.default_value = 0});
  c.add_node("loop", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("n", s.get("n").as_int64() + 1);
  });
  c.add_edge("START", "loop");
  c.add_conditional_edges("loop", [](const StateView&) { return std::vector<std::string>{"loop"}; },
                          {"loop", "END"});
  auto child = *c.compile();  // recursion_limit 25
  StateGraph p;
  p.add_channel("n", {.default_value = 0});
  p.add_subgraph("research", child, {.limits = GraphLimits{.recursion_limit = 5}});
  p.add_edge("START", "research").add_edge("research", "END");
  GraphRuntime rt;
  auto r = run(rt, *p.compile(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "step_limit_exceeded: node 'research': run stopped after 5 supersteps "
            "(recursion_limit=5); nodes active in the last step: loop; raise "
            "limits.recursion_limit or add an exit condition");
}

// A subgraph node that fails streams as a node that fails: its node_started (the child's events
// after it), no node_finished, then run_failed with the parent's step and the child's error
// under the node's name.
TEST(Subgraph, AFailedSubgraphNodeStreamsAsAFailedNode) {
  auto boom = [](const StateView&, NodeContext&) -> Result<Update> {
    return Error(Errc::tool_failed, "the search backend is down");
  };
  auto ok = [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("x", 1); };
  auto events_of = [](std::shared_ptr<const CompiledGraph> g) {
    auto events = std::make_shared<EventStream>();
    std::vector<std::string> seen;
    auto consumer = [&]() -> boost::asio::awaitable<void> {
      while (auto e = co_await events->async_next()) {
        std::string s = std::to_string(e->step) + " " + event_kind_name(e->kind);
        if (!e->node.empty()) s += " " + e->node;
        if (e->kind == EventKind::run_failed) s += " " + json::serialize(e->data);
        seen.push_back(std::move(s));
      }
    };
    GraphRuntime rt;
    auto r = run_with(rt, std::move(g), {}, {.events = events}, consumer);
    EXPECT_FALSE(r);
    return seen;
  };
  StateGraph plain;
  plain.add_channel("x", {});
  plain.add_node("ok", ok).add_node("search", boom);
  plain.add_edge("START", "ok").add_edge("ok", "search").add_edge("search", "END");
  EXPECT_EQ(events_of(*plain.compile()),
            (std::vector<std::string>{
                "0 run_started", "1 node_started ok", "1 node_finished ok", "2 node_started search",
                R"(2 run_failed {"code":"tool_failed","message":"node 'search': the search )"
                R"(backend is down"})"}));

  StateGraph c;
  c.add_channel("x", {});
  c.add_node("boom", boom).add_edge("START", "boom").add_edge("boom", "END");
  StateGraph p;
  p.add_channel("x", {});
  p.add_node("ok", ok).add_subgraph("search", *c.compile(), {});
  p.add_edge("START", "ok").add_edge("ok", "search").add_edge("search", "END");
  EXPECT_EQ(events_of(*p.compile()),
            (std::vector<std::string>{
                "0 run_started", "1 node_started ok", "1 node_finished ok", "2 node_started search",
                "1 node_started search/boom",
                R"(2 run_failed {"code":"tool_failed","message":"node 'search': node 'boom': the )"
                R"(search backend is down"})"}));
}

// Tokens charged in the child count against the parent's budget.
TEST(Subgraph, SharesTheParentsTokenBudget) {
  StateGraph p;
  p.add_channel("question", {});
  p.add_channel("answer", {});
  p.add_subgraph("research", research_graph(30));
  p.add_edge("START", "research").add_edge("research", "END");
  GraphRuntime rt;
  auto ok = run(rt, *p.compile({.token_budget = 100}), {{"question", "q"}});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->tokens_used, 60);
  auto over = run(rt, *p.compile({.token_budget = 50}), {{"question", "q"}});
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().to_string(),
            "token_budget_exceeded: node 'research': node 'write': run stopped in node 'write': "
            "60 tokens used, over the token budget of 50 (limits.token_budget)");
}

// A subgraph called twice in one run names the messages it writes apart: each call's ids
// hold the parent's step too (they once clashed, and the second reply replaced the first).
TEST(Subgraph, TwoCallsMessagesKeepTheirOwnIds) {
  StateGraph c;
  c.add_channel("topic", {});
  c.add_channel("messages", {.reducer = ReducerKind::messages});
  c.add_node("say", [](const StateView& s, NodeContext&) -> Result<Update> {
    json::array added{json::object{
        {"role", "assistant"}, {"content", "about " + std::string(s.get("topic").as_string())}}};
    return Update().set("messages", std::move(added));
  });
  c.add_edge("START", "say").add_edge("say", "END");
  auto child = *c.compile();
  StateGraph p;
  p.add_channel("topic", {});
  p.add_channel("messages", {.reducer = ReducerKind::messages});
  const SubgraphOptions only_topic{.input = {{"topic", "topic"}},
                                   .output = {{"messages", "messages"}}};
  p.add_subgraph("first", child, only_topic);
  p.add_subgraph("second", child, only_topic);
  p.add_edge("START", "first").add_edge("first", "second").add_edge("second", "END");
  GraphRuntime rt;
  auto r = run(rt, *p.compile(), {{"topic", "tides"}});
  ASSERT_TRUE(r) << r.error().message;
  const json::array messages = r->state.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u) << json::serialize(messages);
  EXPECT_NE(messages[0].at("id"), messages[1].at("id"));
}

// With record_subgraph_steps, the checkpoint of the step that called a subgraph lists the
// subgraph's steps: its input, then each step's nodes and what they wrote, under its call.
TEST(Subgraph, ItsStepsAreRecordedInTheCallingStepsCheckpoint) {
  StateGraph p;
  p.add_channel("question", {});
  p.add_channel("answer", {});
  p.add_channel("notes", {.reducer = ReducerKind::append});
  p.add_subgraph("research", research_graph());
  p.add_edge("START", "research").add_edge("research", "END");
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto r = run(rt, *p.compile(), {{"question", "wind"}},
               {.checkpointer = cp.get(), .thread_id = "t", .record_subgraph_steps = true});
  ASSERT_TRUE(r) << r.error().message;
  auto latest = cp->latest("t");
  ASSERT_TRUE(latest && *latest);
  const auto* steps = (*latest)->metadata.if_contains("subgraph_steps");
  ASSERT_TRUE(steps) << json::serialize((*latest)->metadata);
  EXPECT_EQ(json::serialize(*steps),
            R"([{"path":[{"node":"research","step":1,"task":0}],"step":0,"nodes":[],)"
            R"("writes":{"question":"wind"}},)"
            R"({"path":[{"node":"research","step":1,"task":0}],"step":1,"nodes":["plan"],)"
            R"("writes":{"notes":["plan for wind"]}},)"
            R"({"path":[{"node":"research","step":1,"task":0}],"step":2,"nodes":["write"],)"
            R"("writes":{"notes":["plan for wind","written"],"answer":"answer to wind"}}])");
  // (The parent's notes, never written, were not given to the child as a null to append to.)
  EXPECT_EQ(json::serialize(r->state.at("notes")), R"(["plan for wind","written"])");
  // Without the option nothing is recorded.
  auto plain =
      run(rt, *p.compile(), {{"question", "wind"}}, {.checkpointer = cp.get(), .thread_id = "t2"});
  ASSERT_TRUE(plain) << plain.error().message;
  auto quiet = cp->latest("t2");
  ASSERT_TRUE(quiet && *quiet);
  EXPECT_FALSE((*quiet)->metadata.contains("subgraph_steps"));
}

// The records are bounded: a value over kSubgraphValueBytes is shown by its size, and once a
// call's step does not fit the step's kSubgraphStepBytes, that call's later steps are left out
// too (a state folded without the dropped writes would be wrong), each counted.
TEST(Subgraph, ItsRecordedStepsAreBounded) {
  StateGraph c;
  c.add_channel("n", {.default_value = 0});
  c.add_channel("text", {});
  c.add_node("write", [](const StateView& s, NodeContext&) -> Result<Update> {
    const std::int64_t n = s.get("n").as_int64() + 1;
    // 12 KiB a step, under the value bound; the first step 20 KiB, over it.
    return Update().set("n", n).set("text", json::string(std::string(n == 1 ? 20000 : 12000, 'x')));
  });
  c.add_edge("START", "write");
  c.add_conditional_edges(
      "write",
      [](const StateView& s) {
        return std::vector<std::string>{s.get("n").as_int64() < 40 ? "write" : "END"};
      },
      {"write", "END"});
  StateGraph p;
  p.add_channel("n", {.default_value = 0});
  p.add_subgraph("loop", *c.compile({.recursion_limit = 100, .inline_limit = 1 << 20}),
                 {.input = {{"n", "n"}}, .output = {{"n", "n"}}});
  p.add_edge("START", "loop").add_edge("loop", "END");
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto r = run(rt, *p.compile(), {},
               {.checkpointer = cp.get(), .thread_id = "t", .record_subgraph_steps = true});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("n"), 40);
  auto latest = cp->latest("t");
  ASSERT_TRUE(latest && *latest);
  const json::array steps = (*latest)->metadata.at("subgraph_steps").as_array();
  ASSERT_GE(steps.size(), 3u);
  EXPECT_EQ(json::serialize(steps[1].at("writes").at("text")), R"({"$omitted":{"bytes":20002}})");
  EXPECT_EQ(steps[2].at("writes").at("text").as_string().size(), 12000u);
  // Recorded steps are the first ones, in order, without a gap; the rest were counted.
  for (std::size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].at("step"), i);
  EXPECT_LT(steps.size(), 41u);
  EXPECT_EQ((*latest)->metadata.at("subgraph_steps_dropped"),
            static_cast<std::int64_t>(41 - steps.size()));
  std::size_t bytes = 0;
  for (const auto& s : steps) bytes += json::serialize(s).size();
  EXPECT_LE(bytes, kSubgraphStepBytes);
}

TEST(Subgraph, CompileNamesUnknownMappedChannels) {
  StateGraph p;
  p.add_channel("topic", {});
  p.add_subgraph("research", research_graph(),
                 {.input = {{"topik", "question"}}, .output = {{"answr", "topic"}}});
  p.add_edge("START", "research").add_edge("research", "END");
  auto g = p.compile();
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().to_string(),
            "invalid_workflow: subgraph node 'research': input maps channel 'topik', which the "
            "parent graph does not have\nsubgraph node 'research': output maps channel 'answr', "
            "which the subgraph does not have");
}

}  // namespace
}  // namespace weir::graph

namespace weir::graph {
namespace {

// describe(): a C++ graph as the workflow spec a server shows (channels, input, nodes of kind
// code or subgraph, edges with a router's declared targets).
TEST(CompiledGraphDescribe, ShowsChannelsNodesEdgesAndSubgraphs) {
  StateGraph p;
  p.add_channel("question", {});
  p.add_channel("answer", {});
  p.add_channel("notes", {.reducer = ReducerKind::append});
  p.add_subgraph("research", research_graph());
  p.add_node("check", [](const StateView&, NodeContext&) -> Result<Update> { return Update(); },
             {.max_visits = 3});
  p.add_edge("START", "research").add_edge("research", "check");
  p.add_conditional_edges("check", [](const StateView&) { return std::vector<std::string>{"END"}; },
                          {"research", "END"});
  p.set_input_channels({"question"}, "asker");
  auto g = p.compile();
  ASSERT_TRUE(g) << g.error().message;
  const WorkflowSpec spec = (*g)->describe("asker", "asks and checks");
  EXPECT_EQ(spec.name, "asker");
  EXPECT_EQ(spec.description, "asks and checks");
  ASSERT_EQ(spec.channels.size(), 3u);
  EXPECT_EQ(spec.channels[2].name, "notes");
  EXPECT_EQ(spec.channels[2].reducer, ReducerKind::append);
  EXPECT_EQ(spec.input, (std::vector<std::string>{"question"}));
  ASSERT_EQ(spec.nodes.size(), 2u);
  EXPECT_EQ(spec.nodes[0].kind, NodeKind::subgraph);
  EXPECT_EQ(spec.nodes[1].kind, NodeKind::code);
  EXPECT_STREQ(node_kind_name(spec.nodes[1].kind), "code");
  EXPECT_EQ(spec.nodes[1].max_visits, 3);
  ASSERT_TRUE(spec.subgraphs.count("research"));
  EXPECT_EQ(spec.subgraphs.at("research")->nodes.size(), 2u);
  ASSERT_EQ(spec.edges.size(), 3u);
  EXPECT_EQ(spec.edges[0].to, (std::vector<std::string>{"research"}));
  ASSERT_TRUE(spec.edges[2].route);
  EXPECT_EQ(spec.edges[2].route->all_targets(), (std::vector<std::string>{"research", "END"}));
  EXPECT_EQ(spec.limits.recursion_limit, 25);
}

}  // namespace
}  // namespace weir::graph
