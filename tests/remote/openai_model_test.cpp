#include "weir/agents/openai_model.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json.hpp>

#include "../trace/captured_spans.hpp"
#include "test_server.hpp"
#include "weir/agents/agent.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/http/openai.hpp"
#include "weir/runtime/trace.hpp"
#include "weir/runtime/trace_read.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/registry.hpp"

namespace weir::agents {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using weir::testing::Action;
using weir::testing::reply;
using weir::testing::sse_reply;
using weir::testing::TestServer;

std::string completion(std::string content, std::string tool_calls = {}) {
  json::object msg{{"role", "assistant"}, {"content", content}};
  if (!tool_calls.empty()) msg["tool_calls"] = json::parse(tool_calls);
  json::object o{
      {"id", "x"},
      {"object", "chat.completion"},
      {"choices",
       json::array{json::object{{"index", 0},
                                {"message", msg},
                                {"finish_reason", tool_calls.empty() ? "stop" : "tool_calls"}}}},
      {"usage", json::object{{"prompt_tokens", 12},
                             {"completion_tokens", 3},
                             {"prompt_tokens_details", json::object{{"cached_tokens", 8}}}}}};
  return json::serialize(o);
}

OpenAIModelOptions options(const TestServer& s) {
  OpenAIModelOptions o;
  o.base_url = s.url();
  o.model = "tiny";
  o.initial_backoff = 1ms;
  o.max_backoff = 50ms;
  return o;
}

// One io_context for the whole binary: pooled connections are bound to the context they were
// made on, which must outlive the model (see openai_model.hpp).
asio::io_context& test_io() {
  static asio::io_context io;
  return io;
}

Result<ChatResponse> chat(OpenAIChatModel& m, std::vector<Message> msgs = {Message::user("hi")},
                          std::vector<ToolSpec> tools = {}, ChatParams params = {}) {
  auto& io = test_io();
  io.restart();
  Result<ChatResponse> out;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { out = co_await m.async_chat(msgs, tools, params); },
      asio::detached);
  io.run();
  return out;
}

std::string body_of(const std::string& request) {
  return request.substr(request.find("\r\n\r\n") + 4);
}

TEST(OpenAIModel, NonStreamedWithToolCallsAndUsage) {
  TestServer server([](int, const std::string&) {
    return reply(
        200,
        completion(
            "",
            R"([{"id":"call_9","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}}])"));
  });
  ::setenv("WEIR_TEST_OPENAI_KEY", "sk-test-123", 1);
  auto o = options(server);
  o.api_key_env = "WEIR_TEST_OPENAI_KEY";
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m) << m.error().message;
  Message asst = Message::assistant("");
  asst.tool_calls.push_back({"call_1", "calculator", json::object{{"expression", "1+1"}}});
  Message tool{Role::tool, "2", {}, "call_1", "calculator"};
  auto r = chat(**m, {Message::system("be exact"), Message::user("6*7?"), asst, tool},
                {ToolSpec{"calculator", "does arithmetic", json::object{{"type", "object"}}}});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_EQ(r->message.tool_calls[0].id, "call_9");
  EXPECT_EQ(r->message.tool_calls[0].name, "calculator");
  EXPECT_EQ(json::serialize(r->message.tool_calls[0].arguments), R"({"expression":"6*7"})");
  EXPECT_EQ(r->finish_reason, "tool_calls");
  EXPECT_EQ(r->usage.prompt_tokens, 12);
  EXPECT_EQ(r->usage.completion_tokens, 3);
  EXPECT_EQ(r->usage.cached_prompt_tokens, 8);

  const auto req = server.received().at(0);
  EXPECT_NE(req.find("POST /v1/chat/completions HTTP/1.1"), std::string::npos);
  EXPECT_NE(req.find("Authorization: Bearer sk-test-123"), std::string::npos);
  auto sent = json::parse(body_of(req)).as_object();
  EXPECT_EQ(sent["model"], "tiny");
  auto& msgs = sent["messages"].as_array();
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[2].at("tool_calls").at(0).at("function").at("arguments"),
            R"({"expression":"1+1"})");
  EXPECT_EQ(msgs[3].at("role"), "tool");
  EXPECT_EQ(msgs[3].at("tool_call_id"), "call_1");
  EXPECT_EQ(sent["tools"].at(0).at("type"), "function");
  EXPECT_EQ(sent["tools"].at(0).at("function").at("name"), "calculator");
  EXPECT_EQ(sent["tool_choice"], "auto");
}

