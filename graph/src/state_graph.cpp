// Building and compiling a StateGraph (validation with Boost.Graph); the run loop is in run.cpp.
#include "weir/graph/state_graph.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/json.hpp>

#include "channel_defaults.hpp"
#include "weir/runtime/text.hpp"

namespace weir::graph {

namespace json = boost::json;

// --- building and compiling -------------------------------------------------------------------

StateGraph& StateGraph::add_channel(std::string name, ChannelOptions options) {
  channels_.emplace_back(std::move(name), std::move(options));
  return *this;
}
StateGraph& StateGraph::add_node(std::string name, SyncNode fn, NodeOptions options) {
  nodes_.push_back({std::move(name), std::move(fn), {}, options});
  return *this;
}
StateGraph& StateGraph::add_async_node(std::string name, AsyncNode fn, NodeOptions options) {
  nodes_.push_back({std::move(name), {}, std::move(fn), options});
  return *this;
}
StateGraph& StateGraph::add_edge(std::string from, std::string to) {
  edges_.push_back({std::move(from), {std::move(to)}, {}});
  return *this;
}
StateGraph& StateGraph::add_conditional_edges(std::string from, Router router,
                                              std::vector<std::string> targets) {
  edges_.push_back({std::move(from), std::move(targets), std::move(router)});
  return *this;
}

StateGraph& StateGraph::add_subgraph(std::string name, std::shared_ptr<const CompiledGraph> sub,
                                     SubgraphOptions opts) {
  auto def = std::make_shared<SubgraphDef>();
  def->graph = std::move(sub);
  def->options = std::move(opts);
  nodes_.push_back({std::move(name), {}, {}, NodeOptions{}, std::move(def)});
  return *this;
}

StateGraph& StateGraph::set_trace_span(std::string operation, std::string name) {
  trace_operation_ = std::move(operation);
  trace_name_ = std::move(name);
  return *this;
}

StateGraph& StateGraph::add_sends(std::string from, std::vector<std::string> targets) {
  edges_.push_back({std::move(from), std::move(targets), {}, true});
  return *this;
}

std::optional<std::size_t> CompiledGraph::node_index(std::string_view name) const {
  auto it =
      std::lower_bound(by_name_.begin(), by_name_.end(), name,
                       [&](std::uint32_t i, std::string_view n) { return nodes_[i].name < n; });
  if (it != by_name_.end() && nodes_[*it].name == name) return *it;
  return std::nullopt;
}

std::optional<std::size_t> CompiledGraph::channel_index(std::string_view name) const {
  for (std::size_t i = 0; i < channels_.size(); ++i) {
    if (channels_[i].first == name) return i;
  }
  return std::nullopt;
}

StateGraph& StateGraph::set_input_channels(std::vector<std::string> channels,
                                           std::string graph_name) {
  input_channels_ = std::move(channels);
  name_ = std::move(graph_name);
  return *this;
}

void StateGraph::reserve(std::size_t nodes, std::size_t edges) {
  nodes_.reserve(nodes);
  edges_.reserve(edges);
}

Result<std::shared_ptr<const CompiledGraph>> StateGraph::compile(GraphLimits limits) const& {
  return StateGraph(*this).compile(limits);
}

// StateGraph::compile's steps, in order; each adds what it finds wrong to `problems`.
struct CompiledGraph::Compiler {
  // Arcs by vertex: 0 = START, i + 1 = node i, N + 1 = END; sorted and unique.
  using Adjacency = std::vector<std::vector<std::size_t>>;

  CompiledGraph& g;
  std::vector<std::string>& problems;
  std::vector<std::string> names;  // for suggestions, filled when one is needed

