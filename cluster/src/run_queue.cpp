// The run queue's SQL, on weir's PostgreSQL layer (pg/): binary parameters, statements prepared
// once, a lost connection re-established and the call retried; times are unix ms by the
// server's clock (weir_now_ms(), pg/src/schema.cpp).
#include "weir/cluster/run_queue.hpp"

#include <map>
#include <mutex>

#include "weir/agents/local_model.hpp"  // to_valid_utf8
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/ids.hpp"
#include "weir/pg/connection.hpp"
#include "weir/pg/schema.hpp"

namespace weir::cluster {
namespace {

using pg::Attempt;
using pg::Params;
using pg::Rows;

#define WEIR_RUN_COLUMNS                                                                          \
  "id, workflow_name, workflow_file, workflow_sha256, input, thread_id, state, attempts::int8, "  \
  "max_attempts::int8, lease_owner, lease_expires, fence, cancel_requested, result, error_code, " \
  "error, created_at, started_at, finished_at, resume, traceparent, controls"
constexpr const char* kColumns = WEIR_RUN_COLUMNS;

// The thread claim the holder with a fence took (claim_token(fence)), as SQL. Every statement
// that ends a run or hands it back deletes that claim in the same statement, so the holder, if
// it is still running somewhere (paused, cut off), has its next put refused (issue 32.2).
#define WEIR_HOLDER_TOKEN(fence) "'run-fence-' || " fence "::text"
// How many columns kColumns names (read_record reads them in order; a query's extra columns
// follow them).
constexpr int column_count(const char* s) {
  int n = 1;
  for (; *s; ++s) n += *s == ',';
  return n;
}
constexpr int kColumnCount = column_count(WEIR_RUN_COLUMNS);
static_assert(kColumnCount == 22);

// The first key of the advisory lock a submit takes on its thread (the second is the thread's
// hashtext); 'weir' in ASCII. Two-key advisory locks never meet the schema lock's one-key space.
constexpr int64_t kThreadLockClass = 0x77656972;

RunRecord read_record(const Rows& r, int row) {
  RunRecord rec;
  int c = 0;
  rec.id = r.text(row, c++);
  rec.workflow_name = r.text(row, c++);
  rec.workflow_file = r.text(row, c++);
  rec.workflow_sha256 = r.text(row, c++);
  rec.input = r.text(row, c++);
  rec.thread_id = r.text(row, c++);
  rec.state = parse_run_state(r.text(row, c++)).value_or(RunState::failed);
  rec.attempts = static_cast<int>(r.int8(row, c++));
  rec.max_attempts = static_cast<int>(r.int8(row, c++));
  rec.lease_owner = r.text(row, c++);
  rec.lease_expires_ms = r.int8(row, c++);
  rec.fence = r.int8(row, c++);
  rec.cancel_requested = r.boolean(row, c++);
  rec.result = r.text(row, c++);
  rec.error_code = r.text(row, c++);
  rec.error = r.text(row, c++);
  rec.created_ms = r.int8(row, c++);
  rec.started_ms = r.int8(row, c++);
  rec.finished_ms = r.int8(row, c++);
  rec.resume = r.text(row, c++);
  rec.traceparent = r.text(row, c++);
  rec.controls = r.text(row, c++);
  return rec;
}

std::optional<std::string_view> or_null(std::string_view s) {
  return s.empty() ? std::nullopt : std::optional<std::string_view>(s);
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

  // A statement that changes the row of (id, fence) and returns it. When it changed none: a
  // row still under `fence` in `done_state` after a try whose answer was lost is what that try
  // recorded (success); otherwise lost() says why not.
  Status fenced(std::string_view sql, const Params& params, std::string_view id, int64_t fence,
                RunState done_state, std::string_view what) {
    return conn.run(what, [&](const Attempt& a) -> Status {
      auto r = conn.exec(sql, params, what);
      if (!r) return std::move(r).error();
      if (r->size() > 0) return {};
      auto now = holder_now(id, what);
      if (!now) return std::move(now).error();
      if (a.outcome_unknown && now->fence == fence && now->state == run_state_name(done_state))
        return {};
      return lost(id, fence, *now);
    });
  }

  struct Holder {
    std::string state, owner;
    int64_t fence = 0;
  };
  // The run's state and holder now; not_found for an unknown id.
  Result<Holder> holder_now(std::string_view id, std::string_view what) {
    auto r = conn.exec(
        "SELECT state, coalesce(lease_owner, ''), fence FROM weir_runs "
        "WHERE id = $1",
        Params().text(id), what);
    if (!r) return std::move(r).error();
    if (r->size() == 0)
      return Error(Errc::not_found, "no run '" + std::string(id) + "' in " + conn.description());
    return Holder{std::string(r->text(0, 0)), std::string(r->text(0, 1)), r->int8(0, 2)};
  }

  // thread_busy: the run is no longer held under `fence`; names its state and holder now.
  static Error lost(std::string_view id, int64_t fence, const Holder& now) {
    return Error(Errc::thread_busy, "run '" + std::string(id) + "' is no longer held under fence " +
                                        std::to_string(fence) + ": it is " + now.state +
                                        (now.owner.empty() ? std::string()
                                                           : " (held by " + now.owner + ", fence " +
                                                                 std::to_string(now.fence) + ")"));
  }
};

RunQueue::RunQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunQueue::~RunQueue() = default;

const std::string& RunQueue::description() const {
  return impl_->conn.description();
}

Result<std::unique_ptr<RunQueue>> RunQueue::open(std::string_view conninfo,
                                                 const QueueOptions& options) {
  pg::Options o;
  o.reconnect_window = options.reconnect_window;
  auto conn = pg::Connection::open(conninfo, o);
  if (!conn) return std::move(conn).error();
  auto impl = std::make_unique<Impl>(std::move(*conn));
  if (auto s = pg::ensure_schema(impl->conn); !s) return std::move(s).error();
  return std::unique_ptr<RunQueue>(new RunQueue(std::move(impl)));
}

Result<std::string> RunQueue::submit(const SubmitRequest& req) {
  if (req.workflow.empty()) return Error(Errc::invalid_argument, "submit: the workflow is empty");
  if (req.max_attempts < 1)
    return Error(Errc::invalid_argument, "submit: max_attempts must be at least 1, got " +
                                             std::to_string(req.max_attempts));
  if (!req.thread_id.empty())  // "" is the run's own id
    if (auto s = graph::check_id("thread_id", req.thread_id); !s) return std::move(s).error();
  const std::string id = "r-" + graph::new_claim_token().substr(0, 16);
  const std::string& thread = req.thread_id.empty() ? id : req.thread_id;
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  return conn.run("queueing a run", [&](const Attempt& a) -> Result<std::string> {
    if (a.outcome_unknown) {  // the id is new: a row with it is the earlier try's
      auto found =
          conn.exec("SELECT 1 FROM weir_runs WHERE id = $1", Params().text(id), "queueing a run");
      if (!found) return std::move(found).error();
      if (found->size() > 0) return id;
    }
    // One submit at a time for a thread (a transaction-scoped advisory lock on its name), and
    // none while the thread has a run queued or running: that is thread_busy, as in the
    // in-process service. Two runs at once on one thread would apply the same input twice, or
    // answer one interrupt twice (issue 32).
    pg::Transaction txn(conn);
    if (auto s = txn.begin("queueing a run"); !s) return std::move(s).error();
    if (auto l = conn.exec("SELECT pg_advisory_xact_lock($1::int8::int4, hashtext($2))",
                           Params().int8(kThreadLockClass).text(thread), "queueing a run");
        !l)
      return std::move(l).error();
    auto busy = conn.exec(
        "SELECT id FROM weir_runs WHERE thread_id = $1 AND state IN ('queued', 'running') LIMIT 1",
        Params().text(thread), "queueing a run");
    if (!busy) return std::move(busy).error();
    if (busy->size() > 0 && !req.enqueue)
      return Error(Errc::thread_busy, "thread '" + thread + "' has a run in progress (" +
                                          std::string(busy->text(0, 0)) + "); wait for it to end");
    // The INSERT and the NOTIFY in one statement: workers hear of the run once it is committed.
    auto r = conn.exec(
        "WITH ins AS (INSERT INTO weir_runs (id, workflow_name, workflow_file, workflow, "
        "workflow_sha256, input, thread_id, state, max_attempts, resume, traceparent, controls, "
        "not_before) "
        "VALUES ($1, $2, $3, $4, encode(sha256(convert_to($4, 'UTF8')), 'hex'), $5, $6, "
        "'queued', $7::int4, $8, $9, $10, "
        "CASE WHEN $11::int8 > 0 THEN weir_now_ms() + $11::int8 END) "
        "RETURNING id) SELECT pg_notify('weir_runs', 'queued') FROM ins",
        Params()
            .text(id)
            .text(req.workflow_name)
            .text(req.workflow_file)
            .text(req.workflow)
            .bytea(req.input)
            .text(thread)
            .int8(req.max_attempts)
            .bytea_or_null(or_null(req.resume))
            .text(req.traceparent)
            .bytea_or_null(or_null(req.controls))
            .int8(req.delay.count()),
        "queueing a run");
    if (!r) return std::move(r).error();
    if (auto c = txn.commit("queueing a run"); !c) return std::move(c).error();
    return id;
  });
}

Result<std::vector<RunRecord>> RunQueue::list(std::size_t limit, std::optional<RunState> only,
                                              std::string_view after) {
  if (!after.empty())
    if (auto s = graph::check_id("after", after); !s) return std::move(s).error();
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  return conn.run("listing runs", [&](const Attempt&) -> Result<std::vector<RunRecord>> {
    // Keyset paging: (created_at, seq) descending, so a page starts right after the last one.
    auto r = conn.exec(
        std::string("SELECT ") + kColumns +
            " FROM weir_runs WHERE ($1::text IS NULL OR state = $1) AND ($3::text IS NULL OR "
            "(created_at, seq) < (SELECT created_at, seq FROM weir_runs WHERE id = $3)) "
            "ORDER BY created_at DESC, seq DESC LIMIT $2",
        Params()
            .text_or_null(only ? std::optional<std::string_view>(run_state_name(*only))
                               : std::nullopt)
            .int8(static_cast<int64_t>(std::min<std::size_t>(limit, INT64_MAX)))
            .text_or_null(after.empty() ? std::nullopt : std::optional<std::string_view>(after)),
        "listing runs");
    if (!r) return std::move(r).error();
    std::vector<RunRecord> out;
    for (int i = 0; i < r->size(); ++i) out.push_back(read_record(*r, i));
    return out;
  });
}

Result<std::size_t> RunQueue::count(RunState state) {
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  return conn.run("counting runs", [&](const Attempt&) -> Result<std::size_t> {
    auto r = conn.exec("SELECT count(*)::int8 FROM weir_runs WHERE state = $1",
                       Params().text(run_state_name(state)), "counting runs");
    if (!r) return std::move(r).error();
    return static_cast<std::size_t>(r->int8(0, 0));
  });
}

Result<RunRecord> RunQueue::get(std::string_view id) {
  if (auto s = graph::check_id("run id", id); !s) return std::move(s).error();
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  return conn.run("reading a run", [&](const Attempt&) -> Result<RunRecord> {
    auto r =
        conn.exec(std::string("SELECT ") + kColumns + ", workflow FROM weir_runs WHERE id = $1",
                  Params().text(id), "reading a run");
    if (!r) return std::move(r).error();
    if (r->size() == 0)
      return Error(Errc::not_found, "no run '" + std::string(id) + "' in " + conn.description());
    RunRecord rec = read_record(*r, 0);
    rec.workflow = r->text(0, kColumnCount);
    return rec;
  });
}

Result<std::optional<std::string>> RunQueue::unfinished_on(std::string_view thread_id) {
  if (auto s = graph::check_id("thread id", thread_id); !s) return std::move(s).error();
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  const char* what = "looking for a thread's runs";
  return conn.run(what, [&](const Attempt&) -> Result<std::optional<std::string>> {
    auto r = conn.exec(
        "SELECT id FROM weir_runs WHERE thread_id = $1 AND state IN ('queued', "
        "'running') ORDER BY created_at, seq LIMIT 1",
        Params().text(thread_id), what);
    if (!r) return std::move(r).error();
    if (r->size() == 0) return std::optional<std::string>();
    return std::optional<std::string>(std::string(r->text(0, 0)));
  });
}

Result<RunState> RunQueue::cancel(std::string_view id) {
  if (auto s = graph::check_id("run id", id); !s) return std::move(s).error();
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  // A queued run is cancelled here; a running one is asked to stop (its worker records the
  // end). The notification goes out when the statement commits. Repeating it (a retry after a
  // lost answer) changes nothing more.
  return conn.run("cancelling a run", [&](const Attempt&) -> Result<RunState> {
    auto r = conn.exec(
        "WITH up AS (UPDATE weir_runs SET "
        "  cancel_requested = cancel_requested OR state IN ('queued', 'running'), "
        "  state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END, "
        "  error_code = CASE WHEN state = 'queued' THEN 'cancelled' ELSE error_code END, "
        "  error = CASE WHEN state = 'queued' THEN 'cancelled before it started' ELSE error END, "
        "  finished_at = CASE WHEN state = 'queued' THEN weir_now_ms() ELSE finished_at END "
        "  WHERE id = $1 RETURNING state) "
        "SELECT state, pg_notify('weir_runs', 'cancel ' || $1) FROM up",
        Params().text(id), "cancelling a run");
    if (!r) return std::move(r).error();
    if (r->size() == 0)
      return Error(Errc::not_found, "no run '" + std::string(id) + "' in " + conn.description());
    return parse_run_state(r->text(0, 0)).value_or(RunState::failed);
  });
}

// The claim statement (see the header). SET expressions read the row as locked (u.*), never an
// older snapshot of it. A run the claim ends (cancel requested while its holder was gone, or
// its attempts used up) keeps its fence, and the thread claim that fence's holder took is
// deleted in the same statement: that holder, if it was only paused, commits nothing more.
#define WEIR_CANCEL_NOW "(u.state = 'running' AND u.cancel_requested)"
#define WEIR_EXHAUSTED \
  "(u.state = 'running' AND NOT u.cancel_requested AND u.attempts >= u.max_attempts)"
#define WEIR_ENDS "(" WEIR_CANCEL_NOW " OR " WEIR_EXHAUSTED ")"
// $1 owner, $2 lease (ms), $3 the new fences, comma-separated (one per run it may claim: the
// first goes to the oldest), $4 the ids the claimant still runs, comma-separated. Claims up to
// as many runs as $3 has fences. Two queued runs of one thread are never both claimable: the
// younger has an open older one.
// clang-format off
constexpr const char* kClaimSql =
    "WITH c0 AS (SELECT id, created_at, seq FROM weir_runs "
    "  WHERE (state = 'queued' AND (not_before IS NULL OR not_before <= weir_now_ms()) "
    "         AND NOT EXISTS (SELECT 1 FROM weir_runs o WHERE o.thread_id = weir_runs.thread_id "
    "           AND o.state IN ('queued', 'running') "
    "           AND (o.created_at, o.seq) < (weir_runs.created_at, weir_runs.seq))) "
    "     OR (state = 'running' AND lease_expires < weir_now_ms() "
    "         AND NOT (id = ANY(string_to_array($4, ',')))) "
    "  ORDER BY created_at, seq "
    "  LIMIT cardinality(string_to_array($3, ',')) FOR UPDATE SKIP LOCKED), "
    "c AS (SELECT id AS claim_id, row_number() OVER (ORDER BY created_at, seq) AS n FROM c0), "
    "claimed AS (UPDATE weir_runs u SET "
    "  state = CASE WHEN " WEIR_CANCEL_NOW " THEN 'cancelled' WHEN " WEIR_EXHAUSTED
    "    THEN 'failed' ELSE 'running' END, "
    "  attempts = CASE WHEN " WEIR_ENDS " THEN u.attempts ELSE u.attempts + 1 END, "
    "  fence = CASE WHEN " WEIR_ENDS " THEN u.fence "
    "    ELSE (string_to_array($3, ',')::int8[])[c.n] END, "
    "  lease_owner = CASE WHEN " WEIR_ENDS " THEN NULL ELSE $1 END, "
    "  lease_expires = CASE WHEN " WEIR_ENDS " THEN NULL ELSE weir_now_ms() + $2 END, "
    "  not_before = NULL, "
    "  started_at = coalesce(u.started_at, weir_now_ms()), "
    "  finished_at = CASE WHEN " WEIR_ENDS " THEN weir_now_ms() END, "
    "  error_code = CASE WHEN " WEIR_CANCEL_NOW " THEN 'cancelled' WHEN " WEIR_EXHAUSTED
    "    THEN 'attempts_exhausted' END, "
    "  error = CASE WHEN " WEIR_CANCEL_NOW " THEN 'cancelled; its worker (' || "
    "      coalesce(u.lease_owner, '?') || ') was gone before it could stop it' "
    "    WHEN " WEIR_EXHAUSTED " THEN 'run ' || u.id || ' failed after ' || u.attempts || "
    "      CASE WHEN u.attempts = 1 THEN ' attempt' ELSE ' attempts' END || "
    "      ' (max_attempts=' || u.max_attempts || '): its worker lost the lease each time "
    "before the run finished (last holder: ' || coalesce(u.lease_owner, '?') || "
    "      '); the steps it committed are kept on thread ' || u.thread_id END "
    "  FROM c WHERE u.id = c.claim_id RETURNING u.*), "
    "revoked AS (DELETE FROM weir_thread_holders h USING claimed "
    "  WHERE claimed.state <> 'running' AND h.thread_id = claimed.thread_id "
    "  AND h.token = " WEIR_HOLDER_TOKEN("claimed.fence") ") "
    "SELECT " WEIR_RUN_COLUMNS ", workflow FROM claimed ORDER BY created_at, seq";
// clang-format on
#undef WEIR_CANCEL_NOW
#undef WEIR_EXHAUSTED
#undef WEIR_ENDS

Result<std::optional<RunRecord>> RunQueue::claim(std::string_view owner,
                                                 std::chrono::milliseconds lease,
                                                 const std::vector<std::string>& running_here) {
  auto got = claim_many(owner, lease, running_here, 1);
  if (!got) return std::move(got).error();
  if (got->empty()) return std::optional<RunRecord>();
  return std::optional<RunRecord>(std::move(got->front()));
}

Result<std::vector<RunRecord>> RunQueue::claim_many(std::string_view owner,
                                                    std::chrono::milliseconds lease,
                                                    const std::vector<std::string>& running_here,
                                                    std::size_t max) {
  std::vector<RunRecord> out;
  std::string excluded;  // run ids ("r-" and hex digits) never hold a comma
  for (const auto& id : running_here) excluded += (excluded.empty() ? "" : ",") + id;
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  const std::string what = max == 1 ? "claiming a run" : "claiming runs";
  // A claim that ends runs (failed, cancelled) is followed by another for as many, until the
  // runs claimed make `max` or nothing is claimable.
  while (out.size() < max) {
    const std::size_t want = max - out.size();
    // The fences are taken first, so a claim whose answer was lost finds its runs by them.
    std::string fences;
    auto got = conn.run(what, [&](const Attempt& a) -> Result<std::vector<RunRecord>> {
      std::vector<RunRecord> runs;
      auto read = [&](const Rows& r) {
        for (int i = 0; i < r.size(); ++i) {
          RunRecord rec = read_record(r, i);
          rec.workflow = r.text(i, kColumnCount);
          runs.push_back(std::move(rec));
        }
      };
      if (a.outcome_unknown && !fences.empty()) {
        auto mine = conn.exec(std::string("SELECT ") + kColumns +
                                  ", workflow FROM weir_runs WHERE fence = ANY(string_to_array($1, "
                                  "',')::int8[]) AND state = 'running' AND lease_owner = $2 "
                                  "ORDER BY created_at, seq",
                              Params().text(fences).text(owner), what);
        if (!mine) return std::move(mine).error();
        if (mine->size() > 0) {
          read(*mine);
          return runs;
        }
      }
      auto f = conn.exec(
          "SELECT string_agg(nextval('weir_run_fence_seq')::text, ',') "
          "FROM generate_series(1, $1)",
          Params().int8(static_cast<int64_t>(want)), what);
      if (!f) return std::move(f).error();
      fences = std::string(f->text(0, 0));
      auto r = conn.exec(
          kClaimSql, Params().text(owner).int8(lease.count()).text(fences).text(excluded), what);
      if (!r) return std::move(r).error();
      read(*r);
      return runs;
    });
    if (!got) {
      if (out.empty()) return std::move(got).error();
      break;  // what was claimed is the caller's; the next claim tries again
    }
    bool ended = false;
    for (RunRecord& rec : *got) {
      if (rec.state == RunState::running)
        out.push_back(std::move(rec));
      else
        ended = true;  // failed (attempts used up) or cancelled here: look for the next one
    }
    if (!ended) break;
  }
  return out;
}

Result<bool> RunQueue::renew(std::string_view id, int64_t fence, std::chrono::milliseconds lease) {
  auto all = renew_all({{std::string(id), fence}}, lease);
  if (!all) return std::move(all).error();
  return std::move(all->front());
}

Result<std::vector<Result<bool>>> RunQueue::renew_all(const std::vector<Lease>& runs,
                                                      std::chrono::milliseconds lease) {
  std::vector<Result<bool>> out;
  if (runs.empty()) return out;
  std::string ids, fences;  // run ids ("r-" and hex digits) never hold a comma
  for (const Lease& r : runs) {
    ids += (ids.empty() ? "" : ",") + r.id;
    fences += (fences.empty() ? "" : ",") + std::to_string(r.fence);
  }
  std::lock_guard lock(impl_->mu);
  auto& conn = impl_->conn;
  const std::string what = runs.size() == 1
                               ? "renewing a run's lease"
                               : "renewing the leases of " + std::to_string(runs.size()) + " runs";
  return conn.run(what, [&](const Attempt&) -> Result<std::vector<Result<bool>>> {
    auto r = conn.exec(
        "UPDATE weir_runs w SET lease_expires = weir_now_ms() + $3 "
        "FROM unnest(string_to_array($1, ','), string_to_array($2, ',')::int8[]) AS u(id, fence) "
        "WHERE w.id = u.id AND w.fence = u.fence AND w.state = 'running' "
        "RETURNING w.id, w.cancel_requested",
        Params().text(ids).text(fences).int8(lease.count()), what);
    if (!r) return std::move(r).error();
    std::map<std::string, bool, std::less<>> renewed;
    for (std::size_t i = 0; i < r->size(); ++i) renewed.emplace(r->text(i, 0), r->boolean(i, 1));
    std::vector<Result<bool>> each;
    for (const Lease& run : runs) {
      if (auto it = renewed.find(run.id); it != renewed.end()) {
        each.emplace_back(it->second);
        continue;
      }
      auto now = impl_->holder_now(run.id, what);  // not ours any more: say whose
      if (!now && !now.error().is(Errc::not_found)) return std::move(now).error();
      each.emplace_back(now ? Result<bool>(Impl::lost(run.id, run.fence, *now))
                            : Result<bool>(std::move(now).error()));
    }
    return each;
  });
}

// When runs are queued on the thread of `up` (the run a statement ended or handed back), the
// workers hear 'queued' as the statement commits: the claim takes no run while an older one on
// its thread is open, so the next one became claimable just now, not a poll later. (A delay a
// run was given, its after_seconds, stays.) `woken` is one row at most, and is read by the
// statement's SELECT (a CTE that is only a SELECT runs when it is read).
#define WEIR_WAKE_THREAD                                                                  \
  "woken AS (SELECT pg_notify('weir_runs', 'queued') AS told FROM weir_runs q, up WHERE " \
  "q.thread_id = up.thread_id AND q.id <> up.id AND q.state = 'queued' LIMIT 1) "

Status RunQueue::finish(std::string_view id, int64_t fence, RunState state, std::string_view result,
                        std::string_view error_code, std::string_view error) {
  // A message may quote bytes from anywhere (a tool's output): text must be valid UTF-8
  // without NUL, or the end could never be recorded (the result is JSON in bytea, kept as is).
  const std::string message = agents::to_valid_utf8(error);
  std::lock_guard lock(impl_->mu);
  return impl_->fenced(
      "WITH up AS (UPDATE weir_runs SET state = $3, result = $4, error_code = $5, error = $6, "
      "finished_at = weir_now_ms(), lease_owner = NULL, lease_expires = NULL "
      "WHERE id = $1 AND fence = $2 AND state = 'running' RETURNING id, thread_id), "
      "revoked AS (DELETE FROM weir_thread_holders h USING up WHERE h.thread_id = up.thread_id "
      "AND h.token = " WEIR_HOLDER_TOKEN("$2") "), " WEIR_WAKE_THREAD
                                               "SELECT id FROM up LEFT JOIN woken ON true",
      Params()
          .text(id)
          .int8(fence)
          .text(run_state_name(state))
          .bytea_or_null(or_null(result))
          .text_or_null(or_null(error_code))
          .text_or_null(or_null(message)),
      id, fence, state, "recording a run's end");
}

Status RunQueue::give_back(std::string_view id, int64_t fence, std::chrono::milliseconds delay,
                           std::string_view why) {
  std::lock_guard lock(impl_->mu);
  return impl_->fenced(
      "WITH up AS (UPDATE weir_runs SET state = 'queued', attempts = greatest(attempts - 1, 0), "
      "lease_owner = NULL, lease_expires = NULL, error = $4, not_before = weir_now_ms() + $3 "
      "WHERE id = $1 AND fence = $2 AND state = 'running' RETURNING id, thread_id), "
      "revoked AS (DELETE FROM weir_thread_holders h USING up WHERE h.thread_id = up.thread_id "
      "AND h.token = " WEIR_HOLDER_TOKEN(
          "$2") "), " WEIR_WAKE_THREAD
                "SELECT id, pg_notify('weir_runs', 'queued') FROM up LEFT JOIN woken ON true",
      Params().text(id).int8(fence).int8(delay.count()).text(why), id, fence, RunState::queued,
      "handing a run back");
}

#undef WEIR_WAKE_THREAD

}  // namespace weir::cluster