TEST(OpenAIModel, StreamedDeltasAreAssembled) {
  TestServer server([](int, const std::string&) {
    return sse_reply(
        {R"({"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]})",
         R"({"choices":[{"index":0,"delta":{"content":"lo"}}]})",
         R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"calc","arguments":"{\"x\""}}]}}]})",
         R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":": 1}"}}]},"finish_reason":"tool_calls"}]})",
         R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":4}}})",
         "[DONE]"});
  });
  auto o = options(server);
  o.stream = true;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  auto r = chat(**m);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->message.content, "Hello");
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_EQ(r->message.tool_calls[0].id, "call_a");
  EXPECT_EQ(json::serialize(r->message.tool_calls[0].arguments), R"({"x":1})");
  EXPECT_EQ(r->finish_reason, "tool_calls");
  EXPECT_EQ(r->usage.completion_tokens, 7);
  EXPECT_EQ(r->usage.cached_prompt_tokens, 4);
  auto sent = json::parse(body_of(server.received().at(0))).as_object();
  EXPECT_EQ(sent["stream"], true);
}

// A streamed reply's text is passed on as it comes (ChatParams::on_text: an llm node's message
// streamed to a client), over a retry too: the second attempt passes on only what the first did
// not, once its text matched; an attempt whose text differs passes on nothing more.
TEST(OpenAIModel, StreamedTextIsPassedOnAsItComesOnceAcrossRetries) {
  TestServer server([](int n, const std::string&) {
    if (n == 1)  // cut in its second piece: the call is tried again
      return sse_reply({R"({"choices":[{"index":0,"delta":{"content":"Once "}}]})",
                        R"({"choices":[{"index":0,"delta":{"content":"upon"}}]})"},
                       /*cut=*/true);
    return sse_reply({R"({"choices":[{"index":0,"delta":{"content":"Once upon"}}]})",
                      R"({"choices":[{"index":0,"delta":{"content":" a time"}}]})",
                      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})", "[DONE]"});
  });
  auto o = options(server);
  o.stream = true;
  o.max_retries = 1;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  std::vector<std::string> pieces;
  ChatParams p;
  p.on_text = [&](std::string_view t) { pieces.emplace_back(t); };
  auto r = chat(**m, {Message::user("hi")}, {}, p);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->message.content, "Once upon a time");
  EXPECT_EQ(pieces, (std::vector<std::string>{"Once ", "upon", " a time"}));

  // An attempt whose text differs from what was passed on: nothing more is passed on.
  TestServer other([](int n, const std::string&) {
    if (n == 1)  // (the cut loses the last event)
      return sse_reply({R"({"choices":[{"index":0,"delta":{"content":"Once "}}]})",
                        R"({"choices":[{"index":0,"delta":{"content":"upon"}}]})"},
                       /*cut=*/true);
    return sse_reply({R"({"choices":[{"index":0,"delta":{"content":"Twice"}}]})",
                      R"({"choices":[{"index":0,"delta":{"content":" more"}}]})",
                      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})", "[DONE]"});
  });
  auto o2 = options(other);
  o2.stream = true;
  o2.max_retries = 1;
  auto m2 = OpenAIChatModel::open(o2);
  pieces.clear();
  r = chat(**m2, {Message::user("hi")}, {}, p);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->message.content, "Twice more");
  EXPECT_EQ(pieces, (std::vector<std::string>{"Once "}));

  // Without streaming, or with tools on offer, nothing is passed on: the reply comes whole.
  TestServer whole([](int, const std::string&) { return reply(200, completion("whole")); });
  auto m3 = OpenAIChatModel::open(options(whole));
  pieces.clear();
  r = chat(**m3, {Message::user("hi")}, {}, p);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(pieces.empty());
}

