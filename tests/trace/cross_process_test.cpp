// A trace that crosses processes and the command line: a remote-model agent calling weir serve
// (the server continues the agent's trace from its traceparent), `weir run --trace FILE` read
// back by `weir trace`, `weir run --otlp-endpoint` against a receiver that hangs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "../cli/run_weir.hpp"
#include "../serve/http_client.hpp"
#include "otlp_receiver.hpp"
#include "weir/agents/agent.hpp"
#include "weir/agents/openai_model.hpp"
#include "weir/http/otlp.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/runtime/trace_read.hpp"
#include "weir/serve/service.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"

namespace weir {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::OtlpReceiver;

std::shared_ptr<trace::Tracer> tracer_to(const OtlpReceiver& rx, std::string service) {
  http::OtlpOptions h;
  h.endpoint = rx.traces_url();
  auto e = http::make_otlp_exporter(h);
  EXPECT_TRUE(e);
  std::vector<std::unique_ptr<trace::SpanExporter>> ex;
  ex.push_back(std::move(*e));
  trace::TracerOptions o;
  o.service_name = std::move(service);
  o.schedule_delay = 20ms;
  return std::make_shared<trace::Tracer>(o, std::move(ex));
}

// A random-weight model (its text is noise; its tokens are real) with `context` tokens.
fs::path tiny_model(std::int64_t context = 512) {
  auto dir = fs::temp_directory_path() / ("weir-trace-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto path = dir / ("tiny" + std::to_string(context) + ".gguf");
  if (!fs::exists(path)) {
    auto shape = inference::RandomModelShape::tiny();
    shape.context_length = static_cast<std::int32_t>(context);
    auto st = inference::write_random_llama(path, shape, inference::GgmlType::f32, 7);
    EXPECT_TRUE(st) << st.error().message;
  }
  return path;
}

// One trace across two weirs: an agent whose model is `openai:` at a weir serve. The server's
// request span is the child of the agent's chat span, and both count the same tokens.
TEST(CrossProcess, ARemoteModelAgentsTraceContinuesInWeirServe) {
  OtlpReceiver rx;
  auto server_tracer = tracer_to(rx, "weir-serve");
  serve::ServeConfig c;
  c.models.push_back({"tiny", tiny_model()});
  c.port = 0;
  c.kv_cache_bytes = 16u << 20;
  c.ignore_eos = true;
  c.max_num_seqs = 2;
  c.tracer = server_tracer;
  auto svc = serve::Service::start(std::move(c));
  ASSERT_TRUE(svc) << svc.error().message;
  ASSERT_TRUE((*svc)->wait_ready());

  auto agent_tracer = tracer_to(rx, "weir-agent");
  agents::OpenAIModelOptions mo;
  mo.base_url = "http://127.0.0.1:" + std::to_string((*svc)->port()) + "/v1";
  mo.model = "tiny";
  mo.max_retries = 0;
  auto model = agents::OpenAIChatModel::open(mo);
  ASSERT_TRUE(model) << model.error().message;
  auto a = agents::Agent::create({.name = "remote", .role = "a writer", .max_tokens_per_turn = 8},
                                 *model, std::make_shared<tools::ToolRegistry>());
  ASSERT_TRUE(a) << a.error().message;
  graph::GraphRuntime runtime;
  graph::RunOptions opt;
  const graph::RunTracing tracing{{agent_tracer.get(), {}}, {}};
  opt.trace = &tracing;
  asio::io_context io;
  Result<agents::AgentResult> r = Error(Errc::cancelled, "not run");
  auto task = [&]() -> asio::awaitable<void> {
    std::vector<agents::Message> none;
    auto op = (*a)->async_run(runtime, "Say something.", std::move(none), opt);
    r = co_await std::move(op);
  };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(agent_tracer->flush(20s));
  ASSERT_TRUE(server_tracer->flush(20s));
  (*svc)->shutdown(1s);

  auto spans = rx.spans();
  const auto* chat = testing::find_span(spans, "chat openai:tiny");
  const auto* server = testing::find_span(spans, "POST /v1/chat/completions");
  ASSERT_TRUE(chat && server);
  EXPECT_EQ(chat->service, "weir-agent");
  EXPECT_EQ(server->service, "weir-serve");
  EXPECT_EQ(server->span.kind, trace::SpanKind::server);
  EXPECT_EQ(server->span.trace_id, chat->span.trace_id);
  EXPECT_EQ(server->span.parent_span_id, chat->span.span_id);
  EXPECT_EQ(testing::str_attr(chat->span, "gen_ai.provider.name"), "openai");
  // The model as the provider knows it, without weir's "openai:" prefix (as the server reads it).
  EXPECT_EQ(testing::str_attr(chat->span, "gen_ai.request.model"), "tiny");
  EXPECT_EQ(testing::int_attr(server->span, "http.response.status_code"), 200);
  EXPECT_EQ(testing::str_attr(server->span, "gen_ai.response.model"), "tiny");
  EXPECT_EQ(testing::int_attr(server->span, "gen_ai.usage.input_tokens"),
            testing::int_attr(chat->span, "gen_ai.usage.input_tokens"));
  EXPECT_EQ(testing::int_attr(server->span, "gen_ai.usage.output_tokens"), 8);
  EXPECT_EQ(testing::int_attr(chat->span, "gen_ai.usage.output_tokens"), 8);
  // The whole agent run is that one trace.
  const auto* agent = testing::find_span(spans, "invoke_agent remote");
  ASSERT_TRUE(agent);
  EXPECT_EQ(agent->span.trace_id, chat->span.trace_id);
}

// An MCP tool call carries its `tools/call` span's W3C context to the server in params._meta
// (the MCP semantic conventions); the server here answers with the _meta it received.
TEST(CrossProcess, AnMcpToolCallCarriesItsSpanInMeta) {
  OtlpReceiver rx;
  auto tracer = tracer_to(rx, "weir-agent");
  tools::McpServerConfig cfg;
  cfg.name = "fake";
  cfg.command = {"python3", std::string(WEIR_SOURCE_DIR) + "/tests/mcp/fake_server.py"};
  cfg.env = {{"FAKE_META_TOOL", "1"}};
  auto client = tools::McpClient::connect(cfg);
  ASSERT_TRUE(client) << client.error().message;
  asio::io_context io;
  Result<json::object> answer = Error(Errc::cancelled, "not run");
  trace::Span root = tracer->start_span("caller");
  const trace::Context ctx{tracer.get(), root.context()};
  auto task = [&]() -> asio::awaitable<void> {
    auto op = (*client)->async_call_tool("meta", json::object{}, 10s, ctx);
    answer = co_await std::move(op);
  };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  root.end();
  ASSERT_TRUE(answer) << answer.error().message;
  ASSERT_TRUE(tracer->flush(20s));
  const auto spans = rx.spans();
  const auto* call = testing::find_span(spans, "tools/call meta");
  ASSERT_TRUE(call);
  EXPECT_EQ(call->span.kind, trace::SpanKind::client);
  EXPECT_EQ(testing::str_attr(call->span, "mcp.method.name"), "tools/call");
  const std::string sent(answer->at("content").at(0).at("text").as_string());
  EXPECT_EQ(json::parse(sent).at("traceparent").as_string(),
            "00-" + call->span.trace_id.hex() + "-" + call->span.span_id.hex() + "-01")
      << sent;
}

// A request with no traceparent starts a trace; one with an unsampled parent records nothing.
TEST(CrossProcess, WeirServeStartsATraceOrHonoursAnUnsampledParent) {
  OtlpReceiver rx;
  auto tracer = tracer_to(rx, "weir-serve");
  serve::ServeConfig c;
  c.models.push_back({"tiny", tiny_model()});
  c.port = 0;
  c.kv_cache_bytes = 16u << 20;
  c.tracer = tracer;
  auto svc = serve::Service::start(std::move(c));
  ASSERT_TRUE(svc) << svc.error().message;
  ASSERT_TRUE((*svc)->wait_ready());
  http::Client client;
  auto url = http::parse_url("http://127.0.0.1:" + std::to_string((*svc)->port()));
  ASSERT_TRUE(url);
  auto get = [&](std::vector<http::Header> headers) {
    asio::io_context io;
    Result<http::ClientResponse> out = Error(Errc::cancelled, "");
    auto t = [&]() -> asio::awaitable<void> {
      http::ClientRequest rq;
      rq.method = "GET";
      rq.target = "/v1/models";
      rq.headers = headers;
      auto op = client.async_request(*url, std::move(rq));
      out = co_await std::move(op);
    };
    asio::co_spawn(io, t(), asio::detached);
    io.run();
    return out;
  };
  ASSERT_TRUE(get({}));
  ASSERT_TRUE(get({{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}}));
  ASSERT_TRUE(get({{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                   {"tracestate", "vendor=x"}}));
  // Two tracestate headers are one list (W3C: joined in their order, with a comma).
  ASSERT_TRUE(get({{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                   {"tracestate", "a=1"},
                   {"tracestate", "b=2"}}));
  // Two traceparent headers: which parent is meant is unknown, so a new trace starts.
  ASSERT_TRUE(get({{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                   {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}));
  ASSERT_TRUE(tracer->flush(20s));
  (*svc)->shutdown(1s);
  auto spans = rx.spans();
  ASSERT_EQ(spans.size(), 4u);  // the unsampled request recorded nothing
  EXPECT_EQ(spans[2].span.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(spans[2].span.trace_state, "a=1,b=2");
  EXPECT_FALSE(spans[3].span.parent_span_id.valid());
  EXPECT_NE(spans[3].span.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_NE(spans[3].span.trace_id.hex(), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_FALSE(spans[0].span.parent_span_id.valid());
  EXPECT_EQ(spans[1].span.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(spans[1].span.parent_span_id.hex(), "00f067aa0ba902b7");
  EXPECT_EQ(spans[1].span.trace_state, "vendor=x");
  EXPECT_EQ(spans[1].span.name, "GET /v1/models");
}

// A run queued over the runs API continues the trace of the request that queued it: its
// invoke_workflow span is the child of the server's POST /v1/runs span, itself the child of
// the caller's traceparent; the run record names that trace.
TEST(CrossProcess, ARunQueuedOverHttpContinuesTheCallersTrace) {
  OtlpReceiver rx;
  auto tracer = tracer_to(rx, "weir-serve");
  const fs::path dir =
      fs::temp_directory_path() / ("weir-trace-runs-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "count.json") << R"({"name": "count",
 "state": {"n": {"reducer": "sum", "default": 0}}, "input": ["n"], "output": ["n"],
 "nodes": {"one": {"kind": "set", "values": {"n": 1}}, "two": {"kind": "set", "values": {"n": 2}}},
 "edges": [{"from": "START", "to": "one"}, {"from": "one", "to": "two"}, {"from": "two", "to": "END"}]})";
  serve::ServeConfig c;
  c.port = 0;
  c.workflows = dir;
  c.tracer = tracer;
  auto svc = serve::Service::start(std::move(c));
  ASSERT_TRUE(svc) << svc.error().message;
  const std::uint16_t port = (*svc)->port();
  const std::string caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto posted =
      testing_http::call(port, "POST", "/v1/runs", R"({"workflow": "count", "input": {"n": 10}})",
                         "traceparent: " + caller + "\r\n");
  ASSERT_EQ(posted.status, 202) << posted.body;
  const json::object queued = json::parse(posted.body).as_object();
  const std::string id(queued.at("id").as_string());
  json::object run;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    run = json::parse(testing_http::call(port, "GET", "/v1/runs/" + id).body).as_object();
    if (run.at("state") == "succeeded" || run.at("state") == "failed") break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(run.at("state"), json::value("succeeded")) << json::serialize(run);
  EXPECT_EQ(json::serialize(run.at("result")), R"({"n":13})");
  ASSERT_TRUE(tracer->flush(20s));
  (*svc)->shutdown(1s);
  fs::remove_all(dir);

  auto spans = rx.spans();
  const auto* server = testing::find_span(spans, "POST /v1/runs");
  const auto* workflow = testing::find_span(spans, "invoke_workflow count");
  ASSERT_TRUE(server && workflow) << spans.size() << " spans";
  EXPECT_EQ(server->span.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(server->span.parent_span_id.hex(), "00f067aa0ba902b7");
  EXPECT_EQ(workflow->span.trace_id, server->span.trace_id);
  EXPECT_EQ(workflow->span.parent_span_id, server->span.span_id);
  EXPECT_EQ(testing::spans_named(spans, "node ").size(), 2u);
  for (const auto* s : testing::spans_named(spans, "")) {
    if (s->span.name.starts_with("GET /v1/runs")) continue;  // the polls: traces of their own
    EXPECT_EQ(s->span.trace_id, server->span.trace_id) << s->span.name;
  }
  // The record names the request's span: a worker elsewhere would continue the same trace.
  const std::string tp(run.at("traceparent").as_string());
  EXPECT_EQ(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-" + server->span.span_id.hex() + "-01");
}

// weir run --trace FILE, then weir trace FILE: the research crew sample on weir's random-weight
// model (its text is noise; the spans and the tokens are real).
TEST(CrossProcess, WeirRunTraceFileReadsBackAsATreeWithTheRunsTokens) {
  const fs::path file =
      fs::temp_directory_path() / ("weir-trace-cli-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(file);
  const std::string crew =
      (fs::path(WEIR_SOURCE_DIR) / "samples/crews/research_crew.json").string();
  auto run = testing::run_weir_env(
      "WEIR_MODEL=" + tiny_model(4096).string(),
      "run " + crew + " --trace " + file.string() + " --input '{\"topic\": \"BM25\"}'");
  ASSERT_EQ(run.code, 0) << run.err;
  auto tree = testing::run_weir("trace " + file.string());
  ASSERT_EQ(tree.code, 0) << tree.err;
  EXPECT_TRUE(std::regex_search(tree.out, std::regex("^trace [0-9a-f]{32} \\(\\d+ spans, ")))
      << tree.out;
  EXPECT_TRUE(std::regex_search(tree.out,
                                std::regex("\ninvoke_workflow research_crew  [0-9.]+ (µs|ms|s)\n")))
      << tree.out;
  EXPECT_TRUE(std::regex_search(tree.out, std::regex("─ chat \\S+  [0-9.]+ (µs|ms|s)\n")))
      << tree.out;
  EXPECT_NE(tree.out.find("invoke_agent researcher"), std::string::npos);
  EXPECT_NE(tree.out.find("invoke_agent reviewer"), std::string::npos);
  // Tokens: the agents' own turns add up to what the run reports (calls that folded evicted
  // turns into a summary are marked, and counted only in the run's budget, as the run does).
  auto spans = trace::parse_otlp_json_lines(testing::read_text(file), file.string());
  ASSERT_TRUE(spans) << spans.error().message;
  std::int64_t in = 0, out = 0, all = 0, turns = 0;
  for (const auto* s : testing::spans_named(*spans, "chat ")) {
    const std::int64_t i = testing::int_attr(s->span, "gen_ai.usage.input_tokens");
    const std::int64_t o = testing::int_attr(s->span, "gen_ai.usage.output_tokens");
    all += i + o;
    EXPECT_GE(testing::int_attr(s->span, "weir.kv.blocks"), 1);
    EXPECT_NE(s->span.attribute("weir.engine.prefill_ms"), nullptr);
    if (s->span.attribute("weir.chat.purpose")) continue;
    in += i;
    out += o;
    ++turns;
  }
  auto result = json::parse(run.out.substr(run.out.find('{')));
  EXPECT_EQ(in, result.at("prompt_tokens").to_number<std::int64_t>());
  EXPECT_EQ(out, result.at("completion_tokens").to_number<std::int64_t>());
  EXPECT_EQ(turns, result.at("iterations").to_number<std::int64_t>());
  const auto* root = testing::find_span(*spans, "invoke_workflow research_crew");
  ASSERT_TRUE(root);
  EXPECT_EQ(testing::int_attr(root->span, "weir.run.tokens"), all);
  // Bad input is refused with the line.
  const auto bad = testing::temp_file("bad.jsonl", "{\"resourceSpans\": 3}\n");
  auto refused = testing::run_weir("trace " + bad.string());
  EXPECT_EQ(refused.code, 1);
  EXPECT_EQ(refused.err, "weir trace: " + bad.string() + ":1: /resourceSpans: expected an array\n");
  fs::remove(bad);
  fs::remove(file);
}

// A workflow's tool nodes are tool calls like an agent's: each records an `execute_tool <name>`
// span under its node, named as the workflow's "tools" name it (the tools layer runs them all,
// the built-ins calculator, lorem and files included).
TEST(CrossProcess, WorkflowToolNodesRecordExecuteToolSpans) {
  const fs::path dir =
      fs::temp_directory_path() / ("weir-trace-tools-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "note.txt") << "hello";
  const auto flow = testing::temp_file("tools.json",
                                       R"({"name": "tools", "state": {"x": {}, "y": {}, "z": {}},
          "tools": {"calc": {"builtin": "calculator"}, "text": {"builtin": "lorem"},
                    "fs": {"builtin": "files", "root": ")" +
                                           dir.string() + R"("}},
          "nodes": {"sq": {"kind": "tool", "tool": "calc", "args": {"expression": "3*3"}, "output": "x"},
                    "lo": {"kind": "tool", "tool": "text", "args": {"bytes": 10}, "output": "y"},
                    "rd": {"kind": "tool", "tool": "fs", "args": {"op": "read", "path": "note.txt"}, "output": "z"}},
          "edges": [{"from": "START", "to": "sq"}, {"from": "sq", "to": "lo"}, {"from": "lo", "to": "rd"},
                    {"from": "rd", "to": "END"}]})");
  const fs::path file = dir / "t.jsonl";
  auto run = testing::run_weir("run " + flow.string() + " --trace " + file.string());
  ASSERT_EQ(run.code, 0) << run.err;
  auto spans = trace::parse_otlp_json_lines(testing::read_text(file), file.string());
  ASSERT_TRUE(spans) << spans.error().message;
  for (const auto& [tool, node] : std::vector<std::pair<std::string, std::string>>{
           {"calc", "node sq"}, {"text", "node lo"}, {"fs", "node rd"}}) {
    const auto* s = testing::find_span(*spans, "execute_tool " + tool);
    ASSERT_TRUE(s) << tool;
    EXPECT_EQ(testing::str_attr(s->span, "gen_ai.operation.name"), "execute_tool");
    EXPECT_EQ(testing::str_attr(s->span, "gen_ai.tool.name"), tool);
    EXPECT_GT(testing::int_attr(s->span, "weir.tool.arguments_bytes"), 0);
    EXPECT_GT(testing::int_attr(s->span, "weir.tool.output_bytes"), 0);
    const auto* parent = testing::parent_of(*spans, *s);
    ASSERT_TRUE(parent) << tool;
    EXPECT_EQ(parent->span.name, node);
  }
  fs::remove(flow);
  fs::remove_all(dir);
}

// weir batch --trace FILE: each line's run is a trace of its own (invoke_workflow at its root).
TEST(CrossProcess, WeirBatchTracesEachLinesRun) {
  const auto flow = testing::temp_file("batched.json", R"({"name": "batched",
          "state": {"n": {"reducer": "sum", "default": 0}}, "input": ["n"],
          "nodes": {"a": {"kind": "set", "values": {"n": 1}}},
          "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
  const auto inputs = testing::temp_file("batched.jsonl", "{\"n\": 1}\n{\"n\": 2}\n{\"n\": 3}\n");
  const fs::path file =
      fs::temp_directory_path() / ("weir-trace-batch-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(file);
  auto run = testing::run_weir("batch " + flow.string() + " --inputs " + inputs.string() +
                               " --trace " + file.string());
  ASSERT_EQ(run.code, 0) << run.err;
  auto spans = trace::parse_otlp_json_lines(testing::read_text(file), file.string());
  ASSERT_TRUE(spans) << spans.error().message;
  std::set<std::string> traces;
  for (const auto& s : *spans) {
    if (s.span.name != "invoke_workflow batched") continue;
    EXPECT_FALSE(s.span.parent_span_id.valid());
    traces.insert(s.span.trace_id.hex());
  }
  EXPECT_EQ(traces.size(), 3u);
  fs::remove(file);
  fs::remove(inputs);
  fs::remove(flow);
}

// A run refused before it starts (an input the workflow does not take) records nothing, so it
// leaves no empty --trace file behind; a file that was there already is kept as it was.
TEST(CrossProcess, ARefusedStartLeavesNoTraceFile) {
  const auto flow = testing::temp_file("refused.json", R"({"name": "refused", "state": {"n": {}},
          "input": ["n"], "nodes": {"a": {"kind": "set", "values": {"n": 1}}},
          "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
  const fs::path file =
      fs::temp_directory_path() / ("weir-trace-refused-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(file);
  auto run =
      testing::run_weir("run " + flow.string() + " --input '{\"zz\": 1}' --trace " + file.string());
  EXPECT_EQ(run.code, 1) << run.err;
  EXPECT_NE(run.err.find("--input sets 'zz', which refused does not take as input"),
            std::string::npos)
      << run.err;
  EXPECT_FALSE(fs::exists(file)) << "an empty trace file was left behind";
  std::ofstream(file) << "earlier\n";
  run =
      testing::run_weir("run " + flow.string() + " --input '{\"zz\": 1}' --trace " + file.string());
  EXPECT_EQ(run.code, 1) << run.err;
  EXPECT_EQ(testing::read_text(file), "earlier\n");
  fs::remove(file);
  fs::remove(flow);
}

// A receiver that accepts and never answers: the run finishes as it would untraced, the spans
// are dropped and counted, and the command still exits promptly.
TEST(CrossProcess, AHangingReceiverLeavesTheRunUnaffected) {
  OtlpReceiver rx(OtlpReceiver::Mode::hang);
  const auto flow = testing::sample("map_reduce.json");
  auto plain = testing::run_weir("run " + flow.string());
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto t0 = std::chrono::steady_clock::now();
  auto traced = testing::run_weir_env("OTEL_BSP_SCHEDULE_DELAY=10",
                                      "run " + flow.string() + " --otlp-endpoint " + rx.base_url());
  const auto spent = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(traced.code, 0) << traced.err;
  EXPECT_EQ(traced.out, plain.out);  // the same result
  EXPECT_GE(rx.requests(), 1);
  EXPECT_NE(traced.err.find("trace spans were dropped (otlp " + rx.traces_url() + ")"),
            std::string::npos)
      << traced.err;
  EXPECT_LT(spent, 30s);  // the flush at exit gives up after 3 s
}

// weir serve stopped while its collector hangs: the flush at exit keeps the documented bound
// (3 s, as weir run's) and says what it dropped; it used to be the tracer's own 5 s, silently.
TEST(CrossProcess, WeirServeFlushesAtExitLikeWeirRun) {
  OtlpReceiver rx(OtlpReceiver::Mode::hang);
  const fs::path dir =
      fs::temp_directory_path() / ("weir-trace-serve-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(testing::sample("map_reduce.json"), dir / "map_reduce.json",
                fs::copy_options::overwrite_existing);
  const fs::path err = dir / "serve.err";
  // Start, wait for "ready", one request (one span), SIGTERM, wait.
  const std::string script =
      "OTEL_BSP_SCHEDULE_DELAY=10 " + std::string(WEIR_BIN_DIR) + "/weir serve --workflows " +
      dir.string() + " --port 0 --otlp-endpoint " + rx.base_url() + " 2>" + err.string() +
      " & S=$!; for i in $(seq 300); do grep -q 'ready' " + err.string() +
      " && break; sleep 0.1; done; P=$(sed -n 's/.*listening on "
      "http:\\/\\/[^:]*:\\([0-9]*\\).*/\\1/p' " +
      err.string() +
      "); curl -s -o /dev/null http://127.0.0.1:$P/v1/models; sleep 0.5; kill -TERM $S; "
      "wait $S; echo $?";
  std::ofstream(dir / "stop.sh") << script << "\n";
  FILE* p = ::popen(("bash " + (dir / "stop.sh").string()).c_str(), "r");
  ASSERT_TRUE(p);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  const std::string text = testing::read_text(err);
  EXPECT_EQ(out, "0\n") << text;
  EXPECT_GE(rx.requests(), 1) << text;
  EXPECT_NE(text.find("trace spans were dropped (otlp " + rx.traces_url() + ")"), std::string::npos)
      << text;
  fs::remove_all(dir);
}

// weir mcp --trace: each tools/call is a server span under the client's params._meta
// traceparent, with the tool's span and a workflow tool's run under it; a call without one
// starts a trace, and a failed tool marks its span (issue 31: weir mcp took no tracing flags).
TEST(CrossProcess, WeirMcpTracesEachCallUnderTheClientsSpan) {
  const fs::path dir = fs::temp_directory_path() / ("weir-mcp-trace-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path in = dir / "in.jsonl", file = dir / "trace.jsonl";
  fs::remove(file);
  std::ofstream(in)
      << R"({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})"
      << "\n"
      << R"({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "greet", "arguments": {"who": "w"}, "_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}})"
      << "\n"
      << R"({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "calculator", "arguments": {"expression": "1/"}}})"
      << "\n"
      << R"({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "calculator", "arguments": {"expression": "2+2"}, "_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}}})"
      << "\n";
  const std::string workflows = std::string(WEIR_SOURCE_DIR) + "/tests/mcp/workflows";
  auto r = testing::run_weir("mcp --tools calculator --workflows " + workflows + " --trace " +
                             file.string() + " < " + in.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Hello, w!"), std::string::npos) << r.out;
  std::ifstream f(file);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto spans = trace::parse_otlp_json_lines(text, file.string());
  ASSERT_TRUE(spans) << spans.error().message;
  const auto* call = testing::find_span(*spans, "tools/call greet");
  ASSERT_TRUE(call) << text;
  EXPECT_EQ(call->span.kind, trace::SpanKind::server);
  EXPECT_EQ(call->span.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(call->span.parent_span_id.hex(), "00f067aa0ba902b7");
  EXPECT_EQ(testing::str_attr(call->span, "mcp.method.name"), "tools/call");
  EXPECT_EQ(testing::str_attr(call->span, "gen_ai.tool.name"), "greet");
  EXPECT_EQ(testing::str_attr(call->span, "jsonrpc.request.id"), "2");
  const auto* tool = testing::find_span(*spans, "execute_tool greet");
  ASSERT_TRUE(tool);
  EXPECT_EQ(tool->span.parent_span_id.hex(), call->span.span_id.hex());
  const auto* run = testing::find_span(*spans, "invoke_workflow greet");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->span.parent_span_id.hex(), tool->span.span_id.hex());
  EXPECT_EQ(run->span.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  const auto* failed = testing::find_span(*spans, "tools/call calculator");
  ASSERT_TRUE(failed);
  EXPECT_FALSE(failed->span.parent_span_id.valid());  // no traceparent: a trace of its own
  EXPECT_NE(failed->span.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(failed->span.status, trace::StatusCode::error);
  // An unsampled caller (-00): nothing of that call is recorded, the tool's span included.
  int calculator_tools = 0;
  for (const auto& rs : *spans) {
    EXPECT_NE(rs.span.trace_id.hex(), "0af7651916cd43dd8448eb211c80319c") << rs.span.name;
    if (rs.span.name == "execute_tool calculator") ++calculator_tools;
  }
  EXPECT_EQ(calculator_tools, 1) << text;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weir
