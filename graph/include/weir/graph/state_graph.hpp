// StateGraph: LangGraph's model in C++ with weir's fences built in.
//
// A graph has channels (state fields, each merged by a reducer), nodes (sync or async functions
// that read the state and return an Update), and edges (static, conditional via a router, and
// Send fan-out). A run proceeds in supersteps: the nodes triggered in a step run concurrently
// (async nodes interleave on the run's strand, at most `max_concurrency` at once), their writes
// are merged by the reducers at the barrier in node order, then the edges pick the next step.
//
// Fences, per run: recursion_limit (supersteps), max_visits per node, a deadline, a token
// budget, run state allocated through an AccountingResource charged to the run_state budget
// (and capped by max_state_bytes), values larger than inline_limit moved to the ArtifactStore
// and replaced by a reference. A cap that is hit ends the run with a typed error naming the
// cap, its value and the node(s); the run's memory and artifacts are released.
//
// Streaming (RunOptions::events, see events.hpp), human-in-the-loop interrupts
// (NodeContext::interrupt + GraphRuntime::async_resume, which need a checkpointer), subgraphs
// (add_subgraph: a compiled graph run as one node) and token-bounded message windows with an
// archive and a rolling summary (ChannelOptions::max_tokens / summarize) are described where
// they are declared below.
//
// Thread safety: a CompiledGraph is immutable and shared by every run. Node functions of one
// run never run at the same time on two threads (one strand per run); different runs may call
// the same node function concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/graph/events.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir {
class ArtifactStore;
class MemoryBudget;
class Limiter;
}  // namespace weir

namespace weir::graph {

inline constexpr std::string_view kStart = "START";
inline constexpr std::string_view kEnd = "END";

// Invoke `node` once with `input` in the next superstep (map / fan-out).
struct Send {
  std::string node;
  boost::json::value input;
};

// What a node returns: channel writes, and optionally where to go next (overriding its edges)
// and Sends for the next step.
struct Update {
  std::vector<std::pair<std::string, boost::json::value>> writes;
  std::optional<std::vector<std::string>> go_to;
  std::vector<Send> sends;
  Update& set(std::string channel, boost::json::value v) & {
    writes.emplace_back(std::move(channel), std::move(v));
    return *this;
  }
  // On a temporary, `return Update().set(...)` moves the update out instead of copying it.
  Update&& set(std::string channel, boost::json::value v) && {
    writes.emplace_back(std::move(channel), std::move(v));
    return std::move(*this);
  }
};

class CompiledGraph;
struct RunState;
struct Runner;

// Read-only access to the state for nodes and routers.
class StateView {
 public:
  StateView(const CompiledGraph& g, const RunState& s) : g_(g), s_(s) {}
  // The channel's value (null when never written and no default). REQUIRES: the channel exists.
  const boost::json::value& get(std::string_view channel) const;
  boost::json::object to_object() const;

 private:
  const CompiledGraph& g_;
  const RunState& s_;
};

// What a node can use besides the state. Made by the run for each node call; it refers to
// the run, which outlives the call.
class NodeContext {
 public:
  NodeContext();
  ~NodeContext();
  NodeContext(NodeContext&&) noexcept;
  NodeContext& operator=(NodeContext&&) noexcept;

  std::string_view node() const;
  std::string_view run_id() const;
  // The superstep this call belongs to: on a thread, the step number its checkpoint will carry
  // (counted over the thread's whole history), else the step of this invocation (1, 2, ...).
  // With run_id() and node() it names this call for a tool that must not repeat a side effect
  // (a re-run of an uncommitted step after a crash has the same step and node; a queue worker
  // gives each attempt its own run_id "<run>.<attempt>"). A step that interrupted has its own
  // checkpoint with its number; on resume it runs again as the next step.
  std::int64_t step() const;
  // The Send input for a fanned-out invocation, null otherwise.
  const boost::json::value& input() const;
  ArtifactStore* artifacts() const;
  // The bytes of an artifact reference found in state (or [offset, offset+length) of them).
  Result<std::string> fetch(const boost::json::value& ref, std::uint64_t offset = 0,
                            std::uint64_t length = UINT64_MAX) const;
  // Charges model tokens to the run's token budget. Error: token_budget_exceeded. In a
  // subgraph the charge counts against the parent run's budget (one budget per top-level run).
  Status charge_tokens(std::int64_t n);