TEST(OpenAIModel, RetriesA429HonouringRetryAfter) {
  TestServer server([](int n, const std::string&) {
    if (n == 1) return reply(429, R"({"error":{"message":"slow down"}})", "Retry-After: 0.3\r\n");
    return reply(200, completion("done"));
  });
  auto o = options(server);
  o.max_backoff = 2000ms;
  auto m = OpenAIChatModel::open(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = chat(**m);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->message.content, "done");
  EXPECT_EQ(server.requests(), 2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 290ms);  // Retry-After: 0.3 honoured
}

// A 429 is a fence that acted: the chat span carries a weir.fence.rate_limited event naming the
// endpoint, the attempt and the status; the answer after it is the call's.
TEST(OpenAIModel, A429IsAnEventOnTheChatSpan) {
  TestServer server([](int n, const std::string&) {
    if (n == 1) return reply(429, R"({"error":{"message":"slow down"}})", "Retry-After: 0.05\r\n");
    return reply(200, completion("done"));
  });
  auto m = OpenAIChatModel::open(options(server));
  ASSERT_TRUE(m) << m.error().message;
  auto text = std::make_shared<std::string>();
  auto tracer_owned = testing::captured_tracer(text);
  trace::Tracer& tracer = *tracer_owned;
  trace::Span span = tracer.start_span("chat openai:tiny", nullptr, trace::SpanKind::client);
  ChatParams params;
  params.span = &span;
  auto out = chat(**m, {Message::user("hi")}, {}, params);
  span.end();
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->message.content, "done");
  ASSERT_TRUE(tracer.flush(10s));
  auto spans = trace::parse_otlp_json_lines(*text, "captured");
  ASSERT_TRUE(spans) << spans.error().message;
  ASSERT_EQ(spans->size(), 1u);
  const auto& events = spans->at(0).span.events;
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "weir.fence.rate_limited");
  auto attr = [&](const std::string& key) -> const trace::AttributeValue* {
    for (const auto& a : events[0].attributes)
      if (a.key == key) return &a.value;
    return nullptr;
  };
  ASSERT_TRUE(attr("http.response.status_code"));
  EXPECT_EQ(std::get<std::int64_t>(*attr("http.response.status_code")), 429);
  ASSERT_TRUE(attr("weir.attempt"));
  EXPECT_EQ(std::get<std::int64_t>(*attr("weir.attempt")), 1);
  // The model as the provider names it (no "openai:" prefix).
  for (const auto& a : spans->at(0).span.attributes)
    if (a.key == "gen_ai.request.model") EXPECT_EQ(std::get<std::string>(a.value), "tiny");
}

TEST(OpenAIModel, Retries500ThenSucceeds) {
  TestServer server([](int n, const std::string&) {
    return n < 3 ? reply(500, "oops", {}, "text/plain") : reply(200, completion("ok"));
  });
  auto m = OpenAIChatModel::open(options(server));
  auto r = chat(**m);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(server.requests(), 3);
}

TEST(OpenAIModel, GivesUpAfterItsRetriesWithTheStatusAndServerMessage) {
  TestServer server([](int, const std::string&) {
    return reply(503, R"({"error":{"message":"model is loading"}})");
  });
  auto o = options(server);
  o.max_retries = 2;
  auto m = OpenAIChatModel::open(o);
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::model_error));
  EXPECT_EQ(r.error().message, "openai " + server.url() +
                                   ": 503 Service Unavailable after 3 attempts: model is loading");
  EXPECT_EQ(server.requests(), 3);
}

