// The PostgreSQL checkpointer: one libpq connection guarded by a mutex; parameters and results in
// binary format (ids as text, JSON as bytea, numbers as int8).
#include <libpq-fe.h>

#include <arpa/inet.h>

#include <array>
#include <cassert>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <boost/json/serialize.hpp>

#include "checkpointer_common.hpp"
#include "postgres_conninfo.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph {
namespace {

// Type OIDs of the parameters we send (pg_type.h).
constexpr Oid kBool = 16, kBytea = 17, kInt8 = 20, kText = 25;
// Any constant: the advisory lock that serialises schema creation between processes.
constexpr int64_t kSchemaLockKey = 0x77656972'00000001;  // "weir" 1
// The first key of the two-key advisory locks that serialise claim_thread per thread (the second
// is hashtext(thread_id); a collision only serialises two claims that need not be).
constexpr int32_t kClaimLockSpace = 0x77656972;  // "weir"

// Schema version 1. `seq` comes from one sequence, taken while the thread's row in weir_threads
// is locked, so within a thread it follows commit order (list()/latest() order by it) and across
// threads it orders threads() by recency. `snapshot` mirrors "$snapshot" in writes, for prune.
// weir_artifacts and weir_thread_holders are SQLite's `artifacts` and `thread_holders`; claim
// times come from the server's clock, so clients' clocks need not agree.
constexpr const char* kSchemaV1 = R"sql(
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
INSERT INTO weir_schema_version (version) VALUES (1);
)sql";

// The server's clock in unix ms: claims and heartbeats are stamped and judged by it alone.
constexpr const char* kDbNowMs = "(extract(epoch FROM clock_timestamp()) * 1000)::int8";

constexpr const char* kColumns =
    "thread_id, checkpoint_id, parent_id, step, writes, pending, metadata, created_at";

using ConnPtr = detail::PgConnPtr;
using ResultPtr = detail::PgResultPtr;

