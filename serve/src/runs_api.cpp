#include "runs_api.hpp"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "run_follow.hpp"
#include "runs_path.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/ids.hpp"
#include "weir/http/openai.hpp"
#include "weir/http/sse.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/text.hpp"

namespace weir::serve {

namespace asio = boost::asio;
namespace json = boost::json;
namespace oa = weir::http::openai;
using asio::awaitable;
using asio::use_awaitable;
using cluster::RunRecord;
using cluster::RunState;

namespace {

http::Response json_answer(int status, const json::value& v) {
  return {status, "application/json", {}, json::serialize(v)};
}

http::Response api_error(int status, std::string message, std::string code,
                         std::string param = "") {
  http::Response r{
      status,
      "application/json",
      {},
      oa::ApiError{status, std::move(message), std::move(param), std::move(code)}.body()};
  if (status == 429 || status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

http::Response from_error(const Error& e) {
  if (e.is(Errc::not_found)) return api_error(404, e.message, "not_found");
  if (e.is(Errc::overloaded)) return api_error(429, e.message, "run_queue_full");
  if (e.is(Errc::thread_busy)) return api_error(409, e.message, "thread_busy");
  if (e.is(Errc::invalid_argument)) return api_error(409, e.message, "invalid_state");
  if (e.is(Errc::cancelled)) return api_error(503, e.message, "shutting_down");
  if (e.is(Errc::io_error) || e.is(Errc::unavailable))
    return api_error(503, e.message, "store_unavailable");
  return api_error(500, e.message, errc_name(e.code));
}

// The request body as a JSON object; an error response otherwise.
std::optional<json::object> body_object(const http::Request& rq, http::Response& out,
                                        bool empty_ok) {
  if (rq.body.find_first_not_of(" \t\r\n") == std::string::npos && empty_ok) return json::object{};
  auto p = parse_json(rq.body, "the request body");
  if (!p) {
    out = api_error(400, p.error().message, "invalid_json");
    return std::nullopt;
  }
  if (!p->value.is_object()) {
    out = api_error(400, "the request body must be a JSON object", "invalid_request");
    return std::nullopt;
  }
  return std::move(p->value.as_object());
}

bool only_fields(const json::object& o, std::initializer_list<std::string_view> allowed,
                 http::Response& out) {
  for (const auto& kv : o) {
    bool ok = false;
    for (auto a : allowed) ok = ok || kv.key() == a;
    if (!ok) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      out = api_error(400, "unknown field '" + std::string(kv.key()) + "' (fields: " + list + ")",
                      "invalid_request", std::string(kv.key()));
      return false;
    }
  }
  return true;
}

std::string step_frame(const RunRecord& run, const graph::Checkpoint& c) {
  json::object writes = c.writes;
  writes.erase("$snapshot");
  json::object data{{"run_id", run.id},
                    {"thread_id", run.thread_id},
                    {"step", c.step},
                    {"checkpoint_id", c.checkpoint_id},
                    {"status", c.pending.contains("status") ? c.pending.at("status") : nullptr},
                    {"next", c.pending.contains("next") ? c.pending.at("next") : json::array()},
                    {"writes", std::move(writes)},
                    {"created_at_ms", c.created_at_ms}};
  if (const auto* i = c.pending.if_contains("interrupt")) data["interrupt"] = *i;
  return "id: " + c.checkpoint_id + "\n" + http::sse_event(json::serialize(data), "step");
}

awaitable<void> events(const RunsApi& api, http::Exchange& ex, const std::string& id,
                       http::Response& out, bool& streamed) {
  std::string after(ex.request().header("last-event-id").value_or(""));
  if (after == "end") {  // the client saw the end: 204 tells an EventSource to stop
    out = {204, "text/plain", {}, ""};
    co_return;
  }
  if (!after.empty())  // a checkpoint id: the id rule, before it reaches a store or a message
    if (auto s = graph::check_id("Last-Event-ID", after); !s) {
      out = api_error(400, s.error().message, "invalid_request", "Last-Event-ID");
      co_return;
    }
  cluster::RunService* runs = api.runs;
  // Watched before the first look, so no change between the two is missed.
  auto executor = co_await asio::this_coro::executor;
  auto wake = std::make_shared<Wake>(executor);
  auto watch = watch_run(*runs, id, wake, executor);
  std::uint64_t seen = wake->version.load();
  // One look before the stream starts, so that an unknown run or event id is a plain error.
  auto first = co_await off_thread(*api.blocking, [&] { return look_up(*runs, id, after); });
  if (!first) {
    out = from_error(first.error());
    co_return;
  }
  if (!after.empty() && !first->second.found) {
    out = api_error(400,
                    "Last-Event-ID '" + after + "' is not an event of run '" + id +
                        "' (an id is a step's checkpoint id, or end)",
                    "invalid_request");
    co_return;
  }
  http::Headers headers{
      {"Cache-Control", "no-cache"}};  // (GCC 12: no braced temporaries in co_await)
  if (auto s = co_await ex.async_start_stream(200, "text/event-stream", std::move(headers)); !s)
    co_return;
  streamed = true;
  auto last_write = std::chrono::steady_clock::now();
  std::optional<std::pair<RunRecord, Steps>> look = std::move(*first);
  for (;;) {
    if (look) {
      const RunRecord& rec = look->first;
      std::string frames;
      for (const auto& c : look->second.list) {
        frames += step_frame(rec, c);
        after = c.checkpoint_id;
      }
      const bool ended = cluster::is_terminal(rec.state);
      if (ended)
        frames += "id: end\n" + http::sse_event(json::serialize(cluster::run_json(rec)), "end");
      look.reset();
      if (!frames.empty()) {
        if (auto s = co_await ex.async_write(std::move(frames)); !s) co_return;
        last_write = std::chrono::steady_clock::now();
      }
      if (ended) break;
    }
    if (ex.disconnected() || *api.draining) break;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_write >= api.keep_alive) {
      std::string ping = ": keep-alive\n\n";
      if (auto s = co_await ex.async_write(std::move(ping)); !s) co_return;
      last_write = now;
    }
    if (wake->version.load() == seen) {
      wake->timer.expires_after(std::min<std::chrono::steady_clock::duration>(
          api.check, api.keep_alive - (now - last_write)));
      co_await wake->timer.async_wait(asio::as_tuple(use_awaitable));
      continue;
    }
    seen = wake->version.load();
    auto next = co_await off_thread(*api.blocking, [&] { return look_up(*runs, id, after); });
    if (!next) break;  // forgotten meanwhile, or the store went away: the client reconnects
    look = std::move(*next);
  }
  (void)co_await ex.async_finish();
}

awaitable<void> thread_state(const RunsApi& api, const std::string& thread, http::Response& out) {
  cluster::RunService* runs = api.runs;
  auto r = co_await off_thread(*api.blocking, [&]() -> Result<json::object> {
    const auto& cp = runs->checkpointer();
    auto latest = cp.latest(thread);
    if (!latest) return std::move(latest).error();
    if (!*latest) return Error(Errc::not_found, "no thread '" + thread + "'");
    auto values = cp.state_at(thread, (**latest).checkpoint_id);
    if (!values) return std::move(values).error();
    const auto& c = **latest;
    const auto* q = c.metadata.if_contains("queue_run");
    json::object o{{"thread_id", thread},
                   {"object", "thread.state"},
                   {"checkpoint_id", c.checkpoint_id},
                   {"step", c.step},
                   {"status", c.pending.contains("status") ? c.pending.at("status") : nullptr},
                   {"next", c.pending.contains("next") ? c.pending.at("next") : json::array()},
                   {"run_id", q ? *q : json::value(nullptr)},
                   {"created_at_ms", c.created_at_ms},
                   {"values", std::move(*values)}};
    if (const auto* i = c.pending.if_contains("interrupt")) o["interrupt"] = *i;
    return o;
  });
  out = r ? json_answer(200, *r) : from_error(r.error());
}

// GET /v1/runs: a page of runs (limit, state, after).
awaitable<void> list_runs(const RunsApi& api, const http::Request& rq, http::Response& out) {
  cluster::RunService* runs = api.runs;
  cluster::RunListQuery q;
  if (auto v = query_value(rq.target, "limit")) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || n < 1 || n > 1000) {
      out = api_error(400, "limit must be a whole number from 1 to 1000, got '" + *v + "'",
                      "invalid_request", "limit");
      co_return;
    }
    q.limit = n;
  }
  if (auto v = query_value(rq.target, "state")) {
    q.state = cluster::parse_run_state(*v);
    if (!q.state) {
      out = api_error(400,
                      "state must be queued, running, succeeded, failed, cancelled or "
                      "interrupted, got '" +
                          *v + "'",
                      "invalid_request", "state");
      co_return;
    }
  }
  if (auto v = query_value(rq.target, "after")) {
    if (auto s = graph::check_id("after", *v); !s) {
      out = api_error(400, s.error().message, "invalid_request", "after");
      co_return;
    }
    q.after = *v;
  }
  auto l = co_await off_thread(*api.blocking, [&] { return runs->list(q); });
  if (!l) {
    out = l.error().is(Errc::not_found)
              ? api_error(400, "after: " + l.error().message + " (give the last_id of a page)",
                          "invalid_request", "after")
              : from_error(l.error());
    co_return;
  }
  out = json_answer(200, cluster::run_list_json(*l));
}

