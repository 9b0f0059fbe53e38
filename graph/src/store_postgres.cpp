// The PostgreSQL store: a client of weir's PostgreSQL layer (pg/), as the checkpointer is: one
// connection guarded by a mutex, binary parameters, statements prepared once, a lost connection
// re-established and the call run again. Namespaces as text in byte order (COLLATE "C"), values
// as JSON text in bytea, times from the server's clock, put order from a sequence.
#include <climits>
#include <mutex>
#include <optional>

#include "store_common.hpp"
#include "weir/graph/store.hpp"
#include "weir/pg/connection.hpp"
#include "weir/pg/schema.hpp"

namespace weir::graph {
namespace {

using namespace store_detail;
using pg::Attempt;
using pg::Params;
using pg::Rows;

// The store's tables are not under weir's schema version (pg/schema.hpp): they are created here,
// at open, with IF NOT EXISTS, under their own advisory lock (concurrent CREATEs of one table
// would otherwise collide in the catalog).
constexpr int64_t kStoreSchemaLockKey = 0x77656972'00000002;  // "weir" 2

constexpr const char* kSchema = R"sql(
CREATE SEQUENCE IF NOT EXISTS weir_store_seq;
CREATE TABLE IF NOT EXISTS $table (
  namespace  TEXT COLLATE "C" NOT NULL,  -- labels joined with '.', compared in byte order
  key        TEXT   NOT NULL,
  value      BYTEA  NOT NULL,            -- JSON text of an object
  created_at BIGINT NOT NULL,            -- unix ms, the server's clock
  updated_at BIGINT NOT NULL,            -- unix ms, the server's clock
  seq        BIGINT NOT NULL,            -- put order (weir_store_seq)
  PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS $table_seq ON $table (seq);
)sql";

constexpr const char* kColumns = "namespace, key, value, created_at, updated_at, seq";

class PostgresStore final : public Store {
 public:
  PostgresStore(pg::Connection conn, StoreLimits limits, std::string table)
      : conn_(std::move(conn)), limits_(limits), table_(std::move(table)) {}

  // Called once by open_postgres_store before the object is shared.
  Status ensure_schema() {
    std::lock_guard lock(mu_);
    if (auto s = pg::ensure_schema(conn_); !s) return s;  // weir_now_ms() and the version check
    return conn_.run("opening the store", [&](const Attempt&) -> Status {
      pg::Transaction txn(conn_);
      if (auto s = txn.begin("opening the store"); !s) return s;
      if (auto r =
              conn_.exec("SELECT pg_advisory_xact_lock($1)", Params().int8(kStoreSchemaLockKey),
                         "opening the store: taking the schema lock");
          !r)
        return std::move(r).error();
      std::string schema = kSchema;
      for (auto at = schema.find("$table"); at != std::string::npos; at = schema.find("$table"))
        schema.replace(at, 6, table_);
      if (auto s = conn_.exec_script(schema, "creating the store's table"); !s) return s;
      return txn.commit("opening the store");
    });
  }

  // An upsert is idempotent: a try whose answer was lost is simply run again (the item then
  // carries the retry's time and place in the put order).
  Status put(const Namespace& ns, std::string_view key, const boost::json::value& value) override {
    if (value.is_null()) return remove(ns, key);
    if (auto s = check_item(ns, key); !s) return s;
    std::string text;
    if (auto s = check_store_value(value, limits_, &text); !s) return s;
    const std::string joined = join_namespace(ns);
    const std::string what = "putting " + describe_item(ns, key);
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Status {
      auto r = conn_.exec("INSERT INTO " + table_ + " (" + kColumns +
                              ") SELECT $1, $2, $3, t.now, t.now, nextval('weir_store_seq') "
                              "FROM (SELECT weir_now_ms() AS now) t "
                              "ON CONFLICT (namespace, key) DO UPDATE "
                              "SET value = excluded.value, updated_at = excluded.updated_at, "
                              "seq = excluded.seq",
                          Params().text(joined).text(key).bytea(text), what);
      if (!r) return std::move(r).error();
      return {};
    });
  }

