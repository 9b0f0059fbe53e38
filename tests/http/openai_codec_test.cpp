// The OpenAI wire codec (weir/http/openai.hpp) in both directions, without a network: every
// shape a server parses or builds and a client builds or parses, run through both directions
// and compared field by field, and the errors each direction answers.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "weir/http/openai.hpp"

namespace weir::http::openai {
namespace {

namespace json = boost::json;

// Printable forms for failure messages: the structs' wire text.
std::string show(const ChatRequest& r) {
  return chat_request_body(r);
}
std::string show(const CompletionRequest& r) {
  return completion_request_body(r);
}
std::string show(const Completion& c) {
  return chat_completion(c.envelope, c.choices, c.usage.value_or(Usage{})) +
         (c.usage ? "" : " (no usage)");
}

ChatMessage msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

// --- requests: a client builds, a server parses, and back -----------------------------------

struct ChatCase {
  const char* name;
  ChatRequest request;
};

std::vector<ChatCase> chat_cases() {
  std::vector<ChatCase> cs;
  {
    ChatRequest r;
    r.model = "tiny";
    r.messages = {msg("user", "hi")};
    cs.push_back({"one user message", r});
  }
  {
    ChatRequest r;
    r.model = "Qwen/Qwen2.5-0.5B-Instruct";
    r.messages = {msg("system", "be exact"), msg("user", "6*7?")};
    r.messages[1].name = "alice";
    ChatMessage a = msg("assistant", "");
    a.tool_calls = {{"call_1", "calculator", R"({"expression":"6*7"})"},
                    {"call_2", "search", R"({"query":"q","k":3})"}};
    r.messages.push_back(a);
    ChatMessage t = msg("tool", "42");
    t.tool_call_id = "call_1";
    t.name = "calculator";
    r.messages.push_back(t);
    ChatMessage both = msg("assistant", "Let me look.");
    both.tool_calls = {{"call_3", "search", "{}"}};
    r.messages.push_back(both);
    r.tools = {{"calculator", "does arithmetic",
                json::parse(R"({"type":"object","properties":{"expression":{"type":"string"}},
                                "required":["expression"]})")
                    .as_object()},
               {"search", "", json::object{{"type", "object"}}}};
    cs.push_back({"tool calls, tool results and two tools, tool_choice auto", r});
    r.tool_choice = ToolChoice::required;
    cs.push_back({"tool_choice required", r});
    r.tool_choice = ToolChoice::named;
    r.tool_choice_name = "search";
    cs.push_back({"tool_choice naming a function", r});
    r.tool_choice = ToolChoice::none;
    r.tool_choice_name.clear();
    cs.push_back({"tool_choice none", r});
  }
  {
    ChatRequest r;
    r.messages = {msg("user", "{}")};
    r.response_format = ResponseFormat::json_object;
    cs.push_back({"json_object, no model", r});
    r.response_format = ResponseFormat::json_schema;
    r.json_schema = json::parse(R"({"name": "output", "strict": true,
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}})");
    cs.push_back({"json_schema", r});
  }
  {
    ChatRequest r;
    r.messages = {msg("user", "sample")};
    Sampling& s = r.sampling;
    s.max_tokens = 77;
    s.temperature = 0.3f;
    s.top_p = 0.9f;
    s.seed = (std::uint64_t{1} << 63) + 5;  // past int64: sent and read as uint64
    s.presence_penalty = -0.5f;
    s.frequency_penalty = 1.25f;
    s.stop = {"END", "\n\n"};
    s.n = 3;
    s.stream = true;
    s.include_usage = true;
    s.logprobs = 2;
    cs.push_back({"every sampling field", r});
    s.seed = 0;
    s.temperature = 0.0f;
    s.include_usage = false;
    s.logprobs = 0;
    cs.push_back({"seed 0, greedy, logprobs without top_logprobs, stream without usage", r});
  }
  return cs;
}

TEST(OpenAiCodec, ChatRequestsRoundTrip) {
  for (const auto& c : chat_cases()) {
    SCOPED_TRACE(c.name);
    const std::string body = chat_request_body(c.request);
    ChatRequest back;
    auto e = parse_chat_request(body, back);
    ASSERT_FALSE(e) << e->message << "\n" << body;
    EXPECT_EQ(back, c.request) << "sent:   " << body << "\nparsed: " << show(back);
    EXPECT_EQ(chat_request_body(back), body);
  }
}

