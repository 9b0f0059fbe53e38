// The run service's in-process backend (run_service.hpp): a bounded queue in front of the one
// executor (run_executor.hpp), a memory checkpointer, records in memory. A queued run is in one
// of three places: queue_ (it holds its thread and waits for a slot), waiting_ (behind its
// thread's run: RunRequest::enqueue) or delayed_ (it holds its thread and waits for its
// RunRequest::delay, on a timer of timers_; no slot is taken meanwhile).
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json.hpp>

#include "run_executor.hpp"
#include "run_service_impl.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/events.hpp"
#include "weir/runtime/json_write.hpp"

namespace weir::cluster {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class LocalRuns final : public RunService {
 public:
  explicit LocalRuns(RunServiceOptions o) : cfg_(std::move(o)) {}
  ~LocalRuns() override { shutdown(); }

  Status open() {
    if (auto s = load_folder(cfg_, folder_, names_, specs_); !s) return s;
    auto ex = RunExecutor::open({cfg_.max_runs, cfg_.memory_limit, "runs", cfg_.graphs});
    if (!ex) return std::move(ex).error();
    executor_ = std::move(*ex);
    // The folder's workflows are built now: one that does not build refuses the start.
    for (const auto& [n, w] : folder_) {
      auto built = executor_->workflow(record_of(*w));
      if (!built)
        return Error(built.error().code, "--workflows: " + w->file + ": " + built.error().message);
      built_[w->sha256] = std::move(*built);
      files_[w->sha256] = w;
    }
    graph::MemoryCheckpointerOptions co;
    co.max_bytes = cfg_.checkpoint_bytes;
    co.max_thread_bytes = cfg_.checkpoint_bytes / 4;  // one thread cannot starve the others
    co.budget = cfg_.checkpoint_budget;
    cp_ = graph::make_memory_checkpointer(co);
    return {};
  }

  std::string description() const override { return "in-process"; }
  std::optional<Counts> counts() const override {
    std::lock_guard lock(mu_);
    return Counts{queue_.size() + waiting_count_, running_, delayed_.size()};
  }

  Result<RunRecord> submit(RunRequest rq) override {
    auto wf = resolve_request(rq, folder_, names_);
    if (!wf) return std::move(wf).error();
    RunRecord rec = record_of(**wf);
    rec.input = to_json_text(rq.input);
    rec.thread_id = rq.thread_id;
    rec.traceparent = run_traceparent(rq.traceparent);
    rec.controls = controls_text(rq.controls);
    return enqueue(std::move(rec), *wf, rq.enqueue, rq.delay);
  }

  Result<RunRecord> resume(const std::string& thread_id, json::value value, std::string traceparent,
                           RunControls controls) override {
    auto cp = interrupted_checkpoint(*cp_, thread_id);
    if (!cp) return std::move(cp).error();
    // The workflow of the run that paused the thread (by its text's hash: the run may be
    // forgotten, its workflow is the folder's or was given by file).
    const auto* sha = cp->metadata.if_contains("workflow_sha256");
    const auto* file = cp->metadata.if_contains("workflow");
    std::shared_ptr<const WorkflowFile> wf;
    {
      std::lock_guard lock(mu_);
      if (sha && sha->is_string()) {
        if (auto it = files_.find(std::string(sha->as_string())); it != files_.end())
          wf = it->second;
      }
    }
    if (!wf)
      return Error(Errc::not_found,
                   "thread '" + thread_id + "' was run by workflow " +
                       (file && file->is_string() ? "'" + std::string(file->as_string()) + "'"
                                                  : std::string("(unknown)")) +
                       ", which this server does not run");
    if (auto s = check_controls(*wf->spec, controls); !s) return std::move(s).error();
    RunRecord rec = record_of(*wf);
    rec.input = "{}";
    rec.resume = to_json_text(value);
    rec.thread_id = thread_id;
    rec.traceparent = run_traceparent(traceparent);
    rec.controls = controls_text(controls);
    return enqueue(std::move(rec), wf, false, std::chrono::milliseconds(0));
  }

  Result<RunRecord> get(std::string_view id) override {
    std::lock_guard lock(mu_);
    auto it = runs_.find(std::string(id));
    if (it == runs_.end()) return unknown(id);
    return it->second->rec;
  }

