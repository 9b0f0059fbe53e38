// weir's MCP client over Streamable HTTP against the official TypeScript SDK's server
// (tests/mcp/peer/http_server.mjs, real HTTP on loopback), answering as SSE streams and as JSON
// bodies. (Against weir serve's /mcp: tests/serve/mcp_http_test.cpp.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"

namespace weir::tools {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

const std::string kPeer = std::string(WEIR_SOURCE_DIR) + "/tests/mcp/peer";

bool have_peers() {
  return std::system("command -v node >/dev/null 2>&1") == 0 &&
         std::filesystem::exists(kPeer + "/node_modules/@modelcontextprotocol/sdk");
}

#define REQUIRE_NPM_PEERS()                                                               \
  if (!have_peers())                                                                      \
  GTEST_SKIP() << "node or tests/mcp/peer/node_modules is missing (run tests/mcp/setup, " \
                  "which needs npm)"

// `node http_server.mjs [--json]`, its port read from its first line; killed at the end.
struct SdkServer {
  pid_t pid = -1;
  int port = 0;
  std::string out;

  explicit SdkServer(bool json_answers) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan server if the test process aborts
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      std::string script = kPeer + "/http_server.mjs";
      if (json_answers)
        ::execlp("node", "node", script.c_str(), "--json", nullptr);
      else
        ::execlp("node", "node", script.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(fds[1]);
    char buf[256];
    std::smatch m;
    const std::regex listening("listening on ([0-9]+)");
    while (!std::regex_search(out, m, listening)) {
      const auto n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    if (!m.empty()) port = std::stoi(m[1]);
  }
  void kill() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~SdkServer() { kill(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port) + "/mcp"; }
};

McpServerConfig peer(const std::string& url) {
  McpServerConfig c;
  c.name = "peer";
  c.url = url;
  c.options.timeout = 10s;
  c.restart_backoff = 20ms;
  c.max_restarts = 1;
  c.connect_timeout = 10s;
  return c;
}

std::string call(ToolRegistry& reg, const std::string& name, std::string_view args) {
  boost::asio::io_context io;
  auto f = boost::asio::co_spawn(io, reg.async_call(name, json::parse(args).as_object(), {}),
                                 boost::asio::use_future);
  io.run();
  auto r = f.get();
  return r ? "ok: " + r->content : r.error().to_string();
}

class McpHttpSdk : public ::testing::TestWithParam<bool> {};

TEST_P(McpHttpSdk, ListsAndCallsToolsWithTheSessionKept) {
  REQUIRE_NPM_PEERS();
  SdkServer server(GetParam());
  ASSERT_GT(server.port, 0) << server.out;
  auto c = McpClient::connect(peer(server.url()));
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->protocol_version(), "2025-06-18");
  std::vector<std::string> names;
  for (const auto& t : (*c)->tools()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"add", "slow"}));
  ToolRegistry reg;
  ASSERT_TRUE(add_mcp_tools(reg, *c));
  // Every call after initialize carries the session id: the SDK server answers 404 without it.
  EXPECT_EQ(call(reg, "peer/add", R"({"a": 40, "b": 2})"), "ok: 42");
  // A notification on the call's stream before its answer is read and passed over.
  EXPECT_EQ(call(reg, "peer/slow", R"({"ms": 50})"), "ok: slept");
  // weir checks the server's inputSchema before anything is sent.
  EXPECT_EQ(call(reg, "peer/add", R"({"a": "x", "b": 2})"),
            "invalid_argument: peer/add: /a: expected number, got string");
  EXPECT_EQ((*c)->restarts(), 0);
}

TEST_P(McpHttpSdk, ATimeoutFailsTheCallAndTheSessionServesOn) {
  REQUIRE_NPM_PEERS();
  SdkServer server(GetParam());
  ASSERT_GT(server.port, 0) << server.out;
  auto cfg = peer(server.url());
  cfg.options.timeout = 300ms;
  auto c = McpClient::connect(cfg);
  ASSERT_TRUE(c) << c.error().to_string();
  ToolRegistry reg;
  ASSERT_TRUE(add_mcp_tools(reg, *c));
  EXPECT_EQ(call(reg, "peer/slow", R"({"ms": 5000})"),
            "tool_timeout: tool 'peer/slow' did not answer within 300 ms");
  EXPECT_EQ(call(reg, "peer/add", R"({"a": 1, "b": 2})"), "ok: 3");
  EXPECT_EQ((*c)->restarts(), 0);
}

INSTANTIATE_TEST_SUITE_P(Answers, McpHttpSdk, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Json" : "Sse"; });

TEST(McpHttp, AServerThatGoesAwayFailsCallsWithTheReason) {
  REQUIRE_NPM_PEERS();
  SdkServer server(false);
  ASSERT_GT(server.port, 0) << server.out;
  auto c = McpClient::connect(peer(server.url()));
  ASSERT_TRUE(c) << c.error().to_string();
  ToolRegistry reg;
  ASSERT_TRUE(add_mcp_tools(reg, *c));
  server.kill();
  const std::string r = call(reg, "peer/add", R"({"a": 1, "b": 2})");
  EXPECT_NE(r.find("tool_failed: "), std::string::npos) << r;
  EXPECT_NE(r.find("mcp server 'peer'"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection refused"), std::string::npos) << r;
}

TEST(McpHttp, ConfigurationErrors) {
  auto cfg = peer("http://127.0.0.1:1/mcp");
  cfg.max_restarts = 0;
  auto refused = McpClient::connect(cfg);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("mcp server 'peer': "), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("Connection refused"), std::string::npos)
      << refused.error().message;

  auto both = peer("http://127.0.0.1:1/mcp");
  both.command = {"true"};
  auto b = McpClient::connect(both);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().to_string(),
            "invalid_argument: mcp server 'peer': give either \"command\" (a server weir starts, "
            "stdio) or \"url\" (Streamable HTTP)");

  // Headers follow the rule of every header weir sends (http::check_header).
  for (const auto& [name, value, says] : std::vector<std::array<std::string, 3>>{
           {"x a", "1", "header name 'x a' is not an HTTP token"},
           {"X-Key", std::string("a\0b", 3), "header 'X-Key' holds a line break or NUL"},
           {"X-Key", "a\r\nInjected: 1", "header 'X-Key' holds a line break or NUL"},
           {"Content-Length", "5", "header 'Content-Length' is set by weir from the request"}}) {
    auto h = peer("http://127.0.0.1:1/mcp");
    h.headers.push_back({name, value});
    auto r = McpClient::connect(h);
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code, make_error_code(Errc::invalid_argument)) << name;
    EXPECT_NE(r.error().message.find("mcp server 'peer': " + says), std::string::npos)
        << r.error().message;
  }

  auto bad = McpClient::connect(peer("ftp://127.0.0.1/mcp"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, make_error_code(Errc::invalid_argument));
  EXPECT_NE(bad.error().message.find("mcp server 'peer': url: "), std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace weir::tools