TEST(OpenAiCodec, ChatRequestsFromOtherClientsReadAsTheirCanonicalForm) {
  // What the official SDKs send in other spellings: max_completion_tokens, developer,
  // content parts, arguments as an object, stop as one string, stream_options without usage.
  ChatRequest r;
  auto e = parse_chat_request(R"({"model": "m", "messages": [
      {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": {"x": 1}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "max_completion_tokens": 9, "stop": "END", "stream": true,
      "stream_options": {"include_usage": false}})",
                              r);
  ASSERT_FALSE(e) << e->message;
  ChatRequest want;
  want.model = "m";
  want.messages = {msg("system", "be brief"), msg("assistant", ""), msg("tool", "42")};
  want.messages[1].tool_calls = {{"c1", "f", R"({"x":1})"}};
  want.messages[2].tool_call_id = "c1";
  want.tools = {{"f", "", json::object{{"type", "object"}}}};
  want.sampling.max_tokens = 9;
  want.sampling.stop = {"END"};
  want.sampling.stream = true;
  EXPECT_EQ(r, want) << show(r);
  EXPECT_EQ(
      chat_request_body(r),
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"assistant","content":null,)"
      R"("tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},)"
      R"({"role":"tool","content":"42","tool_call_id":"c1"}],"tools":[{"type":"function","function":)"
      R"({"name":"f","description":"","parameters":{"type":"object"}}}],"tool_choice":"auto",)"
      R"("max_tokens":9,"temperature":1E0,"stop":["END"],"stream":true})");
}

TEST(OpenAiCodec, CompletionRequestsRoundTrip) {
  std::vector<std::pair<const char*, CompletionRequest>> cases;
  {
    CompletionRequest r;
    r.model = "tiny";
    r.prompt = "Once upon a time";
    cases.push_back({"text", r});
    r.echo = true;
    r.sampling.logprobs = 3;
    r.sampling.max_tokens = 5;
    r.sampling.n = 2;
    r.sampling.seed = 9;
    r.sampling.stop = {"."};
    r.sampling.stream = true;
    r.sampling.include_usage = true;
    cases.push_back({"echo, logprobs, n, streamed", r});
    r = {};
    r.prompt_is_tokens = true;
    r.prompt_tokens = {1, 2, 2147483647};
    cases.push_back({"token ids", r});
  }
  for (const auto& [name, req] : cases) {
    SCOPED_TRACE(name);
    const std::string body = completion_request_body(req);
    CompletionRequest back;
    auto e = parse_completion_request(body, back);
    ASSERT_FALSE(e) << e->message << "\n" << body;
    EXPECT_EQ(back, req) << "sent:   " << body << "\nparsed: " << show(back);
    EXPECT_EQ(completion_request_body(back), body);
  }
}

TEST(OpenAiCodec, MessagesRoundTripAlone) {
  // One message is also the shape of messages in run state.
  ChatMessage calls = msg("assistant", "");
  calls.tool_calls = {{"call_1", "calculator", R"({"expression":"1+1"})"}};
  ChatMessage tool = msg("tool", "2");
  tool.tool_call_id = "call_1";
  tool.name = "calculator";
  ChatMessage named = msg("user", "hello");
  named.name = "bob";
  for (const auto& m : {msg("system", "s"), named, msg("assistant", "a"), calls, tool}) {
    const json::object j = message_json(m);
    ChatMessage back;
    auto e = parse_message(j, "message", back);
    ASSERT_FALSE(e) << e->message;
    EXPECT_EQ(back, m) << json::serialize(j);
    EXPECT_EQ(message_json(back), j);
  }
  EXPECT_EQ(json::serialize(message_json(calls)),
            R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",)"
            R"("function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]})");
}

// --- responses: a server builds, a client parses, and back ----------------------------------

std::vector<TokenLogprobs> lps(std::initializer_list<const char*> tokens) {
  std::vector<TokenLogprobs> out;
  float lp = -0.5f;
  for (const char* t : tokens) {
    out.push_back({t, lp, {{t, lp}, {"x", lp - 1.25f}}});
    lp -= 0.25f;
  }
  return out;
}

struct ResponseCase {
  const char* name;
  Completion completion;
};

