// The worker's loop: one control thread (claims, lease renewals, notifications, reaping) and a
// thread pool on which the runs' coroutines execute.
#include "weir/cluster/worker.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json.hpp>

#include "pg.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::cluster {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A workflow built once per worker and text hash; shared by every run of it.
struct BuiltWorkflow {
  graph::WorkflowSpec spec;  // the graph's nodes point into it: declared first, dies last
  graph::WorkflowGraph built;
};

// A run this worker holds, from claim until the control thread reaps it.
struct Held {
  RunRecord rec;  // workflow text dropped once built
  std::string token;
  std::shared_ptr<BuiltWorkflow> wf;
  std::unique_ptr<graph::Checkpointer> cp;  // its own connection while it runs; thread-safe
  json::object input;
  std::optional<json::value> resume;  // set: the run resumes its interrupted thread with it
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> user_cancel{false}, lost{false}, draining{false}, done{false};
  // Set first thing in end(): the run's coroutine returned and its end is being recorded, so a
  // renewal that finds the run no longer held may be seeing that very record.
  std::atomic<bool> ending{false};
  Result<graph::RunResult> result = Error(Errc::cancelled, "not run");
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

struct Worker::Impl {
  WorkerOptions opt;
  int wake_fd = -1;  // eventfd: a run ended, or stop()
  std::atomic<bool> stopping{false};

  std::string owner;
  std::unique_ptr<RunQueue> queue;
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<ArtifactStore> store;
  fs::path store_dir;
  std::unique_ptr<graph::GraphRuntime> runtime;
  inference::EngineRegistry engines;  // the workflows' local models: one engine per model file
  std::map<std::string, std::shared_ptr<BuiltWorkflow>> workflows;  // by sha256; control thread
  // Checkpointers of ended runs, each with its open connection, for the next runs (at most
  // max_runs): a new connection costs PostgreSQL a backend start and cold catalog caches, about
  // half its CPU per five-step run (bench/scaleout). Control thread only (start(), reap()).
  std::vector<std::unique_ptr<graph::Checkpointer>> idle_checkpointers;

  std::mutex mu;
  std::map<std::string, std::shared_ptr<Held>> held;  // GUARDED_BY(mu); erased by reap() only
  WorkerStats stats;                                  // GUARDED_BY(mu)

  void say(const std::string& line) const {
    if (opt.log) opt.log(line);
  }
  void wake() const {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }
  void count(std::size_t WorkerStats::*field) {
    std::lock_guard lock(mu);
    ++(stats.*field);
  }

  Result<std::shared_ptr<BuiltWorkflow>> workflow(const RunRecord& rec) {
    if (auto it = workflows.find(rec.workflow_sha256); it != workflows.end()) return it->second;
    auto load = graph::load_workflow_text(rec.workflow, rec.workflow_file);
    if (!load.ok()) return Error(Errc::invalid_workflow, load.report());
    auto wf = std::make_shared<BuiltWorkflow>();
    wf->spec = std::move(*load.spec);
    agents::WorkflowServices services;
    services.artifacts = store.get();
    services.budget = budget.get();
    services.engines = &engines;
    auto built = agents::build_workflow(wf->spec, services);
    if (!built) return std::move(built).error();
    wf->built = std::move(*built);
    if (workflows.size() >= 32) workflows.erase(workflows.begin());  // runs keep theirs alive
    workflows.emplace(rec.workflow_sha256, wf);
    return wf;
  }

  void record(const RunRecord& rec, RunState state, const std::string& result,
              const std::string& code, const std::string& message) {
    if (auto s = queue->finish(rec.id, rec.fence, state, result, code, message); !s) {
      if (s.error().is(Errc::thread_busy)) {
        count(&WorkerStats::lost);
        say(rec.id + ": not recorded as " + run_state_name(state) + ": " + s.error().message);
      } else {
        say(rec.id +
            ": recording its end failed (its lease will lapse and another worker "
            "will finish it from its last checkpoint): " +
            s.error().message);
      }
      return;
    }
    count(state == RunState::succeeded     ? &WorkerStats::succeeded
          : state == RunState::cancelled   ? &WorkerStats::cancelled
          : state == RunState::interrupted ? &WorkerStats::interrupted
                                           : &WorkerStats::failed);
    say(rec.id + ": " + run_state_name(state) + (message.empty() ? "" : ": " + message));
  }

