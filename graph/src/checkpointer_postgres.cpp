// The PostgreSQL checkpointer: a client of weir's PostgreSQL layer (pg/: one connection, binary
// parameters, statements prepared once, a lost connection re-established and the call retried),
// guarded by a mutex. Ids as text, JSON as bytea, numbers as int8.
#include <array>
#include <cassert>
#include <climits>
#include <mutex>
#include <unordered_set>

#include <boost/json/serialize.hpp>

#include "checkpointer_common.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/pg/connection.hpp"
#include "weir/pg/schema.hpp"

namespace weir::graph {
namespace {

static_assert(kPostgresSchemaVersion == pg::kSchemaVersion,
              "graph's public schema version is the pg layer's");

// The first key of the two-key advisory locks that serialise claim_thread per thread (the second
// is hashtext(thread_id); a collision only serialises two claims that need not be).
constexpr int64_t kClaimLockSpace = 0x77656972;  // "weir"

constexpr const char* kColumns =
    "thread_id, checkpoint_id, parent_id, step, writes, pending, metadata, created_at";

using pg::Attempt;
using pg::Params;
using pg::Rows;

class PostgresCheckpointer final : public Checkpointer {
 public:
  PostgresCheckpointer(pg::Connection conn, Retention retention)
      : conn_(std::move(conn)), retention_(retention) {}

  // Called once by open_postgres_checkpointer before the object is shared.
  Status ensure_schema() {
    std::lock_guard lock(mu_);
    return pg::ensure_schema(conn_);
  }

  Status put(const Checkpoint& cp) override {
    if (auto s = detail::check_put_ids(cp); !s) return s;
    if (auto s = detail::check_put_values(cp); !s) return s;
    const std::string writes = boost::json::serialize(cp.writes);
    const std::string pending = boost::json::serialize(cp.pending);
    const std::string metadata = boost::json::serialize(cp.metadata);
    const int64_t now = detail::unix_ms_now();
    const std::string what = "put '" + cp.checkpoint_id + "' to thread '" + cp.thread_id + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt& a) -> Status {
      // An earlier try that lost its COMMIT's answer may have stored the checkpoint: its id is
      // unique, so finding it means that try took effect (and then its claim held).
      if (a.outcome_unknown) {
        auto found =
            conn_.exec("SELECT 1 FROM weir_checkpoints WHERE thread_id = $1 AND checkpoint_id = $2",
                       Params().text(cp.thread_id).text(cp.checkpoint_id), what);
        if (!found) return std::move(found).error();
        if (found->size() > 0) return {};
      }
      return put_once(cp, writes, pending, metadata, now, what);
    });
  }

  Result<std::optional<Checkpoint>> latest(std::string_view thread_id) const override {
    std::lock_guard lock(mu_);
    return conn_.run("latest", [&](const Attempt&) -> Result<std::optional<Checkpoint>> {
      auto r = conn_.exec(std::string("SELECT ") + kColumns +
                              " FROM weir_checkpoints WHERE thread_id = $1 ORDER BY seq DESC "
                              "LIMIT 1",
                          Params().text(thread_id), "latest");
      if (!r) return std::move(r).error();
      return read_optional(*r);
    });
  }

  Result<std::optional<Checkpoint>> get(std::string_view thread_id,
                                        std::string_view checkpoint_id) const override {
    std::lock_guard lock(mu_);
    return conn_.run("get", [&](const Attempt&) -> Result<std::optional<Checkpoint>> {
      auto r = conn_.exec(std::string("SELECT ") + kColumns +
                              " FROM weir_checkpoints WHERE thread_id = $1 AND checkpoint_id = $2",
                          Params().text(thread_id).text(checkpoint_id), "get");
      if (!r) return std::move(r).error();
      return read_optional(*r);
    });
  }