std::vector<ResponseCase> chat_response_cases() {
  std::vector<ResponseCase> cs;
  Envelope env{"chatcmpl-abc", 1700000000, "tiny"};
  Usage usage{12, 3, 8};
  cs.push_back({"text", {env, {{0, "Hello there.", {}, "stop", std::nullopt}}, usage}});
  cs.push_back({"tool calls, no text",
                {env,
                 {{0,
                   "",
                   {{"call_9", "calculator", R"({"expression":"6*7"})"}, {"call_10", "f", "{}"}},
                   "tool_calls",
                   std::nullopt}},
                 usage}});
  cs.push_back(
      {"text and a tool call",
       {env, {{0, "Looking.", {{"call_1", "search", R"({"q":"x"})"}}, "tool_calls", {}}}, usage}});
  cs.push_back({"three choices, logprobs, a cut one",
                {env,
                 {{0, "ab", {}, "stop", lps({"a", "b"})},
                  {1, "c", {}, "length", lps({"c"})},
                  {2, "", {}, "stop", std::vector<TokenLogprobs>{}}},
                 usage}});
  return cs;
}

TEST(OpenAiCodec, ChatCompletionsRoundTrip) {
  for (const auto& c : chat_response_cases()) {
    SCOPED_TRACE(c.name);
    const auto& x = c.completion;
    const std::string body = chat_completion(x.envelope, x.choices, *x.usage);
    auto back = parse_chat_completion(body);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, x) << "sent:   " << body << "\nparsed: " << show(*back);
    EXPECT_EQ(chat_completion(back->envelope, back->choices, *back->usage), body);
  }
}

// The chunks weir serve writes for `x`: the role first, the text in pieces, tool calls and the
// finish reason last, the usage chunk, [DONE].
std::vector<std::string> chat_stream_of(const Completion& x) {
  std::vector<std::string> out;
  std::vector<Choice> first;
  for (const auto& c : x.choices) first.push_back({c.index, "", {}, "", std::nullopt});
  out.push_back(chat_chunk(x.envelope, first, true));
  for (const auto& c : x.choices) {
    // Text in pieces of 2 bytes, each with its tokens' logprobs.
    std::size_t t = 0;
    for (std::size_t at = 0; at < c.text.size(); at += 2) {
      Choice piece{c.index, c.text.substr(at, 2), {}, "", std::nullopt};
      if (c.logprobs && t < c.logprobs->size())
        piece.logprobs = std::vector<TokenLogprobs>{(*c.logprobs)[t++]};
      out.push_back(chat_chunk(x.envelope, {piece}, false));
    }
    Choice last{c.index, "", c.tool_calls, c.finish_reason, std::nullopt};
    if (c.logprobs)
      last.logprobs =
          std::vector<TokenLogprobs>(c.logprobs->begin() + static_cast<long>(t), c.logprobs->end());
    out.push_back(chat_chunk(x.envelope, {last}, false));
  }
  if (x.usage) out.push_back(chat_chunk(x.envelope, {}, false, &*x.usage));
  out.push_back("[DONE]");
  return out;
}

TEST(OpenAiCodec, ChatStreamsAssembleToTheWholeCompletion) {
  for (const auto& c : chat_response_cases()) {
    SCOPED_TRACE(c.name);
    StreamAssembler a;
    for (const auto& chunk : chat_stream_of(c.completion)) {
      EXPECT_FALSE(a.done());
      auto st = a.add(chunk);
      ASSERT_TRUE(st) << st.error().message << "\n" << chunk;
    }
    EXPECT_TRUE(a.done());
    EXPECT_TRUE(a.finished());
    EXPECT_EQ(a.finish(), c.completion) << show(a.finish());
  }
}

