// The run service's PostgreSQL backend (run_service.hpp): runs queued in weir_runs (RunQueue),
// an embedded Worker, and one watcher thread per service that looks at every watched run in one
// query.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/json.hpp>

#include "run_service_impl.hpp"
#include "text_notify.hpp"
#include "weir/cluster/worker.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/pg/connection.hpp"
#include "weir/runtime/json_write.hpp"

namespace weir::cluster {

namespace json = boost::json;

namespace {

class PostgresRuns final : public RunService {
 public:
  explicit PostgresRuns(RunServiceOptions o) : cfg_(std::move(o)) {}
  ~PostgresRuns() override { shutdown(); }

  Status open() {
    if (auto s = load_folder(cfg_, folder_, names_, specs_); !s) return s;
    auto q = RunQueue::open(cfg_.db);
    if (!q) return std::move(q).error();
    queue_ = std::move(*q);
    auto cp = graph::open_postgres_checkpointer(cfg_.db);
    if (!cp) return std::move(cp).error();
    cp_ = std::move(*cp);
    text_.start();  // listening before the first run generates, so that no first piece is missed
    if (cfg_.max_runs > 0) {
      WorkerOptions wo;
      wo.db = cfg_.db;
      wo.max_runs = cfg_.max_runs;
      wo.memory_limit = cfg_.memory_limit;
      wo.lease = cfg_.lease;
      wo.log = cfg_.log;
      wo.tracer = cfg_.tracer;
      wo.graphs = cfg_.graphs;
      worker_ = std::make_unique<Worker>(std::move(wo));
      worker_thread_ = std::thread([this] {
        if (auto r = worker_->run(); !r) say("the embedded worker stopped: " + r.error().message);
      });
    }
    return {};
  }

  std::string description() const override { return queue_->description(); }

  Result<RunRecord> submit(RunRequest rq) override {
    auto wf = resolve_request(rq, folder_, names_);
    if (!wf) return std::move(wf).error();
    SubmitRequest s;
    s.workflow = (*wf)->text;
    s.workflow_file = (*wf)->file;
    s.workflow_name = (*wf)->name;
    s.input = to_json_text(rq.input);
    s.thread_id = rq.thread_id;
    if (rq.max_attempts > 0) s.max_attempts = rq.max_attempts;
    s.traceparent = run_traceparent(rq.traceparent);
    s.enqueue = rq.enqueue;
    s.controls = controls_text(rq.controls);
    s.delay = rq.delay;
    return queue(s);
  }

  Result<RunRecord> resume(const std::string& thread_id, json::value value, std::string traceparent,
                           RunControls controls) override {
    auto cp = interrupted_checkpoint(*cp_, thread_id);
    if (!cp) return std::move(cp).error();
    const auto* by = cp->metadata.if_contains("queue_run");
    if (!by) by = cp->metadata.if_contains("branched_from_run");  // a state update or fork
    if (!by || !by->is_string())
      return Error(Errc::invalid_argument, "thread '" + thread_id +
                                               "' was not interrupted by a queued run: resume it "
                                               "with 'weir resume' where it ran");
    auto prev = queue_->get(by->as_string());
    if (!prev) return std::move(prev).error();
    if (!controls.interrupt_before.empty() || !controls.interrupt_after.empty() ||
        controls.recursion_limit > 0 || !controls.go_to.empty() || !controls.go_to_sends.empty()) {
      std::shared_ptr<const graph::WorkflowSpec> spec;
      if (cpp_graph_name(prev->workflow)) {
        spec = workflow(prev->workflow_name);  // a C++ graph: this service's, when it has it
      } else {
        auto w = load_workflow_file(prev->workflow_file, prev->workflow);
        if (!w) return std::move(w).error();
        spec = (*w)->spec;
      }
      if (spec)
        if (auto c = check_controls(*spec, controls); !c) return std::move(c).error();
    }
    SubmitRequest s;
    s.workflow = std::move(prev->workflow);
    s.workflow_file = prev->workflow_file;
    s.workflow_name = prev->workflow_name;
    s.thread_id = thread_id;
    s.resume = to_json_text(value);
    s.traceparent = run_traceparent(traceparent);
    s.controls = controls_text(controls);
    return queue(s);
  }

