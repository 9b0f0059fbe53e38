// weir serve and its engines: two models in one process, text that stays text through every
// endpoint, a closed-loop load of 1, 8 and 64 clients that must finish, and a SIGTERM under
// load that ends the process within the grace. Real processes and real HTTP on loopback.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "http_client.hpp"
#include "serve_child.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/serve/service.hpp"

namespace weir::serve {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using testing_http::call;
using testing_http::Conn;
using testing_http::Reply;
using testing_serve::Child;
using testing_serve::spawn;

// This process's models, removed when it exits.
fs::path scratch() {
  static const struct Dir {
    fs::path path =
        fs::temp_directory_path() / ("weir-engine-serve-test-" + std::to_string(::getpid()));
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } dir;
  fs::create_directories(dir.path);
  return dir.path;
}

// A random-weight model of `shape` in `type`, written once per test process.
fs::path model_file(const std::string& name, inference::RandomModelShape shape,
                    inference::GgmlType type, std::uint64_t seed) {
  auto path = scratch() / (name + ".gguf");
  if (!fs::exists(path)) {
    auto st = inference::write_random_llama(path, shape, type, seed);
    EXPECT_TRUE(st) << st.error().message;
  }
  return path;
}

// The 15M shape with dim 256 and 8 heads of 32 in Q8_0: bench_inference's model, on which the
// engine's thread pool wedged under load (issue 35.3).
fs::path model_15m_q8() {
  auto shape = inference::RandomModelShape::stories15m();
  shape.dim = 256, shape.n_heads = shape.n_kv_heads = 8;
  return model_file("15m-d256-q8_0", shape, inference::GgmlType::q8_0, 42);
}

json::value parse(const Reply& r) {
  boost::system::error_code ec;
  auto v = json::parse(r.body, ec);
  EXPECT_FALSE(ec) << r.status << " " << r.body;
  return ec ? json::value() : v;
}

std::uint16_t wait_listening(Child& c) {
  auto m = c.wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"), 120000);
  if (m.empty()) return 0;
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  if (c.wait_for(std::regex("weir serve: ready"), 120000).empty()) return 0;
  return port;
}

double metric(std::uint16_t port, const std::string& series) {
  auto r = call(port, "GET", "/metrics");
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

// serve.md's own example: two different model files in one process. Each gets its KV pool of
// --kv-cache-mb (the budget holds both), and each answers under its name.
TEST(ServeEngine, TwoModelsInOneProcessAnswerBoth) {
  auto a = model_file("a", inference::RandomModelShape::tiny(), inference::GgmlType::f32, 1);
  auto shape_b = inference::RandomModelShape::tiny();
  shape_b.dim = 128, shape_b.n_layers = 3, shape_b.n_vocab = 600;
  auto b = model_file("b", shape_b, inference::GgmlType::q8_0, 2);
  auto c = spawn({"serve", "--model", "a=" + a.string(), "--model", "b=" + b.string(), "--port",
                  "0", "--kv-cache-mb", "16", "--ignore-eos"});
  const auto port = wait_listening(*c);
  ASSERT_NE(port, 0) << c->err;
  for (const char* name : {"a", "b"}) {
    auto r = call(port, "POST", "/v1/completions",
                  std::string(R"({"model": ")") + name +
                      R"(", "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0})");
    ASSERT_EQ(r.status, 200) << name << ": " << r.body;
    auto v = parse(r);
    EXPECT_EQ(v.at("model").as_string(), name);
    EXPECT_EQ(v.at("usage").at("completion_tokens").as_int64(), 5);
  }
  // a: 2 layers x 4 KV heads x 16 x 16 tokens x (K, V) x 4 bytes = 16 KiB a block; b: 48 KiB.
  const double pools = (16 << 20) + ((16 << 20) / (48 << 10)) * (48 << 10);
  EXPECT_EQ(metric(port, "weir_memory_used_bytes{category=\"kv_cache\"}"), pools);
  EXPECT_EQ(metric(port, "weir_kv_blocks_used{engine=\"a\"}"), 0);
  EXPECT_EQ(metric(port, "weir_kv_blocks_used{engine=\"b\"}"), 0);
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  EXPECT_EQ(c->wait_exit(30000), 0) << c->err;
}

// Text is text: "</s>" in a chat message is those characters, not end-of-sequence; chat,
// /v1/completions and /tokenize read client text the same way. (The tiny model's vocabulary
// has <s> and </s> as control tokens and no chatml markers, so the chat prompt's tokens are
// exactly the completions prompt's when that prompt is the chat template's text.)
TEST(ServeEngine, MessageTextNeverBecomesASpecialToken) {
  ServeConfig cfg;
  cfg.models.push_back(
      {"t", model_file("tiny", inference::RandomModelShape::tiny(), inference::GgmlType::f32, 7)});
  cfg.kv_cache_bytes = 8u << 20;
  cfg.ignore_eos = true;
  cfg.port = 0;
  auto svc = Service::start(cfg);
  ASSERT_TRUE(svc) << svc.error().message;
  ASSERT_TRUE((*svc)->wait_ready());
  const auto port = (*svc)->port();
  const std::string content = "a</s>b<s>c";
  auto chat = call(port, "POST", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": ")" + content +
                       R"("}], "max_tokens": 1, "temperature": 0})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  const std::string rendered =
      "<|im_start|>user\\n" + content + "<|im_end|>\\n<|im_start|>assistant\\n";
  auto completion = call(port, "POST", "/v1/completions",
                         R"({"prompt": ")" + rendered + R"(", "max_tokens": 1, "temperature": 0})");
  ASSERT_EQ(completion.status, 200) << completion.body;
  auto tokenized = call(port, "POST", "/tokenize", R"({"prompt": ")" + rendered + R"("})");
  ASSERT_EQ(tokenized.status, 200) << tokenized.body;
  const auto chat_tokens = parse(chat).at("usage").at("prompt_tokens").as_int64();
  const auto completion_tokens = parse(completion).at("usage").at("prompt_tokens").as_int64();
  EXPECT_EQ(chat_tokens, completion_tokens);
  const json::value tokens = parse(tokenized);
  EXPECT_EQ(tokens.at("count").to_number<std::int64_t>(), completion_tokens);
  // Nothing but the first id is BOS (1), and no id is EOS (2).
  const auto& ids = tokens.at("tokens").as_array();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0].as_int64(), 1);
  for (std::size_t i = 1; i < ids.size(); ++i) {
    EXPECT_NE(ids[i].as_int64(), 1) << "token " << i;
    EXPECT_NE(ids[i].as_int64(), 2) << "token " << i;
  }
}

