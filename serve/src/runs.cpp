// The runs API's two backends (runs.hpp): LocalRuns executes on a GraphRuntime in this process,
// PostgresRuns queues in weir_runs and runs an embedded cluster::Worker.
#include "runs.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json.hpp>

#include "weir/agents/workflow.hpp"
#include "weir/cluster/worker.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::serve {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using cluster::RunRecord;
using cluster::RunState;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A workflow file of the folder: its text (what a queued run carries) and, in-process, its graph.
struct Workflow {
  std::string name;
  fs::path file;  // absolute
  std::string text;
  graph::WorkflowSpec spec;  // the graph's nodes point into it: declared before `built`
  graph::WorkflowGraph built;
};

// Every *.json file of `dir`, loaded and checked; `build` also builds their graphs.
Result<std::map<std::string, std::shared_ptr<Workflow>>> load_workflows(
    const fs::path& dir, const agents::WorkflowServices* build) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Error(Errc::invalid_argument, "--workflows: '" + dir.string() + "' is not a folder");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty())
    return Error(Errc::invalid_argument,
                 "--workflows: '" + dir.string() + "' holds no workflow file (*.json)");
  std::map<std::string, std::shared_ptr<Workflow>> out;
  for (const auto& p : files) {
    auto w = std::make_shared<Workflow>();
    w->file = fs::absolute(p, ec);
    auto text = read_json_file(p);
    if (!text) return Error(text.error().code, "--workflows: " + text.error().message);
    w->text = std::move(*text);
    auto load = graph::load_workflow_text(w->text, w->file);
    if (!load.ok())
      return Error(Errc::invalid_workflow, "--workflows: " + p.string() + ":\n" + load.report());
    w->spec = std::move(*load.spec);
    w->name = w->spec.name.empty() ? p.stem().string() : w->spec.name;
    if (build) {
      auto built = agents::build_workflow(w->spec, *build);
      if (!built)
        return Error(built.error().code,
                     "--workflows: " + p.string() + ": " + built.error().message);
      w->built = std::move(*built);
    }
    if (out.count(w->name))
      return Error(Errc::invalid_argument, "--workflows: two workflows are named '" + w->name +
                                               "' (" + out[w->name]->file.string() + " and " +
                                               w->file.string() + ")");
    out.emplace(w->name, std::move(w));
  }
  return out;
}

Error no_workflow(const std::string& name, const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return Error(Errc::not_found, "no workflow '" + name + "' (this server runs: " + list + ")");
}

// The thread's latest checkpoint, which must say it is interrupted; its metadata names the run
// that interrupted it.
Result<graph::Checkpoint> interrupted_checkpoint(const graph::Checkpointer& cp,
                                                 const std::string& thread_id) {
  auto latest = cp.latest(thread_id);
  if (!latest) return std::move(latest).error();
  if (!*latest) return Error(Errc::not_found, "no thread '" + thread_id + "'");
  const auto* status = (**latest).pending.if_contains("status");
  if (!status || *status != "interrupted")
    return Error(Errc::invalid_argument,
                 "thread '" + thread_id + "' is not interrupted (its last step is " +
                     (status && status->is_string() ? std::string(status->as_string()) : "?") +
                     "): only an interrupted thread can be resumed");
  return std::move(**latest);
}

std::string queue_run_of(const graph::Checkpoint& cp) {
  const auto* r = cp.metadata.if_contains("queue_run");
  return r && r->is_string() ? std::string(r->as_string()) : std::string();
}

// --- in-process ------------------------------------------------------------------------------

class LocalRuns final : public Runs {
 public:
  explicit LocalRuns(const RunsConfig& c) : cfg_(c) {}
  ~LocalRuns() override { shutdown(); }