  void hand_back(const RunRecord& rec, std::chrono::milliseconds delay, const std::string& why) {
    if (auto s = queue->give_back(rec.id, rec.fence, delay, why); !s) {
      say(rec.id + ": handing it back failed: " + s.error().message);
      return;
    }
    count(&WorkerStats::handed_back);
    say(rec.id + ": handed back (" + why + ")");
  }

  // Steps 2-3 of the header's list, then the run's coroutine. False when nothing was started
  // (the run was recorded or handed back here).
  bool start(RunRecord rec, asio::thread_pool& pool) {
    {
      std::lock_guard lock(mu);
      ++stats.claimed;
    }
    say("claimed " + rec.id + " (attempt " + std::to_string(rec.attempts) + "/" +
        std::to_string(rec.max_attempts) + ", thread " + rec.thread_id + ", fence " +
        std::to_string(rec.fence) + ")");
    auto h = std::make_shared<Held>();
    h->token = claim_token(rec.fence);
    auto wf = workflow(rec);
    if (!wf) {
      record(rec, RunState::failed, "", errc_name(wf.error().code), wf.error().message);
      return false;
    }
    h->wf = std::move(*wf);
    rec.workflow.clear();
    rec.workflow.shrink_to_fit();
    auto input = parse_json(rec.input, "the run's input");
    if (!input || !input->value.is_object()) {
      record(rec, RunState::failed, "", "invalid_argument",
             input ? "the run's input is not a JSON object" : input.error().message);
      return false;
    }
    h->input = std::move(input->value.as_object());
    if (!idle_checkpointers.empty()) {
      h->cp = std::move(idle_checkpointers.back());
      idle_checkpointers.pop_back();
    } else {
      auto cp = graph::open_postgres_checkpointer(opt.db);
      if (!cp) {
        hand_back(rec, opt.lease, "cannot open the checkpointer: " + cp.error().message);
        return false;
      }
      h->cp = std::move(*cp);
    }
    auto claimed =
        h->cp->claim_thread(rec.thread_id, graph::this_process_holder(h->token, opt.lease.count()));
    if (!claimed) {
      hand_back(rec, opt.lease, claimed.error().message);
      return false;
    }
    // A previous attempt may have committed the run's last checkpoint and died before
    // recording the end: then the end is read from the thread, not run again.
    auto latest = h->cp->latest(rec.thread_id);
    if (!latest) {
      (void)h->cp->release_thread(rec.thread_id, h->token);
      hand_back(rec, opt.lease, latest.error().message);
      return false;
    }
    if (*latest) {
      const auto& last = **latest;
      const auto* run = last.metadata.if_contains("queue_run");
      const auto* status = last.pending.if_contains("status");
      if (run && run->is_string() && run->get_string() == rec.id && status &&
          (*status == "done" || *status == "interrupted")) {
        Status s;
        if (*status == "done") {
          auto state = h->cp->state_at(rec.thread_id, last.checkpoint_id);
          if (state)
            record(rec, RunState::succeeded, to_json_text(h->wf->spec.output_of(std::move(*state))),
                   "", "");
          else
            s = std::move(state).error();
        } else {
          json::object out{
              {"interrupted",
               last.pending.contains("interrupt") ? last.pending.at("interrupt") : json::value()},
              {"thread", rec.thread_id}};
          record(rec, RunState::interrupted, to_json_text(out), "", "");
        }
        (void)h->cp->release_thread(rec.thread_id, h->token);
        if (!s) hand_back(rec, opt.lease, s.error().message);
        return false;
      }
      // An earlier attempt's unfinished checkpoint: the run continues from it, and its input,
      // already in the thread's state, is not applied a second time.
      if (run && run->is_string() && run->get_string() == rec.id) h->input.clear();
    }
    // A resume run hands its value to the interrupted node, unless an earlier attempt of it
    // already did (the thread's latest checkpoint is then its own, and it continues from it).
    const auto* last_run = *latest ? (**latest).metadata.if_contains("queue_run") : nullptr;
    if (!rec.resume.empty() &&
        !(last_run && last_run->is_string() && last_run->get_string() == rec.id)) {
      auto v = parse_json(rec.resume, "the run's resume value");
      if (!v) {
        (void)h->cp->release_thread(rec.thread_id, h->token);
        record(rec, RunState::failed, "", "invalid_argument", v.error().message);
        return false;
      }
      h->resume = std::move(v->value);
    }
    h->rec = std::move(rec);
    {
      std::lock_guard lock(mu);
      held[h->rec.id] = h;
    }
    asio::co_spawn(asio::make_strand(pool), execute(h), [this, h](std::exception_ptr e) {
      if (e) h->result = Error(Errc::tool_failed, "the run threw an unknown exception");
      end(*h);
    });
    return true;
  }

