// The SQLite checkpointer: one connection guarded by a mutex, statements prepared once.
#include <sqlite3.h>

#include <cassert>
#include <climits>
#include <mutex>
#include <unordered_set>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "checkpointer_common.hpp"
#include "sqlite_common.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph {
namespace {

using sqlite::DbPtr;
using sqlite::kBusyTimeoutMs;
using sqlite::StmtPtr;
using sqlite::StmtUse;

// Schema version 1. `seq` is a database-wide insertion counter (max(threads.updated_seq) + 1
// under the write lock): it orders list()/latest() by put order and threads() by recency, and
// unlike rowid it survives VACUUM.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS checkpoints (
  thread_id     TEXT    NOT NULL,
  checkpoint_id TEXT    NOT NULL,
  parent_id     TEXT    NOT NULL DEFAULT '',
  step          INTEGER NOT NULL,
  seq           INTEGER NOT NULL,
  writes        TEXT    NOT NULL,  -- JSON object: channel -> new full value (this step only)
  pending       TEXT    NOT NULL,  -- JSON object
  metadata      TEXT    NOT NULL,  -- JSON object
  created_at    INTEGER NOT NULL,  -- unix ms
  PRIMARY KEY (thread_id, checkpoint_id)
);
CREATE INDEX IF NOT EXISTS checkpoints_latest ON checkpoints (thread_id, seq);
CREATE TABLE IF NOT EXISTS threads (
  thread_id   TEXT    NOT NULL PRIMARY KEY,
  updated_seq INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL  -- unix ms
);
CREATE INDEX IF NOT EXISTS threads_recent ON threads (updated_seq);
INSERT INTO schema_version (version) VALUES (1);
)sql";

// Version 2 (applied to a fresh file after version 1, and to a version 1 file on open).
// `artifacts`: blobs of the run's ArtifactStore that a thread's checkpoints reference, written
// in the transaction of the first checkpoint that references them, deleted with the thread.
// `thread_holders`: the runner holding each thread (claim_thread); times are the writers' unix
// ms (hosts sharing a file over a network need clocks within a fraction of the lease).
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE IF NOT EXISTS artifacts (
  thread_id   TEXT    NOT NULL,
  artifact_id TEXT    NOT NULL,
  media_type  TEXT    NOT NULL,
  bytes       BLOB    NOT NULL,
  created_at  INTEGER NOT NULL,  -- unix ms
  PRIMARY KEY (thread_id, artifact_id)
);
CREATE TABLE IF NOT EXISTS thread_holders (
  thread_id TEXT    NOT NULL PRIMARY KEY,
  token     TEXT    NOT NULL,
  host      TEXT    NOT NULL,
  pid       INTEGER NOT NULL,
  lease_ms  INTEGER NOT NULL,
  since     INTEGER NOT NULL,  -- unix ms
  heartbeat INTEGER NOT NULL   -- unix ms
);
UPDATE schema_version SET version = 2;
)sql";

// Version 3 (applied after version 2, to a fresh file or on open): the `snapshot` column, 1 when
// writes hold "$snapshot": true, so prune finds where state_at stops without parsing writes. Rows
// written before read 0 (prune then walks past their snapshots to the root: it keeps more, never
// less).
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE checkpoints ADD COLUMN snapshot INTEGER NOT NULL DEFAULT 0;
UPDATE schema_version SET version = 3;
)sql";

constexpr const char* kColumns =
    "thread_id, checkpoint_id, parent_id, step, writes, pending, metadata, created_at";

std::string describe(std::string_view path) {
  return "sqlite checkpointer '" + std::string(path) + "'";
}

Error sqlite_error(std::string_view path, sqlite3* db, int rc, std::string_view what) {
  return sqlite::error(describe(path), db, rc, what);
}

class SqliteCheckpointer final : public Checkpointer {
 public:
  SqliteCheckpointer(std::string path, DbPtr db, Retention retention)
      : path_(std::move(path)), db_(std::move(db)), retention_(retention) {}

