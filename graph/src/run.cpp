// The run loop: supersteps, admission, events (see runner.hpp; what a node sees of its run is
// in node_context.cpp, the node calls in run_nodes.cpp, channels and checkpoints in
// run_channels.cpp and run_checkpoints.cpp). Building and compiling are in state_graph.cpp.
#include "runner.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/text.hpp"

namespace weir::graph {

namespace {

// A run's scratch vectors keep their capacity for the thread's next run (a pool of at most
// kPooled), and a Runner's memory is reused the same way: a short run then allocates little
// beyond its coroutine frame and its state. The barrier's vectors (Runner::Barrier) are only
// held from a step's nodes to the next step's start, so they go back to the pool in between:
// while its direct node waits, a run holds none.
constexpr std::size_t kPooled = 32;
constexpr std::size_t kPooledItems = 64;  // larger vectors are freed, not pooled

struct Scratch {
  std::vector<Task> tasks;
};

// Set when this thread's pools are destroyed (thread exit): a Runner freed after that, say by
// an io_context destroyed later, is freed plainly. A bool stays readable until the thread ends.
thread_local bool t_pools_gone = false;

struct Pools {
  std::vector<Scratch> scratch;
  std::vector<std::unique_ptr<Runner::Barrier>> barrier;
  std::vector<void*> runners;  // blocks of sizeof(Runner)
  ~Pools() {
    t_pools_gone = true;
    for (void* p : runners) ::operator delete(p);
  }
};
thread_local Pools t_pools;

// This thread's pools, or null once they are gone.
Pools* pools() {
  return t_pools_gone ? nullptr : &t_pools;
}

}  // namespace

// --- Runner ---------------------------------------------------------------------------------

void* Runner::operator new(std::size_t n) {
  Pools* pl = pools();
  if (!pl || pl->runners.empty()) return ::operator new(n);
  void* p = pl->runners.back();
  pl->runners.pop_back();
  return p;
}

void Runner::operator delete(void* p) {
  Pools* pl = pools();
  if (pl && pl->runners.size() < kPooled)
    pl->runners.push_back(p);
  else
    ::operator delete(p);
}

Runner::Runner(const CompiledGraph& graph, const RuntimeOptions& o, std::string id,
               const GraphLimits& limits)
    : g(graph),
      opt(o),
      lim(limits),
      run_id(std::move(id)),
      st(o.budget, limits.max_state_bytes, &run_id) {
  if (lim.deadline.count() > 0) deadline = Clock::now() + lim.deadline;
  if (Pools* pl = pools(); pl && !pl->scratch.empty()) {
    auto& pool = pl->scratch;
    Scratch& sc = pool.back();
    tasks = std::move(sc.tasks);
    pool.pop_back();
  }
}

Runner::~Runner() {
  give_barrier_scratch();
  Pools* pl = pools();
  // Only small steps' vectors are kept: a 10,000-way Send must not pin its memory.
  if (!pl || pl->scratch.size() >= kPooled || tasks.capacity() > kPooledItems) return;
  tasks.clear();
  pl->scratch.push_back(Scratch{std::move(tasks)});
}

void Runner::take_barrier_scratch() {
  if (!barrier) {
    if (Pools* pl = pools(); pl && !pl->barrier.empty()) {
      barrier = std::move(pl->barrier.back());
      pl->barrier.pop_back();
    } else {
      barrier = std::make_unique<Barrier>();
    }
  }
  barrier->writes.resize(g.channels_.size());
}

void Runner::clear_barrier_scratch() {
  barrier->results.clear();
  barrier->next.clear();
  for (auto& w : barrier->writes) {
    w.clear();
    if (w.capacity() > kPooledItems) w.shrink_to_fit();
  }
}

void Runner::drop_input() {
  if (!barrier) return;
  barrier->admission = nullptr;
  if (barrier->input.capacity() > 0) barrier->input = json::object();
}

void Runner::give_barrier_scratch() {
  if (!barrier) return;
  Pools* pl = pools();
  if (pl && pl->barrier.size() < kPooled && barrier->results.capacity() <= kPooledItems &&
      barrier->next.capacity() <= kPooledItems && barrier->writes.capacity() <= kPooledItems) {
    clear_barrier_scratch();
    drop_input();
    pl->barrier.push_back(std::move(barrier));
  }
  barrier.reset();
}

void Runner::fail(Error e) {
  extra().error = std::move(e);
  ok = false;
}

RunResult Runner::result(std::int32_t steps) {
  RunResult out;
  out.resumed = resumed;
  if (thread) out.checkpoint_id = thread->parent_checkpoint;
  out.state = StateView(g, st).to_object();
  out.steps = steps;
  out.tokens_used = tokens_used();
  out.peak_state_bytes = st.resource.peak_bytes();
  out.offloaded = offloaded;
  return out;
}

Status Runner::prepare(json::object& input, std::vector<Task>& tasks) {
  if (!nested) {
    if (auto s = check_input_channels(g.input_channels_, g.name_, input, "the input"); !s) return s;
  }
  const std::size_t C = g.channels_.size();
  st.values.reserve(C);
  for (const auto& [name, o] : g.channels_)
    st.values.emplace_back(o.default_value ? json::value(*o.default_value, st.sp())
                                           : json::value(st.sp()));
  if (g.visit_caps_ || checkpointer())
    st.visits = std::make_unique<std::int64_t[]>(g.nodes_.size());  // zeros
  if (checkpointer()) {
    thread->origin = run_origin(input, resume_value());
    if (auto s = restore(tasks, !input.empty()); !s) return s;
  }
  const bool record = nested && extras && extras->record_subgraphs;
  if (input.empty() || (thread && thread->continues)) {
    if (record) record_subgraph_step(nullptr, nullptr, 0);
    return {};
  }
  std::vector<std::pair<std::size_t, const json::value*>> w(1);
  for (auto& [k, v] : input) {
    auto ch = g.channel_index(k);
    if (!ch) {
      std::vector<std::string> names;
      for (const auto& c : g.channels_) names.push_back(c.first);
      return Error(Errc::invalid_argument, "input key '" + std::string(k) +
                                               "' is not a channel of this graph" +
                                               did_you_mean(k, names));
    }
    // A large input value is stored like a node's large write: state holds its reference.
    if (!nested) {
      if (auto s = offload(v, k, ""); !s) return s;
    }
    w[0] = {kInputWriter, &v};
    if (auto s = reduce(*ch, w, 0); !s) return s;
  }
  if (record) record_subgraph_step(nullptr, nullptr, 0);
  return {};
}

Status Runner::start(const json::object& input, std::vector<Task>& tasks) {
  const bool jump = extras && (!extras->go_to.empty() || !extras->go_to_sends.empty()) &&
                    !(thread && thread->continues);
  if (jump) {
    if (resume_value())
      return Error(Errc::unsupported,
                   "go_to with a resume value: resume the interrupted thread, then go_to in a run "
                   "of its own");
    std::vector<Task> first;
    auto index = [&](const std::string& name, const char* what) -> Result<std::size_t> {
      if (auto i = g.node_index(name)) return *i;
      std::string nodes;
      for (const auto& n : g.nodes_) nodes += (nodes.empty() ? "" : ", ") + n.name;
      return Error(Errc::invalid_argument,
                   std::string(what) + " names node '" + name.substr(0, 200) +
                       "', which the graph does not have (its nodes: " + nodes + ")");
    };
    for (const auto& name : extras->go_to) {
      if (name == kEnd) continue;  // as Update::go_to: nothing runs for it
      auto i = index(name, "go_to");
      if (!i) return std::move(i).error();
      if (std::none_of(first.begin(), first.end(),
                       [&](const Task& t) { return t.node == *i && !t.from_send; }))
        first.push_back({*i, nullptr});
    }
    for (const auto& send : extras->go_to_sends) {  // each its own task, as a Send's
      auto i = index(send.node, "go_to_sends");
      if (!i) return std::move(i).error();
      first.push_back({*i, send.input, true});
    }
    tasks = std::move(first);  // an unfinished thread's pending nodes give way
  } else if (!resumed) {
    for (auto n : g.static_next_[0]) tasks.emplace_back(n);
    for (const Router* r : g.routers_[0]) {
      if (auto s = route(*r, tasks); !s) return s;
    }
  }
  // The input is a step of its own, numbered after the thread's last one (a continued run's
  // input is in the thread already).
  if (checkpointer() && (!input.empty() || jump) && !thread->continues) {
    if (!thread->parent_checkpoint.empty()) ++thread->step_base;
    std::vector<bool> written(g.channels_.size());
    for (const auto& kv : input) written[*g.channel_index(kv.key())] = true;
    return save(written, tasks, 0);
  }
  return {};
}

Status Runner::begin_step(const std::vector<Task>& tasks, std::int32_t& step) {
  if (thread && lim.max_thread_steps > 0 && thread->step_base + step >= lim.max_thread_steps) {
    std::string active;
    for (const auto& t : tasks) active += (active.empty() ? "" : ", ") + g.nodes_[t.node].name;
    return Error(
        Errc::step_limit_exceeded,
        "thread '" + thread->id + "' stopped after " + std::to_string(thread->step_base + step) +
            " supersteps over all its runs (max_thread_steps=" +
            std::to_string(lim.max_thread_steps) + "); nodes active in the last step: " + active +
            "; raise limits.max_thread_steps or continue on a new thread");
  }
  const bool own_cap = extras && extras->recursion_limit > 0;
  const std::int32_t cap = own_cap ? extras->recursion_limit : lim.recursion_limit;
  const std::int32_t before = extras ? extras->steps_before : 0;
  if (step + before >= cap) {
    std::string active;
    for (const auto& t : tasks) active += (active.empty() ? "" : ", ") + g.nodes_[t.node].name;
    return Error(Errc::step_limit_exceeded,
                 "run stopped after " + std::to_string(step + before) + " supersteps (" +
                     (own_cap ? "the run's recursion_limit=" : "recursion_limit=") +
                     std::to_string(cap) + "); nodes active in the last step: " + active +
                     (own_cap ? "; give the run a higher recursion_limit or add an exit condition"
                              : "; raise limits.recursion_limit or add an exit condition"));
  }
  if (cancel && cancel->load(std::memory_order_relaxed))
    return Error(Errc::cancelled, "run cancelled before superstep " + std::to_string(step + 1));
  if (deadline != Clock::time_point::max() && Clock::now() > deadline) {
    return Error(Errc::deadline_exceeded,
                 "run stopped after " + std::to_string(lim.deadline.count()) +
                     " ms (limits.deadline_ms) in superstep " + std::to_string(step));
  }
  ++step;
  for (const auto& t : tasks) {
    const auto& n = g.nodes_[t.node];
    if (n.options.max_visits > 0 && ++st.visits[t.node] > n.options.max_visits) {
      return Error(Errc::visit_limit_exceeded,
                   "node '" + n.name + "' would run a " + std::to_string(st.visits[t.node]) +
                       "th time (max_visits=" + std::to_string(n.options.max_visits) + ")");
    }
  }
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    auto& c = tasks[i].ctx;
    c.run_ = this;
    c.task_ = i;
    c.extra_.reset();
  }
  return {};
}

