// Workflow files run through the agents layer (agents::build_workflow): expressions, the tools
// layer's built-ins in tool nodes, and the sections the agents layer owns.
#include "weir/agents/workflow.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "weir/graph/workflow.hpp"
#include "weir/runtime/artifact_store.hpp"

namespace weir::agents {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

class WorkflowRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weir_agents_wf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    auto store = ArtifactStore::open({dir_ / "artifacts"});
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }

  // Loads `text` as dir_/flow.json (the graph layer's checks only).
  graph::WorkflowLoad load(const std::string& text) {
    return graph::load_workflow_text(text, dir_ / "flow.json");
  }

  // Loads, builds with the agents layer and runs once with `input`.
  Result<graph::RunResult> run(const std::string& text, json::object input = {},
                               graph::RunOptions options = {}) {
    auto l = load(text);
    if (!l.ok()) return Error(Errc::invalid_workflow, l.report());
    spec_ = std::move(*l.spec);
    WorkflowServices services;
    services.artifacts = store_.get();
    auto built = build_workflow(spec_, services);
    if (!built) return std::move(built).error();
    graph::RuntimeOptions ro = built->runtime;
    ro.artifacts = store_.get();
    graph::GraphRuntime rt(ro);
    asio::io_context io;
    Result<graph::RunResult> out = Error(Errc::cancelled, "not run");
    auto task = [&]() -> asio::awaitable<void> {
      out = co_await rt.async_invoke(built->graph, std::move(input), options);
    };
    asio::co_spawn(io, task(), asio::detached);
    io.run();
    return out;
  }

  // A one-node workflow whose set node writes {"$expr": expr} to channel "out".
  static std::string set_expr(const std::string& expr) {
    return R"({"name": "e", "state": {"n": {"default": 6}, "items": {"default": [1, 2, 3]},
      "out": {}},
      "nodes": {"calc": {"kind": "set", "values": {"out": {"$expr": )" +
           json::serialize(json::value(expr)) + R"(}}}},
      "edges": [{"from": "START", "to": "calc"}, {"from": "calc", "to": "END"}]})";
  }

  static std::string error_of(const Result<graph::RunResult>& r) {
    return r ? "ok: " + json::serialize(r->state) : r.error().to_string();
  }

  fs::path dir_;
  std::unique_ptr<ArtifactStore> store_;
  graph::WorkflowSpec spec_;
};

// --- expressions: one calculator, with its fences -------------------------------------------

TEST_F(WorkflowRun, ExpressionsAreArithmeticOverChannels) {
  auto r = run(set_expr("(n + 4) * 2 - n / 3 + len(items) + 2^3"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->state.at("out").as_int64(), 29);
  EXPECT_EQ(error_of(run(set_expr("n + * 2"))),
            "invalid_argument: node 'calc': expression \"n + * 2\": unexpected '*' at column 5");
}

TEST_F(WorkflowRun, ADeeplyNestedExpressionIsAnErrorNotACrash) {
  // 200 KB of parentheses once overflowed the stack of the graph layer's own evaluator.
  const std::string deep = std::string(100000, '(') + "1" + std::string(100000, ')');
  EXPECT_EQ(error_of(run(set_expr(deep))),
            "invalid_argument: node 'calc': expression \"" + std::string(60, '(') +
                "...\": the expression is 200001 bytes; the limit is 4096");
  // Within the length limit, the nesting limit holds.
  const std::string nested = std::string(100, '(') + "1" + std::string(100, ')');
  EXPECT_EQ(error_of(run(set_expr(nested))),
            "invalid_argument: node 'calc': expression \"" + std::string(60, '(') +
                "...\": the expression nests deeper than 64 levels at column 65");
}

TEST_F(WorkflowRun, MalformedNumbersAreErrors) {
  // "." threw std::invalid_argument out of std::stod; "1.2.3" evaluated to 1.2.
  EXPECT_EQ(error_of(run(set_expr("."))),
            "invalid_argument: node 'calc': expression \".\": malformed number '.' at column 1");
  EXPECT_EQ(error_of(run(set_expr("1.2.3"))),
            "invalid_argument: node 'calc': expression \"1.2.3\": unexpected '.' at column 4");
  EXPECT_EQ(error_of(run(set_expr("n / (n - 6)"))),
            "invalid_argument: node 'calc': expression \"n / (n - 6)\": division by zero at "
            "column 3");
}

// --- the built-in tools in tool nodes: the tools layer's, with its fences ------------------

TEST_F(WorkflowRun, TheCalculatorWritesNumbersThatReducersAdd) {
  auto r = run(R"J({"name": "m", "limits": {"max_concurrency": 4},
    "state": {"numbers": {"default": [1, 2, 3, 4]}, "total": {"reducer": "sum", "default": 0},
              "mean": {}},
    "tools": {"calc": {"builtin": "calculator"}},
    "nodes": {"fan": {"kind": "map", "over": "numbers", "node": "square"},
              "square": {"kind": "tool", "tool": "calc", "args": {"expression": "{{item}} ^ 2"},
                         "output": "total"},
              "join": {"kind": "set", "values": {"mean": {"$expr": "total / len(numbers)"}}}},
    "edges": [{"from": "START", "to": "fan"}, {"from": "square", "to": "join"},
              {"from": "join", "to": "END"}]})J");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->state.at("total").as_int64(), 30);
  EXPECT_EQ(json::serialize(r->state.at("mean")), "7.5E0");
}

