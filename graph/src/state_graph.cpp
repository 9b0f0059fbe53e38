// StateGraph builder, compile-time validation (Boost.Graph) and DOT export.
#include <algorithm>
#include <sstream>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/json/serialize.hpp>

#include "graph_impl.hpp"

namespace weir::graph {

const char* channel_kind_name(ChannelKind k) noexcept {
  switch (k) {
    case ChannelKind::last_value:
      return "last-value";
    case ChannelKind::append:
      return "append";
    case ChannelKind::messages:
      return "messages";
    case ChannelKind::custom:
      return "custom";
  }
  return "unknown";
}

ChannelDef ChannelDef::last_value(std::string name, json::value initial) {
  ChannelDef d;
  d.name = std::move(name);
  d.initial = std::move(initial);
  return d;
}
ChannelDef ChannelDef::append(std::string name, std::size_t max_items) {
  ChannelDef d;
  d.name = std::move(name);
  d.kind = ChannelKind::append;
  d.initial = json::array();
  d.max_items = max_items;
  return d;
}
ChannelDef ChannelDef::messages(std::string name, std::size_t window_messages,
                                std::size_t window_tokens) {
  ChannelDef d;
  d.name = std::move(name);
  d.kind = ChannelKind::messages;
  d.initial = json::array();
  d.window_messages = window_messages;
  d.window_tokens = window_tokens;
  return d;
}
ChannelDef ChannelDef::custom(std::string name, Reducer reducer, json::value initial) {
  ChannelDef d;
  d.name = std::move(name);
  d.kind = ChannelKind::custom;
  d.reducer = std::move(reducer);
  d.initial = std::move(initial);
  return d;
}

std::size_t json_size(const json::value& v, std::size_t stop_at) {
  switch (v.kind()) {
    case json::kind::null:
      return 4;
    case json::kind::bool_:
      return 5;
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return 8;
    case json::kind::string:
      return v.get_string().size() + 2;
    case json::kind::array: {
      std::size_t n = 2;
      for (const auto& e : v.get_array()) {
        n += json_size(e, stop_at) + 1;
        if (n > stop_at) return n;
      }
      return n;
    }
    case json::kind::object: {
      std::size_t n = 2;
      for (const auto& kv : v.get_object()) {
        n += kv.key().size() + 4 + json_size(kv.value(), stop_at);
        if (n > stop_at) return n;
      }
      return n;
    }
  }
  return 0;
}

// --- StateView -------------------------------------------------------------------------------

const json::value& StateView::get(std::string_view name) const {
  static const json::value kNull;
  auto id = graph_->channel_id(name);
  return id ? values_[*id] : kNull;
}

json::object StateView::to_object() const {
  json::object o;
  for (std::size_t i = 0; i < graph_->channel_count(); ++i)
    o[graph_->channel(static_cast<ChannelId>(i)).name] = values_[i];
  return o;
}

// --- StateGraph ------------------------------------------------------------------------------

StateGraph::StateGraph() : impl_(std::make_unique<Impl>()) {}
StateGraph::~StateGraph() = default;
StateGraph::StateGraph(StateGraph&&) noexcept = default;
StateGraph& StateGraph::operator=(StateGraph&&) noexcept = default;

ChannelId StateGraph::add_channel(ChannelDef def) {
  impl_->channels.push_back(std::move(def));
  return static_cast<ChannelId>(impl_->channels.size() - 1);
}
void StateGraph::add_node(std::string name, SyncNodeFn fn, NodeOptions opts) {
  NodeImpl n;
  n.name = std::move(name);
  n.sync = std::move(fn);
  n.opts = std::move(opts);
  impl_->nodes.push_back(std::move(n));
}
void StateGraph::add_async_node(std::string name, AsyncNodeFn fn, NodeOptions opts) {
  NodeImpl n;
  n.name = std::move(name);
  n.async = std::move(fn);
  n.opts = std::move(opts);
  impl_->nodes.push_back(std::move(n));
}
void StateGraph::add_subgraph(std::string name, std::shared_ptr<const CompiledGraph> child,
                              SubgraphOptions opts, NodeOptions node_opts) {
  NodeImpl n;
  n.name = std::move(name);
  n.sub = std::move(child);
  n.sub_opts = std::move(opts);
  n.opts = std::move(node_opts);
  impl_->nodes.push_back(std::move(n));
}
void StateGraph::add_edge(std::string from, std::string to) {
  impl_->edges.push_back({std::move(from), std::move(to)});
}
void StateGraph::add_send_edge(std::string from, std::string to) {
  impl_->edges.push_back({std::move(from), std::move(to), true});
}
void StateGraph::add_conditional_edges(std::string from, Router router,
                                       std::vector<std::pair<std::string, std::string>> cases,
                                       std::vector<std::string> targets) {
  RawCond c;
  c.from = std::move(from);
  c.edge.router = std::move(router);
  c.edge.cases = std::move(cases);
  c.edge.targets = std::move(targets);
  impl_->conds.push_back(std::move(c));
}

Result<std::shared_ptr<const CompiledGraph>> StateGraph::compile(CompileOptions opts) && {
  return static_cast<const StateGraph&>(*this).compile(std::move(opts));
}

Result<std::shared_ptr<const CompiledGraph>> StateGraph::compile(CompileOptions opts) const& {
  auto g = std::make_unique<CompiledGraph::Impl>();
  g->name = opts.name;
  g->limits = opts.limits;
  g->channels = impl_->channels;
  g->nodes = impl_->nodes;
  std::vector<std::string> problems;

  for (std::size_t i = 0; i < g->channels.size(); ++i) {
    const auto& c = g->channels[i];
    if (c.name.empty()) problems.push_back("channel " + std::to_string(i) + " has no name");
    if (!g->channel_index.emplace(c.name, static_cast<ChannelId>(i)).second)
      problems.push_back("channel '" + c.name + "' is defined twice");
    if (c.kind == ChannelKind::custom && !c.reducer)
      problems.push_back("channel '" + c.name + "' is custom but has no reducer");
  }
  for (std::size_t i = 0; i < g->nodes.size(); ++i) {
    const auto& n = g->nodes[i];
    if (n.name.empty() || n.name == kStart || n.name == kEnd)
      problems.push_back("node name '" + n.name + "' is reserved or empty");
    else if (!g->node_index.emplace(n.name, static_cast<std::uint32_t>(i)).second)
      problems.push_back("node '" + n.name + "' is defined twice");
    if (!n.sync && !n.async && !n.sub) problems.push_back("node '" + n.name + "' has no function");
  }
  auto lookup_from = [&](const std::string& from, const std::string& to) -> NodeImpl* {
    if (from == kStart) return &g->start;
    auto it = g->node_index.find(from);
    if (it == g->node_index.end()) {
      problems.push_back("edge from '" + from + "' to '" + to + "': unknown node '" + from + "'");
      return nullptr;
    }
    return &g->nodes[it->second];
  };
  auto resolve_to = [&](const std::string& from,
                        const std::string& to) -> std::optional<std::uint32_t> {
    auto idx = g->resolve_node(to);
    if (!idx)
      problems.push_back("edge from '" + from + "' to '" + to + "': unknown node '" + to + "'");
    return idx;
  };
  for (const auto& e : impl_->edges) {
    NodeImpl* src = lookup_from(e.from, e.to);
    auto dst = resolve_to(e.from, e.to);
    if (!src || !dst) continue;
    auto& list = e.send ? src->sends_to : src->next;
    if (std::find(list.begin(), list.end(), *dst) == list.end()) list.push_back(*dst);
  }
  for (const auto& rc : impl_->conds) {
    CondEdge ce = rc.edge;
    NodeImpl* src = lookup_from(rc.from, "<conditional>");
    for (const auto& [key, target] : ce.cases)
      if (auto idx = resolve_to(rc.from, target)) ce.resolved.emplace_back(key, *idx);
    for (const auto& target : ce.targets)
      if (auto idx = resolve_to(rc.from, target)) ce.resolved.emplace_back(target, *idx);
    if (src) {
      src->conds.push_back(g->conds.size());
      g->conds.push_back(std::move(ce));
    }
  }
  // Subgraph channel mappings.
  for (auto& n : g->nodes) {
    if (!n.sub) continue;
    auto in = n.sub_opts.input_map, out = n.sub_opts.output_map;
    if (in.empty() && out.empty()) {
      for (const auto& c : g->channels)
        if (n.sub->channel_id(c.name)) {
          in.emplace_back(c.name, c.name);
          out.emplace_back(c.name, c.name);
        }
    }
    for (const auto& [p, c] : in) {
      auto pi = g->channel_index.find(p);
      auto ci = n.sub->channel_id(c);
      if (pi == g->channel_index.end() || !ci)
        problems.push_back("subgraph '" + n.name + "': input mapping '" + p + "' -> '" + c +
                           "' names an unknown channel");
      else
        n.sub_in.emplace_back(pi->second, *ci);
    }
    for (const auto& [c, p] : out) {
      auto pi = g->channel_index.find(p);
      auto ci = n.sub->channel_id(c);
      if (pi == g->channel_index.end() || !ci)
        problems.push_back("subgraph '" + n.name + "': output mapping '" + c + "' -> '" + p +
                           "' names an unknown channel");
      else
        n.sub_out.emplace_back(*ci, pi->second);
    }
  }
  if (!problems.empty())
    return Error(Errc::invalid_workflow, [&] {
      std::string s;
      for (auto& p : problems) s += (s.empty() ? "" : "\n") + p;
      return s;
    }());
  if (g->start.next.empty() && g->start.conds.empty())
    return Error(Errc::invalid_workflow, "no edge from START: add_edge(kStart, \"<first node>\")");

  // Reachability and cycles with Boost.Graph: vertex 0 = START, 1 = END, 2 + i = node i.
  using BG = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;
  const std::size_t nn = g->nodes.size();
  BG bg(nn + 2);
  auto vtx = [](std::uint32_t idx) -> std::size_t { return idx == kEndIndex ? 1 : idx + 2; };
  auto add_out = [&](std::size_t v, const NodeImpl& n) {
    for (auto t : n.next) boost::add_edge(v, vtx(t), bg);
    for (auto t : n.sends_to) boost::add_edge(v, vtx(t), bg);
    for (auto ci : n.conds) {
      const auto& ce = g->conds[ci];
      if (ce.resolved.empty()) {
        for (std::size_t j = 0; j < nn; ++j) boost::add_edge(v, j + 2, bg);
        boost::add_edge(v, 1, bg);
      } else {
        for (const auto& [k, t] : ce.resolved) boost::add_edge(v, vtx(t), bg);
      }
    }
  };
  add_out(0, g->start);
  for (std::size_t i = 0; i < nn; ++i) add_out(i + 2, g->nodes[i]);

  auto reach = [](const auto& graph, std::size_t from, std::size_t count) {
    std::vector<boost::default_color_type> color(count);
    boost::breadth_first_search(graph, from,
                                boost::color_map(boost::make_iterator_property_map(
                                    color.begin(), boost::get(boost::vertex_index, graph))));
    std::vector<bool> r(count);
    for (std::size_t i = 0; i < count; ++i) r[i] = color[i] != boost::white_color;
    return r;
  };
  auto fwd = reach(bg, 0, nn + 2);
  auto back = reach(boost::make_reverse_graph(bg), 1, nn + 2);
  for (std::size_t i = 0; i < nn; ++i) {
    if (!fwd[i + 2])
      problems.push_back("node '" + g->nodes[i].name + "' is unreachable from START");
    else if (!back[i + 2])
      problems.push_back("node '" + g->nodes[i].name +
                         "' cannot reach END: add an edge to END or a route out of its loop");
  }
  if (!problems.empty())
    return Error(Errc::invalid_workflow, [&] {
      std::string s;
      for (auto& p : problems) s += (s.empty() ? "" : "\n") + p;
      return s;
    }());

  std::vector<int> comp(nn + 2);
  int ncomp = boost::strong_components(
      bg, boost::make_iterator_property_map(comp.begin(), boost::get(boost::vertex_index, bg)));
  std::vector<std::vector<std::string>> by_comp(ncomp);
  for (std::size_t i = 0; i < nn; ++i) by_comp[comp[i + 2]].push_back(g->nodes[i].name);
  for (std::size_t i = 0; i < nn; ++i) {
    auto& members = by_comp[comp[i + 2]];
    if (members.empty()) continue;
    bool self = boost::edge(i + 2, i + 2, bg).second;
    if (members.size() > 1 || self) g->cycles.push_back(members);
    members.clear();
  }
  return std::make_shared<const CompiledGraph>(std::move(g));
}

// --- CompiledGraph ---------------------------------------------------------------------------

CompiledGraph::CompiledGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGraph::~CompiledGraph() = default;
const std::string& CompiledGraph::name() const noexcept {
  return impl_->name;
}
std::size_t CompiledGraph::channel_count() const noexcept {
  return impl_->channels.size();
}
std::size_t CompiledGraph::node_count() const noexcept {
  return impl_->nodes.size();
}
std::optional<ChannelId> CompiledGraph::channel_id(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < impl_->channels.size(); ++i)
    if (impl_->channels[i].name == name) return static_cast<ChannelId>(i);
  return std::nullopt;
}
const ChannelDef& CompiledGraph::channel(ChannelId id) const {
  return impl_->channels.at(id);
}
const std::string& CompiledGraph::node_name(std::size_t i) const {
  return impl_->nodes.at(i).name;
}
const RunLimits& CompiledGraph::default_limits() const noexcept {
  return impl_->limits;
}
const std::vector<std::vector<std::string>>& CompiledGraph::cycles() const noexcept {
  return impl_->cycles;
}