bool Runner::run_inline(const std::vector<Task>& tasks, std::vector<Result<Update>>& results) {
  for (const auto& t : tasks) {
    if (!g.nodes_[t.node].sync || g.nodes_[t.node].options.max_attempts > 1) return false;
  }
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    try {
      results.push_back(g.nodes_[tasks[i].node].sync(StateView(g, st), tasks[i].ctx));
    } catch (...) {
      Error e = thrown_error();
      results.emplace_back(std::move(e));
    }
  }
  return true;
}

Status Runner::collect(const std::vector<Task>& tasks, std::vector<Result<Update>>& results,
                       Writes& writes) {
  // `writes` is empty: a barrier is cleared after each step and before it goes to the pool.
  // The first failure in task order, an interrupt's error only when nothing else failed.
  std::size_t interrupted = tasks.size();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (!results[i]) {
      if (!results[i].error().is(Errc::interrupted))
        return node_error(tasks[i].node, results[i].error());
      if (interrupted == tasks.size()) interrupted = i;
      continue;
    }
    for (auto& [ch_name, v] : results[i]->writes) {
      if (auto s = offload(v, ch_name, g.nodes_[tasks[i].node].name); !s)
        return node_error(tasks[i].node, s.error());
      auto ch = g.channel_index(ch_name);
      if (!ch) {
        return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                 "' wrote unknown channel '" + ch_name + "'");
      }
      writes[*ch].emplace_back(tasks[i].node, &v);
    }
  }
  if (interrupted < tasks.size())
    return node_error(tasks[interrupted].node, results[interrupted].error());
  return {};
}

