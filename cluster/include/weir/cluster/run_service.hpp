// RunService: runs of workflow files, queued, executed, watched and recorded in one place, on
// one of two backends with one contract. `weir serve`'s runs API (/v1/runs, /v1/threads: serve/
// keeps only the routes), `weir submit`, `weir runs` and `weir cancel` are its clients, and a
// C++ program may open one too.
//
//   in-process  (options.db empty): runs execute on this process's executor, at most max_runs at
//               once; the others wait in a bounded queue (max_queued_runs; beyond it submit
//               fails with overloaded). Checkpoints live in memory: the process's end forgets
//               every run and thread. The newest keep_finished finished runs are remembered; an
//               older one is forgotten with its thread (when the thread is the run's own).
//   PostgreSQL  (options.db a connection string): submit queues the run in weir_runs (RunQueue)
//               and, with max_runs > 0, an embedded Worker runs up to max_runs of them here;
//               `weir worker` processes elsewhere drain the same queue. Runs and checkpoints
//               survive any process; overloaded when max_queued_runs runs are queued already.
//               max_runs == 0 opens a client only (submit, read, cancel: the CLI's commands).
// Both execute a run with the one RunExecutor (cluster/src/run_executor.hpp): the same thread
// claim, checkpoint metadata {"queue_run": <run id>, "attempt", "workflow", "workflow_sha256"}
// (how a run's steps are told from another's on a shared thread), continuation rule (the
// graph's) and record of the end. A run's record is RunRecord on both; run_json is its one JSON
// shape.
//
// Workflows: a run names one of the folder's workflows (options.workflows: every *.json, loaded
// and checked at open; a bad file refuses the open, naming it; a crew file is one when
// options.crew_model gives it a model), by its "name" (the file's stem when it has none), or
// one of options.graphs (C++ graphs) by its name, or gives a file (RunRequest::workflow_file)
// whose text travels with it.
// Every door checks the input the same way: an object whose keys the workflow's "input" list
// allows (graph::check_input_channels; the executor checks again).
// A thread runs one run at a time: in-process, a submit or resume onto a thread with a run
// queued or running fails with thread_busy; on PostgreSQL the worker's thread claim orders them.
//
// Watching. watch(run, f) calls f (on some other thread, soon after) whenever the run's record
// or its thread's checkpoints may have changed, so an event stream reads the store only when
// something moved: in-process the run's graph::EventStream drives it (each superstep's first
// node_started comes after the previous step's checkpoint, the run's last event after its last
// one) plus every change of the record; on PostgreSQL one thread per service compares, every
// watch_interval while anything is watched, each watched run's state and attempts and its
// thread's version (weir_threads.updated_seq) in one query for all of them.
//
// Thread safety: every method may be called from any thread. Calls may block (PostgreSQL):
// call them off an I/O thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/cluster/run_queue.hpp"
#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir {
class MemoryBudget;
}
namespace weir::graph {
class Checkpointer;
struct MessageText;
struct Checkpoint;
struct WorkflowSpec;
}  // namespace weir::graph

