#include "langgraph_api.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>

#include "langgraph_assistants.hpp"
#include "langgraph_common.hpp"
#include "langgraph_messages.hpp"
#include "langgraph_request.hpp"
#include "langgraph_shapes.hpp"
#include "langgraph_store.hpp"
#include "langgraph_stream.hpp"
#include "run_follow.hpp"
#include "runs_path.hpp"
#include "webhooks.hpp"
#include "weir/graph/ids.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/http/sse.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/log.hpp"
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

namespace {

// --- runs ---------------------------------------------------------------------------------

// A run request and the workflow its assistant names; an error answer otherwise. An assistant
// made with POST /assistants lends the run its recursion_limit when the run sets none.
struct RunAsk {
  LangGraphRun run;
  std::string graph;
};
awaitable<std::optional<RunAsk>> run_ask(const LangGraphApi& api, const json::object& body,
                                         const std::string& route, http::Response& out) {
  auto r = read_langgraph_run(body, route);
  if (!r) {
    out = from_error(r.error());
    co_return std::nullopt;
  }
  RunAsk a{std::move(*r), {}};
  auto found = co_await find_assistant(api, a.run.assistant_id, out);
  if (!found) co_return std::nullopt;
  a.graph = found->graph;
  if (found->made) {
    a.run.controls.assistant_id = found->made->id;
    const auto* limit = found->made->config.if_contains("recursion_limit");
    if (a.run.controls.recursion_limit == 0 && limit && limit->is_int64())
      a.run.controls.recursion_limit = static_cast<int>(limit->as_int64());
  }
  if (!a.run.webhook.empty()) {  // the server's allow-list (SSRF: webhooks.hpp)
    auto ok =
        api.webhooks
            ? api.webhooks->check(a.run.webhook)
            : Status(Error(Errc::invalid_argument, "'webhook': this server calls no webhooks"));
    if (!ok) {
      out = from_error(ok.error());
      co_return std::nullopt;
    }
  }
  co_return a;
}
awaitable<std::optional<RunAsk>> run_ask(const LangGraphApi& api, const http::Request& rq,
                                         http::Response& out) {
  auto b = body_of(rq, out);
  if (!b) co_return std::nullopt;
  const std::string route = rq.method + " " + rq.path;
  co_return co_await run_ask(api, *b, route, out);
}

// The "detail" text of an answer made by detail().
std::string body_json_detail(const http::Response& r) {
  boost::system::error_code ec;
  auto v = json::parse(r.body, ec);
  const auto* d = !ec && v.is_object() ? v.as_object().if_contains("detail") : nullptr;
  return d && d->is_string() ? std::string(d->as_string()) : r.body;
}

// multitask_strategy interrupt and rollback: the thread's runs (the one running and those
// enqueued behind it) are cancelled and waited for. interrupt keeps what they did, with nothing
// pending, so the next run starts afresh from it; rollback puts the thread back where the first
// of them began (a branch from there, or no checkpoint at all when it was the thread's first).
Status make_way(cluster::RunService& runs, const std::string& thread, bool rollback) {
  std::optional<RunRecord> first;
  for (int k = 0; k < 1000; ++k) {
    auto active = runs.active_run(thread);
    if (!active) return std::move(active).error();
    if (!*active) break;
    const std::string id = **active;
    if (auto c = runs.cancel(id); !c) return std::move(c).error();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {  // a running run stops before its next superstep
      auto r = runs.get(id);
      if (!r) return std::move(r).error();
      if (cluster::is_terminal(r->state)) {
        if (!first) first = std::move(*r);
        break;
      }
      if (std::chrono::steady_clock::now() > until)
        return Error(Errc::unavailable, "run " + id + " on thread " + thread +
                                            " did not stop within 60 s of its cancel");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (!first) return {};
  const auto& cp = runs.checkpointer();
  if (rollback) {
    auto steps = run_steps(cp, *first, "");
    if (!steps) return std::move(steps).error();
    if (steps->list.empty()) return {};  // it wrote nothing
    const std::string before = steps->list.front().parent_id;
    if (before.empty()) return runs.delete_thread(thread);
    json::object why{{"source", "rollback"}, {"rolled_back", first->id}};
    auto b = runs.branch_thread(thread, before, {}, std::move(why));
    if (!b) return std::move(b).error();
    return {};
  }
  auto latest = cp.latest(thread);
  if (!latest) return std::move(latest).error();
  if (!*latest || pending_status(**latest) != "running") return {};
  json::object why{{"source", "interrupt"}, {"interrupted", first->id}};
  auto b = runs.branch_thread(thread, (**latest).checkpoint_id, {}, std::move(why), true);
  if (!b) return std::move(b).error();
  return {};
}

// One try of start_run's work on the blocking pool: the thread made way for (make_room), then
// every check that can refuse the run, then the fork or update written, then the run queued. A
// refused run writes nothing; a run the service refuses after the writes (a full queue, a race
// with another run) has them undone: the thread goes on from where it stood.
Result<RunRecord> start_once(const LangGraphApi& api, const RunAsk& a, const std::string& thread,
                             bool stateless, bool make_room, const json::object& input,
                             const std::string& traceparent) {
  cluster::RunService* runs = api.runs;
  if (make_room)
    if (auto m = make_way(*runs, thread, a.run.multitask == "rollback"); !m)
      return std::move(m).error();
  auto spec = runs->workflow(a.graph);
  if (!spec) return Error(Errc::not_found, "no workflow '" + a.graph + "'");

  // 1. The checks, on the checkpoint the run would go on from (the fork's, or the latest).
  if (stateless && !a.run.update.empty())
    return Error(Errc::invalid_argument,
                 "'command.update' needs a thread: POST /threads/{thread_id}/runs (a stateless "
                 "run's 'input' sets its first state)");
  if (auto c = graph::check_input_channels(spec->input, a.graph, input, "'input'"); !c)
    return std::move(c).error();
  std::optional<json::object> writes;
  if (!a.run.update.empty()) {
    LangGraphStateUpdate u;
    u.values = a.run.update;
    auto w = state_writes(*spec, u, "command.update");
    if (!w) return std::move(w).error();
    writes = std::move(*w);
  }
  std::optional<graph::Checkpoint> latest, base;
  if (!stateless) {
    auto l = runs->checkpointer().latest(thread);
    if (!l) return std::move(l).error();
    latest = std::move(*l);
    if (a.run.checkpoint_id.empty()) {
      base = latest;
    } else if (a.run.checkpoint_id != kRootCheckpoint) {
      auto f = runs->checkpointer().get(thread, a.run.checkpoint_id);
      if (!f) return std::move(f).error();
      base = std::move(*f);  // none: the fork below says so, before anything is written
    }
  }
  enum class Go { submit, resume, go_on } go = Go::submit;
  if (a.run.resume) {
    if (auto c = cluster::check_resumable(thread, base ? &*base : nullptr); !c)
      return std::move(c).error();
    go = Go::resume;
  } else if (base && at_breakpoint(*base) && a.run.input.empty()) {
    // No input on a thread stopped at a breakpoint continues it, as LangGraph's `input: null`.
    if (a.run.after.count() > 0)
      return Error(Errc::unsupported,
                   "'after_seconds' on a thread stopped at a breakpoint (a delayed "
                   "continuation) is not supported by weir yet (docs/langgraph-api.md)");
    if (!a.run.controls.go_to.empty() || !a.run.controls.go_to_sends.empty())
      return Error(Errc::unsupported,
                   "'command.goto' on a thread stopped at a breakpoint is not supported by weir "
                   "yet: continue it first, or start from a checkpoint (docs/langgraph-api.md)");
    go = Go::go_on;
  } else if (base && pending_status(*base) == "interrupted") {
    // A thread waiting at a node's interrupt takes only its answer.
    if (!at_breakpoint(*base))
      return Error(Errc::invalid_argument,
                   "thread '" + thread + "' waits at the interrupt of node '" +
                       interrupted_node(*base) +
                       "': answer it with 'command.resume', or start from a checkpoint "
                       "('checkpoint_id')");
    return Error(Errc::invalid_argument,
                 "thread '" + thread + "' stopped at a breakpoint before node '" +
                     interrupted_node(*base) +
                     "': continue it with no 'input' (or 'command.resume'), or start from a "
                     "checkpoint ('checkpoint_id')");
  }

  // 2. The writes.
  bool wrote = false;
  if (a.run.checkpoint_id == kRootCheckpoint) {  // from before the first checkpoint: afresh
    json::object why{{"source", "fork"}};
    auto root = runs->root_thread(thread, std::move(why));
    if (!root) return std::move(root).error();
    wrote = true;
  } else if (!a.run.checkpoint_id.empty() &&
             (!latest || latest->checkpoint_id != a.run.checkpoint_id)) {
    json::object why{{"source", "fork"}};  // the thread goes on from that checkpoint
    auto b = runs->branch_thread(thread, a.run.checkpoint_id, {}, std::move(why));
    if (!b) return std::move(b).error();
    wrote = true;
  }
  auto undo = [&] {  // back to where the thread stood (a new checkpoint of that state)
    if (!wrote) return;
    json::object why{{"source", "undo"}};
    if (latest)
      (void)runs->branch_thread(thread, latest->checkpoint_id, {}, std::move(why));
    else
      (void)runs->root_thread(thread, std::move(why));
  };
  if (writes) {  // command.update: the values set before the run goes on
    std::string from;
    if (!base && a.run.checkpoint_id != kRootCheckpoint) {  // no state: the update is the first
      json::object fresh{{"source", "fork"}};
      auto root = runs->root_thread(thread, std::move(fresh));
      if (!root) return std::move(root).error();
      from = root->checkpoint_id;
      wrote = true;
    }
    json::object why{{"source", "update"}};
    auto b = runs->branch_thread(thread, from, std::move(*writes), std::move(why));
    if (!b) {
      undo();
      return std::move(b).error();
    }
    wrote = true;
  }

  // 3. The run.
  Result<RunRecord> rec = Error(Errc::cancelled, "not started");
  if (go == Go::resume) {
    rec = runs->resume(thread, *a.run.resume, traceparent, a.run.controls);
  } else if (go == Go::go_on) {
    rec = runs->resume(thread, json::value(nullptr), traceparent, a.run.controls);
  } else {
    cluster::RunRequest r;
    r.workflow = a.graph;
    r.input = input;
    r.thread_id = thread;
    r.input_source = "'input'";
    r.traceparent = traceparent;
    r.enqueue = a.run.multitask == "enqueue";
    r.controls = a.run.controls;
    r.delay = a.run.after;
    rec = runs->submit(std::move(r));
  }
  if (!rec) undo();
  return rec;
}

// Starts the run a request asks for on `thread` (made first for a stateless run or with
// if_not_exists "create"). The record, or an error answer.
awaitable<std::optional<RunRecord>> start_run(const LangGraphApi& api, const http::Request& rq,
                                              const RunAsk& a, std::string thread, bool stateless,
                                              http::Response& out,
                                              const trace::SpanContext& request_span) {
  cluster::RunService* runs = api.runs;
  const std::string traceparent = run_traceparent_of(rq, request_span);
  const auto spec = runs->workflow(a.graph);
  auto input = input_from_langchain(a.run.input, spec.get());
  if (!input) {
    out = from_error(input.error());
    co_return std::nullopt;
  }
  json::object stamp = a.run.metadata;
  stamp["graph_id"] = a.graph;
  stamp["assistant_id"] =
      a.run.controls.assistant_id.empty() ? assistant_id_of(a.graph) : a.run.controls.assistant_id;
  auto rec = co_await off_thread(*api.blocking, [&]() -> Result<RunRecord> {
    if (!stateless) {
      auto t = find_thread(api, thread);
      if (!t && !(t.error().is(Errc::not_found) && a.run.create_thread))
        return std::move(t).error();
      auto known = api.threads->get(thread);
      if (!known) return std::move(known).error();
      if (!*known && !api.threads->room_for_one(api.max_threads)) return threads_full(api);
    }
    // interrupt/rollback: the thread's runs are cancelled and waited for, then this one starts.
    // Another request doing the same at once may start its run in between (or still hold the
    // thread while it branches): that run is made way for too, a few times before giving up.
    const bool make_room =
        !stateless && (a.run.multitask == "interrupt" || a.run.multitask == "rollback");
    for (int tries = 0;; ++tries) {
      auto started = start_once(api, a, thread, stateless, make_room, *input, traceparent);
      if (started || !make_room || !started.error().is(Errc::thread_busy) || tries >= 20)
        return started;
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + 10 * tries));
    }
  });
  // The webhook is this server's to deliver; one it cannot take does not undo the run.
  if (rec && !a.run.webhook.empty() && api.webhooks) {
    if (auto w = api.webhooks->deliver(rec->id, a.run.webhook); !w)
      weir::log(LogLevel::warn, "langgraph: run " + rec->id +
                                    "'s webhook will not be called: " + w.error().message);
  }
  // The run is in the book of its thread (a stateless run's thread is its own, named like it,
  // forgotten with it: not in the book). A book that cannot be written does not undo the run.
  if (rec && !stateless) {
    const std::string id = rec->thread_id, run = rec->id;
    auto noted = co_await off_thread(*api.blocking,
                                     [&] { return api.threads->touch(id, stamp, run, now_ms()); });
    if (!noted)
      weir::log(LogLevel::warn, "langgraph: run " + run + " is not in thread " + id +
                                    "'s list: " + noted.error().message);
  }
  if (!rec) {
    out = from_error(rec.error());
    co_return std::nullopt;
  }
  co_return std::move(*rec);
}

// POST .../runs (kind ""), .../runs/wait, .../runs/stream: on `thread`, or stateless (nullopt).
awaitable<void> run_request(const LangGraphApi& api, http::Exchange& ex, const std::string& kind,
                            std::optional<std::string> thread, http::Response& out, bool& streamed,
                            const trace::SpanContext& request_span) {
  const auto& rq = ex.request();
  const bool stateless = !thread;
  auto ask = co_await run_ask(api, rq, out);
  if (!ask) co_return;
  if (stateless && ask->run.resume) {
    out = detail(422,
                 "a run without a thread has nothing to resume: 'command.resume' needs "
                 "POST /threads/{thread_id}/runs");
    co_return;
  }
  if (stateless && !ask->run.checkpoint_id.empty()) {
    out = detail(422,
                 "a run without a thread has no checkpoint to start from: 'checkpoint' needs "
                 "POST /threads/{thread_id}/runs");
    co_return;
  }
  auto rec = co_await start_run(api, rq, *ask, thread.value_or(""), stateless, out, request_span);
  if (!rec) co_return;
  if (kind == "stream") {
    LangGraphStream st;
    st.modes = ask->run.stream_modes;
    st.graph_id = ask->graph;
    co_await stream_run(api, ex, std::move(st), *rec, stateless, ask->run.cancel_on_disconnect,
                        true, streamed);
    co_return;
  }
  if (kind == "wait")
    co_await wait_for(api, ex, *rec, &ask->run, out);
  else
    out = answer(200, run_object(*rec));
  out.headers.emplace_back("Content-Location", content_location(*rec, stateless));
}

// --- routes -------------------------------------------------------------------------------

}  // namespace

