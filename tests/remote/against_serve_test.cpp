// OpenAIChatModel against a real OpenAI-compatible server: weir serve's Service in this process,
// over HTTP on loopback, with a random-weight model (ignore_eos, so every answer runs to
// max_tokens). What one weir asks of another: plain and streamed turns agree, usage comes
// back, an output schema is honoured, and the client's concurrency fence holds the server's
// running requests under it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "weir/agents/openai_model.hpp"
#include "weir/http/client.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/serve/service.hpp"

namespace weir::agents {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;

struct Served {
  std::unique_ptr<serve::Service> svc;
  std::uint16_t port = 0;

  Served() {
    auto dir = fs::temp_directory_path() / ("weir-remote-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto path = dir / "tiny.gguf";
    if (!fs::exists(path)) {
      auto shape = inference::RandomModelShape::tiny();
      shape.context_length = 512;
      auto st = inference::write_random_llama(path, shape, inference::GgmlType::f32, 7);
      EXPECT_TRUE(st) << st.error().message;
    }
    serve::ServeConfig c;
    c.models.push_back({"tiny", path});
    c.port = 0;
    c.kv_cache_bytes = 16u << 20;
    c.ignore_eos = true;
    c.max_num_seqs = 4;
    auto s = serve::Service::start(std::move(c));
    EXPECT_TRUE(s) << s.error().message;
    if (!s) return;
    svc = std::move(*s);
    auto ready = svc->wait_ready();
    EXPECT_TRUE(ready) << ready.error().message;
    port = svc->port();
  }
  ~Served() {
    if (svc) svc->shutdown(std::chrono::milliseconds(1000));
  }
  OpenAIModelOptions options(bool stream) const {
    OpenAIModelOptions o;
    o.base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
    o.model = "tiny";
    o.stream = stream;
    o.max_retries = 0;
    return o;
  }
};

// One raw request to the server (`target` from its root): the status and body.
std::pair<int, std::string> fetch(const Served& s, std::string method, const std::string& target,
                                  std::string body = {}) {
  asio::io_context io;
  http::Client client;
  auto url = http::parse_url("http://127.0.0.1:" + std::to_string(s.port));
  std::pair<int, std::string> out{0, ""};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        http::ClientRequest rq;
        rq.method = std::move(method);
        rq.target = target;
        if (!body.empty()) rq.headers.push_back({"Content-Type", "application/json"});
        rq.body = std::move(body);
        auto r = co_await client.async_request(*url, std::move(rq));
        if (r)
          out = {r->status, r->body};
        else
          out = {-1, r.error().message};
      },
      asio::detached);
  io.run();
  return out;
}
std::pair<int, std::string> post(const Served& s, const std::string& target, std::string body) {
  return fetch(s, "POST", target, std::move(body));
}

std::vector<Result<ChatResponse>> chat_all(ChatModel& m, int n, ChatParams params) {
  asio::io_context io;
  std::vector<Result<ChatResponse>> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          std::vector<Message> msgs = {Message::user("Tell me a story about a cat.")};
          std::vector<ToolSpec> no_tools;  // a local: no temporary inside a co_await (GCC 12)
          out[static_cast<std::size_t>(i)] =
              co_await m.async_chat(std::move(msgs), std::move(no_tools), params);
        },
        asio::detached);
  io.run();
  return out;
}

TEST(AgainstServe, PlainAndStreamedTurnsAgreeWithUsage) {
  Served s;
  ASSERT_TRUE(s.svc);
  ChatParams p;
  p.max_tokens = 12;
  p.seed = 3;
  auto plain = OpenAIChatModel::open(s.options(false));
  auto streamed = OpenAIChatModel::open(s.options(true));
  ASSERT_TRUE(plain && streamed);
  auto a = chat_all(**plain, 1, p);
  auto b = chat_all(**streamed, 1, p);
  ASSERT_TRUE(a[0]) << a[0].error().message;
  ASSERT_TRUE(b[0]) << b[0].error().message;
  EXPECT_FALSE(a[0]->message.content.empty());
  EXPECT_EQ(a[0]->message.content, b[0]->message.content) << "greedy: the same text both ways";
  EXPECT_EQ(a[0]->usage.completion_tokens, 12);
  EXPECT_EQ(b[0]->usage.completion_tokens, 12);
  EXPECT_GT(a[0]->usage.prompt_tokens, 0);
  EXPECT_EQ(a[0]->usage.prompt_tokens, b[0]->usage.prompt_tokens);
}

