// The run loop's private types: a run's state, its tasks, and the Runner that executes one run
// (a top-level run or a subgraph's). Its members are defined in run.cpp (the superstep loop,
// admission, events, nodes), run_channels.cpp (reducers, message windows, offload) and
// run_checkpoints.cpp (restore, save, interrupts).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>

#include "events_impl.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::graph {

// A messages window's archive is a chain of artifacts (JSON Lines), one an eviction: the turns
// it evicted, after a first line {"previous_archive": <ref>} naming the archive before it
// (run_channels.cpp writes it; restoring a thread restores the chain: run_checkpoints.cpp).
inline constexpr std::string_view kPreviousArchiveKey = "previous_archive";

namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

struct RunState {
  // Messages name the run as "run <run_id> state"; REQUIRES: `run_id` outlives the state.
  RunState(MemoryBudget* budget, std::size_t cap, const std::string* run_id)
      : resource(budget, BudgetCategory::run_state, cap, &describe, run_id) {}
  AccountingResource resource;
  std::vector<json::value> values;  // [channels]
  // [nodes]; null when no node counts its visits (max_visits) and the run has no thread
  std::unique_ptr<std::int64_t[]> visits;
  // What the run's values allocate from (a plain pointer to `resource`: made on use, not kept).
  json::storage_ptr sp() { return json::storage_ptr(&resource); }
  ~RunState() { values.clear(); }

 private:
  static std::string describe(const void* run_id) {
    return "run " + *static_cast<const std::string*>(run_id) + " state";
  }
};

struct Task {
  explicit Task(std::size_t n) : node(static_cast<std::uint32_t>(n)), from_send(false) {}
  Task(std::size_t n, json::value in, bool send = false)
      : node(static_cast<std::uint32_t>(n)), from_send(send), input(std::move(in)) {}
  std::uint32_t node;  // [nodes]
  bool from_send;
  json::value input;  // Send input, or null
  // The call's context, set up by begin_step() (kept with the task: one allocation less per
  // step). Mutable: the step's task list is read-only while its calls use their contexts.
  mutable NodeContext ctx;
};

// [channel] -> (writing node, value) in task order, for the barrier of one step.
using Writes = std::vector<std::vector<std::pair<std::size_t, const json::value*>>>;

// Keeps a thread's claim fresh while its run is in flight: a heartbeat every lease / 3 on an OS
// thread of its own (a node may run longer than the lease while the run's strand waits on it).
// A failed heartbeat is only logged: the run's next put, which checks the claim in its
// transaction, stops the run. The destructor stops the heartbeat and releases the claim.
class ThreadHold {
 public:
  ThreadHold(Checkpointer& cp, std::string thread_id, std::string token,
             std::chrono::milliseconds lease);
  ~ThreadHold();
  ThreadHold(const ThreadHold&) = delete;
  ThreadHold& operator=(const ThreadHold&) = delete;

 private:
  Checkpointer& cp_;
  const std::string thread_, token_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread worker_;
};

// Thread::origin of a run started with `input`, or resumed with `*resume`: "input:" or
// "resume:" and the SHA-256 of the value's JSON text.
std::string run_origin(const json::object& input, const json::value* resume);
// A traced run's spans (run_trace.cpp): the run's own, the current superstep's and one per
// task of the step. Made only for a run with RunOptions::trace (or a subgraph of one).
struct RunTrace {
  trace::Context ctx;  // the tracer and the parent of the run span
  trace::Span run;     // not recording for a subgraph's run without a span of its own
  trace::Span step;
  std::vector<trace::Span> nodes;  // [tasks] of the current step
  std::chrono::steady_clock::time_point queued_at{};
  // The parent of the step spans: the run span, or the context's parent when it has none.
  trace::Context for_steps() const { return ctx.child(run); }
};

// Inside a catch block: the Error for the exception being handled (an Exception's own error,
// any other std::exception as tool_failed "threw: <what>"); anything else is rethrown.
Error thrown_error();

// One run of a compiled graph (a top-level run, or a subgraph node's child run): its state,
// fences, scratch, and the coroutine that drives it (run()).
struct Runner {
  // Runner blocks are reused per thread (at most 32 kept; run.cpp).
  static void* operator new(std::size_t n);
  static void operator delete(void* p);

