// The one executor (run_executor.hpp): steps 1-6 of a run, for both backends.
#include "run_executor.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include <boost/json.hpp>

#include "weir/agents/workflow.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/events.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::cluster {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

std::string interrupted_result(const std::string& node, const json::value& payload,
                               const std::string& thread_id) {
  return to_json_text(
      json::object{{"interrupted", node}, {"payload", payload}, {"thread", thread_id}});
}

namespace {

RunEnding recorded(RunState state, std::string result = {}, std::string code = {},
                   std::string message = {}) {
  RunEnding e;
  e.state = state;
  e.result = std::move(result);
  e.error_code = std::move(code);
  e.error = std::move(message);
  return e;
}

RunEnding failed(const Error& e) {
  return recorded(RunState::failed, {}, errc_name(e.code), e.message);
}

// How soon a run handed back because its thread was busy may be claimed again (at most).
constexpr std::chrono::milliseconds kBusyRetry{2000};

RunEnding handed_back(std::chrono::milliseconds delay, std::string why) {
  RunEnding e;
  e.kind = RunEnding::Kind::hand_back;
  e.delay = delay;
  e.why = std::move(why);
  return e;
}

// Step 4: the run's end as its own last checkpoint (`latest`, the thread's) states it; nullopt
// when the thread does not say this run ended.
Result<std::optional<RunEnding>> ended_on_thread(const graph::Checkpointer& cp,
                                                 const RunRecord& rec, const BuiltWorkflow& wf,
                                                 const std::optional<graph::Checkpoint>& latest) {
  if (!latest) return std::optional<RunEnding>();
  const auto& last = *latest;
  const auto* run = last.metadata.if_contains("queue_run");
  const auto* status = last.pending.if_contains("status");
  if (!run || !run->is_string() || run->get_string() != rec.id || !status)
    return std::optional<RunEnding>();
  if (*status == "done") {
    auto state = cp.state_at(rec.thread_id, last.checkpoint_id);
    if (!state) return std::move(state).error();
    return std::optional<RunEnding>(
        recorded(RunState::succeeded, to_json_text(wf.spec.output_of(std::move(*state)))));
  }
  if (*status == "interrupted") {
    const auto* info = last.pending.if_contains("interrupt");
    const auto* node = info && info->is_object() ? info->as_object().if_contains("node") : nullptr;
    const auto* payload =
        info && info->is_object() ? info->as_object().if_contains("payload") : nullptr;
    return std::optional<RunEnding>(
        recorded(RunState::interrupted,
                 interrupted_result(node && node->is_string() ? std::string(node->as_string()) : "",
                                    payload ? *payload : json::value(), rec.thread_id)));
  }
  return std::optional<RunEnding>();
}

// Step 6: the run's ending from the graph's result and what the backend set meanwhile.
RunEnding ending_of(const RunRecord& rec, const BuiltWorkflow& wf, Result<graph::RunResult>& r,
                    const RunEnv& env) {
  const RunControl& c = *env.control;
  if (c.lost) {
    RunEnding e;
    e.kind = RunEnding::Kind::lost;
    e.why = "another holder took the run";
    return e;
  }
  if (r && r->interrupted)
    return recorded(RunState::interrupted,
                    interrupted_result(r->interrupted_node, r->interrupt_payload, rec.thread_id));
  if (r) return recorded(RunState::succeeded, to_json_text(wf.spec.output_of(std::move(r->state))));
  if (r.error().is(Errc::cancelled) && c.user_cancel)
    return recorded(RunState::cancelled, {}, "cancelled", "cancelled (" + r.error().message + ")");
  if (r.error().is(Errc::cancelled) && c.draining) return handed_back({}, env.drain_reason);
  // The database stayed out of reach for a whole lease (the pg layer reconnected and retried
  // until then): the run did not fail, its store did. It is handed back (attempt not counted)
  // for whoever reaches the database next; if that fails too, its lease lapses and the next
  // claim continues it. Never recorded as failed (issue 32.1).
  if (r.error().is(Errc::unavailable)) return handed_back({}, r.error().message);
  return failed(r.error());
}

}  // namespace

