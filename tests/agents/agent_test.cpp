#include "weir/agents/agent.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "test_util.hpp"
#include "weir/agents/scripted_model.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/registry.hpp"

namespace weir::agents {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

using testing::run_sync;

std::shared_ptr<tools::ToolRegistry> calc_tools() {
  auto reg = std::make_shared<tools::ToolRegistry>();
  EXPECT_TRUE(reg->add(tools::make_calculator()));
  return reg;
}

AgentSpec spec(std::vector<std::string> tools = {"calculator"}) {
  AgentSpec s;
  s.name = "mathematician";
  s.role = "a careful mathematician";
  s.goal = "answer arithmetic questions exactly";
  s.tools = std::move(tools);
  return s;
}

Result<AgentResult> run_agent(const Agent& a, std::string task, graph::RunOptions opt = {},
                              graph::GraphRuntime* rt = nullptr) {
  graph::GraphRuntime local;
  graph::GraphRuntime& r = rt ? *rt : local;
  return run_sync<AgentResult>([&]() { return a.async_run(r, task, {}, opt); });
}

TEST(Agent, CallsAToolThenAnswers) {
  auto model = std::make_shared<ScriptedChatModel>(std::vector<std::string>{
      R"(<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>)",
      "The answer is 42."});
  auto agent = Agent::create(spec(), model, calc_tools());
  ASSERT_TRUE(agent) << agent.error().message;
  auto r = run_agent(**agent, "What is 6 times 7?");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "The answer is 42.");
  EXPECT_EQ(r->iterations, 2);
  EXPECT_EQ(r->tool_calls, 1);
  EXPECT_GT(r->prompt_tokens, 0);
  // The second model call saw the tool's result.
  auto calls = model->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].messages.front().role, Role::system);
  EXPECT_NE(calls[0].messages.front().content.find("a careful mathematician"), std::string::npos);
  EXPECT_EQ(calls[0].tools, std::vector<std::string>{"calculator"});
  const Message& last = calls[1].messages.back();
  EXPECT_EQ(last.role, Role::tool);
  EXPECT_EQ(last.name, "calculator");
  EXPECT_EQ(last.content, "42");
}

TEST(Agent, MaxIterEndsALoopingAgentWithAFinalAnswer) {
  // A model that always calls the tool: at max_iter the agent is asked for a final answer
  // without tools, so the run still ends with an answer.
  auto model = std::make_shared<ScriptedChatModel>(
      [](const std::vector<Message>&, const std::vector<ToolSpec>& tools) -> Result<ChatResponse> {
        if (tools.empty()) return ScriptedChatModel::parse_reply("I give up: 1.", tools, {});
        return ScriptedChatModel::parse_reply(
            R"(<tool_call>{"name": "calculator", "arguments": {"expression": "1+0"}}</tool_call>)",
            tools, {});
      });
  auto s = spec();
  s.max_iter = 4;
  auto agent = Agent::create(s, model, calc_tools());
  ASSERT_TRUE(agent);
  auto r = run_agent(**agent, "loop forever");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->iterations, 4);
  EXPECT_EQ(r->tool_calls, 3);
  EXPECT_EQ(r->output, "I give up: 1.");
  auto calls = model->calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_TRUE(calls.back().tools.empty());
  EXPECT_NE(calls.back().messages.back().content.find("This is your last step (max_iter 4)"),
            std::string::npos);
}

TEST(Agent, MalformedToolCallIsFedBackAndCountsAnIteration) {
  auto model = std::make_shared<ScriptedChatModel>(std::vector<std::string>{
      R"(<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>)", "Sorry. 2"});
  auto agent = Agent::create(spec(), model, calc_tools());
  ASSERT_TRUE(agent);
  auto r = run_agent(**agent, "1+1?");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->iterations, 2);
  EXPECT_EQ(r->tool_calls, 0);
  auto calls = model->calls();
  ASSERT_EQ(calls.size(), 2u);
  const auto& fed = calls[1].messages.back();
  EXPECT_EQ(fed.role, Role::user);
  EXPECT_EQ(fed.content.rfind("Your tool call could not be used: tool call 1:", 0), 0u)
      << fed.content;
}

TEST(Agent, InvalidArgumentsAndUnknownToolsGoBackToTheModel) {
  auto model = std::make_shared<ScriptedChatModel>(std::vector<std::string>{
      R"(<tool_call>{"name": "calculator", "arguments": {"expression": 12}}</tool_call>)",
      R"(<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>)",
      "done"});
  auto agent = Agent::create(spec(), model, calc_tools());
  ASSERT_TRUE(agent);
  auto r = run_agent(**agent, "compute");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "done");
  EXPECT_EQ(r->tool_calls, 2);
  auto calls = model->calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].messages.back().content.rfind(
                "Error (invalid_argument): calculator: /expression:", 0),
            0u)
      << calls[1].messages.back().content;
  EXPECT_NE(calls[2].messages.back().content.find("division by zero"), std::string::npos)
      << calls[2].messages.back().content;
}

