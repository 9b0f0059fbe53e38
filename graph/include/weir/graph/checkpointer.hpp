// Checkpointer: durable history of a graph's threads, one checkpoint per superstep.
//
// What a checkpoint holds. A thread (one conversation / one long-lived run) is a tree of
// checkpoints linked by `parent_id`; usually a chain, a branch where a run was resumed from an
// earlier checkpoint. A checkpoint stores only the *delta* of its step: `writes` maps each
// channel changed in that step to the channel's new full value. Its size therefore follows the
// step's writes, not the length of the history. The full state at a checkpoint is rebuilt by
// state_at(): the fold of `writes` along the parent chain, oldest first (a later write of a
// channel replaces an earlier one).
//
// Invariants (enforced by put):
//   1. (thread_id, checkpoint_id) is unique; a stored checkpoint is immutable.
//   2. A non-empty parent_id names a checkpoint already stored in the same thread, so every
//      parent chain is finite, acyclic, and ends at a checkpoint with parent_id == "".
//   3. list() and latest() order by insertion (put) order, not by id or step: after a resume
//      from an earlier checkpoint, the newest branch tip is latest().
//
// Thread safety: every method of every Checkpointer may be called from any thread at once.
// The SQLite checkpointer also tolerates other processes using the same file (WAL mode,
// busy_timeout); puts are serialised by SQLite's write lock. The PostgreSQL checkpointer
// tolerates any number of processes on one database; puts to one thread are serialised by a row
// lock on the thread, so put order is commit order.
//
// Retention. A checkpointer opened with a Retention prunes as it goes: inside a put's
// transaction, once the thread holds more than keep_last + kPruneSlack checkpoints (or its
// oldest is older than max_age), prune() runs for that thread. What prune keeps is every
// checkpoint the policy keeps plus every ancestor state_at of one of them reads (back to the
// nearest "$snapshot" checkpoint or the root), so state_at of a kept checkpoint gives the same
// state as before pruning. A thread's stored checkpoints are therefore bounded by about
// keep_last + kPruneSlack + kSnapshotEvery however long it lives (more only where branches keep
// extra ancestors alive).
//
// Failure behaviour: a put that fails stores nothing (one transaction). Read methods have no
// effect on failure. Expected failures are values:
//   invalid_argument  put with an empty thread_id/checkpoint_id, an unknown parent_id, an
//                     id that is already stored in the thread, or a value JSON text cannot
//                     carry (NaN/Infinity, nesting deeper than kMaxJsonDepth); SQLite: a
//                     row over SQLite's size limit (keep large values in the artifact store)
//   not_found         state_at for an unknown thread or checkpoint
//   corrupt_data      a stored row whose JSON does not parse, a broken parent chain, a file
//                     that is not an SQLite database (the message names path/thread/checkpoint)
//   io_error          the operating system or SQLite refused a file operation (named path)
//   unsupported       the file was written by a newer weir (its schema version is above
//                     kSqliteSchemaVersion)
//   thread_busy       claim_thread / put with a claim token while another runner holds the
//                     thread (the message names the holder and when its claim lapses)
//   unavailable       PostgreSQL: the server could not be reached, or the connection stayed
//                     lost for the whole reconnect window (see open_postgres_checkpointer)
//
// Artifacts. A checkpoint's values may reference blobs of the run's ArtifactStore
// ({"$artifact": id, ...}); that store is per process. So that a thread can be continued by
// another process, put() stores the blobs the checkpoint carries in `artifacts` with the thread,
// in the same transaction as the checkpoint: a checkpoint is never visible without the blobs it
// references. get_artifact() reads them back; delete_thread() removes them, and so does a prune
// that removes every checkpoint of the thread; nothing else does (retention bounds a thread's
// checkpoints, not its artifacts: a later checkpoint may reference any blob the thread holds).
//
// One runner per thread. claim_thread() records who runs a thread (a token, host, pid and a
// heartbeat); while the claim is live, another claim is refused with thread_busy. A claim is
// live until it is released, or until its heartbeat is older than its lease, or (same host)
// until its process is gone. put() with Checkpoint::claim_token checks, in its transaction, that
// the token still holds the thread and refreshes the heartbeat. Memory and SQLite stamp claims
// with the writer's clock; PostgreSQL with the server's (clock_timestamp()), so its clients'
// clocks need not agree. A prune never touches a claim.
//
// JSON values are copied into the checkpointer's own storage (the default memory resource), so a
// Checkpoint built on a run's accounting storage_ptr may be put and then the run's resource
// destroyed. Values returned use the default resource.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::graph {

