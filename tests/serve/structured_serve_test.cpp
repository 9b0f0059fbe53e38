// Structured output and tool calls over HTTP, as a client sees them, on a random-weight model
// (its text never ends a string by itself): a constrained reply always parses and validates
// and says finish_reason "stop", whatever max_tokens, stop sequences or streaming; a budget
// that no valid value fits is a 400 naming both numbers; with tool_choice required or named
// the reply is a tool call ("tool_calls") for any max_tokens its shortest form fits, and
// streamed, its first delta holds the id, type and name and its argument fragments
// concatenate to valid JSON; with tool_choice auto a call that starts is completed.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "http_client.hpp"
#include "serve_fixture.hpp"
#include "weir/tools/schema.hpp"

namespace weir::serve {
namespace {

using testing_http::sse_data;

const char* kPerson = R"({"type":"object","properties":{"name":{"type":"string"},
  "age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"}},
  "note":{"type":"string"}},"required":["name","age","tags"],"additionalProperties":false})";

std::string schema_request(int max_tokens, const std::string& extra = "") {
  return std::string(R"({"messages": [{"role": "user", "content": "who?"}], "max_tokens": )") +
         std::to_string(max_tokens) +
         R"(, "temperature": 1.0, "response_format": {"type": "json_schema", "json_schema":
         {"name": "person", "strict": true, "schema": )" +
         kPerson + "}}" + extra + "}";
}

void expect_valid(const std::string& schema, const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  ASSERT_FALSE(ec) << "does not parse: " << text;
  auto st = tools::validate(json::parse(schema), v);
  EXPECT_TRUE(st) << (st ? "" : st.error().message) << "\n" << text;
}

// The content and finish_reason of a reply, streamed or not.
struct Answer {
  std::string content, finish;
};
Answer answer_of(const Reply& r, bool stream) {
  Answer a;
  if (!stream) {
    auto v = body_json(r);
    const auto& c = v.at("choices").at(0);
    if (c.at("message").at("content").is_string())
      a.content = std::string(c.at("message").at("content").as_string());
    a.finish = std::string(c.at("finish_reason").as_string());
    return a;
  }
  for (const auto& ev : sse_data(r.body)) {
    if (ev == "[DONE]") break;
    auto v = json::parse(ev);
    if (v.at("choices").as_array().empty()) continue;
    const auto& c = v.at("choices").at(0);
    if (const auto* t = c.at("delta").as_object().if_contains("content"); t && t->is_string())
      a.content += t->as_string();
    if (c.at("finish_reason").is_string())
      a.finish = std::string(c.at("finish_reason").as_string());
  }
  return a;
}

TEST(StructuredServe, ConstrainedRepliesEndInTimeWithStop) {
  auto s = start(tiny_config("sv1", 1024));
  for (int max_tokens : {30, 40, 64, 150}) {  // its shortest value: 29 tokens here
    for (bool stream : {false, true}) {
      for (int seed = 0; seed < 3; ++seed) {
        SCOPED_TRACE("max_tokens " + std::to_string(max_tokens) + (stream ? " streamed" : ""));
        auto r = call(s.port, "POST", "/v1/chat/completions",
                      schema_request(max_tokens, ", \"seed\": " + std::to_string(seed) +
                                                     (stream ? ", \"stream\": true" : "")));
        ASSERT_EQ(r.status, 200) << r.body;
        Answer a = answer_of(r, stream);
        EXPECT_EQ(a.finish, "stop");
        expect_valid(kPerson, a.content);
      }
    }
  }
}

TEST(StructuredServe, TooFewTokensForAnyValidValueIsA400NamingBothNumbers) {
  auto s = start(tiny_config("sv2", 1024));
  auto r = call(s.port, "POST", "/v1/chat/completions", schema_request(3));
  ASSERT_EQ(r.status, 400) << r.body;
  const std::string m = error_message(r);
  EXPECT_NE(m.find("max_tokens=3 is too few for the response_format"), std::string::npos) << m;
  const auto v = body_json(r);
  EXPECT_EQ(v.at("error").at("param"), "max_tokens");
  // The minimum it names is exact: that many tokens give a valid value, one fewer a 400.
  const auto at = m.find("takes ");
  ASSERT_NE(at, std::string::npos) << m;
  const int need = std::stoi(m.substr(at + 6));
  EXPECT_EQ(m,
            "max_tokens=3 is too few for the response_format's schema: its shortest valid "
            "value takes " +
                std::to_string(need) +
                " tokens of this model's vocabulary; raise max_tokens to at least " +
                std::to_string(need));
  auto fewer = call(s.port, "POST", "/v1/chat/completions", schema_request(need - 1));
  EXPECT_EQ(fewer.status, 400);
  auto enough = call(s.port, "POST", "/v1/chat/completions", schema_request(need));
  ASSERT_EQ(enough.status, 200) << enough.body;
  Answer a = answer_of(enough, false);
  EXPECT_EQ(a.finish, "stop");
  expect_valid(kPerson, a.content);
}

