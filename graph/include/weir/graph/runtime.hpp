// GraphRuntime: runs CompiledGraphs (supersteps, reducers, caps, offload, checkpoints, events).
//
// A run is a coroutine on the runtime's Executor; no thread per run. Runs are admitted by a
// Limiter (max_concurrent_runs running, max_queued_runs waiting, beyond that `overloaded`).
// Each run's state lives in an AccountingResource charged to MemoryBudget::run_state with a
// per-run cap (RunLimits::max_state_bytes); exceeding it fails that run only. When a run ends
// (success or failure) its state, its artifacts (owner = run id) and its reservations are
// released.
//
// Thread safety: async_invoke / invoke / batch / async_resume may be called from any thread
// concurrently. The Executor, MemoryBudget, ArtifactStore, Registry and Checkpointer given
// to the constructor must outlive the runtime. invoke()/resume()/batch() block and REQUIRE
// that the caller is not one of the Executor's threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

#include "weir/graph/state_graph.hpp"
#include "weir/runtime/error.hpp"

namespace weir {
class Executor;
class MemoryBudget;
class ArtifactStore;
class Registry;
}  // namespace weir

namespace weir::graph {

class Checkpointer;

// ---------------------------------------------------------------------------------------------
// Streaming

enum class EventKind {
  run_started,
  run_finished,
  run_failed,
  run_interrupted,
  node_started,
  node_finished,  // data: the node's writes {"channel": value}
  state,          // data: the full state after a step
  custom,         // data: what the node emitted
  token,
};
const char* event_kind_name(EventKind k) noexcept;

struct Event {
  EventKind kind;
  std::int64_t step = 0;
  std::string node;
  json::value data;
};

// A bounded event channel from one run to one consumer. When it is full the run waits
// (backpressure); it never queues without bound. Create one per run and pass it in RunConfig.
// Thread safety: one producer (the run) and one consumer, any threads.
class EventStream {
 public:
  EventStream(boost::asio::any_io_executor ex, std::size_t capacity = 64);
  ~EventStream();
  // The next event, or nullopt after the run's last event (run_finished/failed/interrupted).
  boost::asio::awaitable<std::optional<Event>> async_next();
  // Producer side (used by the runtime). Waits while the channel is full.
  boost::asio::awaitable<void> async_push(Event e);
  void close() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Per-run configuration and result

struct RunConfig {
  std::string thread_id;                // enables checkpoints (with a runtime Checkpointer)
  std::string checkpoint_id;            // resume: start from this checkpoint instead of latest
  std::optional<RunLimits> limits;      // the graph's compile defaults otherwise
  std::shared_ptr<EventStream> events;  // streaming off when null (zero cost)
  bool stream_state = false;            // also emit a `state` event after every step
};

struct RunStats {
  std::int64_t steps = 0;
  std::int64_t node_calls = 0;
  std::int64_t retries = 0;
  std::int64_t items_dropped = 0;    // append max_items and message-window evictions
  std::int64_t offloaded = 0;        // values moved to the ArtifactStore
  std::int64_t tokens = 0;           // charged through NodeContext::charge_tokens
  std::size_t state_peak_bytes = 0;  // run_state high-water mark
  std::int64_t checkpoints = 0;
};

struct RunResult {
  std::string run_id;
  std::string thread_id;
  std::string checkpoint_id;  // the last checkpoint written ("" without checkpointing)
  bool interrupted = false;   // the run suspended at interrupt(); resume to continue
  std::string interrupted_node;
  json::value interrupt_payload;
  std::shared_ptr<const CompiledGraph> graph;
  std::vector<json::value> values;  // final channel values, by ChannelId
  RunStats stats;

  const json::value& get(std::string_view channel) const;
  json::object state() const;
};

// ---------------------------------------------------------------------------------------------
// What a node sees

class NodeContext {
 public:
  const std::string& node_name() const noexcept { return *node_name_; }
  const std::string& run_id() const noexcept;
  const std::string& thread_id() const noexcept;
  const json::value& run_input() const noexcept;
  // The Send argument for a Send invocation; null otherwise.
  const json::value& input() const noexcept { return *arg_; }
  std::int64_t step() const noexcept;
  int attempt() const noexcept { return attempt_; }  // 1-based