struct Checkpoint {
  std::string thread_id;      // REQUIRES non-empty
  std::string checkpoint_id;  // REQUIRES non-empty, unique in the thread; see new_checkpoint_id
  std::string parent_id;      // "" for the first checkpoint of a thread (or of a new root)
  int64_t step = 0;           // superstep number; informational, not validated
  // channel name -> new full value of that channel (only channels changed in this step). A
  // checkpoint whose writes hold "$snapshot": true holds every channel; state_at stops there
  // (the executor writes one every 32 steps of a thread, so restoring a long thread reads a
  // bounded number of checkpoints). "$snapshot" is not a channel and never appears in state.
  boost::json::object writes;
  // Executor-defined: next nodes, sends, interrupt payload,
  // "status": "running" | "interrupted" | "done" | "failed".
  boost::json::object pending;
  boost::json::object metadata;  // free-form
  // Unix time in milliseconds, set by the checkpointer when stored; ignored by put.
  int64_t created_at_ms = 0;
  // Blobs referenced by writes/pending that the thread may not hold yet: put stores them with
  // the thread (an id the thread already holds is kept as it was). Reads leave this empty; use
  // get_artifact.
  struct Artifact {
    std::string id;  // the ArtifactStore id (SHA-256 of bytes, hex)
    std::string media_type;
    std::string bytes;
  };
  std::vector<Artifact> artifacts;
  // Non-empty: the token of the writer's claim_thread. put refuses (thread_busy) when another
  // claim holds the thread, and refreshes the claim's heartbeat. Not stored.
  std::string claim_token;
};

// Who runs a thread (claim_thread).
struct ThreadHolder {
  std::string token;         // REQUIRES non-empty; unique per claim (new_claim_token)
  std::string host;          // the claimant's host name
  int64_t pid = 0;           // the claimant's process id
  int64_t lease_ms = 0;      // REQUIRES > 0: the claim lapses this long after its last heartbeat
  int64_t since_ms = 0;      // unix ms; set by the checkpointer when claimed
  int64_t heartbeat_ms = 0;  // unix ms; set by claim, renew_thread and put with the token
};

// A fresh claim token (random, 32 hex digits). Thread safety: any thread.
std::string new_claim_token();

// This process as a claimant: gethostname(), getpid(), the token and lease given.
ThreadHolder this_process_holder(std::string token, int64_t lease_ms);

// The deepest nesting of arrays and objects a checkpoint's JSON may have (the object itself is
// level 1). Strings are stored as bytes: invalid UTF-8 is kept as it was put.
inline constexpr std::size_t kMaxJsonDepth = 1000;

// A fresh checkpoint id: the step zero-padded to 12 digits, '-', then 18 hex digits (microseconds
// since the epoch, strictly increasing within the process, and 16 random bits). Ids of one
// process sort by (step, creation); the random part makes collisions between processes writing
// one thread in the same microsecond improbable. Steps 0..999999999999 and -1 sort correctly.
// Thread safety: any thread.
std::string new_checkpoint_id(int64_t step);

// How much history a checkpointer keeps per thread. Both limits 0: keep everything.
struct Retention {
  std::size_t keep_last = 0;             // keep the newest N checkpoints (put order); 0 = no limit
  std::chrono::milliseconds max_age{0};  // drop checkpoints put longer ago than this; 0 = no limit
  bool enabled() const { return keep_last > 0 || max_age.count() > 0; }
};

// A put prunes its thread when the thread holds more than keep_last + kPruneSlack checkpoints
// (so a put pays for a prune about once every kPruneSlack puts, not on every put).
inline constexpr std::size_t kPruneSlack = 64;

class Checkpointer {
 public:
  virtual ~Checkpointer() = default;

  // Stores `cp` (its created_at_ms is ignored and set now). Errors: invalid_argument (empty
  // thread_id or checkpoint_id, parent_id not stored in the thread, checkpoint_id already
  // stored, a NaN/Infinity or nesting deeper than kMaxJsonDepth), io_error. On error nothing
  // is stored.
  virtual Status put(const Checkpoint& cp) = 0;

  // The most recently put checkpoint of the thread; nullopt for an unknown thread.
  virtual Result<std::optional<Checkpoint>> latest(std::string_view thread_id) const = 0;

  // nullopt when the thread or the checkpoint is unknown.
  virtual Result<std::optional<Checkpoint>> get(std::string_view thread_id,
                                                std::string_view checkpoint_id) const = 0;

