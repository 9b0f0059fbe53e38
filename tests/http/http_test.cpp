// weir::http's pieces without a network: the SSE framing both ways and the OpenAI request
// parsers' answers.
#include <gtest/gtest.h>

#include "weir/http/openai.hpp"
#include "weir/http/sse.hpp"

namespace weir::http {
namespace {

TEST(Sse, WriterAndReaderRoundTripInAnyPieces) {
  std::string wire = sse_event("{\"a\":1}") + sse_event("two\nlines", "note") + sse_event("[DONE]");
  for (std::size_t step : {1u, 3u, 7u, 1000u}) {
    SseReader rd;
    std::vector<SseEvent> ev;
    for (std::size_t i = 0; i < wire.size(); i += step)
      ASSERT_TRUE(rd.feed(wire.substr(i, step), [&](SseEvent& e) -> Status {
        ev.push_back(e);
        return {};
      }));
    ASSERT_EQ(ev.size(), 3u);
    EXPECT_EQ(ev[0].data, "{\"a\":1}");
    EXPECT_EQ(ev[1].data, "two\nlines");
    EXPECT_EQ(ev[1].event, "note");
    EXPECT_EQ(ev[2].data, "[DONE]");
  }
}

TEST(Sse, ReaderBoundsAnUnfinishedEvent) {
  SseReader rd(SseLimits{.max_line_bytes = 256, .max_event_bytes = 64});
  int events = 0;
  auto count = [&](SseEvent&) -> Status {
    ++events;
    return {};
  };
  auto s = rd.feed("data: " + std::string(100, 'x') + "\n", count);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "event stream event larger than max_event_bytes=64");
  EXPECT_FALSE(rd.feed("\n\n", count));  // the reader stays failed
  EXPECT_EQ(events, 0);
}

TEST(OpenAi, ChatRequestFields) {
  openai::ChatRequest r;
  auto e = openai::parse_chat_request(R"({"model": "m", "messages": [
      {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}},
      "max_completion_tokens": 7, "stop": "END", "n": 2, "seed": 5, "logprobs": true,
      "top_logprobs": 2, "stream": true, "stream_options": {"include_usage": true},
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "top_p": 0.9, "temperature": 0.3,
      "unknown": [1, 2]})",
                                      r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "be brief");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r.tool_choice, openai::ToolChoice::named);
  EXPECT_EQ(*r.sampling.max_tokens, 7);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_TRUE(r.sampling.include_usage);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
}

TEST(OpenAi, ErrorsNameTheField) {
  openai::ChatRequest r;
  auto e = openai::parse_chat_request(R"({"messages": []})", r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages");
  EXPECT_EQ(
      e->body(),
      R"({"error":{"message":"'messages' must be a non-empty array of {\"role\", \"content\"}","type":"invalid_request_error","param":"messages","code":null}})");
  openai::ChatRequest r2;
  e = openai::parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})", r2);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "'stop' has 5 sequences; at most 4 are allowed");
  openai::CompletionRequest c;
  e = openai::parse_completion_request(R"({"prompt": ["a", "b"]})", c);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "one prompt per request: send several requests (or use n)");
}

}  // namespace
}  // namespace weir::http