TEST(OpenAiCodec, ToolCallsStreamedInFragmentsAssemble) {
  // OpenAI's own way: the id and name in the first fragment, the arguments in pieces, the
  // index naming the call; a server that leaves the index out has its calls kept apart by place.
  StreamAssembler a;
  for (
      const char* chunk : {
          R"({"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":null}}]})",
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"calc","arguments":""}}]}}]})",
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\""}}]}}]})",
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":": 1}"}},{"index":1,"id":"call_b","function":{"name":"f","arguments":"{}"}}]}}]})",
          R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
      })
    ASSERT_TRUE(a.add(chunk)) << chunk;
  EXPECT_FALSE(a.done());
  EXPECT_TRUE(a.finished());  // a stream that ends here is complete
  EXPECT_TRUE(a.has_tokens());
  auto c = a.finish();
  ASSERT_EQ(c.choices.size(), 1u);
  EXPECT_EQ(c.choices[0].tool_calls,
            (std::vector<ToolCall>{{"call_a", "calc", R"({"x": 1})"}, {"call_b", "f", "{}"}}));
  EXPECT_EQ(c.choices[0].finish_reason, "tool_calls");
  EXPECT_FALSE(c.usage);

  StreamAssembler no_index;
  ASSERT_TRUE(no_index.add(
      R"({"choices":[{"delta":{"tool_calls":[{"id":"1","function":{"name":"a","arguments":{"k":1}}},{"id":"2","function":{"name":"b"}}]},"finish_reason":"tool_calls"}]})"));
  EXPECT_EQ(no_index.finish().choices.at(0).tool_calls,
            (std::vector<ToolCall>{{"1", "a", R"({"k":1})"}, {"2", "b", ""}}));

  StreamAssembler role_only;
  ASSERT_TRUE(role_only.add(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})"));
  EXPECT_FALSE(role_only.has_tokens());
  EXPECT_FALSE(role_only.finished());
}

TEST(OpenAiCodec, CompletionsAndTheirStreamsRoundTrip) {
  Envelope env{"cmpl-1", 1700000001, "tiny"};
  const std::vector<Completion> cases = {
      {env, {{0, "Once upon", {}, "length", std::nullopt}}, Usage{4, 2, 0}},
      {env,
       {{0, "ab", {}, "stop", lps({"a", "b"})}, {1, "c", {}, "length", lps({"c"})}},
       Usage{4, 3, 2}},
  };
  for (const auto& x : cases) {
    const std::string body = completion(x.envelope, x.choices, *x.usage);
    auto back = parse_completion(body);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, x) << body;
    EXPECT_EQ(completion(back->envelope, back->choices, *back->usage), body);

    StreamAssembler a;
    for (const auto& c : x.choices) {
      for (std::size_t i = 0; i < c.text.size(); ++i) {
        Choice piece{c.index, c.text.substr(i, 1), {}, "", std::nullopt};
        if (c.logprobs) piece.logprobs = std::vector<TokenLogprobs>{(*c.logprobs)[i]};
        ASSERT_TRUE(a.add(completion_chunk(x.envelope, {piece})));
      }
      ASSERT_TRUE(a.add(completion_chunk(x.envelope, {{c.index, "", {}, c.finish_reason, {}}})));
    }
    ASSERT_TRUE(a.add(completion_chunk(x.envelope, {}, &*x.usage)));
    ASSERT_TRUE(a.add("[DONE]"));
    auto streamed = a.finish();
    // A chunk's logprobs object is present even when empty: the finish chunk's "{}" reads as
    // an empty list for a choice without logprobs.
    for (auto& c : streamed.choices)
      if (c.logprobs && c.logprobs->empty() && !x.choices[c.index].logprobs) c.logprobs.reset();
    EXPECT_EQ(streamed, x);
  }
}

// --- errors, both directions ----------------------------------------------------------------

TEST(OpenAiCodec, ErrorBodiesRoundTrip) {
  for (const ApiError& e : {ApiError{400, "'messages' must be a non-empty array", "messages", ""},
                            ApiError{429, "model 'tiny' is overloaded", "", "overloaded"},
                            ApiError{504, "the request ran past --request-timeout", "", "timeout"},
                            ApiError{500, "boom", "", ""}}) {
    EXPECT_EQ(parse_error_body(e.status, e.body()), e) << e.body();
  }
  // Other servers' shapes.
  EXPECT_EQ(parse_error_body(503, R"({"error": "model is loading"})").message, "model is loading");
  EXPECT_EQ(parse_error_body(400, R"({"message": "bad", "code": 7})").message, "bad");
  EXPECT_EQ(parse_error_body(400, R"({"error": {"message": "m", "code": 7}})").code, "7");
  EXPECT_EQ(parse_error_body(502, "<html>\nBad gateway\n</html>").message,
            "<html> Bad gateway </html>");
  EXPECT_EQ(parse_error_body(500, std::string(400, 'x')).message, std::string(300, 'x'));
  // An error sent as a stream event (weir serve's timeout) fails the stream with its message.
  StreamAssembler a;
  auto st = a.add(ApiError{504, "ran past the timeout", "", "timeout"}.body());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "error in the stream: ran past the timeout");
}