  // The name index (a binary search: a graph may have hundreds of thousands of nodes; among
  // equal names, an error reported here, the first defined), reserved and repeated names.
  void index_names() {
    const auto& nodes = g.nodes_;
    g.by_name_.resize(nodes.size());
    for (std::uint32_t i = 0; i < g.by_name_.size(); ++i) g.by_name_[i] = i;
    std::stable_sort(g.by_name_.begin(), g.by_name_.end(), [&](std::uint32_t a, std::uint32_t b) {
      return nodes[a].name < nodes[b].name;
    });
    for (const auto& n : nodes) g.visit_caps_ = g.visit_caps_ || n.options.max_visits > 0;
    std::vector<bool> again(nodes.size());  // a name defined before, found in the sorted order
    for (std::size_t i = 1; i < g.by_name_.size(); ++i)
      if (nodes[g.by_name_[i]].name == nodes[g.by_name_[i - 1]].name) again[g.by_name_[i]] = true;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      if (n.name == kStart || n.name == kEnd)
        problems.push_back("'" + n.name + "' is reserved; rename the node");
      if (again[i]) problems.push_back("node '" + n.name + "' is defined twice");
    }
    std::set<std::string> channel_names;
    for (const auto& [name, opt] : g.channels_) {
      if (!channel_names.insert(name).second)
        problems.push_back("channel '" + name + "' is defined twice");
      if (opt.default_value && !opt.custom)
        if (auto why = default_problem(opt.reducer, *opt.default_value))
          problems.push_back("channel '" + name + "' " + *why);
    }
  }

  // Subgraph nodes: their channel maps resolved against both graphs.
  void resolve_subgraphs() {
    for (auto& n : g.nodes_) {
      if (!n.sub) continue;
      if (!n.sub->graph) {
        problems.push_back("subgraph node '" + n.name + "' has no compiled graph");
        continue;
      }
      auto def = std::make_shared<StateGraph::SubgraphDef>(*n.sub);
      resolve_map(n.name, *def->graph, def->options.input, true, def->in);
      resolve_map(n.name, *def->graph, def->options.output, false, def->out);
      n.sub = std::move(def);
    }
  }
  void resolve_map(const std::string& node, const CompiledGraph& child,
                   const std::vector<std::pair<std::string, std::string>>& map, bool in,
                   std::vector<std::pair<std::size_t, std::size_t>>& out) {
    if (map.empty()) {  // every name both graphs have
      for (std::size_t i = 0; i < g.channels_.size(); ++i) {
        if (auto c = child.channel_index(g.channels_[i].first))
          out.emplace_back(in ? i : *c, in ? *c : i);
      }
      return;
    }
    const char* what = in ? "input" : "output";
    for (const auto& [from, to] : map) {
      const std::string& parent_name = in ? from : to;
      const std::string& child_name = in ? to : from;
      auto p = g.channel_index(parent_name);
      auto c = child.channel_index(child_name);
      if (!p)
        problems.push_back("subgraph node '" + node + "': " + what + " maps channel '" +
                           parent_name + "', which the parent graph does not have");
      if (!c)
        problems.push_back("subgraph node '" + node + "': " + what + " maps channel '" +
                           child_name + "', which the subgraph does not have");
      if (p && c) out.emplace_back(in ? *p : *c, in ? *c : *p);
    }
  }

  std::optional<std::size_t> vertex(const std::string& s) const {
    if (s == kStart) return 0;
    if (s == kEnd) return g.nodes_.size() + 1;
    if (auto i = g.node_index(s)) return *i + 1;
    return std::nullopt;
  }
  std::string suggestion(const std::string& s) {
    if (names.empty())
      for (const auto& n : g.nodes_) names.push_back(n.name);
    return did_you_mean(s, names);
  }