  Result<std::vector<Checkpoint>> list(std::string_view thread_id,
                                       std::size_t limit) const override {
    std::lock_guard lock(mu_);
    return conn_.run("list", [&](const Attempt&) -> Result<std::vector<Checkpoint>> {
      auto r = conn_.exec(std::string("SELECT ") + kColumns +
                              " FROM weir_checkpoints WHERE thread_id = $1 ORDER BY seq DESC "
                              "LIMIT $2",
                          Params().text(thread_id).int8(clamp_limit(limit)), "list");
      if (!r) return std::move(r).error();
      std::vector<Checkpoint> out;
      for (int i = 0; i < r->size(); ++i) {
        auto cp = read_row(*r, i);
        if (!cp) return std::move(cp).error();
        out.push_back(std::move(*cp));
      }
      return out;
    });
  }

  // As SQLite's: a walk from the tip, one primary-key lookup per ancestor, in one read-only
  // REPEATABLE READ transaction (a consistent snapshot); memory: the state plus one row.
  Result<boost::json::object> state_at(std::string_view thread_id,
                                       std::string_view checkpoint_id) const override {
    std::lock_guard lock(mu_);
    return conn_.run("state_at", [&](const Attempt&) -> Result<boost::json::object> {
      return state_at_once(thread_id, checkpoint_id);
    });
  }

