// GraphRuntime: the superstep executor. One coroutine per run; sync nodes are called directly,
// async nodes are awaited (in parallel workers, on a strand, when a step has several).
#include <algorithm>
#include <atomic>
#include <random>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "graph_impl.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/runtime.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/executor.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/metrics.hpp"

namespace weir::graph {

namespace asio = boost::asio;
using asio::awaitable;
using Clock = std::chrono::steady_clock;

const char* event_kind_name(EventKind k) noexcept {
  switch (k) {
    case EventKind::run_started:
      return "run_started";
    case EventKind::run_finished:
      return "run_finished";
    case EventKind::run_failed:
      return "run_failed";
    case EventKind::run_interrupted:
      return "run_interrupted";
    case EventKind::node_started:
      return "node_started";
    case EventKind::node_finished:
      return "node_finished";
    case EventKind::state:
      return "state";
    case EventKind::custom:
      return "custom";
    case EventKind::token:
      return "token";
  }
  return "unknown";
}

// --- EventStream -----------------------------------------------------------------------------

struct EventStream::Impl {
  asio::experimental::concurrent_channel<void(boost::system::error_code, Event)> ch;
  bool ended = false;  // consumer side: the terminal event was delivered
  Impl(asio::any_io_executor ex, std::size_t cap) : ch(ex, cap) {}
};
EventStream::EventStream(asio::any_io_executor ex, std::size_t capacity)
    : impl_(std::make_unique<Impl>(ex, capacity)) {}
EventStream::~EventStream() = default;
awaitable<std::optional<Event>> EventStream::async_next() {
  if (impl_->ended) co_return std::nullopt;
  // No structured bindings over co_await: GCC miscompiles some of them.
  std::tuple<boost::system::error_code, Event> t =
      co_await impl_->ch.async_receive(asio::as_tuple(asio::use_awaitable));
  if (std::get<0>(t)) co_return std::nullopt;
  auto k = std::get<1>(t).kind;
  impl_->ended =
      k == EventKind::run_finished || k == EventKind::run_failed || k == EventKind::run_interrupted;
  co_return std::optional<Event>(std::move(std::get<1>(t)));
}
awaitable<void> EventStream::async_push(Event e) {
  // An error means the stream was closed (the consumer went away): the event is dropped.
  co_await impl_->ch.async_send(boost::system::error_code{}, std::move(e),
                                asio::as_tuple(asio::use_awaitable));
}
void EventStream::close() noexcept {
  impl_->ch.close();
}

// --- RunResult -------------------------------------------------------------------------------

const json::value& RunResult::get(std::string_view channel) const {
  static const json::value kNull;
  if (!graph) return kNull;
  auto id = graph->channel_id(channel);
  return id && *id < values.size() ? values[*id] : kNull;
}
json::object RunResult::state() const {
  json::object o;
  if (!graph) return o;
  for (std::size_t i = 0; i < values.size(); ++i)
    o[graph->channel(static_cast<ChannelId>(i)).name] = values[i];
  return o;
}

// --- Runtime internals -----------------------------------------------------------------------

struct GraphRuntime::Impl {
  Executor& executor;
  MemoryBudget* budget;
  ArtifactStore* artifacts;
  Registry& metrics;
  Checkpointer* checkpointer;
  Limiter limiter;
  std::atomic<std::uint64_t> next_run{1};
  std::atomic<std::size_t> active{0};
  Counter& runs_total;
  Counter& runs_failed;
  Counter& steps_total;
  Counter& node_calls;

  Impl(Executor& ex, MemoryBudget* b, ArtifactStore* a, Registry& m, Checkpointer* c,
       const RuntimeOptions& o)
      : executor(ex),
        budget(b),
        artifacts(a),
        metrics(m),
        checkpointer(c),
        limiter("graph run limiter", o.max_concurrent_runs, o.max_queued_runs),
        runs_total(m.counter("weir_graph_runs_total", "Graph runs started")),
        runs_failed(m.counter("weir_graph_runs_failed_total", "Graph runs that failed")),
        steps_total(m.counter("weir_graph_supersteps_total", "Supersteps executed")),
        node_calls(m.counter("weir_graph_node_calls_total", "Node invocations")) {}
};

struct Task {
  std::uint32_t node = 0;
  int send_index = -1;  // -1: triggered by an edge; else the Send's position in the step
  json::value arg;
  std::optional<Result<Update>> out;
  std::vector<json::value> emitted;
  std::optional<json::value> interrupt;
};

struct NodeContext::Internal {
  GraphRuntime::Impl* rt;
  std::shared_ptr<const CompiledGraph> graph;
  const CompiledGraph::Impl* g;
  std::string run_id, thread_id, owner;
  json::value input;
  RunLimits limits;
  AccountingResource res;
  json::storage_ptr sp;
  std::vector<json::value> values;  // by ChannelId, allocated in `res`
  std::vector<std::uint8_t> changed;
  std::vector<std::int32_t> writer;  // task index that wrote a last-value channel this step
  std::vector<int> visits;
  std::vector<std::uint8_t> triggered;
  std::vector<Task> tasks, next_tasks, sends;
  std::vector<std::uint32_t> last_nodes;  // the nodes of the last step run (for messages)
  std::vector<std::size_t> async_idx;
  std::int64_t step = 0;
  std::int64_t first_step = 0;  // the step this run started from (a checkpoint's)
  std::atomic<std::int64_t> tokens{0};
  std::string token_overrun_node;
  RunStats stats;
  std::shared_ptr<EventStream> events;
  bool stream_state = false;
  Clock::time_point deadline{};
  json::value resume_value;
  std::string resume_node;
  bool resuming = false;
  std::string parent_ckpt;
  std::string last_ckpt;