  // A custom event: delivered to the run's EventStream after this node returns, before its
  // node_finished, in emit order. A no-op (nothing is built) when the run does not stream.
  void emit(std::string name, boost::json::value data);

  // An id for a chat message this call writes ("msg-<16 hex>", as the messages reducer names a
  // message written without one): unique to the run, step, node and call, so a node that
  // streams its message's text (message_text) can name the message before it has it.
  std::string new_message_id();
  // Where this call sends the text of message `message_id` as it is generated, in pieces (a
  // model's ChatParams::on_text): each piece goes to RunOptions::on_message_text. An empty
  // function when the run takes no text. The function may be called from any thread, and
  // after the node returned (it then sends nothing that matters: the message is whole).
  std::function<void(std::string_view)> message_text(std::string message_id) const;

  // Suspends the run (human in the loop): `return ctx.interrupt(payload);`. The run stops after
  // this superstep with the step's writes discarded (every node of the step), writes an
  // "interrupted" checkpoint and returns a RunResult with interrupted = true (not an error).
  // GraphRuntime::async_resume(graph, thread, value) re-runs that step with resume_value()
  // == value for this node. The returned Error has code `interrupted`; returning any other
  // error after calling interrupt() fails the node as usual. A run without a checkpointer (and
  // a subgraph's nodes) cannot be interrupted: the run fails with `unsupported`.
  Error interrupt(boost::json::value payload);
  // The value given to async_resume, for the node that interrupted and only in the step that
  // is re-run; null otherwise (a first run).
  const boost::json::value* resume_value() const;

  // True once the run was asked to stop (RunOptions::cancel). A node that waits a long time
  // should look at it now and then and return early (the built-in `sleep` tool does every
  // 50 ms); what it returns after that is discarded: the run ends with `cancelled` after the
  // step. Thread safety: any thread.
  bool cancelled() const;
  // The flag behind cancelled() (null when the run cannot be cancelled), for work that may
  // outlive this call: a tool invocation that its caller stopped waiting for.
  std::shared_ptr<const std::atomic<bool>> cancel_flag() const;

  // Tracing (weir/runtime/trace.hpp): the context whose parent is this call's node span, for
  // the spans of what the node calls (a model, a tool); empty when the run is not traced.
  trace::Context trace() const;
  // An event on this call's node span (a fence that acted inside the node: a history window
  // that evicted turns, say). A no-op when the run is not traced.
  void trace_event(std::string_view name, std::vector<trace::Attribute> attributes = {});