  Status open() {
    BudgetLimits limits;
    limits.total = cfg_.memory_limit;
    budget_ = std::make_unique<MemoryBudget>(limits);
    std::error_code ec;
    store_dir_ = fs::temp_directory_path(ec) / ("weir-serve-runs-" + std::to_string(::getpid()) +
                                                "-" + graph::new_claim_token().substr(0, 8));
    auto st =
        ArtifactStore::open({store_dir_, std::min<std::size_t>(cfg_.memory_limit / 4, 64u << 20),
                             std::size_t{4} << 30, 200, budget_.get()});
    if (!st) return std::move(st).error();
    store_ = std::move(*st);
    agents::WorkflowServices services;
    services.artifacts = store_.get();
    services.budget = budget_.get();
    services.engines = &engines_;
    auto wfs = load_workflows(cfg_.workflows, &services);
    if (!wfs) return std::move(wfs).error();
    workflows_ = std::move(*wfs);
    for (const auto& [n, w] : workflows_) names_.push_back(n);
    cp_ = graph::make_memory_checkpointer();
    graph::RuntimeOptions ro;
    ro.budget = budget_.get();
    ro.artifacts = store_.get();
    ro.max_concurrent_runs = cfg_.max_runs;
    ro.max_queued_runs = cfg_.max_runs;  // runs wait in this class's queue, not the runtime's
    runtime_ = std::make_unique<graph::GraphRuntime>(ro);
    return {};
  }

  std::string description() const override { return "in-process"; }

  Result<std::string> submit(const std::string& workflow, const json::object& input,
                             const std::string& thread_id) override {
    auto it = workflows_.find(workflow);
    if (it == workflows_.end()) return no_workflow(workflow, names_);
    return enqueue(it->second, input, thread_id, std::nullopt);
  }

  Result<std::string> resume(const std::string& thread_id, const json::value& value) override {
    auto cp = interrupted_checkpoint(*cp_, thread_id);
    if (!cp) return std::move(cp).error();
    const auto* wf = cp->metadata.if_contains("workflow");
    const std::string name = wf && wf->is_string() ? std::string(wf->as_string()) : "";
    auto it = workflows_.find(name);
    if (it == workflows_.end())
      return Error(Errc::not_found, "thread '" + thread_id + "' was run by workflow '" + name +
                                        "', which this server does not run");
    return enqueue(it->second, {}, thread_id, value);
  }

  Result<RunRecord> get(const std::string& id) override {
    std::lock_guard lock(mu_);
    auto it = runs_.find(id);
    if (it == runs_.end()) return unknown(id);
    return it->second->rec;
  }

  Result<std::vector<RunRecord>> list(std::size_t limit) override {
    std::lock_guard lock(mu_);
    std::vector<RunRecord> out;
    for (auto it = order_.rbegin(); it != order_.rend() && out.size() < limit; ++it)
      out.push_back(runs_.at(*it)->rec);
    return out;
  }

  Result<RunState> cancel(const std::string& id) override {
    std::lock_guard lock(mu_);
    auto it = runs_.find(id);
    if (it == runs_.end()) return unknown(id);
    Run& r = *it->second;
    if (r.rec.state == RunState::queued) {
      std::erase_if(queue_, [&](const auto& q) { return q.get() == &r; });
      end_locked(r, RunState::cancelled, "", "cancelled", "cancelled before it started");
    } else if (r.rec.state == RunState::running) {
      r.rec.cancel_requested = true;
      r.cancel->store(true);
    }
    return r.rec.state;
  }

  const graph::Checkpointer& checkpointer() const override { return *cp_; }