TEST(AgainstServe, AnOutputSchemaIsHonouredByTheServer) {
  Served s;
  ASSERT_TRUE(s.svc);
  auto m = OpenAIChatModel::open(s.options(false));
  ASSERT_TRUE(m);
  ChatParams p;
  p.max_tokens = 64;
  p.response_schema = json::parse(R"({"type": "object",
      "properties": {"mood": {"enum": ["happy", "sad"]}, "n": {"type": "integer"}},
      "required": ["mood", "n"], "additionalProperties": false})")
                          .as_object();
  auto r = chat_all(**m, 1, p);
  ASSERT_TRUE(r[0]) << r[0].error().message;
  boost::system::error_code ec;
  auto v = json::parse(r[0]->message.content, ec);
  ASSERT_FALSE(ec) << "not JSON: " << r[0]->message.content;
  ASSERT_TRUE(v.is_object()) << r[0]->message.content;
  const auto& o = v.as_object();
  EXPECT_EQ(o.size(), 2u) << r[0]->message.content;
  ASSERT_TRUE(o.contains("mood") && o.at("mood").is_string()) << r[0]->message.content;
  EXPECT_TRUE(o.at("mood") == "happy" || o.at("mood") == "sad") << r[0]->message.content;
  ASSERT_TRUE(o.contains("n")) << r[0]->message.content;
  EXPECT_TRUE(o.at("n").is_int64() || o.at("n").is_uint64()) << r[0]->message.content;
}

TEST(AgainstServe, ManyCallersShareTheClientFenceAndAllFinish) {
  Served s;
  ASSERT_TRUE(s.svc);
  auto o = s.options(true);
  o.max_concurrency = 2;
  auto m = OpenAIChatModel::open(o);
  ASSERT_TRUE(m);
  ChatParams p;
  p.max_tokens = 96;
  // The server's running requests, sampled from its /metrics (one kept-alive connection) while
  // the callers run: the client fence holds them at 2 (the server itself would run 4:
  // max_num_seqs).
  std::atomic<bool> done{false};
  std::atomic<int> most{0}, samples{0};
  std::thread sampler([&] {
    asio::io_context io;
    http::Client client;
    auto url = http::parse_url("http://127.0.0.1:" + std::to_string(s.port));
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          const std::string key = "weir_serve_requests_running{model=\"tiny\"} ";
          while (!done) {
            http::ClientRequest rq;
            rq.method = "GET";
            rq.target = "/metrics";
            auto r = co_await client.async_request(*url, std::move(rq));
            if (!r || r->status != 200) continue;
            if (auto at = r->body.find(key); at != std::string::npos) {
              most = std::max(most.load(), std::atoi(r->body.c_str() + at + key.size()));
              ++samples;
            }
          }
        },
        asio::detached);
    io.run();
  });
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done = true;
      if (t.joinable()) t.join();
    }
  } join{done, sampler};
  // A round of 12 callers can finish in under 100 ms on a loaded machine, between two samples:
  // rounds go on until the sampler has seen enough of them (at most 8 rounds).
  for (int round = 0; round < 8 && (round == 0 || samples.load() < 10); ++round) {
    auto r = chat_all(**m, 12, p);
    for (const auto& x : r) {
      ASSERT_TRUE(x) << x.error().message;
      EXPECT_EQ(x->usage.completion_tokens, 96);
    }
  }
  done = true;
  sampler.join();
  ASSERT_GT(samples.load(), 0) << "no sample of weir_serve_requests_running";
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(most.load(), 2) << "most running at once: " << most << " in " << samples << " samples";
}

