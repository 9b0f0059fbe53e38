// RunQueue: runs waiting for, held by and finished on workers, in one PostgreSQL table
// (weir_runs) beside the PostgreSQL checkpointer's tables. `weir submit`, `weir worker`,
// `weir runs` and `weir cancel` are its clients; docs/scale-out.md states the guarantees.
//
// A run carries its workflow (the file's text, its SHA-256 and its absolute path at submit time)
// and its input, so any worker can run it; its checkpoints go to the thread `thread_id`
// (default: the run's id) of the PostgreSQL checkpointer on the same database.
//
// Leases. A worker holds a run through a lease: `lease_owner`, `lease_expires` (unix ms by the
// server's clock) and `fence`, a number taken from a sequence at every claim, so a later claim
// always has a larger fence. Every call a worker makes about a run it holds
// (renew, finish, give_back) names the fence and changes nothing once the fence moved on
// (another worker reclaimed the run): such a call fails with thread_busy. What makes committed
// supersteps exactly-once is the checkpointer's thread claim, taken under the same token
// (claim_token(fence)) right after the queue claim: every checkpoint is put with that token in
// a transaction that checks it (Checkpointer::put), so a worker that lost its run commits
// nothing more. Whatever ends a run or hands it back (finish, give_back, a claim that records it
// cancelled or attempts_exhausted) deletes that thread claim in the same statement: a holder
// that was only paused or cut off, and goes on, has its next put refused.
//
// States: queued -> running -> succeeded | failed | cancelled | interrupted; a running run whose
// lease lapsed is claimed again (attempts + 1) and continues from its last checkpoint; a run
// that lapses with attempts == max_attempts fails with attempts_exhausted instead. A cancel of
// a queued run ends it at once; of a running one, it sets cancel_requested and notifies the
// holder, which stops it before its next superstep (a `sleep` node within 50 ms).
//
// Notifications: channel "weir_runs", payload "queued" after a submit or a give-back, and
// "cancel <id>" after a cancel. Workers LISTEN on it (Worker); nothing depends on a notification
// arriving: a worker also looks for work at least every few seconds.
//
// Storage: weir_runs is one of weir's tables under one schema version and migration path
// (weir/pg, docs/scale-out.md): the first open creates or migrates all of them, and a database
// of a newer weir is refused (unsupported, naming both versions).
//
// Thread safety: every method may be called from any thread; calls share one connection and
// queue on its mutex. Failure behaviour: each call is one statement or one transaction; on error
// nothing changed. A lost connection (a server restart, an administrator ending the session) is
// re-established and the call run again, for up to QueueOptions::reconnect_window; a call whose
// answer was lost after the server carried it out is settled by the run's id or fence (a
// submit is not queued twice, a claim finds the run it claimed, an end or a hand-back is not
// reported as lost). Errors name the server as postgres 'user@host:port/dbname', never its
// password: invalid_argument (bad connection string, bad argument), unavailable (cannot connect,
// or the connection stayed lost for the whole window), io_error (a statement refused),
// not_found (unknown run id), thread_busy (the fence moved on), unsupported (newer schema).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "weir/runtime/error.hpp"

namespace weir::graph {
class CompiledGraph;
}

