#include "weir/pg/schema.hpp"

#include <string>

namespace weir::pg {
namespace {

// Any constant: the advisory lock that serialises creating and migrating weir's objects (the
// key the checkpointer used for its tables before the run queue joined the version).
constexpr int64_t kSchemaLockKey = 0x77656972'00000001;  // "weir" 1

// Version 1: the checkpointer's tables. `seq` comes from one sequence, taken while the thread's
// row in weir_threads is locked, so within a thread it follows commit order (list()/latest()
// order by it) and across threads it orders threads() by recency. `snapshot` mirrors
// "$snapshot" in writes, for prune. Claim times come from the server's clock.
constexpr const char* kVersion1 = R"sql(
CREATE SEQUENCE IF NOT EXISTS weir_checkpoint_seq;
CREATE TABLE IF NOT EXISTS weir_checkpoints (
  thread_id     TEXT    NOT NULL,
  checkpoint_id TEXT    NOT NULL,
  parent_id     TEXT    NOT NULL DEFAULT '',
  step          BIGINT  NOT NULL,
  seq           BIGINT  NOT NULL,
  snapshot      BOOLEAN NOT NULL DEFAULT false,
  writes        BYTEA   NOT NULL,  -- JSON text of an object: channel -> new full value
  pending       BYTEA   NOT NULL,  -- JSON text of an object
  metadata      BYTEA   NOT NULL,  -- JSON text of an object
  created_at    BIGINT  NOT NULL,  -- unix ms
  PRIMARY KEY (thread_id, checkpoint_id)
);
CREATE INDEX IF NOT EXISTS weir_checkpoints_latest ON weir_checkpoints (thread_id, seq);
CREATE TABLE IF NOT EXISTS weir_threads (
  thread_id   TEXT   NOT NULL PRIMARY KEY,
  updated_seq BIGINT NOT NULL,
  updated_at  BIGINT NOT NULL  -- unix ms
);
CREATE INDEX IF NOT EXISTS weir_threads_recent ON weir_threads (updated_seq);
CREATE TABLE IF NOT EXISTS weir_artifacts (
  thread_id   TEXT   NOT NULL,
  artifact_id TEXT   NOT NULL,
  media_type  TEXT   NOT NULL,
  bytes       BYTEA  NOT NULL,
  created_at  BIGINT NOT NULL,  -- unix ms
  PRIMARY KEY (thread_id, artifact_id)
);
CREATE TABLE IF NOT EXISTS weir_thread_holders (
  thread_id TEXT   NOT NULL PRIMARY KEY,
  token     TEXT   NOT NULL,
  host      TEXT   NOT NULL,
  pid       BIGINT NOT NULL,
  lease_ms  BIGINT NOT NULL,
  since     BIGINT NOT NULL,  -- unix ms, the server's clock
  heartbeat BIGINT NOT NULL   -- unix ms, the server's clock; the claim lapses at heartbeat + lease_ms
);
)sql";

// Version 2: the run queue's table, its times in unix ms as every other weir table's, and the
// server's clock in unix ms as a function (what claims, leases and a run's times are stamped
// with).
constexpr const char* kVersion2 = R"sql(
CREATE OR REPLACE FUNCTION weir_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE
  AS 'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8';
CREATE SEQUENCE IF NOT EXISTS weir_run_fence_seq;
CREATE TABLE IF NOT EXISTS weir_runs (
  id               TEXT    NOT NULL PRIMARY KEY,
  workflow_name    TEXT    NOT NULL,
  workflow_file    TEXT    NOT NULL,
  workflow         TEXT    NOT NULL,
  workflow_sha256  TEXT    NOT NULL,
  input            BYTEA   NOT NULL,  -- JSON text of an object
  resume           BYTEA,             -- JSON text, or NULL
  thread_id        TEXT    NOT NULL,
  state            TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'succeeded',
                             'failed', 'cancelled', 'interrupted')),
  attempts         INTEGER NOT NULL DEFAULT 0,
  max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
  lease_owner      TEXT,
  lease_expires    BIGINT,            -- unix ms, the server's clock
  fence            BIGINT  NOT NULL DEFAULT 0,
  cancel_requested BOOLEAN NOT NULL DEFAULT false,
  not_before       BIGINT,            -- unix ms, the server's clock
  result           BYTEA,             -- JSON text, or NULL
  error_code       TEXT,
  error            TEXT,
  created_at       BIGINT  NOT NULL DEFAULT weir_now_ms(),
  started_at       BIGINT,            -- unix ms, the server's clock
  finished_at      BIGINT             -- unix ms, the server's clock
);
CREATE INDEX IF NOT EXISTS weir_runs_open ON weir_runs (created_at)
  WHERE state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS weir_runs_recent ON weir_runs (created_at);
)sql";