  const CompiledGraph& g;
  const RuntimeOptions& opt;
  const GraphLimits& lim;  // the graph's, or a subgraph node's override (both outlive the run)
  std::string run_id;
  RunState st;
  mutable std::int64_t tokens = 0;  // see tokens_used() (nodes charge it through a const run)
  Runner* parent = nullptr;         // a subgraph's run: the run its node belongs to
  // The token counter charged by this run: the top-level run's (a subgraph charges it too).
  std::int64_t& tokens_used() const { return parent ? parent->tokens_used() : tokens; }
  // The token budget: the nearest enclosing run's when that has one, else this run's limit.
  std::int64_t token_budget() const {
    const std::int64_t outer = parent ? parent->token_budget() : 0;
    return outer > 0 ? outer : lim.token_budget;
  }
  Clock::time_point deadline = Clock::time_point::max();

  // A run on a thread with a checkpointer. (Out of line: most runs have none, and every byte
  // of a Runner is paid by each run in flight.)
  struct Thread {
    Checkpointer* checkpointer = nullptr;  // REQUIRES: outlives the run
    std::string id, parent_checkpoint;
    json::object checkpoint_metadata;
    std::int64_t step_base = 0;
    std::string resume_node;  // async_resume: the node that interrupted
    // async_resume of a checkpoint that names the interrupting task: the answers of the re-run
    // step by task (its place in the restored list): the new value for the task that asked,
    // and those given before to the step's other tasks, which are asked again otherwise (the
    // step's writes are discarded at each interrupt). -1: by resume_node (older checkpoints).
    std::int64_t resume_task = -1;
    std::vector<std::pair<std::uint32_t, json::value>> answers;
    std::string claim_token;  // Checkpointer::claim_thread
    bool claim_held = false;  // RunOptions::claim_token: the caller claims, renews, releases
    std::chrono::milliseconds lease{30000};
    std::unique_ptr<ThreadHold> hold;  // while the run holds the thread
    // Artifact ids the checkpointer is known to hold for this thread (not copied again).
    std::unordered_set<std::string> durable_artifacts;
    // async_resume: the value for resume_node in the first step.
    const json::value* resume_value = nullptr;
    // What started the run the thread's checkpoints belong to (run_origin), carried in each
    // checkpoint's pending as "origin". A run given the same input (or resume value) as an
    // unfinished run's origin, or no input, continues that run: `continues` is then set and the
    // input, already in the restored state, is not applied again. The one continuation rule of
    // every caller (the CLI, the run service, a C++ caller).
    std::string origin;
    bool continues = false;
  };
  std::unique_ptr<Thread> thread;
  Checkpointer* checkpointer() const { return thread ? thread->checkpointer : nullptr; }
  const json::value* resume_value() const { return thread ? thread->resume_value : nullptr; }

  // What few runs use, out of line for the same reason as Thread; made by extra().
  struct Extra {
    std::shared_ptr<EventStream::Impl> events;  // null: not streaming
    std::string event_prefix;  // "parent/" in a subgraph of a streaming (or texting) run
    // A subgraph's run: where it was called ("/<parent's step>/<node>#<task>" per enclosing
    // call), so that the messages two calls of one subgraph name are named apart.
    std::string scope;
    // RunOptions::record_subgraph_steps: set on the top-level run and every subgraph's. The
    // top-level run holds the records of its step (for its checkpoint) and their bytes; a
    // subgraph's run its call ("path" of its records).
    bool record_subgraphs = false;
    bool subgraph_dropping = false;  // a subgraph's call: one of its steps was left out
    json::array subgraph_steps;
    std::size_t subgraph_bytes = 0, subgraph_run_bytes = 0;  // this step's, the run's
    std::int64_t subgraph_dropped = 0;
    json::array subgraph_path;
    // RunOptions::on_message_text (null: none).
    const std::function<void(const MessageText&)>* on_text = nullptr;
    // Turns evicted by a messages window in this step, folded into its marker at the barrier.
    std::vector<json::array> evicted;  // [channels]
    Error error;                       // why the run failed, once !ok
    // RunOptions::interrupt_before / interrupt_after / recursion_limit (0: the graph's).
    std::vector<std::string> break_before, break_after;
    std::int32_t recursion_limit = 0;
    std::int32_t steps_before = 0;   // RunOptions::steps_before
    std::vector<std::string> go_to;  // RunOptions::go_to
    std::vector<Send> go_to_sends;   // RunOptions::go_to_sends
    json::array fences;  // this step's fences (note_fence), for its checkpoint's metadata
    const char* breakpoint = nullptr;  // "before"/"after" once a breakpoint stopped the run
    std::unique_ptr<RunTrace> trace;   // set with `traced`
  };
  std::unique_ptr<Extra> extras;
  Extra& extra() {
    if (!extras) extras = std::make_unique<Extra>();
    return *extras;
  }
  bool streaming() const { return extras && extras->events; }
  // The step of the run's thread that is running: a subgraph's is its top-level run's.
  std::int64_t thread_step() const {
    if (parent) return parent->thread_step();
    return (thread ? thread->step_base : 0) + superstep;
  }
  const std::string& event_prefix() const {
    static const std::string none;
    return extras ? extras->event_prefix : none;
  }