  Internal(GraphRuntime::Impl* r, std::shared_ptr<const CompiledGraph> gr, std::string id,
           const RunLimits& l)
      : rt(r),
        graph(std::move(gr)),
        g(&graph->impl()),
        run_id(std::move(id)),
        limits(l),
        res(r->budget, BudgetCategory::run_state, l.max_state_bytes, run_id),
        sp(&res) {
    const std::size_t nc = g->channels.size(), nn = g->nodes.size();
    values.reserve(nc);
    for (const auto& c : g->channels) values.emplace_back(c.initial, sp);
    changed.assign(nc, 0);
    writer.assign(nc, -1);
    visits.assign(nn, 0);
    triggered.assign(nn, 0);
  }
  ~Internal() {
    tasks.clear();
    next_tasks.clear();
    values.clear();
    values.shrink_to_fit();
  }
};

const std::string& NodeContext::run_id() const noexcept {
  return run_->run_id;
}
const std::string& NodeContext::thread_id() const noexcept {
  return run_->thread_id;
}
const json::value& NodeContext::run_input() const noexcept {
  return run_->input;
}
std::int64_t NodeContext::step() const noexcept {
  return run_->step;
}
ArtifactStore* NodeContext::artifacts() const noexcept {
  return run_->rt->artifacts;
}

Result<std::string> NodeContext::fetch(const json::value& ref) const {
  auto r = ArtifactRef::from_json(ref);
  if (!r) return json::serialize(ref);
  if (!run_->rt->artifacts)
    return Error(Errc::unsupported, "node '" + *node_name_ + "': no ArtifactStore configured");
  return run_->rt->artifacts->get(r->id);
}
Result<std::string> NodeContext::fetch_range(const json::value& ref, std::uint64_t offset,
                                             std::uint64_t length) const {
  auto r = ArtifactRef::from_json(ref);
  if (!r) {
    auto s = json::serialize(ref);
    if (offset >= s.size()) return std::string();
    return s.substr(offset, length);
  }
  if (!run_->rt->artifacts)
    return Error(Errc::unsupported, "node '" + *node_name_ + "': no ArtifactStore configured");
  return run_->rt->artifacts->get_range(r->id, offset, length);
}
Result<json::value> NodeContext::resolve(const json::value& v) const {
  if (!ArtifactRef::from_json(v)) return json::value(v);
  auto bytes = fetch(v);
  if (!bytes) return std::move(bytes).error();
  boost::system::error_code ec;
  auto parsed = json::parse(*bytes, ec);
  if (ec) return Error(Errc::corrupt_data, "artifact is not JSON: " + ec.message());
  return parsed;
}
void NodeContext::emit(json::value data) {
  if (run_->events) emitted_.push_back(std::move(data));
}
Status NodeContext::charge_tokens(std::int64_t n) {
  auto total = run_->tokens.fetch_add(n, std::memory_order_relaxed) + n;
  if (run_->limits.token_budget > 0 && total > run_->limits.token_budget) {
    if (run_->token_overrun_node.empty()) run_->token_overrun_node = *node_name_;
    return Error(Errc::token_budget_exceeded,
                 "run spent " + std::to_string(total) + " tokens, over its token budget of " +
                     std::to_string(run_->limits.token_budget) + " (limits.token_budget); node '" +
                     *node_name_ + "' charged the last " + std::to_string(n) +
                     " — raise limits.token_budget");
  }
  return {};
}
Error NodeContext::interrupt(json::value payload) {
  interrupt_ = std::move(payload);
  return Error(Errc::interrupted, "node '" + *node_name_ + "' interrupted the run");
}

namespace {

using R = NodeContext::Internal;

std::string names_of(const R& r, const std::vector<std::uint32_t>& nodes) {
  std::string s;
  std::uint32_t last = kEndIndex;
  for (auto node : nodes) {
    if (node == last) continue;
    last = node;
    if (!s.empty()) s += ", ";
    s += r.g->nodes[node].name;
  }
  return s;
}

std::string names_of(const R& r, const std::vector<Task>& tasks) {
  std::vector<std::uint32_t> nodes;
  for (const auto& t : tasks) nodes.push_back(t.node);
  return names_of(r, nodes);
}

bool is_cancelled(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& se) {
    return se.code() == asio::error::operation_aborted;
  } catch (...) {
  }
  return false;
}

Error error_from(const std::exception_ptr& e, const std::string& node) {
  try {
    std::rethrow_exception(e);
  } catch (const Exception& ex) {
    return ex.error();
  } catch (const boost::system::system_error& se) {
    if (se.code() == asio::error::operation_aborted)
      return Error(Errc::cancelled, "node '" + node + "' was cancelled");
    return Error(Errc::tool_failed, "node '" + node + "' threw: " + se.what());
  } catch (const std::exception& ex) {
    return Error(Errc::tool_failed, "node '" + node + "' threw: " + ex.what());
  } catch (...) {
    return Error(Errc::tool_failed, "node '" + node + "' threw an unknown exception");
  }
}

awaitable<Result<Update>> call_subgraph(R& r, const NodeImpl& n, NodeContext& ctx);

Error deadline_error(const R& r, const NodeImpl& n) {
  return Error(Errc::deadline_exceeded, "run exceeded its deadline of " +
                                            std::to_string(r.limits.deadline.count()) +
                                            " ms (limits.deadline) in superstep " +
                                            std::to_string(r.step) + " while running: " + n.name +
                                            " — raise limits.deadline or make the node faster");
}

// Coroutine frames stay small: GCC keeps every local and temporary of a coroutine in its
// frame for the frame's whole life, so messages are built in plain functions.
awaitable<Result<Update>> call_node(R& r, const NodeImpl& n, NodeContext& ctx) {
  std::exception_ptr ep;
  try {
    if (r.deadline != Clock::time_point{}) {
      using namespace asio::experimental::awaitable_operators;
      auto ex = co_await asio::this_coro::executor;
      asio::steady_timer timer(ex, r.deadline);
      auto body = n.sub ? call_subgraph(r, n, ctx)
                        : n.async(StateView(r.graph.get(), r.values.data()), ctx);
      auto v = co_await (std::move(body) || timer.async_wait(asio::use_awaitable));
      if (v.index() == 0) co_return std::move(std::get<0>(v));
      co_return deadline_error(r, n);
    }
    if (n.sub) co_return co_await call_subgraph(r, n, ctx);
    co_return co_await n.async(StateView(r.graph.get(), r.values.data()), ctx);
  } catch (...) {
    ep = std::current_exception();
  }
  co_return error_from(ep, n.name);
}

bool retryable(const NodeImpl& n, const Error& e) {
  for (Errc c : n.opts.retry.retry_on)
    if (e.is(c)) return true;
  return false;
}

std::chrono::milliseconds backoff(const RetryPolicy& p, int attempt) {
  thread_local std::mt19937 rng{std::random_device{}()};
  double ms = static_cast<double>(p.initial_backoff.count());
  for (int i = 1; i < attempt; ++i) ms *= p.multiplier;
  ms = std::min(ms, static_cast<double>(p.max_backoff.count()));
  std::uniform_real_distribution<double> d(1.0 - p.jitter, 1.0 + p.jitter);
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms * d(rng)));
}

