// StateGraph: LangGraph's model (channels with reducers, nodes, edges, supersteps) in C++,
// with weir's fences built in. Build a StateGraph, compile() it once, then run the resulting
// CompiledGraph many times concurrently through a GraphRuntime (runtime.hpp).
//
//   StateGraph g;
//   auto counter = g.add_channel(ChannelDef::last_value("counter", 0));
//   g.add_node("a", [=](StateView s, NodeContext&) -> Result<Update> {
//     return Update().set(counter, s[counter].as_int64() + 1); });
//   g.add_edge(kStart, "a"); g.add_edge("a", kEnd);
//   auto compiled = g.compile();   // Result<std::shared_ptr<const CompiledGraph>>
//
// Thread safety: a StateGraph is a builder used by one thread. A CompiledGraph is immutable and
// shared by every run (any thread). Node functions, routers and reducers are called
// concurrently from many runs and must not share unsynchronised mutable state.
//
// Hot-path invariants: channels are addressed by ChannelId (an index fixed at add_channel);
// names are resolved to indices at compile time; edges are index lists.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"

namespace weir {
class ArtifactStore;
}

namespace weir::graph {

namespace json = boost::json;

inline constexpr std::string_view kStart = "__start__";
inline constexpr std::string_view kEnd = "__end__";

using ChannelId = std::uint32_t;

// ---------------------------------------------------------------------------------------------
// Channels

// (current, update) -> new value. An error fails the run (the message names the channel).
using Reducer =
    std::function<Result<json::value>(const json::value& current, const json::value& update)>;
// Tokens of one message (an object with "role" and "content").
using TokenCounter = std::function<std::size_t(const json::value& message)>;
// (previous summary or null, turns evicted now) -> new summary (any JSON). Filled in by the
// agents layer; without it the window only archives.
using SummaryHook =
    std::function<Result<json::value>(const json::value& previous, const json::array& evicted)>;

enum class ChannelKind { last_value, append, messages, custom };
const char* channel_kind_name(ChannelKind k) noexcept;

inline constexpr std::size_t kDefaultChannelMaxBytes = std::size_t{16} << 20;

struct ChannelDef {
  std::string name;
  ChannelKind kind = ChannelKind::last_value;
  json::value initial;  // value before any write (null by default; [] for append/messages)
  // Serialized-size cap (bytes, measured as JSON text without escapes). A write that makes
  // the value larger fails the run with invalid_argument naming the channel and the cap.
  // A value offloaded to the ArtifactStore counts by its reference's size.
  std::size_t max_bytes = kDefaultChannelMaxBytes;
  // append: keep at most max_items (oldest dropped and counted in RunStats); 0 = no cap.
  std::size_t max_items = 0;
  // messages: window by count and by tokens (0 = no cap); the first message is kept when it
  // has role "system"; evicted turns are archived as an artifact (when the runtime has an
  // ArtifactStore) and passed to `summarize`; a marker message {"role":"system",
  // "name":"summary","content":<summary>,"archived":n,"archive":<ref>} follows the prompt.
  std::size_t window_messages = 0;
  std::size_t window_tokens = 0;
  TokenCounter token_counter;  // default: content characters / 4 + 4
  SummaryHook summarize;
  Reducer reducer;  // custom

  static ChannelDef last_value(std::string name, json::value initial = nullptr);
  static ChannelDef append(std::string name, std::size_t max_items = 0);
  static ChannelDef messages(std::string name, std::size_t window_messages,
                             std::size_t window_tokens = 0);
  static ChannelDef custom(std::string name, Reducer reducer, json::value initial = nullptr);
};

// ---------------------------------------------------------------------------------------------
// Node inputs and outputs

class CompiledGraph;

// Read-only view of a run's state during a superstep. Valid only during the node call (an
// async node must not keep it across its own completion). Reads are O(1) by ChannelId.
class StateView {
 public:
  StateView(const CompiledGraph* g, const json::value* values) : graph_(g), values_(values) {}
  // REQUIRES: id < channel count.
  const json::value& operator[](ChannelId id) const { return values_[id]; }
  // A null value for an unknown name.
  const json::value& get(std::string_view name) const;
  // All channels as an object (allocates; for tests and debugging).
  json::object to_object() const;

 private:
  const CompiledGraph* graph_;
  const json::value* values_;
};

// Runs `node` once more in the next superstep with `arg` as its input (NodeContext::input()).
struct Send {
  std::string node;
  json::value arg;
};

// What a node returns: channel writes, and optionally extra next nodes (goto) and Sends.
// goto targets are added to the node's edges (as LangGraph's Command(goto=...)).
struct Update {
  boost::container::small_vector<std::pair<ChannelId, json::value>, 2> writes;
  std::vector<std::pair<std::string, json::value>> named_writes;  // resolved at the barrier
  std::vector<std::string> goto_nodes;
  std::vector<Send> sends;