  Runner(const CompiledGraph& graph, const RuntimeOptions& o, std::string id,
         const GraphLimits& limits);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  const std::string& task_name(std::size_t i) const { return g.nodes_[tasks[i].node].name; }

  Error node_error(std::size_t node, const Error& e) const {
    std::string prefix = "node '" + g.nodes_[node].name + "': ";
    if (e.message.rfind(prefix, 0) == 0) return e;  // a NodeContext error already names it
    return Error(e.code, std::move(prefix) + e.message);
  }

  // Events are built outside co_await expressions (GCC 12 mishandles temporaries there).
  Event event(EventKind kind, std::string_view node, std::int64_t step, json::value data) const {
    Event e;
    e.kind = kind;
    e.run_id = run_id;
    if (!node.empty()) e.node = event_prefix() + std::string(node);
    e.step = step;
    e.data = std::move(data);
    return e;
  }
  // REQUIRES: streaming().
  asio::awaitable<void> push(Event e) { co_await push_event(extras->events, std::move(e)); }

  // Throws Exception (tool_failed) when the channel's token counter throws.
  std::int64_t tokens_of(std::size_t ch, const json::value& m) const;

  // A messages window over max_messages / max_tokens: the oldest turns move to evicted[ch].
  void trim_window(std::size_t ch, json::array& arr);

  // Folds this step's evicted turns of every window into its marker: the archive artifact is
  // extended, the summary hook called. A failing hook keeps the previous summary (warning).
  asio::awaitable<Status> fold_evicted(std::int64_t step);

  bool has_evicted() const {
    if (!extras) return false;
    for (const auto& e : extras->evicted) {
      if (!e.empty()) return true;
    }
    return false;
  }

  // Gives the messages arr[from..] written without an id one (a messages channel's reducer):
  // the k-th of them keyed "<key>k". `key` names the channel and the write, not a place in arr,
  // which a window's evictions reuse within a step.
  void name_messages(json::array& arr, std::size_t from, std::int32_t step,
                     std::string_view key) const;
  // "msg-<16 hex>" of `key` with this run's id and the thread's step `step` (name_messages'
  // ids and NodeContext::new_message_id's).
  std::string message_id(std::int32_t step, std::string_view key) const;
  // Merges the writes of one channel in node order through its reducer.
  Status reduce(std::size_t ch,
                const std::vector<std::pair<std::size_t, const json::value*>>& writes,
                std::int32_t step);

  // A written value over inline_limit moves to the artifact store before it enters state;
  // state keeps the reference. (Elements appended one by one are checked one by one.)
  // `channel` and `node` ("" for the input) name where the value was going (note_fence).
  Status offload(json::value& v, std::string_view channel, std::string_view node,
                 bool item = false);
  // A fence that acted in this step, for its checkpoint's metadata "fences" (a run on a thread;
  // at most kFencesPerStep a step): {"fence": kind, ...what it did}.
  static constexpr std::size_t kFencesPerStep = 32;
  void note_fence(json::object f) {
    if (!thread) return;
    auto& fences = extra().fences;
    if (fences.size() < kFencesPerStep) fences.emplace_back(std::move(f));
  }

  // A subgraph's run recording its steps (Extra::record_subgraphs): its step `step` wrote the
  // channels of `writes` (null: its input, every channel with a value), ran `tasks`.
  void record_subgraph_step(const std::vector<Task>* tasks, const Writes* writes,
                            std::int32_t step);

  // A subgraph node: the child graph runs to END as a nested run of this one.
  asio::awaitable<Result<Update>> run_subgraph(const StateGraph::NodeDef& n,
                                               const NodeContext& ctx);

  // A node with retries, a subgraph or a sync node among async ones: the result goes to `r`
  // (not returned, so that the awaiting frame keeps no temporary for it).
  asio::awaitable<void> call(const Task& t, NodeContext& ctx, Result<Update>& r);