TEST(OpenAIModel, ClientErrorsAreNotRetried) {
  TestServer server([](int, const std::string&) {
    return reply(400, R"({"error":{"message":"bad tool schema"}})");
  });
  auto m = OpenAIChatModel::open(options(server));
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::invalid_argument));
  EXPECT_EQ(r.error().message,
            "openai " + server.url() + ": 400 Bad Request after 1 attempt: bad tool schema");
  EXPECT_EQ(server.requests(), 1);
}

TEST(OpenAIModel, RetryBudgetBoundsTheWaits) {
  TestServer server([](int, const std::string&) { return reply(429, "{}", "Retry-After: 1\r\n"); });
  auto o = options(server);
  o.max_backoff = 1000ms;
  o.retry_budget = 100ms;
  auto m = OpenAIChatModel::open(o);
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::overloaded));
  EXPECT_NE(
      r.error().message.find("429 Too Many Requests after 1 attempt (retry_budget_ms=100 spent)"),
      std::string::npos)
      << r.error().message;
  EXPECT_EQ(server.requests(), 1);
}

TEST(OpenAIModel, InvalidJsonIsAModelErrorWithoutRetry) {
  TestServer server([](int, const std::string&) { return reply(200, "{\"choices\": [tru"); });
  auto m = OpenAIChatModel::open(options(server));
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::model_error));
  EXPECT_TRUE(r.error().message.starts_with("openai " + server.url() + ": chat completion:1:"))
      << r.error().message;
  EXPECT_EQ(server.requests(), 1);
}

TEST(OpenAIModel, StreamCutInTheMiddleIsRetriedThenReported) {
  TestServer server([](int, const std::string&) {
    return sse_reply({R"({"choices":[{"index":0,"delta":{"content":"Hel"}}]})",
                      R"({"choices":[{"index":0,"delta":{"content":"lo"}}]})"},
                     /*cut=*/true);
  });
  auto o = options(server);
  o.stream = true;
  o.max_retries = 1;
  auto m = OpenAIChatModel::open(o);
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::io_error)) << r.error().message;
  EXPECT_EQ(r.error().message, "openai " + server.url() +
                                   ": connection closed by the server, response cut before its "
                                   "end after 2 attempts");
  EXPECT_EQ(server.requests(), 2);
}

TEST(OpenAIModel, ConnectionResetIsRetried) {
  TestServer server([](int n, const std::string&) {
    return n == 1 ? Action{.reset = true} : reply(200, completion("after reset"));
  });
  auto m = OpenAIChatModel::open(options(server));
  auto r = chat(**m);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->message.content, "after reset");
  EXPECT_EQ(server.requests(), 2);
}

TEST(OpenAIModel, ResponseOverTheCap) {
  TestServer server(
      [](int, const std::string&) { return reply(200, completion(std::string(4096, 'a'))); });
  auto o = options(server);
  o.max_response_bytes = 1024;
  auto m = OpenAIChatModel::open(o);
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::memory_budget_exceeded));
  EXPECT_EQ(r.error().message, "openai " + server.url() +
                                   ": response body larger than http.max_response_bytes=1024 "
                                   "after 1 attempt");
}

TEST(OpenAIModel, HeadersThatNeverComeTimeOut) {
  TestServer server([](int, const std::string&) { return Action{.hang = true}; });
  auto o = options(server);
  o.timeout = 200ms;
  o.max_retries = 0;
  auto m = OpenAIChatModel::open(o);
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::deadline_exceeded)) << r.error().message;
  EXPECT_EQ(r.error().message,
            "openai " + server.url() + ": no answer within timeout_ms=200 after 1 attempt");
}