TEST_F(WorkflowRun, LoremAndSleepAreTools) {
  const std::string flow = R"({"name": "d",
    "state": {"bytes": {}, "doc": {}, "slept": {}, "size": {}},
    "tools": {"gen": {"builtin": "lorem"}, "wait": {"builtin": "sleep"}},
    "nodes": {"gen": {"kind": "tool", "tool": "gen", "args": {"bytes": "{{state.bytes}}"},
                      "output": "doc"},
              "wait": {"kind": "tool", "tool": "wait", "args": {"ms": 5}, "output": "slept"},
              "size": {"kind": "set", "values": {"size": "{{state.doc.bytes}}"}}},
    "edges": [{"from": "START", "to": "gen"}, {"from": "gen", "to": "wait"},
              {"from": "wait", "to": "size"}, {"from": "size", "to": "END"}]})";
  // 100 KB is over the tool's output cap (what a model sees), but a node gets it whole: the
  // graph's payload fence moves it to the artifact store and the channel holds its reference.
  auto r = run(flow, json::object{{"bytes", 100000}});
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->state.at("slept").as_int64(), 5);
  EXPECT_EQ(r->state.at("size").to_number<std::int64_t>(), 100000);
  const auto ref = ArtifactRef::from_json(r->state.at("doc"));
  ASSERT_TRUE(ref) << json::serialize(r->state.at("doc"));
  auto text = store_->get(ref->id);
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(text->size(), 100000u);
  EXPECT_EQ(text->substr(0, 10), "weir holds");
  // A small output stays inline.
  auto small = run(flow, json::object{{"bytes", 10}});
  ASSERT_TRUE(small) << small.error().to_string();
  EXPECT_EQ(small->state.at("doc"), "weir holds");
  // Arguments are checked against the tool's schema like every tool call.
  EXPECT_EQ(error_of(run(flow, json::object{{"bytes", -1}})),
            "invalid_argument: node 'gen': gen: /bytes: -1 is less than the minimum 0");
}

TEST_F(WorkflowRun, ACancelledRunStopsASleepingToolNode) {
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  graph::RunOptions o;
  o.cancel = cancel;
  std::thread canceller([cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel->store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run(R"({"name": "s", "state": {"slept": {}},
    "tools": {"wait": {"builtin": "sleep"}},
    "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": 60000}, "output": "slept"}},
    "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "END"}]})",
               {}, o);
  canceller.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::cancelled)) << r.error().to_string();
  EXPECT_LT(took, std::chrono::seconds(30));  // not the minute it was asked to sleep
}