  // At most `limit` checkpoints of the thread, newest first (put order); empty when unknown.
  virtual Result<std::vector<Checkpoint>> list(std::string_view thread_id,
                                               std::size_t limit = 100) const = 0;

  // Full channel values at checkpoint_id: the fold of `writes` along the parent chain (oldest
  // first). not_found when the thread or checkpoint is unknown. Cost: one lookup per ancestor;
  // memory: the resulting state plus one row at a time.
  virtual Result<boost::json::object> state_at(std::string_view thread_id,
                                               std::string_view checkpoint_id) const = 0;

  // Removes every checkpoint of the thread, its artifacts and its claim. Deleting an unknown
  // thread succeeds (idempotent).
  virtual Status delete_thread(std::string_view thread_id) = 0;

  // A blob stored with the thread by put (Checkpoint::artifacts); nullopt when the thread holds
  // none with that id.
  virtual Result<std::optional<Checkpoint::Artifact>> get_artifact(
      std::string_view thread_id, std::string_view artifact_id) const = 0;

  // Claims the thread for `holder`. Succeeds when the thread is unclaimed, already held by
  // holder.token, or held by a claim that is no longer live: its heartbeat is older than its
  // lease, or its host is holder.host and its pid is not a running process (taken over at
  // once). Otherwise thread_busy: "thread 'd1' is being run by pid 1234 on host h since
  // <UTC time> (last heartbeat 2 s ago); wait for it or, if that process is gone, it will be
  // taken over after 28 s". Returns the stored claim. On error nothing changes.
  virtual Result<ThreadHolder> claim_thread(std::string_view thread_id,
                                            const ThreadHolder& holder) = 0;
  // Refreshes the claim's heartbeat. thread_busy when `token` no longer holds the thread (it
  // was taken over: the message names the new holder) or the claim was released.
  virtual Status renew_thread(std::string_view thread_id, std::string_view token) = 0;
  // Drops the claim when `token` holds it; otherwise does nothing (idempotent).
  virtual Status release_thread(std::string_view thread_id, std::string_view token) = 0;
  // The thread's claim, live or lapsed; nullopt when unclaimed.
  virtual Result<std::optional<ThreadHolder>> thread_holder(std::string_view thread_id) const = 0;

  // At most `limit` thread ids, most recently updated (put) first.
  virtual Result<std::vector<std::string>> threads(std::size_t limit = 1000) const = 0;

  // Applies `policy` to the thread now: removes every checkpoint the policy does not keep and
  // no kept checkpoint's state_at needs (see Retention above); a thread none of whose
  // checkpoints the policy keeps (all older than max_age) is deleted. Returns how many
  // checkpoints were removed. A disabled policy removes nothing; an unknown thread removes
  // nothing. A thread a live claim holds (a run in flight: see claim_thread) is not pruned by
  // age: with a max_age, prune answers thread_busy naming the holder and removes nothing
  // (keep_last alone always keeps the newest checkpoint, so it applies). A put's own pruning
  // (Retention given at open) is the writer's and is not refused. One transaction: on error
  // nothing is removed. Errors: thread_busy, io_error, corrupt_data.
  virtual Result<std::size_t> prune(std::string_view thread_id, const Retention& policy) = 0;
};

using CheckpointerPtr = std::unique_ptr<Checkpointer>;

// Keeps everything in process memory, forever (until delete_thread): for tests and short-lived
// processes. Never fails with io_error.
// `retention`: see Retention (default: keep everything).
std::unique_ptr<Checkpointer> make_memory_checkpointer(Retention retention = {});

// A memory checkpointer whose checkpoints are bounded: each costs the bytes of its writes',
// pending's and metadata's JSON text plus its artifacts' bytes plus kMemoryCheckpointOverhead.
// A long string (256 bytes or more) of a thread's writes is kept, and costs, once per thread
// however many of its checkpoints hold it (a chat's message window repeats every step).
// A put over max_bytes, or that `budget` refuses (charged to `category`), is
// memory_budget_exceeded naming the thread and the limit, and stores nothing; pruning and
// delete_thread give the bytes back.
struct MemoryCheckpointerOptions {
  Retention retention;
  std::size_t max_bytes = 0;  // 0: no bound of its own
  // One thread's share of it (0: none): a put that would take its thread past this is refused
  // (memory_budget_exceeded naming the thread), so one long thread cannot starve the others.
  std::size_t max_thread_bytes = 0;
  MemoryBudget* budget = nullptr;  // REQUIRES: outlives the checkpointer
  BudgetCategory category = BudgetCategory::history;
};
inline constexpr std::size_t kMemoryCheckpointOverhead = 256;
std::unique_ptr<Checkpointer> make_memory_checkpointer(const MemoryCheckpointerOptions& options);

