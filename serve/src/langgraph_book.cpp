#include "langgraph_book.hpp"

#include <algorithm>
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

Status LangGraphThreads::put(const Thread& t) {
  if (const std::size_t n = json::serialize(t.metadata).size(); n > kMaxMetadataBytes)
    return Error(Errc::invalid_argument,
                 "'metadata' is " + std::to_string(n) + " bytes of JSON, more than the " +
                     std::to_string(kMaxMetadataBytes) +
                     " a thread keeps; keep large documents in the store (/store/items) and a "
                     "reference in the metadata");
  auto s = store_->put(book_namespace(), t.id, json::value(item_of(t)));
  if (!s && s.error().is(Errc::memory_budget_exceeded))  // the in-process book's bytes
    return Error(Errc::overloaded,
                 "the thread list is full (its threads' metadata fill the " +
                     std::to_string(kMemoryBookBytes >> 20) +
                     " MiB it may hold, or the server's memory budget is spent): delete or "
                     "prune threads, or keep less in their metadata");
  return s;
}

Result<LangGraphThreads::Put> LangGraphThreads::create(const Thread& t, std::size_t max,
                                                       Thread& existing) {
  auto had = get(t.id);
  if (!had) return std::move(had).error();
  if (*had) {
    existing = std::move(**had);
    return Put::exists;
  }
  if (!room_for_one(max)) return Put::full;
  if (auto s = put(t); !s) return std::move(s).error();
  if (counted_) ++count_;
  existing = t;
  return Put::created;
}

Status LangGraphThreads::touch(const std::string& id, const json::object& metadata,
                               const std::string& run, std::int64_t now_ms) {
  auto had = get(id);
  if (!had) return std::move(had).error();
  Thread t;
  if (*had) {
    t = std::move(**had);
  } else {
    t.id = id;
    t.created_ms = now_ms;
  }
  for (const auto& kv : metadata) t.metadata[kv.key()] = kv.value();
  t.updated_ms = now_ms;
  if (!run.empty()) {
    t.runs.push_front(run);
    if (t.runs.size() > kRunsKept) t.runs.pop_back();
  }
  if (auto s = put(t); !s) return s;
  if (counted_ && !*had) ++count_;
  return {};
}

Status LangGraphThreads::erase(const std::string& id) {
  auto had = get(id);
  if (!had) return std::move(had).error();
  if (!*had) return {};
  if (auto s = store_->remove(book_namespace(), id); !s) return s;
  if (counted_) --count_;
  return {};
}

bool LangGraphThreads::room_for_one(std::size_t max) const {
  return !counted_ || count_.load() < max;
}

Result<std::vector<std::string>> LangGraphThreads::select(const json::object* metadata,
                                                          const std::vector<std::string>* ids,
                                                          const std::string& sort_by,
                                                          bool ascending) const {
  std::vector<std::pair<std::int64_t, std::string>> keyed;
  auto take = [&](const std::string& id, const json::object& v) {
    const Thread t = thread_of(id, v);
    keyed.emplace_back(sort_by == "updated_at" ? t.updated_ms : t.created_ms, t.id);
  };
  if (ids) {
    for (const auto& id : *ids) {
      auto item = store_->get(book_namespace(), id);
      if (!item) return std::move(item).error();
      if (!*item) continue;
      if (metadata &&
          !graph::store_filter_matches((**item).value, json::object{{"metadata", *metadata}}))
        continue;
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
  const bool by_id = sort_by == "thread_id";
  std::sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    const bool less = by_id ? x.second < y.second : x < y;
    const bool more = by_id ? y.second < x.second : y < x;
    return ascending ? less : more;
  });
  keyed.erase(std::unique(keyed.begin(), keyed.end()), keyed.end());
  std::vector<std::string> out;
  out.reserve(keyed.size());
  for (auto& [k, id] : keyed) out.push_back(std::move(id));
  return out;
}

}  // namespace weir::serve