// Issue 35.3: under a closed-loop load over loopback a server stopped answering (the engine
// thread spun in ThreadPool::parallel_for for a chunk count it could never reach), and after
// SIGTERM it printed "stopped" and stayed alive. On the 15M Q8_0 model where it wedged most
// (its kernels split every matmul over the pool), 1, 8 and 64 clients each run hundreds of
// requests back to back: every one must be answered (a request left without an answer for 30
// s fails the test), the KV blocks all come back, and SIGTERM while 64 streams run ends the
// process with exit 0 within the grace plus a few steps.
TEST(ServeEngine, ClosedLoopLoadFinishesAndSigtermEndsTheProcess) {
  auto model = model_15m_q8();
  auto c = spawn({"serve", "--model", model.string(), "--port", "0", "--ignore-eos",
                  "--max-num-seqs", "64", "--kv-cache-mb", "64", "--grace", "1"});
  const auto port = wait_listening(*c);
  ASSERT_NE(port, 0) << c->err;
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})";
  struct Phase {
    int clients, requests;
  };
  for (const Phase ph : {Phase{1, 300}, Phase{8, 800}, Phase{64, 1600}}) {
    std::atomic<int> next{0}, ok{0};
    std::mutex mu;
    std::string first_error;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> clients;
    for (int k = 0; k < ph.clients; ++k) {
      clients.emplace_back([&] {
        while (next.fetch_add(1) < ph.requests) {
          auto r = call(port, "POST", "/v1/completions", body);
          if (r.status == 200 && r.body.find("\"completion_tokens\":8") != std::string::npos) {
            ok.fetch_add(1);
            continue;
          }
          std::lock_guard lock(mu);
          if (first_error.empty()) first_error = r.status == 0 ? "no answer within 30 s" : r.body;
          next.store(ph.requests);  // stop this phase: the server is in trouble
        }
      });
    }
    for (auto& t : clients) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d clients: %d of %d requests in %.1f s\n", ph.clients, ok.load(), ph.requests, s);
    ASSERT_EQ(ok.load(), ph.requests) << ph.clients << " clients: " << first_error;
  }
  EXPECT_EQ(metric(port, "weir_kv_blocks_used{engine=\"15m-d256-q8_0\"}"), 0);

  // SIGTERM while 64 long streams run: the drain cancels them after the grace (1 s), each
  // stream still ends with [DONE], and the process exits 0.
  std::vector<std::unique_ptr<Conn>> streams;
  for (int k = 0; k < 64; ++k) {
    auto conn = std::make_unique<Conn>(port);
    ASSERT_TRUE(
        conn->request("POST", "/v1/completions",
                      R"({"prompt": "Once upon a time", "max_tokens": 1000, "stream": true})"));
    streams.push_back(std::move(conn));
  }
  for (auto& conn : streams) {
    Reply head;
    ASSERT_TRUE(conn->read_head(head));
    ASSERT_EQ(head.status, 200);
  }
  ASSERT_FALSE(streams.back()->next_chunk().empty());  // generating
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  int done = 0;
  for (auto& conn : streams) {
    std::string rest;
    for (std::string ch; !(ch = conn->next_chunk()).empty();) rest += ch;
    done += rest.find("data: [DONE]") != std::string::npos;
  }
  EXPECT_EQ(done, 64);
  EXPECT_EQ(c->wait_exit(60000), 0) << c->err;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 15.0) << "the process took " << s << " s to exit after SIGTERM (grace 1 s)";
  EXPECT_FALSE(c->wait_for(std::regex("weir serve: stopped"), 5000).empty()) << c->err;
}