  void shutdown() override {
    std::unique_lock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& q : queue_)
      end_locked(*q, RunState::cancelled, "", "cancelled",
                 "the server shut down before it started");
    queue_.clear();
    for (auto& [id, r] : runs_)
      if (r->rec.state == RunState::running) {
        r->rec.cancel_requested = true;
        r->cancel->store(true);
      }
    cv_.wait(lock, [&] { return running_ == 0; });
    lock.unlock();
    pool_.join();
    runtime_.reset();
    store_.reset();
    std::error_code ec;
    if (!store_dir_.empty()) fs::remove_all(store_dir_, ec);
  }

 private:
  struct Run {
    RunRecord rec;  // GUARDED_BY(mu_)
    std::shared_ptr<Workflow> wf;
    json::object input;
    std::optional<json::value> resume;
    std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
    Result<graph::RunResult> result = Error(Errc::cancelled, "not run");
  };

  static Error unknown(const std::string& id) {
    return Error(Errc::not_found, "no run '" + id +
                                      "' (finished runs are forgotten after a while: "
                                      "the newest --keep-runs are kept)");
  }

  Result<std::string> enqueue(std::shared_ptr<Workflow> wf, const json::object& input,
                              const std::string& thread_id, std::optional<json::value> resume) {
    auto r = std::make_shared<Run>();
    r->rec.id = "r-" + graph::new_claim_token().substr(0, 16);
    r->rec.thread_id = thread_id.empty() ? r->rec.id : thread_id;
    r->rec.workflow_name = wf->name;
    r->rec.workflow_file = wf->file.string();
    r->rec.input = to_json_text(input);
    if (resume) r->rec.resume = to_json_text(*resume);
    r->rec.max_attempts = 1;
    r->rec.created_ms = now_ms();
    r->wf = std::move(wf);
    r->input = input;
    r->resume = std::move(resume);
    std::lock_guard lock(mu_);
    if (stopping_) return Error(Errc::cancelled, "the server is shutting down");
    if (auto b = busy_threads_.find(r->rec.thread_id); b != busy_threads_.end())
      return Error(Errc::thread_busy, "thread '" + r->rec.thread_id + "' has a run in progress (" +
                                          b->second + "); wait for it to end");
    if (running_ >= cfg_.max_runs && queue_.size() >= cfg_.max_queued_runs)
      return Error(Errc::overloaded,
                   "the run queue is full (" + std::to_string(running_) + " running, " +
                       std::to_string(queue_.size()) +
                       " queued; --max-runs=" + std::to_string(cfg_.max_runs) +
                       ", --max-queued-runs=" + std::to_string(cfg_.max_queued_runs) + ")");
    busy_threads_[r->rec.thread_id] = r->rec.id;
    runs_[r->rec.id] = r;
    order_.push_back(r->rec.id);
    if (running_ < cfg_.max_runs)
      start_locked(r);
    else
      queue_.push_back(r);
    return r->rec.id;
  }

  void start_locked(const std::shared_ptr<Run>& r) {
    ++running_;
    r->rec.state = RunState::running;
    r->rec.attempts = 1;
    r->rec.started_ms = now_ms();
    r->rec.lease_owner = "in-process";
    say(r->rec.id + ": running " + r->wf->name + " on thread " + r->rec.thread_id);
    asio::co_spawn(asio::make_strand(pool_), execute(r), [this, r](std::exception_ptr e) {
      if (e) r->result = Error(Errc::tool_failed, "the run threw an unknown exception");
      finished(r);
    });
  }

  asio::awaitable<void> execute(std::shared_ptr<Run> r) {
    graph::RunOptions o;
    o.checkpointer = cp_.get();
    o.thread_id = r->rec.thread_id;
    o.cancel = r->cancel;
    o.run_id = r->rec.id;
    o.checkpoint_metadata = json::object{{"queue_run", r->rec.id}, {"workflow", r->wf->name}};
    if (r->resume) {
      auto op = runtime_->async_resume(r->wf->built.graph, r->rec.thread_id, std::move(*r->resume),
                                       std::move(o));
      r->result = co_await std::move(op);
    } else {
      auto op = runtime_->async_invoke(r->wf->built.graph, std::move(r->input), std::move(o));
      r->result = co_await std::move(op);
    }
  }

  // On a pool thread, once the run's coroutine returned.
  void finished(const std::shared_ptr<Run>& r) {
    std::lock_guard lock(mu_);
    --running_;
    auto& res = r->result;
    if (res && res->interrupted) {
      json::object out{{"interrupted", res->interrupted_node},
                       {"payload", res->interrupt_payload},
                       {"thread", r->rec.thread_id}};
      end_locked(*r, RunState::interrupted, to_json_text(out), "", "");
    } else if (res) {
      end_locked(*r, RunState::succeeded,
                 to_json_text(r->wf->spec.output_of(std::move(res->state))), "", "");
    } else if (res.error().is(Errc::cancelled) && r->rec.cancel_requested) {
      end_locked(*r, RunState::cancelled, "", "cancelled",
                 "cancelled (" + res.error().message + ")");
    } else {
      end_locked(*r, RunState::failed, "", errc_name(res.error().code), res.error().message);
    }
    res = Error(Errc::cancelled, "ended");  // the state it held is in rec.result now
    while (!stopping_ && running_ < cfg_.max_runs && !queue_.empty()) {
      auto next = std::move(queue_.front());
      queue_.pop_front();
      start_locked(next);
    }
    cv_.notify_all();
  }

  void end_locked(Run& r, RunState state, std::string result, std::string code,
                  std::string message) {
    r.rec.state = state;
    r.rec.result = std::move(result);
    r.rec.error_code = std::move(code);
    r.rec.error = std::move(message);
    r.rec.finished_ms = now_ms();
    r.rec.lease_owner.clear();
    r.input = {};
    if (auto b = busy_threads_.find(r.rec.thread_id);
        b != busy_threads_.end() && b->second == r.rec.id)
      busy_threads_.erase(b);
    say(r.rec.id + ": " + cluster::run_state_name(state) +
        (r.rec.error.empty() ? "" : ": " + r.rec.error));
    done_.push_back(r.rec.id);
    // Forget the oldest finished runs beyond keep_finished, with the threads named after them.
    while (done_.size() > cfg_.keep_finished) {
      const std::string old = std::move(done_.front());
      done_.pop_front();
      auto it = runs_.find(old);
      if (it == runs_.end()) continue;
      if (it->second->rec.thread_id == old && !busy_threads_.count(old))
        (void)cp_->delete_thread(old);
      runs_.erase(it);
      std::erase(order_, old);
    }
  }

  void say(const std::string& line) const {
    if (cfg_.log) cfg_.log(line);
  }

  RunsConfig cfg_;
  std::unique_ptr<MemoryBudget> budget_;
  fs::path store_dir_;
  std::unique_ptr<ArtifactStore> store_;
  inference::EngineRegistry engines_;  // the workflows' local models: one engine per model file
  std::map<std::string, std::shared_ptr<Workflow>> workflows_;
  std::unique_ptr<graph::Checkpointer> cp_;
  std::unique_ptr<graph::GraphRuntime> runtime_;
  asio::thread_pool pool_{2};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                             // GUARDED_BY(mu_)
  std::size_t running_ = 0;                           // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<Run>> runs_;  // GUARDED_BY(mu_)
  std::deque<std::string> order_;                     // GUARDED_BY(mu_): submit order
  std::deque<std::shared_ptr<Run>> queue_;            // GUARDED_BY(mu_)
  std::deque<std::string> done_;                      // GUARDED_BY(mu_): end order
  std::map<std::string, std::string> busy_threads_;   // GUARDED_BY(mu_): thread -> run
};

