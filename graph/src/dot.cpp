#include "weir/graph/dot.hpp"

#include <boost/json/serialize.hpp>

namespace weir::graph {

namespace {

std::string quote(std::string_view s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (c == '\n') {
      q += "\\n";  // DOT's line break
      continue;
    }
    q += c;
  }
  return q + "\"";
}

const char* shape_of(NodeKind k) {
  switch (k) {
    case NodeKind::router:
      return "diamond";
    case NodeKind::tool:
      return "component";
    case NodeKind::llm:
    case NodeKind::agent:
    case NodeKind::crew:
      return "box3d";
    case NodeKind::map:
      return "trapezium";
    case NodeKind::interrupt:
      return "octagon";
    default:
      return "box";
  }
}

std::string id(const std::string& prefix, const std::string& node) {
  if (node == "START" || node == "END") return quote(prefix + "__" + node);
  return quote(prefix + node);
}

void emit(const WorkflowSpec& spec, const std::string& prefix, std::string& out,
          std::string indent) {
  out += indent + id(prefix, "START") +
         " [label=\"START\", shape=circle, style=filled, fillcolor=\"#dddddd\"];\n";
  out += indent + id(prefix, "END") +
         " [label=\"END\", shape=doublecircle, style=filled, fillcolor=\"#dddddd\"];\n";
  for (const auto& n : spec.nodes) {
    if (n.kind == NodeKind::subgraph && spec.subgraphs.count(n.name)) {
      const auto& child = *spec.subgraphs.at(n.name);
      out += indent + "subgraph " + quote("cluster_" + prefix + n.name) + " {\n";
      out += indent + "  label=" + quote(n.name + " (" + child.name + ")") +
             "; style=rounded; color=\"#8888aa\";\n";
      emit(child, prefix + n.name + "/", out, indent + "  ");
      out += indent + "}\n";
      continue;
    }
    std::string label = n.name + "\n[" + node_kind_name(n.kind) + "]";
    out += indent + id(prefix, n.name) + " [label=" + quote(label) + ", shape=" + shape_of(n.kind) +
           "];\n";
  }
  // An edge into or out of a subgraph node attaches to the subgraph's START / END.
  auto entry = [&](const std::string& node) {
    return spec.subgraphs.count(node) ? id(prefix + node + "/", "START") : id(prefix, node);
  };
  auto exit = [&](const std::string& node) {
    return spec.subgraphs.count(node) ? id(prefix + node + "/", "END") : id(prefix, node);
  };
  for (const auto& e : spec.edges) {
    for (const auto& t : e.to) out += indent + exit(e.from) + " -> " + entry(t) + ";\n";
    if (!e.route) continue;
    const auto& r = *e.route;
    auto cond = [&](const std::vector<std::string>& targets, const std::string& label) {
      for (const auto& t : targets) {
        out += indent + exit(e.from) + " -> " + entry(t) + " [style=dashed, label=" + quote(label) +
               "];\n";
      }
    };
    switch (r.form) {
      case RouteSpec::Form::cases:
        for (const auto& [value, targets] : r.cases) cond(targets, r.on + " == " + value);
        cond(r.default_targets, "default");
        break;
      case RouteSpec::Form::when: {
        std::string test = r.when_channel + " " + r.when_op;
        if (r.when_value) test += " " + boost::json::serialize(*r.when_value);
        cond(r.then_targets, test);
        cond(r.else_targets, "else");
        break;
      }
      case RouteSpec::Form::tool_calls:
        cond(r.tool_calls_targets, "tool calls");
        cond(r.default_targets, "default");
        break;
    }
  }
  for (const auto& n : spec.nodes) {
    if (n.kind != NodeKind::map) continue;
    if (const auto* w = n.params.if_contains("node"); w && w->is_string()) {
      out += indent + id(prefix, n.name) + " -> " + entry(std::string(w->as_string())) +
             " [style=dotted, label=\"each item\"];\n";
    }
  }
}

}  // namespace

std::string workflow_to_dot(const WorkflowSpec& spec) {
  std::string out =
      "digraph " + quote(spec.name) + " {\n  rankdir=TB;\n  node [fontname=\"Helvetica\"];\n";
  if (!spec.description.empty()) out += "  label=" + quote(spec.description) + "; labelloc=t;\n";
  emit(spec, "", out, "  ");
  return out + "}\n";
}

}  // namespace weir::graph
