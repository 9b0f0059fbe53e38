// The run queue under faults, against a throwaway PostgreSQL cluster (pg_server.hpp; ctest label
// scaleout): sessions terminated or paused mid-call, lost answers, restarts and outages of the
// server, paused and killed workers, and the thread claims of runs that end in a claim. The
// queue's own behaviour is in run_queue_test.cpp.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <boost/json.hpp>

#include "run_queue_harness.hpp"

namespace {

using namespace weir::testing::queue;

// Every call rides out the server ending weir's sessions (an administrator, a failover).
TEST(RunQueue, CallsRideOutTerminatedSessions) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const std::string name = db.substr(db.rfind('/') + 1);
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto kill_sessions = [&] {
    std::string why;
    EXPECT_EQ(PgServer::get().terminate_sessions(name, &why), 1) << why;
  };
  kill_sessions();
  auto id = (*q)->submit(tiny_request());
  ASSERT_TRUE(id) << id.error().message;
  kill_sessions();
  auto claimed = (*q)->claim("w1", 60s);
  ASSERT_TRUE(claimed) << claimed.error().message;
  ASSERT_TRUE(*claimed);
  kill_sessions();
  auto renewed = (*q)->renew(*id, (**claimed).fence, 60s);
  EXPECT_TRUE(renewed) << renewed.error().message;
  kill_sessions();
  auto fin = (*q)->finish(*id, (**claimed).fence, weir::cluster::RunState::succeeded, "{}", "", "");
  EXPECT_TRUE(fin) << fin.error().message;
  kill_sessions();
  auto rec = (*q)->get(*id);
  ASSERT_TRUE(rec) << rec.error().message;
  EXPECT_EQ(rec->state, weir::cluster::RunState::succeeded);
  EXPECT_EQ(rec->attempts, 1);
}

// A process paused (SIGSTOP) or hung inside a transaction holds its row locks: here a
// session that locked the run's row (as a step's commit does) and then says nothing more. The
// cancel that needs that row is not held forever: PostgreSQL ends the idle session after
// pg::kIdleInTransactionTimeout (weir's sessions set it), and the paused session, when it goes
// on, finds its connection lost and its transaction rolled back.
TEST(RunQueue, ASessionPausedInATransactionDoesNotHoldTheRunForever) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto opened = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(opened) << opened.error().message;
  std::shared_ptr<weir::cluster::RunQueue> q = std::move(*opened);
  auto id = q->submit(tiny_request());
  ASSERT_TRUE(id) << id.error().message;
  auto paused = weir::pg::Connection::open(db, {std::chrono::milliseconds(0)});
  ASSERT_TRUE(paused) << paused.error().message;
  auto shown = paused->exec("SHOW idle_in_transaction_session_timeout", {}, "showing");
  ASSERT_TRUE(shown) << shown.error().message;
  EXPECT_EQ(shown->text(0, 0), "10s");
  ASSERT_TRUE(paused->exec("BEGIN", {}, "beginning"));
  weir::pg::Params p;
  p.text(*id);
  auto locked = paused->exec("SELECT id FROM weir_runs WHERE id = $1 FOR UPDATE", p, "locking");
  ASSERT_TRUE(locked) << locked.error().message;
  ASSERT_EQ(locked->size(), 1);
  // The cancel waits on the lock; a thread of its own, so that a hang fails the test.
  auto done = std::make_shared<std::promise<weir::Result<weir::cluster::RunState>>>();
  auto answer = done->get_future();
  std::thread([q, id = *id, done] { done->set_value(q->cancel(id)); }).detach();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(answer.wait_for(weir::pg::kIdleInTransactionTimeout + 20s), std::future_status::ready)
      << "the cancel still waits on the paused session's lock";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, weir::pg::kIdleInTransactionTimeout - 1s);
  auto cancelled = answer.get();
  ASSERT_TRUE(cancelled) << cancelled.error().message;
  EXPECT_EQ(*cancelled, weir::cluster::RunState::cancelled);
  auto after = paused->exec("SELECT 1", {}, "going on");
  ASSERT_FALSE(after);
  EXPECT_NE(after.error().message.find("the connection was lost"), std::string::npos)
      << after.error().message;
}