  // One transaction: the row locked with SELECT ... FOR UPDATE until the write commits. A
  // missing row cannot be locked, so its insert is ON CONFLICT DO NOTHING: when another session
  // inserted it first, the transaction is rolled back and the change runs again on that row.
  Status update(const Namespace& ns, std::string_view key, const StoreChange& change) override {
    if (auto s = check_item(ns, key); !s) return s;
    const std::string joined = join_namespace(ns);
    const std::string what = "updating " + describe_item(ns, key);
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Status {
      for (;;) {
        auto done = update_once(joined, ns, key, change, what);
        if (!done) return std::move(done).error();
        if (*done) return {};
      }
    });
  }

  Status remove(const Namespace& ns, std::string_view key) override {
    if (auto s = check_item(ns, key); !s) return s;
    const std::string joined = join_namespace(ns);
    const std::string what = "deleting " + describe_item(ns, key);
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Status {
      auto r = conn_.exec("DELETE FROM " + table_ + " WHERE namespace = $1 AND key = $2",
                          Params().text(joined).text(key), what);
      if (!r) return std::move(r).error();
      return {};
    });
  }

  Result<std::optional<StoreItem>> get(const Namespace& ns, std::string_view key) const override {
    if (auto s = check_item(ns, key); !s) return std::move(s).error();
    const std::string joined = join_namespace(ns);
    const std::string what = "reading " + describe_item(ns, key);
    std::lock_guard lock(mu_);
    return conn_.run(what, [&](const Attempt&) -> Result<std::optional<StoreItem>> {
      auto r = conn_.exec(std::string("SELECT ") + kColumns + " FROM " + table_ +
                              " WHERE namespace = $1 AND key = $2",
                          Params().text(joined).text(key), what);
      if (!r) return std::move(r).error();
      if (r->size() == 0) return std::optional<StoreItem>();
      auto item = item_of(row(*r, 0), conn_.description());
      if (!item) return std::move(item).error();
      return std::optional<StoreItem>(std::move(*item));
    });
  }

  // Every batch in one REPEATABLE READ READ ONLY transaction: a consistent snapshot.
  Result<std::vector<StoreItem>> search(const StoreSearch& q) const override {
    if (auto s = check_store_search(q, limits_); !s) return std::move(s).error();
    const PrefixRange range = prefix_range(join_namespace(q.namespace_prefix));
    const bool all = q.namespace_prefix.empty();
    std::lock_guard lock(mu_);
    return conn_.run("searching", [&](const Attempt&) -> Result<std::vector<StoreItem>> {
      pg::Transaction txn(conn_);
      if (auto s = txn.begin("searching", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !s)
        return std::move(s).error();
      auto found = search_rows(
          q,
          [&](std::optional<int64_t> below, std::size_t batch) -> Result<std::vector<StoredRow>> {
            const int64_t b = below.value_or(INT64_MAX);
            const auto n = static_cast<int64_t>(batch);
            auto r = all ? conn_.exec(std::string("SELECT ") + kColumns + " FROM " + table_ +
                                          " WHERE seq < $1 "
                                          "ORDER BY seq DESC LIMIT $2",
                                      Params().int8(b).int8(n), "searching")
                         : conn_.exec(std::string("SELECT ") + kColumns + " FROM " + table_ +
                                          " WHERE seq < $1 AND "
                                          "(namespace = $3 OR (namespace >= $4 AND namespace < "
                                          "$5)) ORDER BY seq DESC LIMIT $2",
                                      Params()
                                          .int8(b)
                                          .int8(n)
                                          .text(range.exact)
                                          .text(range.low)
                                          .text(range.high),
                                      "searching");
            if (!r) return std::move(r).error();
            std::vector<StoredRow> rows;
            for (int i = 0; i < r->size(); ++i) rows.push_back(row(*r, i));
            return rows;
          },
          conn_.description());
      if (!found) return found;
      if (auto s = txn.commit("searching"); !s) return std::move(s).error();
      return found;
    });
  }

  Result<std::vector<Namespace>> list_namespaces(const NamespaceQuery& q) const override {
    if (auto s = check_namespace_query(q, limits_); !s) return std::move(s).error();
    const Namespace lit = literal_prefix(q.prefix);
    const PrefixRange range = prefix_range(join_namespace(lit));
    std::lock_guard lock(mu_);
    auto joined =
        conn_.run("listing namespaces", [&](const Attempt&) -> Result<std::vector<std::string>> {
          auto r = lit.empty()
                       ? conn_.exec("SELECT DISTINCT namespace FROM " + table_, Params(),
                                    "listing namespaces")
                       : conn_.exec("SELECT DISTINCT namespace FROM " + table_ +
                                        " WHERE "
                                        "namespace = $1 OR (namespace >= $2 AND namespace < $3)",
                                    Params().text(range.exact).text(range.low).text(range.high),
                                    "listing namespaces");
          if (!r) return std::move(r).error();
          std::vector<std::string> out;
          for (int i = 0; i < r->size(); ++i) out.emplace_back(r->text(i, 0));
          return out;
        });
    if (!joined) return std::move(joined).error();
    return select_namespaces(*joined, q);
  }

  const StoreLimits& limits() const override { return limits_; }

 private:
  Status check_item(const Namespace& ns, std::string_view key) const {
    if (auto s = check_store_namespace(ns, limits_, "namespace"); !s) return s;
    return check_store_key(key, limits_);
  }
  // REQUIRES: mu_ held. One try of update(): false when another session inserted the item
  // between this one's read and its insert (nothing was written; try again).
  Result<bool> update_once(const std::string& joined, const Namespace& ns, std::string_view key,
                           const StoreChange& change, const std::string& what) {
    pg::Transaction txn(conn_);
    if (auto s = txn.begin(what); !s) return std::move(s).error();
    auto r = conn_.exec(std::string("SELECT ") + kColumns + " FROM " + table_ +
                            " WHERE namespace = $1 AND key = $2 FOR UPDATE",
                        Params().text(joined).text(key), what);
    if (!r) return std::move(r).error();
    std::optional<StoreItem> had;
    if (r->size() > 0) {
      auto item = item_of(row(*r, 0), conn_.description());
      if (!item) return std::move(item).error();
      had = std::move(*item);
    }
    auto next = change(had);
    if (!next) return std::move(next).error();
    if (next->is_null()) {
      if (had) {
        auto d = conn_.exec("DELETE FROM " + table_ + " WHERE namespace = $1 AND key = $2",
                            Params().text(joined).text(key), what);
        if (!d) return std::move(d).error();
      }
    } else {
      std::string text;
      if (auto s = check_store_value(*next, limits_, &text); !s) return std::move(s).error();
      auto w = had ? conn_.exec("UPDATE " + table_ +
                                    " SET value = $3, updated_at = weir_now_ms(), seq = "
                                    "nextval('weir_store_seq') WHERE namespace = $1 AND key = $2",
                                Params().text(joined).text(key).bytea(text), what)
                   : conn_.exec("INSERT INTO " + table_ + " (" + kColumns +
                                    ") SELECT $1, $2, $3, t.now, t.now, nextval('weir_store_seq') "
                                    "FROM (SELECT weir_now_ms() AS now) t "
                                    "ON CONFLICT (namespace, key) DO "
                                    "NOTHING RETURNING 1",
                                Params().text(joined).text(key).bytea(text), what);
      if (!w) return std::move(w).error();
      if (!had && w->size() == 0) return false;  // inserted meanwhile: the txn rolls back
    }
    if (auto s = txn.commit(what); !s) return std::move(s).error();
    return true;
  }
  // Columns in kColumns order.
  static StoredRow row(const Rows& r, int i) {
    return {std::string(r.text(i, 0)),
            std::string(r.text(i, 1)),
            std::string(r.text(i, 2)),
            r.int8(i, 3),
            r.int8(i, 4),
            r.int8(i, 5)};
  }

  mutable std::mutex mu_;        // one statement at a time on conn_
  mutable pg::Connection conn_;  // GUARDED_BY(mu_)
  const StoreLimits limits_;
  const std::string table_;  // weir_store_items, or another table of items (open_postgres_store)
};

}  // namespace

Result<std::unique_ptr<Store>> open_postgres_store(std::string_view conninfo, StoreLimits limits,
                                                   std::chrono::milliseconds reconnect_window,
                                                   std::string_view table) {
  const bool plain =
      !table.empty() && table.size() <= 48 &&
      table.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string_view::npos;
  if (!plain)
    return Error(Errc::invalid_argument, "a store's table name is 1 to 48 of a-z and _, got '" +
                                             std::string(table.substr(0, 60)) + "'");
  pg::Options o;
  o.reconnect_window = reconnect_window;
  auto conn = pg::Connection::open(conninfo, o);
  if (!conn) return std::move(conn).error();
  auto store = std::make_unique<PostgresStore>(std::move(*conn), limits, std::string(table));
  if (auto s = store->ensure_schema(); !s) return std::move(s).error();
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace weir::graph