  // Artifact access for values offloaded from state ({"$artifact": ...}). A non-ref value is
  // returned as its serialized JSON. Errors: not_found, unsupported (no ArtifactStore).
  Result<std::string> fetch(const json::value& ref) const;
  Result<std::string> fetch_range(const json::value& ref, std::uint64_t offset,
                                  std::uint64_t length) const;
  // The value itself: a ref fetched and parsed, anything else copied.
  Result<json::value> resolve(const json::value& v) const;
  ArtifactStore* artifacts() const noexcept;

  // A custom event (delivered after the node returns; dropped when streaming is off).
  void emit(json::value data);
  // Charges the run's token budget. Errors: token_budget_exceeded (the run fails after this
  // node returns, even if the node ignores the status).
  Status charge_tokens(std::int64_t n);

  // Suspends the run: `return ctx.interrupt(payload);`. The step's writes are discarded, a
  // checkpoint with status "interrupted" is written, and resume(thread, value) re-runs the
  // step with resume_value() set for this node.
  Error interrupt(json::value payload);
  // The value given to resume(); null on a first run.
  const json::value* resume_value() const noexcept { return resume_; }

  struct Internal;
  NodeContext(Internal* run, const std::string* node, const json::value* arg)
      : run_(run), node_name_(node), arg_(arg) {}

  // Set by the runtime only; node code uses the accessors above.
  Internal* run_;
  const std::string* node_name_;
  const json::value* arg_;
  const json::value* resume_ = nullptr;
  int attempt_ = 1;
  std::vector<json::value> emitted_;
  std::optional<json::value> interrupt_;
};

// ---------------------------------------------------------------------------------------------

struct RuntimeOptions {
  std::size_t max_concurrent_runs = 1024;
  std::size_t max_queued_runs = 65536;
};

class GraphRuntime {
 public:
  // budget, artifacts, checkpointer may be null. metrics null means Registry::global().
  GraphRuntime(Executor& executor, MemoryBudget* budget, ArtifactStore* artifacts,
               Registry* metrics, Checkpointer* checkpointer, RuntimeOptions opts = {});
  ~GraphRuntime();
  GraphRuntime(const GraphRuntime&) = delete;
  GraphRuntime& operator=(const GraphRuntime&) = delete;

  // Runs `graph` on `input` (an object: channel -> value, written through the reducers).
  // With a thread id whose latest checkpoint is "done", continues from that state.
  // Errors: every cap's code, a node's error, overloaded, cancelled, interrupted is NOT an
  // error (RunResult::interrupted). On failure the run's memory is released.
  boost::asio::awaitable<Result<RunResult>> async_invoke(std::shared_ptr<const CompiledGraph> graph,
                                                         json::value input, RunConfig config = {});
  // Continues an interrupted thread: re-runs the interrupted step with `value` as the
  // interrupted node's resume_value(). Errors: not_found (no checkpoint), invalid_argument
  // (the thread is not interrupted), unsupported (no checkpointer).
  boost::asio::awaitable<Result<RunResult>> async_resume(std::shared_ptr<const CompiledGraph> graph,
                                                         std::string thread_id, json::value value,
                                                         RunConfig config = {});

  Result<RunResult> invoke(std::shared_ptr<const CompiledGraph> graph, json::value input,
                           RunConfig config = {});
  Result<RunResult> resume(std::shared_ptr<const CompiledGraph> graph, std::string thread_id,
                           json::value value, RunConfig config = {});
  // All inputs, at most `max_concurrency` at once; results in input order.
  std::vector<Result<RunResult>> batch(std::shared_ptr<const CompiledGraph> graph,
                                       std::vector<json::value> inputs,
                                       std::size_t max_concurrency);

  Executor& executor() noexcept;
  std::size_t active_runs() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::graph