struct RunExecutor::Impl {
  Options opt;
  std::unique_ptr<MemoryBudget> budget;
  fs::path store_dir;
  std::unique_ptr<ArtifactStore> store;
  std::unique_ptr<graph::GraphRuntime> runtime;
  // The workflows' local models: one engine per model file, for every run of this executor.
  // Declared before `workflows`: the built graphs that use them die first.
  inference::EngineRegistry engines;
  std::mutex mu;
  // By SHA-256; at most kCached (the runs in flight keep theirs alive).
  std::map<std::string, std::shared_ptr<const BuiltWorkflow>> workflows;  // GUARDED_BY(mu)
  static constexpr std::size_t kCached = 32;

  asio::awaitable<RunEnding> execute(RunRecord rec, std::shared_ptr<const BuiltWorkflow> wf,
                                     RunEnv env);
};

RunExecutor::RunExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RunExecutor::~RunExecutor() {
  impl_->runtime.reset();
  impl_->store.reset();
  std::error_code ec;
  if (!impl_->store_dir.empty()) fs::remove_all(impl_->store_dir, ec);
}

Result<std::unique_ptr<RunExecutor>> RunExecutor::open(Options options) {
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  BudgetLimits limits;
  limits.total = options.memory_limit;
  impl->budget = std::make_unique<MemoryBudget>(limits);
  // weir-<tag>-<pid> (what `weir`'s stale-folder sweep recognises) for a process's first
  // executor; a counter after it for the others.
  static std::atomic<int> opened{0};
  const int n = opened.fetch_add(1);
  std::error_code ec;
  impl->store_dir =
      fs::temp_directory_path(ec) / ("weir-" + options.tag + "-" + std::to_string(::getpid()) +
                                     (n == 0 ? std::string() : "-" + std::to_string(n)));
  auto st = ArtifactStore::open({impl->store_dir,
                                 std::min<std::size_t>(options.memory_limit / 4, 64u << 20),
                                 std::size_t{4} << 30, 200, impl->budget.get()});
  if (!st) return std::move(st).error();
  impl->store = std::move(*st);
  graph::RuntimeOptions ro;
  ro.budget = impl->budget.get();
  ro.artifacts = impl->store.get();
  ro.max_concurrent_runs = std::max<std::size_t>(1, options.max_runs);
  ro.max_queued_runs = ro.max_concurrent_runs;  // runs wait in their backend's queue
  impl->runtime = std::make_unique<graph::GraphRuntime>(ro);
  return std::unique_ptr<RunExecutor>(new RunExecutor(std::move(impl)));
}

MemoryBudget& RunExecutor::budget() {
  return *impl_->budget;
}

Result<std::shared_ptr<const BuiltWorkflow>> RunExecutor::workflow(const RunRecord& rec) {
  std::lock_guard lock(impl_->mu);
  auto& cache = impl_->workflows;
  if (auto it = cache.find(rec.workflow_sha256); it != cache.end()) return it->second;
  if (auto name = cpp_graph_name(rec.workflow)) {
    for (const auto& g : impl_->opt.graphs) {
      if (g.name != *name) continue;
      auto wf = std::make_shared<BuiltWorkflow>();
      wf->spec = g.graph->describe(g.name, g.description);
      wf->built.graph = g.graph;
      if (cache.size() >= Impl::kCached) cache.erase(cache.begin());
      cache.emplace(rec.workflow_sha256, wf);
      return std::shared_ptr<const BuiltWorkflow>(std::move(wf));
    }
    std::string have;
    for (const auto& g : impl_->opt.graphs) have += (have.empty() ? "" : ", ") + g.name;
    return Error(Errc::invalid_workflow,
                 "run " + rec.id + " runs the C++ graph '" + *name +
                     "', which this process does not have (its C++ graphs: " +
                     (have.empty() ? std::string("none") : have) +
                     "): register it in every process that runs it (WorkerOptions::graphs)");
  }
  auto load = graph::load_workflow_text(rec.workflow, rec.workflow_file, agents::workflow_checks());
  if (!load.ok()) return Error(Errc::invalid_workflow, load.report());
  auto wf = std::make_shared<BuiltWorkflow>();
  wf->spec = std::move(*load.spec);
  agents::WorkflowServices services;
  services.artifacts = impl_->store.get();
  services.budget = impl_->budget.get();
  services.engines = &impl_->engines;
  auto built = agents::build_workflow(wf->spec, services);
  if (!built) return std::move(built).error();
  wf->built = std::move(*built);
  if (cache.size() >= Impl::kCached) cache.erase(cache.begin());
  cache.emplace(rec.workflow_sha256, wf);
  return std::shared_ptr<const BuiltWorkflow>(std::move(wf));
}

