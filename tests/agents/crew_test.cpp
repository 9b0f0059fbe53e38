#include "weir/agents/crew.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "test_util.hpp"
#include "weir/agents/group_chat.hpp"
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

AgentSpec agent(std::string name, std::vector<std::string> tools = {}) {
  AgentSpec a;
  a.name = name;
  a.role = "the " + name;
  a.tools = std::move(tools);
  a.max_iter = 3;
  return a;
}

// Answers with the agent's role, and the length of the prompt it was given.
std::shared_ptr<ScriptedChatModel> echo_model() {
  return std::make_shared<ScriptedChatModel>(
      [](const std::vector<Message>& msgs,
         const std::vector<ToolSpec>& tools) -> Result<ChatResponse> {
        std::string who = msgs.front().content.substr(8, msgs.front().content.find('.') - 8);
        return ScriptedChatModel::parse_reply(who + " says: " + std::string(3000, 'w'), tools,
                                              msgs);
      });
}

struct Fixture : ::testing::Test {
  std::unique_ptr<ArtifactStore> store = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  std::shared_ptr<tools::ToolRegistry> tools = std::make_shared<tools::ToolRegistry>();
  Fixture() {
    EXPECT_TRUE(tools->add(tools::make_calculator()));
    EXPECT_TRUE(tools->add(tools::make_artifacts_tool(*store)));
  }
  graph::RuntimeOptions rt_options() { return {.artifacts = store.get()}; }
};

using CrewTest = Fixture;

TEST_F(CrewTest, SequentialPassesBoundedSummariesAndReferencesNotFullOutputs) {
  auto model = echo_model();
  CrewSpec spec;
  spec.name = "research";
  spec.agents = {agent("researcher", {"calculator"}), agent("writer", {"artifacts"}),
                 agent("reviewer")};
  spec.tasks = {
      {"research",
       "Research {{topic}}.",
       "notes",
       "researcher",
       {},
       false,
       {{"", "calculator", json::object{{"expression", "2+3"}}}}},
      {"write", "Write about {{topic}}.", "an article", "writer", {}, false, {}},
      {"review", "Review it.", "a verdict", "reviewer", {"research", "write"}, false, {}}};
  spec.summary_bytes = 200;
  auto crew = Crew::create(spec, model, tools, rt_options());
  ASSERT_TRUE(crew) << crew.error().message;
  graph::GraphRuntime rt(rt_options());
  auto r = run_sync<CrewResult>([&]() {
    return (*crew)->async_kickoff(rt, json::object{{"topic", "KV caches"}}, graph::RunOptions{});
  });
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->tasks.size(), 3u);
  EXPECT_EQ(r->tasks[0].agent, "researcher");
  EXPECT_EQ(r->tasks[2].agent, "reviewer");
  for (const auto& t : r->tasks) {
    EXPECT_LE(t.summary.size(), 200u);
    EXPECT_GT(t.output_bytes, 3000u);
    ASSERT_FALSE(t.artifact_id.empty());
    auto full = store->get(t.artifact_id);
    ASSERT_TRUE(full);
    EXPECT_EQ(full->size(), t.output_bytes);
  }
  EXPECT_EQ(r->iterations, 3);
  auto calls = model->calls();
  ASSERT_EQ(calls.size(), 3u);
  // The researcher's task was rendered and its prefetch call ran first.
  const auto& first = calls[0].messages;
  EXPECT_NE(first[1].content.find("Research KV caches."), std::string::npos);
  ASSERT_GE(first.size(), 4u);
  EXPECT_EQ(first[2].tool_calls.at(0).name, "calculator");
  EXPECT_EQ(first[3].content, "5");
  // The reviewer saw both earlier results as summaries plus references, never 3 KB outputs.
  const std::string& review_prompt = calls[2].messages[1].content;
  EXPECT_NE(review_prompt.find("Result of the earlier task 'research' (by researcher)"),
            std::string::npos);
  EXPECT_NE(review_prompt.find("Full text: artifact " + r->tasks[1].artifact_id),
            std::string::npos);
  EXPECT_LT(review_prompt.size(), 1200u);
  // The crew's state holds references and summaries only.
  EXPECT_LT(json::serialize(r->run.state).size(), 2500u);
}

TEST_F(CrewTest, InvalidCrewListsEveryProblem) {
  CrewSpec spec;
  spec.name = "broken";
  spec.agents = {agent("a"), agent("a")};
  spec.tasks = {{"t1", "x", "", "nobody", {"t2"}, false, {}}, {"t2", "y", "", "a", {}, false, {}}};
  auto crew = Crew::create(spec, echo_model(), tools);
  ASSERT_FALSE(crew);
  EXPECT_EQ(crew.error().code, Errc::invalid_workflow);
  EXPECT_EQ(crew.error().message,
            "crew 'broken' is invalid:\n"
            "  - two agents are named 'a'\n"
            "  - task 't1' names unknown agent 'nobody' (its agents: a)\n"
            "  - task 't1' takes context from 't2', which is not an earlier task");
}

