// `weir serve` as a child process: --port 0 prints the bound port; SIGTERM drains (a request in
// flight finishes or, past --grace, is cancelled; the stream still ends with [DONE]) and the
// process exits 0; refused settings exit 1 with the reason.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include <boost/json.hpp>

#include "http_client.hpp"
#include "serve_child.hpp"
#include "weir/inference/gguf_writer.hpp"

namespace weir::serve {
namespace {

namespace fs = std::filesystem;
using testing_http::call;
using testing_http::Conn;
using testing_http::Reply;
using testing_serve::Child;
using testing_serve::spawn;

// A model slow enough that a long generation is still running when the signal comes.
fs::path slow_model() {
  auto dir = fs::temp_directory_path() / ("weir-serve-ptest-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto path = dir / "slow.gguf";
  if (!fs::exists(path)) {
    inference::RandomModelShape shape{256, 1024, 6, 4, 4, 512, 4096};
    auto st = inference::write_random_llama(path, shape, inference::GgmlType::f32, 3);
    EXPECT_TRUE(st) << st.error().message;
  }
  return path;
}

TEST(ServeProcess, SigtermDrainsInFlightRequestsAndExitsZero) {
  auto model = slow_model();
  auto c = spawn({"serve", "--model", model.string(), "--port", "0", "--ignore-eos", "--grace",
                  "0.5", "--kv-cache-mb", "64", "--max-num-seqs", "4"});
  auto m = c->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << c->err;
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  EXPECT_NE(c->err.find("--max-queued-requests = 256"), std::string::npos) << c->err;
  ASSERT_FALSE(c->wait_for(std::regex("weir serve: ready")).empty()) << c->err;
  // A short request that finishes within the grace, and a long one that cannot.
  Conn short_req(port), long_req(port);
  ASSERT_TRUE(long_req.request("POST", "/v1/completions",
                               R"({"prompt": "x", "max_tokens": 4000, "stream": true})"));
  Reply head;
  ASSERT_TRUE(long_req.read_head(head));
  ASSERT_EQ(head.status, 200);
  ASSERT_FALSE(long_req.next_chunk().empty());  // running
  ASSERT_TRUE(short_req.request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 5})"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  auto r = short_req.read_reply();
  EXPECT_EQ(r.status, 200) << r.body;
  // The long stream is cancelled after the grace and still ends properly.
  std::string rest;
  for (std::string ch; !(ch = long_req.next_chunk()).empty();) rest += ch;
  EXPECT_NE(rest.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(rest.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_EQ(c->wait_exit(10000), 0) << c->err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Nothing listens any more.
  EXPECT_EQ(call(port, "GET", "/health").status, 0);
}

// Issue 35.2 as a user met it: a stream past `--request-timeout 1` took the process down
// ("munmap_chunk(): invalid pointer", SIGABRT). It must end with an error event and [DONE],
// and the server must go on serving.
TEST(ServeProcess, AStreamPastTheRequestTimeoutLeavesTheServerServing) {
  auto model = slow_model();
  auto c = spawn({"serve", "--model", model.string(), "--port", "0", "--ignore-eos",
                  "--request-timeout", "1", "--kv-cache-mb", "64"});
  auto m = c->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << c->err;
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  ASSERT_FALSE(c->wait_for(std::regex("weir serve: ready")).empty()) << c->err;
  for (int i = 0; i < 2; ++i) {
    auto r = call(port, "POST", "/v1/completions",
                  R"({"prompt": "x", "max_tokens": 3500, "stream": true})");
    ASSERT_EQ(r.status, 200) << c->err;
    EXPECT_NE(r.body.find("the request ran past --request-timeout=1s after "), std::string::npos)
        << r.body;
    EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos) << r.body;
  }
  EXPECT_EQ(call(port, "GET", "/health").status, 200) << c->err;
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  EXPECT_EQ(c->wait_exit(10000), 0) << c->err;
}

// Issue 35.9: a non-streamed request still running when --grace ends got HTTP 499 ("the client
// went away", which SDKs do not retry) although its client was there; it gets what it has with
// finish_reason "length". While draining, /health answers shutting_down: new connections were
// refused at once, so a load balancer saw a connection error instead.
TEST(ServeProcess, ShutdownAnswersWhatItHasAndHealthSaysShuttingDown) {
  auto model = slow_model();
  auto c = spawn({"serve", "--model", model.string(), "--port", "0", "--ignore-eos", "--grace", "2",
                  "--kv-cache-mb", "64"});
  auto m = c->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << c->err;
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  ASSERT_FALSE(c->wait_for(std::regex("weir serve: ready")).empty()) << c->err;
  Conn long_req(port);
  ASSERT_TRUE(
      long_req.request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 4000})"));
  // Running: its first tokens are counted.
  for (int i = 0; i < 500; ++i) {
    auto met = call(port, "GET", "/metrics");
    if (met.body.find("weir_serve_requests_running{model=\"slow\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  // Draining: new connections are answered, /health says so, new work is a 503 to retry.
  Reply health;
  for (int i = 0; i < 200; ++i) {
    health = call(port, "GET", "/health");
    ASSERT_NE(health.status, 0) << "a connection was refused while draining";
    if (health.status == 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.body, R"({"status":"shutting_down"})");
  EXPECT_EQ(health.header("connection"), "close");
  auto late = call(port, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 4})");
  EXPECT_EQ(late.status, 503) << late.body;
  EXPECT_EQ(late.header("retry-after"), "1");
  EXPECT_NE(late.body.find("the server is shutting down"), std::string::npos) << late.body;
  // Past the grace, the long request ends with what it has.
  auto r = long_req.read_reply();
  ASSERT_EQ(r.status, 200) << r.body;
  auto v = boost::json::parse(r.body);
  EXPECT_EQ(v.at("choices").at(0).at("finish_reason"), "length") << r.body;
  const auto tokens = v.at("usage").at("completion_tokens").as_int64();
  EXPECT_GT(tokens, 0);
  EXPECT_LT(tokens, 4000);
  EXPECT_EQ(c->wait_exit(10000), 0) << c->err;
}

// Issue 35.13: one 3.9 MB /tokenize took the server's RSS from 31 to 285 MB, unaccounted. Its
// memory is charged to the budget first: with --request-memory-mb 64 it is refused, and the
// process does not grow.
TEST(ServeProcess, ATokenizeRequestCannotGrowTheProcessPastTheBudget) {
  const auto dir = slow_model().parent_path();
  const auto model = dir / "tiny-tok.gguf";
  if (!fs::exists(model))
    ASSERT_TRUE(inference::write_random_llama(model, inference::RandomModelShape::tiny(),
                                              inference::GgmlType::f32, 7));
  auto c = spawn({"serve", "--model", model.string(), "--port", "0", "--request-memory-mb", "64"});
  auto m = c->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << c->err;
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  ASSERT_FALSE(c->wait_for(std::regex("weir serve: ready")).empty()) << c->err;
  auto peak_kb = [&] {
    std::ifstream in("/proc/" + std::to_string(c->pid) + "/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1L;
  };
  const long before = peak_kb();
  const std::string big = R"({"prompt": ")" + std::string(3900000, 'a') + R"("})";
  auto r = call(port, "POST", "/tokenize", big);
  EXPECT_EQ(r.status, 413) << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("more than --request-memory-mb=64 allows"), std::string::npos)
      << r.body.substr(0, 300);
  const long after = peak_kb();
  EXPECT_LT(after - before, 32 * 1024)
      << "peak RSS grew from " << before << " to " << after << " KB";
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  EXPECT_EQ(c->wait_exit(10000), 0) << c->err;
}

TEST(ServeProcess, RefusesAnOpenBindWithoutAKey) {
  auto c = spawn({"serve", "--model", "x.gguf", "--host", "0.0.0.0"});
  EXPECT_EQ(c->wait_exit(10000), 1);
  c->wait_for(std::regex("refusing"), 1000);
  EXPECT_NE(c->err.find("refusing to listen on 0.0.0.0 without an API key"), std::string::npos)
      << c->err;
}

// The runs API from the command line: `weir serve --workflows samples/workflows` (no model), the
// human_review sample paused and resumed over HTTP, then SIGTERM: exit 0.
TEST(ServeProcess, RunsApiServesTheSampleWorkflows) {
  auto c = spawn({"serve", "--port", "0", "--workflows",
                  std::string(WEIR_SOURCE_DIR) + "/samples/workflows", "--max-runs", "2"});
  auto m = c->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << c->err;
  const auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  EXPECT_NE(c->err.find("/v1/runs = workflows in " + std::string(WEIR_SOURCE_DIR) +
                        "/samples/workflows (crew files: none, no --model), in-process queue, "
                        "--max-runs 2, --max-queued-runs 256"),
            std::string::npos)
      << c->err;
  auto posted =
      call(port, "POST", "/v1/runs",
           R"({"workflow": "human_review", "input": {"topic": "fences"}, "thread_id": "t1"})");
  ASSERT_EQ(posted.status, 202) << posted.body;
  const std::string id(boost::json::parse(posted.body).at("id").as_string());
  // The events stream ends when the run pauses at its review node.
  auto ev = call(port, "GET", "/v1/runs/" + id + "/events");
  ASSERT_EQ(ev.status, 200);
  EXPECT_NE(ev.body.find("event: end"), std::string::npos) << ev.body;
  EXPECT_NE(ev.body.find(R"("state":"interrupted")"), std::string::npos) << ev.body;
  auto resumed = call(port, "POST", "/v1/threads/t1/resume", R"({"value": "approve"})");
  ASSERT_EQ(resumed.status, 202) << resumed.body;
  const std::string id2(boost::json::parse(resumed.body).at("id").as_string());
  auto ev2 = call(port, "GET", "/v1/runs/" + id2 + "/events");
  EXPECT_NE(ev2.body.find(R"("state":"succeeded")"), std::string::npos) << ev2.body;
  auto state = boost::json::parse(call(port, "GET", "/v1/threads/t1/state").body);
  EXPECT_EQ(state.at("values").at("published"), true) << state;
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  EXPECT_EQ(c->wait_exit(10000), 0) << c->err;
}

// The official TypeScript SDK's Streamable HTTP client against `weir serve`'s /mcp, with no
// model: weir's tools and a workflow (tests/mcp/workflows) as tools.
TEST(ServeProcess, McpOverHttpWithTheTypeScriptSdk) {
  const std::string peer = std::string(WEIR_SOURCE_DIR) + "/tests/mcp/peer";
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !fs::exists(peer + "/node_modules/@modelcontextprotocol/sdk"))
    GTEST_SKIP() << "node or tests/mcp/peer/node_modules is missing (run tests/mcp/setup, which "
                    "needs npm)";
  auto c = spawn({"serve", "--port", "0", "--mcp-tools", "calculator", "--mcp-workflows",
                  std::string(WEIR_SOURCE_DIR) + "/tests/mcp/workflows"});
  auto m = c->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << c->err;
  EXPECT_NE(c->err.find("/mcp = 2 tools"), std::string::npos) << c->err;
  const std::string url = "http://127.0.0.1:" + std::string(m[1]) + "/mcp";
  std::FILE* p = ::popen(("node " + peer + "/sdk_client.mjs --url " + url + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  auto v = boost::json::parse(out).as_object();
  EXPECT_EQ(v.at("version").at("name"), "weir");
  EXPECT_EQ(v.at("tools"), boost::json::parse(R"(["calculator", "greet"])"));
  EXPECT_EQ(v.at("calculator"), "1024");
  EXPECT_EQ(v.at("greet"), R"({"greeting":"Hello, SDK!"})");
  EXPECT_EQ(v.at("session").as_string().size(), 32u);
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  EXPECT_EQ(c->wait_exit(10000), 0) << c->err;
}

// Remote models end to end: `weir run` with --model openai:URL/MODEL (a crew) and a workflow
// whose model entry has "provider": "openai", both against a `weir serve` child.
std::string run_capture(const std::string& cmd, int& code, bool with_stderr = true) {
  std::FILE* p = ::popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  std::string out;
  if (!p) return out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(ServeProcess, WeirRunUsesAServedModelOverHttp) {
  auto dir = fs::temp_directory_path() / ("weir-serve-ptest-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto model = dir / "tiny.gguf";
  if (!fs::exists(model)) {
    auto shape = inference::RandomModelShape::tiny();
    shape.context_length = 4096;
    ASSERT_TRUE(inference::write_random_llama(model, shape, inference::GgmlType::f32, 7));
  }
  // The model's KV cache in F16 (half the bytes a token): the agents over HTTP run the same.
  auto c = spawn({"serve", "--model", model.string(), "--port", "0", "--ignore-eos",
                  "--kv-cache-mb", "64", "--kv-cache-type", "f16"});
  ASSERT_FALSE(c->wait_for(std::regex("--kv-cache-type = f16")).empty()) << c->err;
  auto m = c->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << c->err;
  // (The match points into c->err: copy it before the next wait_for appends to it.)
  const std::string base = "http://127.0.0.1:" + std::string(m[1]) + "/v1";
  ASSERT_FALSE(c->wait_for(std::regex("weir serve: ready")).empty()) << c->err;
  const std::string weir = std::string(WEIR_BIN_DIR) + "/weir";

  int code = -1;
  std::string out =
      run_capture(weir + " run " + std::string(WEIR_SOURCE_DIR) +
                      "/samples/crews/research_crew.json --model openai:" + base + "/tiny",
                  code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"final_output\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"task\":\"review\""), std::string::npos) << out;
  out = run_capture(weir + " run " + std::string(WEIR_SOURCE_DIR) +
                        "/samples/crews/group_chat.json --model openai:" + base + "/tiny",
                    code, false);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(boost::json::parse(out).at("stop_reason"), "max_messages 9 reached") << out;

  const auto wf = dir / "remote_flow.json";
  {
    std::ofstream f(wf);
    f << R"({"name": "remote_flow",
      "models": {"far": {"provider": "openai", "base_url": ")"
      << base << R"(", "model": "tiny", "max_concurrency": 2, "stream": true}},
      "state": {"title": {}},
      "nodes": {"name": {"kind": "llm", "model": "far", "prompt": "A title", "max_tokens": 8,
                         "output": "title"}},
      "edges": [{"from": "START", "to": "name"}, {"from": "name", "to": "END"}]})";
  }
  out = run_capture(weir + " run " + wf.string(), code, false);
  ASSERT_EQ(code, 0) << out;
  auto v = boost::json::parse(out).as_object();
  ASSERT_TRUE(v.at("title").is_string()) << out;
  EXPECT_FALSE(v.at("title").as_string().empty()) << out;

  // A model entry the loader refuses, with the position of the mistake.
  const auto bad = dir / "remote_bad.json";
  {
    std::ofstream f(bad);
    f << R"({"name": "remote_bad",
      "models": {"far": {"provider": "openai", "base_url": "127.0.0.1:8080", "model": "tiny",
                         "stream": "yes"}},
      "state": {"title": {}},
      "nodes": {"name": {"kind": "llm", "model": "far", "prompt": "A title", "output": "title"}},
      "edges": [{"from": "START", "to": "name"}, {"from": "name", "to": "END"}]})";
  }
  out = run_capture(weir + " validate " + bad.string(), code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("/models/far/base_url: expected an http:// or https:// URL"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("/models/far/stream: expected true or false, got a string"), std::string::npos)
      << out;
  ASSERT_EQ(::kill(c->pid, SIGTERM), 0);
  EXPECT_EQ(c->wait_exit(10000), 0) << c->err;
}

// A number from a server's /metrics (the sum of every series of `name`), or -1.
double metric(std::uint16_t port, const std::string& name) {
  auto r = call(port, "GET", "/metrics");
  if (r.status != 200) return -1;
  double sum = 0;
  bool found = false;
  const std::regex line("(^|\n)" + name + "(\\{[^}]*\\})? ([0-9.e+]+)");
  for (std::sregex_iterator it(r.body.begin(), r.body.end(), line), end; it != end; ++it) {
    sum += std::stod((*it)[3]);
    found = true;
  }
  return found ? sum : -1;
}

// One model on two `weir serve` processes (base_url as an array): batch runs spread over both,
// prompts that start the same hit one server's prefix cache, and when one server is killed in
// the middle its requests fail over to the other and every run completes. Observed, not
// assumed: B is killed while it has served requests and has at least three in flight; those
// fail (the client's breaker names B), every run still succeeds, so A served them again.
TEST(ServeProcess, TwoServersOneKilledMidRunAndTheRunsFailOver) {
  const auto model = slow_model();
  const auto dir = model.parent_path();
  auto a = spawn({"serve", "--model", "m=" + model.string(), "--port", "0", "--ignore-eos",
                  "--kv-cache-mb", "64"});
  auto b = spawn({"serve", "--model", "m=" + model.string(), "--port", "0", "--ignore-eos",
                  "--kv-cache-mb", "64"});
  const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  auto ma = a->wait_for(listening);
  auto mb = b->wait_for(listening);
  ASSERT_FALSE(ma.empty()) << a->err;
  ASSERT_FALSE(mb.empty()) << b->err;
  const std::string pa = ma[1], pb = mb[1];
  const auto port_a = static_cast<std::uint16_t>(std::stoi(pa));
  const auto port_b = static_cast<std::uint16_t>(std::stoi(pb));
  ASSERT_FALSE(a->wait_for(std::regex("weir serve: ready")).empty()) << a->err;
  ASSERT_FALSE(b->wait_for(std::regex("weir serve: ready")).empty()) << b->err;
  const auto wf = dir / "two_servers.json";
  {
    std::ofstream f(wf);
    f << R"({"name": "two_servers",
      "models": {"m": {"provider": "openai", "model": "m", "max_retries": 3,
                       "base_url": ["http://127.0.0.1:)"
      << pa << R"(/v1", "http://127.0.0.1:)" << pb << R"(/v1"]}},
      "state": {"topic": {}, "a": {}, "b": {}},
      "nodes": {
        "first": {"kind": "llm", "model": "m", "system": "You are a careful analyst of {{state.topic}}.",
                  "prompt": "Outline {{state.topic}}", "max_tokens": 24, "output": "a"},
        "second": {"kind": "llm", "model": "m", "system": "You are a careful analyst of {{state.topic}}.",
                   "prompt": "Summarise {{state.topic}}", "max_tokens": 24, "output": "b"}},
      "edges": [{"from": "START", "to": "first"}, {"from": "first", "to": "second"},
                {"from": "second", "to": "END"}]})";
  }
  const auto inputs = dir / "two_servers.jsonl";
  {
    std::ofstream f(inputs);
    for (int i = 0; i < 48; ++i)
      f << R"({"topic": "topic )" << i % 6 << R"("})"
        << "\n";
  }
  const std::string weir = std::string(WEIR_BIN_DIR) + "/weir";
  const std::string completed = "weir_serve_request_duration_seconds_count";
  const std::string running = "weir_serve_requests_running";
  double b_done = -1, b_running = -1;
  std::thread killer([&] {
    // B is killed once it has served a few requests and has at least three running.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      const double done = metric(port_b, completed), now_running = metric(port_b, running);
      if (done >= 4 && now_running >= 3) {
        b_done = done;
        b_running = now_running;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(b->pid, SIGKILL);
  });
  const auto err_file = dir / "two_servers.err";
  int code = -1;
  const std::string out =
      run_capture("{ " + weir + " batch " + wf.string() + " --inputs " + inputs.string() +
                      " --max-concurrency 8 2>" + err_file.string() + "; }",
                  code, false);
  killer.join();
  std::ifstream ef(err_file);
  const std::string err((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
  ASSERT_EQ(code, 0) << out << err;
  ASSERT_GE(b_done, 4) << "B never had served four requests with three running";
  EXPECT_GE(b_running, 3);
  int ok = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && boost::json::parse(line).at("ok") == true) ++ok;
  EXPECT_EQ(ok, 48) << out;
  // The client saw B's requests fail and moved off it...
  EXPECT_NE(err.find("openai http://127.0.0.1:" + pb + "/v1: 3 failures in a row; skipped for"),
            std::string::npos)
      << err;
  // ...and A served what B did not finish: every request but those B completed.
  const double a_done = metric(port_a, completed);
  EXPECT_GE(a_done, 96 - b_done - b_running) << "A " << a_done << ", B " << b_done;
  EXPECT_GT(a_done, 0);
  // The surviving server's prefix cache hit (six shared prefixes).
  auto metrics = call(port_a, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  std::smatch m;
  const std::string body = metrics.body;
  ASSERT_TRUE(std::regex_search(
      body, m, std::regex("weir_serve_cached_prompt_tokens_total\\{[^}]*\\} ([0-9.e+]+)")))
      << body;
  EXPECT_GT(std::stod(m[1]), 0) << body;
  ::kill(a->pid, SIGTERM);
  EXPECT_EQ(a->wait_exit(10000), 0) << a->err;
}

}  // namespace
}  // namespace weir::serve