// A subgraph runs as a child run: the parent's cancellation reaches its nodes too (the child
// once had no cancel flag, so a sleeping node in a subgraph slept on after weir cancel).
TEST_F(WorkflowRun, ACancelledRunStopsASleepingNodeInASubgraph) {
  std::ofstream(dir_ / "child.json") << R"({"name": "child", "state": {"slept": {}},
    "tools": {"wait": {"builtin": "sleep"}},
    "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": 60000}, "output": "slept"}},
    "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "END"}]})";
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  graph::RunOptions o;
  o.cancel = cancel;
  std::thread canceller([cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel->store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run(R"({"name": "parent", "state": {"slept": {}},
    "nodes": {"sub": {"kind": "subgraph", "path": "child.json"}},
    "edges": [{"from": "START", "to": "sub"}, {"from": "sub", "to": "END"}]})",
               {}, o);
  canceller.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::cancelled)) << r.error().to_string();
  EXPECT_LT(took, std::chrono::seconds(30));  // not the minute it was asked to sleep
}

// --- the sections the agents and tools layers own: parsed by them, positioned ---------------

// weir run loads a file with agents::workflow_checks(): the sections' problems come with their
// line and column like the graph's own, from the readers that build them.
TEST_F(WorkflowRun, TheSectionsOfTheAgentsLayerAreCheckedWhenTheFileIsLoaded) {
  const std::string text = R"J({"name": "s", "state": {"counter": {}, "items": {}, "out": {}},
 "models": {"far": {"provider": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m",
                    "timeout_ms": 0, "max_retries": 500, "strem": true},
            "near": {"path": "m.gguf", "engine": {"kv_cache_type": "q8", "max_model_len": 8}}},
 "tools": {"calc": {"builtin": "calculater"}, "docs": {"builtin": "doc_search"},
           "slow": {"builtin": "sleep", "timeout_ms": -1}},
 "mcp_servers": {"fs": {"command": ["npx"], "headers": {"A": "b"}, "max_concurrency": 99999}},
 "agents": {"helper": {"model": "farr", "tools": ["clac", "fs/read", "fs/*"], "max_iter": 0}},
 "nodes": {"a": {"kind": "set", "values": {"counter": {"$expr": "countr + len(itms) * (2"}}}},
 "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})J";
  auto r = graph::load_workflow_text(text, dir_ / "flow.json", workflow_checks());
  ASSERT_FALSE(r.ok());
  std::vector<std::string> got;
  for (const auto& d : r.diagnostics) got.push_back(d.to_string().substr(dir_.string().size() + 1));
  EXPECT_EQ(got,
            (std::vector<std::string>{
                "flow.json:3:67: /models/far/strem: unknown key 'strem'; did you mean 'stream'?",
                "flow.json:3:53: /models/far/max_retries: must be at most 100, got 500",
                "flow.json:3:35: /models/far/timeout_ms: must be at least 1, got 0",
                "flow.json:4:91: /models/near/engine/max_model_len: must be at least 16, got 8",
                "flow.json:4:68: /models/near/engine/kv_cache_type: expected \"f32\", "
                "\"f16\" or \"q8_0\", got \"q8\"",
                "flow.json:5:32: /tools/calc/builtin: unknown builtin tool 'calculater'; did "
                "you mean 'calculator'?",
                "flow.json:5:55: /tools/docs: the doc_search tool needs a \"root\" folder "
                "(relative to this file)",
                "flow.json:6:55: /tools/slow/timeout_ms: must be at least 1, got -1",
                "flow.json:7:56: /mcp_servers/fs/headers: \"headers\" go with a \"url\" "
                "server (a server weir starts gets \"env\")",
                "flow.json:7:87: /mcp_servers/fs/max_concurrency: must be at most 4096, got "
                "99999",
                "flow.json:8:23: /agents/helper: missing required key 'role'",
                "flow.json:8:91: /agents/helper/max_iter: must be at least 1, got 0",
                "flow.json:8:33: /agents/helper/model: unknown model 'farr'; did you mean "
                "'far'?",
                "flow.json:8:51: /agents/helper/tools/0: unknown tool 'clac'; did you mean "
                "'calc'? (an MCP server's tool is \"server/tool\")",
                "flow.json:9:65: /nodes/a/values/counter/$expr: expression \"countr + "
                "len(itms) * (2\": unknown channel 'countr'; did you mean 'counter'?",
                "flow.json:9:65: /nodes/a/values/counter/$expr: expression \"countr + "
                "len(itms) * (2\": unknown channel 'itms'; did you mean 'items'?",
                "flow.json:9:65: /nodes/a/values/counter/$expr: expression \"countr + "
                "len(itms) * (2\": missing ')' for the '(' at column 22",
            }));
}