// Calls a sync node (inline, no suspension). Never throws.
Result<Update> call_sync(R& r, const NodeImpl& n, NodeContext& ctx) {
  try {
    return n.sync(StateView(r.graph.get(), r.values.data()), ctx);
  } catch (...) {
    return error_from(std::current_exception(), n.name);
  }
}

// After an attempt: true when the task is finished (result stored), false to retry.
bool settle_attempt(R& r, const NodeImpl& n, Task& t, NodeContext& ctx, Result<Update>& res,
                    int attempt) {
  const int max_attempts = std::max(1, n.opts.retry.max_attempts);
  if (res || attempt >= max_attempts || !retryable(n, res.error())) {
    if (!res && attempt > 1 && retryable(n, res.error()))
      res = Error(res.error().code, "node '" + n.name + "' failed after " +
                                        std::to_string(attempt) + " attempts (retry.max_attempts=" +
                                        std::to_string(max_attempts) + "): " + res.error().message);
    t.out.emplace(std::move(res));
    if (!ctx.emitted_.empty()) t.emitted = std::move(ctx.emitted_);
    if (ctx.interrupt_) t.interrupt = std::move(ctx.interrupt_);
    return true;
  }
  ++r.stats.retries;
  ctx.interrupt_.reset();
  ctx.attempt_ = attempt + 1;
  return false;
}

NodeContext make_ctx(R& r, Task& t) {
  const NodeImpl& n = r.g->nodes[t.node];
  NodeContext ctx(&r, &n.name, &t.arg);
  if (r.resuming && n.name == r.resume_node) ctx.resume_ = &r.resume_value;
  return ctx;
}

// Runs one task (async, subgraph, sync with retries) to completion; never throws.
awaitable<void> run_task(R& r, Task& t) {
  const NodeImpl& n = r.g->nodes[t.node];
  NodeContext ctx = make_ctx(r, t);
  for (int attempt = 1;; ++attempt) {
    std::optional<Result<Update>> res;  // no co_await inside ?: (GCC 12 miscompiles it)
    if (n.sync) {
      res.emplace(call_sync(r, n, ctx));
    } else if (n.sub || r.deadline != Clock::time_point{}) {
      res.emplace(co_await call_node(r, n, ctx));
    } else {  // the common async node: no extra frame
      std::exception_ptr ep;
      try {
        res.emplace(co_await n.async(StateView(r.graph.get(), r.values.data()), ctx));
      } catch (...) {
        ep = std::current_exception();
      }
      if (ep) res.emplace(error_from(ep, n.name));
    }
    if (settle_attempt(r, n, t, ctx, *res, attempt)) co_return;
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer timer(ex, backoff(n.opts.retry, attempt));
    co_await timer.async_wait(asio::use_awaitable);
  }
}

void run_sync_task(R& r, Task& t) {
  const NodeImpl& n = r.g->nodes[t.node];
  NodeContext ctx(&r, &n.name, &t.arg);
  if (r.resuming && n.name == r.resume_node) ctx.resume_ = &r.resume_value;
  try {
    t.out.emplace(n.sync(StateView(r.graph.get(), r.values.data()), ctx));
  } catch (...) {
    t.out.emplace(error_from(std::current_exception(), n.name));
  }
  if (!ctx.emitted_.empty()) t.emitted = std::move(ctx.emitted_);
  if (ctx.interrupt_) t.interrupt = std::move(ctx.interrupt_);
}

// --- reducers --------------------------------------------------------------------------------

std::size_t default_tokens(const json::value& m) {
  if (!m.is_object()) return json_size(m, SIZE_MAX) / 4 + 4;
  auto* c = m.as_object().if_contains("content");
  std::size_t chars = c ? (c->is_string() ? c->get_string().size() : json_size(*c, SIZE_MAX)) : 0;
  return chars / 4 + 4;
}

// `v` copied into run storage, or its ArtifactRef when it is over inline_limit (the large
// value never enters run storage).
json::value store_value(R& r, const json::value& v) {
  if (r.rt->artifacts && r.limits.inline_limit != 0 &&
      (v.is_string() || v.is_array() || v.is_object()) && !ArtifactRef::from_json(v) &&
      json_size(v, r.limits.inline_limit + 1) > r.limits.inline_limit) {
    std::string text = json::serialize(v);
    if (text.size() > r.limits.inline_limit) {
      auto ref = r.rt->artifacts->put(text, "application/json", {}, r.owner);
      if (!ref) throw Exception(std::move(ref).error());
      ++r.stats.offloaded;
      return json::value(ref->to_json(), r.sp);
    }
  }
  return json::value(v, r.sp);
}

void append_items(R& r, json::array& arr, const json::value& update) {
  if (update.is_array())
    for (const auto& e : update.get_array()) arr.push_back(store_value(r, e));
  else
    arr.push_back(store_value(r, update));
}

void trim_window(R& r, const ChannelDef& c, json::array& arr) {
  if (c.window_messages == 0 && c.window_tokens == 0) return;
  const auto& count = c.token_counter ? c.token_counter : TokenCounter(default_tokens);
  auto is_role = [](const json::value& m, std::string_view role, std::string_view name = {}) {
    if (!m.is_object()) return false;
    auto* ro = m.get_object().if_contains("role");
    if (!ro || !ro->is_string() || ro->get_string() != role) return false;
    if (name.empty()) return true;
    auto* n = m.get_object().if_contains("name");
    return n && n->is_string() && n->get_string() == name;
  };
  // Layout: [system prompt?] [summary marker?] turns...
  std::size_t keep = 0;
  if (!arr.empty() && is_role(arr[0], "system") && !is_role(arr[0], "system", "summary")) keep = 1;
  std::size_t marker = keep;
  bool has_marker = arr.size() > marker && is_role(arr[marker], "system", "summary");
  std::size_t first_turn = marker + (has_marker ? 1 : 0);
  auto over = [&] {
    std::size_t turns = arr.size() - first_turn;
    if (c.window_messages && turns > c.window_messages) return true;
    if (c.window_tokens) {
      std::size_t tok = 0;
      for (const auto& m : arr) tok += count(m);
      if (tok > c.window_tokens && turns > 1) return true;
    }
    return false;
  };
  json::array evicted(json::storage_ptr{});
  while (arr.size() > first_turn && over()) {
    evicted.push_back(json::value(arr[first_turn], json::storage_ptr{}));
    arr.erase(arr.begin() + first_turn);
  }
  if (evicted.empty()) return;
  r.stats.items_dropped += static_cast<std::int64_t>(evicted.size());
  json::object m(r.sp);
  json::value prev_summary;
  std::int64_t archived = 0;
  if (has_marker) {
    const auto& old = arr[marker].get_object();
    if (auto* s = old.if_contains("content")) prev_summary = *s;
    if (auto* a = old.if_contains("archived"); a && a->is_int64()) archived = a->get_int64();
  }
  m["role"] = "system";
  m["name"] = "summary";
  json::value summary = prev_summary;
  if (c.summarize) {
    auto s = c.summarize(prev_summary, evicted);
    if (!s) throw Exception(std::move(s).error());
    summary = std::move(*s);
  }
  m["content"] = summary.is_null() ? json::value("") : summary;
  m["archived"] = archived + static_cast<std::int64_t>(evicted.size());
  if (r.rt->artifacts) {
    auto ref = r.rt->artifacts->put(json::serialize(evicted), "application/json", {}, r.owner);
    if (!ref) throw Exception(std::move(ref).error());
    m["archive"] = ref->to_json();
  }
  if (has_marker)
    arr[marker] = std::move(m);
  else
    arr.insert(arr.begin() + marker, json::value(std::move(m)));
}