// POST /v1/runs: {"workflow", "input"?, "thread_id"?} -> 202 and the run.
// The trace a run queued by `rq` continues: the request's own span when this server traces,
// else the caller's `traceparent` header ("" when none: the run starts a trace of its own).
awaitable<void> submit_run(const RunsApi& api, const http::Request& rq, http::Response& out,
                           const trace::SpanContext& request_span) {
  cluster::RunService* runs = api.runs;
  auto body = body_object(rq, out, false);
  if (!body || !only_fields(*body, {"workflow", "input", "thread_id"}, out)) co_return;
  const auto* wf = body->if_contains("workflow");
  if (!wf || !wf->is_string() || wf->as_string().empty()) {
    std::string names;
    for (const auto& n : runs->workflow_names()) names += (names.empty() ? "" : ", ") + n;
    out = api_error(
        400, "'workflow' is required: the name of one of this server's workflows (" + names + ")",
        "invalid_request", "workflow");
    co_return;
  }
  cluster::RunRequest run;
  run.workflow = std::string(wf->as_string());
  if (const auto* in = body->if_contains("input"); in && !in->is_null()) {
    if (!in->is_object()) {
      out = api_error(400, "'input' must be a JSON object (channel name -> value)",
                      "invalid_request", "input");
      co_return;
    }
    run.input = in->as_object();
  }
  if (const auto* t = body->if_contains("thread_id"); t && !t->is_null()) {
    if (!t->is_string() || t->as_string().empty()) {
      out =
          api_error(400, "'thread_id' must be a non-empty string", "invalid_request", "thread_id");
      co_return;
    }
    run.thread_id = std::string(t->as_string());
    // The one id rule (weir/graph/ids.hpp): refused here, never cut short by a store.
    if (auto s = graph::check_id("thread_id", run.thread_id); !s) {
      out = api_error(400, s.error().message, "invalid_request", "thread_id");
      co_return;
    }
  }
  run.traceparent = run_traceparent_of(rq, request_span);
  auto rec = co_await off_thread(*api.blocking, [&] { return runs->submit(std::move(run)); });
  if (!rec) {
    // Before anything was queued: an unknown workflow, or an input it does not take.
    if (rec.error().is(Errc::not_found))
      out = api_error(404, rec.error().message, "workflow_not_found", "workflow");
    else if (rec.error().is(Errc::invalid_argument))
      out = api_error(400, rec.error().message, "invalid_request", "input");
    else
      out = from_error(rec.error());
    co_return;
  }
  out = json_answer(202, cluster::run_json(*rec));
  out.headers.emplace_back("Location", "/v1/runs/" + rec->id);
}

}  // namespace

