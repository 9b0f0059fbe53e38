#include "langgraph_api.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>

#include "langgraph_answer.hpp"
#include "langgraph_messages.hpp"
#include "langgraph_request.hpp"
#include "langgraph_shapes.hpp"
#include "langgraph_store.hpp"
#include "run_follow.hpp"
#include "runs_path.hpp"
#include "weir/graph/ids.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/http/sse.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/sha256.hpp"
#include "weir/runtime/text.hpp"
#include "weir/version.hpp"

namespace weir::serve {

namespace asio = boost::asio;
namespace json = boost::json;
using asio::awaitable;
using asio::use_awaitable;
using cluster::RunRecord;
using cluster::RunState;

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

std::shared_ptr<LangGraphThreads> make_langgraph_threads() {
  return std::make_shared<LangGraphThreads>();
}

namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --- answers (answer, detail, from_error: langgraph_answer.hpp) ----------------------------

http::Response not_implemented(const http::Request& rq, std::string_view route) {
  return detail(501, rq.method + " " + std::string(route) +
                         " is not implemented by weir yet (docs/langgraph-api.md lists the "
                         "endpoints it serves)");
}

// A field's value when it is present and not null.
const json::value* field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}

// --- assistants ---------------------------------------------------------------------------

// The workflow an assistant id names: a graph id (the workflow's name) or its uuid5.
std::shared_ptr<const graph::WorkflowSpec> assistant(const cluster::RunService& runs,
                                                     std::string_view id, std::string* name) {
  for (const auto& n : runs.workflow_names()) {
    if (n == id || iequals(assistant_id_of(n), id)) {
      if (name) *name = n;
      return runs.workflow(n);
    }
  }
  return nullptr;
}

std::string unknown_assistant(const cluster::RunService& runs, std::string_view id) {
  std::string list;
  for (const auto& n : runs.workflow_names()) list += (list.empty() ? "" : ", ") + n;
  return "Assistant '" + std::string(id) + "' not found (this server's graphs: " + list + ")";
}

// A thread as LangGraph's Thread: its status from its newest run and checkpoint.
Result<json::object> thread_json(cluster::RunService& runs, const LangGraphThreads::Thread& t) {
  const auto& cp = runs.checkpointer();
  auto latest = cp.latest(t.id);
  if (!latest) return std::move(latest).error();
  std::string status = "idle";
  json::value values = nullptr;
  json::object interrupts;
  if (*latest) {
    const auto& c = **latest;
    auto v = cp.state_at(t.id, c.checkpoint_id);
    if (!v) return std::move(v).error();
    values = values_to_langchain(*v);
    const std::string s = pending_status(c);
    if (s == "interrupted") {
      status = "interrupted";
      const auto* i = c.pending.if_contains("interrupt");
      const auto* n = i && i->is_object() ? i->as_object().if_contains("node") : nullptr;
      interrupts[n && n->is_string() ? std::string(n->as_string()) : "interrupt"] =
          interrupts_of(c);
    } else if (s == "failed") {
      status = "error";
    }
  }
  if (!t.runs.empty()) {
    auto r = runs.get(t.runs.front());
    if (r && !cluster::is_terminal(r->state)) status = "busy";
    if (r && r->state == RunState::failed) status = "error";
  }
  return json::object{{"thread_id", t.id},
                      {"created_at", iso_time(t.created_ms)},
                      {"updated_at", iso_time(t.updated_ms)},
                      {"state_updated_at", iso_time(*latest ? (**latest).created_at_ms : 0)},
                      {"metadata", t.metadata},
                      {"status", status},
                      {"config", json::object{}},
                      {"values", std::move(values)},
                      {"interrupts", std::move(interrupts)}};
}

// The thread of the book, or one the store holds that the book does not know (a thread of
// /v1/runs, `weir run --thread`, or a stateless run): shown without metadata, and not added to
// the book (only a run started here adds one, within max_threads).
Result<LangGraphThreads::Thread> find_thread(const LangGraphApi& api, const std::string& id) {
  if (auto t = api.threads->get(id)) return std::move(*t);
  auto latest = api.runs->checkpointer().latest(id);
  if (!latest) return std::move(latest).error();
  if (!*latest) return Error(Errc::not_found, "Thread with ID " + id + " not found");
  LangGraphThreads::Thread t;
  t.id = id;
  t.created_ms = t.updated_ms = (**latest).created_at_ms;
  return t;
}