  Update& set(ChannelId id, json::value v) {
    writes.emplace_back(id, std::move(v));
    return *this;
  }
  Update& set(std::string_view channel, json::value v) {
    named_writes.emplace_back(std::string(channel), std::move(v));
    return *this;
  }
  Update& go(std::string node) {
    goto_nodes.push_back(std::move(node));
    return *this;
  }
  Update& send(std::string node, json::value arg) {
    sends.push_back({std::move(node), std::move(arg)});
    return *this;
  }
};

class NodeContext;
using SyncNodeFn = std::function<Result<Update>(StateView, NodeContext&)>;
using AsyncNodeFn = std::function<boost::asio::awaitable<Result<Update>>(StateView, NodeContext&)>;

// Retries of one node: on an error whose code is in `retry_on`, the node runs again after
// min(max_backoff, initial_backoff * multiplier^(attempt-1)) * (1 ± jitter), at most
// max_attempts times in all. The last error fails the run, its message naming the attempts.
struct RetryPolicy {
  int max_attempts = 1;
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{5000};
  double multiplier = 2.0;
  double jitter = 0.2;  // fraction, in [0, 1]
  std::vector<Errc> retry_on{Errc::tool_failed, Errc::tool_timeout, Errc::model_error};
};

struct NodeOptions {
  int max_visits = 0;  // 0: only recursion_limit applies
  RetryPolicy retry;
};

// ---------------------------------------------------------------------------------------------
// Routing

// What a router chooses: node names / case keys (kEnd to stop) and optional Sends.
struct Route {
  boost::container::small_vector<std::string, 1> targets;
  std::vector<Send> sends;

  Route() = default;
  Route(const char* target) { targets.emplace_back(target); }          // NOLINT: implicit
  Route(std::string target) { targets.push_back(std::move(target)); }  // NOLINT
  Route(std::string_view target) { targets.emplace_back(target); }     // NOLINT
  Route(std::initializer_list<std::string> t) : targets(t.begin(), t.end()) {}
  static Route to_sends(std::vector<Send> s) {
    Route r;
    r.sends = std::move(s);
    return r;
  }
};
using Router = std::function<Result<Route>(StateView)>;

// ---------------------------------------------------------------------------------------------
// Limits

// Per-run limits. Compile-time defaults (CompileOptions) may be overridden per run.
struct RunLimits {
  int recursion_limit = 25;               // supersteps
  std::size_t max_concurrency = 16;       // node invocations running at once within a step
  std::chrono::milliseconds deadline{0};  // 0 = none
  std::int64_t token_budget = 0;          // 0 = none
  std::size_t inline_limit = 4096;        // bytes; larger writes are offloaded to artifacts
  std::size_t max_state_bytes = std::size_t{64} << 20;  // per-run run_state cap
};

struct CompileOptions {
  std::string name = "graph";
  RunLimits limits;
};

struct SubgraphOptions {
  // parent channel -> child channel, copied in before the child runs (all shared names when
  // both maps are empty); child channel -> parent channel, written back after it finishes.
  std::vector<std::pair<std::string, std::string>> input_map, output_map;
  std::optional<RunLimits> limits;  // the child's limits (its compile defaults otherwise)
};

// ---------------------------------------------------------------------------------------------
// Builder

class StateGraph {
 public:
  StateGraph();
  ~StateGraph();
  StateGraph(StateGraph&&) noexcept;
  StateGraph& operator=(StateGraph&&) noexcept;

  // Returns the channel's id. A duplicate name is reported by compile().
  ChannelId add_channel(ChannelDef def);
  void add_node(std::string name, SyncNodeFn fn, NodeOptions opts = {});
  void add_async_node(std::string name, AsyncNodeFn fn, NodeOptions opts = {});
  void add_subgraph(std::string name, std::shared_ptr<const CompiledGraph> child,
                    SubgraphOptions opts = {}, NodeOptions node_opts = {});
  // `from` may be kStart; `to` may be kEnd.
  void add_edge(std::string from, std::string to);
  // Declares that `from` may Send to `to` (from its Update or a router): counts for
  // reachability and is drawn dotted in DOT. Sending does not require it.
  void add_send_edge(std::string from, std::string to);
  // `cases`: case key -> target (the router may return keys or node names). With no cases,
  // `targets` lists the nodes the router may choose (for validation and DOT); with neither,
  // the router is assumed able to reach any node.
  void add_conditional_edges(std::string from, Router router,
                             std::vector<std::pair<std::string, std::string>> cases = {},
                             std::vector<std::string> targets = {});

  // Validates and freezes. Errors (invalid_workflow, one line per problem): duplicate names,
  // edges naming unknown nodes ("edge from 'a' to 'sumarize': unknown node 'sumarize'"),
  // no entry edge, nodes unreachable from START, nodes that cannot reach END.
  Result<std::shared_ptr<const CompiledGraph>> compile(CompileOptions opts = {}) &&;
  Result<std::shared_ptr<const CompiledGraph>> compile(CompileOptions opts = {}) const&;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// An immutable, validated graph. Shared by all runs.
class CompiledGraph {
 public:
  ~CompiledGraph();
  const std::string& name() const noexcept;
  std::size_t channel_count() const noexcept;
  std::size_t node_count() const noexcept;
  std::optional<ChannelId> channel_id(std::string_view name) const noexcept;
  const ChannelDef& channel(ChannelId id) const;
  const std::string& node_name(std::size_t i) const;
  const RunLimits& default_limits() const noexcept;
  // Each cycle as a list of node names (info: cycles run under the loop caps).
  const std::vector<std::vector<std::string>>& cycles() const noexcept;
  // Graphviz DOT: conditional edges dashed and labelled with their case, subgraphs clustered.
  std::string to_dot() const;

  struct Impl;
  const Impl& impl() const noexcept { return *impl_; }
  explicit CompiledGraph(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::graph
