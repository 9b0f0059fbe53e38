// The WorkflowSpec value types' helpers: the report, names, lookups.
#include <array>

#include <boost/json.hpp>

#include "weir/graph/workflow.hpp"

namespace weir::graph {

namespace json = boost::json;

std::string WorkflowLoad::report() const {
  std::string s;
  for (const auto& d : diagnostics) s += d.to_string() + "\n";
  return s;
}

// One table per enum, in enum order: the names a file writes and the names messages show.
std::span<const std::string> reducer_names() {
  static const std::array<std::string, 7> names = {"last_value", "append", "messages", "sum",
                                                   "max",        "min",    "merge"};
  return names;
}

std::span<const std::string> node_kind_names() {
  static const std::array<std::string, 9> names = {
      "set", "tool", "llm", "agent", "router", "map", "subgraph", "interrupt", "crew"};
  return names;
}

const char* reducer_name(ReducerKind r) {
  return reducer_names()[static_cast<std::size_t>(r)].c_str();
}

const char* node_kind_name(NodeKind k) {
  if (k == NodeKind::code) return "code";
  return node_kind_names()[static_cast<std::size_t>(k)].c_str();
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

}  // namespace weir::graph
