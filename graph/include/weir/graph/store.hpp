// Store: long-term key-value memory shared by runs and threads (LangGraph's BaseStore).
//
// What it holds. An item is a JSON object `value` under a `key` in a `namespace`, a path of
// labels (["users", "u1", "memories"]); put upserts it, get/remove address it by (namespace,
// key), search lists the items under a namespace prefix whose value matches a filter, and
// list_namespaces lists the namespaces that hold items. Unlike a checkpoint, an item belongs to
// no thread: agents keep what they learnt about a user here, across conversations.
//
// Invariants (enforced by every backend, with the same words):
//   1. (namespace, key) is unique; put replaces the value and updated_at, keeps created_at.
//   2. A namespace has 1 to StoreLimits::max_namespace_depth labels; a label is 1 to
//      max_label_bytes bytes of UTF-8 text without control characters and without '.' (the
//      LangGraph SDKs join a namespace with '.' in a URL); a key is 1 to max_key_bytes bytes of
//      the same text ('.' allowed). See check_store_namespace / check_store_key.
//   3. A value is a JSON object (anything else is refused, naming its type) whose JSON text is at
//      most max_value_bytes, nested at most kMaxJsonDepth levels, without NaN or Infinity.
//   4. Order. search returns the most recently put items first: every put takes the next number
//      of a counter the store keeps (the database's sequence on PostgreSQL), and items are
//      ordered by it, descending. updated_at follows it (it is the put's clock: the process's
//      for memory and SQLite, the server's for PostgreSQL) except where a clock steps back.
//   5. A namespace exists while it holds an item: list_namespaces shows no empty ones.
//
// Filters (search). As LangGraph's stores: each key of `filter` names a field of the value;
// a plain value must equal the field (numbers compare by value: 1 == 1.0; objects compare
// field by field, recursively; arrays element by element), an object of operators compares with
// each: {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"} (ordering only between two numbers or two
// strings; otherwise false). A missing field is null. An unknown operator is invalid_argument.
// Semantic search (`query`), indexing and TTLs are not part of this store.
//
// Thread safety: every method of every Store may be called from any thread at once. SQLite
// tolerates other processes on the same file (WAL, busy_timeout), PostgreSQL any number of
// processes on one database.
//
// Failure behaviour: a put or remove that fails changes nothing; reads have no effect. Expected
// failures are values:
//   invalid_argument        a namespace, key, value, filter or page outside the rules above (the
//                           message names the field, e.g. "namespace label 2 ('a.b') contains
//                           '.'"); PostgreSQL: a value it cannot hold
//   memory_budget_exceeded  memory store: the put would take its bytes over max_bytes, or its
//                           MemoryBudget category over its limit (the message names the limit)
//   corrupt_data            a stored value that does not parse (naming namespace and key), a
//                           file that is not an SQLite database
//   io_error                the operating system, SQLite or the server refused (named path/server)
//   unavailable             PostgreSQL could not be reached for the whole reconnect window
// A missing item is not an error: get answers nullopt, remove succeeds (idempotent).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::graph {

using Namespace = std::vector<std::string>;

struct StoreItem {
  Namespace ns;
  std::string key;
  boost::json::object value;
  int64_t created_at_ms = 0;  // unix ms: the first put of (namespace, key)
  int64_t updated_at_ms = 0;  // unix ms: the latest put
};

// The bounds every backend enforces (invariants 2 and 3).
struct StoreLimits {
  std::size_t max_namespace_depth = 16;       // labels
  std::size_t max_label_bytes = 256;          // per label
  std::size_t max_key_bytes = 1024;           // graph::kMaxIdBytes
  std::size_t max_value_bytes = 1024 * 1024;  // the value's JSON text
};

// The most items or namespaces one search or list_namespaces answers.
inline constexpr std::size_t kMaxStorePage = 1000;

struct StoreSearch {
  Namespace namespace_prefix;  // [] : every namespace; else labels as invariant 2
  boost::json::object filter;  // {} : every item (see Filters above)
  std::size_t limit = 10;      // 1..kMaxStorePage
  std::size_t offset = 0;
};

// Namespaces matched label by label; "*" in prefix or suffix matches any one label.
struct NamespaceQuery {
  Namespace prefix;                      // [] : any
  Namespace suffix;                      // [] : any
  std::optional<std::size_t> max_depth;  // namespaces cut to their first max_depth labels
  std::size_t limit = 100;               // 1..kMaxStorePage
  std::size_t offset = 0;
};

// What update() does with an item: called with the item as it is (nullopt: there is none), it
// answers the item's new value (an object), null to remove it, or an error to leave it as it is.
using StoreChange = std::function<Result<boost::json::value>(const std::optional<StoreItem>& now)>;

class Store {
 public:
  virtual ~Store() = default;

  // Upserts `value` (a JSON object) at (ns, key); a null value removes the item (LangGraph's
  // put(value=None)). Errors: invalid_argument (invariants 2, 3: a value that is not an object
  // or null names its type), memory_budget_exceeded (memory), io_error, unavailable.
  virtual Status put(const Namespace& ns, std::string_view key,
                     const boost::json::value& value) = 0;