asio::awaitable<RunEnding> RunExecutor::async_execute(RunRecord rec,
                                                      std::shared_ptr<const BuiltWorkflow> wf,
                                                      RunEnv env) {
  try {
    auto op = impl_->execute(std::move(rec), std::move(wf), std::move(env));
    co_return co_await std::move(op);
  } catch (const std::exception& e) {
    co_return failed(Error(Errc::tool_failed, std::string("the run threw: ") + e.what()));
  } catch (...) {
    co_return failed(Error(Errc::tool_failed, "the run threw an unknown exception"));
  }
}

asio::awaitable<RunEnding> RunExecutor::Impl::execute(RunRecord rec,
                                                      std::shared_ptr<const BuiltWorkflow> wf,
                                                      RunEnv env) {
  graph::Checkpointer& cp = *env.checkpointer;
  rec.workflow.clear();
  rec.workflow.shrink_to_fit();
  // Step 2.
  auto input = parse_json(rec.input.empty() ? std::string("{}") : rec.input, "the run's input");
  if (!input || !input->value.is_object())
    co_return failed(input ? Error(Errc::invalid_argument, "the run's input is not a JSON object")
                           : input.error());
  std::optional<json::value> resume;
  if (!rec.resume.empty()) {
    auto v = parse_json(rec.resume, "the run's resume value");
    if (!v) co_return failed(v.error());
    resume = std::move(v->value);
  }
  auto controls = parse_controls(rec.controls);
  if (!controls) co_return failed(controls.error());
  // Step 3.
  auto claimed =
      cp.claim_thread(rec.thread_id, graph::this_process_holder(env.token, env.lease.count()));
  if (!claimed) {
    // Busy (another run holds the thread: an enqueued run behind it): the end of that run makes
    // this one claimable at once (RunQueue::finish / give_back); the short delay covers only an
    // end that fell between the claim refused here and the hand-back. Otherwise, a lease.
    const auto delay =
        claimed.error().is(Errc::thread_busy) ? std::min(env.lease, kBusyRetry) : env.lease;
    co_return handed_back(delay, claimed.error().message);
  }
  env.control->thread_claimed = true;
  auto release = [&] { return cp.release_thread(rec.thread_id, env.token); };
  // Step 4.
  auto latest = cp.latest(rec.thread_id);  // read once: steps 4 and 4b
  if (!latest) {
    (void)release();
    co_return handed_back(env.lease, latest.error().message);
  }
  auto ended = ended_on_thread(cp, rec, *wf, *latest);
  if (!ended || *ended) {
    (void)release();
    if (!ended) co_return handed_back(env.lease, ended.error().message);
    co_return std::move(**ended);
  }
  // Step 4b. A run queued behind another (multitask_strategy enqueue) may find the thread
  // stopped by it: without input it continues a breakpoint, as a run asked with `input: null`
  // does at the door; anything else the door would have refused fails saying why.
  if (!resume) {
    const auto* status = *latest ? (**latest).pending.if_contains("status") : nullptr;
    if (status && *status == "interrupted") {
      const auto* info = (**latest).pending.if_contains("interrupt");
      const auto* at = info && info->is_object() ? info->as_object().if_contains("node") : nullptr;
      const std::string node = at && at->is_string() ? std::string(at->as_string()) : "?";
      const bool breakpoint = info && info->is_object() && info->as_object().contains("breakpoint");
      if (breakpoint && input->value.as_object().empty() && controls->go_to.empty() &&
          controls->go_to_sends.empty()) {
        resume = json::value(nullptr);
      } else {
        (void)release();
        co_return failed(
            Error(Errc::invalid_argument,
                  "thread '" + rec.thread_id + "' " +
                      (breakpoint ? "stopped at a breakpoint before node '" + node +
                                        "' (the run before this one stopped it): a run without "
                                        "input continues it"
                                  : "waits at the interrupt of node '" + node +
                                        "' (the run before this one stopped there): answer it with "
                                        "a resume value")));
      }
    }
  }
  // Step 5.
  graph::RunOptions o;
  o.checkpointer = &cp;
  o.thread_id = rec.thread_id;
  o.claim_token = env.token;
  o.cancel = env.control->cancel;
  o.events = env.events;
  o.on_message_text = env.on_message_text;
  o.run_id = rec.id + "." + std::to_string(rec.attempts);
  o.interrupt_before = std::move(controls->interrupt_before);
  o.interrupt_after = std::move(controls->interrupt_after);
  o.recursion_limit = controls->recursion_limit;
  o.record_subgraph_steps = controls->subgraph_steps;
  o.go_to = std::move(controls->go_to);
  for (auto& [node, input] : controls->go_to_sends)
    o.go_to_sends.push_back({std::move(node), std::move(input)});
  // A run its worker left unfinished (an attempt after the first): its cap counts the supersteps
  // the earlier attempts committed, one checkpoint each (its input's is no superstep).
  if (rec.attempts > 1) {
    const int cap = o.recursion_limit > 0
                        ? o.recursion_limit
                        : static_cast<int>(wf->spec.limits.recursion_limit.value_or(
                              graph::GraphLimits{}.recursion_limit));
    auto mine = cp.list(rec.thread_id, static_cast<std::size_t>(cap) + 2);
    if (!mine) {
      (void)release();
      co_return handed_back(env.lease, mine.error().message);
    }
    int done = 0;
    for (const auto& c : *mine) {
      const auto* by = c.metadata.if_contains("queue_run");
      if (!by || *by != json::value(rec.id)) break;
      ++done;
    }
    if (done > 0 && !input->value.as_object().empty()) --done;
    o.steps_before = done;
  }
  o.checkpoint_metadata = json::object{{"queue_run", rec.id},
                                       {"attempt", rec.attempts},
                                       {"workflow", rec.workflow_file},
                                       {"workflow_sha256", rec.workflow_sha256}};
  graph::RunTracing tracing{{env.tracer, {}}, rec.workflow_name};
  if (env.tracer) {  // every attempt continues the trace the run record names
    if (auto p = trace::parse_traceparent(rec.traceparent)) tracing.context.parent = std::move(*p);
    o.trace = &tracing;
  }
  Result<graph::RunResult> result = Error(Errc::cancelled, "not run");
  if (resume) {
    auto op =
        runtime->async_resume(wf->built.graph, rec.thread_id, std::move(*resume), std::move(o));
    result = co_await std::move(op);
  } else {
    auto op =
        runtime->async_invoke(wf->built.graph, std::move(input->value.as_object()), std::move(o));
    result = co_await std::move(op);
  }
  // Step 6.
  RunEnding ending = ending_of(rec, *wf, result, env);
  if (auto s = release(); !s && ending.kind == RunEnding::Kind::record)
    ending.why = "releasing thread '" + rec.thread_id + "': " + s.error().message;
  co_return ending;
}

}  // namespace weir::cluster
