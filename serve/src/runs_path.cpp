#include "runs_path.hpp"

#include <vector>

#include "weir/runtime/text.hpp"

namespace weir::serve {

RunsPath split_runs_path(std::string_view s) {
  RunsPath p;
  if (s.substr(0, 4) != "/v1/") return p;
  s.remove_prefix(4);
  std::vector<std::string_view> parts;
  while (!s.empty()) {
    const auto slash = s.find('/');
    parts.push_back(s.substr(0, slash));
    if (slash == std::string_view::npos) break;
    s.remove_prefix(slash + 1);
    if (s.empty()) parts.push_back({});
  }
  if (parts.empty() || parts.size() > 3) return p;
  if (parts[0] != "runs" && parts[0] != "threads" && parts[0] != "workflows") return p;
  if (parts.size() == 3 && parts[1].empty()) return p;  // "/v1/runs//events"
  p.collection = std::string(parts[0]);
  if (parts.size() >= 2) p.id = percent_decode(parts[1]);
  if (parts.size() == 3) p.action = std::string(parts[2]);
  p.valid = true;
  return p;
}

std::vector<std::string> query_values(std::string_view target, std::string_view key) {
  std::vector<std::string> out;
  const auto q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == key)
      out.push_back(percent_decode(eq == std::string_view::npos ? "" : pair.substr(eq + 1)));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return out;
}

std::optional<std::string> query_value(std::string_view target, std::string_view key) {
  auto all = query_values(target, key);
  if (all.empty()) return std::nullopt;
  return std::move(all.front());
}

}  // namespace weir::serve
