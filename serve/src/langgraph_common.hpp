// What the LangGraph API's route files share (private to serve/): the threads' book, the
// answers and error shapes, the thread lookups. langgraph_api.cpp serves assistants and runs,
// langgraph_threads.cpp threads.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "langgraph_answer.hpp"
#include "langgraph_api.hpp"
#include "langgraph_request.hpp"

namespace weir::serve {

namespace json = boost::json;

// The threads' metadata: what LangGraph keeps with a thread that weir's checkpoints do not
// (created_at, metadata, the runs on it). Bounded; any thread.
class LangGraphThreads {
 public:
  struct Thread {
    std::string id;
    std::int64_t created_ms = 0, updated_ms = 0;
    json::object metadata;
    std::deque<std::string> runs;  // newest first, at most kRunsKept
  };
  static constexpr std::size_t kRunsKept = 100;

  std::optional<Thread> get(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = threads_.find(id);
    if (it == threads_.end()) return std::nullopt;
    return it->second;
  }
  // false when the id is taken already (`existing` then holds it) or the book is full.
  enum class Put { created, exists, full };
  Put create(Thread t, std::size_t max, Thread& existing) {
    std::lock_guard lock(mu_);
    if (auto it = threads_.find(t.id); it != threads_.end()) {
      existing = it->second;
      return Put::exists;
    }
    if (threads_.size() >= max) return Put::full;
    existing = t;
    threads_.emplace(t.id, std::move(t));
    return Put::created;
  }
  // Merges `metadata` into the thread's and records a run on it; the thread is added when the
  // book did not have it (the caller checked the book's bound).
  void touch(const std::string& id, const json::object& metadata, const std::string& run,
             std::int64_t now_ms) {
    std::lock_guard lock(mu_);
    auto& t = threads_[id];
    if (t.id.empty()) {
      t.id = id;
      t.created_ms = now_ms;
    }
    for (const auto& kv : metadata) t.metadata[kv.key()] = kv.value();
    t.updated_ms = now_ms;
    if (!run.empty()) {
      t.runs.push_front(run);
      if (t.runs.size() > kRunsKept) t.runs.pop_back();
    }
  }
  void erase(const std::string& id) {
    std::lock_guard lock(mu_);
    threads_.erase(id);
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return threads_.size();
  }
  // The ids of the threads whose metadata contains `metadata` and (when given) that are among
  // `ids`, ordered by `sort_by` (thread_id, created_at or updated_at).
  std::vector<std::string> select(const json::object* metadata, const std::vector<std::string>* ids,
                                  const std::string& sort_by, bool ascending) const {
    std::vector<std::pair<std::int64_t, std::string>> keyed;
    {
      std::lock_guard lock(mu_);
      auto take = [&](const Thread& t) {
        if (metadata && !json_contains(json::value(t.metadata), json::value(*metadata))) return;
        keyed.emplace_back(sort_by == "updated_at" ? t.updated_ms : t.created_ms, t.id);
      };
      if (ids) {
        for (const auto& id : *ids)
          if (auto it = threads_.find(id); it != threads_.end()) take(it->second);
      } else {
        for (const auto& [k, t] : threads_) take(t);
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

 private:
  mutable std::mutex mu_;
  std::map<std::string, Thread> threads_;
};

std::int64_t now_ms();

// answer, detail and from_error: langgraph_answer.hpp. A 501 naming the route:
http::Response not_implemented(const http::Request& rq, std::string_view route);
// A field's value when it is present and not null.
const json::value* field(const json::object& o, std::string_view key);

// The request's body (or page), or an error answer in `out`.
std::optional<json::object> body_of(const http::Request& rq, http::Response& out);
std::optional<LangGraphPage> page_of(const json::object& body, http::Response& out);

// A thread as LangGraph's Thread: its status from its newest run and checkpoint.
Result<json::object> thread_json(cluster::RunService& runs, const LangGraphThreads::Thread& t);
// The thread of the book, or one the store holds that the book does not know (a thread of
// /v1/runs, `weir run --thread`, or a stateless run): shown without metadata, and not added to
// the book (only a run started here adds one, within max_threads).
Result<LangGraphThreads::Thread> find_thread(const LangGraphApi& api, const std::string& id);
Error threads_full(const LangGraphApi& api);
// The thread id of a new thread: a UUID (version 4), as LangGraph makes them.
std::string new_thread_id();

boost::asio::awaitable<void> route_threads(const LangGraphApi& api, http::Exchange& ex,
                                           const std::vector<std::string>& s, http::Response& out,
                                           bool& streamed, const trace::SpanContext& request_span);
boost::asio::awaitable<void> route_thread_runs(const LangGraphApi& api, http::Exchange& ex,
                                               const std::vector<std::string>& s,
                                               const std::string& thread, http::Response& out,
                                               bool& streamed,
                                               const trace::SpanContext& request_span);

}  // namespace weir::serve