bool is_runs_path(const std::string& path) {
  return split_runs_path(path).valid;
}

awaitable<void> route_runs(const RunsApi& api, http::Exchange& ex, http::Response& out,
                           bool& streamed, const trace::SpanContext& request_span) {
  const auto& rq = ex.request();
  const RunsPath p = split_runs_path(rq.path);
  cluster::RunService* runs = api.runs;
  auto method_is = [&](const char* m) {
    if (rq.method == m) return true;
    out = api_error(405, rq.method + " is not allowed on " + rq.path + "; use " + m,
                    "method_not_allowed");
    return false;
  };
  auto no_route = [&] {
    out = api_error(404,
                    "no route " + rq.method + " " + rq.path +
                        " (runs API: GET /v1/workflows, POST /v1/runs, GET /v1/runs, GET "
                        "/v1/runs/{id}, GET /v1/runs/{id}/events, POST /v1/runs/{id}/cancel, POST "
                        "/v1/threads/{id}/resume, GET /v1/threads/{id}/state)",
                    "not_found");
  };
  // A run or thread id in the path follows the id rule (graph/ids.hpp) on every backend: a
  // 400 naming the byte, before it reaches a store (PostgreSQL refuses invalid UTF-8 with an
  // error of its own) or an error message.
  if (!p.id.empty() && (p.collection == "runs" || p.collection == "threads"))
    if (auto s = graph::check_id(p.collection == "runs" ? "run id" : "thread id", p.id); !s) {
      out = api_error(400, s.error().message, "invalid_request", "id");
      co_return;
    }
  if (p.collection == "workflows" && p.id.empty()) {
    if (!method_is("GET")) co_return;
    json::array names;
    for (const auto& n : runs->workflow_names()) names.emplace_back(n);
    out = json_answer(200, json::object{{"object", "list"}, {"data", std::move(names)}});
  } else if (p.collection == "runs" && p.id.empty()) {
    if (rq.method == "GET") {
      co_await list_runs(api, rq, out);
      co_return;
    }
    if (!method_is("POST")) co_return;
    co_await submit_run(api, rq, out, request_span);
  } else if (p.collection == "runs" && p.action.empty()) {
    if (!method_is("GET")) co_return;
    auto rec = co_await off_thread(*api.blocking, [&] { return runs->get(p.id); });
    out = rec ? json_answer(200, cluster::run_json(*rec)) : from_error(rec.error());
  } else if (p.collection == "runs" && p.action == "events") {
    if (!method_is("GET")) co_return;
    co_await events(api, ex, p.id, out, streamed);
  } else if (p.collection == "runs" && p.action == "cancel") {
    if (!method_is("POST")) co_return;
    auto done = co_await off_thread(*api.blocking, [&] { return runs->cancel(p.id); });
    out = done ? json_answer(200, cluster::run_json(done->after)) : from_error(done.error());
  } else if (p.collection == "threads" && !p.id.empty() && p.action == "resume") {
    if (!method_is("POST")) co_return;
    auto body = body_object(rq, out, false);
    if (!body || !only_fields(*body, {"value"}, out)) co_return;
    const json::value value = body->contains("value") ? body->at("value") : json::value(nullptr);
    const std::string traceparent = run_traceparent_of(rq, request_span);
    auto rec = co_await off_thread(*api.blocking,
                                   [&] { return runs->resume(p.id, value, traceparent, {}); });
    if (!rec) {
      out = from_error(rec.error());
      co_return;
    }
    out = json_answer(202, cluster::run_json(*rec));
    out.headers.emplace_back("Location", "/v1/runs/" + rec->id);
  } else if (p.collection == "threads" && !p.id.empty() && p.action == "state") {
    if (!method_is("GET")) co_return;
    co_await thread_state(api, p.id, out);
  } else {
    no_route();
  }
}

}  // namespace weir::serve
