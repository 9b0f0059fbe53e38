// The run queue's SQL. Times are the server's (clock_timestamp()), returned as unix ms.
#include "weir/cluster/run_queue.hpp"

#include <mutex>

#include "pg.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::cluster {
namespace {

// Any constant: the advisory lock that serialises creating the queue's objects.
constexpr long long kSchemaLockKey = 0x77656972'00000002;  // "weir" 2

constexpr const char* kSchema = R"sql(
CREATE SEQUENCE IF NOT EXISTS weir_run_fence_seq;
CREATE TABLE IF NOT EXISTS weir_runs (
  id               TEXT        NOT NULL PRIMARY KEY,
  workflow_name    TEXT        NOT NULL,
  workflow_file    TEXT        NOT NULL,
  workflow         TEXT        NOT NULL,
  workflow_sha256  TEXT        NOT NULL,
  input            TEXT        NOT NULL,
  resume           TEXT,
  thread_id        TEXT        NOT NULL,
  state            TEXT        NOT NULL CHECK (state IN ('queued', 'running', 'succeeded',
                                 'failed', 'cancelled', 'interrupted')),
  attempts         INTEGER     NOT NULL DEFAULT 0,
  max_attempts     INTEGER     NOT NULL CHECK (max_attempts >= 1),
  lease_owner      TEXT,
  lease_expires    TIMESTAMPTZ,
  fence            BIGINT      NOT NULL DEFAULT 0,
  cancel_requested BOOLEAN     NOT NULL DEFAULT false,
  not_before       TIMESTAMPTZ,
  result           TEXT,
  error_code       TEXT,
  error            TEXT,
  created_at       TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  started_at       TIMESTAMPTZ,
  finished_at      TIMESTAMPTZ,
  traceparent      TEXT        NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS weir_runs_open ON weir_runs (created_at)
  WHERE state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS weir_runs_recent ON weir_runs (created_at);
)sql";

#define WEIR_MS(col) "(extract(epoch FROM " col ") * 1000)::int8"
constexpr const char* kColumns =
    "id, workflow_name, workflow_file, workflow_sha256, input, thread_id, state, attempts, "
    "max_attempts, coalesce(lease_owner, ''), " WEIR_MS("lease_expires") ", fence, "
    "cancel_requested, coalesce(result, ''), coalesce(error_code, ''), coalesce(error, ''), "
    WEIR_MS("created_at") ", " WEIR_MS("started_at") ", " WEIR_MS("finished_at") ", "
    "coalesce(resume, ''), traceparent";
constexpr int kColumnCount = 21;

// A table made by a weir before traces lacks the column: added once, under the schema lock.
// (To be folded into the one schema version of the PostgreSQL layer.)
constexpr const char* kTraceColumn =
    "ALTER TABLE weir_runs ADD COLUMN IF NOT EXISTS traceparent TEXT NOT NULL DEFAULT ''";

RunRecord read_record(const PGresult* r, int row) {
  RunRecord rec;
  int c = 0;
  rec.id = pg::cell(r, row, c++);
  rec.workflow_name = pg::cell(r, row, c++);
  rec.workflow_file = pg::cell(r, row, c++);
  rec.workflow_sha256 = pg::cell(r, row, c++);
  rec.input = pg::cell(r, row, c++);
  rec.thread_id = pg::cell(r, row, c++);
  rec.state = parse_run_state(pg::cell(r, row, c++)).value_or(RunState::failed);
  rec.attempts = static_cast<int>(pg::cell_int(r, row, c++));
  rec.max_attempts = static_cast<int>(pg::cell_int(r, row, c++));
  rec.lease_owner = pg::cell(r, row, c++);
  rec.lease_expires_ms = pg::cell_int(r, row, c++);
  rec.fence = pg::cell_int(r, row, c++);
  rec.cancel_requested = pg::cell_bool(r, row, c++);
  rec.result = pg::cell(r, row, c++);
  rec.error_code = pg::cell(r, row, c++);
  rec.error = pg::cell(r, row, c++);
  rec.created_ms = pg::cell_int(r, row, c++);
  rec.started_ms = pg::cell_int(r, row, c++);
  rec.finished_ms = pg::cell_int(r, row, c++);
  rec.resume = pg::cell(r, row, c++);
  rec.traceparent = pg::cell(r, row, c++);
  return rec;
}

std::string ms_text(std::chrono::milliseconds d) {
  return std::to_string(d.count());
}

}  // namespace