// Parameters of one statement, all in binary format. Values are borrowed (string_view) or owned
// here (numbers), so the caller keeps borrowed strings alive until the statement ran.
class Params {
 public:
  Params& text(std::string_view v) { return add(v, kText); }
  Params& bytea(std::string_view v) { return add(v, kBytea); }
  Params& int8(int64_t v) {
    auto& buf = owned_.emplace_back();
    const auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(u >> (56 - 8 * i));
    return add(std::string_view(buf.data(), 8), kInt8);
  }
  Params& boolean(bool v) {
    auto& buf = owned_.emplace_back();
    buf[0] = v ? 1 : 0;
    return add(std::string_view(buf.data(), 1), kBool);
  }
  int size() const { return static_cast<int>(values_.size()); }
  const Oid* types() const { return types_.data(); }
  const char* const* values() const { return values_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  Params& add(std::string_view v, Oid type) {
    values_.push_back(v.empty() ? "" : v.data());  // NULL would mean SQL NULL
    lengths_.push_back(static_cast<int>(v.size()));
    formats_.push_back(1);
    types_.push_back(type);
    return *this;
  }
  std::deque<std::array<char, 8>> owned_;  // deque: elements never move
  std::vector<const char*> values_;
  std::vector<int> lengths_, formats_;
  std::vector<Oid> types_;
};

// Reading a binary-format result.
std::string_view cell(const PGresult* r, int row, int col) {
  return std::string_view(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}
int64_t cell_int8(const PGresult* r, int row, int col) {
  const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(r, row, col));
  if (PQgetlength(r, row, col) != 8) return 0;
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
  return static_cast<int64_t>(u);
}
bool cell_bool(const PGresult* r, int row, int col) {
  return PQgetlength(r, row, col) == 1 && PQgetvalue(r, row, col)[0] != 0;
}

std::string trimmed(const char* s) {
  std::string out = s != nullptr ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

class PostgresCheckpointer final : public Checkpointer {
 public:
  PostgresCheckpointer(detail::PgConninfo info, ConnPtr conn, Retention retention)
      : info_(std::move(info)), conn_(std::move(conn)), retention_(retention) {}

  // Called once by open_postgres_checkpointer before the object is shared.
  Status ensure_schema() {
    std::lock_guard lock(mu_);
    Transaction txn(*this);
    if (auto s = txn.begin("BEGIN", "opening"); !s) return s;
    if (auto r = exec("SELECT pg_advisory_xact_lock($1)", Params().int8(kSchemaLockKey),
                      "opening: taking the schema lock");
        !r)
      return std::move(r).error();
    if (auto r = exec("CREATE TABLE IF NOT EXISTS weir_schema_version (version INTEGER NOT NULL)",
                      Params(), "creating the weir_schema_version table");
        !r)
      return std::move(r).error();
    auto v = exec("SELECT max(version)::int8 FROM weir_schema_version", Params(),
                  "reading the schema version");
    if (!v) return std::move(v).error();
    const PGresult* res = v->get();
    if (PQgetisnull(res, 0, 0)) {
      if (auto r = exec_script(kSchemaV1, "creating the schema"); !r) return r;
    } else {
      const int64_t version = cell_int8(res, 0, 0);
      if (version > kPostgresSchemaVersion)
        return Error(Errc::unsupported,
                     info_.description + ": the database has weir checkpoint schema version " +
                         std::to_string(version) + ", newer than this weir build reads (" +
                         std::to_string(kPostgresSchemaVersion) +
                         "); use a newer weir, or another database");
      if (version < 1)
        return Error(Errc::corrupt_data, info_.description +
                                             ": invalid weir checkpoint schema version " +
                                             std::to_string(version));
    }
    return txn.commit("opening");
  }

  Status put(const Checkpoint& cp) override {
    if (auto s = detail::check_put_ids(cp); !s) return s;
    if (auto s = detail::check_put_values(cp); !s) return s;
    const std::string writes = boost::json::serialize(cp.writes);
    const std::string pending = boost::json::serialize(cp.pending);
    const std::string metadata = boost::json::serialize(cp.metadata);
    const int64_t now = detail::unix_ms_now();

    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return s;
    Transaction txn(*this);
    if (auto s = txn.begin("BEGIN", "put"); !s) return s;
    const std::string what = "put '" + cp.checkpoint_id + "' to thread '" + cp.thread_id + "'";
    // Lock the thread's row (creating it): puts to one thread queue here, so seq order is
    // commit order. A failed put rolls the new row back.
    // (ON CONFLICT DO UPDATE locks the existing row; the values are set for real below.)
    if (auto r = exec("INSERT INTO weir_threads (thread_id, updated_seq, updated_at) "
                      "VALUES ($1, 0, 0) ON CONFLICT (thread_id) DO UPDATE "
                      "SET updated_seq = weir_threads.updated_seq",
                      Params().text(cp.thread_id), what);
        !r)
      return std::move(r).error();
    if (!cp.claim_token.empty()) {
      // FOR UPDATE: a claim_thread taking the thread over waits for this put to commit, then
      // sees the refreshed heartbeat; a put after a takeover sees the new token.
      auto held = read_holder(cp.thread_id, true, what);
      if (!held) return std::move(held).error();
      if (!*held || (**held).token != cp.claim_token)
        return detail::claim_lost(cp.thread_id, *held ? &**held : nullptr);
      if (auto r = exec("UPDATE weir_thread_holders SET heartbeat = " + std::string(kDbNowMs) +
                            " WHERE thread_id = $1 AND token = $2",
                        Params().text(cp.thread_id).text(cp.claim_token), what);
          !r)
        return std::move(r).error();
    }
    {
      auto found = exec(
          "SELECT checkpoint_id FROM weir_checkpoints WHERE thread_id = $1 "
          "AND checkpoint_id IN ($2, $3)",
          Params().text(cp.thread_id).text(cp.checkpoint_id).text(cp.parent_id), what);
      if (!found) return std::move(found).error();
      bool have_parent = cp.parent_id.empty();
      for (int i = 0; i < PQntuples(found->get()); ++i) {
        const std::string_view id = cell(found->get(), i, 0);
        if (id == cp.checkpoint_id) return detail::duplicate_checkpoint(cp);
        if (id == cp.parent_id) have_parent = true;
      }
      if (!have_parent) return detail::unknown_parent(cp);
    }
    auto inserted = exec(std::string("INSERT INTO weir_checkpoints (") + kColumns +
                             ", snapshot, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
                             "nextval('weir_checkpoint_seq')) RETURNING seq",
                         Params()
                             .text(cp.thread_id)
                             .text(cp.checkpoint_id)
                             .text(cp.parent_id)
                             .int8(cp.step)
                             .bytea(writes)
                             .bytea(pending)
                             .bytea(metadata)
                             .int8(now)
                             .boolean(detail::is_snapshot(cp.writes)),
                         what);
    if (!inserted) {
      if (sqlstate_ == "23505") return detail::duplicate_checkpoint(cp);
      return std::move(inserted).error();
    }
    const int64_t seq = cell_int8(inserted->get(), 0, 0);
    if (auto r = exec("UPDATE weir_threads SET updated_seq = $2, updated_at = $3 "
                      "WHERE thread_id = $1",
                      Params().text(cp.thread_id).int8(seq).int8(now), what);
        !r)
      return std::move(r).error();
    for (const auto& a : cp.artifacts) {
      if (auto r = exec(
              "INSERT INTO weir_artifacts (thread_id, artifact_id, media_type, bytes, created_at) "
              "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread_id, artifact_id) DO NOTHING",
              Params().text(cp.thread_id).text(a.id).text(a.media_type).bytea(a.bytes).int8(now),
              "put: storing artifact '" + a.id + "'");
          !r)
        return std::move(r).error();
    }
    if (retention_.enabled()) {
      auto stats = exec(
          "SELECT count(*)::int8, min(created_at) FROM weir_checkpoints "
          "WHERE thread_id = $1",
          Params().text(cp.thread_id), what);
      if (!stats) return std::move(stats).error();
      const auto rows = static_cast<std::size_t>(cell_int8(stats->get(), 0, 0));
      if (detail::prune_due(retention_, rows, cell_int8(stats->get(), 0, 1), now)) {
        auto pruned = prune_locked(cp.thread_id, retention_, now);
        if (!pruned) return std::move(pruned).error();
      }
    }
    return txn.commit(what);
  }

  Result<std::optional<Checkpoint>> latest(std::string_view thread_id) const override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    auto r = exec(std::string("SELECT ") + kColumns +
                      " FROM weir_checkpoints WHERE thread_id = $1 ORDER BY seq DESC LIMIT 1",
                  Params().text(thread_id), "latest");
    if (!r) return std::move(r).error();
    return read_optional(r->get());
  }

  Result<std::optional<Checkpoint>> get(std::string_view thread_id,
                                        std::string_view checkpoint_id) const override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    auto r = exec(std::string("SELECT ") + kColumns +
                      " FROM weir_checkpoints WHERE thread_id = $1 AND checkpoint_id = $2",
                  Params().text(thread_id).text(checkpoint_id), "get");
    if (!r) return std::move(r).error();
    return read_optional(r->get());
  }