TEST(OpenAiCodec, ResponsesAClientCannotUseAreErrorsThatSaySo) {
  struct Case {
    const char* body;
    const char* error;
  };
  const Case whole[] = {
      {"{\"choices\": [tru", "chat completion:1:"},
      {"[1, 2]", "chat completion is not a JSON object: [1, 2]"},
      {"{}", "chat completion without choices: {}"},
      {R"({"choices": []})", "chat completion without choices: {\"choices\": []}"},
      {R"({"error": {"message": "quota"}})", "chat completion without choices: quota"},
      {R"({"choices": [{"index": 0}]})", "chat completion choice without a message"},
  };
  for (const auto& c : whole) {
    auto r = parse_chat_completion(c.body);
    ASSERT_FALSE(r) << c.body;
    EXPECT_TRUE(r.error().is(Errc::model_error));
    EXPECT_TRUE(r.error().message.starts_with(c.error)) << r.error().message;
  }
  const Case chunks[] = {
      {"{not json", "stream chunk:1:"},
      {"42", "a stream chunk is not a JSON object: 42"},
      {R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":128}]}}]})",
       "stream chunk names tool call index 128 (at most 128)"},
      {R"({"choices":[{"index":4000000000,"delta":{}}]})",
       "stream chunk names choice index 2147483647 (at most 128)"},
      {R"({"error": {"message": "overloaded"}})", "error in the stream: overloaded"},
  };
  for (const auto& c : chunks) {
    StreamAssembler a;
    auto st = a.add(c.body);
    ASSERT_FALSE(st) << c.body;
    EXPECT_TRUE(st.error().is(Errc::model_error));
    EXPECT_TRUE(st.error().message.starts_with(c.error)) << st.error().message;
  }
}

TEST(OpenAiCodec, RequestsAServerCannotUseAreErrorsNamingTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
          "function": {"name": "f", "arguments": "[1]"}}]}]})",
       "messages[0].tool_calls[0].function.arguments",
       "messages[0].tool_calls[0].function.arguments must be a JSON object as a string, not an "
       "array"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
          "arguments": "{\"x\": "}}]}]})",
       "messages[0].tool_calls[0].function.arguments",
       "messages[0].tool_calls[0].function.arguments must be a JSON object as a string: "
       "arguments:1:7: "},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
          "arguments": 5}}]}]})",
       "messages[0].tool_calls[0].function.arguments",
       "messages[0].tool_calls[0].function.arguments must be a JSON object as a string, not a "
       "number"},
      {R"({"messages": [{"role": "robot"}]})", "messages[0].role",
       "messages[0].role 'robot' is not one of system, developer, user, assistant, tool"},
  };
  for (const auto& c : cases) {
    ChatRequest r;
    auto e = parse_chat_request(c.body, r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, c.param);
    EXPECT_TRUE(e->message.starts_with(c.message)) << e->message;
  }
}

// --- completion prompts ---------------------------------------------------------------------

TEST(OpenAiCodec, TokenPromptsOutsideInt32AreRefusedInEveryForm) {
  // Flat and nested (a batch of one) forms take the same token ids and refuse the same ones:
  // 4294967297 once wrapped to token 1 in the nested form.
  struct Case {
    const char* body;
    const char* error;  // "" = accepted
  };
  const Case cases[] = {
      {R"({"prompt": [1, 2]})", ""},
      {R"({"prompt": [[1, 2]]})", ""},
      {R"({"prompt": [2147483647]})", ""},
      {R"({"prompt": [[2147483647]]})", ""},
      {R"({"prompt": [4294967297]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[4294967297]]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[-1]]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [-1]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[18446744073709551615]]})",
       "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[1.5]]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[]]})", "'prompt' is empty"},
      {R"({"prompt": []})", "'prompt' is empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    CompletionRequest r;
    auto e = parse_completion_request(c.body, r);
    if (!*c.error) {
      EXPECT_FALSE(e) << e->message;
      EXPECT_TRUE(r.prompt_is_tokens);
      EXPECT_FALSE(r.prompt_tokens.empty());
      continue;
    }
    if (!e) {
      ADD_FAILURE() << "accepted as " << r.prompt_tokens.size() << " tokens, the first "
                    << (r.prompt_tokens.empty() ? -1 : r.prompt_tokens[0]);
      continue;
    }
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, "prompt");
    EXPECT_EQ(e->message, c.error);
  }
}

// --- known fields: implemented, ignored because they change nothing, or refused by name -----

