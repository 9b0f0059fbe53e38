// The worker's loop: one control thread (claims, lease renewals, notifications, reaping) and a
// thread pool on which the runs execute, each on the one executor (run_executor.hpp).
#include "weir/cluster/worker.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include "run_executor.hpp"
#include "text_notify.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/pg/connection.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::cluster {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// A run this worker holds, from claim until the control thread reaps it.
struct Held {
  RunRecord rec;                            // workflow text dropped once built
  std::unique_ptr<graph::Checkpointer> cp;  // its own connection while it runs; thread-safe
  RunControl control;  // cancel requested, lost, draining: read by the executor at the end
  // Its nodes' message text, to the publisher (RunEnv::on_message_text).
  std::function<void(const graph::MessageText&)> on_text;
  std::atomic<bool> done{false};
  // Set first thing in end(): the run's coroutine returned and its end is being recorded, so a
  // renewal that finds the run no longer held may be seeing that very record.
  std::atomic<bool> ending{false};
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
  std::unique_ptr<RunExecutor> executor;
  // The runs' message text as NOTIFY weir_text (text_notify.hpp), for run services elsewhere.
  std::unique_ptr<TextPublisher> text;
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

  // Steps 2-6 of the header's list: the run's workflow and checkpointer, then the executor's
  // coroutine; its ending is written by end(). False when nothing was started (the run was
  // recorded or handed back here).
  bool start(RunRecord rec, asio::thread_pool& pool) {
    {
      std::lock_guard lock(mu);
      ++stats.claimed;
    }
    say("claimed " + rec.id + " (attempt " + std::to_string(rec.attempts) + "/" +
        std::to_string(rec.max_attempts) + ", thread " + rec.thread_id + ", fence " +
        std::to_string(rec.fence) + ")");
    auto wf = executor->workflow(rec);
    if (!wf) {
      record(rec, RunState::failed, "", errc_name(wf.error().code), wf.error().message);
      return false;
    }
    rec.workflow.clear();
    rec.workflow.shrink_to_fit();
    auto h = std::make_shared<Held>();
    if (!idle_checkpointers.empty()) {
      h->cp = std::move(idle_checkpointers.back());
      idle_checkpointers.pop_back();
    } else {
      graph::PostgresOptions po;
      po.reconnect_window = opt.lease;  // a lost connection is retried within the lease
      auto cp = graph::open_postgres_checkpointer(opt.db, po);
      if (!cp) {
        hand_back(rec, opt.lease, "cannot open the checkpointer: " + cp.error().message);
        return false;
      }
      h->cp = std::move(*cp);
    }
    h->rec = std::move(rec);
    {
      std::lock_guard lock(mu);
      held[h->rec.id] = h;
    }
    // Published as "<run>.<attempt>", so that a reader drops what an attempt that lost the run
    // (a paused worker, back after another took over) still sends.
    h->on_text = [this, id = h->rec.id + "." + std::to_string(h->rec.attempts)](
                     const graph::MessageText& t) { text->publish(id, t); };
    RunEnv env;
    env.checkpointer = h->cp.get();
    env.on_message_text = &h->on_text;
    env.token = claim_token(h->rec.fence);
    env.lease = opt.lease;
    env.control = &h->control;
    env.drain_reason = "its worker " + owner + " stopped";
    env.tracer = opt.tracer;
    asio::co_spawn(asio::make_strand(pool), executor->async_execute(h->rec, *wf, std::move(env)),
                   [this, h](std::exception_ptr e, RunEnding ending) {
                     if (e) {  // async_execute catches everything; this is a last resort
                       ending = RunEnding{};
                       ending.error_code = "tool_failed";
                       ending.error = "the run threw an unknown exception";
                     }
                     end(*h, std::move(ending));
                   });
    return true;
  }

  // On a pool thread, once the run's coroutine returned: step 6's ending written down.
  void end(Held& h, RunEnding ending) {
    h.ending = true;
    const RunRecord& rec = h.rec;
    switch (ending.kind) {
      case RunEnding::Kind::lost:
        count(&WorkerStats::lost);
        say(rec.id + ": stopped; another worker holds it now");
        break;
      case RunEnding::Kind::hand_back:
        hand_back(rec, ending.delay, ending.why);
        break;
      case RunEnding::Kind::record:
        record(rec, ending.state, ending.result, ending.error_code, ending.error);
        if (!ending.why.empty()) say(rec.id + ": " + ending.why);
        break;
    }
    h.done = true;
    wake();
  }

