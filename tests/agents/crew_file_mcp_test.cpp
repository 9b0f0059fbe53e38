// "mcp_servers" in crew files: parsed with positions, started by build_tools, "server/*"
// expanded to the server's tools. Uses tests/mcp/fake_server.py (skips without python3).
#include <gtest/gtest.h>

#include <cstdlib>

#include "weir/agents/crew_file.hpp"
#include "weir/tools/registry.hpp"

namespace weir::agents {
namespace {

const std::string kFake = std::string(WEIR_SOURCE_DIR) + "/tests/mcp/fake_server.py";

std::string crew(const std::string& servers, const std::string& agent_tools) {
  return R"({"weir": 1, "kind": "crew", "name": "c",
  "mcp_servers": )" +
         servers + R"(,
  "agents": [{"name": "a", "role": "r", "tools": )" +
         agent_tools + R"(}],
  "tasks": [{"name": "t", "agent": "a", "description": "d"}]})";
}

std::string fake_server() {
  return R"({"fake": {"command": ["python3", ")" + kFake + R"("], "timeout_ms": 5000,
             "max_concurrency": 2, "env": {"FAKE_PAGE": "3"}}})";
}

bool have_python() {
  return std::system("command -v python3 >/dev/null 2>&1") == 0;
}

TEST(CrewFileMcp, ParsesServers) {
  auto f = parse_agents_file(crew(fake_server(), R"(["fake/echo"])"), "c.json");
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_EQ(f->mcp_servers.size(), 1u);
  const auto& s = f->mcp_servers[0];
  EXPECT_EQ(s.name, "fake");
  EXPECT_EQ(s.command, (std::vector<std::string>{"python3", kFake}));
  EXPECT_EQ(s.options.timeout.count(), 5000);
  EXPECT_EQ(s.options.max_concurrency, 2);
  EXPECT_EQ(s.env.at("FAKE_PAGE"), "3");
}

TEST(CrewFileMcp, BadEntriesArePositioned) {
  auto f = parse_agents_file(
      crew(R"({"a/b": {"command": []}, "x": {"comand": ["y"], "timeout_ms": 0}})", "[]"), "c.json");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().message,
            "c.json:2:26: /mcp_servers/a~1b: MCP server name 'a/b' must start with a letter or "
            "'_' and use only letters, digits, '_' and '-'\n"
            "c.json:2:38: /mcp_servers/a~1b/command: expected a non-empty array of strings (the "
            "program and its arguments)\n"
            "c.json:2:59: /mcp_servers/x/comand: unknown key 'comand'; did you mean 'command'?\n"
            "c.json:2:48: /mcp_servers/x: give either \"command\" (a server weir starts, stdio) or "
            "\"url\" (Streamable HTTP)\n"
            "c.json:2:80: /mcp_servers/x/timeout_ms: must be at least 1, got 0");
}

TEST(CrewFileMcp, AgentsTakeNamedToolsOrAll) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed";
  auto f = parse_agents_file(crew(fake_server(), R"(["fake/echo", "fake/add"])"), "c.json");
  ASSERT_TRUE(f) << f.error().message;
  auto reg = build_tools(*f, nullptr);
  ASSERT_TRUE(reg) << reg.error().message;
  EXPECT_EQ((*reg)->names(), (std::vector<std::string>{"fake/add", "fake/echo"}));

  auto all = parse_agents_file(crew(fake_server(), R"(["fake/*"])"), "c.json");
  ASSERT_TRUE(all) << all.error().message;
  auto reg2 = build_tools(*all, nullptr);
  ASSERT_TRUE(reg2) << reg2.error().message;
  expand_tool_patterns(*all, **reg2);
  EXPECT_EQ(all->crew.agents[0].tools.size(), 11u);
  EXPECT_EQ(all->crew.agents[0].tools[0], "fake/add");
}

TEST(CrewFileMcp, ClearErrorsForMissingCommandsAndTools) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed";
  auto f = parse_agents_file(crew(fake_server(), R"(["fake/read_file"])"), "c.json");
  ASSERT_TRUE(f) << f.error().message;
  auto reg = build_tools(*f, nullptr);
  ASSERT_FALSE(reg);
  EXPECT_EQ(reg.error().message,
            "mcp server 'fake' has no tool 'read_file' (it offers: echo, add, fail, hang, "
            "garbage, die, flood, image, structured, ping_me, add_tool)");
  auto g = parse_agents_file(
      crew(R"({"fs": {"command": ["weir-no-such-server", "/data"]}})", R"(["fs/*"])"), "c.json");
  ASSERT_TRUE(g) << g.error().message;
  auto reg2 = build_tools(*g, nullptr);
  ASSERT_FALSE(reg2);
  EXPECT_EQ(reg2.error().message,
            "mcp server 'fs': cannot start: command 'weir-no-such-server' not found (not in PATH)");
}

}  // namespace
}  // namespace weir::agents