// Applies one write. Errors are returned (cap, conflicting writes, reducer failure).
Status apply_write(R& r, ChannelId id, const json::value& update, std::int32_t task_index) {
  const ChannelDef& c = r.g->channels[id];
  json::value& cur = r.values[id];
  switch (c.kind) {
    case ChannelKind::last_value: {
      if (r.writer[id] >= 0 && r.writer[id] != task_index) {
        const auto& a = r.g->nodes[r.tasks[r.writer[id]].node].name;
        const auto& b = r.g->nodes[r.tasks[task_index].node].name;
        return Error(Errc::conflicting_writes,
                     "channel '" + c.name + "' (last-value) was written by both '" + a + "' and '" +
                         b + "' in superstep " + std::to_string(r.step) +
                         "; give it a reducer (append or custom) or let one node write it");
      }
      r.writer[id] = task_index;
      cur = store_value(r, update);
      break;
    }
    case ChannelKind::append:
    case ChannelKind::messages: {
      if (!cur.is_array()) cur = json::array(r.sp);
      auto& arr = cur.get_array();
      append_items(r, arr, update);
      if (c.kind == ChannelKind::append) {
        if (c.max_items && arr.size() > c.max_items) {
          auto drop = arr.size() - c.max_items;
          arr.erase(arr.begin(), arr.begin() + drop);
          r.stats.items_dropped += static_cast<std::int64_t>(drop);
        }
      } else {
        trim_window(r, c, arr);
      }
      break;
    }
    case ChannelKind::custom: {
      auto v = c.reducer(cur, update);
      if (!v) {
        auto e = std::move(v).error();
        return Error(e.code, "reducer of channel '" + c.name + "': " + e.message);
      }
      cur = store_value(r, *v);
      break;
    }
  }
  r.changed[id] = 1;
  if ((cur.is_array() || cur.is_object() || cur.is_string()) && c.max_bytes != 0) {
    auto size = json_size(cur, c.max_bytes + 1);
    if (size > c.max_bytes)
      return Error(
          Errc::invalid_argument,
          "channel '" + c.name + "' would hold more than " + std::to_string(c.max_bytes) +
              " bytes (max_bytes=" + std::to_string(c.max_bytes) + ") after a write by '" +
              (task_index >= 0 ? r.g->nodes[r.tasks[task_index].node].name : std::string("input")) +
              "' — raise its max_bytes, bound it (max_items / window), or offload");
  }
  return {};
}

Status apply_input(R& r, const json::value& input) {
  if (input.is_null()) return {};
  if (!input.is_object())
    return Error(Errc::invalid_argument, "run input must be a JSON object (channel -> value)");
  for (const auto& kv : input.get_object()) {
    auto id = r.graph->channel_id(kv.key());
    if (!id)
      return Error(Errc::invalid_argument,
                   "run input names unknown channel '" + std::string(kv.key()) + "'");
    if (auto s = apply_write(r, *id, kv.value(), -1); !s) return s;
  }
  return {};
}

// --- edges -----------------------------------------------------------------------------------

void trigger(R& r, std::uint32_t idx) {
  if (idx != kEndIndex) r.triggered[idx] = 1;
}

Status add_send(R& r, const Send& s, std::vector<Task>& out, int& send_counter,
                const std::string& from) {
  auto idx = r.g->resolve_node(s.node);
  if (!idx || *idx == kEndIndex)
    return Error(Errc::invalid_argument, "'" + from + "' sent to unknown node '" + s.node + "'");
  Task t;
  t.node = *idx;
  t.send_index = send_counter++;
  t.arg = s.arg;
  out.push_back(std::move(t));
  return {};
}

Status follow(R& r, const NodeImpl& n, const Update* up, std::vector<Task>& sends,
              int& send_counter) {
  for (auto t : n.next) trigger(r, t);
  for (auto ci : n.conds) {
    const CondEdge& ce = r.g->conds[ci];
    auto route = ce.router(StateView(r.graph.get(), r.values.data()));
    if (!route) {
      auto e = std::move(route).error();
      return Error(e.code, "router of '" + n.name + "': " + e.message);
    }
    for (const auto& key : route->targets) {
      std::optional<std::uint32_t> idx;
      for (const auto& [k, t] : ce.resolved)
        if (k == key) {
          idx = t;
          break;
        }
      if (!idx) idx = r.g->resolve_node(key);
      if (!idx)
        return Error(Errc::invalid_argument,
                     "router of '" + n.name + "' chose '" + key + "', which is not a node or case");
      trigger(r, *idx);
    }
    for (const auto& s : route->sends)
      if (auto st = add_send(r, s, sends, send_counter, n.name); !st) return st;
  }
  if (up) {
    for (const auto& gname : up->goto_nodes) {
      auto idx = r.g->resolve_node(gname);
      if (!idx)
        return Error(Errc::invalid_argument,
                     "node '" + n.name + "' went to unknown node '" + gname + "'");
      trigger(r, *idx);
    }
    for (const auto& s : up->sends)
      if (auto st = add_send(r, s, sends, send_counter, n.name); !st) return st;
  }
  return {};
}