// --- PostgreSQL ------------------------------------------------------------------------------

class PostgresRuns final : public Runs {
 public:
  explicit PostgresRuns(const RunsConfig& c) : cfg_(c) {}
  ~PostgresRuns() override { shutdown(); }

  Status open() {
    auto wfs = load_workflows(cfg_.workflows, nullptr);
    if (!wfs) return std::move(wfs).error();
    workflows_ = std::move(*wfs);
    for (const auto& [n, w] : workflows_) names_.push_back(n);
    auto q = cluster::RunQueue::open(cfg_.db);
    if (!q) return std::move(q).error();
    queue_ = std::move(*q);
    auto cp = graph::open_postgres_checkpointer(cfg_.db);
    if (!cp) return std::move(cp).error();
    cp_ = std::move(*cp);
    cluster::WorkerOptions wo;
    wo.db = cfg_.db;
    wo.max_runs = cfg_.max_runs;
    wo.memory_limit = cfg_.memory_limit;
    wo.log = cfg_.log;
    worker_ = std::make_unique<cluster::Worker>(std::move(wo));
    worker_thread_ = std::thread([this] {
      if (auto r = worker_->run(); !r && cfg_.log)
        cfg_.log("the embedded worker stopped: " + r.error().message);
    });
    return {};
  }