  // The edges: each node's static successors and routers, and every arc for the checks below.
  Adjacency link_edges() {
    const std::size_t N = g.nodes_.size();
    g.static_next_.assign(N + 1, {});
    g.routers_.assign(N + 1, {});
    Adjacency adj(N + 2);
    for (const auto& e : g.edges_) {
      auto from = vertex(e.from);
      if (!from || *from == N + 1) {
        problems.push_back("edge from '" + e.from + "': unknown node" + suggestion(e.from));
        continue;
      }
      if (e.router) g.routers_[*from].push_back(&e.router);
      for (const auto& t : e.to) {
        auto to = vertex(t);
        if (!to || *to == 0) {
          problems.push_back("edge from '" + e.from + "' to '" + t + "': unknown node" +
                             suggestion(t));
          continue;
        }
        adj[*from].push_back(*to);
        if (!e.router && !e.send && *to != N + 1) g.static_next_[*from].push_back(*to - 1);
      }
      if (e.router && e.to.empty()) {  // undeclared targets: assume any node
        for (std::size_t i = 1; i <= N + 1; ++i) adj[*from].push_back(i);
      }
    }
    for (auto& a : adj) {
      std::sort(a.begin(), a.end());
      a.erase(std::unique(a.begin(), a.end()), a.end());
    }
    return adj;
  }

  // Every node reachable from START, and able to reach END (a node invoked by Send returns to
  // the barrier: it needs no way to END of its own). An explicit stack of vertex numbers: a
  // chain of many nodes must cost neither a deep recursion nor a large frame a vertex.
  void check_reachability(const Adjacency& adj) {
    const std::size_t N = g.nodes_.size();
    std::vector<bool> send_target(N + 2);
    for (const auto& e : g.edges_) {
      if (!e.send) continue;
      for (const auto& t : e.to) {
        if (auto i = vertex(t)) send_target[*i] = true;
      }
    }
    Adjacency radj(N + 2);
    for (std::size_t u = 0; u < adj.size(); ++u)
      for (auto v : adj[u]) radj[v].push_back(u);
    auto visit_from = [](const Adjacency& graph, std::size_t source) {
      std::vector<bool> seen(graph.size());
      std::vector<std::size_t> stack = {source};
      while (!stack.empty()) {
        auto u = stack.back();
        stack.pop_back();
        if (seen[u]) continue;
        seen[u] = true;
        for (auto v : graph[u])
          if (!seen[v]) stack.push_back(v);
      }
      return seen;
    };
    const std::vector<bool> reach = visit_from(adj, 0);
    const std::vector<bool> to_end = visit_from(radj, N + 1);
    for (std::size_t i = 0; i < N; ++i) {
      if (!reach[i + 1])
        problems.push_back("node '" + g.nodes_[i].name + "' is not reachable from START");
      else if (!to_end[i + 1] && !send_target[i + 1])
        problems.push_back("node '" + g.nodes_[i].name + "' cannot reach END");
    }
    if (adj[0].empty()) problems.push_back("no edge leaves START");
  }

  // Cycles (informational): each strongly connected component (Boost.Graph) with more than one
  // node, or one node with an edge to itself, listed in node definition order.
  void find_cycles(const Adjacency& adj) {
    const std::size_t N = g.nodes_.size();
    using BGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
    BGraph bg(N + 2);
    for (std::size_t u = 0; u < adj.size(); ++u) {
      for (auto v : adj[u]) boost::add_edge(u, v, bg);
    }
    std::vector<std::size_t> component(N + 2);
    const std::size_t components = boost::strong_components(
        bg,
        boost::make_iterator_property_map(component.begin(), boost::get(boost::vertex_index, bg)));
    std::vector<std::vector<std::string>> by_component(components);
    std::vector<bool> cyclic(components);
    for (std::size_t i = 1; i <= N; ++i) {
      by_component[component[i]].push_back(g.nodes_[i - 1].name);
      if (std::binary_search(adj[i].begin(), adj[i].end(), i)) cyclic[component[i]] = true;
    }
    std::vector<bool> listed(components);
    for (std::size_t i = 1; i <= N; ++i) {
      const std::size_t c = component[i];
      if (listed[c] || (by_component[c].size() < 2 && !cyclic[c])) continue;
      listed[c] = true;
      g.cycles_.push_back(std::move(by_component[c]));
    }
  }
};

