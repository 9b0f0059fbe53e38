#include "weir/agents/tool_call_parser.hpp"

#include <gtest/gtest.h>
#include <boost/json/serialize.hpp>

namespace weir::agents {
namespace {

const std::vector<std::string> kTools = {"search", "calculator"};

TEST(ToolCallParser, TaggedCallsAndSurroundingText) {
  auto r = parse_tool_calls(
      "Let me look.\n<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"kv "
      "cache\"}}</tool_call>\n"
      "<tool_call>{\"name\": \"calculator\", \"arguments\": \"{\\\"expression\\\": "
      "\\\"2+2\\\"}\"}</tool_call>",
      kTools);
  ASSERT_FALSE(r.error) << *r.error;
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].id, "call_1");
  EXPECT_EQ(r.calls[0].name, "search");
  EXPECT_EQ(boost::json::serialize(r.calls[0].arguments), R"({"query":"kv cache"})");
  EXPECT_EQ(r.calls[1].name, "calculator");
  EXPECT_EQ(boost::json::serialize(r.calls[1].arguments), R"({"expression":"2+2"})");
  EXPECT_EQ(r.content, "Let me look.");
}

TEST(ToolCallParser, FencedAndBareJsonWithAlternativeKeys) {
  auto fenced = parse_tool_calls(
      "Sure:\n```json\n{\"tool\": \"search\", \"args\": {\"query\": \"x\"}}\n```\n", kTools, 4);
  ASSERT_EQ(fenced.calls.size(), 1u);
  EXPECT_EQ(fenced.calls[0].id, "call_4");
  EXPECT_EQ(fenced.content, "Sure:");
  auto bare = parse_tool_calls(
      " {\"function\": {\"name\": \"calculator\", \"parameters\": {\"expression\": \"1\"}}} ",
      kTools);
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.calls[0].name, "calculator");
}

TEST(ToolCallParser, PlainTextIsContent) {
  auto r = parse_tool_calls("  The answer is 42. {not json}  ", kTools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.content, "The answer is 42. {not json}");
}

TEST(ToolCallParser, MalformedCallsGiveErrorsWrittenForTheModel) {
  auto bad_json = parse_tool_calls(
      "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": }}</tool_call>", kTools);
  ASSERT_TRUE(bad_json.error);
  EXPECT_EQ(bad_json.error->substr(0, 53), "tool call 1:1:43: syntax error (at /arguments/query).")
      << *bad_json.error;
  EXPECT_NE(bad_json.error->find("Write each tool call as <tool_call>"), std::string::npos);

  auto unknown =
      parse_tool_calls("<tool_call>{\"name\": \"serch\", \"arguments\": {}}</tool_call>", kTools);
  ASSERT_TRUE(unknown.error);
  EXPECT_EQ(*unknown.error,
            "tool call 1 names unknown tool 'serch'; the tools are: search, calculator.");

  auto no_name = parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>", kTools);
  ASSERT_TRUE(no_name.error);
  EXPECT_EQ(no_name.error->substr(0, 26), "tool call 1 has no \"name\".");

  auto array_args =
      parse_tool_calls("<tool_call>{\"name\": \"search\", \"arguments\": [1]}</tool_call>", kTools);
  ASSERT_TRUE(array_args.error);
  EXPECT_EQ(*array_args.error, "tool call 1: \"arguments\" must be a JSON object, not an array.");

  auto unclosed = parse_tool_calls("<tool_call>{\"name\": \"search\"", kTools);
  ASSERT_TRUE(unclosed.error);
  EXPECT_EQ(unclosed.error->substr(0, 46), "tool call 1 has no closing </tool_call>. Write");
}

TEST(Message, JsonRoundTrip) {
  Message m = Message::assistant("thinking");
  m.tool_calls.push_back({"call_1", "search", boost::json::object{{"query", "q"}}});
  auto back = Message::from_json(m.to_json());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->role, Role::assistant);
  EXPECT_EQ(back->tool_calls.at(0).name, "search");
  auto bad = Message::from_json(boost::json::object{{"role", "robot"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "message.role 'robot' is not one of system, developer, user, assistant, tool");
}

}  // namespace
}  // namespace weir::agents
