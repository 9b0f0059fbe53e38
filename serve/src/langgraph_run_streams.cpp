// The LangGraph API's waits and streams of runs (langgraph_common.hpp declares them): following
// a run until it ends, /wait and /join answers, a run's SSE stream and its rejoin, a thread's
// stream of every run started on it.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>

#include "langgraph_common.hpp"
#include "langgraph_shapes.hpp"
#include "run_follow.hpp"
#include "runs_path.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/http/sse.hpp"

namespace weir::serve {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using cluster::RunRecord;

std::string content_location(const RunRecord& r, bool stateless) {
  return stateless ? "/runs/" + r.id : "/threads/" + encode_segment(r.thread_id) + "/runs/" + r.id;
}

namespace {

awaitable<bool> no_tick() {
  co_return true;
}

// Follows run `id` until it ends (the record), the server drains or the client leaves
// (nullopt). `each` is called on the I/O thread with every look (the record and the steps new
// since the last look) and `tick` every api.check while nothing moved, and when message text
// came into `texts` (when given); either returns false to stop following.
template <class Each, class Tick = decltype(&no_tick)>
awaitable<std::optional<RunRecord>> follow(const LangGraphApi& api, http::Exchange& ex,
                                           const std::string& id, Each each, Tick tick = &no_tick,
                                           std::shared_ptr<TextQueue> texts = nullptr) {
  cluster::RunService* runs = api.runs;
  auto executor = co_await asio::this_coro::executor;
  auto wake = std::make_shared<Wake>(executor);
  auto watch = watch_run(*runs, id, wake, executor);
  std::unique_ptr<cluster::RunWatch> text_watch;
  if (texts) text_watch = watch_text(*runs, id, texts, wake, executor);
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
      const bool go = co_await tick();
      if (!go) co_return std::nullopt;
    }
  }
}

awaitable<void> cancel_if_asked(const LangGraphApi& api, http::Exchange& ex, const LangGraphRun& a,
                                const std::string& run) {
  if (!a.cancel_on_disconnect || !ex.disconnected()) co_return;
  cluster::RunService* runs = api.runs;
  (void)co_await off_thread(*api.blocking, [&] { return runs->cancel(run); });
}

}  // namespace

awaitable<std::optional<RunRecord>> wait_until_ended(const LangGraphApi& api, http::Exchange& ex,
                                                     const std::string& id) {
  auto none = [](const RunRecord&, const Steps&) -> awaitable<bool> { co_return true; };
  co_return co_await follow(api, ex, id, none);
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
  auto chunk = co_await off_thread(*api.blocking, [&]() -> Result<json::value> {
    auto steps = run_steps(runs->checkpointer(), *end, "");
    if (!steps) return std::move(steps).error();
    return final_chunk(*runs, *end, steps->list.empty() ? nullptr : &steps->list.back());
  });
  out = chunk ? answer(200, *chunk) : from_error(chunk.error());
}