 private:
  friend class GraphRuntime;
  friend struct Runner;
  // What only a streaming or interrupting node fills, made on first use (a run in flight holds
  // one context per node it waits on, so the context itself stays small).
  struct Extra {
    std::vector<std::pair<std::string, boost::json::value>> emitted;
    std::optional<boost::json::value> interrupt;
    std::int32_t messages_named = 0;  // new_message_id() calls
  };
  // The run (its id, fences and services) and the task of its current step this context
  // serves; null outside a run.
  const Runner* run_ = nullptr;
  std::size_t task_ = 0;
  std::unique_ptr<Extra> extra_;
};

using SyncNode = std::function<Result<Update>(const StateView&, NodeContext&)>;
using AsyncNode = std::function<boost::asio::awaitable<Result<Update>>(StateView, NodeContext&)>;
// Returns the next node name(s), or END.
using Router = std::function<std::vector<std::string>(const StateView&)>;
// A user reducer: (current, update) -> new value.
using ReducerFn =
    std::function<Result<boost::json::value>(const boost::json::value&, const boost::json::value&)>;

// Tokens of one message's text (its "content" when that is a string, else the message as JSON).
using TokenCounter = std::function<std::int64_t(std::string_view text)>;
// (previous summary, "" at first; the messages evicted now, oldest first) -> the new summary.
// Runs on the run's strand between supersteps; its time counts against the run's deadline.
using SummarizeFn = std::function<boost::asio::awaitable<Result<std::string>>(
    std::string previous_summary, boost::json::array evicted)>;

// A messages channel's window. Layout of the value:
//   [leading system message(s)] [summary marker?] turns...
// The leading messages with role "system" are always kept. When the window is over max_messages
// (messages, the marker not counted) or max_tokens (the sum over every message, system and
// marker included), the oldest turns are evicted, never the newest one. When the run has an
// ArtifactStore or `summarize` is set, the evicted turns leave a marker right after the system
// prompt:
//   {"role":"system","name":"summary","content":<summary>,"archived":<turns evicted so far>,
//    "archive":{"$artifact":...}}
// `archive` (only with an ArtifactStore) references every evicted turn so far as JSON Lines
// (one message per line, oldest first; owned by the run; each eviction replaces the artifact
// with the old lines plus the new ones). `content` is the summarize hook's text capped at
// max_summary_bytes (cut at a UTF-8 boundary, ending in "... [summary truncated]"), or without
// a hook "[N earlier messages archived]". A failing hook keeps the previous summary, logs a
// warning and sends a `warning` event; the run goes on. Without artifacts and hook the evicted
// turns are dropped (the window of main before this option existed).
struct ChannelOptions {
  ReducerKind reducer = ReducerKind::last_value;
  std::optional<boost::json::value> default_value;
  std::optional<std::int64_t> max_items;     // append: oldest dropped beyond it
  std::optional<std::int64_t> max_messages;  // messages: window, the system message kept
  ReducerFn custom;                          // overrides `reducer` when set
  std::optional<std::int64_t> max_tokens;    // messages: window by tokens
  TokenCounter token_counter;                // default: (bytes + 3) / 4
  SummarizeFn summarize;                     // rolling summary of evicted turns
  std::size_t max_summary_bytes = 2048;
};

struct NodeOptions {
  std::int64_t max_visits = 0;    // 0: unlimited
  std::int32_t max_attempts = 1;  // retries on tool_failed / tool_timeout / model_error
  std::chrono::milliseconds backoff{10};
  // An async node's call that runs longer is cancelled (Asio cancellation reaches what it
  // awaits: a model's generation, a tool's wait) and fails with tool_timeout naming the node,
  // which max_attempts retries. 0: none. A run's cancel flag and deadline stop an async node
  // the same way, within about 50 ms, whatever its timeout.
  std::chrono::milliseconds timeout{0};
};

// What each cap counts. On a thread (RunOptions::checkpointer + thread_id) one *run* lasts from
// START to END however many invocations it takes: interrupts resumed with async_resume and
// unfinished runs continued by async_invoke (after a crash or a failed node) are the same run.
//   recursion_limit   supersteps of one invocation (async_invoke / async_resume call), as in
//                     LangGraph: a resume or a continuation starts a fresh count
//   max_visits        (NodeOptions) times a node ran in the run, across its invocations: the
//                     counts are checkpointed and restored
//   token_budget      tokens charged in the run, across its invocations (checkpointed)
//   deadline          wall time of one invocation
//   max_thread_steps  supersteps of the thread over all its runs and invocations (the step
//                     number its checkpoints carry); only on a thread. A thread past it is
//                     finished for good: start a new thread.
struct GraphLimits {
  std::int32_t recursion_limit = 25;
  std::int64_t max_thread_steps = 10000;  // 0: none
  std::int32_t max_concurrency = 16;
  std::chrono::milliseconds deadline{0};  // 0: none
  std::size_t inline_limit = 4096;        // bytes (serialized)
  std::size_t max_state_bytes = std::size_t{16} << 20;
  std::int64_t token_budget = 0;  // 0: none
};

// How a subgraph node (StateGraph::add_subgraph) connects to its parent's channels.
struct SubgraphOptions {
  // parent channel -> child channel, copied in before the child runs. Empty: every channel
  // name both graphs have.
  std::vector<std::pair<std::string, std::string>> input;
  // child channel -> parent channel, written back when the child finishes. Empty: every
  // channel name both graphs have.
  std::vector<std::pair<std::string, std::string>> output;
  std::optional<GraphLimits> limits;  // the child's limits instead of its compiled ones
};

class StateGraph {
 public:
  StateGraph& add_channel(std::string name, ChannelOptions options = {});
  StateGraph& add_node(std::string name, SyncNode fn, NodeOptions options = {});
  StateGraph& add_async_node(std::string name, AsyncNode fn, NodeOptions options = {});
  StateGraph& add_edge(std::string from, std::string to);
  // `targets`: every node the router may return (END included), for validation and drawing.
  StateGraph& add_conditional_edges(std::string from, Router router,
                                    std::vector<std::string> targets);
  // Declares that `from` may Send to `targets` (for validation: a node reached only by Send
  // is then reachable). A Send invocation follows its node's edges like any other (fan-in: the
  // next step runs each target once, after every invocation of the step).
  StateGraph& add_sends(std::string from, std::vector<std::string> targets);
  // A node that runs the compiled graph `sub` as a child run: its input channels are copied in
  // (through the child's reducers), it runs to END under its own limits, and its output
  // channels are written back as this node's update (through the parent's reducers; for an
  // append/messages parent channel only the items the child added after the copied-in ones).
  // The child shares the parent run's token budget, artifact owner, memory budget and event
  // stream (names prefixed "name/"); it has no checkpoints. A child error fails this node,
  // with its code kept and the message prefixed "node '<name>': ". REQUIRES: sub != nullptr.
  // Errors (compile): a mapped channel missing in the parent or the child.
  StateGraph& add_subgraph(std::string name, std::shared_ptr<const CompiledGraph> sub,
                           SubgraphOptions opts = {});
  // What a traced run of this graph calls its span: "<operation> <name>" with
  // gen_ai.operation.name = operation (an agent's loop: "invoke_agent", its name). A graph
  // without one records `invoke_workflow <RunOptions::trace_name>` when it is the top-level run
  // and no span of its own as a subgraph (its supersteps go under the subgraph's node span).
  StateGraph& set_trace_span(std::string operation, std::string name);