  Result<RunList> list(const RunListQuery& q) override {
    std::lock_guard lock(mu_);
    RunList out;
    auto it = order_.rbegin();
    if (!q.after.empty()) {
      it = std::find(order_.rbegin(), order_.rend(), q.after);
      if (it == order_.rend()) return unknown(q.after);
      ++it;
    }
    for (; it != order_.rend(); ++it) {
      const RunRecord& r = runs_.at(*it)->rec;
      if (q.state && r.state != *q.state) continue;
      if (out.runs.size() == q.limit) {
        out.has_more = true;
        break;
      }
      out.runs.push_back(r);
    }
    return out;
  }

  Result<CancelOutcome> cancel(std::string_view id) override {
    CancelOutcome out;
    {
      std::lock_guard lock(mu_);
      auto it = runs_.find(std::string(id));
      if (it == runs_.end()) return unknown(id);
      Run& r = *it->second;
      out.before = r.rec;
      if (r.rec.state == RunState::queued) {
        std::erase_if(queue_, [&](const auto& q) { return q.get() == &r; });
        std::erase_if(delayed_, [&](const auto& q) { return q.get() == &r; });
        disarm_locked(r);
        if (auto w = waiting_.find(r.rec.thread_id); w != waiting_.end()) {
          waiting_count_ -= std::erase_if(w->second, [&](const auto& q) { return q.get() == &r; });
          if (w->second.empty()) waiting_.erase(w);
        }
        end_locked(r, RunState::cancelled, "", "cancelled", "cancelled before it started");
        start_queued_locked();
      } else if (r.rec.state == RunState::running) {
        r.rec.cancel_requested = true;
        r.control.stop(r.control.user_cancel);
      }
      out.after = r.rec;
    }
    watches_.notify(std::string(id));
    return out;
  }

  const graph::Checkpointer& checkpointer() const override { return *cp_; }

  Result<std::optional<std::string>> active_run(const std::string& thread) override {
    std::lock_guard lock(mu_);
    auto b = busy_threads_.find(thread);
    if (b == busy_threads_.end() || !runs_.count(b->second)) return std::optional<std::string>();
    return std::optional<std::string>(b->second);
  }

 protected:
  graph::Checkpointer& writable_checkpointer() override { return *cp_; }
  Result<std::shared_ptr<void>> hold_thread(const std::string& thread) override {
    std::lock_guard lock(mu_);
    if (stopping_) return Error(Errc::cancelled, "the server is shutting down");
    if (auto b = busy_threads_.find(thread); b != busy_threads_.end())
      return Error(Errc::thread_busy, "thread '" + thread + "' has a run in progress (" +
                                          b->second + "); wait for it to end");
    busy_threads_[thread] = "a change of its state";
    return std::shared_ptr<void>(nullptr, [this, thread](void*) {
      std::lock_guard lock(mu_);
      busy_threads_.erase(thread);
    });
  }

 public:
  std::unique_ptr<RunWatch> watch(std::string run_id, std::function<void()> on_change) override {
    return watches_.add(std::move(run_id), std::move(on_change));
  }

  std::unique_ptr<RunWatch> watch_text(
      std::string run_id, std::function<void(const graph::MessageText&)> on_text) override {
    std::shared_ptr<Run> r;
    {
      std::lock_guard lock(mu_);
      if (auto it = runs_.find(run_id); it != runs_.end()) r = it->second;
    }
    if (!r) return watches_.add_text(std::move(run_id), std::move(on_text));
    // The text so far first, then every piece after it: no piece between the two is missed.
    std::lock_guard lock(r->text_mu);
    for (const auto& [id, t] : r->generating)
      if (t.offset == 0 && t.text.size() < kMaxText) on_text(t);
    return watches_.add_text(std::move(run_id), std::move(on_text));
  }

  void shutdown() override {
    std::unique_lock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    auto waiting = std::move(waiting_);
    waiting_.clear();
    waiting_count_ = 0;
    for (auto& q : queue_)
      end_locked(*q, RunState::cancelled, "", "cancelled",
                 "the server shut down before it started");
    queue_.clear();
    auto delayed = std::move(delayed_);
    delayed_.clear();
    for (auto& q : delayed)
      end_locked(*q, RunState::cancelled, "", "cancelled",
                 "the server shut down before it started");
    for (auto& [id, r] : runs_) disarm_locked(*r);  // the pool's join waits for no timer
    for (auto& [thread, runs] : waiting)
      for (auto& q : runs)
        end_locked(*q, RunState::cancelled, "", "cancelled",
                   "the server shut down before it started");
    for (auto& [id, r] : runs_)
      if (r->rec.state == RunState::running) {
        r->rec.cancel_requested = true;
        r->control.stop(r->control.user_cancel);
      }
    cv_.wait(lock, [&] { return running_ == 0; });
    lock.unlock();
    watches_.notify_all();
    pool_.join();
    built_.clear();
    executor_.reset();
  }