// A statement the server carried out but whose answer was lost (the connection dropped right
// after): the call re-establishes the connection and settles what happened by the run's id or
// fence, instead of failing (a lost claim would otherwise strand the run for a lease and cost an
// attempt; a lost end would leave a finished run to be claimed again).
TEST(RunQueue, LostAnswersAreSettledByTheFence) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto proxy = std::make_unique<weir::testing::PgProxy>(PgServer::get().port());
  const std::string via = proxy->conninfo(db.substr(db.rfind('/') + 1));
  auto q = weir::cluster::RunQueue::open(via);
  ASSERT_TRUE(q) << q.error().message;
  proxy->cut_on_reply("SELECT 1");  // the submit's INSERT ... SELECT pg_notify
  auto id = (*q)->submit(tiny_request());
  EXPECT_EQ(proxy->fired(), 1);
  ASSERT_TRUE(id) << id.error().message;
  proxy->cut_on_reply("SELECT 1", 1);  // the claim (after the fence's nextval)
  auto claimed = (*q)->claim("w1", 60s);
  EXPECT_EQ(proxy->fired(), 1);
  ASSERT_TRUE(claimed) << claimed.error().message;
  ASSERT_TRUE(*claimed) << "the claimed run was not found again";
  EXPECT_EQ((**claimed).id, *id);
  EXPECT_EQ((**claimed).attempts, 1);
  proxy->cut_on_reply("SELECT 1");  // the end (WITH up AS (UPDATE ...) SELECT id FROM up)
  auto fin = (*q)->finish(*id, (**claimed).fence, weir::cluster::RunState::succeeded, "{}", "", "");
  EXPECT_EQ(proxy->fired(), 1);
  EXPECT_TRUE(fin) << fin.error().message;
  auto direct = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(direct);
  auto all = (*direct)->list(10);
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u) << "a lost submit answer queued the run twice";
  EXPECT_EQ(all->front().state, weir::cluster::RunState::succeeded);
  EXPECT_EQ(all->front().attempts, 1);
}

// Ending a run in a claim (a cancel its gone holder never saw, or its attempts used up) revokes
// the thread claim that holder took, in the same statement: if that holder was only paused, its
// next put is refused and stores nothing.
TEST(RunQueue, EndingARunInAClaimRevokesItsHoldersThreadClaim) {
  for (const bool cancel : {true, false}) {
    SCOPED_TRACE(cancel ? "cancelled" : "attempts exhausted");
    const std::string db = fresh_db();
    ASSERT_NE(db, "");
    auto q = weir::cluster::RunQueue::open(db);
    ASSERT_TRUE(q) << q.error().message;
    auto cp = weir::graph::open_postgres_checkpointer(db);
    ASSERT_TRUE(cp) << cp.error().message;
    auto req = tiny_request();
    req.max_attempts = 1;
    auto id = (*q)->submit(req);
    ASSERT_TRUE(id);
    auto held = (*q)->claim("paused", 60s);
    ASSERT_TRUE(held && *held);
    const std::string token = weir::cluster::claim_token((**held).fence);
    ASSERT_TRUE(
        (*cp)->claim_thread((**held).thread_id, weir::graph::this_process_holder(token, 60000)));
    weir::graph::Checkpoint step;
    step.thread_id = (**held).thread_id;
    step.checkpoint_id = weir::graph::new_checkpoint_id(0);
    step.claim_token = token;
    ASSERT_TRUE((*cp)->put(step));
    if (cancel) {
      auto c = (*q)->cancel(*id);
      ASSERT_TRUE(c);
      EXPECT_EQ(*c, weir::cluster::RunState::running);
    }
    lapse_leases(db);
    auto next = (*q)->claim("rescuer", 60s);  // ends the run, claims nothing
    ASSERT_TRUE(next) << next.error().message;
    EXPECT_FALSE(*next);
    EXPECT_EQ(state_of(db, *id), cancel ? "cancelled" : "failed");
    weir::graph::Checkpoint late;
    late.thread_id = (**held).thread_id;
    late.checkpoint_id = weir::graph::new_checkpoint_id(1);
    late.parent_id = step.checkpoint_id;
    late.claim_token = token;
    auto put = (*cp)->put(late);
    ASSERT_FALSE(put) << "the ended run's holder committed a step";
    EXPECT_TRUE(put.error().is(weir::Errc::thread_busy)) << put.error().message;
    EXPECT_NE(put.error().message.find("its claim was released"), std::string::npos)
        << put.error().message;
    auto all = (*cp)->list((**held).thread_id);
    ASSERT_TRUE(all);
    EXPECT_EQ(all->size(), 1u);
  }
}