// Builds next_tasks from triggered flags (node order) followed by sends (node, send order).
Status collect_next(R& r, std::vector<Task>& sends) {
  r.next_tasks.clear();
  for (std::uint32_t i = 0; i < r.triggered.size(); ++i) {
    if (!r.triggered[i]) continue;
    r.triggered[i] = 0;
    r.next_tasks.emplace_back().node = i;
  }
  // Triggered nodes are already in node order; only Sends need sorting in (stable: a node's
  // edge-triggered run first, then its Sends in order). stable_sort allocates: skip it when
  // there are no Sends.
  if (!sends.empty()) {
    for (auto& s : sends) r.next_tasks.push_back(std::move(s));
    std::stable_sort(r.next_tasks.begin(), r.next_tasks.end(),
                     [](const Task& a, const Task& b) { return a.node < b.node; });
  }
  for (const auto& t : r.next_tasks) {
    const auto& n = r.g->nodes[t.node];
    int v = ++r.visits[t.node];
    if (n.opts.max_visits > 0 && v > n.opts.max_visits)
      return Error(Errc::visit_limit_exceeded,
                   "node '" + n.name + "' reached max_visits=" + std::to_string(n.opts.max_visits) +
                       " (it would run a " + std::to_string(v) + "th time in superstep " +
                       std::to_string(r.step + 1) +
                       ") — raise its max_visits or add an exit condition");
  }
  return {};
}

// --- checkpoints -----------------------------------------------------------------------------

json::array tasks_json(const R& r, const std::vector<Task>& tasks, bool sends) {
  json::array a;
  for (const auto& t : tasks) {
    if ((t.send_index >= 0) != sends) continue;
    if (sends)
      a.push_back(json::object{{"node", r.g->nodes[t.node].name}, {"arg", t.arg}});
    else
      a.push_back(json::value(r.g->nodes[t.node].name));
  }
  return a;
}

Status write_checkpoint(R& r, const char* status, const std::vector<Task>& next,
                        const json::value* interrupt, const std::string& inode) {
  if (!r.rt->checkpointer || r.thread_id.empty()) return {};
  Checkpoint cp;
  cp.thread_id = r.thread_id;
  cp.checkpoint_id = new_checkpoint_id(r.step);
  cp.parent_id = r.parent_ckpt;
  cp.step = r.step;
  for (std::size_t i = 0; i < r.changed.size(); ++i)
    if (r.changed[i])
      cp.writes[r.g->channels[i].name] = json::value(r.values[i], json::storage_ptr{});
  cp.pending["status"] = status;
  cp.pending["next"] = tasks_json(r, next, false);
  cp.pending["sends"] = tasks_json(r, next, true);
  json::object visits;
  for (std::size_t i = 0; i < r.visits.size(); ++i)
    if (r.visits[i]) visits[r.g->nodes[i].name] = r.visits[i];
  cp.pending["visits"] = std::move(visits);
  cp.pending["tokens"] = r.tokens.load(std::memory_order_relaxed);
  if (interrupt) {
    cp.pending["interrupt"] = *interrupt;
    cp.pending["node"] = inode;
  }
  cp.metadata["run_id"] = r.run_id;
  cp.metadata["graph"] = r.g->name;
  auto s = r.rt->checkpointer->put(cp);
  if (!s) return s;
  r.parent_ckpt = cp.checkpoint_id;
  r.last_ckpt = cp.checkpoint_id;
  ++r.stats.checkpoints;
  return {};
}

void clear_changed(R& r) {
  std::fill(r.changed.begin(), r.changed.end(), 0);
}

// Loads a thread's checkpoint into `r`: state, visits, next tasks. Returns its status.
Result<std::string> load_checkpoint(R& r, const std::string& checkpoint_id) {
  auto* cpr = r.rt->checkpointer;
  if (!cpr) return Error(Errc::unsupported, "resume needs a GraphRuntime with a Checkpointer");
  auto cp = checkpoint_id.empty() ? cpr->latest(r.thread_id) : cpr->get(r.thread_id, checkpoint_id);
  if (!cp) return std::move(cp).error();
  if (!*cp) return std::string();
  auto state = cpr->state_at(r.thread_id, (*cp)->checkpoint_id);
  if (!state) return std::move(state).error();
  for (const auto& kv : *state)
    if (auto id = r.graph->channel_id(kv.key())) r.values[*id] = json::value(kv.value(), r.sp);
  const auto& p = (*cp)->pending;
  r.step = (*cp)->step;
  r.parent_ckpt = (*cp)->checkpoint_id;
  r.last_ckpt = r.parent_ckpt;
  if (auto* v = p.if_contains("visits"); v && v->is_object())
    for (const auto& kv : v->get_object())
      if (auto idx = r.g->resolve_node(kv.key()); idx && *idx != kEndIndex && kv.value().is_int64())
        r.visits[*idx] = static_cast<int>(kv.value().get_int64());
  if (auto* t = p.if_contains("tokens"); t && t->is_int64()) r.tokens = t->get_int64();
  r.tasks.clear();
  if (auto* n = p.if_contains("next"); n && n->is_array())
    for (const auto& name : n->get_array())
      if (name.is_string())
        if (auto idx = r.g->resolve_node(name.get_string()); idx && *idx != kEndIndex) {
          Task t;
          t.node = *idx;
          r.tasks.push_back(std::move(t));
        }
  int si = 0;
  if (auto* s = p.if_contains("sends"); s && s->is_array())
    for (const auto& e : s->get_array())
      if (e.is_object())
        if (auto* nn = e.get_object().if_contains("node"); nn && nn->is_string())
          if (auto idx = r.g->resolve_node(nn->get_string()); idx && *idx != kEndIndex) {
            Task t;
            t.node = *idx;
            t.send_index = si++;
            if (auto* a = e.get_object().if_contains("arg")) t.arg = *a;
            r.tasks.push_back(std::move(t));
          }
  if (auto* n = p.if_contains("node"); n && n->is_string()) r.resume_node = n->get_string();
  auto* st = p.if_contains("status");
  return st && st->is_string() ? std::string(st->get_string()) : std::string("running");
}

// --- the superstep loop ----------------------------------------------------------------------
// The coroutines below only sequence the work; everything that builds strings or large
// temporaries is a plain function (see call_node).

