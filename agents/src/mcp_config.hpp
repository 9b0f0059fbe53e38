// An MCP server entry of a workflow file (its shape already checked by the workflow loader) as
// the client's configuration. Private to weir::agents.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "weir/tools/mcp.hpp"

namespace weir::agents::detail {

// Problems (an unset environment variable of headers_env, ...) are appended to `problems`,
// each naming the server.
tools::McpServerConfig mcp_server_config(const std::string& name, const boost::json::object& o,
                                         const std::filesystem::path& base_dir,
                                         std::vector<std::string>& problems);

// Which tools of `server` the names in `wanted` ask for ("server/tool"; "server/*" is all):
// the tool names without the prefix, or empty for all.
std::vector<std::string> wanted_tools(const std::string& server,
                                      const std::vector<std::string>& wanted);

}  // namespace weir::agents::detail
