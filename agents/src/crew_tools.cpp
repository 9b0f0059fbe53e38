// A crew or group-chat file's tools, built: its built-ins and its MCP servers' tools, into one
// registry (crew_file.hpp build_tools), and agents' "server/*" patterns expanded.
#include <boost/json.hpp>

#include "mcp_config.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"

namespace weir::agents {

Result<std::shared_ptr<tools::ToolRegistry>> build_tools(const AgentsFile& file,
                                                         ArtifactStore* artifacts) {
  auto reg = std::make_shared<tools::ToolRegistry>();
  for (const auto& c : file.tools) {
    auto tool = tools::make_builtin_tool(c, artifacts);
    if (!tool) return Error(Errc::invalid_workflow, tool.error().message);
    if (auto s = reg->add(std::move(*tool)); !s) return std::move(s).error();
  }
  // MCP servers: the tools some agent names ("fs/read_file"), all of them for "fs/*".
  std::vector<std::string> wanted;
  for (const auto& a : file.kind == AgentsFileKind::crew ? file.crew.agents : file.chat.agents)
    wanted.insert(wanted.end(), a.tools.begin(), a.tools.end());
  if (file.crew.manager)
    wanted.insert(wanted.end(), file.crew.manager->tools.begin(), file.crew.manager->tools.end());
  for (const auto& server : file.mcp_servers) {
    auto client = tools::McpClient::connect(server);
    if (!client) return std::move(client).error();
    if (auto s = tools::add_mcp_tools(*reg, std::move(*client),
                                      detail::wanted_tools(server.name, wanted));
        !s)
      return std::move(s).error();
  }
  return reg;
}

void expand_tool_patterns(AgentsFile& file, const tools::ToolRegistry& registry) {
  const auto names = registry.names();
  auto expand = [&](AgentSpec& a) {
    std::vector<std::string> out;
    for (const auto& t : a.tools) {
      if (t.size() > 2 && t.ends_with("/*")) {
        const std::string prefix = t.substr(0, t.size() - 1);
        for (const auto& n : names)
          if (n.starts_with(prefix)) out.push_back(n);
      } else {
        out.push_back(t);
      }
    }
    a.tools = std::move(out);
  };
  for (auto& a : file.crew.agents) expand(a);
  for (auto& a : file.chat.agents) expand(a);
  if (file.crew.manager) expand(*file.crew.manager);
}

}  // namespace weir::agents