Status Runner::merge(const Writes& writes, std::int32_t step) {
  for (std::size_t ch = 0; ch < writes.size(); ++ch) {
    if (writes[ch].empty()) continue;
    if (auto s = reduce(ch, writes[ch], step); !s) return s;
  }
  return {};
}

Status Runner::advance(const std::vector<Task>& tasks, const std::vector<Result<Update>>& results,
                       const Writes& writes, std::vector<Task>& next, std::int32_t step) {
  next.clear();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const Update& u = *results[i];
    for (const auto& s : u.sends) {
      auto n = g.node_index(s.node);
      if (!n)
        return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                 "' sent to unknown node '" + s.node + "'");
      next.push_back({*n, s.input, true});
    }
    if (u.go_to) {
      for (const auto& t : *u.go_to) {
        if (t == kEnd) continue;
        auto n = g.node_index(t);
        if (!n)
          return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                   "' went to unknown node '" + t + "'");
        add_unique(next, *n);
      }
      continue;
    }
    for (auto n : g.static_next_[tasks[i].node + 1]) add_unique(next, n);
    for (const Router* r : g.routers_[tasks[i].node + 1]) {
      if (auto s = route(*r, next); !s) return node_error(tasks[i].node, s.error());
    }
  }
  if (nested && extras && extras->record_subgraphs) record_subgraph_step(&tasks, &writes, step);
  if (checkpointer()) {
    std::vector<bool> written(writes.size());
    for (std::size_t ch = 0; ch < writes.size(); ++ch) written[ch] = !writes[ch].empty();
    return save(written, next, step);
  }
  return {};
}