// The routes under /threads/{thread_id}/runs (langgraph_threads.cpp hands them over).
awaitable<void> route_thread_runs(const LangGraphApi& api, http::Exchange& ex,
                                  const std::vector<std::string>& s, const std::string& thread,
                                  http::Response& out, bool& streamed,
                                  const trace::SpanContext& request_span) {
  const auto& rq = ex.request();
  cluster::RunService* runs = api.runs;
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
    if (s.size() == 5 && s[4] == "stream" && rq.method == "GET") {
      co_await rejoin(api, ex, *rec, out, streamed);
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
        (void)co_await wait_until_ended(api, ex, run);
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
  out = not_implemented(rq, "/threads/{thread_id}/runs" + std::string(s.size() > 3 ? "/..." : ""));
}

namespace {

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
  // POST /runs/batch: stateless background runs, every request checked before any starts.
  if (rq.method == "POST" && s.size() == 2 && s[1] == "batch") {
    auto bodies = langgraph_batch(rq.body);
    if (!bodies) {
      out = from_error(bodies.error());
      co_return;
    }
    std::vector<RunAsk> asks;
    for (std::size_t i = 0; i < bodies->size(); ++i) {
      const std::string route = "POST /runs/batch (run " + std::to_string(i) + ")";
      auto a = co_await run_ask(api, (*bodies)[i], route, out);
      if (!a) co_return;
      if (a->run.resume || !a->run.checkpoint_id.empty()) {
        out = detail(422, "run " + std::to_string(i) +
                              " of the batch: a run without a thread has nothing to resume or "
                              "fork ('command.resume', 'checkpoint')");
        co_return;
      }
      asks.push_back(std::move(*a));
    }
    json::array made;
    for (const auto& a : asks) {
      auto rec = co_await start_run(api, rq, a, "", true, out, request_span);
      if (!rec) {  // the queue filled: the batch is all or nothing, so those started are
                   // cancelled (a queued one before it starts, a running one before its next step)
        std::vector<std::string> ids;
        for (const auto& m : made) ids.emplace_back(m.at("run_id").as_string());
        co_await off_thread(*api.blocking, [&] {
          for (const auto& id : ids)
            if (auto c = api.runs->cancel(id); !c)
              weir::log(LogLevel::warn, "langgraph: cancelling run " + id +
                                            " of a refused batch: " + c.error().message);
          return 0;
        });
        std::string started;
        for (const auto& id : ids) started += (started.empty() ? "" : ", ") + id;
        auto why = body_json_detail(out);
        out = detail(out.status,
                     why + " (run " + std::to_string(made.size()) + " of the batch; " +
                         (started.empty() ? std::string("none had started")
                                          : "the " + std::to_string(ids.size()) +
                                                " started before it were cancelled: " + started) +
                         ")");
        co_return;
      }
      made.push_back(run_object(*rec));
    }
    out = answer(200, made);
    co_return;
  }
  // POST /runs/cancel: the runs named, or those of a thread.
  if (rq.method == "POST" && s.size() == 2 && s[1] == "cancel") {
    const auto action = query_value(rq.target, "action").value_or("interrupt");
    if (action != "interrupt") {
      out = action == "rollback"
                ? detail(501,
                         "POST /runs/cancel with action 'rollback' is not supported by weir "
                         "yet (action=interrupt is)")
                : detail(422, "POST /runs/cancel takes ?action=interrupt|rollback, got '" + action +
                                  "'");
      co_return;
    }
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto c = read_langgraph_cancel_many(*b);
    if (!c) {
      out = from_error(c.error());
      co_return;
    }
    cluster::RunService* runs = api.runs;
    auto done = co_await off_thread(*api.blocking, [&]() -> Status {
      std::vector<std::string> ids = c->run_ids;
      if (ids.empty()) {  // the thread's runs that have not ended
        auto t = find_thread(api, c->thread_id);
        if (!t) return std::move(t).error();
        auto active = runs->active_run(c->thread_id);
        if (!active) return std::move(active).error();
        if (*active) ids.push_back(**active);
        for (const auto& id : t->runs)
          if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      std::vector<std::string> chosen;
      for (const auto& id : ids) {
        auto r = runs->get(id);
        if (!r) {
          if (r.error().is(Errc::not_found) && c->run_ids.empty()) continue;  // forgotten
          return std::move(r).error();
        }
        if (!c->thread_id.empty() && r->thread_id != c->thread_id)
          return Error(Errc::not_found, "Run " + id + " not found on thread " + c->thread_id);
        const bool pending = r->state == RunState::queued, running = r->state == RunState::running;
        if ((c->status == "pending" && pending) || (c->status == "running" && running) ||
            (c->status == "all" && (pending || running)))
          chosen.push_back(id);
      }
      for (const auto& id : chosen)
        if (auto k = runs->cancel(id); !k) return std::move(k).error();
      return {};
    });
    out = done ? http::Response{204, "", {}, ""} : from_error(done.error());
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