TEST(Agent, AToolThatHangsTimesOutAndTheRunGoesOn) {
  auto reg = std::make_shared<tools::ToolRegistry>();
  tools::ToolOptions opt;
  opt.timeout = 50ms;
  ASSERT_TRUE(reg->add(tools::make_async_tool(
      "slow", "never answers in time", json::object{{"type", "object"}},
      [](json::object, const tools::ToolContext&) -> asio::awaitable<Result<std::string>> {
        asio::steady_timer t(co_await asio::this_coro::executor, 1s);
        co_await t.async_wait(asio::use_awaitable);
        co_return std::string("late");
      },
      opt)));
  auto model = std::make_shared<ScriptedChatModel>(std::vector<std::string>{
      R"(<tool_call>{"name": "slow", "arguments": {}}</tool_call>)", "ok"});
  auto agent = Agent::create(spec({"slow"}), model, reg);
  ASSERT_TRUE(agent);
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point done;
  graph::GraphRuntime rt;
  auto r = run_sync<AgentResult>([&]() -> asio::awaitable<Result<AgentResult>> {
    std::vector<Message> none;
    graph::RunOptions opt;
    auto out = co_await (*agent)->async_run(rt, "call slow", std::move(none), opt);
    done = std::chrono::steady_clock::now();
    co_return out;
  });
  // The run did not wait for the hung call (1 s) to finish.
  EXPECT_LT(done - t0, 800ms);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "ok");
  auto calls = model->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].messages.back().content.rfind("Error (tool_timeout):", 0), 0u)
      << calls[1].messages.back().content;
}

TEST(Agent, UnknownToolInSpecIsRefusedWithTheAvailableOnes) {
  auto model = std::make_shared<ScriptedChatModel>(std::vector<std::string>{"x"});
  auto agent = Agent::create(spec({"web_search"}), model, calc_tools());
  ASSERT_FALSE(agent);
  EXPECT_EQ(agent.error().message,
            "agent 'mathematician' names unknown tool 'web_search' (available: calculator)");
  auto s = spec();
  s.max_iter = 0;
  EXPECT_EQ(Agent::create(s, model, calc_tools()).error().message,
            "agent 'mathematician': max_iter must be at least 1, got 0");
}

TEST(Agent, HistoryWindowKeepsTheSystemPromptAndSummarizesEvictedTurns) {
  int summaries = 0;
  auto model = std::make_shared<ScriptedChatModel>(
      [&](const std::vector<Message>& msgs,
          const std::vector<ToolSpec>& tools) -> Result<ChatResponse> {
        if (msgs.front().content.rfind("You keep a running summary", 0) == 0) {
          ++summaries;
          return ScriptedChatModel::parse_reply(std::string(5000, 's'), {}, msgs);
        }
        if (tools.empty()) return ScriptedChatModel::parse_reply("final", tools, msgs);
        return ScriptedChatModel::parse_reply(
            R"(<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>)",
            tools, msgs);
      });
  auto s = spec();
  s.max_iter = 8;
  s.history.max_messages = 4;
  s.history.max_summary_bytes = 256;
  auto agent = Agent::create(s, model, calc_tools());
  ASSERT_TRUE(agent);
  auto store = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  graph::GraphRuntime rt({.artifacts = store.get()});
  auto r = run_sync<graph::RunResult>([&]() {
    json::object in{{"task", "keep adding"}};
    return rt.async_invoke((*agent)->graph(), in);
  });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_GT(summaries, 0);
  // The summary is bounded; the evicted turns are archived.
  EXPECT_LE(r->state.at("summary").as_string().size(), 256u);
  EXPECT_FALSE(r->state.at("archive").as_array().empty());
  // Every model call of the loop saw the system prompt first, then the task, and at most 4
  // turns after them, plus the last-step note.
  for (const auto& c : model->calls()) {
    if (c.messages.front().content.rfind("You keep a running summary", 0) == 0) continue;
    EXPECT_NE(c.messages.front().content.find("a careful mathematician"), std::string::npos);
    std::size_t turns = 0;
    for (const auto& m : c.messages) turns += m.role != Role::system;
    EXPECT_LE(turns, 6u);
    auto task = std::find_if(c.messages.begin(), c.messages.end(),
                             [](const Message& m) { return m.role == Role::user; });
    ASSERT_NE(task, c.messages.end());
    EXPECT_EQ(task->content, "keep adding");
  }
}

TEST(FitWindow, DropsOldestTurnsAndTheirToolResultsByTokens) {
  ScriptedChatModel model(std::vector<std::string>{"x"});
  std::vector<Message> ms = {Message::system("sys"), Message::user(std::string(400, 'a'))};
  Message call = Message::assistant("");
  call.tool_calls.push_back({"call_1", "calculator", {}});
  ms.push_back(call);
  Message result;
  result.role = Role::tool;
  result.content = "4";
  ms.push_back(result);
  ms.push_back(Message::user("next"));
  HistoryWindow w;
  w.max_messages = 100;
  w.max_tokens = 12;  // sys 5 + call 13 + result 5 + next 5 tokens: the call must go too
  auto dropped = fit_window(ms, w, model, 1);
  ASSERT_EQ(ms.size(), 2u);
  EXPECT_EQ(ms[0].content, "sys");
  EXPECT_EQ(ms[1].content, "next");
  EXPECT_EQ(dropped.size(), 3u);
}

}  // namespace
}  // namespace weir::agents