  // Whether an async node's call is watched (`watched`): it has a timeout, or the run can be
  // cancelled or has a deadline.
  bool watches(const StateGraph::NodeDef& n) const {
    return n.options.timeout.count() > 0 || cancel || deadline != Clock::time_point::max();
  }
  // An async node's call raced against its timeout, the run's cancel flag and its deadline:
  // the first of those to pass cancels the call and is its error.
  asio::awaitable<Result<Update>> watched(asio::awaitable<Result<Update>> call,
                                          const StateGraph::NodeDef& n);
  asio::awaitable<Error> watch(const StateGraph::NodeDef& n);

  RunResult result(std::int32_t steps);

  // Before the first superstep: the input checked against the graph's input list, channel
  // defaults, the checkpoint to continue from, the input (values over the inline limit moved
  // to the artifact store, then through the reducers), START's targets. Not a coroutine: see
  // run().
  Status prepare(json::object& input, std::vector<Task>& tasks);

  Status start(const json::object& input, std::vector<Task>& tasks);

  // The caps checked before a superstep, then the step's node contexts.
  Status begin_step(const std::vector<Task>& tasks, std::int32_t& step);

  // Every node of the step, inline when all are plain sync nodes.
  bool run_inline(const std::vector<Task>& tasks, std::vector<Result<Update>>& results);

  // The barrier, part 1: node errors, large values offloaded, writes grouped per channel in
  // task order. REQUIRES: `writes` is empty.
  // A write's writer in reduce()'s messages: "node 'x'", or the run's input (kInputWriter).
  static constexpr std::size_t kInputWriter = SIZE_MAX;
  std::string writer(std::size_t node) const {
    return node == kInputWriter ? std::string("the run's input")
                                : "node '" + g.nodes_[node].name + "'";
  }
  Status collect(const std::vector<Task>& tasks, std::vector<Result<Update>>& results,
                 Writes& writes);

  // Part 2: the reducers.
  Status merge(const Writes& writes, std::int32_t step);

  // Part 3: the next step's tasks (Sends, go_to, edges, routers) and the step's checkpoint.
  Status advance(const std::vector<Task>& tasks, const std::vector<Result<Update>>& results,
                 const Writes& writes, std::vector<Task>& next, std::int32_t step);

  // Scratch of the superstep loop. Members rather than locals of run(): a coroutine frame keeps
  // a slot for every local and temporary of every scope, and each run in flight pays for its
  // frame (100k runs: bench/bench_graph.cpp).
  std::vector<Task> tasks;
  // The barrier's scratch: the step's results, its writes per channel and the next step's
  // tasks. Taken from the thread's pool (run.cpp) and kept from step to step, but given back
  // before a direct node's call (and taken again at its return): a run waiting on a direct node
  // holds none.
  // Before the first step it carries the run's input too (set_input(); dropped by start).
  struct Barrier {
    std::vector<Result<Update>> results;  // [tasks]
    Writes writes;                        // [channels]
    std::vector<Task> next;
    json::object input;
    Limiter* admission = nullptr;  // a top-level run's limiter, until it is admitted
  };
  std::unique_ptr<Barrier> barrier;
  void take_barrier_scratch();
  void give_barrier_scratch();
  void clear_barrier_scratch();  // empty for the next step; REQUIRES: barrier
  void drop_input();             // the input's memory, once the run's first step is set up
  void set_input(json::object in) {
    take_barrier_scratch();
    barrier->input = std::move(in);
  }
  const json::object& input() const {
    static const json::object none;
    return barrier ? barrier->input : none;
  }
  // The step's one direct node (not a coroutine: its temporaries stay out of run()'s frame).
  asio::awaitable<Result<Update>> direct_call() {
    return g.nodes_[tasks[0].node].async(StateView(g, st), tasks[0].ctx);
  }
  // A direct node's result: the barrier's only result.
  void keep_result(Result<Update> r) {
    take_barrier_scratch();
    barrier->results.push_back(std::move(r));
  }

  // A plain async node (no retries, not a subgraph) is awaited straight from run(): one
  // coroutine frame less per node in flight than going through call().
  bool direct(const Task& t) const {
    const auto& n = g.nodes_[t.node];
    return n.async && !n.sub && n.options.max_attempts <= 1 && !watches(n);
  }

  // Set up by GraphRuntime::async_run for a top-level run (null for a subgraph's run).
  std::shared_ptr<const CompiledGraph> graph_ref;   // keeps `g` alive
  std::shared_ptr<const std::atomic<bool>> cancel;  // RunOptions::cancel (top-level runs)
  Limiter::Permit permit;                           // held while the run is admitted