// docs/serve.md: a second SIGTERM or SIGINT exits at once (status 1), even while the drain waits
// for a request that will not end within the grace. It did not: the signal thread ran the drain
// itself and saw the second signal only when the drain was over (here: a minute). A long stream
// whose client stops reading holds the drain (--grace 60) until the second signal.
TEST(ServeEngine, ASecondSignalExitsAtOnceWhileTheDrainWaits) {
  auto shape = inference::RandomModelShape::tiny();
  shape.context_length = 16384;
  auto model = model_file("tiny-16k", shape, inference::GgmlType::f32, 9);
  auto c =
      spawn({"serve", "--model", model.string(), "--port", "0", "--ignore-eos", "--max-model-len",
             "16384", "--kv-cache-mb", "32", "--grace", "60", "--write-timeout", "300"});
  const auto port = wait_listening(*c);
  ASSERT_NE(port, 0) << c->err;
  // The client: a receive buffer of a few KiB, read until the first event, then never again.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  // Each event carries 20 alternatives (~1.5 KB): far more in all than the sockets can hold.
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 16000,)"
      R"( "stream": true, "logprobs": true, "top_logprobs": 20})";
  const std::string req =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  while (got.find("data: ") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 30000), 0) << got;
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ASSERT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  ASSERT_FALSE(c->wait_for(std::regex("draining"), 20000).empty()) << c->err;
  ASSERT_EQ(::kill(c->pid, SIGINT), 0);
  EXPECT_EQ(c->wait_exit(20000), 1) << "the process did not exit within 20 s of the second signal "
                                       "(grace 60 s); its stderr:\n"
                                    << c->err;
  EXPECT_FALSE(c->wait_for(std::regex("second signal, exiting now"), 5000).empty()) << c->err;
  ::close(fd);
}

}  // namespace
}  // namespace weir::serve