  // Step 4 of the header's list, for every run held: the leases in one statement, then the
  // thread claims of the runs whose lease held.
  void renew_all() {
    std::vector<std::shared_ptr<Held>> runs;
    {
      std::lock_guard lock(mu);
      for (auto& [id, h] : held)
        if (!h->ending && !h->control.lost) runs.push_back(h);
    }
    if (runs.empty()) return;
    std::vector<RunQueue::Lease> leases;
    for (const auto& h : runs) leases.push_back({h->rec.id, h->rec.fence});
    auto renewed = queue->renew_all(leases, opt.lease);
    if (!renewed) {
      say("renewing the leases of " + std::to_string(runs.size()) + " run(s) failed (retried in " +
          std::to_string((opt.lease / 3).count()) + " ms): " + renewed.error().message);
      return;
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      auto& h = runs[i];
      auto& c = (*renewed)[i];
      Status lost_why;
      if (!c) {
        if (c.error().is(Errc::thread_busy) || c.error().is(Errc::not_found))
          lost_why = std::move(c).error();
      } else if (*c && !h->control.user_cancel) {
        h->control.stop(h->control.user_cancel);
        say(h->rec.id + ": cancel requested");
      }
      // (The thread's claim is the executor's once it took it.)
      if (lost_why && h->control.thread_claimed) {
        if (auto t = h->cp->renew_thread(h->rec.thread_id, claim_token(h->rec.fence));
            !t && t.error().is(Errc::thread_busy))
          lost_why = std::move(t).error();
      }
      if (!lost_why && !h->ending) {
        h->control.stop(h->control.lost);
        say(h->rec.id + ": lost its lease: " + lost_why.error().message);
      }
    }
  }

  void on_notify(std::string_view payload) {
    if (payload.rfind("cancel ", 0) != 0) return;
    const std::string id(payload.substr(7));
    std::lock_guard lock(mu);
    auto it = held.find(id);
    if (it == held.end() || it->second->control.user_cancel) return;
    it->second->control.stop(it->second->control.user_cancel);
    say(id + ": cancel requested");
  }

  // True when the queue holds no queued and no running run (a database error says false).
  bool nothing_left() {
    for (auto st : {RunState::queued, RunState::running}) {
      auto n = queue->count(st);
      if (!n || *n > 0) return false;
    }
    return true;
  }

  // The ids of the runs held (running, or ended and not reaped yet).
  std::vector<std::string> held_ids() {
    std::lock_guard lock(mu);
    std::vector<std::string> ids;
    for (const auto& [id, h] : held) ids.push_back(id);
    return ids;
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
    auto q = RunQueue::open(opt.db, {opt.lease});
    if (q) {
      queue = std::move(*q);
      break;
    }
    if (!q.error().is(Errc::unavailable) || stopping || Clock::now() + backoff > connect_until) {
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
    if (auto r = c->exec("LISTEN weir_runs", pg::Params(), "listening for runs"); !r)
      return std::move(r).error();
    listener.emplace(std::move(*c));
    return {};
  };
  if (auto s = listen(); !s) return std::move(s).error();

  owner = opt.name.empty() ? host_name() + ":" + std::to_string(::getpid()) : opt.name;
  auto ex = RunExecutor::open({opt.max_runs, opt.memory_limit, "worker", opt.graphs});
  if (!ex) return std::move(ex).error();
  executor = std::move(*ex);
  text = std::make_unique<TextPublisher>(opt.db, opt.log);
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
      for (auto& [id, h] : held) h->control.stop(h->control.draining);
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
           executor->budget().used_total() < opt.memory_limit / 10 * 9) {
      // As many runs as there are free slots (one with --once), in one statement. Never a run
      // this worker still runs: its lease may have lapsed while the database was out of reach,
      // and that attempt is still here (issue 32.1).
      const std::size_t want = opt.once ? 1 : opt.max_runs - now_holding;
      auto c = queue->claim_many(owner, opt.lease, held_ids(), want);
      if (!c) {
        say("claiming: " + c.error().message);
        break;
      }
      for (RunRecord& rec : *c) {
        ++started;
        if (start(std::move(rec), pool)) ++now_holding;
      }
      if (c->size() < want) {  // nothing more is claimable now
        idle = true;
        break;
      }
    }
    // --exit-when-idle: nothing held here, nothing claimable now, and no run anywhere that may
    // still become claimable: a queued one (a hand-back waits out its delay first) or a running
    // one (its holder may be gone, and its lease then lapses).
    if (opt.exit_when_idle && idle && reap() == 0 && nothing_left()) break;
    // Wait for a notification, a run's end, stop(), or the next renewal / poll.
    if (!listener || PQstatus(listener->native()) != CONNECTION_OK) {
      if (auto s = listen(); !s) {
        listener.reset();
        say("listening: " + s.error().message + " (looking for work every " +
            std::to_string(opt.poll.count()) + " ms meanwhile)");
      }
    }
    const auto until = std::min(next_renew, Clock::now() + opt.poll);
    const auto wait_ms = std::max<long long>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    pollfd fds[2] = {{wake_fd, POLLIN, 0},
                     {listener ? PQsocket(listener->native()) : -1, POLLIN, 0}};
    const int n = ::poll(fds, fds[1].fd >= 0 ? 2 : 1, static_cast<int>(wait_ms));
    if (n > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      [[maybe_unused]] auto r = ::read(wake_fd, &v, sizeof v);
    }
    if (listener && PQconsumeInput(listener->native()) == 1) {
      while (PGnotify* note = PQnotifies(listener->native())) {
        on_notify(note->extra != nullptr ? note->extra : "");
        PQfreemem(note);
      }
    }
  }
  pool.join();
  text.reset();
  idle_checkpointers.clear();
  executor.reset();
  std::lock_guard lock(mu);
  return stats;
}

}  // namespace weir::cluster
