// The spans of real runs, read back by an OTLP/HTTP receiver on loopback: the research crew
// sample (scripted model: the tree's shape is exact), a graph's loop cap and admission queue as
// events, and a run with tracing off recording nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "otlp_receiver.hpp"
#include "weir/agents/crew.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/scripted_model.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/http/otlp.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/tools/registry.hpp"

namespace weir {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::OtlpReceiver;

std::shared_ptr<trace::Tracer> tracer_to(const OtlpReceiver& rx, bool content = false) {
  http::OtlpOptions h;
  h.endpoint = rx.traces_url();
  auto e = http::make_otlp_exporter(h);
  EXPECT_TRUE(e);
  std::vector<std::unique_ptr<trace::SpanExporter>> ex;
  ex.push_back(std::move(*e));
  trace::TracerOptions o;
  o.schedule_delay = 20ms;
  o.capture_content = content;
  o.max_queue_spans = 100000;
  return std::make_shared<trace::Tracer>(o, std::move(ex));
}

template <class T>
Result<T> run_sync(std::function<asio::awaitable<Result<T>>()> fn) {
  asio::io_context io;
  Result<T> out = Error(Errc::cancelled, "not run");
  auto task = [&]() -> asio::awaitable<void> { out = co_await fn(); };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  return out;
}

// The tree as text: each span's name indented under its parent, children in start order.
std::string shape(const std::vector<trace::ReadSpan>& spans) {
  std::map<std::string, std::vector<const trace::ReadSpan*>> kids;
  std::vector<const trace::ReadSpan*> roots;
  for (const auto& s : spans) {
    if (testing::parent_of(spans, s))
      kids[s.span.parent_span_id.hex()].push_back(&s);
    else
      roots.push_back(&s);
  }
  for (auto& [k, v] : kids)
    std::stable_sort(v.begin(), v.end(), [](auto* a, auto* b) {
      return a->span.start_unix_ns < b->span.start_unix_ns;
    });
  std::string out;
  std::function<void(const trace::ReadSpan*, int)> draw = [&](const trace::ReadSpan* s, int d) {
    out += std::string(2 * d, ' ') + s->span.name + "\n";
    for (auto* c : kids[s->span.span_id.hex()]) draw(c, d + 1);
  };
  for (auto* r : roots) draw(r, 0);
  return out;
}

// The research crew sample on a scripted model: the researcher searches once, then every agent
// answers. What a user of a trace backend sees: one trace, the crew's run at its root, each
// task's agent as invoke_agent, each model call as chat with its tokens, each tool call as
// execute_tool.
TEST(RunSpans, ResearchCrewTreeNamesAttributesAndTokens) {
  OtlpReceiver rx;
  auto tracer = tracer_to(rx);
  auto file =
      agents::load_agents_file(fs::path(WEIR_SOURCE_DIR) / "samples/crews/research_crew.json");
  ASSERT_TRUE(file) << file.error().message;
  auto store = *ArtifactStore::open({{}, 16u << 20, 0, 100, nullptr});
  auto tools = agents::build_tools(*file, store.get());
  ASSERT_TRUE(tools) << tools.error().message;
  auto model = std::make_shared<
      agents::ScriptedChatModel>([](const std::vector<agents::Message>& msgs,
                                    const std::vector<agents::ToolSpec>& tools) {
    bool searched = false;
    for (const auto& m : msgs)
      if (m.role == agents::Role::tool && m.tool_call_id.starts_with("call_")) searched = true;
    const bool researcher = msgs[0].content.find("research analyst") != std::string::npos;
    if (researcher && !searched && !tools.empty())
      return Result<agents::ChatResponse>(agents::ScriptedChatModel::parse_reply(
          R"(<tool_call>{"name": "doc_search", "arguments": {"query": "paged attention", "k": 2}}</tool_call>)",
          tools, msgs));
    return Result<agents::ChatResponse>(
        agents::ScriptedChatModel::parse_reply("The answer, with its sources.", tools, msgs));
  });
  auto crew = agents::Crew::create(file->crew, model, *tools);
  ASSERT_TRUE(crew) << crew.error().message;
  graph::RuntimeOptions ro;
  ro.artifacts = store.get();
  graph::GraphRuntime runtime(ro);
  graph::RunOptions opt;
  const graph::RunTracing tracing{{tracer.get(), {}}, file->name};
  opt.trace = &tracing;
  auto r = run_sync<agents::CrewResult>([&]() -> asio::awaitable<Result<agents::CrewResult>> {
    json::object in{{"topic", "paged attention"}};
    auto op = (*crew)->async_kickoff(runtime, std::move(in), opt);
    co_return co_await std::move(op);
  });
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(tracer->flush(20s));
  auto spans = rx.spans();
  ASSERT_TRUE(rx.errors().empty()) << rx.errors()[0];

  // One trace.
  std::set<std::string> traces;
  for (const auto& s : spans) traces.insert(s.span.trace_id.hex());
  EXPECT_EQ(traces.size(), 1u);

  // The tree. The researcher's loop: think (a tool call) -> act -> think (the answer).
  const std::string agent_loop_1 =
      "      invoke_agent researcher\n"
      "        superstep 1\n"
      "          node think\n"
      "            chat scripted\n"
      "        superstep 2\n"
      "          node act\n"
      "            execute_tool doc_search\n"
      "        superstep 3\n"
      "          node think\n"
      "            chat scripted\n";
  auto one_turn = [](const std::string& agent) {
    return "      invoke_agent " + agent +
           "\n"
           "        superstep 1\n"
           "          node think\n"
           "            chat scripted\n";
  };
  EXPECT_EQ(shape(spans),
            "invoke_workflow research_crew\n"
            "  superstep 1\n"
            "    node research\n"
            "      execute_tool doc_search\n"  // the task's prefetch
            "  superstep 2\n"
            "    node research/agent\n" +
                agent_loop_1 +
                "  superstep 3\n"
                "    node research/done\n"
                "  superstep 4\n"
                "    node write\n"
                "  superstep 5\n"
                "    node write/agent\n" +
                one_turn("writer") +
                "  superstep 6\n"
                "    node write/done\n"
                "  superstep 7\n"
                "    node review\n"
                "  superstep 8\n"
                "    node review/agent\n" +
                one_turn("reviewer") +
                "  superstep 9\n"
                "    node review/done\n");

  // Every span lies inside its parent: a model call or a tool call ends before the node that
  // made it (a span that lived in a coroutine frame ended only when the frame was freed).
  for (const auto& s : spans) {
    const auto* p = testing::parent_of(spans, s);
    if (!p) continue;
    EXPECT_GE(s.span.start_unix_ns, p->span.start_unix_ns) << s.span.name << " in " << p->span.name;
    EXPECT_LE(s.span.end_unix_ns, p->span.end_unix_ns) << s.span.name << " in " << p->span.name;
  }
  // Required attributes.
  const auto* root = testing::find_span(spans, "invoke_workflow research_crew");
  ASSERT_TRUE(root);
  EXPECT_EQ(testing::str_attr(root->span, "gen_ai.operation.name"), "invoke_workflow");
  EXPECT_EQ(testing::str_attr(root->span, "weir.workflow.name"), "research_crew");
  EXPECT_EQ(testing::int_attr(root->span, "weir.run.steps"), 9);
  EXPECT_EQ(root->span.status, trace::StatusCode::ok);
  const auto* agent = testing::find_span(spans, "invoke_agent researcher");
  ASSERT_TRUE(agent);
  EXPECT_EQ(testing::str_attr(agent->span, "gen_ai.operation.name"), "invoke_agent");
  EXPECT_EQ(testing::str_attr(agent->span, "gen_ai.agent.name"), "researcher");
  std::int64_t in_tokens = 0, out_tokens = 0;
  for (const auto* chat : testing::spans_named(spans, "chat ")) {
    EXPECT_EQ(testing::str_attr(chat->span, "gen_ai.operation.name"), "chat");
    EXPECT_EQ(testing::str_attr(chat->span, "gen_ai.request.model"), "scripted");
    EXPECT_EQ(chat->span.kind, trace::SpanKind::client);
    EXPECT_GT(testing::int_attr(chat->span, "gen_ai.usage.input_tokens"), 0);
    EXPECT_GT(testing::int_attr(chat->span, "gen_ai.usage.output_tokens"), 0);
    EXPECT_NE(chat->span.attribute("gen_ai.response.finish_reasons"), nullptr);
    EXPECT_EQ(chat->span.attribute("gen_ai.input.messages"), nullptr);  // content is off
    in_tokens += testing::int_attr(chat->span, "gen_ai.usage.input_tokens");
    out_tokens += testing::int_attr(chat->span, "gen_ai.usage.output_tokens");
  }
  // The token counts are the run's.
  EXPECT_EQ(in_tokens, r->prompt_tokens);
  EXPECT_EQ(out_tokens, r->completion_tokens);
  EXPECT_EQ(in_tokens + out_tokens, r->run.tokens_used);
  EXPECT_EQ(testing::int_attr(root->span, "weir.run.tokens"), r->run.tokens_used);
  for (const auto* tool : testing::spans_named(spans, "execute_tool ")) {
    EXPECT_EQ(testing::str_attr(tool->span, "gen_ai.operation.name"), "execute_tool");
    EXPECT_EQ(testing::str_attr(tool->span, "gen_ai.tool.name"), "doc_search");
    EXPECT_GT(testing::int_attr(tool->span, "weir.tool.arguments_bytes"), 10);
    EXPECT_GT(testing::int_attr(tool->span, "weir.tool.output_bytes"), 0);
    EXPECT_NE(tool->span.attribute("weir.tool.spilled"), nullptr);
    EXPECT_EQ(tool->span.status, trace::StatusCode::ok);
  }
  // The model's tool call keeps its id.
  const auto act_tool = testing::spans_named(spans, "execute_tool doc_search");
  ASSERT_EQ(act_tool.size(), 2u);
  EXPECT_EQ(testing::str_attr(act_tool[1]->span, "gen_ai.tool.call.id").rfind("call_", 0), 0u);
  EXPECT_EQ(testing::str_attr(act_tool[0]->span, "gen_ai.tool.call.id"), "prefetch_1");
}

TEST(RunSpans, ContentIsInTheSpansOnlyWhenAsked) {
  OtlpReceiver rx;
  auto tracer = tracer_to(rx, /*content=*/true);
  auto model = std::make_shared<agents::ScriptedChatModel>(std::vector<std::string>{"Forty-two."});
  auto reg = std::make_shared<tools::ToolRegistry>();
  auto a = agents::Agent::create({.name = "solo", .role = "an oracle"}, model, reg);
  ASSERT_TRUE(a);
  graph::GraphRuntime runtime;
  graph::RunOptions opt;
  const graph::RunTracing tracing{{tracer.get(), {}}, {}};
  opt.trace = &tracing;
  auto r = run_sync<agents::AgentResult>([&]() -> asio::awaitable<Result<agents::AgentResult>> {
    std::vector<agents::Message> none;
    auto op = (*a)->async_run(runtime, "What is six times seven?", std::move(none), opt);
    co_return co_await std::move(op);
  });
  ASSERT_TRUE(r);
  ASSERT_TRUE(tracer->flush(20s));
  auto spans = rx.spans();
  // An agent run on its own is the trace's root.
  EXPECT_EQ(shape(spans),
            "invoke_agent solo\n"
            "  superstep 1\n"
            "    node think\n"
            "      chat scripted\n");
  const auto* chat = testing::find_span(spans, "chat scripted");
  ASSERT_TRUE(chat);
  EXPECT_NE(testing::str_attr(chat->span, "gen_ai.input.messages").find("What is six times seven?"),
            std::string::npos);
  EXPECT_NE(testing::str_attr(chat->span, "gen_ai.output.messages").find("Forty-two."),
            std::string::npos);
}

// A loop that never ends: the recursion cap stops it, and the trace says which cap acted.
TEST(RunSpans, ALoopCapIsAnEventOnTheRunAndTheRunFails) {
  OtlpReceiver rx;
  auto tracer = tracer_to(rx);
  graph::StateGraph g;
  g.add_channel("n", {.default_value = json::value(0)});
  g.add_node("spin", [](const graph::StateView& s, graph::NodeContext&) -> Result<graph::Update> {
    graph::Update u;
    u.set("n", s.get("n").as_int64() + 1);
    return u;
  });
  g.add_edge("START", "spin");
  g.add_conditional_edges("spin",
                          [](const graph::StateView&) { return std::vector<std::string>{"spin"}; },
                          {"spin", "END"});
  graph::GraphLimits lim;
  lim.recursion_limit = 3;
  auto compiled = g.compile(lim);
  ASSERT_TRUE(compiled);
  graph::GraphRuntime runtime;
  graph::RunOptions opt;
  const graph::RunTracing tracing{{tracer.get(), {}}, "spinner"};
  opt.trace = &tracing;
  auto r = run_sync<graph::RunResult>([&]() -> asio::awaitable<Result<graph::RunResult>> {
    auto op = runtime.async_invoke(*compiled, json::object{}, opt);
    co_return co_await std::move(op);
  });
  ASSERT_FALSE(r);
  ASSERT_TRUE(tracer->flush(20s));
  auto spans = rx.spans();
  EXPECT_EQ(shape(spans),
            "invoke_workflow spinner\n"
            "  superstep 1\n"
            "    node spin\n"
            "  superstep 2\n"
            "    node spin\n"
            "  superstep 3\n"
            "    node spin\n");
  const auto* run = testing::find_span(spans, "invoke_workflow spinner");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->span.status, trace::StatusCode::error);
  EXPECT_EQ(testing::str_attr(run->span, "error.type"), "step_limit_exceeded");
  EXPECT_EQ(run->span.status_message, r.error().message);
  ASSERT_EQ(run->span.events.size(), 1u);
  EXPECT_EQ(run->span.events[0].name, "weir.fence.loop_cap");
  ASSERT_EQ(run->span.events[0].attributes.size(), 2u);
  EXPECT_EQ(std::get<std::string>(run->span.events[0].attributes[0].value), "recursion_limit");
}

