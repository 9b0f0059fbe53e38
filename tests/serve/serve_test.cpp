// weir serve over real HTTP on loopback: every route streamed and not, the fences' answers
// (400/401/404/413/429 bodies), cancellation on disconnect, n > 1 with the prefix cache,
// logprobs, and the reference model's goldens reproduced through the server.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "serve_fixture.hpp"

namespace weir::serve {
namespace {

const std::string kHi = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                            "temperature": 0})";

TEST(Serve, HealthModelsTokenizeDetokenizeMetrics) {
  auto s = start(tiny_config("m1"));
  auto h = call(s.port, "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, R"({"status":"ok"})");
  auto m = call(s.port, "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  auto mv = body_json(m);
  EXPECT_EQ(mv.at("data").at(0).at("id").as_string(), "m1");
  EXPECT_EQ(mv.at("data").at(0).at("max_model_len").as_int64(), 256);
  auto t = call(s.port, "POST", "/tokenize", R"({"model": "m1", "prompt": "hello"})");
  ASSERT_EQ(t.status, 200) << t.body;
  auto tv = body_json(t);
  json::array ids = tv.at("tokens").as_array();
  EXPECT_EQ(tv.at("count").as_int64(), static_cast<std::int64_t>(ids.size()));
  auto d = call(s.port, "POST", "/detokenize",
                json::serialize(json::object{{"model", "m1"}, {"tokens", ids}}));
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_NE(std::string(body_json(d).at("prompt").as_string()).find("hello"), std::string::npos);
  auto bad = call(s.port, "POST", "/detokenize", R"({"tokens": [99999]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_message(bad),
            "'tokens' holds 99999, which is not a token id of this model (0..511)");
  auto met = call(s.port, "GET", "/metrics");
  EXPECT_EQ(met.status, 200);
  for (const char* name :
       {"weir_serve_requests_running{model=\"m1\"}", "weir_serve_requests_waiting{model=\"m1\"}",
        "weir_kv_blocks_used{engine=\"m1\"}", "weir_kv_blocks_free{engine=\"m1\"}",
        "weir_kv_blocks_cached{engine=\"m1\"}", "weir_prefix_cache_hit_ratio{engine=\"m1\"}",
        "weir_engine_preemptions{engine=\"m1\"}", "weir_memory_used_bytes{category=\"kv_cache\"}"})
    EXPECT_NE(met.body.find(name), std::string::npos) << name;
  auto nf = call(s.port, "GET", "/v2/nothing");
  EXPECT_EQ(nf.status, 404);
  auto wrong = call(s.port, "GET", "/v1/chat/completions");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(error_message(wrong), "GET is not allowed on /v1/chat/completions; use POST");
}

TEST(Serve, ChatCompletionAndItsStreamAgree) {
  auto s = start(tiny_config("m2"));
  auto r = call(s.port, "POST", "/v1/chat/completions", kHi);
  ASSERT_EQ(r.status, 200) << r.body;
  auto v = body_json(r);
  EXPECT_EQ(v.at("object").as_string(), "chat.completion");
  EXPECT_EQ(v.at("model").as_string(), "m2");
  const auto& ch = v.at("choices").at(0);
  EXPECT_EQ(ch.at("message").at("role").as_string(), "assistant");
  EXPECT_EQ(ch.at("finish_reason").as_string(), "length");
  std::string text(ch.at("message").at("content").as_string());
  EXPECT_EQ(v.at("usage").at("completion_tokens").as_int64(), 8);
  EXPECT_GT(v.at("usage").at("prompt_tokens").as_int64(), 0);
  EXPECT_TRUE(v.at("usage").at("prompt_tokens_details").as_object().contains("cached_tokens"));

  std::string streamed = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
      "temperature": 0, "stream": true, "stream_options": {"include_usage": true}})";
  auto sr = call(s.port, "POST", "/v1/chat/completions", streamed);
  ASSERT_EQ(sr.status, 200);
  EXPECT_EQ(sr.header("content-type"), "text/event-stream");
  auto events = sse_data(sr.body);
  ASSERT_GE(events.size(), 4u) << sr.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string joined, finish;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    auto e = json::parse(events[i]);
    EXPECT_EQ(e.at("object").as_string(), "chat.completion.chunk");
    if (e.at("choices").as_array().empty()) {  // the usage chunk, last before [DONE]
      EXPECT_EQ(i + 2, events.size());
      EXPECT_EQ(e.at("usage").at("completion_tokens").as_int64(), 8);
      continue;
    }
    const auto& d = e.at("choices").at(0).at("delta");
    if (i == 0) {
      EXPECT_EQ(d.at("role").as_string(), "assistant");
    }
    if (d.as_object().contains("content")) joined += d.at("content").as_string();
    if (e.at("choices").at(0).at("finish_reason").is_string())
      finish = e.at("choices").at(0).at("finish_reason").as_string();
  }
  EXPECT_EQ(joined, text);  // greedy: the same text streamed and not
  EXPECT_EQ(finish, "length");
}

