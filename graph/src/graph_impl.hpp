// Private layout of StateGraph and CompiledGraph, shared by graph.cpp and run.cpp.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "weir/graph/state_graph.hpp"

namespace weir::graph {

inline constexpr std::uint32_t kEndIndex = std::numeric_limits<std::uint32_t>::max();

struct CondEdge {
  Router router;
  std::vector<std::pair<std::string, std::string>> cases;       // key -> target name
  std::vector<std::string> targets;                             // declared targets (no cases)
  std::vector<std::pair<std::string, std::uint32_t>> resolved;  // key or name -> index
};

struct NodeImpl {
  std::string name;
  SyncNodeFn sync;
  AsyncNodeFn async;
  NodeOptions opts;
  std::shared_ptr<const CompiledGraph> sub;
  SubgraphOptions sub_opts;
  // Compiled:
  std::vector<std::uint32_t> next;      // static successors (kEndIndex for END)
  std::vector<std::uint32_t> sends_to;  // declared Send targets (validation and DOT only)
  std::vector<std::size_t> conds;       // indexes into CompiledGraph::Impl::conds
  std::vector<std::pair<ChannelId, ChannelId>> sub_in, sub_out;  // parent <-> child ids
};

struct RawEdge {
  std::string from, to;
  bool send = false;
};
struct RawCond {
  std::string from;
  CondEdge edge;
};

struct StateGraph::Impl {
  std::vector<ChannelDef> channels;
  std::vector<NodeImpl> nodes;
  std::vector<RawEdge> edges;
  std::vector<RawCond> conds;
};

struct CompiledGraph::Impl {
  std::string name;
  RunLimits limits;
  std::vector<ChannelDef> channels;
  std::unordered_map<std::string, ChannelId> channel_index;
  std::vector<NodeImpl> nodes;
  std::unordered_map<std::string, std::uint32_t> node_index;
  std::vector<CondEdge> conds;
  NodeImpl start;  // START's successors (its next/conds)
  std::vector<std::vector<std::string>> cycles;

  // kEndIndex for END; nullopt for unknown.
  std::optional<std::uint32_t> resolve_node(std::string_view n) const {
    if (n == kEnd) return kEndIndex;
    auto it = node_index.find(std::string(n));
    if (it == node_index.end()) return std::nullopt;
    return it->second;
  }
};

// Approximate serialized size of `v` (JSON text, escapes not counted); stops counting once
// it passes `stop_at`.
std::size_t json_size(const json::value& v, std::size_t stop_at);

}  // namespace weir::graph