// Stop sequences never cut a value: `,`, `"` and `:` occur in every reply of this schema.
TEST(StructuredServe, StopSequencesNeverCutAValue) {
  auto s = start(tiny_config("sv3", 1024));
  for (const char* stop : {R"([","])", R"(["\""])", R"([":"])", R"([",", "}", "\"", ":"])"}) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(stop) + (stream ? " streamed" : ""));
      auto r = call(s.port, "POST", "/v1/chat/completions",
                    schema_request(60, std::string(", \"stop\": ") + stop +
                                           (stream ? ", \"stream\": true" : "")));
      ASSERT_EQ(r.status, 200) << r.body;
      Answer a = answer_of(r, stream);
      EXPECT_EQ(a.finish, "stop");
      expect_valid(kPerson, a.content);
    }
    // json_object too.
    auto r = call(s.port, "POST", "/v1/chat/completions",
                  std::string(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 40,
                    "response_format": {"type": "json_object"}, "stop": )") +
                      stop + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    Answer a = answer_of(r, false);
    EXPECT_EQ(a.finish, "stop");
    boost::system::error_code ec;
    EXPECT_TRUE(json::parse(a.content, ec).is_object()) << a.content;
  }
}

const char* kTools = R"("tools": [
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
    "properties": {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1}},
    "required": ["query"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"], "additionalProperties": false}}}])";

std::string tool_request(int max_tokens, const std::string& choice, const std::string& extra) {
  return std::string(R"({"messages": [{"role": "user", "content": "weather in Paris?"}], )") +
         kTools + R"(, "tool_choice": )" + choice + R"(, "temperature": 1.0, "max_tokens": )" +
         std::to_string(max_tokens) + extra + "}";
}

const char* params_of(const std::string& name) {
  return name == "search"
             ? R"({"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1}}, "required": ["query"], "additionalProperties": false})"
             : R"({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false})";
}

// A call as the client assembles it: non-streamed from message.tool_calls, streamed by
// concatenating the deltas per index (OpenAI's rule: id, type and name come once, the
// arguments in fragments).
struct Call {
  std::string id, type, name, arguments;
};
struct Calls {
  std::vector<Call> calls;
  std::string content, finish;
  bool first_delta_complete = true;  // every call's first delta held id, type and name
};
Calls calls_of(const Reply& r, bool stream) {
  Calls out;
  if (!stream) {
    auto v = body_json(r);
    const auto& c = v.at("choices").at(0);
    out.finish = std::string(c.at("finish_reason").as_string());
    const auto& msg = c.at("message").as_object();
    if (msg.at("content").is_string()) out.content = std::string(msg.at("content").as_string());
    if (const auto* tc = msg.if_contains("tool_calls"))
      for (const auto& x : tc->as_array())
        out.calls.push_back({std::string(x.at("id").as_string()),
                             std::string(x.at("type").as_string()),
                             std::string(x.at("function").at("name").as_string()),
                             std::string(x.at("function").at("arguments").as_string())});
    return out;
  }
  for (const auto& ev : sse_data(r.body)) {
    if (ev == "[DONE]") break;
    auto v = json::parse(ev);
    if (v.at("choices").as_array().empty()) continue;
    const auto& c = v.at("choices").at(0);
    const auto& d = c.at("delta").as_object();
    if (const auto* t = d.if_contains("content"); t && t->is_string())
      out.content += t->as_string();
    if (const auto* tc = d.if_contains("tool_calls")) {
      for (const auto& x : tc->as_array()) {
        const auto idx = static_cast<std::size_t>(x.at("index").as_int64());
        if (idx >= out.calls.size()) {
          out.calls.resize(idx + 1);
          const auto& o = x.as_object();
          out.first_delta_complete &= o.contains("id") && o.contains("type") &&
                                      x.at("function").as_object().contains("name");
        }
        Call& k = out.calls[idx];
        const auto& o = x.as_object();
        if (o.contains("id")) k.id += o.at("id").as_string();
        if (o.contains("type")) k.type += o.at("type").as_string();
        const auto& f = x.at("function").as_object();
        if (f.contains("name")) k.name += f.at("name").as_string();
        if (f.contains("arguments")) k.arguments += f.at("arguments").as_string();
      }
    }
    if (c.at("finish_reason").is_string())
      out.finish = std::string(c.at("finish_reason").as_string());
  }
  return out;
}