  std::string description() const override { return queue_->description(); }

  Result<std::string> submit(const std::string& workflow, const json::object& input,
                             const std::string& thread_id) override {
    auto it = workflows_.find(workflow);
    if (it == workflows_.end()) return no_workflow(workflow, names_);
    cluster::SubmitRequest rq;
    rq.workflow = it->second->text;
    rq.workflow_file = it->second->file.string();
    rq.workflow_name = it->second->name;
    rq.input = to_json_text(input);
    rq.thread_id = thread_id;
    return queue(rq);
  }

  Result<std::string> resume(const std::string& thread_id, const json::value& value) override {
    auto cp = interrupted_checkpoint(*cp_, thread_id);
    if (!cp) return std::move(cp).error();
    const std::string by = queue_run_of(*cp);
    if (by.empty())
      return Error(Errc::invalid_argument, "thread '" + thread_id +
                                               "' was not interrupted by a queued run: resume it "
                                               "with 'weir resume' where it ran");
    auto prev = queue_->get(by);
    if (!prev) return std::move(prev).error();
    cluster::SubmitRequest rq;
    rq.workflow = std::move(prev->workflow);
    rq.workflow_file = prev->workflow_file;
    rq.workflow_name = prev->workflow_name;
    rq.thread_id = thread_id;
    rq.resume = to_json_text(value);
    return queue(rq);
  }

  Result<RunRecord> get(const std::string& id) override {
    auto r = queue_->get(id);
    if (r) r->workflow.clear();
    return r;
  }
  Result<std::vector<RunRecord>> list(std::size_t limit) override { return queue_->list(limit); }
  Result<RunState> cancel(const std::string& id) override { return queue_->cancel(id); }
  const graph::Checkpointer& checkpointer() const override { return *cp_; }

  void shutdown() override {
    if (!worker_) return;
    worker_->stop();
    if (worker_thread_.joinable()) worker_thread_.join();
    worker_.reset();
  }

 private:
  Result<std::string> queue(const cluster::SubmitRequest& rq) {
    auto queued = queue_->count(RunState::queued);
    if (!queued) return std::move(queued).error();
    if (*queued >= cfg_.max_queued_runs)
      return Error(Errc::overloaded,
                   "the run queue is full (" + std::to_string(*queued) + " runs queued in " +
                       queue_->description() +
                       "; --max-queued-runs=" + std::to_string(cfg_.max_queued_runs) + ")");
    return queue_->submit(rq);
  }

  RunsConfig cfg_;
  std::map<std::string, std::shared_ptr<Workflow>> workflows_;
  std::unique_ptr<cluster::RunQueue> queue_;
  std::unique_ptr<graph::Checkpointer> cp_;
  std::unique_ptr<cluster::Worker> worker_;
  std::thread worker_thread_;
};

}  // namespace

Result<std::unique_ptr<Runs>> Runs::open(const RunsConfig& config) {
  if (config.max_runs < 1) return Error(Errc::invalid_argument, "--max-runs must be at least 1");
  if (config.db.empty()) {
    auto r = std::make_unique<LocalRuns>(config);
    if (auto s = r->open(); !s) return std::move(s).error();
    return std::unique_ptr<Runs>(std::move(r));
  }
  auto r = std::make_unique<PostgresRuns>(config);
  if (auto s = r->open(); !s) return std::move(s).error();
  return std::unique_ptr<Runs>(std::move(r));
}

}  // namespace weir::serve
