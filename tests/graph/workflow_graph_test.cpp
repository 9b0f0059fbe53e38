#include "weir/graph/workflow_graph.hpp"
#include "weir/graph/checkpointer.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

namespace weir::graph {
namespace {

namespace asio = boost::asio;

namespace json = boost::json;
namespace fs = std::filesystem;

TEST(WorkflowGraph, ExpressionsAreArithmeticOverChannels) {
  // A StateView needs a run's state; build it through a tiny run of a set node instead.
  fs::path dir = fs::temp_directory_path() / ("weir_wg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "f.json")
      << R"({"name": "f", "state": {"n": {"default": 6}, "out": {}, "msg": {}},
    "nodes": {"calc": {"kind": "set", "values": {"out": {"$expr": "(n + 4) * 2 - n / 3"}, "msg": "n is {{state.n}}"}}},
    "edges": [{"from": "START", "to": "calc"}, {"from": "calc", "to": "END"}]})";
  auto spec = load_workflow(dir / "f.json");
  ASSERT_TRUE(spec) << spec.error().message;
  auto built = build_workflow_graph(*spec);
  ASSERT_TRUE(built) << built.error().message;
  GraphRuntime rt;
  boost::asio::io_context io;
  Result<RunResult> r = Error(Errc::cancelled, "");
  auto task = [&]() -> boost::asio::awaitable<void> {
    boost::json::object input;  // a local: no temporary inside a co_await (GCC 12)
    r = co_await rt.async_invoke(built->graph, std::move(input));
  };
  boost::asio::co_spawn(io, task(), boost::asio::detached);
  io.run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("out").as_int64(), 18);
  EXPECT_EQ(r->state.at("msg").as_string(), "n is 6");

  std::ofstream(dir / "bad.json") << R"({"name": "b", "state": {"n": {}, "out": {}},
    "nodes": {"calc": {"kind": "set", "values": {"out": {"$expr": "n + * 2"}}}},
    "edges": [{"from": "START", "to": "calc"}, {"from": "calc", "to": "END"}]})";
  auto bad = build_workflow_graph(*load_workflow(dir / "bad.json"));
  ASSERT_TRUE(bad);
  GraphRuntime rt2;
  boost::asio::io_context io2;
  auto task2 = [&]() -> boost::asio::awaitable<void> {
    boost::json::object input;
    r = co_await rt2.async_invoke(bad->graph, std::move(input));
  };
  boost::asio::co_spawn(io2, task2(), boost::asio::detached);
  io2.run();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "invalid_argument: node 'calc': expression \"n + * 2\": unexpected '*' at column 5");
  fs::remove_all(dir);
}

TEST(WorkflowGraph, AgentNodesWithoutTheAgentsLayerAreNamed) {
  fs::path dir = fs::temp_directory_path() / ("weir_wg2_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.json") << R"({"name": "a", "state": {"v": {}}, "agents": {"helper": {}},
    "nodes": {"who": {"kind": "agent", "agent": "helper"}},
    "edges": [{"from": "START", "to": "who"}, {"from": "who", "to": "END"}]})";
  auto spec = load_workflow(dir / "a.json");
  ASSERT_TRUE(spec) << spec.error().message;
  auto built = build_workflow_graph(*spec);
  ASSERT_FALSE(built);
  EXPECT_NE(built.error().message.find("node 'who': agent nodes need the agents layer (weir run "
                                       "provides it; in C++ use agents::build_workflow)"),
            std::string::npos)
      << built.error().message;
  fs::remove_all(dir);
}

TEST(WorkflowGraph, InterruptNodeSuspendsAndResumeWritesTheValue) {
  fs::path dir = fs::temp_directory_path() / ("weir_wg3_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.json") << R"({"name": "a",
    "state": {"draft": {"default": "text"}, "verdict": {}, "done": {"default": false}},
    "nodes": {"ask": {"kind": "interrupt", "payload": {"review": "{{state.draft}}"}, "output": "verdict"},
              "finish": {"kind": "set", "values": {"done": true}}},
    "edges": [{"from": "START", "to": "ask"}, {"from": "ask", "to": "finish"}, {"from": "finish", "to": "END"}]})";
  auto spec = load_workflow(dir / "a.json");
  ASSERT_TRUE(spec) << spec.error().message;
  auto built = build_workflow_graph(*spec);
  ASSERT_TRUE(built) << built.error().message;
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  asio::io_context io;
  Result<RunResult> first = Error(Errc::cancelled, "not run"), second = first;
  auto task = [&]() -> asio::awaitable<void> {
    RunOptions o;
    o.checkpointer = cp.get();
    o.thread_id = "t1";
    json::object in;
    first = co_await rt.async_invoke(built->graph, std::move(in), o);
    json::value v = "approved";
    second = co_await rt.async_resume(built->graph, "t1", std::move(v), o);
  };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->interrupted);
  EXPECT_EQ(first->interrupted_node, "ask");
  EXPECT_EQ(json::serialize(first->interrupt_payload), R"({"review":"text"})");
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->interrupted);
  EXPECT_EQ(second->state.at("verdict"), "approved");
  EXPECT_EQ(second->state.at("done"), true);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weir::graph