 private:
  struct Run {
    RunRecord rec;  // GUARDED_BY(mu_)
    std::shared_ptr<const WorkflowFile> wf;
    std::shared_ptr<const BuiltWorkflow> built;
    RunControl control;
    // Its delay has passed (or it had none): a queued run may start. GUARDED_BY(mu_)
    bool due = true;
    // The delay's timer while it runs; used on timers_ only. GUARDED_BY(mu_)
    std::shared_ptr<asio::steady_timer> timer;
    // Its nodes' message text, to the text watches (watch_text); set when it starts.
    std::function<void(const graph::MessageText&)> on_text;
    // The text of the messages its nodes are generating now (the step's), which watch_text
    // gives a watcher that comes late first; a message stops growing here at kMaxText.
    std::mutex text_mu;
    std::map<std::string, graph::MessageText> generating;  // GUARDED_BY(text_mu)
  };
  static constexpr std::size_t kMaxText = std::size_t{1} << 20;

  static Error unknown(std::string_view id) {
    return Error(Errc::not_found, "no run '" + std::string(id) +
                                      "' (finished runs are forgotten after a while: "
                                      "the newest --keep-runs are kept)");
  }

  static RunRecord record_of(const WorkflowFile& wf) {
    RunRecord rec;
    rec.workflow_name = wf.name;
    rec.workflow_file = wf.file;
    rec.workflow_sha256 = wf.sha256;
    rec.workflow = wf.text;
    return rec;
  }

  // `behind`: on a busy thread, wait for its run (RunRequest::enqueue) instead of thread_busy.
  // `delay`: RunRequest::delay.
  Result<RunRecord> enqueue(RunRecord rec, std::shared_ptr<const WorkflowFile> wf, bool behind,
                            std::chrono::milliseconds delay) {
    std::shared_ptr<const BuiltWorkflow> built;
    {
      std::lock_guard lock(mu_);
      if (auto it = built_.find(wf->sha256); it != built_.end()) built = it->second;
    }
    if (!built) {  // a file given with the request: built once, kept for its resumes
      auto b = executor_->workflow(rec);
      if (!b) return std::move(b).error();
      built = std::move(*b);
    }
    rec.workflow.clear();
    auto r = std::make_shared<Run>();
    r->rec = std::move(rec);
    r->rec.id = "r-" + graph::new_claim_token().substr(0, 16);
    if (r->rec.thread_id.empty()) r->rec.thread_id = r->rec.id;
    r->rec.max_attempts = 1;
    r->rec.created_ms = now_ms();
    r->wf = std::move(wf);
    r->built = built;
    r->due = delay.count() <= 0;
    std::lock_guard lock(mu_);
    if (stopping_) return Error(Errc::cancelled, "the server is shutting down");
    const auto b = busy_threads_.find(r->rec.thread_id);
    if (b != busy_threads_.end() && !behind)
      return Error(Errc::thread_busy, "thread '" + r->rec.thread_id + "' has a run in progress (" +
                                          b->second + "); wait for it to end");
    const std::size_t queued = queue_.size() + waiting_count_ + delayed_.size();
    // A delayed run waits in the queue whatever slots are free.
    if ((running_ >= cfg_.max_runs || !r->due) && queued >= cfg_.max_queued_runs)
      return Error(Errc::overloaded,
                   "the run queue is full (" + std::to_string(running_) + " running, " +
                       std::to_string(queued) +
                       " queued; --max-runs=" + std::to_string(cfg_.max_runs) +
                       ", --max-queued-runs=" + std::to_string(cfg_.max_queued_runs) + ")");
    remember_locked(r->wf, built);
    runs_[r->rec.id] = r;
    order_.push_back(r->rec.id);
    if (!r->due) arm_locked(r, delay);
    if (b != busy_threads_.end()) {  // enqueued behind the thread's run
      waiting_[r->rec.thread_id].push_back(r);
      ++waiting_count_;
      return r->rec;
    }
    busy_threads_[r->rec.thread_id] = r->rec.id;
    if (!r->due)
      delayed_.push_back(r);
    else if (running_ < cfg_.max_runs)
      start_locked(r);
    else
      queue_.push_back(r);
    return r->rec;
  }

