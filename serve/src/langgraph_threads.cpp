#include <algorithm>

#include <boost/json.hpp>

#include "langgraph_common.hpp"
#include "langgraph_messages.hpp"
#include "langgraph_shapes.hpp"
#include "run_follow.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/ids.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/runtime/sha256.hpp"

namespace weir::serve {

namespace asio = boost::asio;
using asio::awaitable;
using cluster::RunRecord;
using cluster::RunState;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --- answers ------------------------------------------------------------------------------

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
    auto v = client_state_at(cp, t.id, c.checkpoint_id);
    if (!v) return std::move(v).error();
    values = values_to_langchain(*v);
    const std::string s = pending_status(c);
    if (s == "interrupted") {
      status = "interrupted";
      // Keyed by the interrupted task's id, as the ThreadState's tasks name it.
      auto st = thread_state(cp, c);
      if (!st) return std::move(st).error();
      for (const auto& task : st->at("tasks").as_array())
        if (!task.at("interrupts").as_array().empty())
          interrupts[task.at("id").as_string()] = task.at("interrupts");
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
  auto known = api.threads->get(id);
  if (!known) return std::move(known).error();
  if (*known) return std::move(**known);
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
// The thread id of a new thread: a UUID (version 4), as LangGraph makes them.
std::string new_thread_id() {
  const std::string h = sha256_hex(graph::new_checkpoint_id(0) + std::to_string(now_ms()));
  std::string u = h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-" +
                  std::string(1, "89ab"[h[16] % 4]) + h.substr(17, 3) + "-" + h.substr(20, 12);
  return u;
}
namespace {

// The workflow that runs a thread: the book's graph_id, else that of the run that wrote its
// latest checkpoint. Errors: invalid_argument (no state yet), not_found (no workflow of this
// server's folder).
Result<std::shared_ptr<const graph::WorkflowSpec>> thread_workflow(
    cluster::RunService& runs, const LangGraphThreads::Thread& t) {
  auto latest = runs.checkpointer().latest(t.id);
  if (!latest) return std::move(latest).error();
  if (!*latest)
    return Error(Errc::invalid_argument,
                 "thread " + t.id + " has no state yet: start a run on it first");
  std::string graph;
  if (const auto* g = t.metadata.if_contains("graph_id"); g && g->is_string())
    graph = g->as_string();
  const auto& m = (**latest).metadata;
  const auto* q =
      m.contains("queue_run") ? m.if_contains("queue_run") : m.if_contains("branched_from_run");
  if (graph.empty() && q && q->is_string())
    if (auto r = runs.get(q->as_string())) graph = r->workflow_name;
  auto spec = graph.empty() ? nullptr : runs.workflow(graph);
  if (!spec)
    return Error(Errc::not_found, "thread " + t.id +
                                      " was not run by a workflow of this server's folder, so "
                                      "its state cannot be updated here");
  return spec;
}

}  // namespace

Result<json::object> state_writes(const graph::WorkflowSpec& spec, const LangGraphStateUpdate& u,
                                  std::string_view field) {
  if (!u.as_node.empty()) {
    const bool known = std::any_of(spec.nodes.begin(), spec.nodes.end(),
                                   [&](const auto& n) { return n.name == u.as_node; });
    if (!known)
      return Error(Errc::invalid_argument,
                   "'as_node' '" + u.as_node + "' is not a node of " + spec.name);
  }
  json::object writes;
  if (!u.values) return writes;
  auto in = input_from_langchain(*u.values, &spec, field);
  if (!in) return std::move(in).error();
  for (const auto& kv : *in) {
    const auto ch = std::find_if(spec.channels.begin(), spec.channels.end(),
                                 [&](const auto& c) { return c.name == kv.key(); });
    if (ch == spec.channels.end()) {
      std::string names;
      for (const auto& c : spec.channels) names += (names.empty() ? "" : ", ") + c.name;
      return Error(Errc::invalid_argument, "'" + std::string(field) + "' sets '" +
                                               std::string(kv.key()) + "', which " + spec.name +
                                               " does not have (its channels: " + names + ")");
    }
    if (ch->reducer != graph::ReducerKind::last_value)
      return Error(Errc::invalid_argument,
                   "'" + std::string(field) + "." + std::string(kv.key()) + "': channel '" +
                       ch->name + "' is merged by reducer '" + graph::reducer_name(ch->reducer) +
                       "'; weir's state update sets channels without a reducer only "
                       "(docs/langgraph-api.md)");
    writes[kv.key()] = kv.value();
  }
  return writes;
}

// POST /threads, /threads/search, /threads/count, /threads/prune; GET|PATCH|DELETE /threads/{id},
// its state, history and copy; the runs on it go to route_thread_runs.
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
      auto known = api.threads->get(id);
      if (!known) return std::move(known).error();
      if (*latest && !*known) {
        if (!do_nothing) return Error(Errc::thread_busy, "Thread " + id + " already exists");
        return find_thread(api, id);
      }
      auto put = api.threads->create(t, api.max_threads, existing);
      if (!put) return std::move(put).error();
      switch (*put) {
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
      auto selected = api.threads->select(q->metadata ? &*q->metadata : nullptr,
                                          q->ids ? &*q->ids : nullptr, q->sort_by, q->ascending);
      if (!selected) return std::move(selected).error();
      const auto& ids = *selected;
      Found f;
      const bool by_state = !q->status.empty() || q->values;
      if (!by_state) {
        f.total = ids.size();
        if (count) return f;
        for (std::size_t i = q->page.offset; i < ids.size() && f.page.size() < q->page.limit; ++i) {
          auto t = api.threads->get(ids[i]);
          if (!t) return std::move(t).error();
          if (!*t) continue;  // deleted meanwhile
          auto j = thread_json(*runs, **t);
          if (!j) return std::move(j).error();
          f.page.push_back(std::move(*j));
        }
        return f;
      }
      for (const auto& id : ids) {
        auto t = api.threads->get(id);
        if (!t) return std::move(t).error();
        if (!*t) continue;
        auto j = thread_json(*runs, **t);
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
  // POST /threads/prune: delete the threads, or keep only their latest checkpoint.
  if (s.size() == 2 && s[1] == "prune" && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto p = read_langgraph_prune(*b);
    if (!p) {
      out = from_error(p.error());
      co_return;
    }
    auto n = co_await off_thread(*api.blocking, [&]() -> Result<std::size_t> {
      std::size_t pruned = 0;
      for (const auto& id : p->ids) {
        auto t = find_thread(api, id);
        if (!t) {
          if (t.error().is(Errc::not_found)) continue;
          return std::move(t).error();
        }
        if (p->keep_latest) {
          auto r = runs->keep_latest(id);
          if (!r) return std::move(r).error();
        } else {
          if (auto d = runs->delete_thread(id); !d) return std::move(d).error();
          if (auto e = api.threads->erase(id); !e) return std::move(e).error();
        }
        ++pruned;
      }
      return pruned;
    });
    out = n ? answer(200, json::object{{"pruned_count", static_cast<std::int64_t>(*n)}})
            : from_error(n.error());
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
  // DELETE /threads/{id}: its checkpoints and its place in the book (its runs' records stay)
  if (s.size() == 2 && rq.method == "DELETE") {
    auto d = co_await off_thread(*api.blocking, [&]() -> Status {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      if (auto r = runs->delete_thread(thread); !r) return r;
      return api.threads->erase(thread);
    });
    out = d ? http::Response{204, "", {}, ""} : from_error(d.error());
    co_return;
  }
  // POST /threads/{id}/copy: a new thread with its checkpoints and metadata
  if (s.size() == 3 && s[2] == "copy" && rq.method == "POST") {
    auto j = co_await off_thread(*api.blocking, [&]() -> Result<json::object> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      LangGraphThreads::Thread copy = *t;
      copy.id = new_thread_id();
      copy.created_ms = copy.updated_ms = now_ms();
      copy.runs.clear();
      LangGraphThreads::Thread made;
      auto put = api.threads->create(copy, api.max_threads, made);
      if (!put) return std::move(put).error();
      if (*put == LangGraphThreads::Put::full) return threads_full(api);
      auto latest = runs->checkpointer().latest(thread);
      if (!latest) return std::move(latest).error();
      if (*latest) {
        if (auto c = runs->copy_thread(thread, copy.id); !c) {
          (void)api.threads->erase(copy.id);  // the copy's own error is the one to tell
          return std::move(c).error();
        }
      }
      return thread_json(*runs, made);
    });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  // POST /threads/{id}/state: a new checkpoint with the values given (LangGraph's update_state)
  if (s.size() == 3 && s[2] == "state" && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto u = read_langgraph_state_update(*b);
    if (!u) {
      out = from_error(u.error());
      co_return;
    }
    auto j = co_await off_thread(*api.blocking, [&]() -> Result<json::object> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      auto spec = thread_workflow(*runs, *t);
      if (!spec) return std::move(spec).error();
      auto writes = state_writes(**spec, *u, "values");
      if (!writes) return std::move(writes).error();
      json::object why{{"source", "update"}};
      if (!u->as_node.empty()) why["as_node"] = u->as_node;
      std::string from = u->checkpoint_id;
      if (from == kRootCheckpoint) {  // an update of the empty state before the first checkpoint
        json::object fresh{{"source", "fork"}};
        auto root = runs->root_thread(thread, std::move(fresh));
        if (!root) return std::move(root).error();
        from = root->checkpoint_id;
      }
      auto c = runs->branch_thread(thread, from, std::move(*writes), std::move(why));
      if (!c) return std::move(c).error();
      auto known = api.threads->get(thread);
      if (!known) return std::move(known).error();
      if (*known)
        if (auto k = api.threads->touch(thread, {}, "", now_ms()); !k) return std::move(k).error();
      const json::object ref = checkpoint_ref(thread, c->checkpoint_id);
      return json::object{{"checkpoint", ref}, {"configurable", ref}};
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
      auto known = api.threads->get(thread);
      if (!known) return std::move(known).error();
      if (!*known && !api.threads->room_for_one(api.max_threads)) return threads_full(api);
      if (auto k = api.threads->touch(thread, m->as_object(), "", now_ms()); !k)
        return std::move(k).error();
      auto now = api.threads->get(thread);
      if (!now) return std::move(now).error();
      if (!*now) return Error(Errc::not_found, "Thread with ID " + thread + " not found");
      return thread_json(*runs, **now);
    });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  // GET /threads/{id}/artifacts/{artifact_id} (weir's own): the bytes of a value the thread's
  // runs moved to the artifact store (a state value {"$artifact": id, ...}).
  if (s.size() == 4 && s[2] == "artifacts" && rq.method == "GET") {
    const std::string id = s[3];
    auto a = co_await off_thread(*api.blocking, [&]() -> Result<graph::Checkpoint::Artifact> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      auto got = runs->checkpointer().get_artifact(thread, id);
      if (!got) return std::move(got).error();
      if (!*got)
        return Error(Errc::not_found,
                     "Artifact " + id.substr(0, 100) + " not found on thread " + thread);
      return std::move(**got);
    });
    if (!a) {
      out = from_error(a.error());
      co_return;
    }
    // Text as plain text, JSON as JSON, anything else as bytes: never markup a browser runs.
    const std::string& type = a->media_type;
    const std::string as = type.rfind("text/", 0) == 0  ? "text/plain; charset=utf-8"
                           : type == "application/json" ? type
                                                        : "application/octet-stream";
    out = http::Response{200, as, {}, std::move(a->bytes)};
    out.headers.emplace_back("Content-Disposition",
                             "attachment; filename=\"artifact-" + a->id.substr(0, 16) + "\"");
    out.headers.emplace_back("X-Content-Type-Options", "nosniff");
    co_return;
  }
  // GET /threads/{id}/state/{checkpoint_id}
  if (s.size() == 4 && s[2] == "state" && rq.method == "GET") {
    const std::string id = s[3];
    auto j = co_await off_thread(*api.blocking, [&]() -> Result<json::object> {
      auto t = find_thread(api, thread);
      if (!t) return std::move(t).error();
      if (id == kRootCheckpoint) return root_state(thread, t->created_ms);
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
    std::string before, at;  // at: 'checkpoint' names the one to list (LangGraph's filter)
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
      auto only = read_langgraph_checkpoint(*b);
      if (!only) {
        out = from_error(only.error());
        co_return;
      }
      at = std::move(*only);
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
        if (!at.empty() && c.checkpoint_id != at) continue;
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
      // A `before` that is none of the thread's checkpoints is an error, not an empty page.
      if (!before.empty() && before != kRootCheckpoint && !open && list->size() < 10'000)
        return Error(Errc::not_found, "thread " + thread + " has no checkpoint '" +
                                          before.substr(0, 200) + "' ('before')");
      // Oldest of all: the state before the thread's first checkpoint (shapes' root_state).
      const bool whole = !list->empty() && list->size() < 10'000;
      if (whole && states.size() < limit && (open || before.empty()) && before != kRootCheckpoint &&
          (at.empty() || at == kRootCheckpoint)) {
        json::object root = root_state(thread, list->back().created_at_ms);
        if (!history_filter || json_contains(root.at("metadata"), json::value(*history_filter)))
          states.push_back(std::move(root));
      }
      return json::value(std::move(states));
    });
    out = j ? answer(200, *j) : from_error(j.error());
    co_return;
  }
  if (s.size() >= 3 && s[2] == "runs") {
    co_await route_thread_runs(api, ex, s, thread, out, streamed, request_span);
    co_return;
  }
  if (s.size() == 3 && s[2] == "stream" && rq.method == "GET") {
    co_await route_thread_stream(api, ex, thread, out, streamed);
    co_return;
  }
  out = not_implemented(rq, "/threads/{thread_id}" + std::string(s.size() > 2 ? "/" + s[2] : ""));
}

}  // namespace weir::serve