asio::awaitable<Result<RunResult>> Runner::run(std::unique_ptr<Runner> self) {
  while (self->advance_run() != Await::done) {
    try {
      if (self->waiting == Await::node) {
        try {
          self->keep_result(co_await self->direct_call());
        } catch (const boost::system::system_error& e) {
          // A wait the caller's Asio cancellation cut: the run was cancelled, whatever the node
          // would have called it ("threw: Operation canceled").
          if (e.code() == asio::error::operation_aborted)
            self->keep_result(Error(Errc::cancelled, "run cancelled while it ran"));
          else
            self->keep_result(thrown_error());
        } catch (...) {
          self->keep_result(thrown_error());
        }
        // After a failure (a cancellation among them) the run's own waits (the final event) go
        // on: they would throw while the coroutine's cancellation state says cancelled. (Asked
        // without a local: each is paid by every run that waits on a direct node,
        // bench_graph's concurrent_bytes_per_run.)
        if (!self->barrier->results.back()) co_await asio::this_coro::reset_cancellation_state();
      } else {
        co_await self->other_wait();
      }
    } catch (const Exception& e) {
      // Only the superstep loop turns an Exception into the run's error; the waits for a
      // permit and for the final event let it pass.
      if (self->phase == Phase::admitted || self->phase == Phase::done) throw;
      self->fail(e.error());
      self->phase = Phase::end;
    }
  }
  co_return self->result_of_run();
}

Runner::Await Runner::advance_run() {
  waiting = advance_steps();
  return waiting;
}

Runner::Await Runner::advance_steps() {
  for (;;) {
    Await a = Await::more;
    if (phase > Phase::admitted && phase < Phase::end) {
      try {
        a = advance_phase();
      } catch (const Exception& e) {  // e.g. the run's state went over its memory limit
        fail(e.error());
        phase = Phase::end;
      } catch (...) {  // the user's code outside a node: a router, a reducer, a token counter
        fail(thrown_error());
        phase = Phase::end;
      }
    } else {
      a = advance_phase();
    }
    if (a != Await::more) return a;
  }
}