TEST(OpenAIModel, ConcurrencyLimitQueuesThenRefuses) {
  TestServer server([](int, const std::string&) { return Action{.hang = true}; });
  auto o = options(server);
  o.max_concurrency = 1;
  o.max_queued = 1;
  o.timeout = 500ms;
  o.max_retries = 0;
  auto m = OpenAIChatModel::open(o);
  auto& io = test_io();
  io.restart();
  std::vector<Result<ChatResponse>> out(3);
  for (int i = 0; i < 3; ++i)
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          std::vector<Message> msgs{Message::user("hi")};
          std::vector<ToolSpec> tools;
          ChatParams params;
          out[i] = co_await (*m)->async_chat(std::move(msgs), std::move(tools), params);
        },
        asio::detached);
  io.run();
  int overloaded = 0, timed_out = 0;
  for (auto& r : out) {
    ASSERT_FALSE(r);
    overloaded += r.error().is(Errc::overloaded);
    timed_out += r.error().is(Errc::deadline_exceeded);
  }
  EXPECT_EQ(overloaded, 1);
  EXPECT_EQ(timed_out, 2);
  EXPECT_EQ(server.requests(), 2);  // never more than one in flight
}

TEST(OpenAIModel, RequestsPerMinuteSpacesRequests) {
  TestServer server([](int, const std::string&) { return reply(200, completion("ok")); });
  auto o = options(server);
  o.requests_per_minute = 600;  // burst 600, then one per 100 ms
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(chat(**m));
  o.requests_per_minute = 1;  // 1 request of burst, then one a minute
  auto slow = OpenAIChatModel::open(o);
  ASSERT_TRUE(chat(**slow));
  // The second request would wait a minute: it is cancelled after 200 ms, while waiting.
  auto& io = test_io();
  io.restart();
  bool timer_won = false;
  const auto t0 = std::chrono::steady_clock::now();
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        asio::steady_timer t(co_await asio::this_coro::executor, 200ms);
        std::vector<Message> msgs{Message::user("hi")};
        std::vector<ToolSpec> tools;
        ChatParams params;
        auto v = co_await ((*slow)->async_chat(std::move(msgs), std::move(tools), params) ||
                           t.async_wait(asio::use_awaitable));
        timer_won = v.index() == 1;
      },
      asio::detached);
  io.run();
  EXPECT_TRUE(timer_won);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(server.requests(), 2);  // the third never went out

  // And requests over the bucket do go out, spaced: at 60 a minute (a burst of 60, then one a
  // second) 63 requests cannot all be sent in under 3 s, and must all be sent. (A limiter that
  // blocked for good passed this test before: it only looked at a request still waiting.)
  o.requests_per_minute = 60;
  auto paced = OpenAIChatModel::open(o);
  const int before = server.requests();
  const auto t1 = std::chrono::steady_clock::now();
  int sent = 0;
  bool guard_won = false;
  io.restart();
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        auto all = [&]() -> asio::awaitable<void> {
          for (int i = 0; i < 63; ++i) {
            std::vector<Message> msgs{Message::user("hi")};
            std::vector<ToolSpec> tools;
            ChatParams params;
            auto r = co_await (*paced)->async_chat(std::move(msgs), std::move(tools), params);
            if (r) ++sent;
          }
        };
        asio::steady_timer guard(co_await asio::this_coro::executor, 60s);
        auto race = all() || guard.async_wait(asio::use_awaitable);
        auto v = co_await std::move(race);
        guard_won = v.index() == 1;
      },
      asio::detached);
  io.run();
  EXPECT_FALSE(guard_won) << "the limiter held requests for a minute";
  EXPECT_EQ(sent, 63);
  EXPECT_EQ(server.requests(), before + 63);
  EXPECT_GE(std::chrono::steady_clock::now() - t1, 2500ms);
}

