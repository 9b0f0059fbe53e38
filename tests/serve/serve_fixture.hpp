// What the in-process serve tests share: a random-weight model written once per test process, a
// Service started on a free port, and readers for error messages and /metrics series.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
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
