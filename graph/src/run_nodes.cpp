// A step's node calls (see runner.hpp): a subgraph node's nested run, a call with its retries,
// an async node raced against its timeout, the run's cancel flag and its deadline, and several
// calls at once under the run's max_concurrency.
#include <algorithm>
#include <memory>
#include <tuple>
#include <variant>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "runner.hpp"

namespace weir::graph {

asio::awaitable<Result<Update>> Runner::run_subgraph(const StateGraph::NodeDef& n,
                                                     const NodeContext& ctx) {
  const auto& def = *n.sub;
  const CompiledGraph& child_graph = *def.graph;
  json::object in;
  std::vector<std::size_t> seeded(g.channels_.size(), SIZE_MAX);  // [parent channel]: length
  for (auto [p, c] : def.in) {
    if (st.values[p].is_null()) continue;  // never written: the child's default stands
    in[child_graph.channel_name(c)] = json::value(st.values[p], json::storage_ptr());
    if (st.values[p].is_array()) seeded[p] = st.values[p].as_array().size();
  }
  auto child = std::make_unique<Runner>(
      child_graph, opt, run_id, def.options.limits ? *def.options.limits : child_graph.limits_);
  child->nested = true;
  child->parent = this;
  child->cancel = cancel;  // the parent's cancellation stops the child's steps and nodes too
  const std::int64_t at = (thread ? thread->step_base : 0) + superstep;  // this run's step
  child->extra().scope = (extras ? extras->scope : std::string()) + "/" + std::to_string(at) + "/" +
                         n.name + "#" + std::to_string(ctx.task_);
  if (extras && extras->record_subgraphs) {
    auto& x = child->extras;
    x->record_subgraphs = true;
    x->subgraph_path = extras->subgraph_path;
    x->subgraph_path.push_back(json::object{{"node", n.name}, {"step", at}, {"task", ctx.task_}});
  }
  if (streaming() || (extras && extras->on_text)) {
    child->extras->events = extras->events;
    child->extras->on_text = extras->on_text;
    child->extras->event_prefix = event_prefix() + n.name + "/";
  }
  child->set_input(std::move(in));
  if (traced) child->trace_begin(ctx.trace(), {});
  auto op = run(std::move(child));
  auto res = co_await std::move(op);
  if (!res) co_return std::move(res).error();
  Update up;
  for (auto [c, p] : def.out) {
    const json::value* v = res->state.if_contains(child_graph.channel_name(c));
    if (!v) continue;
    const auto& po = g.channels_[p].second;
    const bool appends =
        !po.custom && (po.reducer == ReducerKind::append || po.reducer == ReducerKind::messages);
    if (appends && v->is_array()) {
      // Only what the child added after the items it was given.
      const auto& arr = v->as_array();
      const std::size_t from = seeded[p] == SIZE_MAX ? 0 : std::min(seeded[p], arr.size());
      if (from == arr.size()) continue;
      json::array added;
      for (std::size_t i = from; i < arr.size(); ++i) added.push_back(arr[i]);
      up.set(g.channels_[p].first, std::move(added));
    } else if (*v != st.values[p]) {
      up.set(g.channels_[p].first, *v);
    }
  }
  co_return up;
}

void Runner::record_subgraph_step(const std::vector<Task>* tasks, const Writes* writes,
                                  std::int32_t step) {
  Runner* root = this;
  while (root->parent) root = root->parent;
  auto& top = *root->extras;
  auto& mine = *extras;
  if (mine.subgraph_dropping) {  // a step of this call was left out: its state would be wrong
    ++top.subgraph_dropped;
    return;
  }
  json::object written;
  for (std::size_t ch = 0; ch < g.channels_.size(); ++ch) {
    const bool wrote = writes ? !(*writes)[ch].empty() : !st.values[ch].is_null();
    if (!wrote) continue;
    json::value v(st.values[ch], json::storage_ptr());
    if (const std::size_t n = json::serialize(v).size(); n > kSubgraphValueBytes)
      v = json::object{{"$omitted", json::object{{"bytes", n}}}};
    written[g.channels_[ch].first] = std::move(v);
  }
  json::array nodes;
  if (tasks)
    for (const auto& t : *tasks) nodes.emplace_back(g.nodes_[t.node].name);
  json::object record{{"path", mine.subgraph_path},
                      {"step", step},
                      {"nodes", std::move(nodes)},
                      {"writes", std::move(written)}};
  const std::size_t bytes = json::serialize(record).size();
  if (top.subgraph_bytes + bytes > kSubgraphStepBytes ||
      top.subgraph_run_bytes + bytes > kSubgraphRunBytes) {
    ++top.subgraph_dropped;
    mine.subgraph_dropping = true;
    return;
  }
  top.subgraph_bytes += bytes;
  top.subgraph_run_bytes += bytes;
  top.subgraph_steps.emplace_back(std::move(record));
}

asio::awaitable<void> Runner::call(const Task& t, NodeContext& ctx, Result<Update>& r) {
  const auto& n = g.nodes_[t.node];
  for (std::int32_t attempt = 1;; ++attempt) {
    try {
      if (n.sub)
        r = co_await run_subgraph(n, ctx);
      else if (n.sync)
        r = n.sync(StateView(g, st), ctx);
      else if (watches(n)) {
        auto op = n.async(StateView(g, st), ctx);
        auto w = watched(std::move(op), n);
        r = co_await std::move(w);
      } else
        r = co_await n.async(StateView(g, st), ctx);
    } catch (...) {
      r = thrown_error();
    }
    if (!r) {
      // The caller stopped waiting (run_concurrently's stop, the run's Asio cancellation): the
      // node's error is that, whatever it made of it ("threw: Operation canceled", or "multiple
      // exceptions" from a watched node's race), and it is not retried. The state is reset so
      // that the run's own waits go on.
      const auto cs = co_await asio::this_coro::cancellation_state;
      if (cs.cancelled() != asio::cancellation_type::none) {
        co_await asio::this_coro::reset_cancellation_state();
        r = Error(Errc::cancelled, "run cancelled while it ran");
        if (traced) trace_node_end(ctx.task_, r);
        co_return;
      }
    }
    const bool retryable =
        !r && (r.error().is(Errc::tool_failed) || r.error().is(Errc::tool_timeout) ||
               r.error().is(Errc::model_error));
    if (r || !retryable || attempt >= n.options.max_attempts) {
      if (traced) trace_node_end(ctx.task_, r);
      co_return;
    }
    if (traced)
      ctx.trace_event("weir.node.retry", {{"weir.node.attempt", std::int64_t{attempt}},
                                          {"error.type", std::string(errc_name(r.error().code))}});
    if (ctx.extra_) ctx.extra_->emitted.clear();
    asio::steady_timer timer(co_await asio::this_coro::executor,
                             n.options.backoff * (1 << std::min(attempt - 1, 10)));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<Result<Update>> Runner::watched(asio::awaitable<Result<Update>> call,
                                                const StateGraph::NodeDef& n) {
  using namespace asio::experimental::awaitable_operators;
  auto w = watch(n);
  auto race = std::move(call) || std::move(w);
  std::variant<Result<Update>, Error> v = co_await std::move(race);
  if (v.index() == 0) co_return std::move(std::get<0>(v));
  co_return std::move(std::get<1>(v));
}

asio::awaitable<Error> Runner::watch(const StateGraph::NodeDef& n) {
  constexpr auto kLook = std::chrono::milliseconds(50);  // how often the cancel flag is read
  const auto timeout = n.options.timeout;
  const auto node_deadline =
      timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    const auto now = Clock::now();
    if (cancel && cancel->load())
      co_return Error(Errc::cancelled, "run cancelled while it ran");  // "node 'x': " before
    if (now >= deadline)
      co_return Error(Errc::deadline_exceeded, "run stopped after " +
                                                   std::to_string(lim.deadline.count()) +
                                                   " ms (limits.deadline_ms) while it ran");
    if (now >= node_deadline)
      co_return Error(Errc::tool_timeout, "timed out after " + std::to_string(timeout.count()) +
                                              " ms (its timeout_ms)");
    timer.expires_at(std::min({now + kLook, deadline, node_deadline}));
    co_await timer.async_wait(asio::use_awaitable);  // cancelled (throws) once the node ended
  }
}

asio::awaitable<Result<Limiter::Permit>> Runner::async_admit() {
  using namespace asio::experimental::awaitable_operators;
  if (!cancel && deadline == Clock::time_point::max())
    co_return co_await barrier->admission->async_acquire();
  auto acquire = barrier->admission->async_acquire();
  auto w = watch_admission();
  auto race = std::move(acquire) || std::move(w);  // the loser is cancelled: no permit leaks
  std::variant<Result<Limiter::Permit>, Error> v = co_await std::move(race);
  if (v.index() == 0) co_return std::move(std::get<0>(v));
  co_return std::move(std::get<1>(v));
}

asio::awaitable<Error> Runner::watch_admission() {
  constexpr auto kLook = std::chrono::milliseconds(50);  // as watch()
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    const auto now = Clock::now();
    // The texts of begin_step()'s checks before the first superstep.
    if (cancel && cancel->load())
      co_return Error(Errc::cancelled, "run cancelled before superstep 1");
    if (now >= deadline)
      co_return Error(Errc::deadline_exceeded, "run stopped after " +
                                                   std::to_string(lim.deadline.count()) +
                                                   " ms (limits.deadline_ms) in superstep 0");
    timer.expires_at(cancel ? std::min(now + kLook, deadline) : deadline);
    co_await timer.async_wait(asio::use_awaitable);  // cancelled (throws) once admitted
  }
}

namespace {

// One step's concurrent calls, shared by the step's coroutine and the calls' completion
// handlers. Shared: once the step's wait is cancelled, a stop (stop_calls) is posted to the
// strand and may run after the step has heard that every call ended.
struct Calls {
  Calls(const asio::any_io_executor& ex, Runner& r, const std::vector<Task>& t,
        std::vector<Result<Update>>& res, std::size_t lim)
      : strand(asio::make_strand(ex)),
        done(ex, 1),
        run(r),
        tasks(t),
        results(res),
        signals(t.size()),
        live(t.size()),
        limit(lim) {}
  asio::strand<asio::any_io_executor> strand;
  // Sent once, when no call runs and none will start. Thread-safe: the calls end on the
  // strand, the step may wait on another thread.
  asio::experimental::concurrent_channel<void(boost::system::error_code)> done;
  // Used only while a call runs: the step waits for every call it started.
  Runner& run;
  const std::vector<Task>& tasks;
  std::vector<Result<Update>>& results;
  // The rest only on the strand.
  std::vector<asio::cancellation_signal> signals;  // [tasks]: cancels the call
  std::vector<char> live;                          // [tasks]: the call runs
  std::size_t limit, next = 0, running = 0;
  bool stopping = false, over = false;