TEST(OpenAIModel, ToolNamesOpenAIRefusesGoOutInItsAlphabetAndComeBackMapped) {
  // weir's MCP tools are "server/tool"; OpenAI, weir serve and vLLM take ^[a-zA-Z0-9_-]{1,64}$.
  // The server here parses each request as weir serve does and calls the first tool it was offered.
  std::mutex mu;
  std::vector<std::string> offered;
  TestServer server([&](int, const std::string& req) {
    http::openai::ChatRequest r;
    if (auto e = http::openai::parse_chat_request(body_of(req), r)) return reply(400, e->body());
    std::lock_guard lock(mu);
    offered.clear();
    for (const auto& t : r.tools) offered.push_back(t.name);
    // A call in the history must name a tool as it was offered.
    for (const auto& m : r.messages)
      for (const auto& c : m.tool_calls)
        if (std::find(offered.begin(), offered.end(), c.name) == offered.end())
          return reply(400, http::openai::ApiError{400, "unknown tool " + c.name, "", ""}.body());
    json::array calls{json::object{{"id", "call_1"},
                                   {"type", "function"},
                                   {"function", json::object{{"name", r.tools.at(0).name},
                                                             {"arguments", "{\"path\":\"a\"}"}}}}};
    return reply(200, completion("", json::serialize(calls)));
  });
  auto m = OpenAIChatModel::open(options(server));
  ASSERT_TRUE(m);
  const std::string long_name = "server/" + std::string(70, 'x');
  std::vector<ToolSpec> tools = {{"fs/read_file", "reads a file", json::object{{"type", "object"}}},
                                 {"calculator", "arithmetic", json::object{{"type", "object"}}},
                                 {long_name, "long", json::object{{"type", "object"}}}};
  auto r = chat(**m, {Message::user("read a")}, tools);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_EQ(r->message.tool_calls[0].name, "fs/read_file");
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(offered.size(), 3u);
    EXPECT_EQ(offered[0], "fs_read_file_7e15c02e");  // docs/agents.md's example
    EXPECT_EQ(offered[1], "calculator");             // a name OpenAI takes goes as it is
    EXPECT_EQ(offered[2].size(), 64u) << offered[2];
    for (const auto& n : offered) EXPECT_TRUE(http::openai::valid_tool_name(n)) << n;
  }
  // The next turn carries the call in its history, under the name it was offered as.
  Message tool{Role::tool, "contents of a", {}, "call_1", "fs/read_file"};
  auto again = chat(**m, {Message::user("read a"), r->message, tool}, tools);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->message.tool_calls.at(0).name, "fs/read_file");
}

TEST(OpenAIModel, AStreamAnsweredWithOneJsonBodyIsReadAsTheWholeAnswer) {
  // A server that ignores "stream": true answers the whole completion at once.
  TestServer server([](int, const std::string&) {
    return reply(
        200,
        completion(
            "all at once",
            R"([{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{}"}}])"));
  });
  auto o = options(server);
  o.stream = true;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  auto r = chat(**m);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->message.content, "all at once");
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_EQ(r->finish_reason, "tool_calls");
  EXPECT_EQ(r->usage.completion_tokens, 3);
  EXPECT_EQ(server.requests(), 1);
}

TEST(OpenAIModel, AStreamAnsweredWithNeitherIsAClearErrorThatIsNotRetried) {
  TestServer html([](int, const std::string&) {
    return reply(200, "<html>\n<body>proxy login</body>\n</html>", {}, "text/html");
  });
  auto o = options(html);
  o.stream = true;
  auto m = OpenAIChatModel::open(o);
  auto r = chat(**m);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::model_error)) << r.error().message;
  EXPECT_EQ(r.error().message,
            "openai " + html.url() +
                ": asked for an event stream (stream: true), but the server answered "
                "Content-Type text/html: <html> <body>proxy login</body> </html> after 1 attempt");
  EXPECT_EQ(html.requests(), 1);

  // An event stream that ends cleanly but before [DONE] and any finish_reason was cut: retried.
  TestServer cut([](int, const std::string&) {
    return sse_reply({R"({"choices":[{"index":0,"delta":{"content":"Hel"}}]})"});
  });
  o = options(cut);
  o.stream = true;
  o.max_retries = 1;
  auto c = OpenAIChatModel::open(o);
  r = chat(**c);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::io_error)) << r.error().message;
  EXPECT_EQ(r.error().message,
            "openai " + cut.url() + ": the event stream ended before [DONE] after 2 attempts");
  EXPECT_EQ(cut.requests(), 2);
}