// Version 3: a run's W3C traceparent (docs/tracing.md), which every attempt's spans continue.
// IF NOT EXISTS: a weir_runs made outside the versions by a weir with traces (before the queue
// joined the version) already has it, and version 2's conversion kept it.
constexpr const char* kVersion3 = R"sql(
ALTER TABLE weir_runs ADD COLUMN IF NOT EXISTS traceparent TEXT NOT NULL DEFAULT '';
)sql";

// Version 4: the order runs were queued in. created_at is in milliseconds and a busy queue takes
// several runs a millisecond: seq breaks those ties, so listing pages and claims keep the
// submission order (rows already there are numbered in table order when the column is added).
// And a run's own controls (cluster::RunControls: breakpoints, recursion_limit), NULL for none.
constexpr const char* kVersion4 = R"sql(
CREATE SEQUENCE IF NOT EXISTS weir_run_seq;
ALTER TABLE weir_runs ADD COLUMN IF NOT EXISTS seq BIGINT NOT NULL DEFAULT nextval('weir_run_seq');
ALTER TABLE weir_runs ADD COLUMN IF NOT EXISTS controls BYTEA;  -- JSON text, or NULL
DROP INDEX IF EXISTS weir_runs_open;
DROP INDEX IF EXISTS weir_runs_recent;
CREATE INDEX weir_runs_open ON weir_runs (created_at, seq) WHERE state IN ('queued', 'running');
CREATE INDEX weir_runs_recent ON weir_runs (created_at, seq);
)sql";

// Version 5: a checkpoint put as one statement (the checkpointer's put, graph/src/
// checkpointer_postgres.cpp): lock (or create) the thread's row, check the put's claim (and
// renew its heartbeat), refuse a duplicate id or an unknown parent, store the checkpoint with
// the next seq and stamp the thread. A refusal raises one of weir's SQLSTATEs, so nothing of
// the put stays (the thread row it created is rolled back with it): WP001 duplicate, WP002
// unknown parent, WP003 the claim is not the put's. One round trip where the put was eight,
// and its plans are cached by PL/pgSQL per session.
constexpr const char* kVersion5 = R"sql(
CREATE OR REPLACE FUNCTION weir_put_checkpoint(
    p_thread TEXT, p_id TEXT, p_parent TEXT, p_step BIGINT, p_writes BYTEA, p_pending BYTEA,
    p_metadata BYTEA, p_created BIGINT, p_snapshot BOOLEAN, p_token TEXT)
  RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  held TEXT;
  s BIGINT;
BEGIN
  INSERT INTO weir_threads (thread_id, updated_seq, updated_at) VALUES (p_thread, 0, 0)
    ON CONFLICT (thread_id) DO UPDATE SET updated_seq = weir_threads.updated_seq;
  IF p_token <> '' THEN
    SELECT token INTO held FROM weir_thread_holders WHERE thread_id = p_thread FOR UPDATE;
    IF held IS DISTINCT FROM p_token THEN
      RAISE EXCEPTION 'the thread is no longer held by this put''s claim' USING ERRCODE = 'WP003';
    END IF;
    UPDATE weir_thread_holders SET heartbeat = weir_now_ms()
      WHERE thread_id = p_thread AND token = p_token;
  END IF;
  IF EXISTS (SELECT 1 FROM weir_checkpoints WHERE thread_id = p_thread AND checkpoint_id = p_id)
  THEN
    RAISE EXCEPTION 'the checkpoint is already stored' USING ERRCODE = 'WP001';
  END IF;
  IF p_parent <> '' AND NOT EXISTS (SELECT 1 FROM weir_checkpoints
                                    WHERE thread_id = p_thread AND checkpoint_id = p_parent) THEN
    RAISE EXCEPTION 'the parent is not stored in the thread' USING ERRCODE = 'WP002';
  END IF;
  INSERT INTO weir_checkpoints (thread_id, checkpoint_id, parent_id, step, writes, pending,
                                metadata, created_at, snapshot, seq)
    VALUES (p_thread, p_id, p_parent, p_step, p_writes, p_pending, p_metadata, p_created,
            p_snapshot, nextval('weir_checkpoint_seq'))
    RETURNING seq INTO s;
  UPDATE weir_threads SET updated_seq = s, updated_at = p_created WHERE thread_id = p_thread;
  RETURN s;
END
$fn$;
)sql";

