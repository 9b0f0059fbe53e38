// Runs: what weir serve's runs API (/v1/runs, /v1/threads) stands on. Two backends with one
// contract:
//   in-process  (no --db): runs execute on this server's GraphRuntime, at most max_runs at once;
//               the others wait in a bounded queue (max_queued_runs; beyond it submit fails
//               with overloaded, answered 429). Checkpoints live in memory: a restart forgets
//               every run and thread. The newest keep_finished finished runs are remembered;
//               an older one is forgotten with its thread (when the thread is the run's own).
//   PostgreSQL  (--db URL): submit queues the run in weir_runs (cluster::RunQueue) and an
//               embedded cluster::Worker runs up to max_runs of them here; `weir worker`
//               processes on other machines drain the same queue. Runs and checkpoints
//               survive any process; overloaded when max_queued_runs runs are queued already.
// A run's checkpoints are put on its thread with metadata {"queue_run": <run id>, ...}, which is
// how the events stream (the service) tells one run's steps from another's on a shared thread.
//
// Workflows: every *.json file in the folder, loaded and checked at open (a bad file refuses
// the start, naming it); a run names one by its "name" (the file's stem when it has none).
// A thread runs one run at a time: in-process, a submit or resume onto a thread with a run
// queued or running fails with thread_busy; on PostgreSQL the worker's thread claim orders them.
//
// Thread safety: every method may be called from any thread. Calls may block (PostgreSQL):
// the service calls them off its I/O thread.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/json/fwd.hpp>

#include "weir/cluster/run_queue.hpp"
#include "weir/runtime/error.hpp"

namespace weir::graph {
class Checkpointer;
}

namespace weir::cluster {

struct RunsConfig {
  std::filesystem::path workflows;  // REQUIRES: a folder
  std::string db;                   // "": in-process; else a PostgreSQL connection string
  std::size_t max_runs = 8;         // runs executing at once in this process
  std::size_t max_queued_runs = 256;
  std::size_t keep_finished = 1000;                 // in-process: finished runs remembered
  std::size_t memory_limit = std::size_t{1} << 30;  // the runs' state and artifacts in memory
  std::function<void(const std::string&)> log;      // one line per run event; may be null
};

class Runs {
 public:
  // Errors: invalid_argument (not a folder, no workflow in it, two with one name),
  // invalid_workflow (a file that does not load: its report), io_error (the database).
  static Result<std::unique_ptr<Runs>> open(const RunsConfig& config);
  virtual ~Runs() = default;

  // "in-process" or "postgres 'user@host:port/db'".
  virtual std::string description() const = 0;
  // Sorted.
  const std::vector<std::string>& workflow_names() const { return names_; }

  // Queues a run of `workflow` with `input` on `thread_id` ("" = a thread named like the run).
  // Errors: not_found (no such workflow: the message lists them), overloaded (queue full),
  // thread_busy (in-process: the thread has a run in progress), cancelled (shutting down).
  virtual Result<std::string> submit(const std::string& workflow, const boost::json::object& input,
                                     const std::string& thread_id) = 0;
  // Queues a run that continues the interrupted thread with `value` for the node that
  // interrupted, with the workflow of the run that interrupted it. Errors: not_found (no such
  // thread), invalid_argument (the thread is not interrupted: says how it stands), and
  // submit's.
  virtual Result<std::string> resume(const std::string& thread_id,
                                     const boost::json::value& value) = 0;
  // not_found for an unknown (or forgotten) run. `workflow` left empty.
  virtual Result<cluster::RunRecord> get(const std::string& id) = 0;
  // Newest first.
  virtual Result<std::vector<cluster::RunRecord>> list(std::size_t limit) = 0;
  // A queued run ends cancelled at once; a running one stops before its next superstep.
  // Returns the state after the call. not_found for an unknown run.
  virtual Result<cluster::RunState> cancel(const std::string& id) = 0;
  virtual const graph::Checkpointer& checkpointer() const = 0;
  // Stops taking runs. In-process: cancels the runs in progress and ends the queued ones as
  // cancelled; PostgreSQL: the embedded worker hands its runs back (another worker, or this
  // server's next start, continues them). Blocks until they stopped. Idempotent.
  virtual void shutdown() = 0;

 protected:
  std::vector<std::string> names_;
};

}  // namespace weir::cluster