const char* run_state_name(RunState s) {
  switch (s) {
    case RunState::queued:
      return "queued";
    case RunState::running:
      return "running";
    case RunState::succeeded:
      return "succeeded";
    case RunState::failed:
      return "failed";
    case RunState::cancelled:
      return "cancelled";
    case RunState::interrupted:
      return "interrupted";
  }
  return "?";
}

std::optional<RunState> parse_run_state(std::string_view s) {
  for (auto st : {RunState::queued, RunState::running, RunState::succeeded, RunState::failed,
                  RunState::cancelled, RunState::interrupted}) {
    if (s == run_state_name(st)) return st;
  }
  return std::nullopt;
}

std::string claim_token(int64_t fence) {
  return "run-fence-" + std::to_string(fence);
}

struct RunQueue::Impl {
  explicit Impl(pg::Connection c) : conn(std::move(c)) {}
  std::mutex mu;
  pg::Connection conn;  // GUARDED_BY(mu)

  // A statement that must touch the row of (id, fence); when it touched none, lost() says why.
  Status fenced(const char* sql, const pg::Params& params, std::string_view id, int64_t fence,
                std::string_view what) {
    auto r = conn.exec(sql, params, what);
    if (!r) return std::move(r).error();
    if (PQntuples(r->get()) > 0) return {};
    return lost(id, fence, what);
  }

  // thread_busy naming the run's state and holder now (not_found for an unknown id).
  Error lost(std::string_view id, int64_t fence, std::string_view what) {
    auto now =
        conn.exec("SELECT state, coalesce(lease_owner, ''), fence FROM weir_runs WHERE id = $1",
                  {std::string(id)}, what);
    if (!now) return std::move(now).error();
    if (PQntuples(now->get()) == 0)
      return Error(Errc::not_found, "no run '" + std::string(id) + "' in " + conn.description());
    const PGresult* n = now->get();
    return Error(Errc::thread_busy,
                 "run '" + std::string(id) + "' is no longer held under fence " +
                     std::to_string(fence) + ": it is " + pg::cell(n, 0, 0) +
                     (pg::cell(n, 0, 1).empty() ? std::string()
                                                : " (held by " + pg::cell(n, 0, 1) + ", fence " +
                                                      pg::cell(n, 0, 2) + ")"));
  }
};

RunQueue::RunQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunQueue::~RunQueue() = default;

const std::string& RunQueue::description() const {
  return impl_->conn.description();
}

Result<std::unique_ptr<RunQueue>> RunQueue::open(std::string_view conninfo) {
  auto conn = pg::Connection::open(conninfo);
  if (!conn) return std::move(conn).error();
  auto impl = std::make_unique<Impl>(std::move(*conn));
  auto& c = impl->conn;
  auto exists = c.exec(
      "SELECT to_regclass('weir_runs') IS NOT NULL, EXISTS (SELECT 1 FROM "
      "information_schema.columns WHERE table_name = 'weir_runs' AND column_name = "
      "'traceparent' AND table_schema = current_schema())",
      {}, "opening the run queue");
  if (!exists) return std::move(exists).error();
  if (pg::cell_bool(exists->get(), 0, 0) && pg::cell_bool(exists->get(), 0, 1))
    return std::unique_ptr<RunQueue>(new RunQueue(std::move(impl)));
  if (auto r = c.exec("BEGIN", {}, "opening the run queue"); !r) return std::move(r).error();
  auto setup = [&]() -> Status {
    if (auto r = c.exec("SELECT pg_advisory_xact_lock($1)", {std::to_string(kSchemaLockKey)},
                        "opening the run queue: taking the schema lock");
        !r)
      return std::move(r).error();
    // One statement per exec: PQexecParams takes one.
    std::string_view script = kSchema;
    while (!script.empty()) {
      const auto end = script.find(";\n");
      std::string stmt(script.substr(0, end));
      script = end == std::string_view::npos ? std::string_view() : script.substr(end + 2);
      if (stmt.find_first_not_of(" \n") == std::string::npos) continue;
      if (auto r = c.exec(stmt.c_str(), {}, "creating the run queue (weir_runs)"); !r)
        return std::move(r).error();
    }
    if (auto r = c.exec(kTraceColumn, {}, "adding weir_runs.traceparent"); !r)
      return std::move(r).error();
    return {};
  };
  if (auto s = setup(); !s) {
    (void)c.exec("ROLLBACK", {}, "opening the run queue");
    return std::move(s).error();
  }
  if (auto r = c.exec("COMMIT", {}, "opening the run queue"); !r) return std::move(r).error();
  return std::unique_ptr<RunQueue>(new RunQueue(std::move(impl)));
}