  Status delete_thread(std::string_view thread_id) override {
    const std::string what = "delete_thread '" + std::string(thread_id) + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Status {
      pg::Transaction txn(conn_);
      if (auto s = txn.begin(what); !s) return s;
      if (auto s = delete_thread_locked(thread_id, what, true); !s) return s;
      return txn.commit(what);
    });
  }

  Result<std::vector<std::string>> threads(std::size_t limit) const override {
    std::lock_guard lock(mu_);
    return conn_.run("threads", [&](const Attempt&) -> Result<std::vector<std::string>> {
      auto r = conn_.exec("SELECT thread_id FROM weir_threads ORDER BY updated_seq DESC LIMIT $1",
                          Params().int8(clamp_limit(limit)), "threads");
      if (!r) return std::move(r).error();
      std::vector<std::string> out;
      for (int i = 0; i < r->size(); ++i) out.emplace_back(r->text(i, 0));
      return out;
    });
  }

  Result<std::optional<Checkpoint::Artifact>> get_artifact(
      std::string_view thread_id, std::string_view artifact_id) const override {
    const std::string what = "get_artifact '" + std::string(artifact_id) + "' of thread '" +
                             std::string(thread_id) + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Result<std::optional<Checkpoint::Artifact>> {
      auto r = conn_.exec(
          "SELECT media_type, bytes FROM weir_artifacts WHERE thread_id = $1 AND artifact_id = $2",
          Params().text(thread_id).text(artifact_id), what);
      if (!r) return std::move(r).error();
      if (r->size() == 0) return std::optional<Checkpoint::Artifact>();
      Checkpoint::Artifact a;
      a.id = artifact_id;
      a.media_type = r->text(0, 0);
      a.bytes = r->text(0, 1);
      return std::optional<Checkpoint::Artifact>(std::move(a));
    });
  }

  // Read, decide and write in one transaction, under a per-thread advisory lock (two claims of
  // an unclaimed thread cannot both insert) and the holder row's lock (a put with the old token
  // either commits before the takeover or sees it). "Now" is the server's clock. A retry after
  // a lost COMMIT answer finds its own token holding the thread and keeps it (since unchanged).
  Result<ThreadHolder> claim_thread(std::string_view thread_id,
                                    const ThreadHolder& holder) override {
    if (auto s = detail::check_claim(thread_id, holder); !s) return std::move(s).error();
    const std::string what = "claim_thread '" + std::string(thread_id) + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Result<ThreadHolder> {
      pg::Transaction txn(conn_);
      if (auto s = txn.begin(what); !s) return std::move(s).error();
      if (auto r = conn_.exec("SELECT pg_advisory_xact_lock($1::int8::int4, hashtext($2))",
                              Params().int8(kClaimLockSpace).text(thread_id), what);
          !r)
        return std::move(r).error();
      auto held = read_holder(thread_id, true, what);
      if (!held) return std::move(held).error();
      auto now = db_now_ms(what);
      if (!now) return std::move(now).error();
      if (*held && (**held).token != holder.token && detail::claim_live(**held, holder, *now))
        return detail::thread_busy(thread_id, **held, *now);
      ThreadHolder stored = holder;
      stored.since_ms = *held && (**held).token == holder.token ? (**held).since_ms : *now;
      stored.heartbeat_ms = *now;
      if (auto r = conn_.exec(
              "INSERT INTO weir_thread_holders (thread_id, token, host, pid, lease_ms, since, "
              "heartbeat) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (thread_id) DO UPDATE "
              "SET token = excluded.token, host = excluded.host, pid = excluded.pid, "
              "lease_ms = excluded.lease_ms, since = excluded.since, "
              "heartbeat = excluded.heartbeat",
              Params()
                  .text(thread_id)
                  .text(stored.token)
                  .text(stored.host)
                  .int8(stored.pid)
                  .int8(stored.lease_ms)
                  .int8(stored.since_ms)
                  .int8(stored.heartbeat_ms),
              what);
          !r)
        return std::move(r).error();
      if (auto s = txn.commit(what); !s) return std::move(s).error();
      return stored;
    });
  }

  Status renew_thread(std::string_view thread_id, std::string_view token) override {
    const std::string what = "renew_thread '" + std::string(thread_id) + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Status {
      auto r = conn_.exec(
          "UPDATE weir_thread_holders SET heartbeat = weir_now_ms() WHERE thread_id = $1 "
          "AND token = $2",
          Params().text(thread_id).text(token), what);
      if (!r) return std::move(r).error();
      if (r->affected() > 0) return {};
      // Not ours (any more): say who holds it now, if anyone.
      auto held = read_holder(thread_id, false, what);
      if (!held) return std::move(held).error();
      return detail::claim_lost(thread_id, *held ? &**held : nullptr);
    });
  }

  Status release_thread(std::string_view thread_id, std::string_view token) override {
    const std::string what = "release_thread '" + std::string(thread_id) + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Status {
      auto r = conn_.exec("DELETE FROM weir_thread_holders WHERE thread_id = $1 AND token = $2",
                          Params().text(thread_id).text(token), what);
      if (!r) return std::move(r).error();
      return {};
    });
  }

  Result<std::optional<ThreadHolder>> thread_holder(std::string_view thread_id) const override {
    const std::string what = "thread_holder '" + std::string(thread_id) + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) { return read_holder(thread_id, false, what); });
  }

  // A retry after a lost COMMIT answer prunes again and counts only what it removed itself.
  Result<std::size_t> prune(std::string_view thread_id, const Retention& policy) override {
    if (!policy.enabled()) return std::size_t{0};
    const std::string what = "prune thread '" + std::string(thread_id) + "'";
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Result<std::size_t> {
      pg::Transaction txn(conn_);
      if (auto s = txn.begin(what); !s) return std::move(s).error();
      // The same row lock as put: no put to this thread interleaves with the prune.
      if (auto r = conn_.exec("SELECT 1 FROM weir_threads WHERE thread_id = $1 FOR UPDATE",
                              Params().text(thread_id), what);
          !r)
        return std::move(r).error();
      if (policy.max_age.count() > 0) {  // a thread a live claim holds is not pruned by age
        auto held = read_holder(thread_id, true, what);
        if (!held) return std::move(held).error();
        auto now = db_now_ms(what);
        if (!now) return std::move(now).error();
        if (auto s =
                detail::refuse_prune_in_use(thread_id, policy, *held ? &**held : nullptr, *now);
            !s)
          return std::move(s).error();
      }
      auto n = prune_locked(thread_id, policy, detail::unix_ms_now());
      if (!n) return n;
      if (auto s = txn.commit(what); !s) return std::move(s).error();
      return n;
    });
  }

 private:
  static int64_t clamp_limit(std::size_t limit) {
    return limit > static_cast<std::size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(limit);
  }

  // One try of put(): weir_put_checkpoint() (pg/src/schema.cpp, version 5) stores the
  // checkpoint or raises, storing nothing. Alone it is one statement, one round trip; with
  // artifacts or retention it runs in a transaction with their statements.
  Status put_once(const Checkpoint& cp, const std::string& writes, const std::string& pending,
                  const std::string& metadata, int64_t now, const std::string& what) {
    const bool alone = cp.artifacts.empty() && !retention_.enabled();
    pg::Transaction txn(conn_);
    if (!alone)
      if (auto s = txn.begin(what); !s) return s;
    auto stored = conn_.exec("SELECT weir_put_checkpoint($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                             Params()
                                 .text(cp.thread_id)
                                 .text(cp.checkpoint_id)
                                 .text(cp.parent_id)
                                 .int8(cp.step)
                                 .bytea(writes)
                                 .bytea(pending)
                                 .bytea(metadata)
                                 .int8(now)
                                 .boolean(detail::is_snapshot(cp.writes))
                                 .text(cp.claim_token),
                             what);
    if (!stored) return refused(cp, std::move(stored).error(), what);
    if (alone) return {};
    for (const auto& a : cp.artifacts) {
      if (auto r = conn_.exec(
              "INSERT INTO weir_artifacts (thread_id, artifact_id, media_type, bytes, created_at) "
              "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread_id, artifact_id) DO NOTHING",
              Params().text(cp.thread_id).text(a.id).text(a.media_type).bytea(a.bytes).int8(now),
              "put: storing artifact '" + a.id + "'");
          !r)
        return std::move(r).error();
    }
    if (retention_.enabled()) {
      auto stats = conn_.exec(
          "SELECT count(*)::int8, min(created_at) FROM weir_checkpoints WHERE thread_id = $1",
          Params().text(cp.thread_id), what);
      if (!stats) return std::move(stats).error();
      const auto rows = static_cast<std::size_t>(stats->int8(0, 0));
      if (detail::prune_due(retention_, rows, stats->int8(0, 1), now)) {
        auto pruned = prune_locked(cp.thread_id, retention_, now);
        if (!pruned) return std::move(pruned).error();
      }
    }
    return txn.commit(what);
  }

  // weir_put_checkpoint's refusals (its SQLSTATEs) as the errors every checkpointer gives; a
  // lost claim names who holds the thread now (read after the refusal, outside its rollback).
  Status refused(const Checkpoint& cp, Error e, const std::string& what) {
    const std::string state = conn_.sqlstate();
    if (state == "WP001") return detail::duplicate_checkpoint(cp);
    if (state == "WP002") return detail::unknown_parent(cp);
    if (state != "WP003") return e;
    if (conn_.in_transaction()) (void)conn_.exec("ROLLBACK", Params(), what);
    auto held = read_holder(cp.thread_id, false, what);
    if (!held) return std::move(held).error();
    return detail::claim_lost(cp.thread_id, *held ? &**held : nullptr);
  }

  Result<boost::json::object> state_at_once(std::string_view thread_id,
                                            std::string_view checkpoint_id) const {
    pg::Transaction txn(conn_);
    if (auto s = txn.begin("state_at", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !s)
      return std::move(s).error();
    boost::json::object state;
    std::string id(checkpoint_id);
    std::string child;
    std::unordered_set<std::string> seen;
    for (;;) {
      auto r = conn_.exec(
          "SELECT parent_id, writes FROM weir_checkpoints "
          "WHERE thread_id = $1 AND checkpoint_id = $2",
          Params().text(thread_id).text(id), "state_at");
      if (!r) return std::move(r).error();
      if (r->size() == 0) {
        if (!child.empty())
          return Error(Errc::corrupt_data, conn_.description() + ": thread '" +
                                               std::string(thread_id) + "': checkpoint '" + child +
                                               "' names parent '" + id +
                                               "', which is missing (broken parent chain)");
        auto t = conn_.exec("SELECT 1 FROM weir_threads WHERE thread_id = $1",
                            Params().text(thread_id), "state_at");
        if (!t) return std::move(t).error();
        return detail::unknown_checkpoint("state_at", thread_id, checkpoint_id, t->size() > 0);
      }
      auto writes =
          detail::parse_stored_object(r->text(0, 1), conn_.description(), thread_id, id, "writes");
      if (!writes) return std::move(writes).error();
      detail::fold_older_writes(state, *writes);
      std::string parent(r->text(0, 0));
      if (parent.empty() || detail::is_snapshot(*writes)) return state;
      if (!seen.insert(parent).second)
        return Error(Errc::corrupt_data,
                     conn_.description() + ": thread '" + std::string(thread_id) +
                         "': the parent chain of checkpoint '" + std::string(checkpoint_id) +
                         "' loops at '" + parent + "'");
      child = std::move(id);
      id = std::move(parent);
    }
  }

  // REQUIRES: mu_ held. The server's clock, unix ms.
  Result<int64_t> db_now_ms(std::string_view what) const {
    auto r = conn_.exec("SELECT weir_now_ms()", Params(), what);
    if (!r) return std::move(r).error();
    return r->int8(0, 0);
  }

  // REQUIRES: mu_ held; `for_update` only inside a transaction (the row stays locked to its end).
  Result<std::optional<ThreadHolder>> read_holder(std::string_view thread_id, bool for_update,
                                                  std::string_view what) const {
    auto r = conn_.exec(std::string("SELECT token, host, pid, lease_ms, since, heartbeat FROM "
                                    "weir_thread_holders WHERE thread_id = $1") +
                            (for_update ? " FOR UPDATE" : ""),
                        Params().text(thread_id), what);
    if (!r) return std::move(r).error();
    if (r->size() == 0) return std::optional<ThreadHolder>();
    ThreadHolder h;
    h.token = r->text(0, 0);
    h.host = r->text(0, 1);
    h.pid = r->int8(0, 2);
    h.lease_ms = r->int8(0, 3);
    h.since_ms = r->int8(0, 4);
    h.heartbeat_ms = r->int8(0, 5);
    return std::optional<ThreadHolder>(std::move(h));
  }

  // The thread's checkpoints, its row and its artifacts; with `claim` also its claim
  // (delete_thread does, a prune that empties the thread does not: a runner may hold it).
  Status delete_thread_locked(std::string_view thread_id, std::string_view what, bool claim) {
    static constexpr std::array<const char*, 4> kDeletes = {
        "DELETE FROM weir_checkpoints WHERE thread_id = $1",
        "DELETE FROM weir_threads WHERE thread_id = $1",
        "DELETE FROM weir_artifacts WHERE thread_id = $1",
        "DELETE FROM weir_thread_holders WHERE thread_id = $1"};  // the claim: last
    for (std::size_t i = 0; i < kDeletes.size() - (claim ? 0 : 1); ++i)
      if (auto r = conn_.exec(kDeletes[i], Params().text(thread_id), what); !r)
        return std::move(r).error();
    return {};
  }

  // Inside an open transaction that holds the thread's row lock.
  Result<std::size_t> prune_locked(std::string_view thread_id, const Retention& policy,
                                   int64_t now) {
    const std::string what = "prune thread '" + std::string(thread_id) + "'";
    const int64_t limit = policy.keep_last > 0 ? clamp_limit(policy.keep_last) : INT64_MAX;
    auto kept_rows = conn_.exec(
        "SELECT checkpoint_id, parent_id, seq, snapshot FROM weir_checkpoints "
        "WHERE thread_id = $1 AND created_at >= $2 ORDER BY seq DESC LIMIT $3",
        Params().text(thread_id).int8(detail::prune_age_cutoff(policy, now)).int8(limit), what);
    if (!kept_rows) return std::move(kept_rows).error();
    auto to_row = [](const Rows& r, int i) {
      return detail::PruneRow{std::string(r.text(i, 0)), std::string(r.text(i, 1)), r.int8(i, 2),
                              r.boolean(i, 3)};
    };
    std::vector<detail::PruneRow> kept;
    for (int i = 0; i < kept_rows->size(); ++i) kept.push_back(to_row(*kept_rows, i));
    auto floor = detail::prune_floor(
        kept, [&](const std::string& id) -> Result<std::optional<detail::PruneRow>> {
          auto r = conn_.exec(
              "SELECT checkpoint_id, parent_id, seq, snapshot FROM weir_checkpoints "
              "WHERE thread_id = $1 AND checkpoint_id = $2",
              Params().text(thread_id).text(id), what);
          if (!r) return std::move(r).error();
          if (r->size() == 0) return std::optional<detail::PruneRow>();
          return std::optional<detail::PruneRow>(to_row(*r, 0));
        });
    if (!floor) return std::move(floor).error();
    if (!*floor) {
      auto count = conn_.exec("SELECT count(*)::int8 FROM weir_checkpoints WHERE thread_id = $1",
                              Params().text(thread_id), what);
      if (!count) return std::move(count).error();
      if (auto s = delete_thread_locked(thread_id, what, false); !s) return std::move(s).error();
      return static_cast<std::size_t>(count->int8(0, 0));
    }
    auto deleted = conn_.exec("DELETE FROM weir_checkpoints WHERE thread_id = $1 AND seq < $2",
                              Params().text(thread_id).int8(**floor), what);
    if (!deleted) return std::move(deleted).error();
    return static_cast<std::size_t>(deleted->affected());
  }

  // Columns in kColumns order.
  Result<Checkpoint> read_row(const Rows& r, int i) const {
    Checkpoint cp;
    cp.thread_id = r.text(i, 0);
    cp.checkpoint_id = r.text(i, 1);
    cp.parent_id = r.text(i, 2);
    cp.step = r.int8(i, 3);
    cp.created_at_ms = r.int8(i, 7);
    struct {
      boost::json::object* out;
      int col;
      const char* name;
    } json_cols[] = {
        {&cp.writes, 4, "writes"}, {&cp.pending, 5, "pending"}, {&cp.metadata, 6, "metadata"}};
    for (auto& [out, col, name] : json_cols) {
      auto obj = detail::parse_stored_object(r.text(i, col), conn_.description(), cp.thread_id,
                                             cp.checkpoint_id, name);
      if (!obj) return std::move(obj).error();
      *out = std::move(*obj);
    }
    return cp;
  }

  Result<std::optional<Checkpoint>> read_optional(const Rows& r) const {
    if (r.size() == 0) return std::optional<Checkpoint>();
    auto cp = read_row(r, 0);
    if (!cp) return std::move(cp).error();
    return std::optional<Checkpoint>(std::move(*cp));
  }

  mutable std::mutex mu_;        // one statement at a time on conn_
  mutable pg::Connection conn_;  // GUARDED_BY(mu_)
  const Retention retention_;
};

}  // namespace