namespace weir::cluster {

enum class RunState { queued, running, succeeded, failed, cancelled, interrupted };
const char* run_state_name(RunState s);
std::optional<RunState> parse_run_state(std::string_view s);
inline bool is_terminal(RunState s) {
  return s != RunState::queued && s != RunState::running;
}

// The default lease of a worker's runs, and how many claims a run gets by default.
inline constexpr std::chrono::milliseconds kDefaultLease{10000};
inline constexpr int kDefaultMaxAttempts = 3;
// The longest delay before a run may start (RunRequest::delay, SubmitRequest::delay): a day.
inline constexpr std::chrono::milliseconds kMaxRunDelay{std::chrono::hours(24)};

// A graph written in C++ that runs may name beside workflow files (weir serve's assistants, a
// worker's runs): its name (a run's workflow name), what it does, and the graph. A run of it
// carries cpp_graph_text(name) where a workflow file's run carries the file's text, so the
// process that executes it must have a graph of that name too (RunServiceOptions::graphs, or
// WorkerOptions::graphs for a worker); one that has none fails the run, naming the graph.
struct CppGraph {
  std::string name, description;
  std::shared_ptr<const graph::CompiledGraph> graph;  // REQUIRES non-null
};
// {"$cpp_graph": name}, and back: the name, or nullopt for any other text.
std::string cpp_graph_text(std::string_view name);
std::optional<std::string> cpp_graph_name(std::string_view workflow_text);

// A run's own controls, beside its workflow's (LangGraph's interrupt_before / interrupt_after
// and config.recursion_limit): graph::RunOptions's fields of those names for every attempt.
// What the caller said of the run beside them travels along too (the LangGraph API's run
// metadata and multitask_strategy, shown with the run), unread by the executor.
struct RunControls {
  std::vector<std::string> interrupt_before, interrupt_after;  // node names, "*": every node
  int recursion_limit = 0;         // 0: the workflow's limits.recursion_limit; else 1 up to it
  std::vector<std::string> go_to;  // the first step's nodes (graph::RunOptions::go_to)
  // Sends for the first step: a node and its input each (graph::RunOptions::go_to_sends).
  std::vector<std::pair<std::string, boost::json::value>> go_to_sends;
  boost::json::object metadata;
  std::string multitask_strategy;
  std::string assistant_id;  // the LangGraph assistant the run was asked of ("": its graph's)
  // Record subgraphs' steps (graph::RunOptions::record_subgraph_steps): LangGraph's
  // stream_subgraphs, which every stream of the run then shows.
  bool subgraph_steps = false;
  bool empty() const {
    return interrupt_before.empty() && interrupt_after.empty() && recursion_limit == 0 &&
           go_to.empty() && go_to_sends.empty() && metadata.empty() && multitask_strategy.empty() &&
           assistant_id.empty() && !subgraph_steps;
  }
};
// RunRecord::controls's text ("" when empty) and back. Errors: invalid_argument (not the text
// of controls).
std::string controls_text(const RunControls& c);
Result<RunControls> parse_controls(std::string_view text);

struct RunRecord {
  std::string id;
  std::string workflow_name;
  std::string workflow_file;    // absolute path at submit; relative paths inside resolve there
  std::string workflow_sha256;  // hex, of `workflow`
  std::string workflow;         // the file's text (empty in list())
  std::string input;            // JSON text of an object
  // JSON text of the value a resume run hands to the node its thread is interrupted at
  // (GraphRuntime::async_resume); "" for a run that starts or continues its thread.
  std::string resume;
  std::string thread_id;
  RunState state = RunState::queued;
  int attempts = 0;      // claims so far (the first run counts)
  int max_attempts = 1;  // claims allowed
  std::string lease_owner;
  int64_t lease_expires_ms = 0;  // unix ms, the server's clock; 0 when not held
  int64_t fence = 0;             // the current holder's fence; 0 before the first claim
  bool cancel_requested = false;
  std::string result;      // JSON text: the output channels (succeeded) or the interrupt
  std::string error_code;  // errc_name of the failure ("" unless failed or cancelled)
  std::string error;
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0;  // unix ms, server clock; 0: not yet
  // The W3C traceparent every attempt's spans continue (docs/tracing.md): the run keeps one
  // trace however many workers it takes. "" when none was recorded.
  std::string traceparent;
  std::string controls;  // controls_text(RunControls): "" when the run has none
};

struct SubmitRequest {
  std::string workflow;       // REQUIRES non-empty: the file's text
  std::string workflow_file;  // absolute path
  std::string workflow_name;
  std::string input = "{}";                // JSON text of an object (not checked here)
  std::string thread_id;                   // "" = the run's id
  std::string resume;                      // "" or JSON text: see RunRecord::resume
  int max_attempts = kDefaultMaxAttempts;  // REQUIRES >= 1
  std::string traceparent;                 // see RunRecord::traceparent; "" = none
  std::string controls;                    // see RunRecord::controls; "" = none
  bool enqueue =
      false;  // queue behind the thread's run instead of thread_busy (workers order them)
  // Claimable no earlier than this long after the submit, by the database's clock (not_before),
  // and no earlier than a run queued on the thread before it (so an enqueued run does not pass
  // a delayed one). 0: at once (or when that run is).
  std::chrono::milliseconds delay{0};
};

// The checkpointer claim token of the holder with this fence ("run-fence-<fence>").
std::string claim_token(int64_t fence);

struct QueueOptions {
  // How long a call keeps re-establishing a lost connection before it fails with unavailable
  // (a worker passes its lease).
  std::chrono::milliseconds reconnect_window = kDefaultLease;
};

class RunQueue {
 public:
  // Connects, and creates or migrates weir's tables (weir_runs, its fence sequence and the
  // checkpointer's) under an advisory lock.
  static Result<std::unique_ptr<RunQueue>> open(std::string_view conninfo,
                                                const QueueOptions& options = {});
  ~RunQueue();