  // The whole run: admission (top level), the superstep loop, the final event. `self` owns
  // the Runner for as long as the coroutine lives, so that a run in flight is that object and
  // one coroutine frame. The frame only waits: advance_run() does the work between two waits
  // and says what to wait for next, so the frame holds no locals (not even `this`: run() is
  // static) and two co_await sites, a node's and other_wait()'s (GCC 12 gives each one slots
  // of its own; each run in flight pays for them).
  static asio::awaitable<Result<RunResult>> run(std::unique_ptr<Runner> self);

  // Where the run is between two waits. The order is that of the superstep loop.
  enum class Phase : std::uint8_t {
    admit,  // take an admission permit, or queue for one
    admitted,
    prepare,  // channel defaults, claim, restore, input
    start,    // START's targets, the input's checkpoint
    step,     // the caps, the step's node contexts
    nodes,    // run the step's nodes
    barrier,  // interrupts, offload, writes per channel
    merge,    // the reducers
    advance,  // the next step's tasks, the checkpoint
    swap,
    end,   // release the thread; a failed run drops its state
    done,  // run() returns result_of_run()
  };
  // What run() awaits next (`more`: nothing yet, on to the next phase). `node` is a direct
  // node, awaited by run() itself; the others go through other_wait(): call() for a single
  // node that is not direct, run_concurrently() for several, and for `slow` one of the waits
  // of a streaming, queued or windowed run (async_slow()).
  enum class Await : std::uint8_t { more, node, call, concurrently, slow, done };
  enum class Slow : std::uint8_t {
    queue,        // queue_for_permit
    run_started,  // push_run_started
    fold,         // fold_evicted
    started,      // push_started
    finished,     // push_finished for every task
    state,        // push_state
    final,        // push_final(superstep, interrupted)
    failed,       // push_final(extras->error)
  };
  // The small fields share one 16-byte word.
  Phase phase = Phase::admit;
  Await waiting = Await::more;  // what advance_run() said last
  Slow slow = Slow::queue;      // valid while `waiting` is Await::slow
  bool resumed : 1 = false;
  bool stream_state : 1 = false;
  bool nested : 1 = false;  // a subgraph's run: no checkpoints, no interrupts, no run_* events
  bool interrupted : 1 = false;
  bool ok : 1 = true;       // the run's outcome so far: false once it failed, with extras->error
  bool traced : 1 = false;  // extras->trace is set: the trace_* hooks below record spans
  // Breakpoints: the next step stops before it runs (a step with an interrupt_after node ran);
  // skip_breaks: the first step of a resumed run, which runs whatever breakpoints say.
  bool break_next : 1 = false;
  bool skip_breaks : 1 = false;
  std::int32_t superstep = 0;
  std::uint32_t interrupted_task = 0;  // interrupt_run()
  std::uint32_t offloaded = 0;         // values moved to the artifact store

  // The run fails with `e` (a later failure replaces an earlier one).
  void fail(Error e);
  // s's error, if any, becomes the run's; returns ok. (Inline, and fail() not: every phase
  // checks a Status.)
  [[gnu::always_inline]] bool check(Status&& s) {
    if (!s) [[unlikely]]
      fail(std::move(s).error());
    return ok;
  }

  // Runs the plain work from `phase` on until the run has to wait; says for what, and keeps it
  // in `waiting`. An Exception thrown inside the superstep loop ends the run with its error
  // (e.g. the run's state went over its memory limit): advance_steps() turns it into one.
  Await advance_run();
  Await advance_steps();
  Await advance_phase();  // one phase
  Await await_slow(Slow what) {
    slow = what;
    return Await::slow;
  }
  asio::awaitable<void> async_slow();
  // The coroutine for a wait other than Await::node (not a coroutine itself: run() awaits
  // every one of them from the same co_await).
  asio::awaitable<void> other_wait();
  Result<RunResult> result_of_run();

  asio::awaitable<void> queue_for_permit();
  // queue_for_permit()'s wait (run_nodes.cpp): a permit from barrier->admission, raced against
  // the run's cancel flag (read every 50 ms) and its deadline, which end the wait with the
  // error begin_step() would give the run's first step.
  asio::awaitable<Result<Limiter::Permit>> async_admit();
  asio::awaitable<Error> watch_admission();