// A workflow's crews are read as crew files are, when the file is loaded (`weir validate`):
// each problem at its place, and a crew node's inputs must be inputs its crew has.
TEST_F(WorkflowRun, ACrewsProblemsAreFoundWhenTheFileIsLoaded) {
  const std::string text =
      R"J({"name": "s", "state": {"messages": {"reducer": "messages"}, "out": {}},
 "crews": {"c": {"agents": [{"name": "a", "role": "r", "goal": "g", "tools": ["nope"]}],
                 "tasks": [{"name": "t", "description": "on {{topic}}", "agent": "zed",
                            "prefetch": [{"tool": "nosuch/x"}]}]},
           "d": 5, "e": {"kind": "group_chat", "agents": []}},
 "nodes": {"run": {"kind": "crew", "crew": "c", "messages": "messages", "output": "out",
                   "inputs": {"topik": "x"}, "chat_input": "topic"}},
 "edges": [{"from": "START", "to": "run"}, {"from": "run", "to": "END"}]})J";
  auto r = graph::load_workflow_text(text, dir_ / "flow.json", workflow_checks());
  ASSERT_FALSE(r.ok());
  std::vector<std::string> got;
  for (const auto& d : r.diagnostics) got.push_back(d.to_string().substr(dir_.string().size() + 1));
  EXPECT_EQ(got, (std::vector<std::string>{
                     "flow.json:2:79: /crews/c/agents/0/tools/0: agent 'a' names unknown tool "
                     "'nope' (the crew's \"tools\": none)",
                     "flow.json:4:51: /crews/c/tasks/0/prefetch/0/tool: task 't' names tool "
                     "'nosuch/x' of MCP server 'nosuch', which the crew does not have (its "
                     "\"mcp_servers\": none)",
                     "flow.json:3:82: /crews/c/tasks/0/agent: task 't' names unknown agent 'zed' "
                     "(its agents: a)",
                     "flow.json:5:17: /crews/d: expected a crew object, got an integer",
                     "flow.json:5:34: /crews/e/kind: a workflow's crew is a crew, got kind "
                     "\"group_chat\"",
                     "flow.json:7:40: /nodes/run/inputs/topik: crew 'c' has no input 'topik' (its "
                     "inputs: topic)",
                 }));
}

// A crew node may leave out "model" only when the file declares one model (or none: --model);
// with two, `weir validate` finds it at the node (the build found it before, without a place).
TEST_F(WorkflowRun, ACrewNodeWithoutAModelInAFileOfTwoIsFoundWhenTheFileIsLoaded) {
  const std::string text =
      R"J({"name": "s", "state": {"out": {}},
 "models": {"a": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "b": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}},
 "crews": {"c": {"agents": [{"name": "w", "role": "r", "goal": "g"}],
                 "tasks": [{"name": "t", "description": "write", "agent": "w"}]}},
 "nodes": {"run": {"kind": "crew", "crew": "c", "output": "out"}},
 "edges": [{"from": "START", "to": "run"}, {"from": "run", "to": "END"}]})J";
  auto r = graph::load_workflow_text(text, dir_ / "flow.json", workflow_checks());
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 1u) << r.report();
  EXPECT_EQ(r.diagnostics[0].to_string().substr(dir_.string().size() + 1),
            "flow.json:6:19: /nodes/run: a crew node needs a \"model\" when the file declares 2 "
            "models (a, b)");
  std::string named = text;
  named.replace(named.find(R"("crew": "c", "output")"), 21,
                R"("crew": "c", "model": "b", "output")");
  EXPECT_TRUE(graph::load_workflow_text(named, dir_ / "flow.json", workflow_checks()).ok());
}