TEST(OpenAIModel, TheContextIsAskedOnceAndAGivenOneIsNotAsked) {
  TestServer server([](int, const std::string& req) {
    if (req.starts_with("GET /v1/models"))
      return reply(200, R"({"object": "list", "data": [{"id": "other", "max_model_len": 9},
          {"id": "tiny", "object": "model"}]})");
    return reply(200, completion("ok"));
  });
  auto context_of = [](OpenAIChatModel& m) {
    auto& io = test_io();
    io.restart();
    std::int64_t ctx = -1;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { ctx = co_await m.async_context_length(); },
        asio::detached);
    io.run();
    return ctx;
  };
  auto m = OpenAIChatModel::open(options(server));
  ASSERT_TRUE(m);
  EXPECT_EQ(context_of(**m), 0);  // "tiny" is listed without a context
  EXPECT_EQ(context_of(**m), 0);
  EXPECT_EQ(server.requests(), 1);               // asked once
  EXPECT_EQ((*m)->count_tokens("12345678"), 2);  // no /tokenize asked: 4 bytes a token
  auto o = options(server);
  o.context_length = 300;  // --max-model-len, "context_length"
  auto given = OpenAIChatModel::open(o);
  EXPECT_EQ(context_of(**given), 300);
  EXPECT_EQ((*given)->context_length(), 300);
  EXPECT_EQ(server.requests(), 1);
}

TEST(OpenAIModel, ModelRefsFromTheCommandLine) {
  auto o = parse_openai_model_ref("openai:http://127.0.0.1:8080/v1/tiny");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->base_url, "http://127.0.0.1:8080/v1");
  EXPECT_EQ(o->model, "tiny");
  auto bad = parse_openai_model_ref("openai:http://127.0.0.1:8080");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "model 'openai:http://127.0.0.1:8080': expected "
            "openai:http(s)://HOST:PORT/BASE/MODEL, e.g. openai:http://127.0.0.1:8080/v1/tiny");
  EXPECT_FALSE(parse_openai_model_ref("openai:http://h:1/v1/"));
  // A model name with '/' (vLLM's Hugging Face ids) follows the base URL's /v1.
  auto hf = parse_openai_model_ref("openai:http://127.0.0.1:8000/v1/Qwen/Qwen2.5-0.5B-Instruct");
  ASSERT_TRUE(hf) << hf.error().message;
  EXPECT_EQ(hf->base_url, "http://127.0.0.1:8000/v1");
  EXPECT_EQ(hf->model, "Qwen/Qwen2.5-0.5B-Instruct");
  auto bare = parse_openai_model_ref("openai:http://127.0.0.1:8000/api/m");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->base_url, "http://127.0.0.1:8000/api");
  EXPECT_EQ(bare->model, "m");
  EXPECT_FALSE(parse_openai_model_ref("local:/x.gguf"));
}

TEST(OpenAIModel, ToolCallsWithoutANameOrPastTheCapAreReported) {
  // (Found by fuzz_openai_response: a call without "function" reached the loop with no name.)
  TestServer server([](int n, const std::string&) {
    if (n == 1)
      return reply(200,
                   R"({"choices": [{"message": {"role": "assistant", "content": "",
          "tool_calls": [{"id": "c1", "type": "function", "functiln": {"name": "calculator"}},
                         {"id": "c2", "function": {"name": "add", "arguments": "{}"}}]}}]})");
    json::array many;
    for (int i = 0; i < 130; ++i)
      many.push_back(json::object{{"id", "c" + std::to_string(i)},
                                  {"function", json::object{{"name", "f"}, {"arguments", "{}"}}}});
    return reply(
        200, json::serialize(json::object{
                 {"choices",
                  json::array{json::object{
                      {"message", json::object{{"role", "assistant"}, {"tool_calls", many}}}}}}}));
  });
  auto m = OpenAIChatModel::open(options(server));
  ASSERT_TRUE(m);
  auto r = chat(**m);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->message.tool_calls.size(), 1u);
  EXPECT_EQ(r->message.tool_calls[0].name, "add");
  EXPECT_EQ(r->tool_call_error, "a tool call without a function name");
  auto big = chat(**m);
  ASSERT_TRUE(big) << big.error().message;
  EXPECT_EQ(big->message.tool_calls.size(), 128u);
  EXPECT_EQ(big->tool_call_error, "more than 128 tool calls in one reply; the rest dropped");
}