Result<std::string> RunQueue::submit(const SubmitRequest& req) {
  if (req.workflow.empty()) return Error(Errc::invalid_argument, "submit: the workflow is empty");
  if (req.max_attempts < 1)
    return Error(Errc::invalid_argument, "submit: max_attempts must be at least 1, got " +
                                             std::to_string(req.max_attempts));
  const std::string id = "r-" + graph::new_claim_token().substr(0, 16);
  std::lock_guard lock(impl_->mu);
  // The INSERT and the NOTIFY in one statement: workers hear of the run once it is committed.
  auto r = impl_->conn.exec(
      "WITH ins AS (INSERT INTO weir_runs (id, workflow_name, workflow_file, workflow, "
      "workflow_sha256, input, thread_id, state, max_attempts, resume, traceparent) VALUES ($1, "
      "$2, $3, $4, encode(sha256(convert_to($4, 'UTF8')), 'hex'), $5, $6, 'queued', $7::int, $8, "
      "$9) RETURNING id) SELECT pg_notify('weir_runs', 'queued') FROM ins",
      {id, req.workflow_name, req.workflow_file, req.workflow, req.input,
       req.thread_id.empty() ? id : req.thread_id, std::to_string(req.max_attempts),
       req.resume.empty() ? std::nullopt : std::optional<std::string>(req.resume), req.traceparent},
      "queueing a run");
  if (!r) return std::move(r).error();
  return id;
}

Result<std::vector<RunRecord>> RunQueue::list(std::size_t limit, std::optional<RunState> only) {
  std::lock_guard lock(impl_->mu);
  const std::string sql = std::string("SELECT ") + kColumns +
                          " FROM weir_runs WHERE ($1::text IS NULL OR state = $1) "
                          "ORDER BY created_at DESC, id LIMIT $2::int8";
  auto r =
      impl_->conn.exec(sql.c_str(),
                       {only ? std::optional<std::string>(run_state_name(*only)) : std::nullopt,
                        std::to_string(std::min<std::size_t>(limit, INT64_MAX))},
                       "listing runs");
  if (!r) return std::move(r).error();
  std::vector<RunRecord> out;
  for (int i = 0; i < PQntuples(r->get()); ++i) out.push_back(read_record(r->get(), i));
  return out;
}

Result<std::size_t> RunQueue::count(RunState state) {
  std::lock_guard lock(impl_->mu);
  auto r = impl_->conn.exec("SELECT count(*) FROM weir_runs WHERE state = $1",
                            {std::string(run_state_name(state))}, "counting runs");
  if (!r) return std::move(r).error();
  return static_cast<std::size_t>(pg::cell_int(r->get(), 0, 0));
}

Result<RunRecord> RunQueue::get(std::string_view id) {
  std::lock_guard lock(impl_->mu);
  const std::string sql =
      std::string("SELECT ") + kColumns + ", workflow FROM weir_runs WHERE id = $1";
  auto r = impl_->conn.exec(sql.c_str(), {std::string(id)}, "reading a run");
  if (!r) return std::move(r).error();
  if (PQntuples(r->get()) == 0)
    return Error(Errc::not_found,
                 "no run '" + std::string(id) + "' in " + impl_->conn.description());
  RunRecord rec = read_record(r->get(), 0);
  rec.workflow = pg::cell(r->get(), 0, kColumnCount);
  return rec;
}

