// The memory store: items in two maps under one reader-writer lock, values kept as their JSON text
// so that the bytes charged (to max_bytes and the optional MemoryBudget) are the bytes held.
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <utility>

#include "store_common.hpp"
#include "weir/graph/store.hpp"

namespace weir::graph {
namespace {

using namespace store_detail;

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions o) : o_(o) {}
  ~MemoryStore() override {
    if (o_.budget && bytes_ > 0) o_.budget->credit(o_.category, bytes_);
  }

  Status put(const Namespace& ns, std::string_view key, const boost::json::value& value) override {
    if (value.is_null()) return remove(ns, key);
    if (auto s = check_item(ns, key); !s) return s;
    std::string text;
    if (auto s = check_store_value(value, o_.limits, &text); !s) return s;
    Key k{join_namespace(ns), std::string(key)};
    std::unique_lock lock(mu_);
    return store_locked(std::move(k), std::move(text), ns, key);
  }

  // The change runs under the exclusive lock: no put, remove or update of any item falls
  // between its read and its write.
  Status update(const Namespace& ns, std::string_view key, const StoreChange& change) override {
    if (auto s = check_item(ns, key); !s) return s;
    Key k{join_namespace(ns), std::string(key)};
    std::unique_lock lock(mu_);
    std::optional<StoreItem> now;
    if (auto it = items_.find(k); it != items_.end()) {
      auto item = item_of(row_of(it->first, it->second), kWhere);
      if (!item) return std::move(item).error();
      now = std::move(*item);
    }
    auto next = change(now);
    if (!next) return std::move(next).error();
    if (next->is_null()) {
      erase_locked(k);
      return {};
    }
    std::string text;
    if (auto s = check_store_value(*next, o_.limits, &text); !s) return s;
    return store_locked(std::move(k), std::move(text), ns, key);
  }

  Status remove(const Namespace& ns, std::string_view key) override {
    if (auto s = check_item(ns, key); !s) return s;
    const Key k{join_namespace(ns), std::string(key)};
    std::unique_lock lock(mu_);
    erase_locked(k);
    return {};
  }

  Result<std::optional<StoreItem>> get(const Namespace& ns, std::string_view key) const override {
    if (auto s = check_item(ns, key); !s) return std::move(s).error();
    const Key k{join_namespace(ns), std::string(key)};
    StoredRow row;
    {
      std::shared_lock lock(mu_);
      auto it = items_.find(k);
      if (it == items_.end()) return std::optional<StoreItem>();
      row = row_of(it->first, it->second);
    }
    auto item = item_of(std::move(row), kWhere);
    if (!item) return std::move(item).error();
    return std::optional<StoreItem>(std::move(*item));
  }

  // Readers share the lock (a search never holds up another) and writers wait only while rows
  // are walked. Without a filter the skipped rows are counted, not copied, and the page's JSON is
  // parsed after the lock is let go; with one, each row under the prefix is parsed (it must be
  // matched) until the page is full.
  Result<std::vector<StoreItem>> search(const StoreSearch& q) const override {
    if (auto s = check_store_search(q, o_.limits); !s) return std::move(s).error();
    const std::string prefix = join_namespace(q.namespace_prefix);
    const PrefixRange range = prefix_range(prefix);
    auto under = [&](const std::string& ns) {
      return prefix.empty() || ns == range.exact || (ns >= range.low && ns < range.high);
    };
    if (q.filter.empty()) {
      std::vector<StoredRow> rows;
      {
        std::shared_lock lock(mu_);
        std::size_t skip = q.offset;
        for (auto it = by_seq_.rbegin(); it != by_seq_.rend() && rows.size() < q.limit; ++it) {
          if (!under(it->second->first)) continue;
          if (skip > 0) {
            --skip;
            continue;
          }
          rows.push_back(row_of(*it->second, items_.at(*it->second)));
        }
      }
      std::vector<StoreItem> out;
      out.reserve(rows.size());
      for (auto& row : rows) {
        auto item = item_of(std::move(row), kWhere);
        if (!item) return std::move(item).error();
        out.push_back(std::move(*item));
      }
      return out;
    }
    std::shared_lock lock(mu_);
    return search_rows(
        q,
        [&](std::optional<int64_t> below, std::size_t batch) -> Result<std::vector<StoredRow>> {
          std::vector<StoredRow> rows;
          auto it = below ? by_seq_.lower_bound(*below) : by_seq_.end();
          while (it != by_seq_.begin() && rows.size() < batch) {
            --it;
            const Key& k = *it->second;
            if (under(k.first)) rows.push_back(row_of(k, items_.at(k)));
          }
          return rows;
        },
        kWhere);
  }