  // Errors: invalid_workflow listing every problem (unknown nodes, nodes unreachable from
  // START or unable to reach END, duplicate names).
  Result<std::shared_ptr<const CompiledGraph>> compile(GraphLimits limits = {}) const&;
  // The same, moving the nodes and edges into the compiled graph instead of copying them.
  Result<std::shared_ptr<const CompiledGraph>> compile(GraphLimits limits = {}) &&;
  // Room for this many nodes and edges (a builder that knows its sizes saves the regrowth).
  void reserve(std::size_t nodes, std::size_t edges);
  // The channels a run's input may set (a workflow file's "input" list); empty: any channel.
  // A top-level run whose input sets another is refused before it starts, naming `graph_name`
  // (check_input_channels). Subgraph runs are not checked: their input is the parent's mapping.
  StateGraph& set_input_channels(std::vector<std::string> channels, std::string graph_name);

 private:
  friend class CompiledGraph;
  friend struct Runner;
  struct SubgraphDef;
  struct NodeDef {
    std::string name;
    SyncNode sync;
    AsyncNode async;
    NodeOptions options;
    std::shared_ptr<const SubgraphDef> sub;  // set for add_subgraph nodes
  };
  struct EdgeDef {
    std::string from;
    std::vector<std::string> to;
    Router router;
    bool send = false;  // declared Send targets: validation only
  };
  std::vector<std::pair<std::string, ChannelOptions>> channels_;
  std::vector<NodeDef> nodes_;
  std::vector<EdgeDef> edges_;
  std::vector<std::string> input_channels_;
  std::string name_;
  std::string trace_operation_, trace_name_;
};

class CompiledGraph {
 public:
  const GraphLimits& limits() const { return limits_; }
  std::size_t channel_count() const { return channels_.size(); }
  std::optional<std::size_t> channel_index(std::string_view name) const;
  const std::string& channel_name(std::size_t i) const { return channels_[i].first; }
  // Cycles found at compile time (they run under the loop caps), as node name lists.
  const std::vector<std::vector<std::string>>& cycles() const { return cycles_; }
  // StateGraph::set_input_channels: empty when any channel may be set.
  const std::vector<std::string>& input_channels() const { return input_channels_; }
  std::string to_dot() const;
  // The graph as a workflow spec, for what a server shows of a C++ graph (its assistant's
  // graph, schemas and subgraphs; the nodes a run's controls may name): its channels (a custom
  // reducer shows as last_value), input list, limits, nodes (kind `code`; a subgraph node kind
  // `subgraph`, its graph described in `subgraphs`), and edges (a router's or a Send's declared
  // targets as a route of cases with only a default). Named `name`, with `description`.
  WorkflowSpec describe(std::string name, std::string description = {}) const;