Error threads_full(const LangGraphApi& api) {
  return Error(Errc::overloaded, "the server holds " + std::to_string(api.max_threads) +
                                     " threads already (its limit): use an existing thread, or "
                                     "a stateless run (POST /runs)");
}

// --- runs ---------------------------------------------------------------------------------

// The request's body, or an error answer in `out`.
std::optional<json::object> body_of(const http::Request& rq, http::Response& out) {
  auto b = langgraph_body(rq.body);
  if (!b) {
    out = from_error(b.error());
    return std::nullopt;
  }
  return std::move(*b);
}

std::optional<LangGraphPage> page_of(const json::object& body, http::Response& out) {
  auto p = read_langgraph_page(body);
  if (!p) {
    out = from_error(p.error());
    return std::nullopt;
  }
  return *p;
}

// A run request and the workflow its assistant names; an error answer otherwise.
struct RunAsk {
  LangGraphRun run;
  std::string graph;
};
std::optional<RunAsk> run_ask(const LangGraphApi& api, const http::Request& rq,
                              http::Response& out) {
  auto b = body_of(rq, out);
  if (!b) return std::nullopt;
  const std::string route = rq.method + " " + rq.path;
  auto r = read_langgraph_run(*b, route);
  if (!r) {
    out = from_error(r.error());
    return std::nullopt;
  }
  RunAsk a{std::move(*r), {}};
  if (!assistant(*api.runs, a.run.assistant_id, &a.graph)) {
    out = detail(404, unknown_assistant(*api.runs, a.run.assistant_id));
    return std::nullopt;
  }
  return a;
}

// Starts the run a request asks for on `thread` (made first for a stateless run or with
// if_not_exists "create"). The record, or an error answer.
awaitable<std::optional<RunRecord>> start_run(const LangGraphApi& api, const http::Request& rq,
                                              const RunAsk& a, std::string thread, bool stateless,
                                              http::Response& out,
                                              const trace::SpanContext& request_span) {
  cluster::RunService* runs = api.runs;
  const std::string traceparent = run_traceparent_of(rq, request_span);
  auto input = input_from_langchain(a.run.input);
  if (!input) {
    out = from_error(input.error());
    co_return std::nullopt;
  }
  json::object stamp = a.run.metadata;
  stamp["graph_id"] = a.graph;
  stamp["assistant_id"] = assistant_id_of(a.graph);
  auto rec = co_await off_thread(*api.blocking, [&]() -> Result<RunRecord> {
    if (!stateless) {
      auto t = find_thread(api, thread);
      if (!t && !(t.error().is(Errc::not_found) && a.run.create_thread))
        return std::move(t).error();
      if (!api.threads->get(thread) && api.threads->size() >= api.max_threads)
        return threads_full(api);
    }
    if (a.run.resume) return runs->resume(thread, *a.run.resume, traceparent);
    cluster::RunRequest r;
    r.workflow = a.graph;
    r.input = std::move(*input);
    r.thread_id = thread;
    r.input_source = "'input'";
    r.traceparent = traceparent;
    return runs->submit(std::move(r));
  });
  if (!rec) {
    out = from_error(rec.error());
    co_return std::nullopt;
  }
  // A stateless run's thread is its own (named like it), forgotten with it: not in the book.
  if (!stateless) api.threads->touch(rec->thread_id, stamp, rec->id, now_ms());
  co_return std::move(*rec);
}

std::string content_location(const RunRecord& r, bool stateless) {
  return stateless ? "/runs/" + r.id : "/threads/" + r.thread_id + "/runs/" + r.id;
}