Runner::Await Runner::advance_phase() {
  switch (phase) {
    case Phase::admit:
      phase = Phase::admitted;
      // A free permit is taken without a coroutine of its own; else the run queues.
      if (Limiter* admission = barrier ? barrier->admission : nullptr) {
        auto free_permit = admission->try_acquire();
        if (!free_permit) {
          if (traced) extras->trace->queued_at = Clock::now();
          return await_slow(Slow::queue);
        }
        permit = std::move(*free_permit);
      }
      return Await::more;
    case Phase::admitted:
      if (!ok) {
        if (traced) trace_run_end();
        phase = Phase::done;
        return streaming() ? await_slow(Slow::failed) : Await::done;
      }
      phase = Phase::prepare;
      return streaming() && !nested ? await_slow(Slow::run_started) : Await::more;
    case Phase::prepare:
      if (thread) check(claim());
      if (ok) check(prepare(barrier->input, tasks));
      phase = Phase::start;
      if (ok && has_evicted()) return await_slow(Slow::fold);
      [[fallthrough]];
    // From here to Phase::swap, a phase that need not wait falls through to the next, and swap
    // goes on to the next step: a run whose nodes run inline is one call of this function from
    // its input to its end.
    case Phase::start:
      if (ok) check(start(input(), tasks));
      drop_input();
      phase = Phase::step;
      [[fallthrough]];
    case Phase::step:
    next_step:
      if (ok && !tasks.empty()) check(begin_step(tasks, superstep));
      if (!ok || tasks.empty()) {
        phase = Phase::end;
        return Await::more;
      }
      if (extras && (break_next || !extras->break_before.empty())) {
        if (auto k = breakpoint_task(tasks); k < tasks.size()) {
          check(interrupt_run(tasks, k, superstep, extras->breakpoint));
          interrupted = true;
          phase = Phase::end;
          return Await::more;
        }
      }
      skip_breaks = false;
      if (traced) trace_step_begin();
      phase = Phase::nodes;
      if (streaming()) return await_slow(Slow::started);
      [[fallthrough]];
    case Phase::nodes:
      phase = Phase::barrier;
      if (tasks.size() == 1 && direct(tasks[0])) {
        give_barrier_scratch();  // a run waiting on a direct node holds no scratch
        return Await::node;
      }
      take_barrier_scratch();
      if (!run_inline(tasks, barrier->results)) {
        if (tasks.size() > 1) return Await::concurrently;
        barrier->results.emplace_back(Error(Errc::cancelled, "not run"));
        return Await::call;
      }
      [[fallthrough]];
    case Phase::barrier:
      if (traced)  // nodes whose calls did not end their spans (direct, inline)
        for (std::size_t i = 0; i < tasks.size(); ++i) trace_node_end(i, barrier->results[i]);
      // Then interrupts: the step's writes are discarded and the step is re-run on resume. A
      // failure goes first (collect reports it): nobody is asked a question for a step that has
      // failed (it surfaced only once every question was answered, or at once, by edge order).
      if (auto k = interrupting_task(tasks, barrier->results); k < tasks.size()) {
        check(interrupt_run(tasks, k, superstep));
        interrupted = true;
        phase = Phase::end;
        return Await::more;
      }
      if (!check(collect(tasks, barrier->results, barrier->writes))) {
        phase = Phase::end;
        return Await::more;
      }
      phase = Phase::merge;
      if (streaming()) return await_slow(Slow::finished);
      [[fallthrough]];
    case Phase::merge:
      check(merge(barrier->writes, superstep));
      phase = Phase::advance;
      if (ok && has_evicted()) return await_slow(Slow::fold);
      [[fallthrough]];
    case Phase::advance:
      if (!ok ||
          !check(advance(tasks, barrier->results, barrier->writes, barrier->next, superstep))) {
        phase = Phase::end;
        return Await::more;
      }
      phase = Phase::swap;
      if (streaming() && stream_state) return await_slow(Slow::state);
      [[fallthrough]];
    case Phase::swap:
      if (traced) trace_step_end();
      if (extras && !extras->break_after.empty() && !barrier->next.empty() && breaks_after(tasks))
        break_next = true;
      std::swap(tasks, barrier->next);
      clear_barrier_scratch();  // kept for the next step, unless its node is direct
      phase = Phase::step;
      goto next_step;
    case Phase::end:
      if (traced) trace_run_end();
      if (thread) thread->hold.reset();  // released before the caller hears the result
      phase = Phase::done;
      if (!ok) {
        st.values.clear();  // a failed run keeps nothing
        if (!nested && opt.artifacts) opt.artifacts->release_owner(run_id);
      }
      if (streaming() && !nested) return await_slow(ok ? Slow::final : Slow::failed);
      return Await::done;
    case Phase::done:
      break;
  }
  return Await::done;
}

