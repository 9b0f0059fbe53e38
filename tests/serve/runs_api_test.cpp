// The runs API with its in-process queue (runs_api_suite.hpp; the PostgreSQL instance is in
// tests/cluster).
#include "langgraph_subgraph_suite.hpp"

namespace weir::serve::runs_suite {

std::string runs_db(const std::string&) {
  return "";
}

INSTANTIATE_TEST_SUITE_P(InProcess, RunsApi, ::testing::Values(std::string("memory")));

TEST(RunsApiConfig, ABadWorkflowFolderRefusesTheStart) {
  ServeConfig c;
  c.port = 0;
  c.workflows = fs::temp_directory_path() / "weir-no-such-folder";
  auto s = Service::start(c);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "--workflows: '" + c.workflows->string() + "' is not a folder");

  const fs::path dir = fs::temp_directory_path() / ("weir-runs-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "broken.json") << R"({"name": "broken", "nodes": {}, "edges": [)";
  c.workflows = dir;
  s = Service::start(c);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, make_error_code(Errc::invalid_workflow));
  EXPECT_EQ(s.error().message.rfind("--workflows: " + (dir / "broken.json").string() + ":\n", 0),
            0u)
      << s.error().message;
  fs::remove_all(dir);

  ServeConfig d;
  d.runs_db = "postgres://127.0.0.1/x";
  d.mcp = nullptr;
  d.models.push_back({"m", "m.gguf"});
  auto v = validate(d);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().message,
            "--db needs --workflows DIR: the database holds the runs of those workflows");

  // --webhook-hosts takes hosts, not URLs.
  ServeConfig w;
  w.models.push_back({"m", "m.gguf"});
  w.webhook_hosts = {"127.0.0.1", "hooks.example:8443", "[::1]:9000", "http://evil.example/x"};
  auto h = validate(w);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().message,
            "--webhook-hosts: 'http://evil.example/x' is not a host, host:port or [v6]:port (or * "
            "for any host)");
  w.webhook_hosts.pop_back();
  EXPECT_TRUE(validate(w)) << validate(w).error().message;
  // Entries that could never match a webhook's host are refused, saying how to write them.
  for (const auto& [entry, why] : std::vector<std::pair<std::string, std::string>>{
           {"::1", "'::1' is an IPv6 address: write it in brackets, [::1] or [::1]:port"},
           {"*:8080", "'*:8080': * stands alone (any host, any port)"},
           {"hooks*.example", "'hooks*.example': * stands alone (any host, any port)"}}) {
    w.webhook_hosts = {"127.0.0.1", entry};
    auto bad = validate(w);
    ASSERT_FALSE(bad) << entry;
    EXPECT_EQ(bad.error().message, "--webhook-hosts: " + why) << entry;
  }
}

}  // namespace weir::serve::runs_suite