  // A read-modify-write of one item, atomic: no other put, remove or update of (ns, key), by
  // this process or another on the same file or database, falls between the read `change` sees
  // and the write of what it answers (memory: under the store's lock; SQLite: in one BEGIN
  // IMMEDIATE transaction; PostgreSQL: in one transaction, the row locked with SELECT ... FOR
  // UPDATE, a missing one inserted with ON CONFLICT DO NOTHING and read again if another
  // inserted it first). `change` may be called more than once (PostgreSQL: after such a
  // conflict, or a lost connection whose commit is unknown: then again with the item as it is
  // after that commit), so it must be a function of the item it is given, idempotent, and must
  // not call this store. Errors: change's (nothing is written), then put's or remove's.
  virtual Status update(const Namespace& ns, std::string_view key, const StoreChange& change) = 0;

  // Removes the item; removing a missing one succeeds. Errors: invalid_argument, io_error.
  virtual Status remove(const Namespace& ns, std::string_view key) = 0;

  // The item, or nullopt when there is none. Errors: invalid_argument, corrupt_data, io_error.
  virtual Result<std::optional<StoreItem>> get(const Namespace& ns, std::string_view key) const = 0;

  // At most q.limit items under q.namespace_prefix matching q.filter, most recently put first,
  // after skipping q.offset matches. Cost: the items under the prefix are read newest first
  // until the page is full (all of them when few match); memory: one page plus one batch.
  virtual Result<std::vector<StoreItem>> search(const StoreSearch& q) const = 0;

  // The namespaces holding items that match q.prefix and q.suffix, cut to q.max_depth labels,
  // without repeats, in label-by-label lexicographic order (byte order), then paged.
  virtual Result<std::vector<Namespace>> list_namespaces(const NamespaceQuery& q) const = 0;

  // The bounds this store was opened with (a caller may check input against them first).
  virtual const StoreLimits& limits() const = 0;
};

using StorePtr = std::unique_ptr<Store>;

// --- the rules, for callers that check input before it reaches a store (an HTTP route) --------

// {} when `ns` follows invariant 2 (`allow_empty`: [] is accepted, as a search prefix is);
// `what` names the field in messages ("namespace", "namespace_prefix"). "*" is a label like any
// other here (NamespaceQuery reads it as a wildcard).
Status check_store_namespace(const Namespace& ns, const StoreLimits& limits, std::string_view what,
                             bool allow_empty = false);
Status check_store_key(std::string_view key, const StoreLimits& limits);
// A put's value: an object within invariant 3, or null. `text`, when given, receives its JSON
// text (an object's), so a backend serialises it once.
Status check_store_value(const boost::json::value& value, const StoreLimits& limits,
                         std::string* text = nullptr);
// A search filter's operators are known ones.
Status check_store_filter(const boost::json::object& filter);
// Whether `value` matches `filter` (see Filters). REQUIRES: check_store_filter(filter) passed.
bool store_filter_matches(const boost::json::object& value, const boost::json::object& filter);
// The checks a search or list_namespaces makes of its query (limits, labels, a wildcard label).
Status check_store_search(const StoreSearch& q, const StoreLimits& limits);
Status check_namespace_query(const NamespaceQuery& q, const StoreLimits& limits);

// --- backends ---------------------------------------------------------------------------------

struct MemoryStoreOptions {
  StoreLimits limits;
  // The store's own bound: the bytes its items take (their labels, keys and values' JSON text,
  // plus kMemoryStoreItemOverhead each). A put over it is memory_budget_exceeded naming it.
  std::size_t max_bytes = 64u << 20;
  // When set, the same bytes are also charged to `category` of this budget (and a put that does
  // not fit there is refused with the budget's own message). REQUIRES: outlives the store.
  MemoryBudget* budget = nullptr;
  BudgetCategory category = BudgetCategory::history;
};
// What an item costs the memory store beyond its bytes of text (its map node and strings).
inline constexpr std::size_t kMemoryStoreItemOverhead = 128;

// Keeps items in process memory (values as their JSON text, so the bytes charged are the bytes
// held), bounded by options.max_bytes. Never io_error.
std::unique_ptr<Store> make_memory_store(MemoryStoreOptions options = {});

// Opens (creating the file and the table `store_items` when missing) an SQLite store at `db`. The
// file may be the checkpointer's (other tables are left alone). WAL, synchronous=NORMAL, a 5 s
// busy_timeout, one connection guarded by a mutex, statements prepared once. Errors name the
// path: io_error (cannot open or create), corrupt_data (not an SQLite database).
Result<std::unique_ptr<Store>> open_sqlite_store(const std::filesystem::path& db,
                                                 StoreLimits limits = {});

// Connects with weir's PostgreSQL layer (as open_postgres_checkpointer: one connection guarded
// by a mutex, binary parameters, a lost connection re-established and the call run again for up
// to reconnect_window), creates or migrates weir's versioned tables (pg::ensure_schema) and then
// the store's own, `weir_store_items` and sequence `weir_store_seq`, with IF NOT EXISTS under an
// advisory lock (several processes may open one database at once). Values are JSON text in
// bytea; times come from the server's clock. Errors as open_postgres_checkpointer's.
// `table`: the items' table (a-z and _, at most 48; its index is `<table>_seq`), so that weir
// can keep items of its own apart from the users' (the LangGraph API's thread list).
Result<std::unique_ptr<Store>> open_postgres_store(
    std::string_view conninfo, StoreLimits limits = {},
    std::chrono::milliseconds reconnect_window = std::chrono::milliseconds(10000),
    std::string_view table = "weir_store_items");

}  // namespace weir::graph