Result<std::shared_ptr<const CompiledGraph>> StateGraph::compile(GraphLimits limits) && {
  auto g = std::make_shared<CompiledGraph>();
  g->limits_ = limits;
  g->channels_ = std::move(channels_);
  g->nodes_ = std::move(nodes_);
  g->edges_ = std::move(edges_);
  g->input_channels_ = std::move(input_channels_);
  g->name_ = std::move(name_);
  g->trace_operation_ = std::move(trace_operation_);
  g->trace_name_ = std::move(trace_name_);
  std::vector<std::string> problems;
  CompiledGraph::Compiler c{*g, problems, {}};
  c.index_names();
  c.resolve_subgraphs();
  const auto adj = c.link_edges();
  c.check_reachability(adj);
  c.find_cycles(adj);
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + p;
    return Error(Errc::invalid_workflow, msg);
  }
  return std::shared_ptr<const CompiledGraph>(std::move(g));
}

std::string CompiledGraph::to_dot() const {
  std::string out = "digraph {\n  \"START\" [shape=circle];\n  \"END\" [shape=doublecircle];\n";
  for (const auto& n : nodes_) out += "  \"" + n.name + "\" [shape=box];\n";
  for (const auto& e : edges_) {
    for (const auto& t : e.to)
      out += "  \"" + e.from + "\" -> \"" + t + "\"" + (e.router ? " [style=dashed]" : "") + ";\n";
  }
  return out + "}\n";
}

}  // namespace weir::graph

namespace weir::graph {

WorkflowSpec CompiledGraph::describe(std::string name, std::string description) const {
  WorkflowSpec spec;
  spec.name = std::move(name);
  spec.description = std::move(description);
  spec.limits.recursion_limit = limits_.recursion_limit;
  spec.limits.max_concurrency = limits_.max_concurrency;
  if (limits_.deadline.count() > 0) spec.limits.deadline_ms = limits_.deadline.count();
  spec.limits.inline_limit = static_cast<std::int64_t>(limits_.inline_limit);
  spec.limits.max_state_bytes = static_cast<std::int64_t>(limits_.max_state_bytes);
  if (limits_.token_budget > 0) spec.limits.token_budget = limits_.token_budget;
  spec.limits.max_thread_steps = limits_.max_thread_steps;
  for (const auto& [channel, o] : channels_) {
    ChannelSpec c;
    c.name = channel;
    c.reducer = o.custom ? ReducerKind::last_value : o.reducer;
    c.default_value = o.default_value;
    c.max_items = o.max_items;
    c.window_max_messages = o.max_messages;
    c.window_max_tokens = o.max_tokens;
    spec.channels.push_back(std::move(c));
  }
  spec.input = input_channels_;
  for (const auto& n : nodes_) {
    NodeSpec s;
    s.name = n.name;
    s.kind = n.sub ? NodeKind::subgraph : NodeKind::code;
    if (n.options.max_visits > 0) s.max_visits = n.options.max_visits;
    if (n.options.timeout.count() > 0) s.timeout_ms = n.options.timeout.count();
    if (n.sub) {
      const auto& child = *n.sub->graph;
      spec.subgraphs[n.name] = std::make_shared<const WorkflowSpec>(
          child.describe(child.name_.empty() ? n.name : child.name_));
    }
    spec.nodes.push_back(std::move(s));
  }
  for (const auto& e : edges_) {
    EdgeSpec s;
    s.from = e.from;
    if (e.router || e.send) {
      auto r = std::make_shared<RouteSpec>();
      r->default_targets = e.to;
      s.route = std::move(r);
    } else {
      s.to = e.to;
    }
    spec.edges.push_back(std::move(s));
  }
  return spec;
}

}  // namespace weir::graph