// A weir_runs made by the run queue before version 2 (TIMESTAMPTZ times, TEXT JSON), converted
// in place: one rewrite of the table; its indexes are rebuilt with it.
constexpr const char* kConvertRunsToVersion2 = R"sql(
ALTER TABLE weir_runs
  ALTER COLUMN created_at DROP DEFAULT,
  ALTER COLUMN created_at TYPE BIGINT USING (extract(epoch FROM created_at) * 1000)::int8,
  ALTER COLUMN created_at SET DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::int8,
  ALTER COLUMN started_at TYPE BIGINT USING (extract(epoch FROM started_at) * 1000)::int8,
  ALTER COLUMN finished_at TYPE BIGINT USING (extract(epoch FROM finished_at) * 1000)::int8,
  ALTER COLUMN lease_expires TYPE BIGINT USING (extract(epoch FROM lease_expires) * 1000)::int8,
  ALTER COLUMN not_before TYPE BIGINT USING (extract(epoch FROM not_before) * 1000)::int8,
  ALTER COLUMN input TYPE BYTEA USING convert_to(input, 'UTF8'),
  ALTER COLUMN resume TYPE BYTEA USING convert_to(resume, 'UTF8'),
  ALTER COLUMN result TYPE BYTEA USING convert_to(result, 'UTF8');
)sql";

Error newer(const Connection& c, int64_t version) {
  return Error(Errc::unsupported,
               c.description() + ": the database has weir schema version " +
                   std::to_string(version) + ", newer than this weir build reads (" +
                   std::to_string(kSchemaVersion) + "); use a newer weir, or another database");
}

// The highest version applied; 0 when there is none (no table, or no row).
Result<int64_t> read_version(Connection& c, bool table_known) {
  if (!table_known) {
    auto exists = c.exec("SELECT to_regclass('weir_schema_version') IS NOT NULL", Params(),
                         "opening: reading the schema version");
    if (!exists) return std::move(exists).error();
    if (!exists->boolean(0, 0)) return int64_t{0};
  }
  auto v = c.exec("SELECT coalesce(max(version), 0)::int8 FROM weir_schema_version", Params(),
                  "opening: reading the schema version");
  if (!v) return std::move(v).error();
  return v->int8(0, 0);
}

Status migrate(Connection& c, const Attempt&) {
  // The common case first, without a lock: a database at this version.
  auto seen = read_version(c, false);
  if (!seen) return std::move(seen).error();
  if (*seen == kSchemaVersion) return {};
  if (*seen > kSchemaVersion) return newer(c, *seen);

  Transaction txn(c);
  if (auto s = txn.begin("opening"); !s) return s;
  if (auto r = c.exec("SELECT pg_advisory_xact_lock($1)", Params().int8(kSchemaLockKey),
                      "opening: taking the schema lock");
      !r)
    return std::move(r).error();
  if (auto s = c.exec_script("CREATE TABLE IF NOT EXISTS weir_schema_version "
                             "(version INTEGER NOT NULL)",
                             "creating the weir_schema_version table");
      !s)
    return s;
  auto version = read_version(c, true);  // again: another process may have migrated meanwhile
  if (!version) return std::move(version).error();
  if (*version > kSchemaVersion) return newer(c, *version);
  if (*version < 0)
    return Error(Errc::corrupt_data,
                 c.description() + ": invalid weir schema version " + std::to_string(*version));
  auto applied = [&](int v) -> Status {
    auto r = c.exec("INSERT INTO weir_schema_version (version) VALUES ($1::int8::int4)",
                    Params().int8(v), "recording schema version " + std::to_string(v));
    if (!r) return std::move(r).error();
    return {};
  };
  if (*version < 1) {
    if (auto s = c.exec_script(kVersion1, "creating the checkpointer's tables (version 1)"); !s)
      return s;
    if (auto s = applied(1); !s) return s;
  }
  if (*version < 2) {
    auto old = c.exec(
        "SELECT data_type FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = 'weir_runs' AND column_name = 'created_at'",
        Params(), "migrating to version 2: reading weir_runs");
    if (!old) return std::move(old).error();
    if (old->size() > 0 && old->text(0, 0) == "timestamp with time zone") {
      if (auto s = c.exec_script(kConvertRunsToVersion2,
                                 "migrating to version 2: converting weir_runs's times to unix "
                                 "ms and its JSON to bytea");
          !s)
        return s;
    }
    if (auto s = c.exec_script(kVersion2, "creating the run queue's table (version 2)"); !s)
      return s;
    if (auto s = applied(2); !s) return s;
  }
  if (*version < 3) {
    if (auto s = c.exec_script(kVersion3, "migrating to version 3: adding weir_runs.traceparent");
        !s)
      return s;
    if (auto s = applied(3); !s) return s;
  }
  if (*version < 4) {
    if (auto s = c.exec_script(kVersion4, "migrating to version 4: adding weir_runs.seq"); !s)
      return s;
    if (auto s = applied(4); !s) return s;
  }
  if (*version < 5) {
    if (auto s = c.exec_script(kVersion5, "migrating to version 5: the one-statement put"); !s)
      return s;
    if (auto s = applied(5); !s) return s;
  }
  return txn.commit("opening: creating weir's tables");
}

}  // namespace

Status ensure_schema(Connection& c) {
  return c.run("opening", [&](const Attempt& a) { return migrate(c, a); });
}

}  // namespace weir::pg