  // "postgres 'user@host:port/dbname'"
  const std::string& description() const;

  // Queues a run and notifies workers; returns its id ("r-" and 16 hex digits).
  Result<std::string> submit(const SubmitRequest& req);
  // Newest first, at most `limit`; `workflow` left empty. `after` non-empty: only the runs
  // older than that run (the next page; an unknown id gives none).
  Result<std::vector<RunRecord>> list(std::size_t limit = 100,
                                      std::optional<RunState> only = std::nullopt,
                                      std::string_view after = {});
  // How many runs are in `state` now.
  Result<std::size_t> count(RunState state);
  // not_found: "no run 'r-..' in postgres '...'".
  Result<RunRecord> get(std::string_view id);
  // The id of the oldest queued or running run on the thread; nullopt when none.
  Result<std::optional<std::string>> unfinished_on(std::string_view thread_id);
  // A queued run ends as cancelled at once; a running one gets cancel_requested and its worker
  // a notification. A finished run is left as it is. Returns the state after the call.
  Result<RunState> cancel(std::string_view id);

  // --- for workers ---
  // Claims the oldest claimable run for `owner` with a lease of `lease`: a queued run, or a
  // running one whose lease lapsed (the database's clock). Such a lapsed run that used all its
  // attempts is failed (attempts_exhausted) and one with cancel_requested is cancelled instead,
  // and the next is tried. FOR UPDATE SKIP LOCKED: workers never wait on each other's claims.
  // A run whose id is in `running_here` is never taken (the caller still runs it: its lease can
  // have lapsed while the database was out of reach). nullopt when nothing is claimable. The
  // claim's fence is taken before its statement, so a claim whose answer was lost finds its run
  // again.
  Result<std::optional<RunRecord>> claim(std::string_view owner, std::chrono::milliseconds lease,
                                         const std::vector<std::string>& running_here = {});
  // claim for up to `max` runs in one statement (and one more for their fences; again for as
  // many as it ended): the runs claimed, oldest first, none when nothing is claimable. When the
  // database fails after some were claimed, those are returned (the next call tries again).
  Result<std::vector<RunRecord>> claim_many(std::string_view owner, std::chrono::milliseconds lease,
                                            const std::vector<std::string>& running_here,
                                            std::size_t max);
  // Extends the lease to now + lease. Returns cancel_requested. thread_busy when the fence
  // moved on (the message names the new holder) or the run is no longer running.
  Result<bool> renew(std::string_view id, int64_t fence, std::chrono::milliseconds lease);
  // renew for every run a worker holds, in one statement: per run, in order, what renew returns
  // for it. The outer error is the database's (nothing was renewed, or it is not known what).
  struct Lease {
    std::string id;
    int64_t fence = 0;
  };
  Result<std::vector<Result<bool>>> renew_all(const std::vector<Lease>& runs,
                                              std::chrono::milliseconds lease);
  // Records the end: state (succeeded, failed, cancelled, interrupted), result JSON text ("" for
  // none), error code and message. thread_busy when the fence moved on (nothing is recorded).
  Status finish(std::string_view id, int64_t fence, RunState state, std::string_view result,
                std::string_view error_code, std::string_view error);
  // Hands the run back unfinished: queued again without counting this attempt, claimable after
  // `delay`, and notifies workers. thread_busy when the fence moved on.
  Status give_back(std::string_view id, int64_t fence, std::chrono::milliseconds delay,
                   std::string_view why);

 private:
  struct Impl;
  explicit RunQueue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::cluster
