// Worker: drains a RunQueue. It claims runs (FOR UPDATE SKIP LOCKED), runs up to max_runs at
// once on one GraphRuntime under one MemoryBudget, keeps their leases fresh, and records how
// each ended. Steps 2, 3 and the run itself are the one executor's (run_executor.hpp in
// cluster/src), which the run service's in-process backend uses too. Between claims it waits
// on LISTEN weir_runs (a notification wakes it at once) for at most `poll`, so it never spins
// and never misses work for longer than that.
//
// A run, from claim to end:
//   1. RunQueue::claim_many (as many runs as there are free slots, in one statement): state
//      running, attempts + 1, a new fence, lease = now + lease (the database's clock).
//   2. The checkpointer's claim on the run's thread under claim_token(fence), lease `lease`.
//      Refused (another runner still holds the thread, its claim not yet lapsed): the run is
//      handed back without counting the attempt, claimable again after one lease.
//   3. If the thread's latest checkpoint is this run's and says it finished (a worker died
//      between its last checkpoint and recording the end), the end is recorded from it.
//      Otherwise the graph runs (GraphRuntime::async_invoke on the thread): it continues from the
//      thread's last checkpoint when there is an unfinished one, and puts every superstep's
//      checkpoint with the claim token, so a worker that lost the thread commits no more steps.
//   4. Every lease / 3 the worker renews the queue leases of all its runs (RunQueue::renew_all,
//      one statement) and each run's thread claim. If either
//      was taken over, or `weir cancel` asked (a notification, or the renewal's answer), the
//      run's cancel flag is set: it stops before its next superstep.
//   5. The end is recorded under the fence (RunQueue::finish): succeeded (the workflow's output
//      channels, or the whole state), interrupted (the interrupt's node and payload), cancelled,
//      or failed (the run's error code and message). Then the thread claim is released.
// stop() (SIGTERM in `weir worker`) stops claiming, cancels the runs it holds and hands them back
// unfinished (attempt not counted), so another worker continues each from its last checkpoint.
//
// Nodes see RunOptions::run_id "<run id>.<attempt>" (NodeContext::run_id), and the checkpoints'
// metadata records {"queue_run": id, "attempt": n, "workflow_sha256": ...}.
//
// Thread safety: run() from one thread; stop() from any thread or a signal handler.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "weir/cluster/run_queue.hpp"
#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::cluster {

struct WorkerOptions {
  std::string db;            // REQUIRES non-empty: libpq connection string (postgres://...)
  std::size_t max_runs = 4;  // REQUIRES >= 1: runs held at once
  std::chrono::milliseconds lease = kDefaultLease;  // REQUIRES >= 100 ms
  // One budget for every run this worker holds (run state and artifacts kept in memory). A run
  // is claimed only while less than 90% of it is in use; a run that would go over fails with
  // memory_budget_exceeded (the graph's own fence).
  std::size_t memory_limit = std::size_t{1} << 30;
  bool once = false;  // claim one run, wait for it to end, return
  // Return once nothing is held and the queue has no run left that could be claimed now or
  // later: none queued (a hand-back waits out its delay), none running anywhere (a run held by
  // a worker that died becomes claimable when its lease lapses; this worker waits for that).
  bool exit_when_idle = false;
  std::string name;                      // the lease owner shown by `weir runs`; "" = "host:pid"
  std::chrono::milliseconds poll{2000};  // the longest wait for work without a notification
  // At start, how long to keep trying to reach a database that refuses or is not up yet
  // (backoff from 250 ms to 5 s between tries, each failure logged); 0: try once.
  std::chrono::milliseconds connect_timeout{30000};
  std::function<void(const std::string&)>
      log;  // one line per event (claim, end, loss); may be null
  // Tracing (docs/tracing.md): each attempt's run records its spans under the run record's
  // traceparent, so a run continued by another worker after a crash stays one trace. Null:
  // off. REQUIRES: outlives run().
  trace::Tracer* tracer = nullptr;
  // The C++ graphs this worker runs (CppGraph): a run naming one it lacks fails, naming it.
  std::vector<CppGraph> graphs;
};

struct WorkerStats {
  std::size_t claimed = 0, succeeded = 0, failed = 0, cancelled = 0, interrupted = 0;
  std::size_t lost = 0;         // taken over by another worker (the fence moved on)
  std::size_t handed_back = 0;  // given back unfinished (thread busy, or stop())
};

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs until stop(), or as `once` / `exit_when_idle` say. Errors (at start only: afterwards
  // database errors are logged and retried): invalid_argument (options, connection string),
  // unavailable (cannot connect within connect_timeout: the message names the tries and the
  // last reason), io_error (cannot create the queue's tables), unsupported (a newer schema).
  // Returns what it did. A run whose database stays unreachable for a whole lease is handed
  // back (or left to lapse), never recorded as failed.
  Result<WorkerStats> run();
  // Asks run() to stop (see above). Async-signal-safe.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::cluster