  Result<std::vector<Checkpoint>> list(std::string_view thread_id,
                                       std::size_t limit) const override {
    std::vector<Checkpoint> out;
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    auto r = exec(std::string("SELECT ") + kColumns +
                      " FROM weir_checkpoints WHERE thread_id = $1 ORDER BY seq DESC LIMIT $2",
                  Params().text(thread_id).int8(clamp_limit(limit)), "list");
    if (!r) return std::move(r).error();
    const PGresult* res = r->get();
    for (int i = 0; i < PQntuples(res); ++i) {
      auto cp = read_row(res, i);
      if (!cp) return std::move(cp).error();
      out.push_back(std::move(*cp));
    }
    return out;
  }

  // As SQLite's: a walk from the tip, one primary-key lookup per ancestor, in one read-only
  // REPEATABLE READ transaction (a consistent snapshot); memory: the state plus one row.
  Result<boost::json::object> state_at(std::string_view thread_id,
                                       std::string_view checkpoint_id) const override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    Transaction txn(*this);
    if (auto s = txn.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "state_at"); !s)
      return std::move(s).error();
    boost::json::object state;
    std::string id(checkpoint_id);
    std::string child;
    std::unordered_set<std::string> seen;
    for (;;) {
      auto r = exec(
          "SELECT parent_id, writes FROM weir_checkpoints "
          "WHERE thread_id = $1 AND checkpoint_id = $2",
          Params().text(thread_id).text(id), "state_at");
      if (!r) return std::move(r).error();
      const PGresult* res = r->get();
      if (PQntuples(res) == 0) {
        if (!child.empty())
          return Error(Errc::corrupt_data, info_.description + ": thread '" +
                                               std::string(thread_id) + "': checkpoint '" + child +
                                               "' names parent '" + id +
                                               "', which is missing (broken parent chain)");
        auto t = exec("SELECT 1 FROM weir_threads WHERE thread_id = $1", Params().text(thread_id),
                      "state_at");
        if (!t) return std::move(t).error();
        return detail::unknown_checkpoint("state_at", thread_id, checkpoint_id,
                                          PQntuples(t->get()) > 0);
      }
      auto writes =
          detail::parse_stored_object(cell(res, 0, 1), info_.description, thread_id, id, "writes");
      if (!writes) return std::move(writes).error();
      detail::fold_older_writes(state, *writes);
      std::string parent(cell(res, 0, 0));
      if (parent.empty() || detail::is_snapshot(*writes)) return state;
      if (!seen.insert(parent).second)
        return Error(Errc::corrupt_data, info_.description + ": thread '" + std::string(thread_id) +
                                             "': the parent chain of checkpoint '" +
                                             std::string(checkpoint_id) + "' loops at '" + parent +
                                             "'");
      child = std::move(id);
      id = std::move(parent);
    }
  }

  Status delete_thread(std::string_view thread_id) override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return s;
    Transaction txn(*this);
    const std::string what = "delete_thread '" + std::string(thread_id) + "'";
    if (auto s = txn.begin("BEGIN", what); !s) return s;
    if (auto s = delete_thread_locked(thread_id, what, true); !s) return s;
    return txn.commit(what);
  }

  Result<std::vector<std::string>> threads(std::size_t limit) const override {
    std::vector<std::string> out;
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    auto r = exec("SELECT thread_id FROM weir_threads ORDER BY updated_seq DESC LIMIT $1",
                  Params().int8(clamp_limit(limit)), "threads");
    if (!r) return std::move(r).error();
    for (int i = 0; i < PQntuples(r->get()); ++i) out.emplace_back(cell(r->get(), i, 0));
    return out;
  }

  Result<std::optional<Checkpoint::Artifact>> get_artifact(
      std::string_view thread_id, std::string_view artifact_id) const override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    auto r = exec(
        "SELECT media_type, bytes FROM weir_artifacts WHERE thread_id = $1 AND artifact_id = $2",
        Params().text(thread_id).text(artifact_id),
        "get_artifact '" + std::string(artifact_id) + "' of thread '" + std::string(thread_id) +
            "'");
    if (!r) return std::move(r).error();
    if (PQntuples(r->get()) == 0) return std::optional<Checkpoint::Artifact>();
    Checkpoint::Artifact a;
    a.id = artifact_id;
    a.media_type = cell(r->get(), 0, 0);
    a.bytes = cell(r->get(), 0, 1);
    return std::optional<Checkpoint::Artifact>(std::move(a));
  }

  // Read, decide and write in one transaction, under a per-thread advisory lock (two claims of
  // an unclaimed thread cannot both insert) and the holder row's lock (a put with the old token
  // either commits before the takeover or sees it). "Now" is the server's clock.
  Result<ThreadHolder> claim_thread(std::string_view thread_id,
                                    const ThreadHolder& holder) override {
    if (auto s = detail::check_claim(holder); !s) return std::move(s).error();
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    const std::string what = "claim_thread '" + std::string(thread_id) + "'";
    Transaction txn(*this);
    if (auto s = txn.begin("BEGIN", what); !s) return std::move(s).error();
    if (auto r = exec("SELECT pg_advisory_xact_lock($1::int4, hashtext($2))",
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
    if (auto r = exec(
            "INSERT INTO weir_thread_holders (thread_id, token, host, pid, lease_ms, since, "
            "heartbeat) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (thread_id) DO UPDATE SET "
            "token = excluded.token, host = excluded.host, pid = excluded.pid, "
            "lease_ms = excluded.lease_ms, since = excluded.since, heartbeat = excluded.heartbeat",
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
  }

  Status renew_thread(std::string_view thread_id, std::string_view token) override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return s;
    const std::string what = "renew_thread '" + std::string(thread_id) + "'";
    auto r = exec("UPDATE weir_thread_holders SET heartbeat = " + std::string(kDbNowMs) +
                      " WHERE thread_id = $1 AND token = $2",
                  Params().text(thread_id).text(token), what);
    if (!r) return std::move(r).error();
    if (std::strcmp(PQcmdTuples(r->get()), "0") != 0) return {};
    // Not ours (any more): say who holds it now, if anyone.
    auto held = read_holder(thread_id, false, what);
    if (!held) return std::move(held).error();
    return detail::claim_lost(thread_id, *held ? &**held : nullptr);
  }

  Status release_thread(std::string_view thread_id, std::string_view token) override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return s;
    auto r = exec("DELETE FROM weir_thread_holders WHERE thread_id = $1 AND token = $2",
                  Params().text(thread_id).text(token),
                  "release_thread '" + std::string(thread_id) + "'");
    if (!r) return std::move(r).error();
    return {};
  }

  Result<std::optional<ThreadHolder>> thread_holder(std::string_view thread_id) const override {
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    return read_holder(thread_id, false, "thread_holder '" + std::string(thread_id) + "'");
  }

  Result<std::size_t> prune(std::string_view thread_id, const Retention& policy) override {
    if (!policy.enabled()) return std::size_t{0};
    std::lock_guard lock(mu_);
    if (auto s = reconnect_if_needed(); !s) return std::move(s).error();
    Transaction txn(*this);
    const std::string what = "prune thread '" + std::string(thread_id) + "'";
    if (auto s = txn.begin("BEGIN", what); !s) return std::move(s).error();
    // The same row lock as put: no put to this thread interleaves with the prune.
    if (auto r = exec("SELECT 1 FROM weir_threads WHERE thread_id = $1 FOR UPDATE",
                      Params().text(thread_id), what);
        !r)
      return std::move(r).error();
    if (policy.max_age.count() > 0) {  // a thread a live claim holds is not pruned by age
      auto held = read_holder(thread_id, true, what);
      if (!held) return std::move(held).error();
      auto now = db_now_ms(what);
      if (!now) return std::move(now).error();
      if (auto s = detail::refuse_prune_in_use(thread_id, policy, *held ? &**held : nullptr, *now);
          !s)
        return std::move(s).error();
    }
    auto n = prune_locked(thread_id, policy, detail::unix_ms_now());
    if (!n) return n;
    if (auto s = txn.commit(what); !s) return std::move(s).error();
    return n;
  }

 private:
  // BEGIN by begin(); ROLLBACK on scope exit unless committed. After a failed statement
  // PostgreSQL keeps the transaction open (aborted) until ROLLBACK.
  class Transaction {
   public:
    explicit Transaction(const PostgresCheckpointer& self) : self_(self) {}
    ~Transaction() {
      if (open_ && PQtransactionStatus(self_.conn_.get()) != PQTRANS_IDLE)
        PQclear(PQexec(self_.conn_.get(), "ROLLBACK"));
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    Status begin(const char* sql, std::string_view what) {
      auto r = self_.exec(sql, Params(), std::string(what) + ": beginning a transaction");
      if (!r) return std::move(r).error();
      open_ = true;
      return {};
    }
    Status commit(std::string_view what) {
      auto r = self_.exec("COMMIT", Params(), std::string(what) + ": committing");
      if (!r) return std::move(r).error();
      open_ = false;
      return {};
    }

   private:
    const PostgresCheckpointer& self_;
    bool open_ = false;
  };

  static int64_t clamp_limit(std::size_t limit) {
    return limit > static_cast<std::size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(limit);
  }

  // A dropped connection (server restart, idle timeout) is re-established on the next call.
  Status reconnect_if_needed() const {
    if (PQstatus(conn_.get()) == CONNECTION_OK) return {};
    prepared_.clear();  // a new session has none of them
    PQreset(conn_.get());
    if (PQstatus(conn_.get()) == CONNECTION_OK) return {};
    return Error(Errc::io_error,
                 info_.description + ": reconnecting: " +
                     detail::scrub_password(trimmed(PQerrorMessage(conn_.get())), info_.conninfo));
  }

  // Runs one statement; an error names the server, `what`, the server's message and SQLSTATE.
  // Sets sqlstate_ ("" on success).
  // Each statement text is prepared once per connection (parsed and planned once: for the
  // short statements of a put that is much of what they cost the server) and then run with
  // PQexecPrepared; past kMaxPrepared texts the rest run unprepared.
  Result<ResultPtr> exec(const std::string& sql, const Params& p, std::string_view what) const {
    constexpr std::size_t kMaxPrepared = 64;
    std::string key = sql;  // the same text with other parameter types is another statement
    key.append(reinterpret_cast<const char*>(p.types()), p.size() * sizeof(Oid));
    auto it = prepared_.find(key);
    if (it == prepared_.end() && prepared_.size() < kMaxPrepared) {
      std::string name = "weir_s" + std::to_string(prepared_.size());
      ResultPtr pr(PQprepare(conn_.get(), name.c_str(), sql.c_str(), p.size(), p.types()));
      if (!pr || PQresultStatus(pr.get()) != PGRES_COMMAND_OK) return error(pr.get(), what);
      it = prepared_.emplace(std::move(key), std::move(name)).first;
    }
    ResultPtr r(it != prepared_.end() ? PQexecPrepared(conn_.get(), it->second.c_str(), p.size(),
                                                       p.values(), p.lengths(), p.formats(), 1)
                                      : PQexecParams(conn_.get(), sql.c_str(), p.size(), p.types(),
                                                     p.values(), p.lengths(), p.formats(), 1));
    const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
      sqlstate_.clear();
      return r;
    }
    return error(r.get(), what);
  }

  // Several statements without parameters (the schema script).
  Status exec_script(const char* sql, std::string_view what) const {
    ResultPtr r(PQexec(conn_.get(), sql));
    if (r && PQresultStatus(r.get()) == PGRES_COMMAND_OK) return {};
    return error(r.get(), what);
  }

  Error error(const PGresult* r, std::string_view what) const {
    const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    sqlstate_ = state != nullptr ? state : "";
    std::string msg;
    if (const char* primary =
            r != nullptr ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : nullptr)
      msg = primary;
    else
      msg = trimmed(PQerrorMessage(conn_.get()));
    if (msg.empty()) msg = "no answer from the server";
    std::string text = info_.description + ": " + std::string(what) + ": " +
                       detail::scrub_password(std::move(msg), info_.conninfo);
    if (!sqlstate_.empty()) text += " (SQLSTATE " + sqlstate_ + ")";
    // Class 22 (data exception) and 54 (program limit): the value cannot be stored; anything
    // else is the server or the connection refusing.
    if (sqlstate_.starts_with("22") || sqlstate_.starts_with("54"))
      return Error(Errc::invalid_argument,
                   text +
                       "; PostgreSQL text cannot hold NUL bytes or invalid UTF-8 in ids, and "
                       "a value has a 1 GB limit (keep large values in the artifact store)");
    if (PQstatus(conn_.get()) != CONNECTION_OK)
      return Error(Errc::io_error, text + "; the connection was lost, the next call reconnects");
    return Error(Errc::io_error, std::move(text));
  }

  // REQUIRES: mu_ held. The server's clock, unix ms.
  Result<int64_t> db_now_ms(std::string_view what) const {
    auto r = exec(std::string("SELECT ") + kDbNowMs, Params(), what);
    if (!r) return std::move(r).error();
    return cell_int8(r->get(), 0, 0);
  }

  // REQUIRES: mu_ held; `for_update` only inside a transaction (the row stays locked to its end).
  Result<std::optional<ThreadHolder>> read_holder(std::string_view thread_id, bool for_update,
                                                  std::string_view what) const {
    auto r = exec(std::string("SELECT token, host, pid, lease_ms, since, heartbeat FROM "
                              "weir_thread_holders WHERE thread_id = $1") +
                      (for_update ? " FOR UPDATE" : ""),
                  Params().text(thread_id), what);
    if (!r) return std::move(r).error();
    const PGresult* res = r->get();
    if (PQntuples(res) == 0) return std::optional<ThreadHolder>();
    ThreadHolder h;
    h.token = cell(res, 0, 0);
    h.host = cell(res, 0, 1);
    h.pid = cell_int8(res, 0, 2);
    h.lease_ms = cell_int8(res, 0, 3);
    h.since_ms = cell_int8(res, 0, 4);
    h.heartbeat_ms = cell_int8(res, 0, 5);
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
      if (auto r = exec(kDeletes[i], Params().text(thread_id), what); !r)
        return std::move(r).error();
    return {};
  }

  // Inside an open transaction that holds the thread's row lock.
  Result<std::size_t> prune_locked(std::string_view thread_id, const Retention& policy,
                                   int64_t now) {
    const std::string what = "prune thread '" + std::string(thread_id) + "'";
    const int64_t limit = policy.keep_last > 0 ? clamp_limit(policy.keep_last) : INT64_MAX;
    auto kept_rows = exec(
        "SELECT checkpoint_id, parent_id, seq, snapshot FROM weir_checkpoints "
        "WHERE thread_id = $1 AND created_at >= $2 ORDER BY seq DESC LIMIT $3",
        Params().text(thread_id).int8(detail::prune_age_cutoff(policy, now)).int8(limit), what);
    if (!kept_rows) return std::move(kept_rows).error();
    auto to_row = [](const PGresult* res, int i) {
      return detail::PruneRow{std::string(cell(res, i, 0)), std::string(cell(res, i, 1)),
                              cell_int8(res, i, 2), cell_bool(res, i, 3)};
    };
    std::vector<detail::PruneRow> kept;
    for (int i = 0; i < PQntuples(kept_rows->get()); ++i)
      kept.push_back(to_row(kept_rows->get(), i));
    auto floor = detail::prune_floor(
        kept, [&](const std::string& id) -> Result<std::optional<detail::PruneRow>> {
          auto r = exec(
              "SELECT checkpoint_id, parent_id, seq, snapshot FROM weir_checkpoints "
              "WHERE thread_id = $1 AND checkpoint_id = $2",
              Params().text(thread_id).text(id), what);
          if (!r) return std::move(r).error();
          if (PQntuples(r->get()) == 0) return std::optional<detail::PruneRow>();
          return std::optional<detail::PruneRow>(to_row(r->get(), 0));
        });
    if (!floor) return std::move(floor).error();
    if (!*floor) {
      auto count = exec("SELECT count(*)::int8 FROM weir_checkpoints WHERE thread_id = $1",
                        Params().text(thread_id), what);
      if (!count) return std::move(count).error();
      if (auto s = delete_thread_locked(thread_id, what, false); !s) return std::move(s).error();
      return static_cast<std::size_t>(cell_int8(count->get(), 0, 0));
    }
    auto deleted = exec("DELETE FROM weir_checkpoints WHERE thread_id = $1 AND seq < $2",
                        Params().text(thread_id).int8(**floor), what);
    if (!deleted) return std::move(deleted).error();
    return static_cast<std::size_t>(std::strtoull(PQcmdTuples(deleted->get()), nullptr, 10));
  }

  // Columns in kColumns order.
  Result<Checkpoint> read_row(const PGresult* res, int i) const {
    Checkpoint cp;
    cp.thread_id = cell(res, i, 0);
    cp.checkpoint_id = cell(res, i, 1);
    cp.parent_id = cell(res, i, 2);
    cp.step = cell_int8(res, i, 3);
    cp.created_at_ms = cell_int8(res, i, 7);
    struct {
      boost::json::object* out;
      int col;
      const char* name;
    } json_cols[] = {
        {&cp.writes, 4, "writes"}, {&cp.pending, 5, "pending"}, {&cp.metadata, 6, "metadata"}};
    for (auto& [out, col, name] : json_cols) {
      auto obj = detail::parse_stored_object(cell(res, i, col), info_.description, cp.thread_id,
                                             cp.checkpoint_id, name);
      if (!obj) return std::move(obj).error();
      *out = std::move(*obj);
    }
    return cp;
  }

  Result<std::optional<Checkpoint>> read_optional(const PGresult* res) const {
    if (PQntuples(res) == 0) return std::optional<Checkpoint>();
    auto cp = read_row(res, 0);
    if (!cp) return std::move(cp).error();
    return std::optional<Checkpoint>(std::move(*cp));
  }

  const detail::PgConninfo info_;
  mutable std::mutex mu_;         // guards conn_ and sqlstate_: one statement at a time
  ConnPtr conn_;                  // GUARDED_BY(mu_)
  mutable std::string sqlstate_;  // of the last failed statement; GUARDED_BY(mu_)
  // Statement text (+ parameter types) -> its prepared name on conn_; GUARDED_BY(mu_)
  mutable std::unordered_map<std::string, std::string> prepared_;
  const Retention retention_;
};

}  // namespace