// The on-disk schema version this build writes and reads (table `schema_version`). A file with
// a newer version is refused with Errc::unsupported; an older one is migrated on open.
// Version 2 added the tables `artifacts` and `thread_holders`; version 3 the `snapshot` column
// (prune reads it instead of parsing writes). A version 1 or 2 file is migrated on open, in one
// transaction (snapshots already stored count as ordinary checkpoints for pruning, which only
// keeps more).
inline constexpr int kSqliteSchemaVersion = 3;

// Opens (creating the file and schema when missing) an SQLite checkpointer at `db`.
// The connection uses WAL journaling, synchronous=NORMAL (a committed put survives a process
// crash; a power loss may drop the last puts but never corrupts the file) and a 5 s busy_timeout
// for locks held by other processes. One connection, guarded by a mutex; statements are
// prepared once. Errors name the path: io_error (cannot open or create, e.g. a directory or a
// missing parent directory), corrupt_data (not an SQLite database), unsupported (newer schema).
// `retention`: see Retention (default: keep everything).
Result<std::unique_ptr<Checkpointer>> open_sqlite_checkpointer(const std::filesystem::path& db,
                                                               Retention retention = {});

// The PostgreSQL schema version this build writes and reads (table `weir_schema_version`). One
// version covers every weir table in the database, the run queue's (cluster::RunQueue) too:
// version 2 brought weir_runs under it, with its times in unix ms like every other table's;
// version 3 added weir_runs.traceparent, version 4 weir_runs.seq, version 5 the one-statement
// put (pg/include/weir/pg/schema.hpp lists them all).
inline constexpr int kPostgresSchemaVersion = 5;

struct PostgresOptions {
  Retention retention;  // see Retention (default: keep everything)
  // How long a call keeps re-establishing a lost connection (a server restart, an administrator
  // ending the session), with backoff, before it fails with unavailable. A queue worker passes
  // its lease.
  std::chrono::milliseconds reconnect_window{10000};
};

// Connects to PostgreSQL with libpq and creates or migrates weir's tables (weir_checkpoints,
// weir_threads, weir_artifacts, weir_thread_holders, weir_runs, weir_schema_version, sequences
// weir_checkpoint_seq and weir_run_fence_seq) under an advisory lock, so several processes may
// open one database at once. `conninfo` is anything libpq accepts: a postgres:// or
// postgresql:// URI or key=value pairs (passwords may come from the string, PGPASSWORD or
// ~/.pgpass). One connection, guarded by a mutex. Every put is one transaction (the checkpoint,
// its artifacts and the claim check). JSON is stored as bytea, so values round-trip byte for
// byte as in SQLite.
// A lost connection is re-established and the call run again, for up to
// options.reconnect_window: the caller does not see a session the server ended. A put whose
// COMMIT's answer was lost finds its checkpoint (its id is unique) and succeeds without storing
// it twice. Errors name the server as user@host:port/dbname, never the password:
// invalid_argument (a connection string libpq cannot parse, a value PostgreSQL cannot hold),
// unavailable (cannot connect; the connection stayed lost for the whole window), io_error (the
// server refused a statement: the message gives its text and SQLSTATE), unsupported (a newer
// schema version: both versions named), corrupt_data (as for SQLite).
Result<std::unique_ptr<Checkpointer>> open_postgres_checkpointer(std::string_view conninfo,
                                                                 const PostgresOptions& options);
// The same with the default options and `retention`.
Result<std::unique_ptr<Checkpointer>> open_postgres_checkpointer(std::string_view conninfo,
                                                                 Retention retention = {});

// True for a postgres:// or postgresql:// URI: what open_checkpointer hands to PostgreSQL.
bool is_postgres_uri(std::string_view store);

// A store (file path or PostgreSQL connection string) as it may be shown to a user: any password
// in it replaced by "***". Thread safety: any thread.
std::string redact_store(std::string_view store);

// Opens the checkpointer a `--store` names: PostgreSQL for a postgres:// or postgresql:// URI,
// else an SQLite file at that path. Errors: those of the backend opened.
Result<std::unique_ptr<Checkpointer>> open_checkpointer(std::string_view store,
                                                        Retention retention = {});

}  // namespace weir::graph