// The holder's own end (finish) and hand-back (give_back) revoke its thread claim in the same
// statement too: nothing that ended or left a run can commit to its thread afterwards.
TEST(RunQueue, FinishAndGiveBackRevokeTheHoldersThreadClaim) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto cp = weir::graph::open_postgres_checkpointer(db);
  ASSERT_TRUE(cp) << cp.error().message;
  for (const bool finish : {true, false}) {
    SCOPED_TRACE(finish ? "finish" : "give_back");
    auto id = (*q)->submit(tiny_request());
    ASSERT_TRUE(id);
    auto held = (*q)->claim("w", 60s);
    ASSERT_TRUE(held && *held);
    const std::string thread = (**held).thread_id;
    const std::string token = weir::cluster::claim_token((**held).fence);
    ASSERT_TRUE((*cp)->claim_thread(thread, weir::graph::this_process_holder(token, 60000)));
    auto s =
        finish ? (*q)->finish(*id, (**held).fence, weir::cluster::RunState::succeeded, "{}", "", "")
               : (*q)->give_back(*id, (**held).fence, 0ms, "stopping");
    ASSERT_TRUE(s) << s.error().message;
    auto holder = (*cp)->thread_holder(thread);
    ASSERT_TRUE(holder);
    EXPECT_FALSE(holder->has_value()) << "the claim of " << token << " is still there";
  }
}

// Runs enqueued on a thread are claimed one at a time, in order: none while an older one on its
// thread is queued or running (a worker never claims it only to find the thread busy). The end
// of the run before it makes it claimable at once and tells the workers ('queued'); a run
// handed back goes before the runs queued behind it.
TEST(RunQueue, RunsQueuedOnAThreadAreClaimedInOrderAsTheOnesBeforeThemEnd) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto first_req = tiny_request();
  first_req.thread_id = "t-in-order";
  auto first = (*q)->submit(first_req);
  ASSERT_TRUE(first) << first.error().message;
  auto held = (*q)->claim("w1", 60s);
  ASSERT_TRUE(held && *held);
  auto next_req = first_req;
  next_req.enqueue = true;
  auto next = (*q)->submit(next_req);
  ASSERT_TRUE(next) << next.error().message;
  auto none = (*q)->claim("w2", 60s);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none) << "claimed " << (**none).id << " while " << *first << " runs on its thread";

  // Handed back: the first is claimed again before the run queued behind it.
  ASSERT_TRUE((*q)->give_back(*first, (**held).fence, 0ms, "stopping"));
  auto again = (*q)->claim("w2", 60s);
  ASSERT_TRUE(again && *again);
  EXPECT_EQ((**again).id, *first);

  auto listener = weir::pg::Connection::open(db);
  ASSERT_TRUE(listener) << listener.error().message;
  ASSERT_TRUE(listener->exec("LISTEN weir_runs", weir::pg::Params(), "listening"));
  ASSERT_TRUE(
      (*q)->finish(*first, (**again).fence, weir::cluster::RunState::succeeded, "{}", "", ""));
  bool heard = false;
  for (const auto until = Clock::now() + 10s; !heard && Clock::now() < until;) {
    PQconsumeInput(listener->native());
    while (PGnotify* note = PQnotifies(listener->native())) {
      heard = heard || std::string(note->extra) == "queued";
      PQfreemem(note);
    }
    if (!heard) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(heard) << "no 'queued' notification on weir_runs when the first run ended";
  auto after = (*q)->claim("w2", 60s);
  ASSERT_TRUE(after);
  ASSERT_TRUE(*after) << "the run queued behind it is still held back";
  EXPECT_EQ((**after).id, *next);
}