  asio::awaitable<void> execute(std::shared_ptr<Held> h) {
    graph::RunOptions o;
    o.checkpointer = h->cp.get();
    o.thread_id = h->rec.thread_id;
    o.claim_token = h->token;
    o.cancel = h->cancel;
    o.run_id = h->rec.id + "." + std::to_string(h->rec.attempts);
    o.checkpoint_metadata = json::object{{"queue_run", h->rec.id},
                                         {"attempt", h->rec.attempts},
                                         {"workflow", h->rec.workflow_file},
                                         {"workflow_sha256", h->rec.workflow_sha256}};
    graph::RunTracing tracing{{opt.tracer, {}}, h->rec.workflow_name};
    if (opt.tracer) {  // every attempt continues the trace the run record names
      if (auto p = trace::parse_traceparent(h->rec.traceparent))
        tracing.context.parent = std::move(*p);
      o.trace = &tracing;
    }
    if (h->resume) {
      auto op = runtime->async_resume(h->wf->built.graph, h->rec.thread_id, std::move(*h->resume),
                                      std::move(o));
      h->result = co_await std::move(op);
    } else {
      auto op = runtime->async_invoke(h->wf->built.graph, std::move(h->input), std::move(o));
      h->result = co_await std::move(op);
    }
  }

  // On a pool thread, once the run's coroutine returned.
  void end(Held& h) {
    h.ending = true;
    const RunRecord& rec = h.rec;
    if (h.lost) {
      count(&WorkerStats::lost);
      say(rec.id + ": stopped; another worker holds it now");
    } else if (h.result && h.result->interrupted) {
      json::object out{{"interrupted", h.result->interrupted_node},
                       {"payload", h.result->interrupt_payload},
                       {"thread", rec.thread_id}};
      record(rec, RunState::interrupted, to_json_text(out), "", "");
    } else if (h.result) {
      record(rec, RunState::succeeded, to_json_text(h.wf->spec.output_of(h.result->state)), "", "");
    } else if (h.result.error().is(Errc::cancelled) && h.user_cancel) {
      record(rec, RunState::cancelled, "", "cancelled",
             "cancelled by weir cancel (" + h.result.error().message + ")");
    } else if (h.result.error().is(Errc::cancelled) && h.draining) {
      hand_back(rec, std::chrono::milliseconds(0), "its worker " + owner + " stopped");
    } else {
      record(rec, RunState::failed, "", errc_name(h.result.error().code), h.result.error().message);
    }
    if (auto s = h.cp->release_thread(rec.thread_id, h.token); !s)
      say(rec.id + ": releasing thread '" + rec.thread_id + "': " + s.error().message);
    h.done = true;
    wake();
  }

