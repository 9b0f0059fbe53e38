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

// Expressions and tool nodes are the tools layer's (agents::build_workflow gives the hooks;
// tests/agents/workflow_test.cpp runs them): without it the file is refused by name.
TEST(WorkflowGraph, ExpressionsAndToolNodesNeedTheToolsLayer) {
  fs::path dir = fs::temp_directory_path() / ("weir_wg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "f.json")
      << R"({"name": "f", "state": {"n": {"default": 6}, "out": {}, "msg": {}},
    "tools": {"calc": {"builtin": "calculator"}},
    "nodes": {"calc": {"kind": "set", "values": {"out": {"$expr": "(n + 4) * 2 - n / 3"}}},
              "tool": {"kind": "tool", "tool": "calc", "args": {"expression": "1 + 1"}}},
    "edges": [{"from": "START", "to": "calc"}, {"from": "calc", "to": "tool"},
              {"from": "tool", "to": "END"}]})";
  auto spec = load_workflow(dir / "f.json");
  ASSERT_TRUE(spec) << spec.error().message;
  auto built = build_workflow_graph(*spec);
  ASSERT_FALSE(built);
  EXPECT_EQ(built.error().message,
            (dir / "f.json").string() +
                ": node 'calc': expressions need the tools layer's calculator (weir run provides "
                "it; in C++ use agents::build_workflow)\n" +
                (dir / "f.json").string() +
                ": node 'tool': tool nodes need the tools layer (weir run provides it; in C++ use "
                "agents::build_workflow)");
  fs::remove_all(dir);
}

TEST(WorkflowGraph, TemplatesRenderChannels) {
  fs::path dir = fs::temp_directory_path() / ("weir_wg1_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "f.json")
      << R"({"name": "f", "state": {"n": {"default": 6}, "msg": {}, "same": {}},
    "nodes": {"say": {"kind": "set", "values": {"msg": "n is {{state.n}}", "same": "{{state.n}}"}}},
    "edges": [{"from": "START", "to": "say"}, {"from": "say", "to": "END"}]})";
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
  EXPECT_EQ(r->state.at("msg").as_string(), "n is 6");
  EXPECT_EQ(r->state.at("same").as_int64(), 6);  // a whole-string template keeps the type
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

// A crew node renders the crew's inputs, fills its chat input from the last user message of its
// messages channel, and writes the crew's output and each task's output as its agent's message
// (the agents layer's kickoff is the hook: tests/langgraph runs a real crew).
TEST(WorkflowGraph, CrewNodeTakesTheUsersMessageAndAppendsEachAgentsReply) {
  fs::path dir = fs::temp_directory_path() / ("weir_wg4_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "c.json") << R"({"name": "c",
    "state": {"messages": {"reducer": "messages"}, "topic": {"default": "tides"}, "depth": {"default": 2},
              "result": {}},
    "crews": {"team": {"agents": [], "tasks": [], "inputs": {"topic": "waves", "depth": 1}}},
    "nodes": {"team": {"kind": "crew", "crew": "team", "messages": "messages", "output": "result",
                       "inputs": {"topic": "{{state.topic}}", "depth": "{{state.depth}}"},
                       "chat_input": "topic"}},
    "edges": [{"from": "START", "to": "team"}, {"from": "team", "to": "END"}]})";
  auto spec = load_workflow(dir / "c.json");
  ASSERT_TRUE(spec) << spec.error().message;
  WorkflowHooks hooks;
  std::vector<std::string> seen;
  hooks.crew_call = [&](std::string crew, std::string model, json::object inputs,
                        std::function<void(const std::string&, std::string_view)> on_task_text,
                        NodeContext&) -> asio::awaitable<Result<CrewReply>> {
    seen.push_back(crew + "|" + model + "|" + json::serialize(inputs));
    CrewReply r;
    r.messages = {
        {"research", "researcher", "notes on " + std::string(inputs.at("topic").as_string())},
        {"write", "writer", "the text"}};
    if (on_task_text) on_task_text("research", r.messages[0].text);
    r.output = "the text";
    co_return r;
  };
  auto built = build_workflow_graph(*spec, hooks);
  ASSERT_TRUE(built) << built.error().message;
  GraphRuntime rt;
  asio::io_context io;
  Result<RunResult> chat = Error(Errc::cancelled, "not run"), plain = chat;
  // A run that takes message text gets each task's output as soon as the task is done, under
  // the id its message is stored with. The user's message in content parts, as Agent Chat UI
  // sends it.
  std::vector<MessageText> texts;
  const std::function<void(const MessageText&)> on_text = [&](const MessageText& t) {
    texts.push_back(t);
  };
  auto task = [&]() -> asio::awaitable<void> {
    json::array parts{json::object{{"type", "text"}, {"text", "moons"}}};
    json::object in{
        {"messages", json::array{json::object{{"role", "user"}, {"content", std::move(parts)}}}}};
    RunOptions o;
    o.on_message_text = &on_text;
    chat = co_await rt.async_invoke(built->graph, std::move(in), o);
    json::object none;
    plain = co_await rt.async_invoke(built->graph, std::move(none));
  };
  asio::co_spawn(io, task(), asio::detached);
  io.run();
  ASSERT_TRUE(chat) << chat.error().message;
  ASSERT_TRUE(plain) << plain.error().message;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], R"(team||{"topic":"moons","depth":2})") << "the user's message is the topic";
  EXPECT_EQ(seen[1], R"(team||{"topic":"tides","depth":2})") << "no message: the channel's";
  EXPECT_EQ(chat->state.at("result"), "the text");
  const auto& msgs = chat->state.at("messages").as_array();
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[1].at("role"), "assistant");
  EXPECT_EQ(msgs[1].at("name"), "researcher");
  EXPECT_EQ(msgs[1].at("content"), "notes on moons");
  EXPECT_EQ(msgs[2].at("name"), "writer");
  EXPECT_NE(msgs[1].at("id"), msgs[2].at("id"));
  ASSERT_EQ(texts.size(), 1u);
  EXPECT_EQ(texts[0].text, "notes on moons");
  EXPECT_EQ(texts[0].node, "team");
  EXPECT_EQ(json::value(texts[0].message_id), msgs[1].at("id"));

  // Without the agents layer the node is refused by name; a node naming no crew of the file,
  // or a chat input without a messages channel, is refused at load.
  auto bare = build_workflow_graph(*spec);
  ASSERT_FALSE(bare);
  EXPECT_NE(bare.error().message.find("node 'team': crew nodes need the agents layer"),
            std::string::npos)
      << bare.error().message;
  std::ofstream(dir / "bad.json") << R"({"name": "bad", "state": {"t": {}},
    "crews": {"team": {}},
    "nodes": {"a": {"kind": "crew", "crew": "tema"}, "b": {"kind": "crew", "crew": "team", "chat_input": "t"},
              "c": {"kind": "crew", "crew": "team", "messages": "t"}},
    "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "END"}]})";
  auto bad = load_workflow(dir / "bad.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("/nodes/a/crew: unknown crew 'tema'; did you mean 'team'?"),
            std::string::npos)
      << bad.error().message;
  EXPECT_NE(bad.error().message.find(
                "/nodes/b/chat_input: \"chat_input\" needs a \"messages\" channel to read from"),
            std::string::npos)
      << bad.error().message;
  EXPECT_NE(bad.error().message.find("/nodes/c/messages: channel 't' is not a messages channel"),
            std::string::npos)
      << bad.error().message;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weir::graph