  // Called once by open_sqlite_checkpointer before the object is shared.
  Status prepare_statements() {
    const std::string cols = kColumns;
    struct {
      StmtPtr* stmt;
      std::string sql;
    } all[] = {
        {&begin_write_, "BEGIN IMMEDIATE"},
        {&begin_read_, "BEGIN"},
        {&commit_, "COMMIT"},
        {&rollback_, "ROLLBACK"},
        {&exists_, "SELECT 1 FROM checkpoints WHERE thread_id = ?1 AND checkpoint_id = ?2"},
        {&next_seq_, "SELECT coalesce(max(updated_seq), 0) + 1 FROM threads"},
        {&insert_, "INSERT INTO checkpoints (" + cols +
                       ", seq, snapshot) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"},
        {&touch_thread_,
         "INSERT INTO threads (thread_id, updated_seq, updated_at) VALUES (?1, ?2, ?3) "
         "ON CONFLICT (thread_id) DO UPDATE SET updated_seq = excluded.updated_seq, "
         "updated_at = excluded.updated_at"},
        {&latest_,
         "SELECT " + cols + " FROM checkpoints WHERE thread_id = ?1 ORDER BY seq DESC LIMIT 1"},
        {&get_, "SELECT " + cols + " FROM checkpoints WHERE thread_id = ?1 AND checkpoint_id = ?2"},
        {&list_,
         "SELECT " + cols + " FROM checkpoints WHERE thread_id = ?1 ORDER BY seq DESC LIMIT ?2"},
        {&chain_row_,
         "SELECT parent_id, writes FROM checkpoints WHERE thread_id = ?1 AND checkpoint_id = ?2"},
        {&thread_exists_, "SELECT 1 FROM threads WHERE thread_id = ?1"},
        {&delete_checkpoints_, "DELETE FROM checkpoints WHERE thread_id = ?1"},
        {&delete_thread_, "DELETE FROM threads WHERE thread_id = ?1"},
        {&threads_, "SELECT thread_id FROM threads ORDER BY updated_seq DESC LIMIT ?1"},
        {&insert_artifact_,
         "INSERT OR IGNORE INTO artifacts (thread_id, artifact_id, media_type, bytes, created_at) "
         "VALUES (?1, ?2, ?3, ?4, ?5)"},
        {&get_artifact_,
         "SELECT media_type, bytes FROM artifacts WHERE thread_id = ?1 AND artifact_id = ?2"},
        {&delete_artifacts_, "DELETE FROM artifacts WHERE thread_id = ?1"},
        {&delete_holder_, "DELETE FROM thread_holders WHERE thread_id = ?1"},
        {&get_holder_,
         "SELECT token, host, pid, lease_ms, since, heartbeat FROM thread_holders "
         "WHERE thread_id = ?1"},
        {&upsert_holder_,
         "INSERT INTO thread_holders (thread_id, token, host, pid, lease_ms, since, heartbeat) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (thread_id) DO UPDATE SET "
         "token = excluded.token, host = excluded.host, pid = excluded.pid, "
         "lease_ms = excluded.lease_ms, since = excluded.since, heartbeat = excluded.heartbeat"},
        {&beat_holder_,
         "UPDATE thread_holders SET heartbeat = ?3 WHERE thread_id = ?1 AND token = ?2"},
        {&release_holder_, "DELETE FROM thread_holders WHERE thread_id = ?1 AND token = ?2"},
        {&thread_stats_, "SELECT count(*), min(created_at) FROM checkpoints WHERE thread_id = ?1"},
        {&prune_kept_,
         "SELECT checkpoint_id, parent_id, seq, snapshot FROM checkpoints WHERE thread_id = ?1 "
         "AND created_at >= ?2 ORDER BY seq DESC LIMIT ?3"},
        {&prune_row_,
         "SELECT checkpoint_id, parent_id, seq, snapshot FROM checkpoints WHERE thread_id = ?1 "
         "AND checkpoint_id = ?2"},
        {&prune_delete_, "DELETE FROM checkpoints WHERE thread_id = ?1 AND seq < ?2"},
    };
    for (auto& [stmt, sql] : all) {
      sqlite3_stmt* s = nullptr;
      int rc =
          sqlite3_prepare_v3(db_.get(), sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
      if (rc != SQLITE_OK) return error(rc, "preparing statement `" + sql + "`");
      stmt->reset(s);
    }
    return {};
  }

  Status put(const Checkpoint& cp) override {
    if (auto s = detail::check_put_ids(cp); !s) return s;
    if (auto s = detail::check_put_values(cp); !s) return s;
    // Serialise before taking the lock; these strings outlive every statement use below.
    const std::string writes = boost::json::serialize(cp.writes);
    const std::string pending = boost::json::serialize(cp.pending);
    const std::string metadata = boost::json::serialize(cp.metadata);
    const int64_t now = detail::unix_ms_now();

    std::lock_guard lock(mu_);
    Transaction txn(*this);
    if (auto s = txn.begin(begin_write_, "put"); !s) return s;
    if (!cp.claim_token.empty()) {
      auto held = read_holder(cp.thread_id);
      if (!held) return std::move(held).error();
      if (!*held || (**held).token != cp.claim_token)
        return detail::claim_lost(cp.thread_id, *held ? &**held : nullptr);
      if (auto s = beat(cp.thread_id, cp.claim_token, now); !s) return s;
    }
    {
      auto found = exists(cp.thread_id, cp.checkpoint_id);
      if (!found) return std::move(found).error();
      if (*found) return detail::duplicate_checkpoint(cp);
    }
    if (!cp.parent_id.empty()) {
      auto found = exists(cp.thread_id, cp.parent_id);
      if (!found) return std::move(found).error();
      if (!*found) return detail::unknown_parent(cp);
    }
    int64_t seq = 0;
    {
      StmtUse q(next_seq_);
      int rc = q.step();
      if (rc != SQLITE_ROW) return error(rc, "put: reading the insertion counter");
      seq = q.int64(0);
    }
    {
      StmtUse q(insert_);
      q.bind(1, cp.thread_id);
      q.bind(2, cp.checkpoint_id);
      q.bind(3, cp.parent_id);
      q.bind(4, cp.step);
      q.bind(5, writes);
      q.bind(6, pending);
      q.bind(7, metadata);
      q.bind(8, now);
      q.bind(9, seq);
      q.bind(10, int64_t{detail::is_snapshot(cp.writes) ? 1 : 0});
      int rc = q.step();
      if ((rc & 0xff) == SQLITE_CONSTRAINT) return detail::duplicate_checkpoint(cp);
      if (rc != SQLITE_DONE)
        return error(rc, "put: inserting checkpoint '" + cp.checkpoint_id + "'");
    }
    {
      StmtUse q(touch_thread_);
      q.bind(1, cp.thread_id);
      q.bind(2, seq);
      q.bind(3, now);
      int rc = q.step();
      if (rc != SQLITE_DONE) return error(rc, "put: updating thread '" + cp.thread_id + "'");
    }
    for (const auto& a : cp.artifacts) {
      StmtUse q(insert_artifact_);
      q.bind(1, cp.thread_id);
      q.bind(2, a.id);
      q.bind(3, a.media_type);
      q.bind_blob(4, a.bytes);
      q.bind(5, now);
      int rc = q.step();
      if (rc != SQLITE_DONE) return error(rc, "put: storing artifact '" + a.id + "'");
    }
    if (retention_.enabled()) {
      std::size_t rows = 0;
      int64_t oldest = 0;
      {
        StmtUse q(thread_stats_);
        q.bind(1, cp.thread_id);
        int rc = q.step();
        if (rc != SQLITE_ROW) return error(rc, "put: counting the checkpoints of the thread");
        rows = static_cast<std::size_t>(q.int64(0));
        oldest = q.int64(1);
      }
      if (detail::prune_due(retention_, rows, oldest, now)) {
        auto pruned = prune_locked(cp.thread_id, retention_, now);
        if (!pruned) return std::move(pruned).error();
      }
    }
    return txn.commit("put");
  }

  Result<std::optional<Checkpoint>> latest(std::string_view thread_id) const override {
    std::lock_guard lock(mu_);
    StmtUse q(latest_);
    q.bind(1, thread_id);
    return read_optional(q, "latest");
  }

  Result<std::optional<Checkpoint>> get(std::string_view thread_id,
                                        std::string_view checkpoint_id) const override {
    std::lock_guard lock(mu_);
    StmtUse q(get_);
    q.bind(1, thread_id);
    q.bind(2, checkpoint_id);
    return read_optional(q, "get");
  }

  Result<std::vector<Checkpoint>> list(std::string_view thread_id,
                                       std::size_t limit) const override {
    std::vector<Checkpoint> out;
    std::lock_guard lock(mu_);
    StmtUse q(list_);
    q.bind(1, thread_id);
    q.bind(2, clamp_limit(limit));
    for (;;) {
      int rc = q.step();
      if (rc == SQLITE_DONE) return out;
      if (rc != SQLITE_ROW) return error(rc, "list");
      auto cp = read_row(q);
      if (!cp) return std::move(cp).error();
      out.push_back(std::move(*cp));
    }
  }

  // A walk from the tip to the root, one primary-key lookup per ancestor, inside one read
  // transaction (a consistent snapshot). Chosen over a recursive CTE because the walk streams
  // newest first (memory: the state plus one row), and it can tell a broken or cyclic chain in a
  // damaged file from a missing checkpoint.
  Result<boost::json::object> state_at(std::string_view thread_id,
                                       std::string_view checkpoint_id) const override {
    std::lock_guard lock(mu_);
    Transaction txn(*this);
    if (auto s = txn.begin(begin_read_, "state_at"); !s) return std::move(s).error();
    boost::json::object state;
    std::string id(checkpoint_id);
    std::string child;
    std::unordered_set<std::string> seen;
    for (;;) {
      StmtUse q(chain_row_);
      q.bind(1, thread_id);
      q.bind(2, id);
      int rc = q.step();
      if (rc == SQLITE_DONE) {
        if (!child.empty())
          return Error(Errc::corrupt_data, describe(path_) + ": thread '" + std::string(thread_id) +
                                               "': checkpoint '" + child + "' names parent '" + id +
                                               "', which is missing (broken parent chain)");
        StmtUse t(thread_exists_);
        t.bind(1, thread_id);
        int trc = t.step();
        if (trc != SQLITE_ROW && trc != SQLITE_DONE) return error(trc, "state_at");
        return detail::unknown_checkpoint("state_at", thread_id, checkpoint_id, trc == SQLITE_ROW);
      }
      if (rc != SQLITE_ROW) return error(rc, "state_at");
      auto writes = parse_object(q.text(1), thread_id, id, "writes");
      if (!writes) return std::move(writes).error();
      detail::fold_older_writes(state, *writes);
      std::string parent(q.text(0));
      if (parent.empty() || detail::is_snapshot(*writes)) return state;
      if (!seen.insert(parent).second)
        return Error(Errc::corrupt_data, describe(path_) + ": thread '" + std::string(thread_id) +
                                             "': the parent chain of checkpoint '" +
                                             std::string(checkpoint_id) + "' loops at '" + parent +
                                             "'");
      child = std::move(id);
      id = std::move(parent);
    }
  }

  Status delete_thread(std::string_view thread_id) override {
    std::lock_guard lock(mu_);
    Transaction txn(*this);
    if (auto s = txn.begin(begin_write_, "delete_thread"); !s) return s;
    for (const StmtPtr* stmt :
         {&delete_checkpoints_, &delete_thread_, &delete_artifacts_, &delete_holder_}) {
      StmtUse q(*stmt);
      q.bind(1, thread_id);
      int rc = q.step();
      if (rc != SQLITE_DONE) return error(rc, "delete_thread '" + std::string(thread_id) + "'");
    }
    return txn.commit("delete_thread");
  }

  Result<std::size_t> prune(std::string_view thread_id, const Retention& policy) override {
    if (!policy.enabled()) return std::size_t{0};
    std::lock_guard lock(mu_);
    Transaction txn(*this);
    if (auto s = txn.begin(begin_write_, "prune"); !s) return std::move(s).error();
    const int64_t now = detail::unix_ms_now();
    auto held = read_holder(thread_id);
    if (!held) return std::move(held).error();
    if (auto s = detail::refuse_prune_in_use(thread_id, policy, *held ? &**held : nullptr, now); !s)
      return std::move(s).error();
    auto n = prune_locked(thread_id, policy, now);
    if (!n) return n;
    if (auto s = txn.commit("prune"); !s) return std::move(s).error();
    return n;
  }

  Result<std::optional<Checkpoint::Artifact>> get_artifact(
      std::string_view thread_id, std::string_view artifact_id) const override {
    std::lock_guard lock(mu_);
    StmtUse q(get_artifact_);
    q.bind(1, thread_id);
    q.bind(2, artifact_id);
    int rc = q.step();
    if (rc == SQLITE_DONE) return std::optional<Checkpoint::Artifact>();
    if (rc != SQLITE_ROW)
      return error(rc, "get_artifact '" + std::string(artifact_id) + "' of thread '" +
                           std::string(thread_id) + "'");
    Checkpoint::Artifact a;
    a.id = artifact_id;
    a.media_type = q.text(0);
    a.bytes = q.blob(1);
    return std::optional<Checkpoint::Artifact>(std::move(a));
  }

  // Read, decide and write in one write transaction: two processes claiming at once are
  // serialised by SQLite's write lock, and the second sees the first's claim.
  Result<ThreadHolder> claim_thread(std::string_view thread_id,
                                    const ThreadHolder& holder) override {
    if (auto s = detail::check_claim(thread_id, holder); !s) return std::move(s).error();
    std::lock_guard lock(mu_);
    Transaction txn(*this);
    if (auto s = txn.begin(begin_write_, "claim_thread"); !s) return std::move(s).error();
    const int64_t now = detail::unix_ms_now();
    auto held = read_holder(thread_id);
    if (!held) return std::move(held).error();
    if (*held && (**held).token != holder.token && detail::claim_live(**held, holder, now))
      return detail::thread_busy(thread_id, **held, now);
    ThreadHolder stored = holder;
    stored.since_ms = *held && (**held).token == holder.token ? (**held).since_ms : now;
    stored.heartbeat_ms = now;
    {
      StmtUse q(upsert_holder_);
      q.bind(1, thread_id);
      q.bind(2, stored.token);
      q.bind(3, stored.host);
      q.bind(4, stored.pid);
      q.bind(5, stored.lease_ms);
      q.bind(6, stored.since_ms);
      q.bind(7, stored.heartbeat_ms);
      int rc = q.step();
      if (rc != SQLITE_DONE) return error(rc, "claim_thread '" + std::string(thread_id) + "'");
    }
    if (auto s = txn.commit("claim_thread"); !s) return std::move(s).error();
    return stored;
  }

  Status renew_thread(std::string_view thread_id, std::string_view token) override {
    std::lock_guard lock(mu_);
    Transaction txn(*this);
    if (auto s = txn.begin(begin_write_, "renew_thread"); !s) return s;
    auto held = read_holder(thread_id);
    if (!held) return std::move(held).error();
    if (!*held || (**held).token != token)
      return detail::claim_lost(thread_id, *held ? &**held : nullptr);
    if (auto s = beat(thread_id, token, detail::unix_ms_now()); !s) return s;
    return txn.commit("renew_thread");
  }

  Status release_thread(std::string_view thread_id, std::string_view token) override {
    std::lock_guard lock(mu_);
    StmtUse q(release_holder_);
    q.bind(1, thread_id);
    q.bind(2, token);
    int rc = q.step();
    if (rc != SQLITE_DONE) return error(rc, "release_thread '" + std::string(thread_id) + "'");
    return {};
  }

  Result<std::optional<ThreadHolder>> thread_holder(std::string_view thread_id) const override {
    std::lock_guard lock(mu_);
    return read_holder(thread_id);
  }

  Result<std::vector<std::string>> threads(std::size_t limit) const override {
    std::vector<std::string> out;
    std::lock_guard lock(mu_);
    StmtUse q(threads_);
    q.bind(1, clamp_limit(limit));
    for (;;) {
      int rc = q.step();
      if (rc == SQLITE_DONE) return out;
      if (rc != SQLITE_ROW) return error(rc, "threads");
      out.emplace_back(q.text(0));
    }
  }

 private:
  // BEGIN on construction by begin(); ROLLBACK on scope exit unless committed. A failed
  // statement may already have ended the transaction (SQLite rolls back on some errors), so the
  // rollback runs only while one is open.
  class Transaction {
   public:
    explicit Transaction(const SqliteCheckpointer& self) : self_(self) {}
    ~Transaction() {
      if (open_ && sqlite3_get_autocommit(self_.db_.get()) == 0) {
        StmtUse q(self_.rollback_);
        (void)q.step();
      }
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    Status begin(const StmtPtr& stmt, std::string_view what) {
      StmtUse q(stmt);
      int rc = q.step();
      if (rc != SQLITE_DONE)
        return self_.error(rc, std::string(what) + ": beginning a transaction");
      open_ = true;
      return {};
    }
    Status commit(std::string_view what) {
      StmtUse q(self_.commit_);
      int rc = q.step();
      if (rc != SQLITE_DONE) return self_.error(rc, std::string(what) + ": committing");
      open_ = false;
      return {};
    }

   private:
    const SqliteCheckpointer& self_;
    bool open_ = false;
  };

  static int64_t clamp_limit(std::size_t limit) {
    return limit > static_cast<std::size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(limit);
  }

  Error error(int rc, std::string_view what) const {
    return sqlite_error(path_, db_.get(), rc, what);
  }

  static detail::PruneRow prune_row(const StmtUse& q) {
    return {std::string(q.text(0)), std::string(q.text(1)), q.int64(2), q.int64(3) != 0};
  }

  // REQUIRES: mu_ held, inside a write transaction. Returns the number of checkpoints removed.
  // A thread that loses every checkpoint loses its artifacts with them (as delete_thread); its
  // claim stays, since a runner may hold it.
  Result<std::size_t> prune_locked(std::string_view thread_id, const Retention& policy,
                                   int64_t now) {
    const std::string what = "prune thread '" + std::string(thread_id) + "'";
    std::vector<detail::PruneRow> kept;
    {
      StmtUse q(prune_kept_);
      q.bind(1, thread_id);
      q.bind(2, detail::prune_age_cutoff(policy, now));
      q.bind(3, policy.keep_last > 0 ? clamp_limit(policy.keep_last) : INT64_MAX);
      for (;;) {
        int rc = q.step();
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) return error(rc, what);
        kept.push_back(prune_row(q));
      }
    }
    auto floor = detail::prune_floor(
        kept, [&](const std::string& id) -> Result<std::optional<detail::PruneRow>> {
          StmtUse q(prune_row_);
          q.bind(1, thread_id);
          q.bind(2, id);
          int rc = q.step();
          if (rc == SQLITE_DONE) return std::optional<detail::PruneRow>();
          if (rc != SQLITE_ROW) return error(rc, what);
          return std::optional<detail::PruneRow>(prune_row(q));
        });
    if (!floor) return std::move(floor).error();
    if (!*floor) {  // nothing kept: the whole thread goes
      std::size_t removed = 0;
      for (const StmtPtr* stmt : {&delete_checkpoints_, &delete_thread_, &delete_artifacts_}) {
        StmtUse q(*stmt);
        q.bind(1, thread_id);
        int rc = q.step();
        if (rc != SQLITE_DONE) return error(rc, what);
        if (stmt == &delete_checkpoints_)
          removed = static_cast<std::size_t>(sqlite3_changes(db_.get()));
      }
      return removed;
    }
    StmtUse q(prune_delete_);
    q.bind(1, thread_id);
    q.bind(2, **floor);
    int rc = q.step();
    if (rc != SQLITE_DONE) return error(rc, what);
    return static_cast<std::size_t>(sqlite3_changes(db_.get()));
  }

  // REQUIRES: mu_ held.
  Result<std::optional<ThreadHolder>> read_holder(std::string_view thread_id) const {
    StmtUse q(get_holder_);
    q.bind(1, thread_id);
    int rc = q.step();
    if (rc == SQLITE_DONE) return std::optional<ThreadHolder>();
    if (rc != SQLITE_ROW)
      return error(rc, "reading the holder of thread '" + std::string(thread_id) + "'");
    ThreadHolder h;
    h.token = q.text(0);
    h.host = q.text(1);
    h.pid = q.int64(2);
    h.lease_ms = q.int64(3);
    h.since_ms = q.int64(4);
    h.heartbeat_ms = q.int64(5);
    return std::optional<ThreadHolder>(std::move(h));
  }

  // REQUIRES: mu_ held, inside a write transaction.
  Status beat(std::string_view thread_id, std::string_view token, int64_t now) const {
    StmtUse q(beat_holder_);
    q.bind(1, thread_id);
    q.bind(2, token);
    q.bind(3, now);
    int rc = q.step();
    if (rc != SQLITE_DONE) return error(rc, "heartbeat of thread '" + std::string(thread_id) + "'");
    return {};
  }

  Result<bool> exists(std::string_view thread_id, std::string_view checkpoint_id) const {
    StmtUse q(exists_);
    q.bind(1, thread_id);
    q.bind(2, checkpoint_id);
    int rc = q.step();
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return error(rc, "put: looking up checkpoint '" + std::string(checkpoint_id) + "'");
  }

  Result<boost::json::object> parse_object(std::string_view text, std::string_view thread_id,
                                           std::string_view checkpoint_id,
                                           const char* column) const {
    return detail::parse_stored_object(text, describe(path_), thread_id, checkpoint_id, column);
  }

  // Columns in kColumns order.
  Result<Checkpoint> read_row(const StmtUse& q) const {
    Checkpoint cp;
    cp.thread_id = q.text(0);
    cp.checkpoint_id = q.text(1);
    cp.parent_id = q.text(2);
    cp.step = q.int64(3);
    cp.created_at_ms = q.int64(7);
    struct {
      boost::json::object* out;
      int col;
      const char* name;
    } json_cols[] = {
        {&cp.writes, 4, "writes"}, {&cp.pending, 5, "pending"}, {&cp.metadata, 6, "metadata"}};
    for (auto& [out, col, name] : json_cols) {
      auto obj = parse_object(q.text(col), cp.thread_id, cp.checkpoint_id, name);
      if (!obj) return std::move(obj).error();
      *out = std::move(*obj);
    }
    return cp;
  }

  Result<std::optional<Checkpoint>> read_optional(StmtUse& q, std::string_view what) const {
    int rc = q.step();
    if (rc == SQLITE_DONE) return std::optional<Checkpoint>();
    if (rc != SQLITE_ROW) return error(rc, what);
    auto cp = read_row(q);
    if (!cp) return std::move(cp).error();
    return std::optional<Checkpoint>(std::move(*cp));
  }

  const std::string path_;
  mutable std::mutex mu_;  // guards db_ and every statement (the connection is NOMUTEX)
  DbPtr db_;
  // Declared after db_ so they are finalized before the connection closes.
  StmtPtr begin_write_, begin_read_, commit_, rollback_, exists_, next_seq_, insert_, touch_thread_,
      latest_, get_, list_, chain_row_, thread_exists_, delete_checkpoints_, delete_thread_,
      threads_, insert_artifact_, get_artifact_, delete_artifacts_, delete_holder_, get_holder_,
      upsert_holder_, beat_holder_, release_holder_, thread_stats_, prune_kept_, prune_row_,
      prune_delete_;
  const Retention retention_;
};

// Runs statements that return no rows we need (pragmas are read and discarded).
Status exec(std::string_view path, sqlite3* db, const char* sql, std::string_view what) {
  char* msg = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &msg);
  sqlite3_free(msg);
  if (rc != SQLITE_OK) return sqlite_error(path, db, rc, what);
  return {};
}

