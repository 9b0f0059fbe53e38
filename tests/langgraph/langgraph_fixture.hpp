// What the LangGraph API's tests share: the test workflows' server, a new thread, the error
// text of an answer, and running a client script of tests/langgraph/clients with node.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "serve_fixture.hpp"

namespace weir::serve {

inline const std::string kLangGraphClients =
    std::string(WEIR_SOURCE_DIR) + "/tests/langgraph/clients";

// weir serve with tests/langgraph/workflows.
inline ServeConfig lg_config() {
  ServeConfig c;
  c.workflows = fs::path(WEIR_SOURCE_DIR) / "tests/langgraph/workflows";
  return c;
}

// POST /threads with `body`; the new thread's id.
inline std::string new_thread(std::uint16_t port, const std::string& body = "{}") {
  auto r = call(port, "POST", "/threads", body);
  EXPECT_EQ(r.status, 200) << r.body;
  return std::string(body_json(r).at("thread_id").as_string());
}

// An answer's {"detail"} text.
inline std::string detail(const Reply& r) {
  auto v = body_json(r);
  if (!v.is_object() || !v.as_object().contains("detail")) return "(no detail) " + r.body;
  return std::string(v.at("detail").as_string());
}

// Why a test of the official JS client cannot run here ("" when it can).
inline std::string no_js_client() {
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !fs::exists(kLangGraphClients + "/node_modules/@langchain/langgraph-sdk"))
    return "node or tests/langgraph/clients/node_modules is missing (run "
           "tests/langgraph/clients/setup, which needs npm and its registry)";
  return "";
}

// Runs `node tests/langgraph/clients/<script> <args...>` and reads what it printed as one JSON
// value (null, with a test failure, when it exits non-zero or prints no JSON).
inline json::value run_client_script(const std::string& script,
                                     const std::vector<std::string>& args) {
  std::string cmd = "node " + kLangGraphClients + "/" + script;
  for (const auto& a : args) cmd += " " + a;
  return run_node_json(cmd);
}

inline std::string loopback(std::uint16_t port) {
  return "http://127.0.0.1:" + std::to_string(port);
}

}  // namespace weir::serve
