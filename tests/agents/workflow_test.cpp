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
  // 100 KB is over the tool's output cap: the whole text goes to the artifact store and the
  // channel holds its reference, as the graph's own payload fence would write it.
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
            "invalid_argument: node 'gen': lorem: /bytes: -1 is less than the minimum 0");
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

}  // namespace
}  // namespace weir::agents