TEST(AgainstServe, KnownOpenAIFieldsAreHonouredOrRefusedByName) {
  Served s;
  ASSERT_TRUE(s.svc);
  const std::string msgs =
      R"("model": "tiny", "messages": [{"role": "user", "content": "Tell me a story."}])";
  // A field that would change the answer and is not implemented: 400 naming it.
  auto [status, body] =
      post(s, "/v1/chat/completions", "{" + msgs + R"(, "logit_bias": {"5": 100}})");
  EXPECT_EQ(status, 400) << body;
  auto err = json::parse(body).at("error");
  EXPECT_EQ(err.at("param"), "logit_bias") << body;
  EXPECT_EQ(err.at("message"),
            "'logit_bias' is not supported; remove it (it would change the result)");
  std::tie(status, body) =
      post(s, "/v1/chat/completions", "{" + msgs + R"(, "tools": [{"type": "function",
      "function": {"name": "fs/read_file"}}]})");
  EXPECT_EQ(status, 400) << body;
  EXPECT_EQ(json::parse(body).at("error").at("param"), "tools[0].function.name") << body;
  std::tie(status, body) =
      post(s, "/v1/completions", R"({"model": "tiny", "prompt": "x", "suffix": "y"})");
  EXPECT_EQ(status, 400) << body;
  EXPECT_EQ(json::parse(body).at("error").at("param"), "suffix") << body;
  // vLLM's top_k is honoured: top_k 1 at a high temperature is greedy decoding.
  auto text = [&](const std::string& extra) {
    auto [st, b] = post(s, "/v1/chat/completions",
                        "{" + msgs + R"(, "max_tokens": 16, "seed": 11)" + extra + "}");
    EXPECT_EQ(st, 200) << b;
    return st == 200
               ? std::string(
                     json::parse(b).at("choices").at(0).at("message").at("content").as_string())
               : b;
  };
  const std::string greedy = text(R"(, "temperature": 0)");
  EXPECT_EQ(text(R"(, "temperature": 1.8, "top_k": 1)"), greedy);
  EXPECT_NE(text(R"(, "temperature": 1.8)"), greedy)
      << "a random-weight model at 1.8 is not greedy";
}

TEST(AgainstServe, TheModelsContextAndTokenSizeAreReadFromTheServer) {
  Served s;
  ASSERT_TRUE(s.svc);
  auto m = OpenAIChatModel::open(s.options(false));
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)->context_length(), 0);  // not asked yet
  asio::io_context io;
  std::int64_t ctx = -1;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { ctx = co_await (*m)->async_context_length(); },
      asio::detached);
  io.run();
  EXPECT_EQ(ctx, 512);  // weir serve publishes max_model_len at GET /v1/models
  EXPECT_EQ((*m)->context_length(), 512);
  // Token counts follow the server's tokenizer (this model's 512-token vocabulary holds far
  // fewer bytes a token than the 4 assumed before asking).
  const std::string text =
      "The writer proposes a design note; the engineer points out what it gets wrong about "
      "memory use, and the critic says APPROVED when the note is right.";
  auto [status, body] =
      post(s, "/tokenize", json::serialize(json::object{{"model", "tiny"}, {"prompt", text}}));
  ASSERT_EQ(status, 200) << body;
  const auto real = json::parse(body).at("count").to_number<std::int64_t>();
  const auto estimate = (*m)->count_tokens(text);
  EXPECT_GT(estimate, static_cast<std::int64_t>(text.size() / 4) + 5) << real;
  EXPECT_GE(estimate * 10, real * 8) << "estimate " << estimate << ", the server's count " << real;
  EXPECT_LE(estimate * 10, real * 13) << "estimate " << estimate << ", the server's count " << real;
}

// agents.md's promise: the group chat sample runs on a 512-token model, in-process or served.
// Its transcript outgrows the context after a few turns; before weir read the served context
// it sent the whole transcript and weir serve answered 400 (context_length_exceeded).
TEST(AgainstServe, TheGroupChatSampleRunsOnA512TokenServedModel) {
  Served s;
  ASSERT_TRUE(s.svc);
  const std::string cmd =
      std::string(WEIR_BIN_DIR) + "/weir run " + WEIR_SOURCE_DIR +
      "/samples/crews/group_chat.json --model openai:http://127.0.0.1:" + std::to_string(s.port) +
      "/v1/tiny 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find(R"("stop_reason":"max_messages 9 reached")"), std::string::npos) << out;
}

}  // namespace
}  // namespace weir::agents