// A file loaded without them (graph::load_workflow alone) meets the same readers when it is
// built: the same problems, with their pointers.
TEST_F(WorkflowRun, ASpecLoadedWithoutTheChecksIsCheckedWhenItIsBuilt) {
  EXPECT_EQ(error_of(run(R"({"name": "b", "state": {"out": {}},
    "models": {"far": {"provider": "openai", "base_url": "ftp://x", "model": "m"}},
    "tools": {"calc": {"builtin": "calculator", "rate_per_minute": -5}},
    "nodes": {"a": {"kind": "tool", "tool": "calc", "args": {"expression": "1"}, "output": "out"}},
    "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})")),
            "invalid_workflow: " + (dir_ / "flow.json").string() +
                ": /tools/calc/rate_per_minute: must be at least 0, got -5\n" +
                (dir_ / "flow.json").string() +
                ": /models/far/base_url: expected an http:// or https:// URL such as "
                "\"http://127.0.0.1:8080/v1\"");
}

// A remote model's base_url is read by the parser its client uses, and its model must be named:
// what the client would refuse at the first call (breaking pass: `weir validate` said ok) is a
// positioned error when the file is read.
TEST_F(WorkflowRun, ARemoteModelsUrlAndNameAreCheckedWhenTheFileIsRead) {
  const std::string err = error_of(run(R"({"name": "u", "state": {"out": {}},
    "models": {"far": {"provider": "openai", "base_url": ["http://[::1/v1", "http://127.0.0.1:99999/v1"], "model": ""}},
    "nodes": {"a": {"kind": "set", "values": {"out": 1}}},
    "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})"));
  EXPECT_NE(err.find(": /models/far/base_url/0: "), std::string::npos) << err;
  EXPECT_NE(err.find("unclosed '['"), std::string::npos) << err;
  EXPECT_NE(err.find(": /models/far/base_url/1: "), std::string::npos) << err;
  EXPECT_NE(err.find("port must be 1..65535"), std::string::npos) << err;
  EXPECT_NE(err.find(": /models/far/model: expected the model's name as its server knows it"),
            std::string::npos)
      << err;
}

// An MCP server's url, headers and environment are checked where the file is read, by the rules
// the client applies when it connects (breaking pass break-doors 3 and 4: `weir validate` said
// ok; "A=B" became a variable A, a NUL cut a value short). A timeout past 30 days is refused
// (a deadline computed from 2^63 ms overflowed the clock).
TEST_F(WorkflowRun, AnMcpServersUrlHeadersAndEnvironmentAreCheckedWhenTheFileIsRead) {
  const std::string err = error_of(run(R"({"name": "m", "state": {"out": {}},
    "models": {"far": {"provider": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m",
                       "connect_timeout_ms": 9223372036854775807}},
    "mcp_servers": {
      "web": {"url": "http://127.0.0.1:99999/mcp", "headers": {"X": "a\r\nInjected: 1", "Host": "h"},
              "headers_env": {"x y": "KEY"}},
      "local": {"command": ["python3", "a\u0000b"], "env": {"A=B": "x", "C": "x\u0000y", "": "e"},
                "timeout_ms": 9999999999999}},
    "nodes": {"a": {"kind": "set", "values": {"out": 1}}},
    "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})"));
  for (const char* says :
       {": /models/far/connect_timeout_ms: must be at most 2592000000 (30 days), got "
        "9223372036854775807",
        ": /mcp_servers/web/url: invalid URL 'http://127.0.0.1:99999/mcp': port must be "
        "1..65535 (the server's MCP endpoint)",
        ": /mcp_servers/web/headers/X: header 'X' holds a line break or NUL",
        ": /mcp_servers/web/headers/Host: header 'Host' is set by weir from the request",
        ": /mcp_servers/web/headers_env/x y: header name 'x y' is not an HTTP token",
        ": /mcp_servers/local/command/1: holds a NUL byte, which would cut the argument short",
        ": /mcp_servers/local/env/A=B: environment variable name 'A=B' holds '=', which ends a "
        "name",
        ": /mcp_servers/local/env/C: environment variable 'C' holds a NUL byte, which would "
        "cut its value short",
        ": /mcp_servers/local/env/: an environment variable needs a name",
        ": /mcp_servers/local/timeout_ms: must be at most 2592000000 (30 days), got "
        "9999999999999"})
    EXPECT_NE(err.find(says), std::string::npos) << says << "\nin:\n" << err;
}