asio::awaitable<void> Runner::other_wait() {
  const Await a = waiting;
  if (a == Await::call) return call(tasks[0], tasks[0].ctx, barrier->results[0]);
  if (a == Await::concurrently) return run_concurrently(tasks, barrier->results);
  return async_slow();
}

asio::awaitable<void> Runner::async_slow() {
  switch (slow) {
    case Slow::queue:
      co_await queue_for_permit();
      break;
    case Slow::run_started:
      co_await push_run_started(input(), resume_value());
      break;
    case Slow::fold: {
      Status s = co_await fold_evicted(superstep);
      check(std::move(s));
      break;
    }
    case Slow::started:
      co_await push_started(tasks, superstep);
      break;
    case Slow::finished:
      for (std::size_t i = 0; i < tasks.size(); ++i)
        co_await push_finished(tasks[i], tasks[i].ctx, *barrier->results[i], superstep);
      break;
    case Slow::state:
      co_await push_state(superstep);
      break;
    case Slow::final:
      co_await push_final(superstep, interrupted);
      break;
    case Slow::failed:
      co_await push_final(extras->error);
      break;
  }
}

Result<RunResult> Runner::result_of_run() {
  if (!ok) return std::move(extras->error);
  return finish(superstep, interrupted);
}

asio::awaitable<void> Runner::queue_for_permit() {
  const auto asked = thread ? Clock::now() : Clock::time_point{};
  Result<Limiter::Permit> queued = co_await async_admit();
  if (thread && queued) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - asked).count();
    note_fence({{"fence", "admission_wait"}, {"wait_ms", std::round(ms * 10) / 10}});
  }
  if (traced) {
    const auto waited =
        std::chrono::duration<double, std::milli>(Clock::now() - extras->trace->queued_at);
    trace_fence("weir.fence.admission_wait", {{"weir.fence.wait_ms", waited.count()},
                                              {"weir.fence.admitted", queued.has_value()}});
  }
  if (queued)
    permit = std::move(*queued);
  else
    fail(std::move(queued).error());
}

static bool names_node(const std::vector<std::string>& names, const std::string& node) {
  for (const auto& n : names)
    if (n == "*" || n == node) return true;
  return false;
}

std::size_t Runner::breakpoint_task(const std::vector<Task>& tasks) {
  const bool after = break_next;
  break_next = false;
  if (skip_breaks) {
    skip_breaks = false;
    return tasks.size();
  }
  std::size_t k = after ? 0 : tasks.size();
  for (std::size_t i = 0; !after && i < tasks.size(); ++i)
    if (names_node(extras->break_before, g.nodes_[tasks[i].node].name)) k = std::min(k, i);
  if (k == tasks.size()) return k;
  auto& c = tasks[k].ctx;
  if (!c.extra_) c.extra_ = std::make_unique<NodeContext::Extra>();
  c.extra_->interrupt.emplace(nullptr);
  extras->breakpoint = after ? "after" : "before";
  return k;
}

bool Runner::breaks_after(const std::vector<Task>& tasks) const {
  for (const auto& t : tasks)
    if (names_node(extras->break_after, g.nodes_[t.node].name)) return true;
  return false;
}

std::size_t Runner::interrupting_task(const std::vector<Task>& tasks,
                                      const std::vector<Result<Update>>& results) const {
  std::size_t k = tasks.size();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (results[i]) continue;
    if (!results[i].error().is(Errc::interrupted)) return tasks.size();  // a failure goes first
    if (k == tasks.size() && tasks[i].ctx.extra_ && tasks[i].ctx.extra_->interrupt) k = i;
  }
  return k;
}