namespace {
std::string dot_id(const std::string& prefix, const std::string& name) {
  std::string s = "\"" + prefix;
  for (char c : name) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s + "\"";
}

void dot_body(const CompiledGraph::Impl& g, const std::string& prefix, std::ostringstream& o,
              const std::string& indent) {
  auto id = [&](std::uint32_t idx) {
    return dot_id(prefix, idx == kEndIndex ? std::string(kEnd) : g.nodes[idx].name);
  };
  o << indent << dot_id(prefix, std::string(kStart)) << " [label=\"START\", shape=circle];\n";
  o << indent << dot_id(prefix, std::string(kEnd)) << " [label=\"END\", shape=doublecircle];\n";
  for (const auto& n : g.nodes) {
    if (n.sub) {
      std::string cluster = prefix + n.name + "/";
      o << indent << "subgraph \"cluster_" << cluster << "\" {\n"
        << indent << "  label=" << dot_id("", n.name) << ";\n";
      dot_body(n.sub->impl(), cluster, o, indent + "  ");
      o << indent << "}\n";
      o << indent << dot_id(prefix, n.name) << " [label=" << dot_id("", n.name)
        << ", shape=box3d];\n";
    } else {
      o << indent << dot_id(prefix, n.name) << " [label=" << dot_id("", n.name)
        << ", shape=box];\n";
    }
  }
  auto edges = [&](const std::string& from, const NodeImpl& n) {
    for (auto t : n.next) o << indent << from << " -> " << id(t) << ";\n";
    for (auto t : n.sends_to)
      o << indent << from << " -> " << id(t) << " [style=dotted, label=\"Send\"];\n";
    for (auto ci : n.conds) {
      const auto& ce = g.conds[ci];
      if (ce.resolved.empty()) {
        o << indent << from << " -> " << dot_id(prefix, "*") << " [style=dashed, label=\"any\"];\n";
      }
      for (const auto& [key, t] : ce.resolved)
        o << indent << from << " -> " << id(t) << " [style=dashed, label=" << dot_id("", key)
          << "];\n";
    }
  };
  edges(dot_id(prefix, std::string(kStart)), g.start);
  for (const auto& n : g.nodes) edges(dot_id(prefix, n.name), n);
}
}  // namespace

std::string CompiledGraph::to_dot() const {
  std::ostringstream o;
  o << "digraph " << dot_id("", impl_->name) << " {\n";
  dot_body(*impl_, "", o, "  ");
  o << "}\n";
  return o.str();
}

}  // namespace weir::graph