  void start_locked(const std::shared_ptr<Run>& r) {
    ++running_;
    r->rec.state = RunState::running;
    r->rec.attempts = 1;
    r->rec.started_ms = now_ms();
    r->rec.lease_owner = "in-process";
    say(r->rec.id + ": running " + r->rec.workflow_name + " on thread " + r->rec.thread_id);
    auto strand = asio::make_strand(pool_);
    // The run's events tell its watchers when a step was committed (run_service.hpp).
    auto events = std::make_shared<graph::EventStream>(64);
    asio::co_spawn(strand, follow(events, r->rec.id), [this](std::exception_ptr e) {
      if (e) say("an event stream's follower stopped on an exception");
    });
    RunEnv env;
    env.checkpointer = cp_.get();
    env.token = graph::new_claim_token();
    env.control = &r->control;
    env.events = events;
    r->on_text = [this, run = r.get(), id = r->rec.id](const graph::MessageText& t) {
      std::lock_guard lock(run->text_mu);
      auto& g = run->generating;
      for (auto it = g.begin(); it != g.end();)  // an earlier step's messages are whole now
        it = it->second.step < t.step ? g.erase(it) : std::next(it);
      auto [at, added] = g.try_emplace(t.message_id, t);
      if (!added && at->second.text.size() < kMaxText) at->second.text += t.text;
      watches_.notify_text(id, t);
    };
    env.on_message_text = &r->on_text;
    env.drain_reason = "the server shut down";
    env.tracer = cfg_.tracer;
    asio::co_spawn(strand, executor_->async_execute(r->rec, r->built, std::move(env)),
                   [this, r, events](std::exception_ptr e, RunEnding ending) {
                     events->close();
                     if (e) {
                       ending = RunEnding{};
                       ending.error_code = "tool_failed";
                       ending.error = "the run threw an unknown exception";
                     }
                     finished(r, std::move(ending));
                   });
    watches_.notify(r->rec.id);
  }

  // Wakes the run's watchers when a step was committed: each superstep's node_started events
  // follow the previous step's checkpoint, and the run's last event its last checkpoint.
  asio::awaitable<void> follow(std::shared_ptr<graph::EventStream> events, std::string run_id) {
    using graph::EventKind;
    while (auto e = co_await events->async_next()) {
      if (e->kind == EventKind::node_started || e->kind == EventKind::run_finished ||
          e->kind == EventKind::run_failed || e->kind == EventKind::run_interrupted)
        watches_.notify(run_id);
    }
  }

  // On a pool thread, once the run's coroutine returned.
  void finished(const std::shared_ptr<Run>& r, RunEnding ending) {
    {
      std::lock_guard lock(r->text_mu);
      r->generating.clear();
    }
    {
      std::lock_guard lock(mu_);
      --running_;
      if (ending.kind == RunEnding::Kind::record) {
        end_locked(*r, ending.state, std::move(ending.result), std::move(ending.error_code),
                   std::move(ending.error));
        if (!ending.why.empty()) say(r->rec.id + ": " + ending.why);
      } else {  // in-process nothing else holds a thread: say why the run did not run
        end_locked(*r, RunState::failed, "", "thread_busy", ending.why);
      }
      start_queued_locked();
    }
    cv_.notify_all();
    watches_.notify(r->rec.id);
  }

  void start_queued_locked() {
    while (!stopping_ && running_ < cfg_.max_runs && !queue_.empty()) {
      auto next = std::move(queue_.front());
      queue_.pop_front();
      start_locked(next);
    }
  }