awaitable<void> emit_event(R& r, EventKind k, const std::string* node, json::value data) {
  Event e{k, r.step, node ? *node : std::string(), std::move(data)};
  co_await r.events->async_push(std::move(e));
}

awaitable<void> emit_started(R& r) {
  for (auto& t : r.tasks)
    co_await emit_event(r, EventKind::node_started, &r.g->nodes[t.node].name, t.arg);
}

json::value writes_json(const R& r, const Update& up) {
  json::object w;
  for (auto& [id, v] : up.writes) w[r.g->channels[id].name] = v;
  for (auto& [name, v] : up.named_writes) w[name] = v;
  return w;
}

awaitable<void> emit_finished(R& r) {
  for (auto& t : r.tasks) {
    const std::string* name = &r.g->nodes[t.node].name;
    for (auto& d : t.emitted) co_await emit_event(r, EventKind::custom, name, std::move(d));
    co_await emit_event(r, EventKind::node_finished, name, writes_json(r, **t.out));
  }
  if (r.stream_state)
    co_await emit_event(r, EventKind::state, nullptr,
                        StateView(r.graph.get(), r.values.data()).to_object());
}

Error cancelled_error(const R& r) {
  return Error(Errc::cancelled,
               "run " + r.run_id + " was cancelled in superstep " + std::to_string(r.step));
}

Status check_caps(R& r) {
  if (r.step >= r.limits.recursion_limit)
    return Error(Errc::step_limit_exceeded,
                 "run stopped after " + std::to_string(r.step) +
                     " supersteps (recursion_limit=" + std::to_string(r.limits.recursion_limit) +
                     "); nodes active in the last step: " + names_of(r, r.last_nodes) +
                     " — raise limits.recursion_limit or add an exit condition");
  if (r.deadline != Clock::time_point{} && Clock::now() >= r.deadline)
    return Error(Errc::deadline_exceeded,
                 "run exceeded its deadline of " + std::to_string(r.limits.deadline.count()) +
                     " ms (limits.deadline) before superstep " + std::to_string(r.step + 1) +
                     " (next: " + names_of(r, r.tasks) + ") — raise limits.deadline");
  return {};
}

// Runs the step's plain sync tasks inline; lists the others (async, subgraph, retried) in
// r.async_idx.
void run_sync_tasks(R& r) {
  r.async_idx.clear();
  for (std::size_t i = 0; i < r.tasks.size(); ++i) {
    Task& t = r.tasks[i];
    const NodeImpl& n = r.g->nodes[t.node];
    if (n.sync && n.opts.retry.max_attempts <= 1) {
      NodeContext ctx = make_ctx(r, t);
      Result<Update> res = call_sync(r, n, ctx);
      settle_attempt(r, n, t, ctx, res, 1);
    } else {
      r.async_idx.push_back(i);
    }
  }
}

// Runs r.async_idx with at most max_concurrency at once, on a strand.
awaitable<void> run_parallel(R& r) {
  auto ex = co_await asio::this_coro::executor;
  auto strand = asio::make_strand(ex);
  std::size_t next = 0;
  auto worker = [&r, &next]() -> awaitable<void> {
    while (next < r.async_idx.size()) {
      Task& t = r.tasks[r.async_idx[next++]];
      co_await run_task(r, t);
    }
  };
  std::size_t workers =
      std::min(r.async_idx.size(), std::max<std::size_t>(1, r.limits.max_concurrency));
  using Op = decltype(asio::co_spawn(strand, worker(), asio::deferred));
  std::vector<Op> ops;
  ops.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i)
    ops.push_back(asio::co_spawn(strand, worker(), asio::deferred));
  auto done = co_await asio::experimental::make_parallel_group(std::move(ops))
                  .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  for (auto& e : std::get<1>(done))
    if (e) std::rethrow_exception(e);
}

// The barrier: interrupts, node errors, the token budget, then writes merged in task order.
Status merge_step(R& r) {
  r.stats.node_calls += static_cast<std::int64_t>(r.tasks.size());
  for (auto& t : r.tasks) {
    if (!t.interrupt) continue;
    --r.step;
    for (auto& t2 : r.tasks) t2.out.reset();
    clear_changed(r);
    const auto& name = r.g->nodes[t.node].name;
    if (auto s = write_checkpoint(r, "interrupted", r.tasks, &*t.interrupt, name); !s) return s;
    r.resume_node = name;
    r.resume_value = std::move(*t.interrupt);
    return Error(Errc::interrupted, name);
  }
  for (auto& t : r.tasks)
    if (!t.out->has_value()) {
      auto e = std::move(*t.out).error();
      if (e.is(Errc::token_budget_exceeded) || e.is(Errc::deadline_exceeded) ||
          e.is(Errc::cancelled) || e.is(Errc::memory_budget_exceeded))
        return e;
      return Error(e.code, "node '" + r.g->nodes[t.node].name + "' failed: " + e.message);
    }
  if (r.limits.token_budget > 0 && r.tokens.load(std::memory_order_relaxed) > r.limits.token_budget)
    return Error(Errc::token_budget_exceeded,
                 "run spent " + std::to_string(r.tokens.load()) +
                     " tokens, over its token budget of " + std::to_string(r.limits.token_budget) +
                     " (limits.token_budget); node '" + r.token_overrun_node +
                     "' — raise limits.token_budget");
  for (std::size_t i = 0; i < r.tasks.size(); ++i) {
    Update& up = **r.tasks[i].out;
    const auto ti = static_cast<std::int32_t>(i);
    for (auto& [id, v] : up.writes) {
      if (id >= r.values.size())
        return Error(Errc::invalid_argument, "node '" + r.g->nodes[r.tasks[i].node].name +
                                                 "' wrote unknown channel id " +
                                                 std::to_string(id));
      if (auto s = apply_write(r, id, v, ti); !s) return s;
    }
    for (auto& [name, v] : up.named_writes) {
      auto id = r.graph->channel_id(name);
      if (!id)
        return Error(Errc::invalid_argument, "node '" + r.g->nodes[r.tasks[i].node].name +
                                                 "' wrote unknown channel '" + name + "'");
      if (auto s = apply_write(r, *id, v, ti); !s) return s;
    }
  }
  std::fill(r.writer.begin(), r.writer.end(), -1);
  return {};
}