// The second breaking pass (break39 B1-B7): headers given twice across headers and headers_env,
// headers MCP's client sets itself, control characters in a header or a URL, env on a url
// server, an empty program, a NUL in cwd, a bad variable name in headers_env; and a key that
// holds ESC is shown escaped, so that a message cannot drive the terminal.
TEST_F(WorkflowRun, AnMcpServersHeadersAreEachGivenOnceAndNotTheClients) {
  const std::string err = error_of(run(R"({"name": "m", "state": {"out": {}},
    "mcp_servers": {
      "web": {"url": "http://127.0.0.1:1/mcp\u001b[31m", "env": {"A": "1"}},
      "two": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer a", "X-Note": "a\u001bb",
              "Mcp-Session-Id": "deadbeef", "X\u001b]0;pwned\u0007": "1"},
              "headers_env": {"authorization": "TOKEN", "X-Other": "A=B"}},
      "local": {"command": [""], "cwd": "/tmp\u0000/x"}},
    "nodes": {"a": {"kind": "set", "values": {"out": 1}}},
    "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})"));
  for (const char* says :
       {": /mcp_servers/web/url: invalid URL 'http://127.0.0.1:1/mcp\\x1b[31m': it holds a "
        "control character (byte 0x1b)",
        ": /mcp_servers/web/env: \"env\" goes with a \"command\" server",
        ": /mcp_servers/two/headers/X-Note: header 'X-Note' holds a control character",
        ": /mcp_servers/two/headers/Mcp-Session-Id: header 'Mcp-Session-Id' is set by weir's "
        "MCP client; leave it out",
        ": /mcp_servers/two/headers/X\\x1b]0;pwned\\x07: header name 'X\\x1b]0;pwned\\x07' is "
        "not an HTTP token",
        ": /mcp_servers/two/headers_env/authorization: header 'authorization' is given twice "
        "(names are case-insensitive)",
        ": /mcp_servers/two/headers_env/X-Other: environment variable name 'A=B' holds '='",
        ": /mcp_servers/local/command/0: the program's name is empty",
        ": /mcp_servers/local/cwd: holds a NUL byte"})
    EXPECT_NE(err.find(says), std::string::npos) << says << "\nin:\n" << err;
  EXPECT_EQ(err.find('\x1b'), std::string::npos) << "a raw ESC reached the message";
}

// A workflow's tool is registered under its own name: two `files` tools on two folders are two
// tools (the second once silently became the first).
TEST_F(WorkflowRun, TwoToolsOfOneBuiltInAreTwoTools) {
  fs::create_directories(dir_ / "a");
  fs::create_directories(dir_ / "b");
  std::ofstream(dir_ / "a" / "x.txt") << "from a";
  std::ofstream(dir_ / "b" / "x.txt") << "from b";
  auto r = run(R"({"name": "two", "state": {"one": {}, "two": {}},
    "tools": {"left": {"builtin": "files", "root": "a"}, "right": {"builtin": "files", "root": "b"}},
    "nodes": {"l": {"kind": "tool", "tool": "left", "args": {"op": "read", "path": "x.txt"}, "output": "one"},
              "r": {"kind": "tool", "tool": "right", "args": {"op": "read", "path": "x.txt"}, "output": "two"}},
    "edges": [{"from": "START", "to": "l"}, {"from": "l", "to": "r"}, {"from": "r", "to": "END"}]})");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->state.at("one"), "from a");
  EXPECT_EQ(r->state.at("two"), "from b");
}

// A tool entry's settings are applied, not only checked (they once were accepted and ignored).
// The tool's timeout_ms applies, and the sleep stops with it: the run ends with its
// tool_timeout, not after the sleep it gave up on (it waited the whole minute out).
TEST_F(WorkflowRun, AToolEntrysSettingsApply) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of(run(R"({"name": "t", "state": {"slept": {}},
    "tools": {"wait": {"builtin": "sleep", "timeout_ms": 100}},
    "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": 60000}, "output": "slept"}},
    "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "END"}]})")),
            "tool_timeout: node 'nap': tool 'wait' did not answer within 100 ms");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace weir::agents
