// weir's messages and the OpenAI codec (weir/http/openai.hpp): the one mapping
// (agents::to_openai / from_openai) that a remote model's requests and answers, weir serve's
// requests and answers and the messages in run state all go through.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "weir/agents/chat.hpp"
#include "weir/agents/openai_model.hpp"

namespace weir::agents {
namespace {

namespace json = boost::json;
namespace oa = http::openai;

std::vector<Message> conversation() {
  Message named = Message::user("6*7?");
  named.name = "alice";
  Message calls = Message::assistant("");
  calls.tool_calls = {{"call_1", "calculator", json::object{{"expression", "6*7"}}},
                      {"call_2", "search", json::object{{"query", "q"}, {"k", 3}}}};
  Message tool{Role::tool, "42", {}, "call_1", "calculator"};
  Message both = Message::assistant("Looking it up.");
  both.tool_calls = {{"call_3", "search", json::object{}}};
  return {Message::system("be exact"), named, calls, tool, both, Message::assistant("42.")};
}

void expect_same(const Message& a, const Message& b) {
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.content, b.content);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.tool_call_id, b.tool_call_id);
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size());
  for (std::size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].id, b.tool_calls[i].id);
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name);
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments);
  }
}

TEST(WireMapping, MessagesInRunStateHaveOpenAIsShape) {
  const auto msgs = conversation();
  EXPECT_EQ(
      json::serialize(msgs[2].to_json()),
      R"({"role":"assistant","content":null,"tool_calls":[)"
      R"({"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}},)"
      R"({"id":"call_2","type":"function","function":{"name":"search","arguments":"{\"query\":\"q\",\"k\":3}"}}]})");
  EXPECT_EQ(json::serialize(msgs[3].to_json()),
            R"({"role":"tool","content":"42","name":"calculator","tool_call_id":"call_1"})");
  for (const auto& m : msgs) {
    SCOPED_TRACE(json::serialize(m.to_json()));
    auto back = Message::from_json(m.to_json());
    ASSERT_TRUE(back) << back.error().message;
    expect_same(*back, m);
    // The state shape is the codec's: weir serve reads it as a request message.
    oa::ChatMessage w;
    EXPECT_FALSE(oa::parse_message(m.to_json(), "messages[0]", w));
    expect_same(from_openai(w), m);
  }
}

TEST(WireMapping, ToolCallsInWeir02sShapeStillRead) {
  auto old = Message::from_json(json::parse(
      R"({"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "name": "search",
          "arguments": {"query": "q"}}]})"));
  ASSERT_TRUE(old) << old.error().message;
  ASSERT_EQ(old->tool_calls.size(), 1u);
  EXPECT_EQ(old->tool_calls[0].name, "search");
  EXPECT_EQ(json::serialize(old->tool_calls[0].arguments), R"({"query":"q"})");
  auto bad = Message::from_json(json::parse(
      R"({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]})"));
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(Errc::invalid_argument));
  EXPECT_EQ(bad.error().message,
            "message.tool_calls[0].function.arguments must be a JSON object as a string, not an "
            "array");
}

TEST(WireMapping, AClientsRequestReadsBackAsTheSameConversationOnAServer) {
  OpenAIModelOptions o;
  o.base_url = "http://127.0.0.1:1/v1";
  o.model = "tiny";
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m) << m.error().message;
  const auto msgs = conversation();
  ChatParams p;
  p.max_tokens = 9;
  p.temperature = 0.25f;
  p.seed = 4;
  p.stop = {"END"};
  const std::vector<ToolSpec> tools = {
      {"calculator", "does arithmetic", json::parse(R"({"type": "object"})").as_object()},
      {"search", "finds", json::parse(R"({"type": "object"})").as_object()}};
  const std::string body = (*m)->request_body(msgs, tools, p);
  oa::ChatRequest r;
  auto e = oa::parse_chat_request(body, r);
  ASSERT_FALSE(e) << e->message << "\n" << body;
  ASSERT_EQ(r.messages.size(), msgs.size());
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    SCOPED_TRACE(i);
    Message want = msgs[i];
    if (want.role != Role::user) want.name.clear();  // names go with user turns only
    expect_same(from_openai(r.messages[i]), want);
  }
  EXPECT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tool_choice, oa::ToolChoice::automatic);
  EXPECT_EQ(r.sampling.max_tokens, 9);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.25f);
  EXPECT_EQ(r.sampling.seed, 4u);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
}

TEST(WireMapping, AServersAnswerReadsBackAsTheSameReply) {
  ToolCall call{"call_7", "calculator", json::object{{"expression", "1+1"}}};
  oa::Choice ch{0, "Let me compute.", {to_openai(call)}, "tool_calls", std::nullopt};
  const std::string body = oa::chat_completion({"chatcmpl-1", 1, "tiny"}, {ch}, {10, 4, 2});
  auto parsed = oa::parse_chat_completion(body);
  ASSERT_TRUE(parsed) << parsed.error().message;
  auto r = from_openai(*parsed);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->message.role, Role::assistant);
  EXPECT_EQ(r->message.content, "Let me compute.");
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_EQ(r->message.tool_calls[0].id, "call_7");
  EXPECT_EQ(json::serialize(r->message.tool_calls[0].arguments), R"({"expression":"1+1"})");
  EXPECT_EQ(r->finish_reason, "tool_calls");
  EXPECT_EQ(r->usage.prompt_tokens, 10);
  EXPECT_EQ(r->usage.completion_tokens, 4);
  EXPECT_EQ(r->usage.cached_prompt_tokens, 2);
  EXPECT_FALSE(r->tool_call_error);
}

TEST(WireMapping, CallsAnAgentCannotUseAreReportedNotDropped) {
  oa::ChatMessage w{
      "assistant", "", {{"c1", "f", "[1, 2]"}, {"c2", "", "{}"}, {"", "g", ""}}, {}, {}};
  std::string unusable;
  Message m = from_openai(w, &unusable);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "g");
  EXPECT_TRUE(m.tool_calls[0].arguments.empty());
  EXPECT_EQ(unusable, "the arguments of tool call 'f' are not a JSON object: got [1, 2]");
  auto r = from_openai(oa::Completion{{}, {{0, "", w.tool_calls, "tool_calls", {}}}, {}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tool_call_error, "the arguments of tool call 'f' are not a JSON object: got [1, 2]");
  EXPECT_EQ(r->message.tool_calls.at(0).id, "call_0");  // a call without an id gets one
  EXPECT_FALSE(from_openai(oa::Completion{}));
}

}  // namespace
}  // namespace weir::agents