RunResult Runner::finish(std::int32_t step, bool interrupted) {
  if (!interrupted) return result(step);
  RunResult out = result(step - 1);
  out.interrupted = true;
  out.interrupted_node = g.nodes_[tasks[interrupted_task].node].name;
  out.interrupt_payload = std::move(*tasks[interrupted_task].ctx.extra_->interrupt);
  if (extras && extras->breakpoint) out.breakpoint = extras->breakpoint;
  return out;
}

asio::awaitable<void> Runner::push_final(std::int32_t step, bool interrupted) {
  Event e;
  e.run_id = run_id;
  e.step = step;
  if (interrupted) {
    e.kind = EventKind::run_interrupted;
    e.node = g.nodes_[tasks[interrupted_task].node].name;
    e.data = json::object{{"payload", json::value(*tasks[interrupted_task].ctx.extra_->interrupt,
                                                  json::storage_ptr())}};
    if (extras && extras->breakpoint) e.data.as_object()["breakpoint"] = extras->breakpoint;
  } else {
    e.kind = EventKind::run_finished;
    e.data = json::object{{"steps", step}};
  }
  co_await push(std::move(e));
}

asio::awaitable<void> Runner::push_final(const Error& error) {
  Event e;
  e.run_id = run_id;
  e.kind = EventKind::run_failed;
  e.step = superstep;  // the step it failed in, as its nodes' events say (0: before the first)
  e.data = json::object{{"code", errc_name(error.code)}, {"message", error.message}};
  co_await push(std::move(e));
}

asio::awaitable<void> Runner::push_started(const std::vector<Task>& tasks, std::int32_t step) {
  for (const auto& t : tasks) {
    Event e = event(EventKind::node_started, g.nodes_[t.node].name, step,
                    json::value(t.input, json::storage_ptr()));
    co_await push(std::move(e));
  }
}

asio::awaitable<void> Runner::push_finished(const Task& t, NodeContext& ctx, const Update& u,
                                            std::int32_t step) {
  const std::string& name = g.nodes_[t.node].name;
  for (std::size_t k = 0; ctx.extra_ && k < ctx.extra_->emitted.size(); ++k) {
    auto& [custom_name, data] = ctx.extra_->emitted[k];
    Event e = event(EventKind::custom, name, step, std::move(data));
    e.name = std::move(custom_name);
    co_await push(std::move(e));
  }
  if (ctx.extra_) ctx.extra_->emitted.clear();
  json::object w;
  for (const auto& kv : u.writes) w[kv.first] = json::value(kv.second, json::storage_ptr());
  Event e = event(EventKind::node_finished, name, step, std::move(w));
  co_await push(std::move(e));
}

asio::awaitable<void> Runner::push_run_started(const json::object& input,
                                               const json::value* resume) {
  json::value data =
      resume ? json::value(*resume, json::storage_ptr()) : json::value(input, json::storage_ptr());
  Event e = event(EventKind::run_started, {}, 0, std::move(data));
  co_await push(std::move(e));
}

asio::awaitable<void> Runner::push_state(std::int32_t step) {
  Event e = event(EventKind::state, {}, step, StateView(g, st).to_object());
  co_await push(std::move(e));
}

Status Runner::route(const Router& r, std::vector<Task>& out) {
  std::vector<std::string> targets;
  try {
    targets = r(StateView(g, st));
  } catch (const Exception& x) {
    return Error(x.error().code, "its router failed: " + x.error().message);
  } catch (...) {
    return Error(Errc::tool_failed, "its router " + thrown_error().message);  // "threw: ..."
  }
  for (const auto& t : targets) {
    if (t == kEnd) continue;
    auto n = g.node_index(t);
    if (!n) return Error(Errc::invalid_argument, "router chose unknown node '" + t + "'");
    add_unique(out, *n);
  }
  return {};
}

// --- runtime --------------------------------------------------------------------------------

GraphRuntime::GraphRuntime(RuntimeOptions options)
    : options_(options),
      admission_(std::make_unique<Limiter>(
          "run limiter (limits.max_concurrent_runs=" + std::to_string(options.max_concurrent_runs) +
              ", limits.max_queued_runs=" + std::to_string(options.max_queued_runs) + ")",
          options.max_concurrent_runs, options.max_queued_runs)) {}