namespace {

// What a stream's writer keeps from one run to the next.
struct StreamOut {
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  bool failed = false;  // a write failed: the client is gone
};

// Writes run `id`'s events (after those `st` says were seen; `metadata_first`: opened with its
// `metadata` event) until it ends (true), or the client leaves, the server drains or a write
// fails (false). A quiet stream gets a heartbeat comment every api.keep_alive.
awaitable<bool> pump_run(const LangGraphApi& api, http::Exchange& ex, LangGraphStream& st,
                         const std::string& id, StreamOut& o, bool metadata_first) {
  if (st.entry.empty())
    if (auto spec = api.runs->workflow(st.graph_id)) st.entry = start_nodes(*spec);
  if (metadata_first) {
    std::string first =
        http::sse_event(json::serialize(json::object{{"run_id", id}, {"attempt", 1}}), "metadata");
    if (auto s = co_await ex.async_write(std::move(first)); !s) {
      o.failed = true;
      co_return false;
    }
    o.last_write = std::chrono::steady_clock::now();
  }
  cluster::RunService* runs = api.runs;
  // Token by token in the messages modes (langgraph_stream.hpp).
  std::shared_ptr<TextQueue> texts;
  for (const auto& m : st.modes)
    if (m == "messages-tuple" || m == "messages" || m == "events")
      texts = std::make_shared<TextQueue>();
  auto write = [&](std::string frames) -> awaitable<bool> {
    if (frames.empty()) co_return true;
    if (auto s = co_await ex.async_write(std::move(frames)); !s) {
      o.failed = true;
      co_return false;
    }
    o.last_write = std::chrono::steady_clock::now();
    co_return true;
  };
  auto each = [&](const RunRecord& r, const Steps& steps) -> awaitable<bool> {
    std::vector<graph::MessageText> pieces;
    if (texts) pieces = texts->take();
    auto frames = co_await off_thread(*api.blocking, [&] {
      return langgraph_stream_events(runs->checkpointer(), r, steps.list, std::move(pieces), st);
    });
    if (!frames) co_return false;
    co_return co_await write(std::move(*frames));
  };
  auto tick = [&]() -> awaitable<bool> {
    if (texts) {
      auto pieces = texts->take();
      if (!pieces.empty()) {
        std::string frames = langgraph_text_events(std::move(pieces), st);
        const bool written = co_await write(std::move(frames));
        if (!written) co_return false;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - o.last_write < api.keep_alive) co_return true;
    std::string beat = ": heartbeat\n\n";
    if (auto s = co_await ex.async_write(std::move(beat)); !s) {
      o.failed = true;
      co_return false;
    }
    o.last_write = now;
    co_return true;
  };
  auto end = co_await follow(api, ex, id, each, tick, texts);
  co_return end.has_value();
}

}  // namespace

// Streams run `started` (from its start, or after the event `st` says the client saw) until it
// ends, the client leaves or the server drains.
awaitable<void> stream_run(const LangGraphApi& api, http::Exchange& ex, LangGraphStream st,
                           const RunRecord& started, bool stateless, bool cancel_on_disconnect,
                           bool metadata_first, bool& streamed) {
  http::Headers headers{{"Cache-Control", "no-cache"},
                        {"Content-Location", content_location(started, stateless)}};
  if (!stateless) {  // where the SDK reconnects (with Last-Event-ID) when the stream is cut
    std::string location = content_location(started, false) + "/stream";
    char sep = '?';
    for (const auto& m : st.modes) {
      location += sep + std::string("stream_mode=") + m;
      sep = '&';
    }
    headers.emplace_back("Location", std::move(location));
  }
  if (auto s = co_await ex.async_start_stream(200, "text/event-stream", std::move(headers)); !s)
    co_return;
  streamed = true;
  StreamOut o;
  const bool ended = co_await pump_run(api, ex, st, started.id, o, metadata_first);
  cluster::RunService* runs = api.runs;
  const std::string id = started.id;
  if (!ended && cancel_on_disconnect && ex.disconnected())
    (void)co_await off_thread(*api.blocking, [&] { return runs->cancel(id); });
  if (!ended && !o.failed && !ex.disconnected()) {
    // The stream ends before its run did: the client is told why, not left with a cut reply.
    std::string code, message;
    if (*api.draining) {
      code = "shutting_down";
      message =
          "the server is shutting down: this stream of run " + id + " ends before the run did";
    } else {
      auto now = co_await off_thread(*api.blocking, [&] { return runs->get(id); });
      code = now ? "error" : errc_name(now.error().code);
      message = now ? "the stream of run " + id + " ended before the run did"
                : now.error().is(Errc::not_found)
                    ? "run " + id +
                          " is gone: a newer run on its thread rolled it back "
                          "(multitask_strategy rollback), or it was deleted"
                    : "reading run " + id + ": " + now.error().message;
    }
    std::string frame = http::sse_event(
        json::serialize(json::object{{"error", code}, {"message", message}}), "error");
    if (auto w = co_await ex.async_write(std::move(frame)); !w) o.failed = true;
  }
  if (!o.failed) (void)co_await ex.async_finish();
}

// GET /threads/{id}/stream: every run started on the thread (through this API) from now on,
// each opened by its `metadata` event, until the client leaves or the server drains.
awaitable<void> route_thread_stream(const LangGraphApi& api, http::Exchange& ex,
                                    const std::string& thread, http::Response& out,
                                    bool& streamed) {
  const auto& rq = ex.request();
  std::vector<std::string> modes = query_values(rq.target, "stream_mode");
  if (modes.empty()) modes = {"values"};
  if (auto c = check_stream_modes(modes, "GET /threads/{thread_id}/stream"); !c) {
    out = from_error(c.error());
    co_return;
  }
  auto t = co_await off_thread(*api.blocking, [&] { return find_thread(api, thread); });
  if (!t) {
    out = from_error(t.error());
    co_return;
  }
  std::set<std::string> seen(t->runs.begin(), t->runs.end());  // before the stream: not its
  if (auto a = co_await off_thread(*api.blocking, [&] { return api.runs->active_run(thread); });
      a && *a)
    seen.erase(**a);  // the run on it now is
  http::Headers headers{{"Cache-Control", "no-cache"}};
  if (auto s = co_await ex.async_start_stream(200, "text/event-stream", std::move(headers)); !s)
    co_return;
  streamed = true;
  StreamOut o;
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  while (!o.failed && !ex.disconnected() && !*api.draining) {
    // The thread's runs not streamed yet, oldest first.
    auto next = co_await off_thread(*api.blocking, [&]() -> Result<std::vector<RunRecord>> {
      auto now = api.threads->get(thread);
      if (!now) return std::move(now).error();
      std::vector<RunRecord> todo;
      if (!*now) return todo;
      for (auto it = (**now).runs.rbegin(); it != (**now).runs.rend(); ++it) {
        if (seen.count(*it)) continue;
        auto r = api.runs->get(*it);
        if (r) todo.push_back(std::move(*r));
      }
      return todo;
    });
    if (!next) break;
    for (const auto& r : *next) {
      seen.insert(r.id);
      LangGraphStream st;
      st.modes = modes;
      st.graph_id = r.workflow_name;
      const bool ended = co_await pump_run(api, ex, st, r.id, o, true);
      if (!ended) break;
    }
    if (o.failed || ex.disconnected() || *api.draining) break;
    const auto now = std::chrono::steady_clock::now();
    if (now - o.last_write >= api.keep_alive) {
      std::string beat = ": heartbeat\n\n";
      if (auto s = co_await ex.async_write(std::move(beat)); !s) {
        o.failed = true;
        break;
      }
      o.last_write = now;
    }
    timer.expires_after(api.check);
    co_await timer.async_wait(asio::as_tuple(use_awaitable));
  }
  if (!o.failed) (void)co_await ex.async_finish();
}

// GET /threads/{id}/runs/{run_id}/stream: the run's stream again, in the modes asked
// (?stream_mode=, default values), after the event Last-Event-ID names (or from the start).
awaitable<void> rejoin(const LangGraphApi& api, http::Exchange& ex, const RunRecord& rec,
                       http::Response& out, bool& streamed) {
  const auto& rq = ex.request();
  LangGraphStream st;
  st.modes = query_values(rq.target, "stream_mode");
  if (st.modes.empty()) st.modes = {"values"};
  if (auto c = check_stream_modes(st.modes, "GET /threads/{thread_id}/runs/{run_id}/stream"); !c) {
    out = from_error(c.error());
    co_return;
  }
  const auto cancel = query_value(rq.target, "cancel_on_disconnect").value_or("0");
  if (cancel != "0" && cancel != "1" && cancel != "true" && cancel != "false") {
    out = detail(422, "'cancel_on_disconnect' must be 0 or 1, got '" + cancel + "'");
    co_return;
  }
  const std::string last(rq.header("last-event-id").value_or(""));
  auto seen = read_last_event_id(last);
  if (!seen) {
    out = detail(400, seen.error().message);
    co_return;
  }
  st.seen = std::move(*seen);
  st.skip = st.seen.texts;  // a piece's id: the bytes of each message its client has
  st.graph_id = rec.workflow_name;
  if (!st.seen.checkpoint.empty() && st.seen.checkpoint != "end") {
    // An id of a step this run committed, so that the stream can start after it.
    cluster::RunService* runs = api.runs;
    const std::string id = rec.id;
    auto look = co_await off_thread(*api.blocking, [&] { return look_up(*runs, id, ""); });
    if (!look) {
      out = from_error(look.error());
      co_return;
    }
    bool known = false;
    for (const auto& c : look->second.list) known = known || c.checkpoint_id == st.seen.checkpoint;
    if (!known) {
      out = detail(400, "Last-Event-ID '" + last + "' is not an event of run " + rec.id);
      co_return;
    }
  }
  const bool from_start = st.seen.checkpoint.empty();  // "", "-1", "null": with its metadata
  co_await stream_run(api, ex, std::move(st), rec, false, cancel == "1" || cancel == "true",
                      from_start, streamed);
}

}  // namespace weir::serve