struct FieldCase {
  const char* fields;   // spliced into a valid request
  const char* param;    // "" = accepted
  const char* message;  // the 400's message starts with this
};

TEST(OpenAiCodec, KnownChatFieldsThatWouldChangeTheResultAreRefusedByName) {
  const FieldCase cases[] = {
      // OpenAI's fields weir does not implement.
      {R"("logit_bias": {"50256": -100})", "logit_bias",
       "'logit_bias' is not supported; remove it (it would change the result)"},
      {R"("audio": {"voice": "alloy", "format": "wav"})", "audio",
       "'audio' is not supported; remove it (it would change the result)"},
      {R"("modalities": ["text", "audio"])", "modalities", "'modalities' may only be [\"text\"]"},
      {R"("functions": [{"name": "f"}])", "functions",
       "'functions' is not supported; remove it (it would change the result): send 'tools' "
       "instead"},
      {R"("function_call": "auto")", "function_call",
       "'function_call' is not supported; remove it (it would change the result): send "
       "'tool_choice' instead"},
      {R"("reasoning_effort": "low")", "reasoning_effort",
       "'reasoning_effort' is not supported; remove it (it would change the result)"},
      {R"("verbosity": "low")", "verbosity",
       "'verbosity' is not supported; remove it (it would change the result)"},
      {R"("web_search_options": {})", "web_search_options",
       "'web_search_options' is not supported; remove it (it would change the result)"},
      // Known fields of the wrong type were ignored.
      {R"("stream_options": true)", "stream_options", "'stream_options' must be an object"},
      {R"("parallel_tool_calls": "no")", "parallel_tool_calls",
       "'parallel_tool_calls' must be true or false"},
      {R"("logit_bias": [1])", "logit_bias", "'logit_bias' must be an object"},
      // The sampling extensions of vLLM and llama.cpp's server, out of range.
      {R"("top_k": -2)", "top_k", "'top_k' must be between -1 and 2147483647, got -2"},
      {R"("min_p": 1.5)", "min_p", "'min_p' must be between 0 and 1, got 1.5"},
      {R"("repetition_penalty": 0)", "repetition_penalty",
       "'repetition_penalty' must be above 0 (1 turns it off), got 0"},
      // Fields that change nothing in the answer, and empty forms of refused ones: accepted.
      {R"("user": "u1", "metadata": {"k": "v"}, "store": false, "service_tier": "auto",
          "prompt_cache_key": "k", "safety_identifier": "s", "prediction": {"type": "content",
          "content": "x"}, "parallel_tool_calls": false, "logit_bias": {}, "audio": null,
          "modalities": ["text"], "functions": null, "stream_options": {"include_obfuscation": false})",
       "", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fields);
    ChatRequest r;
    auto e = parse_chat_request(
        std::string(R"({"messages": [{"role": "user", "content": "hi"}], )") + c.fields + "}", r);
    if (!*c.param) {
      EXPECT_FALSE(e) << e->message;
      continue;
    }
    if (!e) {
      ADD_FAILURE() << "accepted";
      continue;
    }
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, c.param);
    EXPECT_TRUE(e->message.starts_with(c.message)) << e->message;
  }
}

TEST(OpenAiCodec, KnownCompletionFieldsThatWouldChangeTheResultAreRefusedByName) {
  const FieldCase cases[] = {
      {R"("logit_bias": {"1": 5})", "logit_bias",
       "'logit_bias' is not supported; remove it (it would change the result)"},
      {R"("suffix": "end")", "suffix",
       "'suffix' is not supported; remove it (it would change the result)"},
      {R"("best_of": 3)", "best_of", "'best_of' above 1 is not supported; use n"},
      {R"("best_of": "3")", "best_of", "'best_of' must be an integer, not a string"},
      {R"("user": "u", "best_of": 1, "suffix": "", "logit_bias": null)", "", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fields);
    CompletionRequest r;
    auto e = parse_completion_request(std::string(R"({"prompt": "x", )") + c.fields + "}", r);
    if (!*c.param) {
      EXPECT_FALSE(e) << e->message;
      continue;
    }
    if (!e) {
      ADD_FAILURE() << "accepted";
      continue;
    }
    EXPECT_EQ(e->param, c.param);
    EXPECT_TRUE(e->message.starts_with(c.message)) << e->message;
  }
}