  // Step 4 of the header's list, for every run held.
  void renew_all() {
    std::vector<std::shared_ptr<Held>> runs;
    {
      std::lock_guard lock(mu);
      for (auto& [id, h] : held) runs.push_back(h);
    }
    for (auto& h : runs) {
      if (h->ending || h->lost) continue;
      auto c = queue->renew(h->rec.id, h->rec.fence, opt.lease);
      Status lost_why;
      if (!c) {
        if (c.error().is(Errc::thread_busy) || c.error().is(Errc::not_found))
          lost_why = std::move(c).error();
        else
          say(h->rec.id + ": renewing its lease failed (retried in " +
              std::to_string((opt.lease / 3).count()) + " ms): " + c.error().message);
      } else if (*c && !h->user_cancel) {
        h->user_cancel = true;
        h->cancel->store(true);
        say(h->rec.id + ": cancel requested");
      }
      if (lost_why) {
        if (auto t = h->cp->renew_thread(h->rec.thread_id, h->token);
            !t && t.error().is(Errc::thread_busy))
          lost_why = std::move(t).error();
      }
      if (!lost_why && !h->ending) {
        h->lost = true;
        h->cancel->store(true);
        say(h->rec.id + ": lost its lease: " + lost_why.error().message);
      }
    }
  }

  void on_notify(std::string_view payload) {
    if (payload.rfind("cancel ", 0) != 0) return;
    const std::string id(payload.substr(7));
    std::lock_guard lock(mu);
    auto it = held.find(id);
    if (it == held.end() || it->second->user_cancel) return;
    it->second->user_cancel = true;
    it->second->cancel->store(true);
    say(id + ": cancel requested");
  }

  // Drops ended runs; returns how many are still held.
  std::size_t reap() {
    std::lock_guard lock(mu);
    std::erase_if(held, [this](const auto& kv) {
      if (!kv.second->done.load()) return false;
      if (kv.second->cp && idle_checkpointers.size() < opt.max_runs)
        idle_checkpointers.push_back(std::move(kv.second->cp));
      return true;
    });
    return held.size();
  }

