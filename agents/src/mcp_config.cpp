#include "mcp_config.hpp"

#include <algorithm>

namespace weir::agents::detail {

std::vector<std::string> wanted_tools(const std::string& server,
                                      const std::vector<std::string>& wanted) {
  const std::string prefix = server + "/";
  std::vector<std::string> only;
  for (const auto& t : wanted) {
    if (!t.starts_with(prefix)) continue;
    const std::string rest = t.substr(prefix.size());
    if (rest == "*") return {};
    if (std::find(only.begin(), only.end(), rest) == only.end()) only.push_back(rest);
  }
  return only;
}

}  // namespace weir::agents::detail