Result<std::unique_ptr<Checkpointer>> open_postgres_checkpointer(std::string_view conninfo,
                                                                 const PostgresOptions& options) {
  pg::Options o;
  o.reconnect_window = options.reconnect_window;
  auto conn = pg::Connection::open(conninfo, o);
  if (!conn) return std::move(conn).error();
  auto cp = std::make_unique<PostgresCheckpointer>(std::move(*conn), options.retention);
  if (auto s = cp->ensure_schema(); !s) return std::move(s).error();
  return std::unique_ptr<Checkpointer>(std::move(cp));
}

Result<std::unique_ptr<Checkpointer>> open_postgres_checkpointer(std::string_view conninfo,
                                                                 Retention retention) {
  PostgresOptions o;
  o.retention = retention;
  return open_postgres_checkpointer(conninfo, o);
}

bool is_postgres_uri(std::string_view store) {
  return pg::is_postgres_uri(store);
}

std::string redact_store(std::string_view store) {
  return pg::scrub_password(std::string(store), store);
}

Result<std::unique_ptr<Checkpointer>> open_checkpointer(std::string_view store,
                                                        Retention retention) {
  if (is_postgres_uri(store)) return open_postgres_checkpointer(store, retention);
  return open_sqlite_checkpointer(std::filesystem::path(std::string(store)), retention);
}

}  // namespace weir::graph