// Edges on the merged state, the next step's tasks, the step's checkpoint.
Status advance(R& r) {
  r.sends.clear();
  int send_counter = 0;
  for (auto& t : r.tasks)
    if (auto s = follow(r, r.g->nodes[t.node], &**t.out, r.sends, send_counter); !s) return s;
  if (auto s = collect_next(r, r.sends); !s) return s;
  r.resuming = false;
  if (auto s =
          write_checkpoint(r, r.next_tasks.empty() ? "done" : "running", r.next_tasks, nullptr, {});
      !s)
    return s;
  clear_changed(r);
  r.last_nodes.clear();
  for (const auto& t : r.tasks) r.last_nodes.push_back(t.node);
  std::swap(r.tasks, r.next_tasks);
  r.next_tasks.clear();
  return {};
}

// Executes r.tasks as successive supersteps. REQUIRES: r.tasks holds the first step's tasks
// (visits already counted).
awaitable<Status> execute(R& r) {
  auto cs = co_await asio::this_coro::cancellation_state;
  Status st;
  while (!r.tasks.empty()) {
    if (cs.cancelled() != asio::cancellation_type::none) co_return cancelled_error(r);
    st = check_caps(r);
    if (!st) co_return st;
    ++r.step;
    if (r.events) co_await emit_started(r);
    run_sync_tasks(r);
    if (r.async_idx.size() == 1)
      co_await run_task(r, r.tasks[r.async_idx[0]]);
    else if (!r.async_idx.empty())
      co_await run_parallel(r);
    if (cs.cancelled() != asio::cancellation_type::none) co_return cancelled_error(r);
    st = merge_step(r);
    if (!st) co_return st;
    if (r.events) co_await emit_finished(r);
    st = advance(r);
    if (!st) co_return st;
  }
  co_return st;
}

std::unique_ptr<R> make_run(GraphRuntime::Impl* rt, std::shared_ptr<const CompiledGraph> graph,
                            const RunConfig& config, std::string owner) {
  const RunLimits& limits = config.limits ? *config.limits : graph->default_limits();
  std::string run_id =
      "run-" + std::to_string(rt->next_run.fetch_add(1, std::memory_order_relaxed));
  rt->runs_total.inc();
  rt->active.fetch_add(1, std::memory_order_relaxed);
  auto r = std::make_unique<R>(rt, std::move(graph), std::move(run_id), limits);
  r->thread_id = config.thread_id;
  r->owner = !owner.empty() ? std::move(owner) : (!r->thread_id.empty() ? r->thread_id : r->run_id);
  r->events = config.events;
  r->stream_state = config.stream_state;
  if (limits.deadline.count() > 0) r->deadline = Clock::now() + limits.deadline;
  return r;
}

// Everything before the first superstep: a checkpoint to continue from, or the input.
Status prepare_run(R& r, json::value& input, const RunConfig& config, bool resume,
                   json::value& resume_value) {
  bool fresh = true;
  if (!r.thread_id.empty() && r.rt->checkpointer) {
    auto status = load_checkpoint(r, config.checkpoint_id);
    if (!status) return std::move(status).error();
    r.first_step = r.step;
    if (status->empty()) {
      if (resume)
        return Error(Errc::not_found, "thread '" + r.thread_id + "' has no checkpoint to resume");
    } else if (resume) {
      if (*status != "interrupted")
        return Error(Errc::invalid_argument, "thread '" + r.thread_id + "' is " + *status +
                                                 ", not interrupted; invoke it instead");
      r.resuming = true;
      r.resume_value = std::move(resume_value);
      fresh = false;
    } else if (*status == "interrupted") {
      return Error(Errc::invalid_argument, "thread '" + r.thread_id + "' is interrupted at node '" +
                                               r.resume_node +
                                               "'; call resume() with a value to continue");
    } else if (*status == "running" && input.is_null()) {
      fresh = false;  // continue a checkpoint that has next nodes
    }
    // "done" (or "running" with new input): continue from its state at START.
  } else if (resume) {
    return Error(Errc::unsupported, "resume needs a thread id and a Checkpointer");
  }
  if (!fresh) return {};
  r.tasks.clear();
  if (auto s = apply_input(r, input); !s) return s;
  r.input = std::move(input);
  r.sends.clear();
  int sc = 0;
  if (auto s = follow(r, r.g->start, nullptr, r.sends, sc); !s) return s;
  if (auto s = collect_next(r, r.sends); !s) return s;
  if (auto s = write_checkpoint(r, "running", r.next_tasks, nullptr, {}); !s) return s;
  clear_changed(r);
  std::swap(r.tasks, r.next_tasks);
  r.next_tasks.clear();
  return {};
}

Status status_from_exception(const R& r, const std::exception_ptr& ep) {
  if (is_cancelled(ep)) return Error(Errc::cancelled, "run " + r.run_id + " was cancelled");
  return error_from(ep, "run " + r.run_id);
}

Result<RunResult> finish_run(R& r, Status st) {
  // Metrics once per run (not per step): fewer atomic updates on the hot path.
  r.rt->steps_total.inc(static_cast<double>(r.step - r.first_step));
  r.rt->node_calls.inc(static_cast<double>(r.stats.node_calls));
  r.stats.steps = r.step;
  r.stats.tokens = r.tokens.load(std::memory_order_relaxed);
  r.stats.state_peak_bytes = r.res.peak_bytes();
  if (!st && !st.error().is(Errc::interrupted)) {
    r.rt->runs_failed.inc();
    return std::move(st).error();
  }
  RunResult res;
  res.run_id = r.run_id;
  res.thread_id = r.thread_id;
  res.checkpoint_id = r.last_ckpt;
  res.graph = r.graph;
  res.values.reserve(r.values.size());
  for (auto& v : r.values) res.values.emplace_back(v, json::storage_ptr{});
  res.stats = r.stats;
  if (!st) {
    res.interrupted = true;
    res.interrupted_node = r.resume_node;
    res.interrupt_payload = json::value(r.resume_value, json::storage_ptr{});
  }
  return res;
}

awaitable<void> emit_final(R& r, const Result<RunResult>& out) {
  if (!out)
    co_await emit_event(r, EventKind::run_failed, nullptr, json::value(out.error().to_string()));
  else
    co_await emit_event(r, out->interrupted ? EventKind::run_interrupted : EventKind::run_finished,
                        nullptr, nullptr);
}