TEST_F(CrewTest, TokenBudgetEndsTheCrewWithATypedError) {
  CrewSpec spec;
  spec.agents = {agent("a")};
  spec.tasks = {{"t1", "x", "", "a", {}, false, {}}, {"t2", "y", "", "a", {}, false, {}}};
  spec.limits.token_budget = 100;
  auto crew = Crew::create(spec, echo_model(), tools, rt_options());
  ASSERT_TRUE(crew);
  graph::GraphRuntime rt(rt_options());
  auto r = run_sync<CrewResult>(
      [&]() { return (*crew)->async_kickoff(rt, json::object{}, graph::RunOptions{}); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::token_budget_exceeded);
  EXPECT_NE(r.error().message.find("token budget"), std::string::npos) << r.error().message;
}

TEST_F(CrewTest, HierarchicalManagerDelegatesAndCombines) {
  auto model = std::make_shared<ScriptedChatModel>([](const std::vector<Message>& msgs,
                                                      const std::vector<ToolSpec>& tools)
                                                       -> Result<ChatResponse> {
    const std::string& sys = msgs.front().content;
    if (sys.find("the crew's manager") != std::string::npos) {
      int tool_results = 0;
      for (const auto& m : msgs) tool_results += m.role == Role::tool;
      if (tool_results == 0)
        return ScriptedChatModel::parse_reply(
            R"(<tool_call>{"name": "delegate_work", "arguments": {"coworker": "researcher", "task": "find facts"}}</tool_call>)",
            tools, msgs);
      if (tool_results == 1)
        return ScriptedChatModel::parse_reply(
            R"(<tool_call>{"name": "delegate_work", "arguments": {"coworker": "writer", "task": "write it up"}}</tool_call>)",
            tools, msgs);
      return ScriptedChatModel::parse_reply("Final: combined.", tools, msgs);
    }
    return ScriptedChatModel::parse_reply(sys.substr(8, 14) + " result", tools, msgs);
  });
  CrewSpec spec;
  spec.process = Process::hierarchical;
  spec.agents = {agent("researcher"), agent("writer")};
  spec.tasks = {{"research", "Research.", "", "", {}, false, {}},
                {"write", "Write.", "", "", {}, false, {}}};
  auto crew = Crew::create(spec, model, tools, rt_options());
  ASSERT_TRUE(crew) << crew.error().message;
  graph::GraphRuntime rt(rt_options());
  auto r = run_sync<CrewResult>(
      [&]() { return (*crew)->async_kickoff(rt, json::object{}, graph::RunOptions{}); });
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->tasks.size(), 3u);
  EXPECT_EQ(r->tasks[0].agent, "researcher");
  EXPECT_EQ(r->tasks[0].summary, "the researcher result");
  EXPECT_EQ(r->tasks[1].agent, "writer");
  EXPECT_EQ(r->tasks[2].agent, "manager");
  EXPECT_EQ(r->final_output, "Final: combined.");
  EXPECT_EQ(r->iterations, 5);  // 3 manager calls + 2 coworker calls
}

TEST(RenderInputs, ReplacesKnownKeysAndKeepsUnknownOnes) {
  EXPECT_EQ(render_inputs("a {{x}} b {{ n }} {{y}}", json::object{{"x", "X"}, {"n", 3}}),
            "a X b 3 {{y}}");
  EXPECT_EQ(bounded_summary("hello wonderful world", 15), "hello ...");
  EXPECT_EQ(bounded_summary("short", 15), "short");
}

TEST(Termination, CombinesWithAndOr) {
  auto t = Termination::max_messages(5) || Termination::text_mention("DONE");
  ChatProgress p;
  p.messages = 2;
  p.last_text = "not yet";
  EXPECT_FALSE(t.check(p));
  p.last_text = "we are DONE";
  p.last_speaker = "critic";
  EXPECT_EQ(*t.check(p), "'DONE' mentioned by critic");
  auto both = Termination::max_messages(3) && Termination::token_usage(100);
  p.messages = 3;
  p.tokens = 50;
  EXPECT_FALSE(both.check(p));
  p.tokens = 120;
  EXPECT_EQ(*both.check(p), "max_messages 3 reached and token usage 120 reached the limit 100");
  EXPECT_EQ(both.describe(), "(max_messages(3) && token_usage(100))");
  auto bad =
      Termination::from_json(json::parse(R"({"any": [{"max_mesages": 3}]})"), "/termination");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "/termination/any/0: unknown condition 'max_mesages' (max_messages, text_mention, "
            "token_usage, timeout_ms, any, all)");
}

