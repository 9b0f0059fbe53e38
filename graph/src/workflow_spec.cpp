// The WorkflowSpec value types' helpers: diagnostics text, names, byte sizes, suggestions.
#include <algorithm>
#include <regex>

#include <boost/json.hpp>

#include "weir/graph/workflow.hpp"

namespace weir::graph {

namespace json = boost::json;

std::string Diagnostic::to_string() const {
  if (line == 0) return message;  // already located (a JSON syntax error) or about the whole file
  std::string s = file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  if (!pointer.empty()) s += pointer + ": ";
  return s + message;
}

std::string WorkflowLoad::report() const {
  std::string s;
  for (const auto& d : diagnostics) s += d.to_string() + "\n";
  return s;
}

const char* reducer_name(ReducerKind r) {
  constexpr const char* names[] = {"last_value", "append", "messages", "sum",
                                   "max",        "min",    "merge"};
  return names[static_cast<int>(r)];
}

const char* node_kind_name(NodeKind k) {
  constexpr const char* names[] = {"set",    "tool", "llm",      "agent",
                                   "router", "map",  "subgraph", "interrupt"};
  return names[static_cast<int>(k)];
}

std::vector<std::string> RouteSpec::all_targets() const {
  std::vector<std::string> t;
  auto add = [&](const std::vector<std::string>& v) { t.insert(t.end(), v.begin(), v.end()); };
  for (const auto& [value, targets] : cases) add(targets);
  add(default_targets);
  add(then_targets);
  add(else_targets);
  add(tool_calls_targets);
  return t;
}

const ChannelSpec* WorkflowSpec::channel(std::string_view n) const {
  for (const auto& c : channels)
    if (c.name == n) return &c;
  return nullptr;
}
const NodeSpec* WorkflowSpec::node(std::string_view n) const {
  for (const auto& x : nodes)
    if (x.name == n) return &x;
  return nullptr;
}

json::object WorkflowSpec::output_of(json::object state) const {
  if (output.empty()) return state;
  json::object shown;
  for (const auto& ch : output)  // moved, so a channel named twice is taken once
    if (auto* v = state.if_contains(ch); v && !shown.contains(ch)) shown[ch] = std::move(*v);
  return shown;
}

std::optional<std::int64_t> parse_byte_size(const json::value& v) {
  if (v.is_int64()) return v.as_int64() >= 0 ? std::optional(v.as_int64()) : std::nullopt;
  if (v.is_uint64()) return static_cast<std::int64_t>(v.as_uint64());
  if (!v.is_string()) return std::nullopt;
  static const std::regex re(R"(^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*$)");
  std::smatch m;
  std::string s(v.as_string());
  if (!std::regex_match(s, m, re)) return std::nullopt;
  double n = std::stod(m[1]);
  std::string unit = m[2];
  double mult = unit == "KiB"   ? 1024.0
                : unit == "MiB" ? 1048576.0
                : unit == "GiB" ? 1073741824.0
                : unit == "KB"  ? 1e3
                : unit == "MB"  ? 1e6
                : unit == "GB"  ? 1e9
                                : 1.0;
  return static_cast<std::int64_t>(n * mult);
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    std::vector<std::size_t> prev(c.size() + 1), cur(c.size() + 1);
    for (std::size_t j = 0; j <= c.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= word.size(); ++i) {
      cur[0] = i;
      for (std::size_t j = 1; j <= c.size(); ++j) {
        cur[j] = std::min(
            {prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (word[i - 1] == c[j - 1] ? 0 : 1)});
      }
      std::swap(prev, cur);
    }
    if (prev[c.size()] < best_d) {
      best_d = prev[c.size()];
      best = c;
    }
  }
  return best;
}

}  // namespace weir::graph