// Two runs for one admission slot: the second waits, and its span says for how long.
TEST(RunSpans, AnAdmissionWaitIsAnEvent) {
  OtlpReceiver rx;
  auto tracer = tracer_to(rx);
  graph::StateGraph g;
  g.add_channel("x");
  g.add_async_node(
      "wait", [](graph::StateView, graph::NodeContext&) -> asio::awaitable<Result<graph::Update>> {
        asio::steady_timer t(co_await asio::this_coro::executor, 50ms);
        co_await t.async_wait(asio::use_awaitable);
        co_return graph::Update{};
      });
  g.add_edge("START", "wait");
  g.add_edge("wait", "END");
  auto compiled = g.compile();
  ASSERT_TRUE(compiled);
  graph::RuntimeOptions ro;
  ro.max_concurrent_runs = 1;
  graph::GraphRuntime runtime(ro);
  asio::io_context io;
  int done = 0;
  // (The lambda outlives its coroutines; the options are a parameter, one per run.)
  auto task = [&](graph::RunOptions o) -> asio::awaitable<void> {
    auto op = runtime.async_invoke(*compiled, json::object{}, std::move(o));
    auto r = co_await std::move(op);
    EXPECT_TRUE(r);
    ++done;
  };
  const graph::RunTracing tracing[2] = {{{tracer.get(), {}}, "w0"}, {{tracer.get(), {}}, "w1"}};
  for (int i = 0; i < 2; ++i) {
    graph::RunOptions opt;
    opt.trace = &tracing[i];
    asio::co_spawn(io, task(opt), asio::detached);
  }
  io.run();
  ASSERT_EQ(done, 2);
  ASSERT_TRUE(tracer->flush(20s));
  auto spans = rx.spans();
  const auto* second = testing::find_span(spans, "invoke_workflow w1");
  ASSERT_TRUE(second);
  ASSERT_EQ(second->span.events.size(), 1u);
  EXPECT_EQ(second->span.events[0].name, "weir.fence.admission_wait");
  const auto* first = testing::find_span(spans, "invoke_workflow w0");
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->span.events.empty());
}

}  // namespace
}  // namespace weir