// Follows run `id` until it ends (the record), the server drains or the client leaves
// (nullopt). `each` is called on the I/O thread with every look (the record and the steps new
// since the last look); it returns false to stop following.
template <class Each>
awaitable<std::optional<RunRecord>> follow(const LangGraphApi& api, http::Exchange& ex,
                                           const std::string& id, Each each) {
  cluster::RunService* runs = api.runs;
  auto executor = co_await asio::this_coro::executor;
  auto wake = std::make_shared<Wake>(executor);
  auto watch = watch_run(*runs, id, wake, executor);
  std::string after;
  for (;;) {
    const std::uint64_t seen = wake->version.load();
    auto look = co_await off_thread(*api.blocking, [&] { return look_up(*runs, id, after); });
    if (!look) co_return std::nullopt;
    if (!look->second.list.empty()) after = look->second.list.back().checkpoint_id;
    const bool go_on = co_await each(look->first, look->second);
    if (!go_on) co_return std::nullopt;
    if (cluster::is_terminal(look->first.state)) co_return std::move(look->first);
    while (wake->version.load() == seen) {
      if (ex.disconnected() || *api.draining) co_return std::nullopt;
      wake->timer.expires_after(api.check);
      co_await wake->timer.async_wait(asio::as_tuple(use_awaitable));
    }
  }
}

awaitable<void> cancel_if_asked(const LangGraphApi& api, http::Exchange& ex, const LangGraphRun& a,
                                const std::string& run) {
  if (!a.cancel_on_disconnect || !ex.disconnected()) co_return;
  cluster::RunService* runs = api.runs;
  (void)co_await off_thread(*api.blocking, [&] { return runs->cancel(run); });
}

// POST .../runs/wait and GET .../join: the final chunk once the run ended.
awaitable<void> wait_for(const LangGraphApi& api, http::Exchange& ex, const RunRecord& started,
                         const LangGraphRun* ask, http::Response& out) {
  auto none = [](const RunRecord&, const Steps&) -> awaitable<bool> { co_return true; };
  auto end = co_await follow(api, ex, started.id, none);
  if (!end) {
    if (ask) co_await cancel_if_asked(api, ex, *ask, started.id);
    out = detail(503, "the server is shutting down; run " + started.id + " goes on");
    co_return;
  }
  cluster::RunService* runs = api.runs;
  auto chunk = co_await off_thread(*api.blocking, [&] { return final_chunk(*runs, *end); });
  out = chunk ? answer(200, *chunk) : from_error(chunk.error());
}

bool wants(const LangGraphRun& a, std::string_view mode) {
  return std::find(a.stream_modes.begin(), a.stream_modes.end(), mode) != a.stream_modes.end();
}

// What a stream carries from one look to the next.
struct Streamed {
  std::vector<std::string> ran;       // the nodes the next step runs
  std::optional<json::object> state;  // the state before the next step
};

// The SSE frames of one look at a streamed run: per new step `updates` ({node: what the step
// changed}) and `values` (the state after it); at the end an interrupt's chunk or the error.
Result<std::string> stream_frames(cluster::RunService& runs, const LangGraphRun& a,
                                  const RunRecord& r, const Steps& steps, Streamed& st) {
  const auto& cp = runs.checkpointer();
  std::string frames;
  for (const auto& c : steps.list) {
    if (!st.state && !c.parent_id.empty()) {  // the run's first step: its parent says who ran
      auto parent = cp.get(c.thread_id, c.parent_id);
      if (!parent) return std::move(parent).error();
      if (*parent) {
        if (const auto* n = (**parent).pending.if_contains("next"); n && n->is_array())
          for (const auto& x : n->as_array())
            if (x.is_string()) st.ran.emplace_back(x.as_string());
        auto before = cp.state_at(c.thread_id, c.parent_id);
        if (!before) return std::move(before).error();
        st.state = std::move(*before);
      }
    }
    auto after = cp.state_at(c.thread_id, c.checkpoint_id);
    if (!after) return std::move(after).error();
    if (wants(a, "updates") && !st.ran.empty()) {
      json::object changed;
      for (const auto& kv : c.writes) {
        if (kv.key() == "$snapshot") continue;
        const json::value* was = st.state ? st.state->if_contains(kv.key()) : nullptr;
        if (c.writes.contains("$snapshot") && was && *was == kv.value()) continue;
        changed[kv.key()] = delta(was, kv.value());
      }
      changed = values_to_langchain(changed);
      json::object update;
      for (const auto& n : st.ran) update[n] = changed;  // two nodes in a step: their merge
      frames += http::sse_event(json::serialize(update), "updates");
    }
    if (wants(a, "values"))
      frames += http::sse_event(json::serialize(values_to_langchain(*after)), "values");
    st.state = std::move(*after);
    st.ran.clear();
    if (const auto* n = c.pending.if_contains("next"); n && n->is_array())
      for (const auto& x : n->as_array())
        if (x.is_string()) st.ran.emplace_back(x.as_string());
    if (pending_status(c) == "interrupted") {
      const json::object chunk{{"__interrupt__", interrupts_of(c)}};
      if (wants(a, "values")) frames += http::sse_event(json::serialize(chunk), "values");
      if (wants(a, "updates")) frames += http::sse_event(json::serialize(chunk), "updates");
    }
  }
  if (r.state == RunState::failed)
    frames += http::sse_event(
        json::serialize(json::object{{"error", r.error_code.empty() ? "error" : r.error_code},
                                     {"message", r.error}}),
        "error");
  return frames;
}