  void end_if_over() {
    if (over || running > 0 || (next < tasks.size() && !stopping)) return;
    over = true;
    done.try_send(boost::system::error_code{});
  }
};

// Whether the run still lets the step start calls: not once it was cancelled or passed its
// deadline. (A call that failed, other than by an interrupt, stops the launches itself: a step
// of 200 Send tasks, one at a time, ran all 200 after its first had failed the run.)
bool may_start(const Calls& c) {
  const Runner& r = c.run;
  return !(r.cancel && r.cancel->load(std::memory_order_relaxed)) && Clock::now() < r.deadline;
}

void launch_calls(const std::shared_ptr<Calls>& c) {
  if (c->next < c->tasks.size() && !may_start(*c)) c->stopping = true;
  while (!c->stopping && c->running < c->limit && c->next < c->tasks.size()) {
    const std::size_t i = c->next++;
    ++c->running;
    c->live[i] = true;
    const Task& t = c->tasks[i];
    auto op = c->run.call(t, t.ctx, c->results[i]);
    asio::co_spawn(c->strand, std::move(op),
                   asio::bind_cancellation_slot(c->signals[i].slot(), [c, i](std::exception_ptr e) {
                     if (e)
                       c->results[i] = Error(Errc::tool_failed, "node threw an unknown exception");
                     if (!c->results[i] && !c->results[i].error().is(Errc::interrupted))
                       c->stopping = true;
                     c->live[i] = false;
                     --c->running;
                     launch_calls(c);
                     c->end_if_over();
                   }));
  }
}

// The step's wait was cancelled: no call starts any more, and those running are cancelled.
void stop_calls(const std::shared_ptr<Calls>& c) {
  if (c->over) return;
  c->stopping = true;
  for (std::size_t i = 0; i < c->tasks.size(); ++i)
    if (c->live[i]) c->signals[i].emit(asio::cancellation_type::all);
  c->end_if_over();
}

}  // namespace

asio::awaitable<void> Runner::run_concurrently(const std::vector<Task>& tasks,
                                               std::vector<Result<Update>>& results) {
  auto ex = co_await asio::this_coro::executor;
  results.assign(tasks.size(), Error(Errc::cancelled, "not run"));
  const std::size_t limit = static_cast<std::size_t>(std::max(1, lim.max_concurrency));
  auto calls = std::make_shared<Calls>(ex, *this, tasks, results, limit);
  asio::dispatch(calls->strand, [calls] { launch_calls(calls); });
  auto [ec] = co_await calls->done.async_receive(asio::as_tuple(asio::use_awaitable));
  if (!ec) co_return;
  // The awaiting operation was cancelled (e.g. the caller's `run || timer`): the calls are
  // cancelled too, and the step waits until every one it started has ended, for they use this
  // run. The run then ends cancelled.
  co_await asio::this_coro::reset_cancellation_state();
  do {
    asio::dispatch(calls->strand, [calls] { stop_calls(calls); });
    std::tie(ec) = co_await calls->done.async_receive(asio::as_tuple(asio::use_awaitable));
  } while (ec);
  for (auto& r : results) r = Error(Errc::cancelled, "run cancelled while it ran");
}

}  // namespace weir::graph