TEST(OpenAIModel, MissingKeyVariableAndBadUrlAreRefused) {
  OpenAIModelOptions o;
  o.base_url = "http://127.0.0.1:1/v1";
  o.model = "tiny";
  o.api_key_env = "WEIR_TEST_SURELY_UNSET_KEY";
  auto m = OpenAIChatModel::open(o);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message,
            "openai model at http://127.0.0.1:1/v1: environment variable "
            "WEIR_TEST_SURELY_UNSET_KEY (api_key_env) is not set");
  o.api_key_env.clear();
  o.base_url = "127.0.0.1:8080";
  auto b = OpenAIChatModel::open(o);
  ASSERT_FALSE(b);
  EXPECT_TRUE(b.error().is(Errc::invalid_argument));
}

TEST(OpenAIModel, AnAgentWithAToolRunsEndToEndOverHttp) {
  // A well-behaved server: lists the model with its context, first asks for the calculator,
  // then answers with the tool's result.
  std::atomic<int> chats{0};
  TestServer server([&chats](int, const std::string& req) {
    if (req.starts_with("GET /v1/models"))
      return reply(200, R"({"data": [{"id": "tiny", "max_model_len": 2048}]})");
    if (!req.starts_with("POST /v1/chat/completions"))  // e.g. POST /tokenize: not served
      return reply(404, R"({"error": "not found"})");
    if (++chats == 1)
      return reply(
          200,
          completion(
              "",
              R"([{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}}])"));
    auto body = json::parse(req.substr(req.find("\r\n\r\n") + 4)).as_object();
    const auto& last = body["messages"].as_array().back().as_object();
    return reply(200,
                 completion("The answer is " + std::string(last.at("content").as_string()) + "."));
  });
  graph::GraphRuntime runtime;  // outlives the model: pooled connections bind to its executor
  auto o = options(server);
  o.stream = false;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  auto reg = std::make_shared<tools::ToolRegistry>();
  ASSERT_TRUE(reg->add(tools::make_calculator()));
  AgentSpec spec;
  spec.name = "mathematician";
  spec.role = "a careful mathematician";
  spec.goal = "answer arithmetic questions exactly";
  spec.tools = {"calculator"};
  auto agent = Agent::create(spec, *m, reg);
  ASSERT_TRUE(agent) << agent.error().message;
  auto& io = test_io();
  io.restart();
  Result<AgentResult> r;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::string task = "What is 6 times 7?";
        std::vector<Message> preamble;
        graph::RunOptions opts;
        r = co_await (*agent)->async_run(runtime, std::move(task), std::move(preamble),
                                         std::move(opts));
      },
      asio::detached);
  io.run();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "The answer is 42.");
  EXPECT_EQ(r->tool_calls, 1);
  EXPECT_EQ(r->iterations, 2);
  EXPECT_EQ(r->prompt_tokens, 24);
  // The agent asked for the context once, before its first turn (and the size of a token,
  // which this server does not answer).
  ASSERT_EQ(server.received().size(), 4u);
  EXPECT_TRUE(server.received()[0].starts_with("GET /v1/models HTTP/1.1")) << server.received()[0];
  EXPECT_TRUE(server.received()[1].starts_with("POST /tokenize HTTP/1.1")) << server.received()[1];
  EXPECT_EQ((*m)->context_length(), 2048);
  EXPECT_EQ((*m)->count_tokens("12345678"), 2);
  auto second = json::parse(body_of(server.received().at(3))).as_object();
  const auto& msgs = second["messages"].as_array();
  EXPECT_EQ(msgs.back().at("role"), "tool");
  EXPECT_EQ(msgs.back().at("tool_call_id"), "call_1");
}

}  // namespace
}  // namespace weir::agents