// Frees the run: state (and its budget), then its artifacts when it failed without a thread.
void release_run(std::unique_ptr<R> r, bool failed, bool nested) {
  auto* rt = r->rt;
  std::string owner = (failed && !nested && r->thread_id.empty()) ? r->owner : std::string();
  r.reset();
  if (!owner.empty() && rt->artifacts) rt->artifacts->release_owner(owner);
  rt->active.fetch_sub(1, std::memory_order_relaxed);
}

// Runs a graph from input (or a checkpoint) to the end; the admission-free core.
awaitable<Result<RunResult>> run_graph(GraphRuntime::Impl* rt,
                                       std::shared_ptr<const CompiledGraph> graph,
                                       json::value input, RunConfig config, std::string owner,
                                       bool resume, json::value resume_value, bool admit) {
  std::optional<Limiter::Permit> permit;
  if (admit) {
    permit = rt->limiter.try_acquire();
    if (!permit) {
      Result<Limiter::Permit> p = co_await rt->limiter.async_acquire();
      if (!p) co_return std::move(p).error();
      permit.emplace(std::move(*p));
    }
  }
  const bool nested = !owner.empty();
  std::unique_ptr<R> r = make_run(rt, std::move(graph), config, std::move(owner));
  Status st;
  std::exception_ptr ep;
  try {
    if (r->events) co_await emit_event(*r, EventKind::run_started, nullptr, input);
    st = prepare_run(*r, input, config, resume, resume_value);
    if (st) st = co_await execute(*r);
  } catch (...) {
    ep = std::current_exception();
  }
  if (ep) st = status_from_exception(*r, ep);
  Result<RunResult> out = finish_run(*r, std::move(st));
  if (r->events) co_await emit_final(*r, out);
  release_run(std::move(r), !out, nested);
  co_return out;
}

awaitable<Result<Update>> call_subgraph(R& r, const NodeImpl& n, NodeContext& ctx) {
  json::object in;
  const auto& child = n.sub->impl();
  for (auto [p, c] : n.sub_in) in[child.channels[c].name] = r.values[p];
  RunConfig cfg;
  cfg.limits = n.sub_opts.limits;
  json::value input(std::move(in));
  std::string owner = r.owner;
  json::value no_resume;
  auto child_graph = n.sub;
  auto res = co_await run_graph(r.rt, std::move(child_graph), std::move(input), std::move(cfg),
                                std::move(owner), false, std::move(no_resume), false);
  if (!res) {
    auto e = std::move(res).error();
    co_return Error(e.code, "subgraph '" + n.name + "': " + e.message);
  }
  Update up;
  for (auto [c, p] : n.sub_out) {
    // Write back only what differs from the parent's value (keeps reducers idempotent).
    if (res->values[c] != r.values[p]) up.set(p, res->values[c]);
  }
  co_return up;
}

}  // namespace

// --- GraphRuntime ----------------------------------------------------------------------------

GraphRuntime::GraphRuntime(Executor& executor, MemoryBudget* budget, ArtifactStore* artifacts,
                           Registry* metrics, Checkpointer* checkpointer, RuntimeOptions opts)
    : impl_(std::make_unique<Impl>(executor, budget, artifacts,
                                   metrics ? *metrics : Registry::global(), checkpointer, opts)) {}
GraphRuntime::~GraphRuntime() = default;
Executor& GraphRuntime::executor() noexcept {
  return impl_->executor;
}
std::size_t GraphRuntime::active_runs() const noexcept {
  return impl_->active.load(std::memory_order_relaxed);
}

// Plain functions returning the run's coroutine: one frame less per run.
awaitable<Result<RunResult>> GraphRuntime::async_invoke(std::shared_ptr<const CompiledGraph> graph,
                                                        json::value input, RunConfig config) {
  return run_graph(impl_.get(), std::move(graph), std::move(input), std::move(config), {}, false,
                   nullptr, true);
}

awaitable<Result<RunResult>> GraphRuntime::async_resume(std::shared_ptr<const CompiledGraph> graph,
                                                        std::string thread_id, json::value value,
                                                        RunConfig config) {
  config.thread_id = std::move(thread_id);
  return run_graph(impl_.get(), std::move(graph), nullptr, std::move(config), {}, true,
                   std::move(value), true);
}

Result<RunResult> GraphRuntime::invoke(std::shared_ptr<const CompiledGraph> graph,
                                       json::value input, RunConfig config) {
  return impl_->executor.run_sync(
      async_invoke(std::move(graph), std::move(input), std::move(config)));
}
Result<RunResult> GraphRuntime::resume(std::shared_ptr<const CompiledGraph> graph,
                                       std::string thread_id, json::value value, RunConfig config) {
  return impl_->executor.run_sync(
      async_resume(std::move(graph), std::move(thread_id), std::move(value), std::move(config)));
}

std::vector<Result<RunResult>> GraphRuntime::batch(std::shared_ptr<const CompiledGraph> graph,
                                                   std::vector<json::value> inputs,
                                                   std::size_t max_concurrency) {
  auto body = [](GraphRuntime* self, std::shared_ptr<const CompiledGraph> g,
                 std::vector<json::value> in,
                 std::size_t conc) -> awaitable<std::vector<Result<RunResult>>> {
    std::vector<std::optional<Result<RunResult>>> slots(in.size());
    std::size_t next = 0;
    auto ex = co_await asio::this_coro::executor;
    auto worker = [&]() -> awaitable<void> {
      while (next < in.size()) {
        std::size_t i = next++;
        RunConfig cfg;
        json::value input = std::move(in[i]);
        auto graph = g;
        Result<RunResult> res =
            co_await self->async_invoke(std::move(graph), std::move(input), std::move(cfg));
        slots[i].emplace(std::move(res));
      }
    };
    auto strand = asio::make_strand(ex);
    using Op = decltype(asio::co_spawn(strand, worker(), asio::deferred));
    std::vector<Op> ops;
    for (std::size_t i = 0; i < std::min(in.size(), std::max<std::size_t>(1, conc)); ++i)
      ops.push_back(asio::co_spawn(strand, worker(), asio::deferred));
    co_await asio::experimental::make_parallel_group(std::move(ops))
        .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
    std::vector<Result<RunResult>> out;
    out.reserve(slots.size());
    for (auto& s : slots)
      out.push_back(s ? std::move(*s) : Result<RunResult>(Error(Errc::cancelled, "not run")));
    co_return out;
  };
  return impl_->executor.run_sync(body(this, std::move(graph), std::move(inputs), max_concurrency));
}

}  // namespace weir::graph