 private:
  friend class StateGraph;
  friend class GraphRuntime;
  friend class StateView;
  friend struct Runner;
  struct Compiler;  // StateGraph::compile's steps (state_graph.cpp)
  GraphLimits limits_;
  std::vector<std::pair<std::string, ChannelOptions>> channels_;
  std::vector<StateGraph::NodeDef> nodes_;
  std::vector<StateGraph::EdgeDef> edges_;
  std::vector<std::vector<std::size_t>> static_next_;  // [node + 1]: index 0 = START
  std::vector<std::vector<const Router*>> routers_;    // [node + 1]
  std::vector<std::vector<std::string>> cycles_;
  std::vector<std::uint32_t> by_name_;  // node indexes sorted by name, for node_index()
  bool visit_caps_ = false;             // some node has NodeOptions::max_visits
  std::vector<std::string> input_channels_;
  std::string name_;
  std::string trace_operation_, trace_name_;  // StateGraph::set_trace_span
  std::optional<std::size_t> node_index(std::string_view name) const;
};

struct StateGraph::SubgraphDef {
  std::shared_ptr<const CompiledGraph> graph;
  SubgraphOptions options;
  std::vector<std::pair<std::size_t, std::size_t>> in, out;  // resolved by compile()
};

// The one check of a run's input against a graph's input list, at every door (the CLI, the run
// service, MCP, the executor itself): invalid_argument "<source> sets 'x', which <graph_name>
// does not take as input (its \"input\": a, b)" for the first key outside `allowed`; OK when
// `allowed` is empty (any channel).
Status check_input_channels(const std::vector<std::string>& allowed, std::string_view graph_name,
                            const boost::json::object& input, std::string_view source);

// (The flags sit beside `steps`: a caller awaiting a run holds one of these in its coroutine
// frame for as long as the run is in flight, and so does the run.)
struct RunResult {
  boost::json::object state;
  std::int32_t steps = 0;
  bool resumed = false;  // continued an unfinished checkpoint
  // The run stopped at NodeContext::interrupt (not an error): `state` is the state before the
  // interrupted step (interrupted_node, interrupt_payload below); continue with
  // GraphRuntime::async_resume.
  bool interrupted = false;
  std::int64_t tokens_used = 0;
  std::size_t peak_state_bytes = 0;
  std::size_t offloaded = 0;  // values moved to the artifact store
  std::string checkpoint_id;  // the last checkpoint written (empty without a checkpointer)
  std::string interrupted_node;
  boost::json::value interrupt_payload;
  // "before" or "after" when a breakpoint (RunOptions::interrupt_before/after) stopped the run
  // rather than the node's interrupt(): interrupted_node is then the first node of the step that
  // runs on resume, and interrupt_payload is null. "" otherwise.
  std::string breakpoint;
};

class Checkpointer;

// What a traced run records its spans under (RunOptions::trace).
struct RunTracing {
  trace::Context context;  // the tracer, and the parent of the run's span (none: a new trace)
  std::string name;        // `invoke_workflow <name>` (the workflow file's name); "graph" if empty
};

struct RunOptions {
  std::string run_id;  // artifacts are owned by it; generated when empty
  // With both set, a checkpoint holding only the channels written in that step is put after
  // every superstep (the input first, as a step of its own numbered after the thread's last),
  // and an invocation on a thread whose latest checkpoint is unfinished (a crash, a failed
  // node, a cancel) continues it: state restored, the pending nodes run next. Whether the
  // input is applied then is the continuation rule: given no input, or the same input that
  // started the unfinished run (the same JSON text; its SHA-256 is in every checkpoint's
  // pending "origin"), the run goes on without applying it again, so a run continued after any
  // number of crashes ends as an uninterrupted one, whatever the reducers; a different input is
  // a new request, applied once on top. async_resume repeated with the value that started an
  // unfinished run continues it the same way. A thread whose last run finished starts a new run
  // from START on top of its state (a chat's next turn). REQUIRES: the checkpointer outlives
  // the run.
  // A thread whose latest checkpoint is "interrupted" is refused (invalid_argument): use
  // async_resume. Values the run moved to the ArtifactStore are stored with the thread's
  // checkpoints (Checkpointer::artifacts) and put back into the store when another process
  // restores the thread. Checkpointer::list(thread_id) lists a thread's checkpoints, newest first.
  Checkpointer* checkpointer = nullptr;
  std::string thread_id;
  // Streaming (see events.hpp): null = off. The run keeps no owning reference to the stream.
  std::shared_ptr<EventStream> events;
  bool stream_state = false;  // also a `state` event after every superstep
  // Message text as nodes generate it (events.hpp MessageText): an llm node's reply, piece by
  // piece, before the node returns and its step is committed. Called from any thread (a
  // model's); must be quick (queue it). Null: nodes are given no sink (NodeContext::
  // message_text) and build nothing. REQUIRES: outlives the run.
  const std::function<void(const MessageText&)>* on_message_text = nullptr;
  // Copied into every checkpoint's metadata (beside "run_id"): e.g. the workflow file a
  // thread runs, so a later process can resume the thread knowing only its id.
  boost::json::object checkpoint_metadata;
  // One runner per thread: a run on a thread claims it (Checkpointer::claim_thread) before it
  // restores anything and releases it when it ends; a heartbeat refreshes the claim every
  // thread_lease / 3 while it runs. Another runner gets thread_busy naming the holder; a claim
  // whose heartbeat is older than thread_lease (or whose process is gone, same host) is taken
  // over. REQUIRES > 0.
  std::chrono::milliseconds thread_lease{30000};
  // Non-empty: the caller already holds the thread's claim under this token (claim_thread) and
  // keeps it fresh itself (a run queue's lease, say). The run writes every checkpoint with it,
  // so once the claim is lost (taken over after it lapsed) no further step of this run is
  // committed: its next put stores nothing and the run fails with thread_busy. The run neither
  // claims, renews nor releases it; thread_lease is unused.
  std::string claim_token;
  // Cooperative cancellation: once *cancel is true the run stops before its next superstep
  // with Errc::cancelled ("run cancelled before superstep N"), and nodes see
  // NodeContext::cancelled(). What the run committed before stays committed; a stopped run on
  // a thread can be continued like any unfinished one. Null: not cancellable.
  std::shared_ptr<const std::atomic<bool>> cancel;
  // Tracing (weir/runtime/trace.hpp, docs/tracing.md): with a tracer in trace->context, the run
  // records a span `invoke_workflow <trace->name>` (or the graph's set_trace_span) under the
  // context's parent (a new trace when it has none), a span per superstep and per node under
  // it, and the fences that acted as events (admission wait, loop caps, window eviction); nodes
  // get the context of their span from NodeContext::trace(). Null (the default): nothing is
  // recorded, and the run pays one branch per phase. A pointer, not a value: every caller
  // holds its RunOptions while its run is in flight (8 bytes, not 104, a run).
  // REQUIRES: *trace outlives the start of the run; its tracer outlives the run.
  const RunTracing* trace = nullptr;
  // Breakpoints (LangGraph's interrupt_before / interrupt_after): node names, "*" for every
  // node. The run stops as at an interrupt ("interrupted" checkpoint, RunResult::interrupted
  // with `breakpoint` set) before a step that would run a node of interrupt_before, or after a
  // step that ran a node of interrupt_after (before the next step; not when the run ends
  // there). async_resume continues it with that step, where no node sees the resume value and
  // no breakpoint stops the run again. Names the graph lacks match nothing. A run with
  // breakpoints needs a checkpointer and a thread (else it fails with `unsupported`).
  std::vector<std::string> interrupt_before, interrupt_after;
  // The run's superstep cap instead of the graph's limits.recursion_limit when > 0 (a caller's
  // per-run cap, e.g. LangGraph's config.recursion_limit; the caller decides whether it may
  // exceed the graph's).
  std::int32_t recursion_limit = 0;
  // The first step's nodes instead of START's targets (LangGraph's command.goto), run after the
  // input is applied; on an unfinished thread given new input they replace its pending nodes
  // (a continued run ignores them: its first run jumped already). A name the graph lacks fails
  // the run (invalid_argument) before any node runs; with a resume value it is `unsupported`.
  std::vector<std::string> go_to;
  // Sends for that first step too (LangGraph's command.goto with a Send): each runs its node
  // with its input (NodeContext::input(), a map worker's item), beside go_to's nodes; the same
  // rules as go_to's.
  std::vector<Send> go_to_sends;
  // Supersteps this run committed before this invocation, which its cap (recursion_limit, the
  // run's or the graph's) counts too: a run service continuing the same run after its worker
  // died. (A caller continuing a thread by invoking again gets a fresh count: 0.)
  std::int32_t steps_before = 0;
  // Record each step of every subgraph the run calls (LangGraph's stream_subgraphs): the
  // checkpoint of the step that called it gets metadata "subgraph_steps", a list of
  // {"path": [{"node", "step", "task"}, ...] (the call: the subgraph node, the step of its run
  // and its task's place there, outermost first), "step" (the subgraph's step; 0: its input),
  // "nodes" (what ran), "writes" (each channel it wrote, its whole new value; one over
  // kSubgraphValueBytes of JSON as {"$omitted": {"bytes": n}})}. At most kSubgraphStepBytes of
  // them a step and kSubgraphRunBytes a run; a step that does not fit is left out, and so are
  // the later steps of that call (their state would lack its writes), each counted in the
  // checkpoint's metadata "subgraph_steps_dropped". Needs a checkpointer and a thread (else
  // nothing is recorded).
  bool record_subgraph_steps = false;
};

// RunOptions::record_subgraph_steps' bounds (JSON text): a value, a step's checkpoint, a run.
inline constexpr std::size_t kSubgraphValueBytes = 16 * 1024;
inline constexpr std::size_t kSubgraphStepBytes = 256 * 1024;
inline constexpr std::size_t kSubgraphRunBytes = 1024 * 1024;

struct RuntimeOptions {
  MemoryBudget* budget = nullptr;      // run_state is charged here when set
  ArtifactStore* artifacts = nullptr;  // offload target; without it, big values stay inline
  std::size_t max_concurrent_runs = 1024;
  std::size_t max_queued_runs = 100000;
};

// Admission (max concurrent runs + bounded queue -> overloaded) and the shared services runs use.
// REQUIRES: a GraphRuntime outlives its runs: destroy it only once every run it started has
// completed (or its io_context was destroyed first); its admission permits point into it.
class GraphRuntime {
 public:
  explicit GraphRuntime(RuntimeOptions options = {});
  ~GraphRuntime();
  GraphRuntime(const GraphRuntime&) = delete;
  GraphRuntime& operator=(const GraphRuntime&) = delete;