  Result<RunRecord> get(std::string_view id) override {
    auto r = queue_->get(id);
    if (r) r->workflow.clear();
    return r;
  }

  Result<RunList> list(const RunListQuery& q) override {
    if (!q.after.empty()) {
      if (auto a = queue_->get(q.after); !a) return std::move(a).error();
    }
    auto runs = queue_->list(q.limit + 1, q.state, q.after);
    if (!runs) return std::move(runs).error();
    RunList out;
    out.has_more = runs->size() > q.limit;
    if (out.has_more) runs->pop_back();
    out.runs = std::move(*runs);
    return out;
  }

  Result<CancelOutcome> cancel(std::string_view id) override {
    CancelOutcome out;
    auto before = get(id);
    if (!before) return std::move(before).error();
    out.before = std::move(*before);
    auto st = queue_->cancel(id);
    if (!st) return std::move(st).error();
    auto after = get(id);
    if (!after) return std::move(after).error();
    out.after = std::move(*after);
    watches_.notify(std::string(id));
    return out;
  }

  const graph::Checkpointer& checkpointer() const override { return *cp_; }

  Result<std::optional<std::string>> active_run(const std::string& thread) override {
    return queue_->unfinished_on(thread);
  }

 protected:
  graph::Checkpointer& writable_checkpointer() override { return *cp_; }
  // A run queued later waits for the claim the caller takes next (its worker retries).
  Result<std::shared_ptr<void>> hold_thread(const std::string& thread) override {
    auto r = active_run(thread);
    if (!r) return std::move(r).error();
    if (*r)
      return Error(Errc::thread_busy, "thread '" + thread + "' has a run in progress (" + **r +
                                          "); wait for it to end");
    return std::shared_ptr<void>();
  }

 public:
  // Text from the workers' TextPublisher, heard by one listener (text_notify.hpp).
  std::unique_ptr<RunWatch> watch_text(
      std::string run_id, std::function<void(const graph::MessageText&)> on_text) override {
    auto w = watches_.add_text(std::move(run_id), std::move(on_text));
    text_.start();
    return w;
  }

  std::unique_ptr<RunWatch> watch(std::string run_id, std::function<void()> on_change) override {
    auto w = watches_.add(std::move(run_id), std::move(on_change));
    std::lock_guard lock(watch_mu_);
    if (!watcher_.joinable() && !watch_stop_) watcher_ = std::thread([this] { look(); });
    watch_cv_.notify_all();
    return w;
  }