namespace weir::cluster {

// Whether a run of `spec` may take controls `c`. Errors: invalid_argument (a breakpoint or a
// goto names a node the workflow lacks; a recursion_limit above the workflow's cap, which a run
// may lower but not raise), each naming what it may be.
Status check_controls(const graph::WorkflowSpec& spec, const RunControls& c);
// Whether a thread whose latest checkpoint is `latest` (null: none) can be resumed
// (RunService::resume). Errors: not_found (no checkpoint), invalid_argument (not interrupted:
// says how its last step stands).
Status check_resumable(const std::string& thread_id, const graph::Checkpoint* latest);

struct RunServiceOptions {
  std::filesystem::path workflows;  // a folder of workflow files; empty: requests give files
  // The model (a GGUF file) the folder's crew files run on: each is served as a workflow of one
  // crew node (agents::crew_workflow_text). Empty: crew files are left out, with a log line.
  std::filesystem::path crew_model;
  // Graphs written in C++ that runs may name beside the folder's files (a name both have is
  // invalid_argument). On PostgreSQL every `weir worker`-like process that may claim their runs
  // needs them too (WorkerOptions::graphs): a worker without one fails the run naming it.
  std::vector<CppGraph> graphs;
  std::string db;  // "": in-process; else a PostgreSQL connection string
  // Runs executing at once in this process. In-process REQUIRES >= 1; PostgreSQL: 0 runs none
  // here (a client of the queue only).
  std::size_t max_runs = 8;
  std::size_t max_queued_runs = 256;
  std::size_t keep_finished = 1000;                 // in-process: finished runs remembered
  std::size_t memory_limit = std::size_t{1} << 30;  // the runs' state and artifacts in memory
  // In-process: the threads' checkpoints in memory are bounded by checkpoint_bytes and charged
  // to the budget's history category when one is given (a run whose next checkpoint does not fit
  // fails with memory_budget_exceeded naming the limit), and one thread's at a quarter of it (so
  // one long thread cannot starve the others). REQUIRES: the budget outlives the service.
  std::size_t checkpoint_bytes = std::size_t{512} << 20;
  MemoryBudget* checkpoint_budget = nullptr;
  std::chrono::milliseconds lease = kDefaultLease;  // PostgreSQL: the embedded worker's lease
  std::chrono::milliseconds watch_interval{250};    // PostgreSQL: see "Watching" above
  std::function<void(const std::string&)> log;      // one line per run event; may be null
  // Tracing (docs/tracing.md): the runs executed here record their spans under their record's
  // traceparent (every attempt, on any worker, continues one trace). Null: off. REQUIRES:
  // outlives the service.
  trace::Tracer* tracer = nullptr;
};

// A run to queue: a workflow by name (of the folder) or by file.
struct RunRequest {
  std::string workflow;                  // a name of options.workflows' files; or
  std::filesystem::path workflow_file;   // a file, read now (its text travels with the run)
  boost::json::object input;             // channel -> value; checked against its "input" list
  std::string thread_id;                 // "": a thread named like the run
  int max_attempts = 0;                  // 0: in-process 1, PostgreSQL kDefaultMaxAttempts
  std::string input_source = "'input'";  // how errors name the input ("--input" in the CLI)
  // The W3C traceparent the run's spans continue (RunRecord::traceparent): the caller's span,
  // e.g. the HTTP request that queued it. "" or not a valid one: a new trace of its own.
  std::string traceparent;
  // A thread with a run queued or running: false refuses with thread_busy; true queues this run
  // behind it (and behind the runs enqueued before it), to start when they ended.
  bool enqueue = false;
  // Breakpoints and a lower recursion_limit for this run (checked against the workflow:
  // invalid_argument naming the node or the cap).
  RunControls controls;
  // Starts no earlier than this long after the submit (LangGraph's after_seconds). The run is
  // queued at once (its record exists, state queued) and holds its thread as a queued run does:
  // a later run on the thread is thread_busy, or with `enqueue` waits behind it, and a run this
  // one is enqueued behind makes it wait longer. While it waits it counts against
  // max_queued_runs, not max_runs, and holds no thread of the executor; a cancel ends it before
  // it starts. In-process a timer starts it; on PostgreSQL its row is claimable from then
  // (weir_runs.not_before, the database's clock; a worker looks at least every poll interval).
  // 0: as soon as a slot is free. invalid_argument outside 0 to kMaxRunDelay.
  std::chrono::milliseconds delay{0};
};

// A page of runs, newest first.
struct RunListQuery {
  std::size_t limit = 100;        // REQUIRES >= 1
  std::optional<RunState> state;  // only runs in this state
  std::string after;              // "": from the newest; else the runs older than this run
};
struct RunList {
  std::vector<RunRecord> runs;
  bool has_more = false;  // older runs follow: ask again with after = runs.back().id
};

// What a cancel did: the run as it stood before and after it.
struct CancelOutcome {
  RunRecord before, after;
};

// Ends its watch when destroyed: no call of the watch's function starts after that.
class RunWatch {
 public:
  virtual ~RunWatch() = default;
};

class RunService {
 public:
  // Errors: invalid_argument (max_runs, not a folder, no workflow in it, two with one name),
  // invalid_workflow (a file that does not load or build: its report), io_error (the database,
  // the artifact folder).
  static Result<std::unique_ptr<RunService>> open(RunServiceOptions options);
  virtual ~RunService() = default;