// Creates the schema in a fresh file, or checks the version of an existing one.
Status ensure_schema(const std::string& path, sqlite3* db) {
  if (auto s = exec(path, db, "BEGIN IMMEDIATE", "opening"); !s) return s;
  auto fail = [&](Status s) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  };
  if (auto s =
          exec(path, db, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
               "creating the schema_version table");
      !s)
    return fail(std::move(s));
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT max(version) FROM schema_version", -1, &raw, nullptr);
  StmtPtr q(raw);
  if (rc == SQLITE_OK) rc = sqlite3_step(raw);
  if (rc != SQLITE_ROW) return fail(sqlite_error(path, db, rc, "reading the schema version"));
  const bool fresh = sqlite3_column_type(raw, 0) == SQLITE_NULL;
  const int64_t version = sqlite3_column_int64(raw, 0);
  q.reset();
  if (fresh) {
    if (auto s = exec(path, db, kSchemaV1, "creating the schema"); !s) return fail(std::move(s));
    if (auto s = exec(path, db, kSchemaV2, "creating the schema (version 2)"); !s)
      return fail(std::move(s));
    if (auto s = exec(path, db, kSchemaV3, "creating the schema (version 3)"); !s)
      return fail(std::move(s));
  } else if (version == 1 || version == 2) {
    // Each step in the same transaction: a failed migration leaves the file as it was.
    if (version == 1)
      if (auto s = exec(path, db, kSchemaV2, "migrating the schema from version 1 to 2"); !s)
        return fail(std::move(s));
    if (auto s = exec(path, db, kSchemaV3, "migrating the schema to version 3"); !s)
      return fail(std::move(s));
  } else if (version > kSqliteSchemaVersion) {
    return fail(Error(Errc::unsupported,
                      describe(path) + ": the file has checkpoint schema version " +
                          std::to_string(version) + ", newer than this weir build reads (" +
                          std::to_string(kSqliteSchemaVersion) +
                          "); open it with a newer weir, or use another file"));
  } else if (version < 1) {
    return fail(Error(Errc::corrupt_data, describe(path) + ": invalid checkpoint schema version " +
                                              std::to_string(version)));
  }
  return exec(path, db, "COMMIT", "committing the schema");
}

}  // namespace