  Result<WorkerStats> run();
};

Worker::Worker(WorkerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Worker::~Worker() {
  if (impl_->wake_fd >= 0) ::close(impl_->wake_fd);
}

void Worker::stop() noexcept {
  impl_->stopping.store(true);
  impl_->wake();
}

Result<WorkerStats> Worker::run() {
  return impl_->run();
}

Result<WorkerStats> Worker::Impl::run() {
  if (opt.db.empty()) return Error(Errc::invalid_argument, "worker: no database given");
  if (opt.max_runs < 1) return Error(Errc::invalid_argument, "worker: max_runs must be >= 1");
  if (opt.lease < std::chrono::milliseconds(100))
    return Error(Errc::invalid_argument, "worker: the lease must be at least 100 ms");
  if (wake_fd < 0) return Error(Errc::io_error, "worker: eventfd failed");
  // A database that is not up yet (the worker started first, a restart, a failover) is waited
  // for, with backoff, up to connect_timeout; stop() ends the wait.
  const auto connect_until = Clock::now() + opt.connect_timeout;
  auto backoff = std::chrono::milliseconds(250);
  for (int tries = 1;; ++tries) {
    auto q = RunQueue::open(opt.db);
    if (q) {
      queue = std::move(*q);
      break;
    }
    if (!q.error().is(Errc::io_error) || stopping || Clock::now() + backoff > connect_until) {
      if (tries == 1) return std::move(q).error();
      return Error(q.error().code, q.error().message + " (gave up after " + std::to_string(tries) +
                                       " tries in " +
                                       std::to_string(opt.connect_timeout.count() / 1000) + " s)");
    }
    say(q.error().message + "; trying again in " + std::to_string(backoff.count()) + " ms");
    pollfd wake{wake_fd, POLLIN, 0};
    (void)::poll(&wake, 1, static_cast<int>(backoff.count()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
  // The listening connection: its own, since a notification arrives between statements.
  std::optional<pg::Connection> listener;
  auto listen = [&]() -> Status {
    auto c = pg::Connection::open(opt.db);
    if (!c) return std::move(c).error();
    if (auto r = c->exec("LISTEN weir_runs", {}, "listening for runs"); !r)
      return std::move(r).error();
    listener.emplace(std::move(*c));
    return {};
  };
  if (auto s = listen(); !s) return std::move(s).error();

  owner = opt.name.empty() ? host_name() + ":" + std::to_string(::getpid()) : opt.name;
  BudgetLimits limits;
  limits.total = opt.memory_limit;
  budget = std::make_unique<MemoryBudget>(limits);
  std::error_code ec;
  store_dir = fs::temp_directory_path(ec) / ("weir-worker-" + std::to_string(::getpid()));
  auto st = ArtifactStore::open({store_dir, std::min<std::size_t>(opt.memory_limit / 4, 64u << 20),
                                 std::size_t{4} << 30, 200, budget.get()});
  if (!st) return std::move(st).error();
  store = std::move(*st);
  graph::RuntimeOptions ro;
  ro.budget = budget.get();
  ro.artifacts = store.get();
  ro.max_concurrent_runs = opt.max_runs;
  ro.max_queued_runs = opt.max_runs;
  runtime = std::make_unique<graph::GraphRuntime>(ro);
  asio::thread_pool pool(std::clamp<std::size_t>(opt.max_runs, 1, 4));
  say("worker " + owner + " on " + queue->description() + ": up to " +
      std::to_string(opt.max_runs) + " runs at once, lease " + std::to_string(opt.lease.count()) +
      " ms");

  const auto renew_every = std::max(std::chrono::milliseconds(30), opt.lease / 3);
  auto next_renew = Clock::now() + renew_every;
  std::size_t started = 0;
  bool draining = false;
  for (;;) {
    const std::size_t holding = reap();
    if (stopping && !draining) {
      draining = true;
      std::lock_guard lock(mu);
      for (auto& [id, h] : held) {
        h->draining = true;
        h->cancel->store(true);
      }
    }
    if (draining && holding == 0) break;
    if (opt.once && started >= 1 && holding == 0) break;
    if (Clock::now() >= next_renew) {
      renew_all();
      next_renew = Clock::now() + renew_every;
    }
    bool idle = false;
    std::size_t now_holding = holding;
    while (!draining && now_holding < opt.max_runs && !(opt.once && started >= 1) &&
           budget->used_total() < opt.memory_limit / 10 * 9) {
      auto c = queue->claim(owner, opt.lease);
      if (!c) {
        say("claiming: " + c.error().message);
        break;
      }
      if (!*c) {
        idle = true;
        break;
      }
      ++started;
      if (start(std::move(**c), pool)) ++now_holding;
    }
    if (opt.exit_when_idle && idle && reap() == 0) break;
    // Wait for a notification, a run's end, stop(), or the next renewal / poll.
    if (!listener || PQstatus(listener->get()) != CONNECTION_OK) {
      if (auto s = listen(); !s) {
        listener.reset();
        say("listening: " + s.error().message + " (looking for work every " +
            std::to_string(opt.poll.count()) + " ms meanwhile)");
      }
    }
    const auto until = std::min(next_renew, Clock::now() + opt.poll);
    const auto wait_ms = std::max<long long>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    pollfd fds[2] = {{wake_fd, POLLIN, 0}, {listener ? PQsocket(listener->get()) : -1, POLLIN, 0}};
    const int n = ::poll(fds, fds[1].fd >= 0 ? 2 : 1, static_cast<int>(wait_ms));
    if (n > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      [[maybe_unused]] auto r = ::read(wake_fd, &v, sizeof v);
    }
    if (listener && PQconsumeInput(listener->get()) == 1) {
      while (PGnotify* note = PQnotifies(listener->get())) {
        on_notify(note->extra != nullptr ? note->extra : "");
        PQfreemem(note);
      }
    }
  }
  pool.join();
  runtime.reset();
  store.reset();
  fs::remove_all(store_dir, ec);
  std::lock_guard lock(mu);
  return stats;
}

}  // namespace weir::cluster
