// weir's tables in a PostgreSQL database, all of them under one schema version and one migration
// path: the checkpointer's (weir_checkpoints, weir_threads, weir_artifacts, weir_thread_holders,
// sequence weir_checkpoint_seq) and the run queue's (weir_runs, sequence weir_run_fence_seq).
// Whoever opens the database first (a checkpointer or a run queue) creates or migrates all of
// them, in one transaction under an advisory lock, so processes may open one database at once.
//
// Versions (weir_schema_version holds one row per version applied; the highest counts):
//   1  the checkpointer's tables (weir 0.2's checkpointer); weir_runs, when present, was made
//      by the run queue outside any version, with TIMESTAMPTZ times and TEXT JSON columns
//   2  weir_runs under the version: every time a BIGINT of unix milliseconds (the checkpoints'
//      representation; the server's clock where the server stamps it), the JSON columns
//      (input, resume, result) BYTEA holding JSON text as the checkpoints' are. A version-1
//      database's weir_runs is converted in place.
//   3  weir_runs.traceparent (TEXT, '' when none): the W3C trace context every attempt of the
//      run continues. Added by a migration step, not by the queue's open (a weir_runs made by a
//      weir with traces before version 2 has it already and keeps its values).
//   4  weir_runs.seq (sequence weir_run_seq): the order runs were queued in, which breaks ties
//      of created_at (milliseconds) in listings and claims; the indexes on created_at include it.
//      weir_runs.controls (BYTEA JSON text, NULL for none): a run's breakpoints and
//      recursion_limit.
//   5  weir_put_checkpoint(): the checkpointer's put as one statement (a PL/pgSQL function
//      that locks the thread, checks the claim, refuses a duplicate or an unknown parent by
//      raising SQLSTATE WP001 / WP002 / WP003, and stores the checkpoint).
// A database with a newer version than kSchemaVersion is refused (unsupported, naming both).
// Thread safety: none (a Connection's).
#pragma once

#include "weir/pg/connection.hpp"

namespace weir::pg {

inline constexpr int kSchemaVersion = 5;

// Creates or migrates weir's objects. Errors: unsupported ("the database has weir schema
// version 6, newer than this weir build reads (5); use a newer weir, or another database"),
// corrupt_data (a version below 1), those of the connection. On error nothing changed.
Status ensure_schema(Connection& c);

}  // namespace weir::pg
