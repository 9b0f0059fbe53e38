#include "langgraph_book.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>

#include <boost/json.hpp>

#include "weir/graph/store.hpp"

namespace weir::serve {

namespace json = boost::json;

namespace {

const graph::Namespace& book_namespace() {
  static const graph::Namespace ns{"weir_langgraph_threads"};
  return ns;
}

json::object item_of(const LangGraphThreads::Thread& t) {
  json::array runs;
  for (const auto& r : t.runs) runs.emplace_back(r);
  return json::object{{"created_ms", t.created_ms},
                      {"updated_ms", t.updated_ms},
                      {"metadata", t.metadata},
                      {"runs", std::move(runs)}};
}

LangGraphThreads::Thread thread_of(const std::string& id, const json::object& v) {
  LangGraphThreads::Thread t;
  t.id = id;
  if (const auto* c = v.if_contains("created_ms"); c && c->is_int64()) t.created_ms = c->as_int64();
  if (const auto* u = v.if_contains("updated_ms"); u && u->is_int64()) t.updated_ms = u->as_int64();
  if (const auto* m = v.if_contains("metadata"); m && m->is_object()) t.metadata = m->as_object();
  if (const auto* r = v.if_contains("runs"); r && r->is_array())
    for (const auto& x : r->as_array())
      if (x.is_string()) t.runs.emplace_back(x.as_string());
  return t;
}

}  // namespace

LangGraphThreads::LangGraphThreads(std::shared_ptr<graph::Store> store, bool counted)
    : store_(std::move(store)), counted_(counted) {}

Result<std::optional<LangGraphThreads::Thread>> LangGraphThreads::get(const std::string& id) const {
  auto item = store_->get(book_namespace(), id);
  if (!item) return std::move(item).error();
  if (!*item) return std::optional<Thread>();
  return std::optional<Thread>(thread_of(id, (**item).value));
}

// The size check, then the item as the store's update() gives it to a change.
Result<json::value> LangGraphThreads::value_of(const Thread& t) {
  if (const std::size_t n = json::serialize(t.metadata).size(); n > kMaxMetadataBytes)
    return Error(Errc::invalid_argument,
                 "'metadata' is " + std::to_string(n) + " bytes of JSON, more than the " +
                     std::to_string(kMaxMetadataBytes) +
                     " a thread keeps; keep large documents in the store (/store/items) and a "
                     "reference in the metadata");
  return json::value(item_of(t));
}

Status LangGraphThreads::update(const std::string& id, const graph::StoreChange& change) {
  auto s = store_->update(book_namespace(), id, change);
  if (!s && s.error().is(Errc::memory_budget_exceeded)) return full_error();
  return s;
}

Error LangGraphThreads::full_error() {
  return Error(Errc::overloaded,
               "the thread list is full (its threads' metadata fill the " +
                   std::to_string(kMemoryBookBytes >> 20) +
                   " MiB it may hold, or the server's memory budget is spent): delete or "
                   "prune threads, or keep less in their metadata");
}

// One atomic read-modify-write of the thread's item (graph::Store::update): two creates of one
// id, on this server or two, make it once.
Result<LangGraphThreads::Put> LangGraphThreads::create(const Thread& t, std::size_t max,
                                                       Thread& existing) {
  Put outcome = Put::created;
  bool reserved = false;
  auto s = update(t.id, [&](const std::optional<graph::StoreItem>& now) -> Result<json::value> {
    if (reserved) {  // a try again (PostgreSQL) after one that reserved a place
      if (counted_) --count_;
      reserved = false;
    }
    if (now) {
      outcome = Put::exists;
      existing = thread_of(t.id, now->value);
      return Error(Errc::cancelled, "the thread exists");  // nothing to write
    }
    if (counted_ && count_.fetch_add(1) >= max) {
      --count_;
      outcome = Put::full;
      return Error(Errc::cancelled, "the book is full");
    }
    reserved = counted_;
    outcome = Put::created;
    return value_of(t);
  });
  if (outcome != Put::created) return outcome;
  if (!s) {
    if (reserved) --count_;
    return std::move(s).error();
  }
  existing = t;
  return Put::created;
}

// Idempotent (a PostgreSQL try whose commit was unknown may apply it twice): the merge is, and
// the run is added once.
Status LangGraphThreads::touch(const std::string& id, const json::object& metadata,
                               const std::string& run, std::int64_t now_ms) {
  bool added = false;
  auto s = update(id, [&](const std::optional<graph::StoreItem>& now) -> Result<json::value> {
    Thread t;
    if (now) {
      t = thread_of(id, now->value);
    } else {
      t.id = id;
      t.created_ms = now_ms;
    }
    added = !now;
    for (const auto& kv : metadata) t.metadata[kv.key()] = kv.value();
    t.updated_ms = std::max(t.updated_ms, now_ms);
    if (!run.empty() && std::find(t.runs.begin(), t.runs.end(), run) == t.runs.end()) {
      t.runs.push_front(run);
      if (t.runs.size() > kRunsKept) t.runs.pop_back();
    }
    return value_of(t);
  });
  if (!s) return s;
  if (counted_ && added) ++count_;
  return {};
}

Status LangGraphThreads::erase(const std::string& id) {
  bool had = false;
  auto s = update(id, [&](const std::optional<graph::StoreItem>& now) -> Result<json::value> {
    had = now.has_value();
    return json::value();  // null: removed
  });
  if (!s) return s;
  if (counted_ && had) --count_;
  return {};
}

bool LangGraphThreads::room_for_one(std::size_t max) const {
  return !counted_ || count_.load() < max;
}

// Only the sort key is read from each item (no Thread is built: its metadata and runs would be
// copied for nothing). An id met twice (a thread touched while the pages were read moves to the
// front of the store's order) keeps its newest key.
Result<std::vector<std::string>> LangGraphThreads::select(const json::object* metadata,
                                                          const std::vector<std::string>* ids,
                                                          const std::string& sort_by,
                                                          bool ascending) const {
  const char* field = sort_by == "updated_at" ? "updated_ms" : "created_ms";
  std::unordered_map<std::string, std::int64_t> keys;
  auto take = [&](const std::string& id, const json::object& v) {
    const auto* k = v.if_contains(field);
    const std::int64_t key = k && k->is_int64() ? k->as_int64() : 0;
    auto [it, fresh] = keys.emplace(id, key);
    if (!fresh) it->second = std::max(it->second, key);
  };
  if (ids) {
    const json::object filter = metadata ? json::object{{"metadata", *metadata}} : json::object{};
    for (const auto& id : *ids) {
      auto item = store_->get(book_namespace(), id);
      if (!item) return std::move(item).error();
      if (!*item) continue;
      if (metadata && !graph::store_filter_matches((**item).value, filter)) continue;
      take(id, (**item).value);
    }
  } else {
    graph::StoreSearch q;
    q.namespace_prefix = book_namespace();
    if (metadata) q.filter = json::object{{"metadata", *metadata}};
    q.limit = graph::kMaxStorePage;
    for (;;) {
      auto page = store_->search(q);
      if (!page) return std::move(page).error();
      for (const auto& item : *page) take(item.key, item.value);
      if (page->size() < q.limit) break;
      q.offset += page->size();
    }
  }
  std::vector<std::pair<std::int64_t, std::string>> keyed;
  keyed.reserve(keys.size());
  for (auto& [id, k] : keys) keyed.emplace_back(k, id);
  const bool by_id = sort_by == "thread_id";
  std::sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    const bool less = by_id ? x.second < y.second : x < y;
    const bool more = by_id ? y.second < x.second : y < x;
    return ascending ? less : more;
  });
  std::vector<std::string> out;
  out.reserve(keyed.size());
  for (auto& [k, id] : keyed) out.push_back(std::move(id));
  return out;
}

}  // namespace weir::serve
