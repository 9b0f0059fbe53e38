// Which tools of an MCP server a file's tool nodes and agents ask for. Private to weir::agents.
#pragma once

#include <string>
#include <vector>

namespace weir::agents::detail {

// Which tools of `server` the names in `wanted` ask for ("server/tool"; "server/*" is all):
// the tool names without the prefix, or empty for all.
std::vector<std::string> wanted_tools(const std::string& server,
                                      const std::vector<std::string>& wanted);

}  // namespace weir::agents::detail
