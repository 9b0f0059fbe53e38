// RunExecutor: the one executor of weir's runs, shared by the run service's in-process backend
// (run_service_local.cpp) and the PostgreSQL Worker (worker.cpp). What a run needs between "this
// run is ours" and "this is how it ended" is written here once: the workflow built from the text
// the run carries, the budget and artifact store its state lives under, the thread claim, what
// an earlier attempt left on the thread, the graph's invocation and how its result becomes the
// run's record. The backends only decide who holds a run and where its end is written.
//
// A run, in async_execute:
//   1. Its workflow: built from RunRecord::workflow once per text (keyed by its SHA-256) and
//      shared by every run of it; a file that no longer loads fails the run (invalid_workflow).
//      A C++ graph's run (cpp_graph_text) runs Options::graphs' graph of that name.
//   2. Its input (a JSON object) and resume value, parsed from the record; bad text fails it.
//   3. The thread's claim under `token` (Checkpointer::claim_thread, lease RunEnv::lease).
//      Refused: the run is handed back after one lease (another runner still holds it).
//   4. The thread's latest checkpoint: when it is this run's own and says the run ended (an
//      attempt committed its last step and died before recording the end), the end is read from
//      it and the graph does not run again.
//   5. The graph: GraphRuntime::async_invoke with the input, or async_resume with the value, with
//      the checkpointer, the claim token and the metadata {"queue_run", "attempt", "workflow",
//      "workflow_sha256"} on every checkpoint; nodes see run id "<run>.<attempt>". Continuing an
//      unfinished run (the same input given again) is the graph's rule (RunOptions), not ours.
//      With RunEnv::tracer the run's spans continue the record's traceparent.
//   6. The thread's claim released, and the ending made from the result and RunControl.
//
// Thread safety: workflow() from one thread at a time (a backend's control thread or its
// mutex); async_execute from any strand, several at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/json/fwd.hpp>

#include "weir/cluster/run_queue.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir {
class MemoryBudget;
}
namespace weir::graph {
class Checkpointer;
class EventStream;
}  // namespace weir::graph

namespace weir::cluster {

// A workflow built once per text and shared by every run of it.
struct BuiltWorkflow {
  graph::WorkflowSpec spec;  // the graph's nodes point into it: declared first, dies last
  graph::WorkflowGraph built;
};

// How a run ended, as its backend writes it down.
struct RunEnding {
  enum class Kind {
    record,     // the run ended: state, result, error_code, error
    hand_back,  // not finished here: queue it again after `delay` (why says why)
    lost,       // another holder took it: write nothing
  };
  Kind kind = Kind::record;
  RunState state = RunState::failed;
  std::string result;  // JSON text: the output channels, or the interrupt
  std::string error_code, error;
  std::chrono::milliseconds delay{0};
  // hand_back and lost: why. record: a problem met after the end that deserves a log line
  // (releasing the thread's claim failed), else "".
  std::string why;
};

// What a backend sets while a run is in flight; async_execute reads it when the graph returns.
struct RunControl {
  // The graph's cancel flag (RunOptions::cancel): set through stop().
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> user_cancel{false};     // a cancel the user asked for: ends `cancelled`
  std::atomic<bool> lost{false};            // another holder took the run: nothing is written
  std::atomic<bool> draining{false};        // the backend stops: the run is handed back
  std::atomic<bool> thread_claimed{false};  // set by async_execute once step 3 succeeded
  // Sets `why` and the graph's flag: the run stops before its next superstep.
  void stop(std::atomic<bool>& why) {
    why = true;
    cancel->store(true);
  }
};

// Where a run executes.
struct RunEnv {
  graph::Checkpointer* checkpointer = nullptr;  // REQUIRES: outlives the run
  std::string token;                            // the thread claim's token
  std::chrono::milliseconds lease{30000};       // the thread claim's lease
  RunControl* control = nullptr;                // REQUIRES: outlives the run
  std::shared_ptr<graph::EventStream> events;   // null: the run does not stream
  // Where its nodes' message text goes as it is generated (graph::RunOptions::on_message_text);
  // null: nowhere. REQUIRES: outlives the run.
  const std::function<void(const graph::MessageText&)>* on_message_text = nullptr;
  std::string drain_reason;  // hand_back's why when control->draining
  // Tracing (docs/tracing.md): the run's spans continue RunRecord::traceparent, so every
  // attempt of a run, on any worker, and a run submitted over HTTP stay in one trace. Null: off.
  trace::Tracer* tracer = nullptr;
};

class RunExecutor {
 public:
  struct Options {
    std::size_t max_runs = 4;  // runs at once on its GraphRuntime (REQUIRES >= 1)
    // One budget for every run (run state and artifacts kept in memory).
    std::size_t memory_limit = std::size_t{1} << 30;
    std::string tag = "runs";      // the artifact folder: $TMPDIR/weir-<tag>-<pid>
    std::vector<CppGraph> graphs;  // what a record carrying cpp_graph_text runs
  };
  // Errors: io_error (the artifact folder).
  static Result<std::unique_ptr<RunExecutor>> open(Options options);
  ~RunExecutor();
  RunExecutor(const RunExecutor&) = delete;
  RunExecutor& operator=(const RunExecutor&) = delete;

  MemoryBudget& budget();

  // Step 1 for a record carrying its workflow's text, file and SHA-256. Errors: invalid_workflow
  // (the text does not load: its report; a C++ graph this executor lacks), build_workflow's.
  Result<std::shared_ptr<const BuiltWorkflow>> workflow(const RunRecord& rec);

  // Steps 2-6 with `wf` (from workflow(), or built by the caller the same way). Never throws:
  // an exception escaping the graph becomes a failed run. REQUIRES: wf.
  boost::asio::awaitable<RunEnding> async_execute(RunRecord rec,
                                                  std::shared_ptr<const BuiltWorkflow> wf,
                                                  RunEnv env);

 private:
  struct Impl;
  explicit RunExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The result JSON text of an interrupted run: {"interrupted": node, "payload", "thread"}.
std::string interrupted_result(const std::string& node, const boost::json::value& payload,
                               const std::string& thread_id);

}  // namespace weir::cluster