  // "in-process" or "postgres 'user@host:port/db'".
  virtual std::string description() const = 0;
  // In-process: the runs queued (waiting for a slot, or behind their thread's run), running,
  // and pending (their after_seconds not yet passed), from memory, at once (for /metrics).
  // PostgreSQL: nullopt (the queue is the database's; `weir runs --state` counts it).
  struct Counts {
    std::size_t queued = 0, running = 0, pending = 0;
  };
  virtual std::optional<Counts> counts() const { return std::nullopt; }
  // The folder's workflows by name, sorted.
  const std::vector<std::string>& workflow_names() const { return names_; }
  // The checked spec of the folder's workflow `name` (its nodes, edges and channels); null when
  // the folder has none of that name.
  std::shared_ptr<const graph::WorkflowSpec> workflow(std::string_view name) const;

  // Queues a run and returns its record. Errors: not_found (no such workflow: the message lists
  // them; a file that does not exist), invalid_workflow (a file that does not load: its
  // report), invalid_argument (the input sets a channel the workflow does not take: "'input'
  // sets 'x', which w does not take as input (its \"input\": a, b)"), overloaded (the queue is
  // full), thread_busy (in-process: the thread has a run in progress), cancelled (shutting
  // down), io_error (the database).
  virtual Result<RunRecord> submit(RunRequest request) = 0;
  // Queues a run that continues the interrupted thread with `value` for the node that
  // interrupted, with the workflow of the run that interrupted it. Errors: not_found (no such
  // thread), invalid_argument (the thread is not interrupted: says how it stands), and
  // submit's. `traceparent`, `controls`: as RunRequest's. A thread stopped at a breakpoint
  // (RunControls) is resumed the same way; its value reaches no node.
  virtual Result<RunRecord> resume(const std::string& thread_id, boost::json::value value,
                                   std::string traceparent, RunControls controls) = 0;
  // not_found for an unknown (or forgotten) run. `workflow` (the text) left empty.
  virtual Result<RunRecord> get(std::string_view id) = 0;
  // Errors: not_found (query.after names no run).
  virtual Result<RunList> list(const RunListQuery& query) = 0;
  // A queued run ends cancelled at once; a running one stops before its next superstep. A
  // finished run is left as it is. not_found for an unknown run.
  virtual Result<CancelOutcome> cancel(std::string_view id) = 0;
  virtual const graph::Checkpointer& checkpointer() const = 0;
  // The id of the run queued or running on the thread (the oldest); nullopt when none.
  virtual Result<std::optional<std::string>> active_run(const std::string& thread) = 0;