// --- Faults while workers run (real processes, a real server) ---------------------------------

// pg_terminate_backend of every weir session, three times while twelve runs are in flight on two
// workers: no run fails, none loses its lease (each finishes in its first attempt), and every
// step is committed once.
TEST(RunQueue, TerminatedSessionsFailNoRun) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("terminated", 4, 150);  // 12 supersteps, ~0.6 s
  const auto ids = submit_many(db, wf, 12);
  auto a = start_worker("--db '" + db + "' --max-runs 6 --name a");
  auto b = start_worker("--db '" + db + "' --max-runs 6 --name b");
  ASSERT_TRUE(eventually([&] { return count_in_state(db, "running") >= 6; }, 30s))
      << a->stderr_text() << b->stderr_text();
  int ended = 0;
  for (int i = 0; i < 3; ++i) {
    std::string why;
    const int n = PgServer::get().terminate_sessions(dbname(db), &why);
    ASSERT_GE(n, 0) << why;
    ended += n;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_GT(ended, 4) << "the workers' sessions were not there to end";
  ASSERT_TRUE(eventually([&] { return all_ended(db, ids.size()); }, 60s))
      << a->stderr_text() << b->stderr_text();
  expect_all_succeeded_once(db, ids, 12, 1, a->stderr_text() + b->stderr_text());
}

// PostgreSQL restarted (-m fast: sessions ended, a clean shutdown; -m immediate: the server quits
// and recovers from its log) while runs are in flight, back within the worker's lease: every run
// completes in its first attempt, each step committed once.
class RunQueueRestart : public ::testing::TestWithParam<std::string> {};

TEST_P(RunQueueRestart, APostgresRestartWithinTheLeaseFailsNoRun) {
  const std::string db = durable_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("restarted", 4, 150);
  const auto ids = submit_many(db, wf, 8);
  auto w = start_worker("--db '" + db + "' --max-runs 8 --lease 20s --name survivor");
  ASSERT_TRUE(eventually([&] { return committed(db, ids[0]).total >= 2; }, 30s))
      << w->stderr_text();
  ASSERT_EQ(PgServer::get().stop(GetParam()), "");
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(PgServer::get().start_again(), "");
  ASSERT_TRUE(eventually([&] { return all_ended(db, ids.size()); }, 60s)) << w->stderr_text();
  expect_all_succeeded_once(db, ids, 12, 1, w->stderr_text());
}

INSTANTIATE_TEST_SUITE_P(Modes, RunQueueRestart, ::testing::Values("fast", "immediate"));

// A database gone for longer than the lease (3 s against 1 s): the worker's calls give up, its
// runs are handed back or lapse, and once the server is back every run completes: an outage
// leaves runs to finish later, never failed.
TEST(RunQueue, AnOutageLongerThanTheLeaseFailsNoRun) {
  const std::string db = durable_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("outage", 4, 150);
  const auto ids = submit_many(db, wf, 6);
  auto w = start_worker("--db '" + db + "' --max-runs 6 --lease 1s --poll 200ms --name patient");
  ASSERT_TRUE(eventually([&] { return committed(db, ids[0]).total >= 2; }, 30s))
      << w->stderr_text();
  ASSERT_EQ(PgServer::get().stop("fast"), "");
  std::this_thread::sleep_for(3s);
  ASSERT_EQ(PgServer::get().start_again(), "");
  ASSERT_TRUE(eventually([&] { return all_ended(db, ids.size()); }, 60s)) << w->stderr_text();
  expect_all_succeeded_once(db, ids, 12, 3, w->stderr_text());
  EXPECT_EQ(::kill(w->pid, 0), 0) << "the worker exited during the outage:\n" << w->stderr_text();
}