awaitable<void> stream_run(const LangGraphApi& api, http::Exchange& ex, const LangGraphRun& a,
                           const RunRecord& started, bool stateless, http::Response& out,
                           bool& streamed) {
  http::Headers headers{{"Cache-Control", "no-cache"},
                        {"Content-Location", content_location(started, stateless)}};
  if (auto s = co_await ex.async_start_stream(200, "text/event-stream", std::move(headers)); !s)
    co_return;
  streamed = true;
  std::string first = http::sse_event(
      json::serialize(json::object{{"run_id", started.id}, {"attempt", 1}}), "metadata");
  if (auto s = co_await ex.async_write(std::move(first)); !s) co_return;
  cluster::RunService* runs = api.runs;
  Streamed st;
  bool write_failed = false;
  auto each = [&](const RunRecord& r, const Steps& steps) -> awaitable<bool> {
    auto frames =
        co_await off_thread(*api.blocking, [&] { return stream_frames(*runs, a, r, steps, st); });
    if (!frames) co_return false;
    if (!frames->empty())
      if (auto s = co_await ex.async_write(std::move(*frames)); !s) {
        write_failed = true;
        co_return false;
      }
    co_return true;
  };
  auto end = co_await follow(api, ex, started.id, each);
  if (!end) co_await cancel_if_asked(api, ex, a, started.id);
  if (!write_failed) (void)co_await ex.async_finish();
  (void)out;
}

// The thread id of a new thread: a UUID (version 4), as LangGraph makes them.
std::string new_thread_id() {
  const std::string h = sha256_hex(graph::new_checkpoint_id(0) + std::to_string(now_ms()));
  std::string u = h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-" +
                  std::string(1, "89ab"[h[16] % 4]) + h.substr(17, 3) + "-" + h.substr(20, 12);
  return u;
}

// POST .../runs (kind ""), .../runs/wait, .../runs/stream: on `thread`, or stateless (nullopt).
awaitable<void> run_request(const LangGraphApi& api, http::Exchange& ex, const std::string& kind,
                            std::optional<std::string> thread, http::Response& out, bool& streamed,
                            const trace::SpanContext& request_span) {
  const auto& rq = ex.request();
  const bool stateless = !thread;
  auto ask = run_ask(api, rq, out);
  if (!ask) co_return;
  if (stateless && ask->run.resume) {
    out = detail(422,
                 "a run without a thread has nothing to resume: 'command.resume' needs "
                 "POST /threads/{thread_id}/runs");
    co_return;
  }
  auto rec = co_await start_run(api, rq, *ask, thread.value_or(""), stateless, out, request_span);
  if (!rec) co_return;
  if (kind == "stream") {
    co_await stream_run(api, ex, ask->run, *rec, stateless, out, streamed);
    co_return;
  }
  if (kind == "wait")
    co_await wait_for(api, ex, *rec, &ask->run, out);
  else
    out = answer(200, run_object(*rec, ask->run.metadata));
  out.headers.emplace_back("Content-Location", content_location(*rec, stateless));
}

// --- routes -------------------------------------------------------------------------------