TEST(Serve, CompletionsStreamedAndNotWithTokenPrompts) {
  auto s = start(tiny_config("m3"));
  auto r = call(s.port, "POST", "/v1/completions",
                R"({"prompt": [1, 5, 9, 42], "max_tokens": 6, "temperature": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto v = body_json(r);
  EXPECT_EQ(v.at("object").as_string(), "text_completion");
  std::string text(v.at("choices").at(0).at("text").as_string());
  EXPECT_EQ(v.at("usage").at("prompt_tokens").as_int64(), 4);
  auto sr = call(s.port, "POST", "/v1/completions",
                 R"({"prompt": [1, 5, 9, 42], "max_tokens": 6, "temperature": 0, "stream": true})");
  ASSERT_EQ(sr.status, 200);
  auto events = sse_data(sr.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::string joined;
  for (std::size_t i = 0; i + 1 < events.size(); ++i)
    joined += json::parse(events[i]).at("choices").at(0).at("text").as_string();
  EXPECT_EQ(joined, text);
  auto bad = call(s.port, "POST", "/v1/completions", R"({"prompt": [1, 70000]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_message(bad), "prompt token id 70000 is not in this model's vocabulary (0..511)");
}

TEST(Serve, NChoicesShareThePromptAndUsageCountsCachedTokens) {
  auto s = start(tiny_config("m4"));
  std::string prompt(200, 'a');
  std::string body = json::serialize(json::object{
      {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0.8}, {"seed", 3}, {"n", 3}});
  auto r = call(s.port, "POST", "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  auto v = body_json(r);
  ASSERT_EQ(v.at("choices").as_array().size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(v.at("choices").at(i).at("index").as_int64(), i);
  EXPECT_EQ(v.at("usage").at("completion_tokens").as_int64(), 12);
  // The copies share the prompt's full blocks through the prefix cache.
  EXPECT_GT(v.at("usage").at("prompt_tokens_details").at("cached_tokens").as_int64(), 0);
  // And the same prompt again is served from the cache.
  auto again = call(s.port, "POST", "/v1/completions",
                    json::serialize(json::object{{"prompt", prompt}, {"max_tokens", 2}}));
  ASSERT_EQ(again.status, 200);
  const auto prompt_tokens = body_json(again).at("usage").at("prompt_tokens").as_int64();
  const auto cached =
      body_json(again).at("usage").at("prompt_tokens_details").at("cached_tokens").as_int64();
  EXPECT_EQ(cached, prompt_tokens / 16 * 16 - (prompt_tokens % 16 == 0 ? 16 : 0));
  auto too_many = call(s.port, "POST", "/v1/completions", R"({"prompt": "x", "n": 9})");
  EXPECT_EQ(too_many.status, 400);
  EXPECT_EQ(error_message(too_many), "'n' must be between 1 and 8, got 9");
}

TEST(Serve, LogprobsMatchTheGreedyChoice) {
  auto s = start(tiny_config("m5"));
  auto r = call(s.port, "POST", "/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                    "temperature": 0, "logprobs": true, "top_logprobs": 3})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto v = body_json(r);
  const auto& content = v.at("choices").at(0).at("logprobs").at("content").as_array();
  ASSERT_EQ(content.size(), 5u);
  for (const auto& t : content) {
    const auto& top = t.at("top_logprobs").as_array();
    ASSERT_EQ(top.size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(top[0].at("logprob").as_double(), t.at("logprob").as_double());
    EXPECT_LE(t.at("logprob").as_double(), 0.0);
    double mass = 0;
    for (const auto& a : top) mass += std::exp(a.at("logprob").as_double());
    EXPECT_LE(mass, 1.0 + 1e-5);
    EXPECT_GE(top[0].at("logprob").as_double(), top[1].at("logprob").as_double());
  }
  auto bad = call(s.port, "POST", "/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_message(bad), "'top_logprobs' needs \"logprobs\": true");
}

TEST(Serve, ErrorsSayWhatToChange) {
  auto c = tiny_config("m6");
  c.max_body_bytes = 1024;
  auto s = start(c);
  auto malformed =
      call(s.port, "POST", "/v1/chat/completions", "{\"messages\": [\n  {\"role\": }]}");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(body_json(malformed).at("error").at("type").as_string(), "invalid_request_error");
  EXPECT_NE(error_message(malformed).find("malformed JSON: request body:2:12:"), std::string::npos)
      << error_message(malformed);
  auto big = call(s.port, "POST", "/v1/chat/completions", std::string(4000, ' '));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(error_message(big),
            "the request body is over the server's limit of 1024 bytes (--max-body-bytes); send "
            "less");
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "ab ";
  auto ctx = call(s.port, "POST", "/v1/completions",
                  json::serialize(json::object{{"prompt", long_prompt.substr(0, 900)}}));
  EXPECT_EQ(ctx.status, 400);
  EXPECT_NE(error_message(ctx).find("but the model's context is 256 tokens"), std::string::npos)
      << error_message(ctx);
  auto mt = call(s.port, "POST", "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 300})");
  EXPECT_EQ(mt.status, 400);
  EXPECT_EQ(error_message(mt),
            "max_tokens=300 plus the prompt's 3 tokens exceeds the model's context of 256 tokens; "
            "lower max_tokens to at most 253");
  EXPECT_EQ(body_json(mt).at("error").at("param").as_string(), "max_tokens");
  auto model = call(s.port, "POST", "/v1/completions", R"({"model": "gpt-9", "prompt": "x"})");
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(error_message(model), "the model 'gpt-9' does not exist; this server has m6");
  // A schema keyword weir cannot enforce is refused by name, never ignored.
  auto schema = call(s.port, "POST", "/v1/chat/completions",
                     R"({"messages": [{"role": "user", "content": "x"}],
                         "response_format": {"type": "json_schema",
                                             "json_schema": {"name": "a", "schema":
                                               {"type": "string", "not": {"const": "x"}}}}})");
  EXPECT_EQ(schema.status, 400);
  EXPECT_NE(error_message(schema).find("'not'"), std::string::npos) << error_message(schema);
  EXPECT_EQ(body_json(schema).at("error").at("param").as_string(), "response_format");
  // A schema it can enforce: whatever the random-weight model wants to say, the content parses
  // and has the one required boolean.
  auto structured = call(s.port, "POST", "/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 64,
                             "response_format": {"type": "json_schema", "json_schema": {
                               "name": "verdict", "strict": true, "schema": {"type": "object",
                               "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                               "additionalProperties": false}}}})");
  ASSERT_EQ(structured.status, 200) << structured.body;
  const json::value structured_body = body_json(structured);
  const auto& choice0 = structured_body.at("choices").at(0);
  EXPECT_EQ(choice0.at("finish_reason").as_string(), "stop");
  auto content = json::parse(std::string(choice0.at("message").at("content").as_string()));
  ASSERT_TRUE(content.is_object());
  EXPECT_EQ(content.as_object().size(), 1u);
  EXPECT_TRUE(content.at("ok").is_bool());
  auto role = call(s.port, "POST", "/v1/chat/completions",
                   R"({"messages": [{"role": "robot", "content": "x"}]})");
  EXPECT_EQ(role.status, 400);
  EXPECT_EQ(error_message(role),
            "messages[0].role 'robot' is not one of system, developer, user, assistant, tool");
  auto temp = call(s.port, "POST", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "temperature": 7,
                       "some_unknown_field": 1})");
  EXPECT_EQ(temp.status, 400);
  EXPECT_EQ(error_message(temp), "'temperature' must be between 0 and 2, got 7");
  // Unknown fields alone are ignored.
  auto ok = call(s.port, "POST", "/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
                     "some_unknown_field": {"a": 1}})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST(Serve, ApiKeyIsRequiredWhenSet) {
  auto c = tiny_config("m7");
  c.api_key = "s3cret";
  auto s = start(c);
  auto none = call(s.port, "GET", "/v1/models");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(body_json(none).at("error").at("type").as_string(), "authentication_error");
  EXPECT_EQ(error_message(none),
            "missing API key: send the header 'Authorization: Bearer <key>' (the key in the "
            "server's --api-key-env)");
  auto wrong = call(s.port, "GET", "/v1/models", {}, "Authorization: Bearer s3cres\r\n");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(error_message(wrong),
            "invalid API key: send 'Authorization: Bearer <key>' (or 'X-Api-Key: <key>') with "
            "the key in the server's --api-key-env");
  auto right = call(s.port, "GET", "/v1/models", {}, "Authorization: Bearer s3cret\r\n");
  EXPECT_EQ(right.status, 200);
  // The scheme is case-insensitive (RFC 9110); the key is not.
  EXPECT_EQ(call(s.port, "GET", "/v1/models", {}, "authorization: bearer s3cret\r\n").status, 200);
  EXPECT_EQ(call(s.port, "GET", "/v1/models", {}, "Authorization: BEARER s3cret\r\n").status, 200);
  EXPECT_EQ(call(s.port, "GET", "/v1/models", {}, "Authorization: Bearer S3CRET\r\n").status, 401);
  EXPECT_EQ(call(s.port, "GET", "/v1/models", {}, "Authorization: Bearers3cret\r\n").status, 401);
  // The key is checked on the request's head: a caller without it is answered before its body
  // arrives and the connection closes (the server read the whole body first; break39 A3).
  for (const std::string framing : {"Content-Length: 1000000", "Transfer-Encoding: chunked"}) {
    Conn early(s.port);
    ASSERT_TRUE(
        early.send_all("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\n" +
                       framing + "\r\n\r\n"));
    Reply r = early.read_reply();  // nothing of the body sent
    EXPECT_EQ(r.status, 401) << framing;
    EXPECT_EQ(r.header("www-authenticate"), "Bearer");
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_EQ(body_json(r).at("error").at("code"), "invalid_api_key");
  }
  // A body after the key is read and served as before.
  auto with_body = call(s.port, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 1})",
                        "Authorization: Bearer s3cret\r\n");
  EXPECT_EQ(with_body.status, 200) << with_body.body;
}

TEST(Serve, NonLoopbackWithoutKeyIsRefused) {
  auto c = tiny_config("m8");
  c.host = "0.0.0.0";
  auto s = Service::start(c);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("refusing to listen on 0.0.0.0 without an API key"),
            std::string::npos);
}

// A stream whose client goes away is cancelled: its KV blocks are free right after, and the
// engine stops generating for it (issue 28.11: an uncancelled request that ran to its end in the
// window also freed its blocks, so blocks alone proved nothing).
TEST(Serve, DisconnectMidStreamFreesTheBlocks) {
  auto c = tiny_config("m9", 4096);  // 4000 tokens take the tiny model well over a second
  auto s = start(c);
  const std::string gen = "weir_engine_tokens_generated{engine=\"m9\"}";
  Conn conn(s.port);
  ASSERT_TRUE(conn.request("POST", "/v1/completions",
                           R"({"prompt": "a long story", "max_tokens": 4000, "stream": true})"));
  Reply head;
  ASSERT_TRUE(conn.read_head(head));
  ASSERT_EQ(head.status, 200);
  ASSERT_FALSE(conn.next_chunk().empty());  // the first token arrived: the request is running
  EXPECT_GT(metric(s.port, "weir_kv_blocks_used{engine=\"m9\"}"), 0);
  conn.close();
  double used = -1, running = -1;
  for (int i = 0; i < 500 && (used != 0 || running != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    used = metric(s.port, "weir_kv_blocks_used{engine=\"m9\"}");
    running = metric(s.port, "weir_engine_running{engine=\"m9\"}");
  }
  EXPECT_EQ(used, 0);
  EXPECT_EQ(running, 0);
  EXPECT_EQ(metric(s.port, "weir_serve_requests_running{model=\"m9\"}"), 0);
  // The engine stopped for it: far fewer than 4000 tokens, and no more come.
  const double generated = metric(s.port, gen);
  EXPECT_LT(generated, 4000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(metric(s.port, gen), generated);
}

// Requests of several choices (n) take n running slots at once. Many of them together all finish
// (each used to hold part of its slots while it waited for the rest: two such requests waited
// on each other forever), and an n no slot count can hold is refused at once.
TEST(Serve, ManyRequestsOfSeveralChoicesAllFinish) {
  auto c = tiny_config("m20");
  c.max_num_seqs = 4;
  auto s = start(c);
  const std::string body = R"({"prompt": "x", "max_tokens": 8, "n": 3})";
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  std::vector<std::string> failures(6);
  for (int i = 0; i < 6; ++i)
    clients.emplace_back([&, i] {
      auto r = call(s.port, "POST", "/v1/completions", body);
      if (r.status == 200 && body_json(r).at("choices").as_array().size() == 3)
        ++ok;
      else
        failures[static_cast<std::size_t>(i)] = std::to_string(r.status) + " " + r.body;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 6) << failures[0] << failures[1] << failures[2] << failures[3] << failures[4]
                          << failures[5];
  auto big = call(s.port, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 4, "n": 5})");
  EXPECT_EQ(big.status, 400) << big.body;
  EXPECT_EQ(error_message(big),
            "n=5 choices run at once, but model 'm20' runs at most 4 sequences (--max-num-seqs); "
            "ask for fewer choices");
}

// A request still waiting for admission when the server drains is answered 503, and the server
// shuts down cleanly (a SIGTERM with one waiting crashed: its frame outlived the model's
// limiter).
TEST(Serve, ARequestWaitingForAdmissionIsAnsweredAtTheDrain) {
  auto c = tiny_config("m21", 4096);
  c.max_num_seqs = 1;
  auto s = start(c);
  Conn hold(s.port);  // the one slot, generating for longer than the test
  ASSERT_TRUE(hold.request("POST", "/v1/completions",
                           R"({"prompt": "a", "max_tokens": 4000, "stream": true})"));
  Reply head;
  ASSERT_TRUE(hold.read_head(head));
  ASSERT_EQ(head.status, 200);
  Reply waiting_reply;
  std::thread waiter([&] {
    waiting_reply = call(s.port, "POST", "/v1/completions", R"({"prompt": "c", "max_tokens": 4})");
  });
  for (int i = 0; i < 200 && metric(s.port, "weir_serve_requests_waiting{model=\"m21\"}") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(metric(s.port, "weir_serve_requests_waiting{model=\"m21\"}"), 1);
  s.svc->shutdown(std::chrono::milliseconds(200));
  waiter.join();
  EXPECT_EQ(waiting_reply.status, 503) << waiting_reply.body;
  EXPECT_EQ(error_message(waiting_reply), "the server is shutting down");
  s.svc.reset();
}

// Past max_num_seqs running and max_queued_requests waiting: 429 at once, with Retry-After, and
// the queue never holds more than its bound.
TEST(Serve, FullQueueAnswers429AtOnce) {
  auto c = tiny_config("m10");
  c.max_num_seqs = 1;
  c.max_queued_requests = 2;
  auto s = start(c);
  const std::string body = R"({"prompt": "x", "max_tokens": 250, "stream": true})";
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < 3; ++i) {  // one runs, two wait
    held.push_back(std::make_unique<Conn>(s.port));
    ASSERT_TRUE(held.back()->request("POST", "/v1/completions", body));
  }
  for (int i = 0; i < 100 && metric(s.port, "weir_serve_requests_waiting{model=\"m10\"}") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(metric(s.port, "weir_serve_requests_running{model=\"m10\"}"), 1);
  EXPECT_EQ(metric(s.port, "weir_serve_requests_waiting{model=\"m10\"}"), 2);
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = call(s.port, "POST", "/v1/completions", body);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    EXPECT_EQ(r.status, 429);
    EXPECT_EQ(r.header("retry-after"), "1");
    EXPECT_EQ(body_json(r).at("error").at("type").as_string(), "rate_limit_error");
    EXPECT_EQ(error_message(r),
              "model 'm10' is overloaded: 1 requests running and 2 queued "
              "(--max-queued-requests=2); retry after 1 second");
  }
  EXPECT_EQ(metric(s.port, "weir_serve_requests_waiting{model=\"m10\"}"), 2);
  EXPECT_EQ(
      metric(s.port, "weir_serve_requests_rejected_total{model=\"m10\",reason=\"queue_full\"}"), 5);
  held.clear();  // the clients go: everything is cancelled and the queue drains
  double running = -1, waiting = -1;
  for (int i = 0; i < 300 && (running != 0 || waiting != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    running = metric(s.port, "weir_serve_requests_running{model=\"m10\"}");
    waiting = metric(s.port, "weir_serve_requests_waiting{model=\"m10\"}");
  }
  EXPECT_EQ(running, 0);
  EXPECT_EQ(waiting, 0);
}

// A tool-calling conversation round trip: the assistant's tool_calls and the tool's answer go
// into the prompt through the chat template, and the request is served.
TEST(Serve, ToolConversationRoundTrip) {
  auto s = start(tiny_config("m11", 1024));
  std::string base = R"({"max_tokens": 3, "temperature": 0,
    "tools": [{"type": "function", "function": {"name": "search", "description": "find",
               "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
    "messages": [{"role": "user", "content": "find kv"})";
  auto first = call(s.port, "POST", "/v1/chat/completions", base + "]}");
  ASSERT_EQ(first.status, 200) << first.body;
  auto round =
      call(s.port, "POST", "/v1/chat/completions",
           base + R"(, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
                      "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"kv\"}"}}]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "paged"}]})");
  ASSERT_EQ(round.status, 200) << round.body;
  EXPECT_GT(body_json(round).at("usage").at("prompt_tokens").as_int64(),
            body_json(first).at("usage").at("prompt_tokens").as_int64() + 10);
  auto none = call(s.port, "POST", "/v1/chat/completions", base + R"(], "tool_choice": "none"})");
  EXPECT_EQ(none.status, 200);
  EXPECT_LT(body_json(none).at("usage").at("prompt_tokens").as_int64(),
            body_json(first).at("usage").at("prompt_tokens").as_int64());
}

// tool_choice required / a named function: the reply is a tool call, valid against the tool's
// parameters, even from a random-weight model (the constraint makes it so), streamed or not.
TEST(Serve, ToolChoiceRequiredAndNamedForceAValidCall) {
  auto s = start(tiny_config("m15", 1024));
  const std::string tools = R"("tools": [
      {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
        "properties": {"q": {"type": "string", "maxLength": 8}}, "required": ["q"],
        "additionalProperties": false}}},
      {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                       "b": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a", "b"], "additionalProperties": false}}}],
    "messages": [{"role": "user", "content": "go"}], "max_tokens": 200)";
  for (int seed = 0; seed < 4; ++seed) {
    for (const std::string choice :
         {R"("required")", R"({"type": "function", "function": {"name": "add"}})"}) {
      auto r = call(s.port, "POST", "/v1/chat/completions",
                    "{" + tools + R"(, "seed": )" + std::to_string(seed) +
                        R"(, "temperature": 1.0, "tool_choice": )" + choice + "}");
      ASSERT_EQ(r.status, 200) << r.body;
      const json::value body = body_json(r);
      const auto& c = body.at("choices").at(0);
      ASSERT_EQ(c.at("finish_reason"), "tool_calls") << r.body;
      const auto& call0 = c.at("message").at("tool_calls").at(0).at("function");
      const std::string name(call0.at("name").as_string());
      auto args = json::parse(call0.at("arguments").as_string()).as_object();
      if (choice != R"("required")") {
        EXPECT_EQ(name, "add");
      }
      if (name == "add") {
        EXPECT_EQ(args.size(), 2u) << r.body;
        EXPECT_LE(args.at("a").as_int64(), 99);
        EXPECT_GE(args.at("b").as_int64(), 0);
      } else {
        ASSERT_EQ(name, "search");
        std::size_t chars = 0;  // maxLength counts characters, not bytes
        for (unsigned char ch : args.at("q").as_string()) chars += (ch & 0xC0) != 0x80;
        EXPECT_LE(chars, 8u) << args.at("q");
      }
    }
  }
  // Streamed: the call arrives in the last chunk with finish_reason tool_calls.
  auto st = call(s.port, "POST", "/v1/chat/completions",
                 "{" + tools + R"(, "stream": true, "tool_choice": "required"})");
  ASSERT_EQ(st.status, 200);
  EXPECT_NE(st.body.find(R"("finish_reason":"tool_calls")"), std::string::npos) << st.body;
  auto both =
      call(s.port, "POST", "/v1/chat/completions", "{" + tools + R"(, "tool_choice": "required",
                   "response_format": {"type": "json_object"}})");
  EXPECT_EQ(both.status, 400);
  EXPECT_EQ(error_message(both),
            "tool_choice 'required' cannot be combined with a JSON response_format: the reply "
            "is a tool call, whose arguments follow the tool's parameters");
}

// The reference model's greedy goldens, through the server, exactly.
TEST(Serve, GoldensThroughTheServer) {
  const fs::path model = fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "reference models not found in " << WEIR_SHARED_DIR;
  ServeConfig c;
  c.models.push_back({"aidreams", model});
  c.kv_cache_bytes = 16u << 20;
  auto s = start(c);
  std::ifstream in(fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.golden.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto doc = json::parse(ss.str());
  int checked = 0;
  for (const auto& k : doc.at("cases").as_array()) {
    json::array prompt = k.at("prompt_tokens").as_array();
    const auto& want = k.at("greedy_tokens").as_array();
    const auto room = 128 - static_cast<std::int64_t>(prompt.size());
    const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(want.size()), room - 1);
    if (n <= 0) continue;
    for (bool stream : {false, true}) {
      auto r = call(s.port, "POST", "/v1/completions",
                    json::serialize(json::object{{"prompt", prompt},
                                                 {"max_tokens", n},
                                                 {"temperature", 0},
                                                 {"stream", stream},
                                                 {"logprobs", 0}}));
      ASSERT_EQ(r.status, 200) << r.body;
      std::vector<std::string> got;
      auto collect = [&](const json::value& choice) {
        for (const auto& t : choice.at("logprobs").at("tokens").as_array())
          got.emplace_back(t.as_string());
      };
      if (!stream) {
        collect(body_json(r).at("choices").at(0));
      } else {
        auto ev = sse_data(r.body);
        for (std::size_t i = 0; i + 1 < ev.size(); ++i) {
          auto e = json::parse(ev[i]);
          if (!e.at("choices").as_array().empty() &&
              e.at("choices").at(0).at("logprobs").is_object())
            collect(e.at("choices").at(0));
        }
      }
      // Compare token by token through the tokenizer's pieces.
      ASSERT_GE(got.size(), 1u);
      std::vector<std::int32_t> ids(want.size());
      for (std::size_t i = 0; i < want.size(); ++i)
        ids[i] = static_cast<std::int32_t>(want[i].as_int64());
      auto det = [&](std::int32_t id) {
        auto d = call(s.port, "POST", "/detokenize",
                      json::serialize(json::object{{"tokens", json::array{id}}}));
        return std::string(body_json(d).at("prompt").as_string());
      };
      const std::size_t upto = std::min<std::size_t>(got.size(), static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < upto; ++i) {
        if (ids[i] == 1 || ids[i] == 2) break;  // BOS/EOS end the golden
        ASSERT_EQ(got[i], det(ids[i])) << "case " << k.at("name") << " token " << i;
      }
      ++checked;
    }
    if (checked >= 6) break;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace weir::serve