TEST(OpenAiCodec, ToolsAreCheckedAsOpenAIChecksThem) {
  const std::string n64(64, 'a');
  const std::string n65(65, 'a');
  const FieldCase cases[] = {
      {"{\"name\": \"fs/read_file\"}", "tools[0].function.name",
       "tools[0].function.name 'fs/read_file' must be 1 to 64 letters, digits, '_' or '-'"},
      {"{\"name\": \"has space\"}", "tools[0].function.name",
       "tools[0].function.name 'has space' must be 1 to 64"},
      {"{\"name\": \"\"}", "tools[0].function.name", "tools[0].function.name '' must be 1 to 64"},
      {"{\"name\": \"caf\xc3\xa9\"}", "tools[0].function.name",
       "tools[0].function.name 'caf\xc3\xa9' must be"},
      {"{\"name\": \"f\", \"description\": 5}", "tools[0].function.description",
       "'description' must be a string, not a number"},
      {"{\"name\": \"f\", \"parameters\": \"{}\"}", "tools[0].function.parameters",
       "tools[0].function.parameters must be a JSON Schema object, not a string"},
      {"{\"name\": \"f\", \"strict\": 1}", "tools[0].function.strict",
       "'strict' must be true or false"},
      {"{\"name\": \"Get_Weather-2\", \"strict\": true}", "", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fields);
    ChatRequest r;
    auto e = parse_chat_request(
        std::string(
            R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": )") +
            c.fields + "}]}",
        r);
    if (!*c.param) {
      EXPECT_FALSE(e) << e->message;
      continue;
    }
    if (!e) {
      ADD_FAILURE() << "accepted";
      continue;
    }
    EXPECT_EQ(e->param, c.param);
    EXPECT_TRUE(e->message.starts_with(c.message)) << e->message;
  }
  ChatRequest r;
  auto ok = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [
      {"type": "function", "function": {"name": ")" +
                                   n64 + R"("}}]})",
                               r);
  EXPECT_FALSE(ok) << ok->message;
  auto e = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [
      {"type": "function", "function": {"name": ")" +
                                  n65 + R"("}}]})",
                              r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools[0].function.name");
  e = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [
      {"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]})",
                         r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools[1].function.name");
  EXPECT_EQ(e->message, "tools[1].function.name 'f' is given twice; tool names must be unique");
  e = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [
      {"type": "custom", "custom": {"name": "f"}}]})",
                         r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools[0].type");
  EXPECT_EQ(e->message, "tools[0].type 'custom' is not supported; only \"function\" tools are");
}

TEST(OpenAiCodec, MessageFieldsThatWouldChangeTheResultAreRefusedByName) {
  const FieldCase cases[] = {
      {R"({"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}})",
       "messages[0].function_call",
       "messages[0].function_call is not supported: send 'tool_calls' instead"},
      {R"({"role": "assistant", "audio": {"id": "a1"}})", "messages[0].audio",
       "messages[0].audio is not supported (audio output)"},
      {R"({"role": "user", "content": "x", "name": 7})", "messages[0].name",
       "messages[0].name must be a string, not a number"},
      {R"({"role": "tool", "content": "x", "tool_call_id": 7})", "messages[0].tool_call_id",
       "messages[0].tool_call_id must be a string, not a number"},
      {R"({"role": "assistant", "content": "x", "refusal": null, "audio": null})", "", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fields);
    ChatRequest r;
    auto e = parse_chat_request(std::string(R"({"messages": [)") + c.fields + "]}", r);
    if (!*c.param) {
      EXPECT_FALSE(e) << e->message;
      continue;
    }
    if (!e) {
      ADD_FAILURE() << "accepted";
      continue;
    }
    EXPECT_EQ(e->param, c.param);
    EXPECT_TRUE(e->message.starts_with(c.message)) << e->message;
  }
}

TEST(OpenAiCodec, SamplingExtensionsOfOtherServersRoundTrip) {
  ChatRequest r;
  auto e = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}],
      "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1})",
                              r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(*r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(*r.sampling.repetition_penalty, 1.1f);
  ChatRequest back;
  ASSERT_FALSE(parse_chat_request(chat_request_body(r), back));
  EXPECT_EQ(back, r) << chat_request_body(r);
  ChatRequest off;
  ASSERT_FALSE(
      parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "top_k": -1})", off));
  EXPECT_EQ(off.sampling.top_k, 0);  // vLLM's "off"
}

}  // namespace
}  // namespace weir::http::openai