Result<std::unique_ptr<Checkpointer>> open_postgres_checkpointer(std::string_view conninfo,
                                                                 Retention retention) {
  auto info = detail::parse_pg_conninfo(conninfo);
  if (!info) return std::move(info).error();
  ConnPtr conn(PQconnectdb(info->conninfo.c_str()));
  if (!conn)
    return Error(Errc::io_error, info->description + ": connecting: libpq is out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK)
    return Error(Errc::io_error,
                 info->description + ": connecting: " +
                     detail::scrub_password(trimmed(PQerrorMessage(conn.get())), info->conninfo) +
                     "; check that the server runs, the address and the credentials");
  // Notices (e.g. "relation already exists, skipping") are not for the user's terminal.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  auto cp = std::make_unique<PostgresCheckpointer>(std::move(*info), std::move(conn), retention);
  if (auto s = cp->ensure_schema(); !s) return std::move(s).error();
  return std::unique_ptr<Checkpointer>(std::move(cp));
}

bool is_postgres_uri(std::string_view store) {
  return detail::is_postgres_uri(store);
}

std::string redact_store(std::string_view store) {
  return detail::scrub_password(std::string(store), store);
}

Result<std::unique_ptr<Checkpointer>> open_checkpointer(std::string_view store,
                                                        Retention retention) {
  if (is_postgres_uri(store)) return open_postgres_checkpointer(store, retention);
  return open_sqlite_checkpointer(std::filesystem::path(std::string(store)), retention);
}

}  // namespace weir::graph