awaitable<void> route_assistants(const LangGraphApi& api, const http::Request& rq,
                                 const std::vector<std::string>& s, http::Response& out) {
  cluster::RunService& runs = *api.runs;
  if (s.size() == 2 && (s[1] == "search" || s[1] == "count") && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto q = read_langgraph_assistant_search(*b);
    if (!q) {
      out = from_error(q.error());
      co_return;
    }
    json::array found;
    for (const auto& n : runs.workflow_names()) {
      auto spec = runs.workflow(n);
      json::object a = assistant_json(api.started_ms, n, *spec);
      if (q->graph_id && *q->graph_id != n) continue;
      if (q->metadata && !json_contains(a.at("metadata"), json::value(*q->metadata))) continue;
      if (q->name) {
        std::string have = n, want = *q->name;
        for (auto* str : {&have, &want})
          std::transform(str->begin(), str->end(), str->begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (have.find(want) == std::string::npos) continue;
      }
      found.push_back(std::move(a));
    }
    const std::size_t total = found.size();
    if (s[1] == "count") {
      out = answer(200, static_cast<std::int64_t>(total));
      co_return;
    }
    const std::size_t limit = q->page.limit, offset = q->page.offset;
    json::array page;
    for (std::size_t i = offset; i < total && page.size() < limit; ++i) page.push_back(found[i]);
    out = answer(200, page);
    out.headers.emplace_back("X-Pagination-Total", std::to_string(total));
    if (offset + page.size() < total)
      out.headers.emplace_back("X-Pagination-Next", std::to_string(offset + page.size()));
    co_return;
  }
  if (s.size() >= 2 && s.size() <= 3 && rq.method == "GET") {
    std::string name;
    auto spec = assistant(runs, s[1], &name);
    if (!spec) {
      out = detail(404, unknown_assistant(runs, s[1]));
      co_return;
    }
    if (s.size() == 2)
      out = answer(200, assistant_json(api.started_ms, name, *spec));
    else if (s[2] == "graph")
      out = answer(200, graph_json(*spec));
    else if (s[2] == "schemas")
      out = answer(200, schemas_json(name, *spec));
    else if (s[2] == "subgraphs") {
      json::object subs;
      for (const auto& [node, sub] : spec->subgraphs) subs[node] = schemas_json(sub->name, *sub);
      out = answer(200, subs);
    } else
      out = not_implemented(rq, "/assistants/{assistant_id}/" + s[2]);
    co_return;
  }
  out = not_implemented(rq, s.size() == 1 ? "/assistants" : "/assistants/{assistant_id}/...");
}

awaitable<void> route_threads(const LangGraphApi& api, http::Exchange& ex,
                              const std::vector<std::string>& s, http::Response& out,
                              bool& streamed, const trace::SpanContext& request_span) {
  const auto& rq = ex.request();
  cluster::RunService* runs = api.runs;
  // POST /threads
  if (s.size() == 1 && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto want = read_langgraph_thread_create(*b);
    if (!want) {
      out = from_error(want.error());
      co_return;
    }
    LangGraphThreads::Thread t;
    t.id = want->thread_id.empty() ? new_thread_id() : want->thread_id;
    t.metadata = std::move(want->metadata);
    const bool do_nothing = want->do_nothing_if_exists;
    t.created_ms = t.updated_ms = now_ms();
    const std::string id = t.id;
    auto made = co_await off_thread(*api.blocking, [&]() -> Result<LangGraphThreads::Thread> {
      // A thread the store holds (another door's) exists too.
      auto latest = runs->checkpointer().latest(id);
      if (!latest) return std::move(latest).error();
      LangGraphThreads::Thread existing;
      if (*latest && !api.threads->get(id)) {
        if (!do_nothing) return Error(Errc::thread_busy, "Thread " + id + " already exists");
        return find_thread(api, id);
      }
      switch (api.threads->create(t, api.max_threads, existing)) {
        case LangGraphThreads::Put::created:
          return existing;
        case LangGraphThreads::Put::exists:
          if (do_nothing) return existing;
          return Error(Errc::thread_busy, "Thread " + id + " already exists");
        case LangGraphThreads::Put::full:
          return threads_full(api);
      }
      return existing;
    });
    if (!made) {
      out = from_error(made.error());
      co_return;
    }
    auto j = co_await off_thread(*api.blocking, [&] { return thread_json(*runs, *made); });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  // POST /threads/search, /threads/count: the book's own fields (metadata, ids, the order) are
  // filtered and paged in memory; only the page's threads (or, with a status or values filter,
  // the candidates until the page is full) are read from the store, off the I/O thread.
  if (s.size() == 2 && (s[1] == "search" || s[1] == "count") && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto q = read_langgraph_thread_search(*b);
    if (!q) {
      out = from_error(q.error());
      co_return;
    }
    const bool count = s[1] == "count";
    struct Found {
      json::array page;
      std::size_t total = 0;
    };
    auto found = co_await off_thread(*api.blocking, [&]() -> Result<Found> {
      const auto ids = api.threads->select(q->metadata ? &*q->metadata : nullptr,
                                           q->ids ? &*q->ids : nullptr, q->sort_by, q->ascending);
      Found f;
      const bool by_state = !q->status.empty() || q->values;
      if (!by_state) {
        f.total = ids.size();
        if (count) return f;
        for (std::size_t i = q->page.offset; i < ids.size() && f.page.size() < q->page.limit; ++i) {
          auto t = api.threads->get(ids[i]);
          if (!t) continue;  // deleted meanwhile
          auto j = thread_json(*runs, *t);
          if (!j) return std::move(j).error();
          f.page.push_back(std::move(*j));
        }
        return f;
      }
      for (const auto& id : ids) {
        auto t = api.threads->get(id);
        if (!t) continue;
        auto j = thread_json(*runs, *t);
        if (!j) return std::move(j).error();
        if (!q->status.empty() && j->at("status") != json::value(q->status)) continue;
        if (q->values && !json_contains(j->at("values"), json::value(*q->values))) continue;
        if (!count && f.total >= q->page.offset && f.page.size() < q->page.limit)
          f.page.push_back(std::move(*j));
        ++f.total;
      }
      return f;
    });
    if (!found) {
      out = from_error(found.error());
      co_return;
    }
    if (count) {
      out = answer(200, static_cast<std::int64_t>(found->total));
      co_return;
    }
    const std::size_t shown = found->page.size();
    out = answer(200, found->page);
    out.headers.emplace_back("X-Pagination-Total", std::to_string(found->total));
    if (q->page.offset + shown < found->total)
      out.headers.emplace_back("X-Pagination-Next", std::to_string(q->page.offset + shown));
    co_return;
  }
  if (s.size() == 2 && s[1] == "prune") {
    out = not_implemented(rq, "/threads/prune");
    co_return;
  }
  if (s.size() < 2) {
    out = not_implemented(rq, "/threads");
    co_return;
  }
  const std::string thread = s[1];
  if (auto c = graph::check_id("thread_id", thread); !c) {
    out = detail(422, c.error().message);
    co_return;
  }
  // GET /threads/{id}
  if (s.size() == 2 && rq.method == "GET") {
    auto j = co_await off_thread(*api.blocking, [&]() -> Result<json::object> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      return thread_json(*runs, *t);
    });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  // PATCH /threads/{id}: metadata merged into the thread's
  if (s.size() == 2 && rq.method == "PATCH") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    const auto* m = field(*b, "metadata");
    if (!m || !m->is_object()) {
      out = detail(422, "PATCH /threads/{thread_id} takes {\"metadata\": {...}}");
      co_return;
    }
    auto j = co_await off_thread(*api.blocking, [&]() -> Result<json::object> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      if (!api.threads->get(thread) && api.threads->size() >= api.max_threads)
        return threads_full(api);
      api.threads->touch(thread, m->as_object(), "", now_ms());
      return thread_json(*runs, *api.threads->get(thread));
    });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  // GET /threads/{id}/state/{checkpoint_id}
  if (s.size() == 4 && s[2] == "state" && rq.method == "GET") {
    const std::string id = s[3];
    auto j = co_await off_thread(*api.blocking, [&]() -> Result<json::object> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      auto c = runs->checkpointer().get(thread, id);
      if (!c) return std::move(c).error();
      if (!*c) return Error(Errc::not_found, "Checkpoint " + id + " not found on thread " + thread);
      return thread_state(runs->checkpointer(), **c);
    });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  // GET /threads/{id}/state, POST /threads/{id}/history
  if (s.size() == 3 &&
      ((s[2] == "state" && rq.method == "GET") || (s[2] == "history" && rq.method == "POST"))) {
    std::size_t limit = 10;
    std::string before;
    std::optional<json::object> b, history_filter;
    if (s[2] == "history") {
      b = body_of(rq, out);
      if (!b) co_return;
      auto pg = page_of(*b, out);
      if (!pg) co_return;
      limit = pg->limit;
      auto bf = read_langgraph_before(*b);
      if (!bf) {
        out = from_error(bf.error());
        co_return;
      }
      before = std::move(*bf);
      if (const auto* m = field(*b, "metadata")) {
        if (!m->is_object()) {
          out = detail(422, "'metadata' must be an object");
          co_return;
        }
        history_filter = m->as_object();
      }
      if (const auto* c = field(*b, "checkpoint");
          c && !(c->is_object() && c->as_object().empty())) {
        out = detail(501,
                     "POST /threads/{thread_id}/history: 'checkpoint' is not supported by weir "
                     "yet (docs/langgraph-api.md)");
        co_return;
      }
    }
    const bool history = s[2] == "history";
    auto j = co_await off_thread(*api.blocking, [&]() -> Result<json::value> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      const auto& cp = runs->checkpointer();
      if (!history) {
        auto latest = cp.latest(thread);
        if (!latest) return std::move(latest).error();
        if (!*latest)
          return json::value(json::object{{"values", json::object{}},
                                          {"next", json::array{}},
                                          {"tasks", json::array{}},
                                          {"metadata", nullptr},
                                          {"created_at", nullptr},
                                          {"checkpoint", nullptr},
                                          {"parent_checkpoint", nullptr},
                                          {"interrupts", json::array{}}});
        auto st = thread_state(cp, **latest);
        if (!st) return std::move(st).error();
        return json::value(std::move(*st));
      }
      // Newest first; `before` excludes it and everything newer.
      auto list = cp.list(thread, 10'000);
      if (!list) return std::move(list).error();
      json::array states;
      bool open = before.empty();
      for (const auto& c : *list) {
        if (!open) {
          open = c.checkpoint_id == before;
          continue;
        }
        auto st = thread_state(cp, c);
        if (!st) return std::move(st).error();
        if (history_filter && !json_contains(st->at("metadata"), json::value(*history_filter)))
          continue;
        states.push_back(std::move(*st));
        if (states.size() >= limit) break;
      }
      return json::value(std::move(states));
    });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  // Runs on the thread.
  if (s.size() >= 3 && s[2] == "runs") {
    // POST /threads/{id}/runs[/wait|/stream]
    if (rq.method == "POST" &&
        (s.size() == 3 || (s.size() == 4 && (s[3] == "wait" || s[3] == "stream")))) {
      const std::string kind = s.size() == 3 ? "" : s[3];
      co_await run_request(api, ex, kind, thread, out, streamed, request_span);
      co_return;
    }
    // GET /threads/{id}/runs
    if (s.size() == 3 && rq.method == "GET") {
      auto t = co_await off_thread(*api.blocking, [&] { return find_thread(api, thread); });
      if (!t) {
        out = from_error(t.error());
        co_return;
      }
      auto list = co_await off_thread(*api.blocking, [&]() -> Result<json::array> {
        json::array a;
        for (const auto& id : t->runs) {
          auto r = runs->get(id);
          if (r) a.push_back(run_object(*r));
        }
        return a;
      });
      out = list ? answer(200, *list) : from_error(list.error());
      co_return;
    }
    if (s.size() >= 4 && s[3] == "crons") {
      out = not_implemented(rq, "/threads/{thread_id}/runs/crons");
      co_return;
    }
    if (s.size() >= 4) {
      const std::string run = s[3];
      auto rec = co_await off_thread(*api.blocking, [&] { return runs->get(run); });
      if (!rec || rec->thread_id != thread) {
        out = rec || rec.error().is(Errc::not_found)
                  ? detail(404, "Run " + run + " not found on thread " + thread)
                  : from_error(rec.error());
        co_return;
      }
      if (s.size() == 4 && rq.method == "GET") {
        out = answer(200, run_object(*rec));
        co_return;
      }
      if (s.size() == 5 && s[4] == "join" && rq.method == "GET") {
        co_await wait_for(api, ex, *rec, nullptr, out);
        co_return;
      }
      if (s.size() == 5 && s[4] == "cancel" && rq.method == "POST") {
        const auto action = query_value(rq.target, "action").value_or("interrupt");
        const auto wait = query_value(rq.target, "wait").value_or("0");
        if ((action != "interrupt" && action != "rollback") ||
            (wait != "0" && wait != "1" && wait != "true" && wait != "false")) {
          out = detail(422, "cancel takes ?action=interrupt|rollback and ?wait=0|1, got action '" +
                                action + "', wait '" + wait + "'");
          co_return;
        }
        if (action != "interrupt") {
          out = detail(501, "cancel with action '" + action +
                                "' is not supported by weir yet (action=interrupt is)");
          co_return;
        }
        auto done = co_await off_thread(*api.blocking, [&] { return runs->cancel(run); });
        if (!done) {
          out = from_error(done.error());
          co_return;
        }
        if (wait == "1" || wait == "true") {
          auto none = [](const RunRecord&, const Steps&) -> awaitable<bool> { co_return true; };
          (void)co_await follow(api, ex, run, none);
          out = {204, "", {}, ""};
        } else {
          out = {202, "", {}, ""};
        }
        co_return;
      }
      out = not_implemented(
          rq, "/threads/{thread_id}/runs/{run_id}" + std::string(s.size() > 4 ? "/" + s[4] : ""));
      co_return;
    }
  }
  out = not_implemented(rq, "/threads/{thread_id}" + std::string(s.size() > 2 ? "/" + s[2] : ""));
}

awaitable<void> route_stateless(const LangGraphApi& api, http::Exchange& ex,
                                const std::vector<std::string>& s, http::Response& out,
                                bool& streamed, const trace::SpanContext& request_span) {
  const auto& rq = ex.request();
  if (rq.method == "POST" &&
      (s.size() == 1 || (s.size() == 2 && (s[1] == "wait" || s[1] == "stream")))) {
    const std::string kind = s.size() == 1 ? "" : s[1];
    co_await run_request(api, ex, kind, std::nullopt, out, streamed, request_span);
    co_return;
  }
  out = not_implemented(rq, "/runs" + std::string(s.size() > 1 ? "/" + s[1] : ""));
}

}  // namespace

bool is_langgraph_path(const std::string& path) {
  for (std::string_view p : {"/ok", "/info", "/assistants", "/threads", "/runs", "/store"}) {
    if (path == p ||
        (path.size() > p.size() && path.compare(0, p.size(), p) == 0 && path[p.size()] == '/'))
      return true;
  }
  return false;
}

awaitable<void> route_langgraph(const LangGraphApi& api, http::Exchange& ex, http::Response& out,
                                bool& streamed, const trace::SpanContext& request_span) {
  const auto& rq = ex.request();
  const auto s = langgraph_segments(rq.path);
  if (s.empty()) co_return;
  if (s[0] == "ok" && s.size() == 1 && rq.method == "GET") {
    out = answer(200, json::object{{"ok", true}});
  } else if (s[0] == "info" && s.size() == 1 && rq.method == "GET") {
    out = answer(
        200,
        json::object{
            {"version", WEIR_VERSION_STRING},
            {"context", "weir"},
            {"flags", json::object{{"assistants", true}, {"crons", false}, {"langsmith", false}}}});
  } else if (s[0] == "assistants") {
    co_await route_assistants(api, rq, s, out);
  } else if (s[0] == "threads") {
    co_await route_threads(api, ex, s, out, streamed, request_span);
  } else if (s[0] == "runs") {
    co_await route_stateless(api, ex, s, out, streamed, request_span);
  } else if (s[0] == "store") {
    co_await route_langgraph_store(api, rq, s, out);
  } else {
    out = not_implemented(rq, "/" + s[0] + (s.size() > 1 ? "/..." : ""));
  }
}

}  // namespace weir::serve