Result<std::unique_ptr<Checkpointer>> open_sqlite_checkpointer(const std::filesystem::path& db,
                                                               Retention retention) {
  std::string path = db.string();
  if (path.empty())
    return Error(Errc::invalid_argument, "sqlite checkpointer: the database path is empty");
  if (sqlite3_threadsafe() == 0)
    return Error(Errc::unsupported, describe(path) +
                                        ": the SQLite library was built without thread "
                                        "support (SQLITE_THREADSAFE=0)");
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr conn(raw);
  if (rc != SQLITE_OK) return sqlite_error(path, conn.get(), rc, "opening");
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);
  // The first statement that reads the file: a non-database file fails here with NOTADB.
  if (auto s = exec(path, raw, "PRAGMA journal_mode = WAL", "enabling WAL journaling"); !s)
    return std::move(s).error();
  if (auto s = exec(path, raw, "PRAGMA synchronous = NORMAL", "setting synchronous=NORMAL"); !s)
    return std::move(s).error();
  if (auto s = ensure_schema(path, raw); !s) return std::move(s).error();
  auto cp = std::make_unique<SqliteCheckpointer>(path, std::move(conn), retention);
  if (auto s = cp->prepare_statements(); !s) return std::move(s).error();
  return std::unique_ptr<Checkpointer>(std::move(cp));
}

}  // namespace weir::graph