Result<RunState> RunQueue::cancel(std::string_view id) {
  std::lock_guard lock(impl_->mu);
  // A queued run is cancelled here; a running one is asked to stop (its worker records the
  // end). The notification goes out when the statement commits.
  auto r = impl_->conn.exec(
      "WITH up AS (UPDATE weir_runs SET "
      "  cancel_requested = state IN ('queued', 'running'), "
      "  state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END, "
      "  error_code = CASE WHEN state = 'queued' THEN 'cancelled' ELSE error_code END, "
      "  error = CASE WHEN state = 'queued' THEN 'cancelled before it started' ELSE error END, "
      "  finished_at = CASE WHEN state = 'queued' THEN clock_timestamp() ELSE finished_at END "
      "  WHERE id = $1 RETURNING state) "
      "SELECT state, pg_notify('weir_runs', 'cancel ' || $1) FROM up",
      {std::string(id)}, "cancelling a run");
  if (!r) return std::move(r).error();
  if (PQntuples(r->get()) == 0)
    return Error(Errc::not_found,
                 "no run '" + std::string(id) + "' in " + impl_->conn.description());
  return parse_run_state(pg::cell(r->get(), 0, 0)).value_or(RunState::failed);
}

Result<std::optional<RunRecord>> RunQueue::claim(std::string_view owner,
                                                 std::chrono::milliseconds lease) {
  std::lock_guard lock(impl_->mu);
  // SET expressions read the row as locked (u.*), never an older snapshot of it.
#define WEIR_CANCEL_NOW "(u.state = 'running' AND u.cancel_requested)"
#define WEIR_EXHAUSTED \
  "(u.state = 'running' AND NOT u.cancel_requested AND u.attempts >= u.max_attempts)"
#define WEIR_ENDS "(" WEIR_CANCEL_NOW " OR " WEIR_EXHAUSTED ")"
  static const std::string sql =
      "WITH c AS (SELECT id FROM weir_runs "
      "  WHERE (state = 'queued' AND (not_before IS NULL OR not_before <= clock_timestamp())) "
      "     OR (state = 'running' AND lease_expires < clock_timestamp()) "
      "  ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) "
      "UPDATE weir_runs u SET "
      "  state = CASE WHEN " WEIR_CANCEL_NOW " THEN 'cancelled' WHEN " WEIR_EXHAUSTED
      "    THEN 'failed' ELSE 'running' END, "
      "  attempts = CASE WHEN " WEIR_ENDS " THEN u.attempts ELSE u.attempts + 1 END, "
      "  fence = CASE WHEN " WEIR_ENDS " THEN u.fence ELSE nextval('weir_run_fence_seq') END, "
      "  lease_owner = CASE WHEN " WEIR_ENDS " THEN NULL ELSE $1 END, "
      "  lease_expires = CASE WHEN " WEIR_ENDS " THEN NULL "
      "    ELSE clock_timestamp() + $2::int8 * interval '1 millisecond' END, "
      "  not_before = NULL, "
      "  started_at = coalesce(u.started_at, clock_timestamp()), "
      "  finished_at = CASE WHEN " WEIR_ENDS " THEN clock_timestamp() END, "
      "  error_code = CASE WHEN " WEIR_CANCEL_NOW " THEN 'cancelled' WHEN " WEIR_EXHAUSTED
      "    THEN 'attempts_exhausted' END, "
      "  error = CASE WHEN " WEIR_CANCEL_NOW " THEN 'cancelled; its worker (' || "
      "      coalesce(u.lease_owner, '?') || ') was gone before it could stop it' "
      "    WHEN " WEIR_EXHAUSTED " THEN 'run ' || u.id || ' failed after ' || u.attempts || "
      "      CASE WHEN u.attempts = 1 THEN ' attempt' ELSE ' attempts' END || "
      "      ' (max_attempts=' || u.max_attempts || '): its worker lost the lease each time "
      "before the run finished (last holder: ' || coalesce(u.lease_owner, '?') || "
      "      '); the steps it committed are kept on thread ' || u.thread_id END "
      "FROM c WHERE u.id = c.id RETURNING "  // kColumns, read as the row is now
      "u.id, u.workflow_name, u.workflow_file, u.workflow_sha256, u.input, u.thread_id, u.state, "
      "u.attempts, u.max_attempts, coalesce(u.lease_owner, ''), " WEIR_MS("u.lease_expires") ", "
      "u.fence, u.cancel_requested, coalesce(u.result, ''), coalesce(u.error_code, ''), "
      "coalesce(u.error, ''), " WEIR_MS("u.created_at") ", " WEIR_MS("u.started_at") ", "
      WEIR_MS("u.finished_at") ", coalesce(u.resume, ''), u.traceparent, u.workflow";
#undef WEIR_CANCEL_NOW
#undef WEIR_EXHAUSTED
#undef WEIR_ENDS
  for (;;) {
    auto r = impl_->conn.exec(sql.c_str(), {std::string(owner), ms_text(lease)}, "claiming a run");
    if (!r) return std::move(r).error();
    if (PQntuples(r->get()) == 0) return std::optional<RunRecord>();
    RunRecord rec = read_record(r->get(), 0);
    rec.workflow = pg::cell(r->get(), 0, kColumnCount);
    if (rec.state == RunState::running) return std::optional<RunRecord>(std::move(rec));
    // Failed (attempts used up) or cancelled here: look for the next one.
  }
}