// The database out of reach for longer than a lease but not for two (through a proxy that
// refuses connections for 1.6 s, against a 1 s lease): a run's put gives up after the lease and
// the run is handed back (or its lease lapses) once the database answers again, never recorded
// as failed, and it completes.
TEST(RunQueue, ARunWhoseDatabaseStaysAwayForALeaseIsHandedBackNotFailed) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  weir::testing::PgProxy proxy(PgServer::get().port());
  const std::string via = "postgres://weir@127.0.0.1:" + std::to_string(proxy.port()) + "/" +
                          dbname(db) + "?sslmode=disable&gssencmode=disable";
  const auto wf = slow_workflow("away", 4, 150);
  const auto ids = submit_many(db, wf, 3);
  auto w = start_worker("--db '" + via + "' --max-runs 4 --lease 1s --poll 200ms --name away");
  ASSERT_TRUE(eventually([&] { return committed(db, ids[0]).total >= 2; }, 30s))
      << w->stderr_text();
  proxy.set_down(true);
  proxy.cut_all();
  std::this_thread::sleep_for(1600ms);
  proxy.set_down(false);
  ASSERT_TRUE(eventually([&] { return all_ended(db, ids.size()); }, 60s)) << w->stderr_text();
  expect_all_succeeded_once(db, ids, 12, 3, w->stderr_text());
  const std::string log = w->stderr_text();
  EXPECT_EQ(log.find(": failed: "), std::string::npos) << log;
  EXPECT_NE(log.find("could not be re-established within 1000 ms"), std::string::npos) << log;
}

// A worker paused with SIGSTOP while its run is ended for it (cancelled by the user, or failed
// with its attempts used up, by another worker's claim), then continued: it commits nothing more.
void paused_worker_commits_nothing_after_the_end(bool cancel) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("zombie", 6, 300);  // 18 supersteps, ~1.8 s
  const std::string id = submit(db, wf, cancel ? "" : " --max-attempts 1");
  auto a = start_worker("--db '" + db + "' --lease 1s --name paused");
  ASSERT_TRUE(eventually([&] { return committed(db, id).total >= 4; }, 30s)) << a->stderr_text();
  ASSERT_EQ(::kill(a->pid, SIGSTOP), 0);
  if (cancel) {
    auto c = run_weir("cancel " + id + " --db '" + db + "'");
    ASSERT_EQ(c.code, 0) << c.err;
  }
  const std::string ended = cancel ? "cancelled" : "failed";
  ASSERT_TRUE(eventually(
      [&] {
        (void)run_weir("worker --db '" + db + "' --lease 1s --exit-when-idle --name rescuer");
        return state_of(db, id) == ended;
      },
      20s));
  const std::size_t at_end = committed(db, id).total;
  ASSERT_EQ(::kill(a->pid, SIGCONT), 0);
  // The paused worker finishes the nap it was in (300 ms) and tries to commit that step.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(committed(db, id).total, at_end)
      << "the paused worker committed after its run was " << ended << ":\n"
      << a->stderr_text();
  EXPECT_EQ(state_of(db, id), ended);
}

TEST(RunQueue, APausedWorkerCommitsNothingAfterItsRunWasCancelled) {
  paused_worker_commits_nothing_after_the_end(true);
}

TEST(RunQueue, APausedWorkerCommitsNothingAfterItsRunFailed) {
  paused_worker_commits_nothing_after_the_end(false);
}

}  // namespace