  Result<std::vector<Namespace>> list_namespaces(const NamespaceQuery& q) const override {
    if (auto s = check_namespace_query(q, o_.limits); !s) return std::move(s).error();
    std::vector<std::string> joined;
    {
      std::shared_lock lock(mu_);
      for (const auto& [k, e] : items_)
        if (joined.empty() || joined.back() != k.first) joined.push_back(k.first);
    }
    return select_namespaces(joined, q);
  }

  const StoreLimits& limits() const override { return o_.limits; }

 private:
  using Key = std::pair<std::string, std::string>;  // joined namespace, key
  struct Entry {
    std::string value;  // JSON text of an object
    int64_t created_at_ms = 0, updated_at_ms = 0, seq = 0;
    std::size_t cost = 0;  // bytes charged
  };
  static constexpr const char* kWhere = "memory store";

  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  Status check_item(const Namespace& ns, std::string_view key) const {
    if (auto s = check_store_namespace(ns, o_.limits, "namespace"); !s) return s;
    return check_store_key(key, o_.limits);
  }
  static StoredRow row_of(const Key& k, const Entry& e) {
    return {k.first, k.second, e.value, e.created_at_ms, e.updated_at_ms, e.seq};
  }

  // REQUIRES: mu_ held exclusively; `text` checked (check_store_value).
  Status store_locked(Key k, std::string text, const Namespace& ns, std::string_view key) {
    const std::size_t cost =
        k.first.size() + k.second.size() + text.size() + kMemoryStoreItemOverhead;
    const int64_t now = now_ms();
    auto it = items_.find(k);
    const std::size_t old = it == items_.end() ? 0 : it->second.cost;
    if (cost > old) {
      const std::size_t more = cost - old;
      if (bytes_ + more > o_.max_bytes)
        return Error(Errc::memory_budget_exceeded,
                     "memory store: putting " + describe_item(ns, key) + " needs " +
                         format_bytes(more) + " more but " + format_bytes(bytes_) + " of its " +
                         format_bytes(o_.max_bytes) +
                         " limit (max_bytes) is in use; delete items, or use the SQLite or "
                         "PostgreSQL store");
      if (o_.budget && !o_.budget->charge(o_.category, more))
        return Error(Errc::memory_budget_exceeded,
                     "memory store: putting " + describe_item(ns, key) + ": " +
                         o_.budget->exceeded_message(o_.category, more));
    } else if (o_.budget && old > cost) {
      o_.budget->credit(o_.category, old - cost);
    }
    bytes_ = bytes_ + cost - old;
    const int64_t seq = ++seq_;
    if (it == items_.end()) {
      it = items_.emplace(std::move(k), Entry{}).first;
      it->second.created_at_ms = now;
    } else {
      by_seq_.erase(it->second.seq);
    }
    Entry& e = it->second;
    e.value = std::move(text);
    e.updated_at_ms = now;
    e.seq = seq;
    e.cost = cost;
    by_seq_.emplace(seq, &it->first);
    return {};
  }
  // REQUIRES: mu_ held exclusively.
  void erase_locked(const Key& k) {
    auto it = items_.find(k);
    if (it == items_.end()) return;
    bytes_ -= it->second.cost;
    if (o_.budget) o_.budget->credit(o_.category, it->second.cost);
    by_seq_.erase(it->second.seq);
    items_.erase(it);
  }

  const MemoryStoreOptions o_;
  mutable std::shared_mutex mu_;          // shared by readers, exclusive for writers
  std::map<Key, Entry> items_;            // GUARDED_BY(mu_)
  std::map<int64_t, const Key*> by_seq_;  // GUARDED_BY(mu_); put order -> item
  int64_t seq_ = 0;                       // GUARDED_BY(mu_)
  std::size_t bytes_ = 0;                 // GUARDED_BY(mu_); sum of Entry::cost
};

}  // namespace

std::unique_ptr<Store> make_memory_store(MemoryStoreOptions options) {
  return std::make_unique<MemoryStore>(options);
}

}  // namespace weir::graph