TEST(StructuredServe, RequiredAndNamedToolChoiceAlwaysGiveAToolCall) {
  auto s = start(tiny_config("sv4", 1024));
  int fragments_seen = 0;
  for (const std::string choice :
       {std::string(R"("required")"),
        std::string(R"({"type": "function", "function": {"name": "get_weather"}})")}) {
    for (int max_tokens : {60, 80}) {  // the shortest get_weather call: 57 tokens here
      for (bool stream : {false, true}) {
        for (int seed = 0; seed < 3; ++seed) {
          SCOPED_TRACE(choice + " max_tokens " + std::to_string(max_tokens) +
                       (stream ? " streamed" : ""));
          auto r = call(s.port, "POST", "/v1/chat/completions",
                        tool_request(max_tokens, choice,
                                     ", \"seed\": " + std::to_string(seed) +
                                         (stream ? ", \"stream\": true" : "")));
          ASSERT_EQ(r.status, 200) << r.body;
          Calls c = calls_of(r, stream);
          EXPECT_EQ(c.finish, "tool_calls") << r.body;
          EXPECT_EQ(c.content, "") << r.body;
          ASSERT_EQ(c.calls.size(), 1u) << r.body;
          EXPECT_TRUE(c.first_delta_complete) << r.body;
          EXPECT_EQ(c.calls[0].type, "function");
          EXPECT_FALSE(c.calls[0].id.empty());
          if (choice != R"("required")") EXPECT_EQ(c.calls[0].name, "get_weather");
          ASSERT_TRUE(c.calls[0].name == "search" || c.calls[0].name == "get_weather")
              << c.calls[0].name;
          expect_valid(params_of(c.calls[0].name), c.calls[0].arguments);
          if (stream) fragments_seen += std::count(r.body.begin(), r.body.end(), '\n') > 8;
        }
      }
    }
  }
  EXPECT_GT(fragments_seen, 0);  // streamed calls came in more than one event
}

TEST(StructuredServe, RequiredToolChoiceWithTooFewTokensIsA400) {
  auto s = start(tiny_config("sv5", 1024));
  auto r = call(s.port, "POST", "/v1/chat/completions", tool_request(2, R"("required")", ""));
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_NE(error_message(r).find("max_tokens=2 is too few for tool_choice 'required': its "
                                  "shortest valid call takes "),
            std::string::npos)
      << r.body;
}

// The refusals name what the client wrote (found by the breaking pass): a named function by its
// name, max_completion_tokens when that was sent, and a tool whose parameters weir cannot
// enforce by the tool, the keyword and its place in the parameters.
TEST(StructuredServe, ToolChoiceRefusalsNameWhatTheClientWrote) {
  auto s = start(tiny_config("sv7", 1024));
  const std::string named = R"({"type": "function", "function": {"name": "get_weather"}})";
  std::string body = tool_request(2, named, "");
  body.replace(body.find("\"max_tokens\""), 12, "\"max_completion_tokens\"");
  auto r = call(s.port, "POST", "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_message(r).rfind("max_completion_tokens=2 is too few for tool_choice naming "
                                   "function 'get_weather': its shortest valid call takes ",
                                   0),
            0u)
      << r.body;
  EXPECT_NE(r.body.find(R"("param":"max_completion_tokens")"), std::string::npos) << r.body;
  const std::string odd =
      R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", )"
      R"("function": {"name": "odd", "parameters": {"type": "object", "properties": )"
      R"({"x": {"not": {"type": "string"}}}}}}], "tool_choice": "required", "max_tokens": 30})";
  r = call(s.port, "POST", "/v1/chat/completions", odd);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(error_message(r).rfind("tool_choice 'required' cannot be enforced: tool 'odd': ", 0),
            0u)
      << r.body;
  EXPECT_NE(error_message(r).find("'not'"), std::string::npos) << r.body;
  EXPECT_NE(error_message(r).find("/properties/x"), std::string::npos) << r.body;
  EXPECT_NE(error_message(r).find("; use tool_choice 'auto'"), std::string::npos) << r.body;
}

// tool_choice auto: the reply is text or a call; a call the model starts is complete (its
// arguments validate) even when max_tokens runs out right after it starts.
TEST(StructuredServe, AutoToolCallsThatStartAreCompleted) {
  auto s = start(tiny_config("sv6", 1024));
  int calls = 0;
  for (int max_tokens : {20, 35, 60}) {
    for (int seed = 0; seed < 8; ++seed) {
      for (bool stream : {false, true}) {
        // A prompt that makes the tiny model write "<tool_call>" often: its pieces are in
        // the system turn already; with temperature 1 it sometimes does.
        auto r = call(s.port, "POST", "/v1/chat/completions",
                      tool_request(max_tokens, R"("auto")",
                                   ", \"seed\": " + std::to_string(seed) +
                                       (stream ? ", \"stream\": true" : "")));
        ASSERT_EQ(r.status, 200) << r.body;
        Calls c = calls_of(r, stream);
        if (c.calls.empty()) {
          EXPECT_TRUE(c.finish == "length" || c.finish == "stop") << r.body;
          EXPECT_EQ(c.content.find("<tool_call>"), std::string::npos) << r.body;
          continue;
        }
        ++calls;
        EXPECT_EQ(c.finish, "tool_calls");
        for (const auto& k : c.calls) expect_valid(params_of(k.name), k.arguments);
      }
    }
  }
  RecordProperty("calls", calls);
}

}  // namespace
}  // namespace weir::serve