  // The task that called interrupt() and returned its error, or tasks.size(): also when another
  // task failed otherwise (the failure goes first: collect() reports it).
  std::size_t interrupting_task(const std::vector<Task>& tasks,
                                const std::vector<Result<Update>>& results) const;

  // Stops the run at task k's interrupt: an "interrupted" checkpoint that re-runs this step.
  // The step's node is kept in `interrupted_task` for finish(). `breakpoint`: "before"/"after"
  // for a breakpoint's stop (the task's interrupt payload is null), recorded in the checkpoint.
  Status interrupt_run(const std::vector<Task>& tasks, std::size_t k, std::int32_t step,
                       const char* breakpoint = nullptr);
  // The task a breakpoint stops this step at (RunOptions::interrupt_before/after), or
  // tasks.size(). Clears break_next and skip_breaks.
  std::size_t breakpoint_task(const std::vector<Task>& tasks);
  // Whether a step of `tasks` ran a node named in interrupt_after.
  bool breaks_after(const std::vector<Task>& tasks) const;

  // The result of a run that did not fail (finished, or stopped at an interrupt).
  RunResult finish(std::int32_t step, bool interrupted);

  // The stream's last event: run_finished or run_interrupted (before finish()), run_failed.
  asio::awaitable<void> push_final(std::int32_t step, bool interrupted);
  asio::awaitable<void> push_final(const Error& error);

  // Event pushes live in their own coroutines so that run()'s frame stays small.
  asio::awaitable<void> push_started(const std::vector<Task>& tasks, std::int32_t step);

  // The node's custom events in emit order, then its node_finished with its (offloaded) writes.
  asio::awaitable<void> push_finished(const Task& t, NodeContext& ctx, const Update& u,
                                      std::int32_t step);

  asio::awaitable<void> push_run_started(const json::object& input, const json::value* resume);

  asio::awaitable<void> push_state(std::int32_t step);

  // Tracing hooks (run_trace.cpp); each is called only when `traced`.
  // The run's span under `ctx` (named by the graph's set_trace_span, else `invoke_workflow
  // <name>` for a top-level run; none for a subgraph's run without a span of its own).
  void trace_begin(const trace::Context& ctx, std::string_view name);
  void trace_step_begin();  // after begin_step: the superstep's span and its tasks'
  void trace_node_end(std::size_t task, const Result<Update>& r);
  void trace_step_end();
  void trace_run_end();  // the outcome, the counters, a loop cap as an event
  // An event on the current superstep's span (the run's between steps).
  void trace_fence(std::string_view name, std::vector<trace::Attribute> attributes);

  // Restores the thread's state from its latest checkpoint; an unfinished one also gives the
  // tasks to run next. An interrupted one is continued only by async_resume. Decides whether
  // this run continues the unfinished one (Thread::continues; `has_input`: the run was given
  // one).
  Status restore(std::vector<Task>& tasks, bool has_input);

  // Claims the thread (one runner per thread) and starts its heartbeat. thread_busy when
  // another runner holds it.
  Status claim();

  // Restore: the artifacts the restored values reference, from the checkpointer into the run's
  // ArtifactStore when it lacks them.
  Status restore_artifacts(const json::object& state, const json::object& pending);

  // Save: the blobs `cp` references that the checkpointer may not hold yet go into
  // cp.artifacts; their ids are returned, to be marked durable once the put succeeds.
  Result<std::vector<std::string>> attach_artifacts(Checkpoint& cp) const;

  // A checkpoint with only the channels written in this step, and what runs next. `status`
  // overrides "running"/"done"; `interrupt` ({"node","payload"}) is stored in pending.
  Status save(const std::vector<bool>& written, const std::vector<Task>& next_tasks,
              std::int32_t step, const char* status = nullptr,
              const json::object* interrupt = nullptr);

  static void add_unique(std::vector<Task>& v, std::size_t n) {
    for (const auto& t : v) {
      if (t.node == n && !t.from_send) return;
    }
    v.emplace_back(n);
  }

  Status route(const Router& r, std::vector<Task>& out);

  // Async nodes of one step, at most max_concurrency at a time, on one strand; results in order.
  // When the awaiting operation is cancelled (Asio cancellation, e.g. the caller's
  // `run || timer`), the running calls are cancelled, no more start, and it returns only once
  // every call it started has ended (they use this run), every result Errc::cancelled.
  asio::awaitable<void> run_concurrently(const std::vector<Task>& tasks,
                                         std::vector<Result<Update>>& results);
};

}  // namespace weir::graph