GraphRuntime::~GraphRuntime() = default;

std::size_t GraphRuntime::active_runs() const {
  return admission_->in_use();
}
std::size_t GraphRuntime::queued_runs() const {
  return admission_->waiting();
}

asio::awaitable<Result<RunResult>> GraphRuntime::async_invoke(
    std::shared_ptr<const CompiledGraph> graph, json::object input, RunOptions options) {
  return async_run(graph, input, options, nullptr);
}

asio::awaitable<Result<RunResult>> GraphRuntime::async_resume(
    std::shared_ptr<const CompiledGraph> graph, std::string thread_id, json::value resume_value,
    RunOptions options) {
  if (!options.checkpointer) {
    co_return Error(Errc::unsupported, "async_resume of thread '" + thread_id +
                                           "' needs a checkpointer: set RunOptions.checkpointer");
  }
  if (thread_id.empty())
    co_return Error(Errc::invalid_argument, "async_resume needs a non-empty thread id");
  options.thread_id = std::move(thread_id);
  auto value = std::make_unique<json::value>(std::move(resume_value));
  json::object no_input;  // a local: no temporary inside a co_await (GCC 12)
  co_return co_await async_run(graph, no_input, options, value.get());
}

asio::awaitable<Result<RunResult>> GraphRuntime::async_run(
    std::shared_ptr<const CompiledGraph>& graph, json::object& input, RunOptions& options,
    const json::value* resume_value) {
  std::string run_id;
  if (options.run_id.empty()) {  // "run-<n>", built in place (every run without an id pays it)
    // Numbered for the process, not the runtime: a run's artifacts are owned by its id, and two
    // runtimes may share a store (a failing run released the other runtime's "run-0"'s).
    static std::atomic<std::uint64_t> next_run{0};
    char id[24] = "run-";
    const auto n =
        std::to_chars(id + 4, id + sizeof id, next_run.fetch_add(1, std::memory_order_relaxed)).ptr;
    run_id.assign(id, n);
  } else {
    run_id = std::move(options.run_id);
  }
  auto r = std::make_unique<Runner>(*graph, options_, std::move(run_id), graph->limits_);
  r->graph_ref = std::move(graph);
  r->set_input(std::move(input));
  r->barrier->admission = admission_.get();
  if (options.checkpointer && !options.thread_id.empty()) {
    r->thread = std::make_unique<Runner::Thread>();
    r->thread->checkpointer = options.checkpointer;
    r->thread->resume_value = resume_value;
    r->thread->id = std::move(options.thread_id);
    r->thread->checkpoint_metadata = std::move(options.checkpoint_metadata);
    r->thread->lease = options.thread_lease;
    r->thread->claim_token = std::move(options.claim_token);
    r->thread->claim_held = !r->thread->claim_token.empty();
  }
  r->cancel = std::move(options.cancel);
  // (async_resume's options always name a thread, which holds resume_value.)
  // The run keeps no owning reference to the stream: a consumer that drops it closes it.
  if (options.events) r->extra().events = options.events->impl_;
  // Dropped here, not with the caller's RunOptions (which the caller may keep until the run
  // ends: GCC destroys a by-value argument at the end of the caller's co_await expression).
  options.events.reset();
  if (options.on_message_text) r->extra().on_text = options.on_message_text;
  r->stream_state = options.stream_state;
  if (!options.interrupt_before.empty() || !options.interrupt_after.empty() ||
      options.recursion_limit > 0 || !options.go_to.empty() || !options.go_to_sends.empty() ||
      options.steps_before > 0) {
    auto& x = r->extra();
    x.break_before = std::move(options.interrupt_before);
    x.break_after = std::move(options.interrupt_after);
    x.recursion_limit = options.recursion_limit;
    x.go_to = std::move(options.go_to);
    x.go_to_sends = std::move(options.go_to_sends);
    x.steps_before = std::max(0, options.steps_before);
  }
  if (options.record_subgraph_steps && r->thread) r->extra().record_subgraphs = true;
  if (options.trace && options.trace->context)
    r->trace_begin(options.trace->context, options.trace->name);
  return Runner::run(std::move(r));
}

}  // namespace weir::graph
