// What the in-process serve tests share: a random-weight model written once per test process, a
// Service started on a free port, and readers for error messages and /metrics series.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <boost/json.hpp>

#include "http_client.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/serve/service.hpp"

namespace weir::serve {

namespace fs = std::filesystem;
namespace json = boost::json;
using testing_http::call;
using testing_http::Conn;
using testing_http::frames_of;
using testing_http::Reply;
using testing_http::sse_data;

// A random-weight model written once per test process.
inline fs::path random_model(const std::string& name, inference::RandomModelShape shape) {
  auto dir = fs::temp_directory_path() / ("weir-serve-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto path = dir / (name + ".gguf");
  if (!fs::exists(path)) {
    auto st = inference::write_random_llama(path, shape, inference::GgmlType::f32, 7);
    EXPECT_TRUE(st) << st.error().message;
  }
  return path;
}

inline fs::path tiny_model(const std::string& name, std::int32_t context = 256) {
  auto shape = inference::RandomModelShape::tiny();
  shape.context_length = context;
  return random_model(name, shape);
}

// Slow enough (6 layers of 256, a 4096-token context) that a long generation is still running
// seconds after it started, on any machine.
inline fs::path slow_model() {
  return random_model("slow", {256, 1024, 6, 4, 4, 512, 4096});
}

// A folder holding `talk`: an llm node on `model` that answers in the messages channel
// (greedy: the same tokens every time), for tests of replies streamed as they are generated;
// `inline_limit` > 0 sets the workflow's limits.inline_limit. `into`: that folder instead of a
// new one.
inline fs::path talk_workflows(const fs::path& model, int max_tokens, int inline_limit = 0,
                               fs::path into = {}) {
  static int made = 0;
  const fs::path dir =
      !into.empty() ? into
                    : fs::path(::testing::TempDir()) / ("weir-talk-" + std::to_string(::getpid()) +
                                                        "-" + std::to_string(made++));
  fs::create_directories(dir);
  json::object wf{{"name", "talk"},
                  {"description", "Tells a story with a small random model, in chat messages."},
                  {"models", json::object{{"small", json::object{{"path", model.string()}}}}},
                  {"state", json::object{{"messages", json::object{{"reducer", "messages"}}}}},
                  {"input", json::array{"messages"}},
                  {"nodes", json::object{{"answer", json::object{{"kind", "llm"},
                                                                 {"model", "small"},
                                                                 {"prompt", "Once upon a time"},
                                                                 {"messages", "messages"},
                                                                 {"max_tokens", max_tokens}}}}},
                  {"edges", json::array{json::object{{"from", "START"}, {"to", "answer"}},
                                        json::object{{"from", "answer"}, {"to", "END"}}}}};
  if (inline_limit > 0) wf["limits"] = json::object{{"inline_limit", inline_limit}};
  std::ofstream(dir / "talk.json") << json::serialize(wf);
  return dir;
}

// Runs shell command `cmd` (a node script) and reads what it printed as one JSON value (null,
// with a test failure, when it exits non-zero or prints no JSON).
inline json::value run_node_json(const std::string& cmd) {
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return nullptr;
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  boost::system::error_code ec;
  json::value v = json::parse(out, ec);
  EXPECT_FALSE(ec) << out;
  return ec ? json::value(nullptr) : v;
}

struct Running {
  std::unique_ptr<Service> svc;
  std::uint16_t port = 0;
};

inline Running start(ServeConfig c) {
  c.port = 0;
  auto s = Service::start(std::move(c));
  EXPECT_TRUE(s) << s.error().message;
  Running r;
  r.svc = std::move(*s);
  auto st = r.svc->wait_ready();
  EXPECT_TRUE(st) << st.error().message;
  r.port = r.svc->port();
  return r;
}

inline ServeConfig tiny_config(const std::string& name, std::int32_t context = 256) {
  ServeConfig c;
  c.models.push_back({name, tiny_model(name, context)});
  c.kv_cache_bytes = 8u << 20;
  c.ignore_eos = true;
  return c;
}

inline json::value body_json(const Reply& r) {
  boost::system::error_code ec;
  auto v = json::parse(r.body, ec);
  EXPECT_FALSE(ec) << r.body;
  return v;
}

inline std::string error_message(const Reply& r) {
  auto v = body_json(r);
  if (!v.is_object() || !v.as_object().contains("error")) return "(no error object) " + r.body;
  return std::string(v.at("error").at("message").as_string());
}

inline double metric(std::uint16_t port, const std::string& series) {
  auto r = call(port, "GET", "/metrics");
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return NAN;
}

}  // namespace weir::serve