  // Threads outside runs (the LangGraph API's state updates, forks, copies, deletes and prunes).
  // Each refuses with thread_busy while a run is queued or running on the thread (the message
  // names it) and holds the thread's claim while it writes, so no run starts on it meanwhile.
  //
  // A new checkpoint of `thread` whose parent is `from` (a checkpoint id of the thread; "": its
  // latest), holding `writes` (channel -> new value) and `from`'s pending and metadata (with
  // `metadata` laid over it): the thread's next run goes on as it would have from `from`, with
  // the writes. It is numbered as the step after `from` when it writes, else as `from`. Errors:
  // not_found (no such thread or checkpoint), the checkpointer's. `settle`: the new checkpoint has
  // nothing pending ({"status": "done"}), so the next run starts afresh from the state instead of
  // going on with `from`'s next step.
  Result<graph::Checkpoint> branch_thread(const std::string& thread, const std::string& from,
                                          boost::json::object writes, boost::json::object metadata,
                                          bool settle = false);
  // A new root of `thread` (no parent, no state, nothing pending; `metadata` stored with it):
  // the thread's next run starts afresh, as on a new thread, while its history stays.
  Result<graph::Checkpoint> root_thread(const std::string& thread, boost::json::object metadata);
  // Every checkpoint of `from`, with the blobs they reference, under the new thread `to` (same
  // checkpoint ids). Errors: not_found (no thread `from`), invalid_argument (`to` has
  // checkpoints already, or `from` has more than 100,000), thread_busy (a run is queued or
  // running on `from`).
  Status copy_thread(const std::string& from, const std::string& to);
  // Removes the thread's checkpoints and blobs (its runs' records stay). Idempotent.
  Status delete_thread(const std::string& thread);
  // Compacts the thread to one new checkpoint holding its latest state (a snapshot with the
  // latest's pending and metadata, {"source": "prune"}): the others are removed. Returns how
  // many were. Errors: not_found (no such thread), the checkpointer's.
  Result<std::size_t> keep_latest(const std::string& thread);
  // See "Watching" above. `on_change` must be quick (post to an executor); it may be called
  // for changes that turn out to be none.
  virtual std::unique_ptr<RunWatch> watch(std::string run_id, std::function<void()> on_change) = 0;
  // The text of the messages run `run_id`'s nodes write, as it is generated (graph::
  // MessageText: an llm node's reply, piece by piece), from now until the handle is destroyed;
  // `on_text` is called on some other thread and must be quick. In-process the run's own text
  // (a watch that starts mid-message gets its text so far first); on PostgreSQL what the
  // workers publish (NOTIFY weir_text, batched every 50 ms: cluster/src/text_notify.hpp), from
  // the piece after the watch started. Pieces may be missing (a message's text always arrives
  // whole with its step): a reader stops taking a message's pieces at a gap in offsets. Null
  // when the backend has none.
  virtual std::unique_ptr<RunWatch> watch_text(
      std::string run_id, std::function<void(const graph::MessageText&)> on_text) {
    (void)run_id;
    (void)on_text;
    return nullptr;
  }
  // Stops taking runs. In-process: cancels the runs in progress and ends the queued ones as
  // cancelled; PostgreSQL: the embedded worker hands its runs back (another worker, or this
  // service's next start, continues them). Blocks until they stopped. Idempotent.
  virtual void shutdown() = 0;

 protected:
  // Keeps runs off `thread` until the returned guard is dropped: thread_busy ("thread 't' has a
  // run in progress (r-...); wait for it to end") when one is queued or running on it.
  virtual Result<std::shared_ptr<void>> hold_thread(const std::string& thread) = 0;
  virtual graph::Checkpointer& writable_checkpointer() = 0;

  std::vector<std::string> names_;
  std::map<std::string, std::shared_ptr<const graph::WorkflowSpec>, std::less<>> specs_;
};

// The one JSON shape of a run: GET /v1/runs/{id}, the events stream's end, `weir runs ID`:
// {"id", "object": "run", "workflow", "workflow_file", "workflow_sha256", "thread_id", "state",
//  "attempts", "max_attempts", "cancel_requested", "worker" (the lease owner or null),
//  "lease_expires_at_ms", "fence", "created_at_ms", "started_at_ms", "finished_at_ms" (unix ms
//  or null), "input", "resume" (only for a resume run), "result", "error" ({code, message} or
//  null), "traceparent" (the trace its spans continue, or null)}. Stored JSON text that does not
//  parse is shown as a string.
boost::json::object run_json(const RunRecord& r);
// {"object": "list", "data": [run_json...], "has_more", "last_id" (null when empty)}.
boost::json::object run_list_json(const RunList& l);

// The traceparent a run is recorded with: `given` when it is a valid W3C traceparent, else a
// new trace's (so every attempt of the run, on any worker, continues one trace).
std::string run_traceparent(std::string_view given);

// The threads of a PostgreSQL database that a queued or running run of its queue will run on,
// each with what to tell a user ("run r-... is queued on it"): what age-based retention
// (`weir store prune --older-than`) must not delete. Empty when the database has no queue
// (weir_runs is not created here). Errors: invalid_argument (the connection string), io_error.
Result<std::map<std::string, std::string>> threads_with_unfinished_runs(std::string_view db);

}  // namespace weir::cluster