Result<bool> RunQueue::renew(std::string_view id, int64_t fence, std::chrono::milliseconds lease) {
  std::lock_guard lock(impl_->mu);
  auto r = impl_->conn.exec(
      "UPDATE weir_runs SET lease_expires = clock_timestamp() + $3::int8 * interval '1 "
      "millisecond' WHERE id = $1 AND fence = $2::int8 AND state = 'running' "
      "RETURNING cancel_requested",
      {std::string(id), std::to_string(fence), ms_text(lease)}, "renewing a run's lease");
  if (!r) return std::move(r).error();
  if (PQntuples(r->get()) > 0) return pg::cell_bool(r->get(), 0, 0);
  return impl_->lost(id, fence, "renewing a run's lease");
}

Status RunQueue::finish(std::string_view id, int64_t fence, RunState state, std::string_view result,
                        std::string_view error_code, std::string_view error) {
  std::lock_guard lock(impl_->mu);
  return impl_->fenced(
      "UPDATE weir_runs SET state = $3, result = $4, error_code = $5, error = $6, "
      "finished_at = clock_timestamp(), lease_owner = NULL, lease_expires = NULL "
      "WHERE id = $1 AND fence = $2::int8 AND state = 'running' RETURNING id",
      {std::string(id), std::to_string(fence), std::string(run_state_name(state)),
       result.empty() ? std::nullopt : std::optional<std::string>(result),
       error_code.empty() ? std::nullopt : std::optional<std::string>(error_code),
       error.empty() ? std::nullopt : std::optional<std::string>(error)},
      id, fence, "recording a run's end");
}

Status RunQueue::give_back(std::string_view id, int64_t fence, std::chrono::milliseconds delay,
                           std::string_view why) {
  std::lock_guard lock(impl_->mu);
  return impl_->fenced(
      "WITH up AS (UPDATE weir_runs SET state = 'queued', attempts = greatest(attempts - 1, 0), "
      "lease_owner = NULL, lease_expires = NULL, error = $4, "
      "not_before = clock_timestamp() + $3::int8 * interval '1 millisecond' "
      "WHERE id = $1 AND fence = $2::int8 AND state = 'running' RETURNING id) "
      "SELECT id, pg_notify('weir_runs', 'queued') FROM up",
      {std::string(id), std::to_string(fence), ms_text(delay), std::string(why)}, id, fence,
      "handing a run back");
}

}  // namespace weir::cluster