  void end_locked(Run& r, RunState state, std::string result, std::string code,
                  std::string message) {
    r.rec.state = state;
    r.rec.result = std::move(result);
    r.rec.error_code = std::move(code);
    r.rec.error = std::move(message);
    r.rec.finished_ms = now_ms();
    r.rec.lease_owner.clear();
    r.built.reset();  // the graph goes with the last run of it (it holds the executor's store)
    if (auto b = busy_threads_.find(r.rec.thread_id);
        b != busy_threads_.end() && b->second == r.rec.id) {
      busy_threads_.erase(b);
      // The run enqueued first behind it takes the thread (started by start_queued_locked).
      if (auto w = waiting_.find(r.rec.thread_id); w != waiting_.end()) {
        auto next = std::move(w->second.front());
        w->second.pop_front();
        --waiting_count_;
        if (w->second.empty()) waiting_.erase(w);
        busy_threads_[next->rec.thread_id] = next->rec.id;
        (next->due ? queue_ : delayed_).push_back(std::move(next));
      }
    }
    say(r.rec.id + ": " + run_state_name(state) + (r.rec.error.empty() ? "" : ": " + r.rec.error));
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

  // Starts r's delay: when it passed, r is due, and moves from delayed_ to a slot or queue_ (in
  // waiting_ it stays behind its thread's run). The timer's calls are made on timers_ (a timer
  // is not thread-safe); its handler holds r weakly, so a forgotten run is not kept.
  void arm_locked(const std::shared_ptr<Run>& r, std::chrono::milliseconds delay) {
    auto t = std::make_shared<asio::steady_timer>(timers_);
    r->timer = t;
    std::weak_ptr<Run> weak = r;
    asio::post(timers_, [this, t, delay, weak] {
      t->expires_after(delay);
      t->async_wait([this, t, weak](const boost::system::error_code& ec) {
        if (ec) return;  // cancelled (the run was, or the service stops)
        auto run = weak.lock();
        if (!run) return;
        std::lock_guard lock(mu_);
        if (run->timer == t) run->timer.reset();
        run->due = true;
        if (stopping_ || run->rec.state != RunState::queued) return;
        auto it = std::find(delayed_.begin(), delayed_.end(), run);
        if (it == delayed_.end()) return;  // in waiting_: it starts after the run before it
        delayed_.erase(it);
        if (running_ < cfg_.max_runs)
          start_locked(run);
        else
          queue_.push_back(run);
      });
    });
  }

  // Stops r's delay timer, if it has one (the handler then does nothing).
  void disarm_locked(Run& r) {
    if (!r.timer) return;
    asio::post(timers_, [t = std::move(r.timer)] { t->cancel(); });
    r.timer.reset();
  }

  // A workflow a request gave by file, kept (with the last kFilesKept others) for the resumes
  // of its threads; the folder's are kept for good.
  void remember_locked(const std::shared_ptr<const WorkflowFile>& wf,
                       const std::shared_ptr<const BuiltWorkflow>& built) {
    if (files_.count(wf->sha256)) return;
    constexpr std::size_t kFilesKept = 32;
    if (given_.size() >= kFilesKept) {
      built_.erase(given_.front());
      files_.erase(given_.front());
      given_.pop_front();
    }
    built_.emplace(wf->sha256, built);
    files_.emplace(wf->sha256, wf);
    given_.push_back(wf->sha256);
  }

  void say(const std::string& line) const {
    if (cfg_.log) cfg_.log(line);
  }

  RunServiceOptions cfg_;
  std::map<std::string, std::shared_ptr<const WorkflowFile>> folder_;  // read-only after open
  std::unique_ptr<RunExecutor> executor_;
  std::unique_ptr<graph::Checkpointer> cp_;
  WatchRegistry watches_;
  asio::thread_pool pool_{2};
  asio::strand<asio::thread_pool::executor_type> timers_{asio::make_strand(pool_)};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Built workflows and their files by SHA-256: the folder's, and those runs gave by file (kept
  // for their threads' resumes).
  std::map<std::string, std::shared_ptr<const BuiltWorkflow>> built_;  // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<const WorkflowFile>> files_;   // GUARDED_BY(mu_)
  std::deque<std::string> given_;  // GUARDED_BY(mu_): the files' hashes, oldest first
  bool stopping_ = false;          // GUARDED_BY(mu_)
  std::size_t running_ = 0;        // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<Run>> runs_;  // GUARDED_BY(mu_)
  std::deque<std::string> order_;                     // GUARDED_BY(mu_): submit order
  std::deque<std::shared_ptr<Run>> queue_;            // GUARDED_BY(mu_)
  // Runs that hold their thread and wait for their delay (RunRequest::delay), oldest first.
  std::deque<std::shared_ptr<Run>> delayed_;  // GUARDED_BY(mu_)
  // Runs enqueued behind a thread's run (RunRequest::enqueue), by thread, oldest first; one
  // moves to queue_ when the thread's run ends.
  std::map<std::string, std::deque<std::shared_ptr<Run>>> waiting_;  // GUARDED_BY(mu_)
  std::size_t waiting_count_ = 0;                                    // GUARDED_BY(mu_)
  std::deque<std::string> done_;                                     // GUARDED_BY(mu_): end order
  std::map<std::string, std::string> busy_threads_;  // GUARDED_BY(mu_): thread -> run
};

}  // namespace

Result<std::unique_ptr<RunService>> open_local_runs(RunServiceOptions options) {
  auto r = std::make_unique<LocalRuns>(std::move(options));
  if (auto s = r->open(); !s) return std::move(s).error();
  return std::unique_ptr<RunService>(std::move(r));
}

}  // namespace weir::cluster
