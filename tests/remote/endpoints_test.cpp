// One model on several endpoints (more_base_urls): failover, the circuit breaker, prefix
// affinity and least-outstanding balancing, against fault-injecting loopback servers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "test_server.hpp"
#include "weir/agents/openai_model.hpp"

namespace weir::agents {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using weir::testing::Action;
using weir::testing::reply;
using weir::testing::TestServer;

std::string answer(const std::string& text) {
  return json::serialize(json::object{
      {"choices",
       json::array{json::object{{"index", 0},
                                {"message", json::object{{"role", "assistant"}, {"content", text}}},
                                {"finish_reason", "stop"}}}},
      {"usage", json::object{{"prompt_tokens", 5}, {"completion_tokens", 1}}}});
}

TestServer::Handler ok(const std::string& who) {
  return [who](int, const std::string&) { return reply(200, answer(who)); };
}

OpenAIModelOptions two(const TestServer& a, const TestServer& b) {
  OpenAIModelOptions o;
  o.base_url = a.url();
  o.more_base_urls = {b.url()};
  o.model = "tiny";
  o.initial_backoff = 1ms;
  o.max_backoff = 20ms;
  o.breaker_failures = 2;
  o.breaker_cooldown = 60s;
  return o;
}

// Runs the prompts one after another (sequential) or all at once, on one io_context.
std::vector<Result<ChatResponse>> run(OpenAIChatModel& m, const std::vector<std::string>& prompts,
                                      bool at_once = false) {
  asio::io_context io;
  std::vector<Result<ChatResponse>> out(prompts.size());
  auto one = [&](std::size_t i) -> asio::awaitable<void> {
    std::vector<Message> msgs;
    msgs.push_back(Message::system(prompts[i]));
    msgs.push_back(Message::user("go"));
    std::vector<ToolSpec> no_tools;  // locals: no temporary inside a co_await (GCC 12)
    ChatParams params;
    out[i] = co_await m.async_chat(std::move(msgs), std::move(no_tools), params);
  };
  if (at_once) {
    for (std::size_t i = 0; i < prompts.size(); ++i) asio::co_spawn(io, one(i), asio::detached);
  } else {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          for (std::size_t i = 0; i < prompts.size(); ++i) co_await one(i);
        },
        asio::detached);
  }
  io.run();
  return out;
}

TEST(Endpoints, AFailingEndpointIsFailedOverThenSkippedByTheBreaker) {
  TestServer bad([](int, const std::string&) { return reply(503, R"({"error": "down"})"); });
  TestServer good(ok("good"));
  auto m = OpenAIChatModel::open(two(bad, good));
  ASSERT_TRUE(m) << m.error().message;
  std::vector<std::string> prompts;
  for (int i = 0; i < 20; ++i) prompts.push_back("prompt " + std::to_string(i));
  auto r = run(**m, prompts);
  for (const auto& x : r) {
    ASSERT_TRUE(x) << x.error().message;
    EXPECT_EQ(x->message.content, "good");
  }
  // The failing endpoint saw at most breaker_failures requests, then its breaker opened.
  EXPECT_LE(bad.requests(), 2);
  EXPECT_EQ(good.requests(), 20);
}

TEST(Endpoints, AClosedPortFailsOverAndBothDownNamesTheLastEndpoint) {
  std::string dead_url;
  {
    TestServer gone(ok("x"));
    dead_url = gone.url();
  }  // nothing listens there any more
  TestServer good(ok("good"));
  OpenAIModelOptions o;
  o.base_url = dead_url;
  o.more_base_urls = {good.url()};
  o.model = "tiny";
  o.initial_backoff = 1ms;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  auto r = run(**m, {"a", "b", "c"});
  for (const auto& x : r) ASSERT_TRUE(x) << x.error().message;

  OpenAIModelOptions both = o;
  both.more_base_urls = {dead_url};
  both.max_retries = 1;
  auto d = OpenAIChatModel::open(both);
  ASSERT_TRUE(d);
  auto f = run(**d, {"a"});
  ASSERT_FALSE(f[0]);
  EXPECT_EQ(f[0].error().code, make_error_code(Errc::io_error));
  EXPECT_TRUE(f[0].error().message.starts_with("openai " + dead_url + ": "))
      << f[0].error().message;
  EXPECT_NE(f[0].error().message.find("after 2 attempts"), std::string::npos)
      << f[0].error().message;
}