  // Runs `graph` from `input` (channel -> value). A value over the graph's inline_limit goes to
  // the artifact store (RuntimeOptions::artifacts) and the state holds its reference, as for a
  // node's write. Errors: invalid_argument (the input sets a channel outside the graph's input
  // list: check_input_channels; or one the graph does not have), overloaded, the caps,
  // memory_budget_exceeded, conflicting_writes, node errors (tool_failed, ...), cancelled.
  boost::asio::awaitable<Result<RunResult>> async_invoke(std::shared_ptr<const CompiledGraph> graph,
                                                         boost::json::object input,
                                                         RunOptions options);
  // (Not a default argument: GCC 12 destroys a defaulted class-type coroutine parameter twice.)
  boost::asio::awaitable<Result<RunResult>> async_invoke(std::shared_ptr<const CompiledGraph> graph,
                                                         boost::json::object input) {
    return async_invoke(std::move(graph), std::move(input), RunOptions{});
  }
  // Continues an interrupted thread: restores its state and re-runs the interrupted superstep
  // with NodeContext::resume_value() == `resume_value` for the node that interrupted, then runs
  // on to END (or the next interrupt). options.thread_id is set to `thread_id`. Errors:
  // unsupported (no options.checkpointer), not_found (the thread has no checkpoint),
  // invalid_argument ("thread 't1' is not interrupted (its last run finished)" / "... (its
  // last run stopped unfinished; async_invoke continues it)", unless that run was started by
  // this very value: then it is continued, see RunOptions), then those of async_invoke.
  boost::asio::awaitable<Result<RunResult>> async_resume(std::shared_ptr<const CompiledGraph> graph,
                                                         std::string thread_id,
                                                         boost::json::value resume_value,
                                                         RunOptions options);
  std::size_t active_runs() const;
  std::size_t queued_runs() const;

 private:
  // The run behind async_invoke and async_resume (resume_value null for async_invoke). Not a
  // coroutine: it moves what it needs out of graph, input and options before it returns (taken
  // by reference, so that a run does not pay for moving RunOptions once more).
  boost::asio::awaitable<Result<RunResult>> async_run(std::shared_ptr<const CompiledGraph>& graph,
                                                      boost::json::object& input,
                                                      RunOptions& options,
                                                      const boost::json::value* resume_value);
  RuntimeOptions options_;
  std::unique_ptr<Limiter> admission_;
};

}  // namespace weir::graph
