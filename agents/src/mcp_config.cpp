#include "mcp_config.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <boost/json.hpp>

namespace weir::agents::detail {

namespace json = boost::json;

tools::McpServerConfig mcp_server_config(const std::string& name, const json::object& o,
                                         const std::filesystem::path& base_dir,
                                         std::vector<std::string>& problems) {
  tools::McpServerConfig s;
  s.name = name;
  auto str = [&](const char* k) {
    const auto* v = o.if_contains(k);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  auto num = [&](const char* k) -> std::int64_t {
    const auto* v = o.if_contains(k);
    return v && v->is_int64() ? v->as_int64() : 0;
  };
  if (const auto* c = o.if_contains("command"); c && c->is_array())
    for (const auto& a : c->as_array())
      if (a.is_string()) s.command.emplace_back(a.as_string());
  s.url = str("url");
  if (const auto* e = o.if_contains("env"); e && e->is_object())
    for (const auto& [k, v] : e->as_object())
      if (v.is_string()) s.env[std::string(k)] = std::string(v.as_string());
  if (const auto* h = o.if_contains("headers"); h && h->is_object())
    for (const auto& [k, v] : h->as_object())
      if (v.is_string()) s.headers.emplace_back(std::string(k), std::string(v.as_string()));
  if (const auto* h = o.if_contains("headers_env"); h && h->is_object()) {
    for (const auto& [k, v] : h->as_object()) {
      if (!v.is_string()) continue;
      // A secret: read from the environment, never from the file, never logged.
      const char* value = std::getenv(std::string(v.as_string()).c_str());
      if (!value || !*value) {
        problems.push_back("mcp server '" + name + "': headers_env '" + std::string(k) +
                           "': the environment variable '" + std::string(v.as_string()) +
                           "' is unset or empty");
        continue;
      }
      s.headers.emplace_back(std::string(k), value);
    }
  }
  if (auto cwd = str("cwd"); !cwd.empty()) {
    s.cwd = cwd;
    if (s.cwd.is_relative()) s.cwd = base_dir / s.cwd;
  }
  if (auto n = num("timeout_ms"); n > 0) s.options.timeout = std::chrono::milliseconds(n);
  if (auto n = num("max_concurrency"); n > 0)
    s.options.max_concurrency = static_cast<std::int32_t>(std::min<std::int64_t>(n, 4096));
  if (auto n = num("rate_per_minute"); n > 0)
    s.options.rate_per_minute = static_cast<std::int32_t>(std::min<std::int64_t>(n, 1 << 30));
  if (auto n = num("max_message_bytes"); n >= 1024)
    s.max_message_bytes = static_cast<std::size_t>(n);
  return s;
}

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