TEST(Endpoints, PromptsThatStartTheSameGoToTheSameEndpoint) {
  TestServer a(ok("a")), b(ok("b"));
  auto m = OpenAIChatModel::open(two(a, b));
  ASSERT_TRUE(m);
  // The same system prompt ten times: one endpoint serves them all (its prefix cache).
  auto same = run(**m, std::vector<std::string>(10, "You are a careful researcher."));
  std::set<std::string> served;
  for (const auto& x : same) {
    ASSERT_TRUE(x);
    served.insert(x->message.content);
  }
  EXPECT_EQ(served.size(), 1u);
  // Different prompts spread over both.
  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i) many.push_back("prompt number " + std::to_string(i * 7919));
  served.clear();
  for (const auto& x : run(**m, many)) {
    ASSERT_TRUE(x);
    served.insert(x->message.content);
  }
  EXPECT_EQ(served.size(), 2u);
}

TEST(Endpoints, ABusyEndpointLosesItsAffinityToTheLeastOutstanding) {
  // Every request waits 100 ms: with 12 at once on one prefix, affinity alone would queue all
  // on one endpoint; past affinity_slack the rest go to the other.
  auto slow = [](const std::string& who) {
    return [who](int, const std::string&) {
      std::this_thread::sleep_for(100ms);
      return reply(200, answer(who));
    };
  };
  TestServer a(slow("a")), b(slow("b"));
  auto o = two(a, b);
  o.affinity_slack = 2;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  auto r = run(**m, std::vector<std::string>(12, "one shared prefix"), true);
  for (const auto& x : r) ASSERT_TRUE(x) << x.error().message;
  EXPECT_GT(a.requests(), 0);
  EXPECT_GT(b.requests(), 0);
  EXPECT_EQ(a.requests() + b.requests(), 12);
}

// A server that accepts and never answers (before the fix each of its half-open probes failed a
// run with deadline_exceeded): a request that has no answer by attempt_timeout goes to an
// endpoint not tried yet, within the call's timeout.
TEST(Endpoints, AHungEndpointIsFailedOverWithinTheCallsTime) {
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    // Streamed, the hung server sends its headers and the role chunk, then no token.
    TestServer hung([stream](int, const std::string&) {
      if (!stream) return Action{.hang = true};
      return weir::testing::sse_reply(
          {R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"}, false,
          /*hold_open=*/true);
    });
    TestServer good([stream](int, const std::string&) {
      if (stream)
        return weir::testing::sse_reply(
            {R"({"choices":[{"index":0,"delta":{"content":"good"},"finish_reason":"stop"}]})",
             "[DONE]"});
      return reply(200, answer("good"));
    });
    auto o = two(hung, good);
    o.stream = stream;
    o.breaker_failures = 1;
    o.breaker_cooldown = 200ms;
    o.timeout = 60s;
    o.attempt_timeout = 2s;  // a loopback answer begins in far less
    auto m = OpenAIChatModel::open(o);
    ASSERT_TRUE(m) << m.error().message;
    for (int i = 0; i < 6; ++i) {
      std::this_thread::sleep_for(250ms);  // past the cool-down: the hung endpoint is probed
      auto r = run(**m, {"prompt " + std::to_string(i)});
      ASSERT_TRUE(r[0]) << i << ": " << r[0].error().message;
      EXPECT_EQ(r[0]->message.content, "good");
    }
    EXPECT_GE(hung.requests(), 2) << "the hung endpoint was probed and failed over";
    EXPECT_EQ(good.requests(), 6);
  }
}

TEST(Endpoints, AStreamThatHasBegunIsNotSentElsewhereAndTheCallsTimeoutBoundsIt) {
  // Both endpoints send a token, then hang: the one picked keeps the call until its timeout.
  auto partial = [](int, const std::string&) {
    return weir::testing::sse_reply({R"({"choices":[{"index":0,"delta":{"content":"Hel"}}]})"},
                                    false, /*hold_open=*/true);
  };
  TestServer a(partial), b(partial);
  auto o = two(a, b);
  o.stream = true;
  o.timeout = 1500ms;
  o.attempt_timeout = 200ms;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run(**m, {"x"});
  ASSERT_FALSE(r[0]);
  EXPECT_TRUE(r[0].error().is(Errc::deadline_exceeded)) << r[0].error().message;
  EXPECT_TRUE(r[0].error().message.ends_with(
      ": the answer did not end within timeout_ms=1500 after 1 attempt"))
      << r[0].error().message;
  EXPECT_EQ(a.requests() + b.requests(), 1);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1500ms);
}

}  // namespace
}  // namespace weir::agents