TEST(GroupChat, RoundRobinUntilAMention) {
  auto model = std::make_shared<ScriptedChatModel>(
      [](const std::vector<Message>& msgs, const std::vector<ToolSpec>&) -> Result<ChatResponse> {
        std::size_t turns = msgs.size() - 1;  // the task and earlier messages
        std::string text = turns >= 4 ? "APPROVED" : "turn " + std::to_string(turns);
        return ScriptedChatModel::parse_reply(text, {}, msgs);
      });
  GroupChatSpec spec;
  spec.agents = {agent("writer"), agent("critic")};
  spec.termination = Termination::max_messages(10) || Termination::text_mention("APPROVED");
  auto chat = GroupChat::create(spec, model);
  ASSERT_TRUE(chat) << chat.error().message;
  graph::GraphRuntime rt;
  auto r = run_sync<GroupChatResult>(
      [&]() { return (*chat)->async_run(rt, "Write a haiku.", graph::RunOptions{}); });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->messages, 4);
  EXPECT_EQ(r->stop_reason, "'APPROVED' mentioned by critic");
  ASSERT_EQ(r->transcript.size(), 5u);
  EXPECT_EQ(r->transcript[0].content, "Write a haiku.");
  EXPECT_EQ(r->transcript[1].name, "writer");
  EXPECT_EQ(r->transcript[2].name, "critic");
}

TEST(GroupChat, MaxMessagesAndAWindowedTranscript) {
  auto model = std::make_shared<ScriptedChatModel>(std::vector<std::string>{"more talk"});
  GroupChatSpec spec;
  spec.agents = {agent("a"), agent("b"), agent("c")};
  spec.termination = Termination::max_messages(7);
  spec.window.max_messages = 3;
  auto chat = GroupChat::create(spec, model);
  ASSERT_TRUE(chat);
  graph::GraphRuntime rt;
  auto r = run_sync<GroupChatResult>(
      [&]() { return (*chat)->async_run(rt, "Discuss.", graph::RunOptions{}); });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->messages, 7);
  EXPECT_EQ(r->stop_reason, "max_messages 7 reached");
  ASSERT_EQ(r->transcript.size(), 4u);  // the task + the 3 latest
  EXPECT_EQ(r->transcript[0].content, "Discuss.");
  EXPECT_EQ(r->transcript[3].name, "a");  // the 7th speaker, round robin a b c a b c a
  for (const auto& c : model->calls()) EXPECT_LE(c.messages.size(), 5u);
}

TEST(GroupChat, TheModelChoosesTheNextSpeaker) {
  // Asked who speaks next, the model names the critic after every writer turn (and answers with
  // nobody's name once, which falls back to round robin).
  int asked = 0;
  auto model = std::make_shared<ScriptedChatModel>(
      [&](const std::vector<Message>& msgs, const std::vector<ToolSpec>&) -> Result<ChatResponse> {
        if (msgs.front().content.rfind("You choose who speaks next", 0) == 0) {
          ++asked;
          return ScriptedChatModel::parse_reply(asked == 2 ? "hmm" : "critic", {}, msgs);
        }
        return ScriptedChatModel::parse_reply("a message", {}, msgs);
      });
  GroupChatSpec spec;
  spec.agents = {agent("writer"), agent("critic")};
  spec.selection = SpeakerSelection::model;
  spec.termination = Termination::max_messages(4);
  auto chat = GroupChat::create(spec, model);
  ASSERT_TRUE(chat);
  graph::GraphRuntime rt;
  auto r = run_sync<GroupChatResult>(
      [&]() { return (*chat)->async_run(rt, "Review this.", graph::RunOptions{}); });
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->transcript.size(), 5u);
  EXPECT_EQ(r->transcript[1].name, "writer");  // the first turn is round robin: nothing to read
  EXPECT_EQ(r->transcript[2].name, "critic");  // chosen
  EXPECT_EQ(r->transcript[3].name, "writer");  // "hmm" names nobody: round robin (turn 3)
  EXPECT_EQ(r->transcript[4].name, "critic");  // chosen
  EXPECT_EQ(asked, 3);
  EXPECT_GT(r->tokens, 0);
}

TEST(GroupChat, SelectorFunctionPicksSpeakers) {
  auto model = std::make_shared<ScriptedChatModel>(std::vector<std::string>{"hi"});
  GroupChatSpec spec;
  spec.agents = {agent("a"), agent("b")};
  spec.selection = SpeakerSelection::function;
  spec.selector = [](const std::vector<Message>&, const std::vector<std::string>&) {
    return std::string("b");
  };
  spec.termination = Termination::max_messages(2);
  auto chat = GroupChat::create(spec, model);
  ASSERT_TRUE(chat);
  graph::GraphRuntime rt;
  auto r = run_sync<GroupChatResult>(
      [&]() { return (*chat)->async_run(rt, "go", graph::RunOptions{}); });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->transcript[1].name, "b");
  EXPECT_EQ(r->transcript[2].name, "b");
  spec.selector = {};
  EXPECT_EQ(GroupChat::create(spec, model).error().message,
            "group chat 'group_chat' is invalid:\n  - speaker selection 'function' needs a "
            "selector");
}

}  // namespace
}  // namespace weir::agents
