// The SQLite store: one connection guarded by a mutex, statements prepared once, the table
// `store_items` beside whatever else the file holds (a checkpointer's tables).
#include <sqlite3.h>

#include <chrono>
#include <climits>
#include <mutex>
#include <optional>

#include "sqlite_common.hpp"
#include "store_common.hpp"
#include "weir/graph/store.hpp"

namespace weir::graph {
namespace {

using namespace store_detail;

using sqlite::DbPtr;
using sqlite::kBusyTimeoutMs;
using sqlite::StmtPtr;
using Use = sqlite::StmtUse;

// `namespace` is the labels joined with '.' (store_common.hpp), compared in byte order (BINARY);
// `seq` is the put order (max + 1 under the write lock), which search reads newest first.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS store_items (
  namespace  TEXT    NOT NULL,
  key        TEXT    NOT NULL,
  value      TEXT    NOT NULL,  -- JSON text of an object
  created_at INTEGER NOT NULL,  -- unix ms
  updated_at INTEGER NOT NULL,  -- unix ms
  seq        INTEGER NOT NULL,
  PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS store_items_seq ON store_items (seq);
)sql";

constexpr const char* kColumns = "namespace, key, value, created_at, updated_at, seq";

// A stored item's row (namespace, key, value, created_at, updated_at, seq).
StoredRow row_of(const Use& u) {
  return {std::string(u.text(0)),
          std::string(u.text(1)),
          std::string(u.text(2)),
          u.int64(3),
          u.int64(4),
          u.int64(5)};
}

std::string describe(std::string_view path) {
  return "sqlite store '" + std::string(path) + "'";
}

Error sqlite_error(std::string_view path, sqlite3* db, int rc, std::string_view what) {
  return sqlite::error(describe(path), db, rc, what);
}

Status exec(std::string_view path, sqlite3* db, const char* sql, std::string_view what) {
  char* msg = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &msg);
  sqlite3_free(msg);
  if (rc != SQLITE_OK) return sqlite_error(path, db, rc, what);
  return {};
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string path, DbPtr db, StoreLimits limits)
      : path_(std::move(path)), db_(std::move(db)), limits_(limits) {}

  // Called once by open_sqlite_store before the object is shared.
  Status prepare() {
    const std::string cols = kColumns;
    const std::string range = "(namespace = ?2 OR (namespace >= ?3 AND namespace < ?4))";
    struct {
      StmtPtr* stmt;
      std::string sql;
    } all[] = {
        {&begin_write_, "BEGIN IMMEDIATE"},
        {&begin_read_, "BEGIN"},
        {&commit_, "COMMIT"},
        {&rollback_, "ROLLBACK"},
        {&next_seq_, "SELECT coalesce(max(seq), 0) + 1 FROM store_items"},
        {&upsert_,
         "INSERT INTO store_items (" + cols +
             ") VALUES (?1, ?2, ?3, ?4, ?4, ?5) ON CONFLICT (namespace, key) DO UPDATE SET "
             "value = excluded.value, updated_at = excluded.updated_at, seq = excluded.seq"},
        {&delete_, "DELETE FROM store_items WHERE namespace = ?1 AND key = ?2"},
        {&get_, "SELECT " + cols + " FROM store_items WHERE namespace = ?1 AND key = ?2"},
        {&scan_all_,
         "SELECT " + cols + " FROM store_items WHERE seq < ?1 ORDER BY seq DESC LIMIT ?5"},
        {&scan_prefix_, "SELECT " + cols + " FROM store_items WHERE seq < ?1 AND " + range +
                            " ORDER BY seq DESC LIMIT ?5"},
        {&namespaces_all_, "SELECT DISTINCT namespace FROM store_items"},
        {&namespaces_prefix_, "SELECT DISTINCT namespace FROM store_items WHERE " + range},
    };
    for (auto& [stmt, sql] : all) {
      sqlite3_stmt* raw = nullptr;
      int rc =
          sqlite3_prepare_v3(db_.get(), sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
      if (rc != SQLITE_OK) return error(rc, "preparing statements");
      stmt->reset(raw);
    }
    return {};
  }

  Status put(const Namespace& ns, std::string_view key, const boost::json::value& value) override {
    if (value.is_null()) return remove(ns, key);
    if (auto s = check_item(ns, key); !s) return s;
    std::string text;
    if (auto s = check_store_value(value, limits_, &text); !s) return s;
    const std::string joined = join_namespace(ns);
    const int64_t now = now_ms();
    std::lock_guard lock(mu_);
    return write("putting " + describe_item(ns, key),
                 [&]() -> Status { return upsert(joined, ns, key, text, now); });
  }

  // In one BEGIN IMMEDIATE transaction: the file's write lock is held from the read to the
  // write, so no other connection (this process's or another's) writes between them.
  Status update(const Namespace& ns, std::string_view key, const StoreChange& change) override {
    if (auto s = check_item(ns, key); !s) return s;
    const std::string joined = join_namespace(ns);
    const int64_t now = now_ms();
    std::lock_guard lock(mu_);
    return write("updating " + describe_item(ns, key), [&]() -> Status {
      std::optional<StoreItem> had;
      {
        Use q(get_);
        q.bind(1, joined).bind(2, key);
        const int rc = q.step();
        if (rc == SQLITE_ROW) {
          auto item = item_of(row_of(q), describe(path_));
          if (!item) return std::move(item).error();
          had = std::move(*item);
        } else if (rc != SQLITE_DONE) {
          return error(rc, "reading " + describe_item(ns, key));
        }
      }
      auto next = change(had);
      if (!next) return std::move(next).error();
      if (next->is_null()) {
        if (!had) return {};
        Use d(delete_);
        d.bind(1, joined).bind(2, key);
        if (int rc = d.step(); rc != SQLITE_DONE)
          return error(rc, "deleting " + describe_item(ns, key));
        return {};
      }
      std::string text;
      if (auto s = check_store_value(*next, limits_, &text); !s) return s;
      return upsert(joined, ns, key, text, now);
    });
  }

  Status remove(const Namespace& ns, std::string_view key) override {
    if (auto s = check_item(ns, key); !s) return s;
    const std::string joined = join_namespace(ns);
    std::lock_guard lock(mu_);
    Use q(delete_);
    q.bind(1, joined).bind(2, key);
    if (int rc = q.step(); rc != SQLITE_DONE)
      return error(rc, "deleting " + describe_item(ns, key));
    return {};
  }

  Result<std::optional<StoreItem>> get(const Namespace& ns, std::string_view key) const override {
    if (auto s = check_item(ns, key); !s) return std::move(s).error();
    const std::string joined = join_namespace(ns);
    StoredRow row;
    {
      std::lock_guard lock(mu_);
      Use q(get_);
      q.bind(1, joined).bind(2, key);
      int rc = q.step();
      if (rc == SQLITE_DONE) return std::optional<StoreItem>();
      if (rc != SQLITE_ROW) return error(rc, "reading " + describe_item(ns, key));
      row = row_of(q);
    }
    auto item = item_of(std::move(row), describe(path_));
    if (!item) return std::move(item).error();
    return std::optional<StoreItem>(std::move(*item));
  }

  // Every batch in one read transaction: a consistent snapshot across the pages read.
  Result<std::vector<StoreItem>> search(const StoreSearch& q) const override {
    if (auto s = check_store_search(q, limits_); !s) return std::move(s).error();
    const PrefixRange range = prefix_range(join_namespace(q.namespace_prefix));
    const bool all = q.namespace_prefix.empty();
    std::lock_guard lock(mu_);
    return read("searching", [&]() {
      return search_rows(
          q,
          [&](std::optional<int64_t> below, std::size_t batch) -> Result<std::vector<StoredRow>> {
            Use s(all ? scan_all_ : scan_prefix_);
            s.bind(1, below.value_or(INT64_MAX)).bind(5, static_cast<int64_t>(batch));
            if (!all) s.bind(2, range.exact).bind(3, range.low).bind(4, range.high);
            std::vector<StoredRow> rows;
            int rc;
            while ((rc = s.step()) == SQLITE_ROW) rows.push_back(row_of(s));
            if (rc != SQLITE_DONE) return error(rc, "searching");
            return rows;
          },
          describe(path_));
    });
  }

  Result<std::vector<Namespace>> list_namespaces(const NamespaceQuery& q) const override {
    if (auto s = check_namespace_query(q, limits_); !s) return std::move(s).error();
    const Namespace lit = literal_prefix(q.prefix);
    const PrefixRange range = prefix_range(join_namespace(lit));
    std::vector<std::string> joined;
    {
      std::lock_guard lock(mu_);
      Use s(lit.empty() ? namespaces_all_ : namespaces_prefix_);
      if (!lit.empty()) s.bind(2, range.exact).bind(3, range.low).bind(4, range.high);
      int rc;
      while ((rc = s.step()) == SQLITE_ROW) joined.emplace_back(s.text(0));
      if (rc != SQLITE_DONE) return error(rc, "listing namespaces");
    }
    return select_namespaces(joined, q);
  }

  const StoreLimits& limits() const override { return limits_; }

 private:
  Error error(int rc, std::string_view what) const {
    return sqlite_error(path_, db_.get(), rc, what);
  }
  Status check_item(const Namespace& ns, std::string_view key) const {
    if (auto s = check_store_namespace(ns, limits_, "namespace"); !s) return s;
    return check_store_key(key, limits_);
  }
  // REQUIRES: mu_ held, inside write(). The item's value is `text`, next in the put order.
  Status upsert(const std::string& joined, const Namespace& ns, std::string_view key,
                const std::string& text, int64_t now) {
    int64_t seq = 0;
    {
      Use q(next_seq_);
      if (int rc = q.step(); rc != SQLITE_ROW) return error(rc, "reading the put order");
      seq = q.int64(0);
    }
    Use q(upsert_);
    q.bind(1, joined).bind(2, key).bind(3, text).bind(4, now).bind(5, seq);
    if (int rc = q.step(); rc != SQLITE_DONE) return error(rc, "putting " + describe_item(ns, key));
    return {};
  }
  // REQUIRES: mu_ held. `work` inside BEGIN IMMEDIATE ... COMMIT; rolled back when it fails.
  template <class Work>
  Status write(std::string_view what, Work work) {
    {
      Use b(begin_write_);
      if (int rc = b.step(); rc != SQLITE_DONE) return error(rc, what);
    }
    Status s = work();
    if (s) {
      Use c(commit_);
      const int rc = c.step();
      if (rc == SQLITE_DONE) return s;
      s = error(rc, what);
    }
    Use r(rollback_);
    (void)r.step();
    return s;
  }
  // REQUIRES: mu_ held. `work` inside BEGIN ... COMMIT (a read).
  template <class Work>
  auto read(std::string_view what, Work work) const -> decltype(work()) {
    {
      Use b(begin_read_);
      if (int rc = b.step(); rc != SQLITE_DONE) return error(rc, what);
    }
    auto out = work();
    Use c(commit_);
    if (int rc = c.step(); rc != SQLITE_DONE) {
      Use r(rollback_);
      (void)r.step();
    }
    return out;
  }

  const std::string path_;
  mutable std::mutex mu_;  // guards db_ and every statement (the connection is NOMUTEX)
  DbPtr db_;
  // Declared after db_ so they are finalized before the connection closes.
  StmtPtr begin_write_, begin_read_, commit_, rollback_, next_seq_, upsert_, delete_, get_,
      scan_all_, scan_prefix_, namespaces_all_, namespaces_prefix_;
  const StoreLimits limits_;
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::filesystem::path& db,
                                                 StoreLimits limits) {
  const std::string path = db.string();
  if (path.empty())
    return Error(Errc::invalid_argument, "sqlite store: the database path is empty");
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
  if (auto s = exec(path, raw, kSchema, "creating the store_items table"); !s)
    return std::move(s).error();
  auto store = std::make_unique<SqliteStore>(path, std::move(conn), limits);
  if (auto s = store->prepare(); !s) return std::move(s).error();
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace weir::graph