  void shutdown() override {
    {
      std::lock_guard lock(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    if (!worker_) return;
    worker_->stop();
    if (worker_thread_.joinable()) worker_thread_.join();
    worker_.reset();
  }

 private:
  Result<RunRecord> queue(const SubmitRequest& s) {
    auto queued = queue_->count(RunState::queued);
    if (!queued) return std::move(queued).error();
    if (*queued >= cfg_.max_queued_runs)
      return Error(Errc::overloaded,
                   "the run queue is full (" + std::to_string(*queued) + " runs queued in " +
                       queue_->description() +
                       "; --max-queued-runs=" + std::to_string(cfg_.max_queued_runs) + ")");
    auto id = queue_->submit(s);
    if (!id) return std::move(id).error();
    return get(*id);
  }

  // The watcher thread: while anything is watched, every watch_interval one query reads each
  // watched run's state and attempts and its thread's version; a run whose triple moved (or is
  // seen for the first time) wakes its watchers. A failing query wakes them all: each then reads
  // the store itself and meets the error.
  void look() {
    std::optional<pg::Connection> conn;
    std::map<std::string, std::string> seen;  // run id -> "state attempts version"
    std::unique_lock lock(watch_mu_);
    while (!watch_stop_) {
      auto ids = watches_.watched();
      if (ids.empty()) {
        seen.clear();
        watch_cv_.wait_for(lock, std::chrono::seconds(1));
        continue;
      }
      lock.unlock();
      look_once(conn, ids, seen);
      lock.lock();
      watch_cv_.wait_for(lock, cfg_.watch_interval, [&] { return watch_stop_; });
    }
  }

  void look_once(std::optional<pg::Connection>& conn, const std::vector<std::string>& ids,
                 std::map<std::string, std::string>& seen) {
    if (!conn) {
      auto c = pg::Connection::open(cfg_.db);
      if (!c) {
        say("watching runs: " + c.error().message);
        watches_.notify_all();
        return;
      }
      conn.emplace(std::move(*c));
    }
    // Run ids are "r-" and hex digits (RunQueue::submit), so a comma joins them safely.
    std::string list;
    for (const auto& id : ids) {
      if (id.find(',') != std::string::npos) continue;
      list += (list.empty() ? "" : ",") + id;
    }
    auto r = conn->exec(
        "SELECT r.id, r.state || ' ' || r.attempts || ' ' || coalesce(t.updated_seq, 0) "
        "FROM weir_runs r LEFT JOIN weir_threads t ON t.thread_id = r.thread_id "
        "WHERE r.id = ANY (string_to_array($1, ','))",
        pg::Params().text(list), "watching runs");
    if (!r) {
      say(r.error().message);
      watches_.notify_all();
      return;
    }
    std::map<std::string, std::string> now;
    for (int i = 0; i < r->size(); ++i) now.emplace(r->text(i, 0), r->text(i, 1));
    for (const auto& [id, key] : now) {
      auto it = seen.find(id);
      if (it != seen.end() && it->second == key) continue;
      seen[id] = key;
      watches_.notify(id);
    }
    std::erase_if(seen, [&](const auto& kv) { return !now.count(kv.first); });
  }

  void say(const std::string& line) const {
    if (cfg_.log) cfg_.log(line);
  }

  RunServiceOptions cfg_;
  std::map<std::string, std::shared_ptr<const WorkflowFile>> folder_;
  std::unique_ptr<RunQueue> queue_;
  std::unique_ptr<graph::Checkpointer> cp_;
  std::unique_ptr<Worker> worker_;
  std::thread worker_thread_;
  WatchRegistry watches_;
  TextListener text_{cfg_.db,
                     [this](const std::string& run, const graph::MessageText& t) {
                       // "<run>.<attempt>" (the worker's): the watches are the run's; t.run_id
                       // keeps it whole.
                       watches_.notify_text(run.substr(0, run.rfind('.')), t);
                     },
                     [this](const std::string& line) { say(line); }};
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;  // GUARDED_BY(watch_mu_)
  std::thread watcher_;      // started by the first watch
};

}  // namespace

Result<std::map<std::string, std::string>> threads_with_unfinished_runs(std::string_view db) {
  auto c = pg::Connection::open(db);
  if (!c) return std::move(c).error();
  const char* what = "looking for unfinished runs";
  auto exists = c->exec("SELECT to_regclass('weir_runs') IS NOT NULL", pg::Params(), what);
  if (!exists) return std::move(exists).error();
  std::map<std::string, std::string> out;
  if (!exists->boolean(0, 0)) return out;
  auto r = c->exec(
      "SELECT thread_id, id, state FROM weir_runs WHERE state IN ('queued', 'running') "
      "ORDER BY created_at, seq",
      pg::Params(), what);
  if (!r) return std::move(r).error();
  for (int i = 0; i < r->size(); ++i)
    out.emplace(std::string(r->text(i, 0)), "run " + std::string(r->text(i, 1)) + " is " +
                                                std::string(r->text(i, 2)) + " on it");
  return out;
}

Result<std::unique_ptr<RunService>> open_postgres_runs(RunServiceOptions options) {
  auto r = std::make_unique<PostgresRuns>(std::move(options));
  if (auto s = r->open(); !s) return std::move(s).error();
  return std::unique_ptr<RunService>(std::move(r));
}

}  // namespace weir::cluster
