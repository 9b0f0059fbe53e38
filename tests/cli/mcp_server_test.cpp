// `weir mcp` driven by weir's own MCP client and by the official TypeScript SDK's client.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>
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

const std::string kWeir = std::string(WEIR_BIN_DIR) + "/weir";
const std::string kWorkflows = std::string(WEIR_SOURCE_DIR) + "/tests/mcp/workflows";
const std::string kPeer = std::string(WEIR_SOURCE_DIR) + "/tests/mcp/peer";

std::string show(const Result<ToolOutput>& r) {
  return r ? "ok: " + r->content : r.error().to_string();
}

Result<ToolOutput> call(ToolRegistry& reg, const std::string& name, std::string_view args) {
  boost::asio::io_context io;
  auto f = boost::asio::co_spawn(io, reg.async_call(name, json::parse(args).as_object(), {}),
                                 boost::asio::use_future);
  io.run();
  return f.get();
}

TEST(WeirMcpServer, ServesToolsAndWorkflowsToWeirsClient) {
  McpServerConfig cfg;
  cfg.name = "weir";
  cfg.command = {kWeir, "mcp", "--tools", "calculator", "--workflows", kWorkflows};
  cfg.options.timeout = 20s;
  auto c = McpClient::connect(cfg);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->protocol_version(), "2025-06-18");
  ToolRegistry reg;
  ASSERT_TRUE(add_mcp_tools(reg, *c));
  EXPECT_EQ(reg.names(), (std::vector<std::string>{"weir/calculator", "weir/greet"}));
  EXPECT_EQ(show(call(reg, "weir/calculator", R"({"expression": "2^10"})")), "ok: 1024");
  EXPECT_EQ(show(call(reg, "weir/greet", R"({"who": "weir"})")),
            R"(ok: {"greeting":"Hello, weir!"})");
  // weir's schema travels: the client refuses bad arguments before sending them.
  EXPECT_EQ(show(call(reg, "weir/calculator", R"({"expression": 5})")),
            "invalid_argument: weir/calculator: /expression: expected string, got number");
  // An error inside the served tool comes back as an error result.
  auto bad = call(reg, "weir/calculator", R"({"expression": "1/"})");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(Errc::tool_failed));
  EXPECT_NE(bad.error().message.find("mcp server 'weir': tool 'calculator' failed: "),
            std::string::npos)
      << bad.error().message;
}

TEST(WeirMcpServer, TheTypeScriptSdkClientListsAndCalls) {
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !std::filesystem::exists(kPeer + "/node_modules/@modelcontextprotocol/sdk"))
    GTEST_SKIP() << "node or tests/mcp/peer/node_modules is missing (run tests/mcp/setup, which "
                    "needs npm)";
  const std::string cmd =
      "node " + kPeer + "/sdk_client.mjs " + kWeir + " " + kWorkflows + " 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  auto v = json::parse(out).as_object();
  EXPECT_EQ(v.at("version").at("name"), "weir");
  EXPECT_EQ(v.at("tools"), json::parse(R"(["calculator", "greet"])"));
  EXPECT_EQ(v.at("calculator"), "1024");
  EXPECT_EQ(v.at("greet"), R"({"greeting":"Hello, SDK!"})");
}

}  // namespace
}  // namespace weir::tools
