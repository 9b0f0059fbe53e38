// The run queue (weir::cluster) and `weir submit / worker / runs / cancel` against a throwaway
// PostgreSQL cluster (pg_server.hpp; ctest label scaleout). Workers are `weir worker` processes,
// so a test can kill one with SIGKILL in the middle of a run. The queue under faults is in
// run_queue_faults_test.cpp; the harness both use in run_queue_harness.hpp.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <boost/json.hpp>

#include "run_queue_harness.hpp"

namespace {

using namespace weir::testing::queue;

// One schema version covers the queue's table with the checkpointer's: whichever opens a fresh
// database first makes all of them at the current version (weir_runs keeps unix ms, as every
// weir table does); a database of a newer weir is refused by both, naming both versions.
TEST(RunQueue, OneSchemaVersionCoversTheQueueAndANewerOneIsRefused) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  {
    auto q = weir::cluster::RunQueue::open(db);
    ASSERT_TRUE(q) << q.error().message;
  }
  EXPECT_EQ(PgServer::get().exec_admin(
                "DO $$ BEGIN IF (SELECT max(version) FROM weir_schema_version) <> 5 OR "
                "to_regclass('weir_checkpoints') IS NULL OR (SELECT data_type FROM "
                "information_schema.columns WHERE table_name = 'weir_runs' AND column_name = "
                "'created_at') <> 'bigint' OR to_regproc('weir_put_checkpoint') IS NULL THEN "
                "RAISE 'not one schema at version 5'; END IF; END $$",
                dbname(db)),
            "");
  ASSERT_EQ(PgServer::get().exec_admin("INSERT INTO weir_schema_version VALUES (6)", dbname(db)),
            "");
  const std::string expected =
      ": the database has weir schema version 6, newer than this weir build reads (5); use a "
      "newer weir, or another database";
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_FALSE(q);
  EXPECT_TRUE(q.error().is(weir::Errc::unsupported)) << q.error().message;
  EXPECT_NE(q.error().message.find(expected), std::string::npos) << q.error().message;
  auto cp = weir::graph::open_postgres_checkpointer(db);
  ASSERT_FALSE(cp);
  EXPECT_NE(cp.error().message.find(expected), std::string::npos) << cp.error().message;
  auto cli = run_weir("runs --db '" + db + "'");
  EXPECT_NE(cli.code, 0);
  EXPECT_NE(cli.err.find(expected), std::string::npos) << cli.err;
}

// A database a version-1 weir wrote: the checkpointer's tables at version 1, and the queue's
// table as that weir made it outside any version (TIMESTAMPTZ times, TEXT JSON), with a
// finished run and a queued one.
static std::string version_one_schema() {
  return R"sql(
CREATE TABLE weir_schema_version (version INTEGER NOT NULL);
INSERT INTO weir_schema_version VALUES (1);
CREATE SEQUENCE weir_checkpoint_seq;
CREATE TABLE weir_checkpoints (thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
  parent_id TEXT NOT NULL DEFAULT '', step BIGINT NOT NULL, seq BIGINT NOT NULL,
  snapshot BOOLEAN NOT NULL DEFAULT false, writes BYTEA NOT NULL, pending BYTEA NOT NULL,
  metadata BYTEA NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (thread_id, checkpoint_id));
CREATE INDEX weir_checkpoints_latest ON weir_checkpoints (thread_id, seq);
CREATE TABLE weir_threads (thread_id TEXT NOT NULL PRIMARY KEY, updated_seq BIGINT NOT NULL,
  updated_at BIGINT NOT NULL);
CREATE INDEX weir_threads_recent ON weir_threads (updated_seq);
CREATE TABLE weir_artifacts (thread_id TEXT NOT NULL, artifact_id TEXT NOT NULL,
  media_type TEXT NOT NULL, bytes BYTEA NOT NULL, created_at BIGINT NOT NULL,
  PRIMARY KEY (thread_id, artifact_id));
CREATE TABLE weir_thread_holders (thread_id TEXT NOT NULL PRIMARY KEY, token TEXT NOT NULL,
  host TEXT NOT NULL, pid BIGINT NOT NULL, lease_ms BIGINT NOT NULL, since BIGINT NOT NULL,
  heartbeat BIGINT NOT NULL);
CREATE SEQUENCE weir_run_fence_seq;
CREATE TABLE weir_runs (id TEXT NOT NULL PRIMARY KEY, workflow_name TEXT NOT NULL,
  workflow_file TEXT NOT NULL, workflow TEXT NOT NULL, workflow_sha256 TEXT NOT NULL,
  input TEXT NOT NULL, resume TEXT, thread_id TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled',
    'interrupted')),
  attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
  lease_owner TEXT, lease_expires TIMESTAMPTZ, fence BIGINT NOT NULL DEFAULT 0,
  cancel_requested BOOLEAN NOT NULL DEFAULT false, not_before TIMESTAMPTZ, result TEXT,
  error_code TEXT, error TEXT, created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ);
CREATE INDEX weir_runs_open ON weir_runs (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX weir_runs_recent ON weir_runs (created_at);
INSERT INTO weir_runs (id, workflow_name, workflow_file, workflow, workflow_sha256, input,
  thread_id, state, attempts, max_attempts, fence, result, created_at, started_at, finished_at)
VALUES ('r-old-done', 'x', '/x.json', '{}', 'aa', '{"n": 1}', 'r-old-done', 'succeeded', 1, 3, 1,
  '{"n": 2}', '2026-01-02 03:04:05.678+00', '2026-01-02 03:04:06+00', '2026-01-02 03:04:07+00'),
  ('r-old-queued', 'x', '/x.json', '{}', 'aa', '{"n": 5}', 'r-old-queued', 'queued', 0, 3, 0,
  NULL, '2026-01-02 03:05:00+00', NULL, NULL);
)sql";
}

// A database a version-1 weir wrote (the checkpointer's tables at version 1, and the queue's
// table as that weir made it outside any version: TIMESTAMPTZ times, TEXT JSON) is migrated
// on open, keeping every run and its times; its queued run is then claimed as any other.
TEST(RunQueue, AVersionOneDatabaseIsMigratedKeepingItsRuns) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  ASSERT_EQ(PgServer::get().exec_admin(version_one_schema(), dbname(db)), "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto done = (*q)->get("r-old-done");
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->state, weir::cluster::RunState::succeeded);
  EXPECT_EQ(done->created_ms, 1767323045678);  // 2026-01-02 03:04:05.678 UTC
  EXPECT_EQ(done->started_ms, 1767323046000);
  EXPECT_EQ(done->finished_ms, 1767323047000);
  EXPECT_EQ(done->input, R"({"n": 1})");
  EXPECT_EQ(done->result, R"({"n": 2})");
  auto claimed = (*q)->claim("w", 60s);
  ASSERT_TRUE(claimed) << claimed.error().message;
  ASSERT_TRUE(*claimed);
  EXPECT_EQ((**claimed).id, "r-old-queued");
  EXPECT_EQ((**claimed).input, R"({"n": 5})");
  EXPECT_GT((**claimed).lease_expires_ms, (**claimed).started_ms);
  EXPECT_EQ(PgServer::get().exec_admin(
                "DO $$ BEGIN IF (SELECT max(version) FROM weir_schema_version) <> 5 THEN "
                "RAISE 'not migrated'; END IF; END $$",
                dbname(db)),
            "");
  EXPECT_EQ(done->traceparent, "");  // version 3's column, empty for a run from before traces
}

// A weir with traces but before the one schema version added weir_runs.traceparent to its
// TIMESTAMPTZ table on its own: that database is migrated like any version-1 one, and the
// trace contexts it recorded are kept.
TEST(RunQueue, AVersionOneDatabaseWithTraceContextsKeepsThem) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const std::string tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  ASSERT_EQ(PgServer::get().exec_admin(
                version_one_schema() +
                    "ALTER TABLE weir_runs ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';"
                    "UPDATE weir_runs SET traceparent = '" +
                    tp + "' WHERE id = 'r-old-queued';",
                dbname(db)),
            "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto claimed = (*q)->claim("w", 60s);
  ASSERT_TRUE(claimed) << claimed.error().message;
  ASSERT_TRUE(*claimed);
  EXPECT_EQ((**claimed).id, "r-old-queued");
  EXPECT_EQ((**claimed).traceparent, tp);
  auto done = (*q)->get("r-old-done");
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->traceparent, "");
  EXPECT_EQ(done->created_ms, 1767323045678);
}

// Versions 3 to 5 are steps of the one migration path, not something the queue's open patches:
// a version-2 database (weir_runs without traceparent or seq, no weir_put_checkpoint) is brought
// to the current version by whichever opens it first, the checkpointer too, keeping its runs; a
// run then records its trace context and is listed after the old one.
TEST(RunQueue, AVersionTwoDatabaseIsMigratedToTheCurrentVersion) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  {
    auto q = weir::cluster::RunQueue::open(db);
    ASSERT_TRUE(q) << q.error().message;
  }
  // Back to version 2 as a weir of that version left it, with a run in it.
  ASSERT_EQ(PgServer::get().exec_admin(
                "ALTER TABLE weir_runs DROP COLUMN traceparent;"
                "ALTER TABLE weir_runs DROP COLUMN seq; DROP SEQUENCE weir_run_seq;"
                "DROP FUNCTION weir_put_checkpoint;"
                "DELETE FROM weir_schema_version WHERE version >= 3;"
                "INSERT INTO weir_runs (id, workflow_name, workflow_file, workflow, "
                "workflow_sha256, input, thread_id, state, max_attempts) VALUES ('r-v2', 'x', "
                "'/x.json', '{}', 'aa', convert_to('{}', 'UTF8'), 'r-v2', 'queued', 3);",
                dbname(db)),
            "");
  {  // the checkpointer, which never reads weir_runs, migrates it as the queue would
    auto cp = weir::graph::open_postgres_checkpointer(db);
    ASSERT_TRUE(cp) << cp.error().message;
    weir::graph::Checkpoint c;  // and its put is version 5's one statement
    c.thread_id = "t-v2";
    c.checkpoint_id = weir::graph::new_checkpoint_id(0);
    c.writes["n"] = 1;
    auto put = (*cp)->put(c);
    ASSERT_TRUE(put) << put.error().message;
  }
  EXPECT_EQ(PgServer::get().exec_admin(
                "DO $$ BEGIN IF (SELECT max(version) FROM weir_schema_version) <> 5 OR "
                "(SELECT count(*) FROM information_schema.columns WHERE table_name = "
                "'weir_runs' AND column_name IN ('traceparent', 'seq')) <> 2 OR "
                "to_regproc('weir_put_checkpoint') IS NULL THEN "
                "RAISE 'not at version 5'; END IF; END $$",
                dbname(db)),
            "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto old = (*q)->get("r-v2");
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_EQ(old->traceparent, "");
  auto req = tiny_request();
  req.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto id = (*q)->submit(req);
  ASSERT_TRUE(id) << id.error().message;
  auto rec = (*q)->get(*id);
  ASSERT_TRUE(rec) << rec.error().message;
  EXPECT_EQ(rec->traceparent, req.traceparent);
  auto listed = (*q)->list(10);
  ASSERT_TRUE(listed) << listed.error().message;
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].id, *id);
  EXPECT_EQ((*listed)[1].id, "r-v2");
}

TEST(RunQueue, SubmitThenAWorkerRunsItToItsFinalState) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("three_loops", 3, 10);
  const std::string id = submit(db, wf, " --input '{\"n\": 10}' --thread t-one");
  ASSERT_EQ(id.rfind("r-", 0), 0u) << id;
  auto queued = run_json(db, id);
  EXPECT_EQ(queued.at("state"), "queued");
  EXPECT_EQ(queued.at("thread_id"), "t-one");
  auto w = run_weir("worker --once --db '" + db + "'");
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_EQ(w.err.find("Secr3tPw"), std::string::npos) << w.err;
  EXPECT_NE(w.err.find("1 claimed: 1 succeeded"), std::string::npos) << w.err;
  auto done = run_json(db, id);
  EXPECT_EQ(done.at("state"), "succeeded") << done;
  EXPECT_EQ(done.at("attempts"), 1);
  // The input set n to 10 and the loop added 1 before its first check: it ends at once.
  EXPECT_EQ(done.at("result").at("n"), 11) << done;
  EXPECT_EQ(done.at("result").at("slept"), 10) << done;
  auto list = run_weir("runs --db '" + db + "'");
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find(id), std::string::npos);
  EXPECT_NE(list.out.find("succeeded"), std::string::npos) << list.out;
  auto c = committed(db, "t-one");
  for (const auto& [step, n] : c.per_step) EXPECT_EQ(n, 1) << "step " << step;
}

// Both workers are up (each has said so) before the runs are queued, and a run lasts about half
// a second, so each worker claims some whatever the machine's load (neither can drain 20 runs
// with 4 slots before the other's first claim); then every run is checked to have run once.
TEST(RunQueue, TwoWorkersRunTwentyRunsEachExactlyOnce) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("four_loops", 4, 100);
  // The schema exists before the workers race to make it (they would wait on its lock).
  ASSERT_TRUE(weir::cluster::RunQueue::open(db));
  auto a = start_worker("--db '" + db + "' --max-runs 4 --name a");
  auto b = start_worker("--db '" + db + "' --max-runs 4 --name b");
  ASSERT_TRUE(eventually(
      [&] {
        return a->stderr_text().find("worker a on ") != std::string::npos &&
               b->stderr_text().find("worker b on ") != std::string::npos;
      },
      30s))
      << a->stderr_text() << b->stderr_text();
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(submit(db, wf));
  ASSERT_TRUE(eventually([&] { return count_in_state(db, "succeeded") == ids.size(); }, 120s))
      << a->stderr_text() << b->stderr_text();
  ::kill(a->pid, SIGTERM);
  ::kill(b->pid, SIGTERM);
  EXPECT_EQ(a->wait_exit(), 0) << a->stderr_text();
  EXPECT_EQ(b->wait_exit(), 0) << b->stderr_text();
  std::size_t by_a = 0;
  for (const auto& id : ids) {
    auto r = run_json(db, id);
    EXPECT_EQ(r.at("state"), "succeeded") << r;
    EXPECT_EQ(r.at("attempts"), 1) << r;
    EXPECT_EQ(r.at("result").at("n"), 4) << r;
    // Every (run, step) committed exactly once: 4 loops of 3 supersteps.
    auto c = committed(db, id);
    EXPECT_EQ(c.per_step.size(), 12u) << id;
    for (const auto& [step, n] : c.per_step) EXPECT_EQ(n, 1) << id << " step " << step;
  }
  const std::string la = a->stderr_text(), lb = b->stderr_text();
  for (std::size_t p = 0; (p = la.find(": succeeded", p)) != std::string::npos; ++p) ++by_a;
  EXPECT_GT(by_a, 0u) << "worker a ran nothing:\n" << la << "\nb:\n" << lb;
  EXPECT_LT(by_a, 20u) << "worker b ran nothing:\n" << lb;
}

TEST(RunQueue, AKilledWorkersRunIsResumedFromItsLastCheckpointByAnother) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("slow_loops", 6, 300);  // 18 supersteps, ~1.8 s
  const std::string id = submit(db, wf);
  auto a = start_worker("--db '" + db + "' --lease 1s --name doomed");
  // Kill it once it committed a few steps, in the middle of a nap.
  ASSERT_TRUE(eventually([&] { return committed(db, id).total >= 4; }, 20s)) << a->stderr_text();
  std::this_thread::sleep_for(100ms);
  a->kill9();
  const auto before = committed(db, id);
  const auto killed_at = Clock::now();
  ASSERT_EQ(state_of(db, id), "running");
  auto b = run_weir("worker --once --db '" + db + "' --lease 1s --poll 100ms --name rescuer");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_LT(Clock::now() - killed_at, 10s);
  auto r = run_json(db, id);
  EXPECT_EQ(r.at("state"), "succeeded") << r << "\n" << b.err;
  EXPECT_EQ(r.at("attempts"), 2) << r;
  EXPECT_EQ(r.at("result").at("n"), 6) << r;
  auto after = committed(db, id);
  EXPECT_EQ(after.per_step.size(), 18u);
  for (const auto& [step, n] : after.per_step) EXPECT_EQ(n, 1) << "step " << step;
  // What the first attempt committed is kept as it was; the second began after it.
  std::int64_t last_of_first = 0;
  for (const auto& [step, attempt] : before.attempt_of_step) {
    EXPECT_EQ(attempt, 1);
    EXPECT_EQ(after.attempt_of_step.at(step), 1) << "step " << step << " was committed again";
    last_of_first = std::max(last_of_first, step);
  }
  for (const auto& [step, attempt] : after.attempt_of_step)
    if (step > last_of_first) {
      EXPECT_EQ(attempt, 2) << "step " << step;
    }
  EXPECT_NE(b.err.find("claimed " + id + " (attempt 2/3"), std::string::npos) << b.err;
}

// The cap bounds the run, not each attempt: a run whose worker died is continued by another
// that counts the supersteps the first committed (12 of the loop's 18 in all, not 12 more).
TEST(RunQueue, ARunsRecursionLimitCountsTheStepsOfItsEarlierAttempts) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("capped_loops", 6, 300, 12);  // 18 supersteps, a cap of 12
  const std::string id = submit(db, wf);
  auto a = start_worker("--db '" + db + "' --lease 1s --name doomed");
  ASSERT_TRUE(eventually([&] { return committed(db, id).total >= 4; }, 20s)) << a->stderr_text();
  std::this_thread::sleep_for(100ms);
  a->kill9();
  auto b = run_weir("worker --once --db '" + db + "' --lease 1s --poll 100ms --name rescuer");
  ASSERT_EQ(b.code, 0) << b.err;
  auto r = run_json(db, id);
  EXPECT_EQ(r.at("state"), "failed") << r << "\n" << b.err;
  EXPECT_EQ(r.at("attempts"), 2) << r;
  EXPECT_NE(json::serialize(r.at("error"))
                .find("run stopped after 12 supersteps "
                      "(recursion_limit=12)"),
            std::string::npos)
      << r;
  EXPECT_EQ(committed(db, id).per_step.size(), 12u) << "12 supersteps over both attempts";
}

TEST(RunQueue, ARunFailsAfterMaxAttemptsNamingThem) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("doomed", 3, 5000);
  const std::string id = submit(db, wf, " --max-attempts 1");
  auto a = start_worker("--db '" + db + "' --lease 1s --name first");
  ASSERT_TRUE(eventually([&] { return state_of(db, id) == "running"; }, 20s)) << a->stderr_text();
  a->kill9();
  auto b = run_weir("worker --db '" + db + "' --lease 1s --poll 100ms --exit-when-idle");
  ASSERT_EQ(b.code, 0) << b.err;
  // Its lease had not lapsed when b looked first: b found nothing claimable and left; wait.
  ASSERT_TRUE(eventually(
      [&] {
        (void)run_weir("worker --db '" + db + "' --lease 1s --exit-when-idle");
        return state_of(db, id) == "failed";
      },
      10s));
  auto r = run_json(db, id);
  EXPECT_EQ(r.at("error").at("code"), "attempts_exhausted") << r;
  const std::string msg(r.at("error").at("message").as_string());
  EXPECT_NE(msg.find("run " + id + " failed after 1 attempt (max_attempts=1)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("last holder: first"), std::string::npos) << msg;
}

// `weir cancel` reaches a run inside a node's wait: the run is in a 60 s `sleep` node, which
// looks at the run's cancel flag every 50 ms, and it is recorded cancelled long before the
// node would end (typically in about 0.1 s; asserted under 20 s, so a loaded machine does not
// fail it, while a cancel that waited for the node would).
TEST(RunQueue, CancelReachesARunningRunInsideItsNode) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("long_nap", 1, 60000);
  const std::string id = submit(db, wf);
  auto w = start_worker("--db '" + db + "' --once");
  ASSERT_TRUE(eventually([&] { return state_of(db, id) == "running"; }, 30s)) << w->stderr_text();
  std::this_thread::sleep_for(200ms);  // inside the nap, most likely (either way it must stop)
  const auto t0 = Clock::now();
  auto c = run_weir("cancel " + id + " --db '" + db + "'");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, id + ": cancel requested; its worker stops it before its next superstep\n");
  ASSERT_TRUE(eventually([&] { return state_of(db, id) == "cancelled"; }, 20s))
      << state_of(db, id) << "\n"
      << w->stderr_text();
  std::printf(
      "cancel reached the run in %lld ms\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  EXPECT_EQ(w->wait_exit(), 0) << w->stderr_text();
  auto r = run_json(db, id);
  EXPECT_EQ(r.at("error").at("code"), "cancelled") << r;
  // A queued run is cancelled at once; a finished one is left alone.
  const std::string queued = submit(db, wf);
  auto q = run_weir("cancel " + queued + " --db '" + db + "'");
  EXPECT_EQ(q.out, queued + ": cancelled (it had not started)\n");
  auto again = run_weir("cancel " + queued + " --db '" + db + "'");
  EXPECT_EQ(again.out, queued + ": already cancelled; nothing to cancel\n");
}

TEST(RunQueue, ClearErrorsWithoutThePassword) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const std::string shown = "postgres 'weir@127.0.0.1:" + std::to_string(PgServer::get().port()) +
                            "/" + db.substr(db.rfind('/') + 1) + "'";
  auto unknown = run_weir("cancel r-nope --db '" + db + "'");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err, "weir cancel: no run 'r-nope' in " + shown + "\n");
  auto unknown_runs = run_weir("runs r-nope --db '" + db + "'");
  EXPECT_EQ(unknown_runs.code, 1);
  EXPECT_EQ(unknown_runs.err, "weir runs: no run 'r-nope' in " + shown + "\n");
  // Nothing listens on port 1: a store error (exit 4), not a failed run.
  auto down = run_weir("runs --db 'postgres://weir:Secr3tPw@127.0.0.1:1/x'");
  EXPECT_EQ(down.code, 4);
  EXPECT_EQ(down.err.rfind("weir runs: postgres 'weir@127.0.0.1:1/x': connecting: ", 0), 0u)
      << down.err;
  EXPECT_EQ(down.err.find("Secr3tPw"), std::string::npos) << down.err;
  auto bad = run_weir("worker --db 'postgres://weir:Secr3tPw@127.0.0.1:notaport/x'");
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_EQ(bad.err.find("Secr3tPw"), std::string::npos) << bad.err;
  auto none = run_weir("submit " + slow_workflow("x", 1, 1).string());
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("give the queue's database: --db"), std::string::npos) << none.err;
  auto bad_input =
      run_weir("submit " + slow_workflow("x", 1, 1).string() + " --db '" + db + "' --input '[1]'");
  EXPECT_EQ(bad_input.code, 1);
  EXPECT_NE(bad_input.err.find("--input must be a JSON object"), std::string::npos)
      << bad_input.err;
}

// A worker started before its database is reachable keeps trying with backoff, saying so, and
// gives up after --connect-timeout naming the tries; --connect-timeout 0 tries once. (3 s: the
// 250 and 500 ms retries come well inside it even when the first try is slow.)
TEST(RunQueue, AWorkerWaitsForItsDatabaseUpToTheConnectTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  auto down = run_weir("worker --db 'postgres://weir:Secr3tPw@127.0.0.1:1/x' --connect-timeout 3s");
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(down.code, 4) << down.err;
  EXPECT_NE(down.err.find("weir worker: postgres 'weir@127.0.0.1:1/x': connecting: "),
            std::string::npos)
      << down.err;
  EXPECT_NE(down.err.find("; trying again in 250 ms\n"), std::string::npos) << down.err;
  EXPECT_NE(down.err.find("; trying again in 500 ms\n"), std::string::npos) << down.err;
  EXPECT_NE(down.err.find(" tries in 3 s)\n"), std::string::npos) << down.err;
  EXPECT_EQ(down.err.find("Secr3tPw"), std::string::npos) << down.err;
  EXPECT_GE(waited, std::chrono::milliseconds(700));
  auto once = run_weir("worker --db 'postgres://weir@127.0.0.1:1/x' --connect-timeout 0s");
  EXPECT_EQ(once.code, 4);
  EXPECT_EQ(once.err.find("trying again"), std::string::npos) << once.err;
  EXPECT_EQ(once.err.find("gave up"), std::string::npos) << once.err;
}

// The fence, at the library level: a holder whose lease lapsed and was reclaimed can neither
// renew nor record an end. The lease lapses by the database's clock, moved here by hand, so the
// test does not depend on how fast this machine runs.
TEST(RunQueue, AReclaimedRunsOldHolderIsFencedOut) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto id = (*q)->submit(tiny_request());
  ASSERT_TRUE(id) << id.error().message;
  auto first = (*q)->claim("w1", 60s);
  ASSERT_TRUE(first && *first);
  EXPECT_EQ((**first).attempts, 1);
  auto none = (*q)->claim("w2", 60s);  // still held
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  lapse_leases(db);
  auto second = (*q)->claim("w2", 60s);
  ASSERT_TRUE(second && *second);
  EXPECT_EQ((**second).attempts, 2);
  EXPECT_GT((**second).fence, (**first).fence);
  auto renew = (*q)->renew(*id, (**first).fence, 10s);
  ASSERT_FALSE(renew);
  EXPECT_TRUE(renew.error().is(weir::Errc::thread_busy)) << renew.error().message;
  EXPECT_NE(renew.error().message.find("held by w2"), std::string::npos) << renew.error().message;
  auto fin = (*q)->finish(*id, (**first).fence, weir::cluster::RunState::succeeded, "{}", "", "");
  ASSERT_FALSE(fin);
  EXPECT_TRUE(fin.error().is(weir::Errc::thread_busy));
  EXPECT_TRUE(
      (*q)->finish(*id, (**second).fence, weir::cluster::RunState::succeeded, "{}", "", ""));
  EXPECT_EQ((*q)->get(*id)->state, weir::cluster::RunState::succeeded);
}

// A worker claims as many runs as it has room for in one statement: the claimable ones, oldest
// first, each with its own fence; a thread's younger run waits for its older one; a run whose
// attempts are used up is failed in the claim and another is taken in its place.
TEST(RunQueue, ClaimManyTakesTheClaimableRunsOldestFirstEachWithItsFence) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto submit = [&](const std::string& thread, int max_attempts = 3) {
    auto req = tiny_request();
    req.thread_id = thread;
    req.enqueue = true;
    req.max_attempts = max_attempts;
    auto id = (*q)->submit(req);
    EXPECT_TRUE(id) << id.error().message;
    return id ? *id : std::string();
  };
  const std::string spent = submit("t-spent", 1);
  auto first = (*q)->claim("w0", 60s);  // its only attempt, which then lapses
  ASSERT_TRUE(first && *first);
  lapse_leases(db);
  const std::string a1 = submit("t-a"), a2 = submit("t-a"), b = submit("t-b"), c = submit("t-c");
  auto got = (*q)->claim_many("w1", 60s, {}, 3);
  ASSERT_TRUE(got) << got.error().message;
  std::vector<std::string> ids;
  for (const auto& rec : *got) ids.push_back(rec.id);
  EXPECT_EQ(ids, (std::vector<std::string>{a1, b, c}));
  std::set<int64_t> fences;
  for (const auto& rec : *got) {
    EXPECT_EQ(rec.state, weir::cluster::RunState::running);
    EXPECT_EQ(rec.lease_owner, "w1");
    fences.insert(rec.fence);
  }
  EXPECT_EQ(fences.size(), 3u);
  auto gone = (*q)->get(spent);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->state, weir::cluster::RunState::failed);
  EXPECT_EQ(gone->error_code, "attempts_exhausted");
  auto none = (*q)->claim_many("w2", 60s, {}, 8);  // a2 waits for a1
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE((*q)->finish(a1, (*got)[0].fence, weir::cluster::RunState::succeeded, "{}", "", ""));
  auto next = (*q)->claim_many("w2", 60s, {}, 8);
  ASSERT_TRUE(next) << next.error().message;
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ(next->front().id, a2);
  EXPECT_GT(next->front().fence, *fences.rbegin());
}

// A worker renews the leases of all its runs in one statement, and hears per run what renew
// says: cancel requested, or fenced out (the new holder named), or gone.
TEST(RunQueue, RenewAllRenewsEachHeldRunAndSaysWhichWereLost) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  std::vector<weir::cluster::RunQueue::Lease> leases;
  for (int i = 0; i < 3; ++i) {
    auto id = (*q)->submit(tiny_request());
    ASSERT_TRUE(id) << id.error().message;
    auto got = (*q)->claim("w1", 60s);
    ASSERT_TRUE(got && *got);
    leases.push_back({(**got).id, (**got).fence});
  }
  lapse_leases(db);
  auto taken = (*q)->claim("w2", 60s, {leases[1].id, leases[2].id});  // the first run
  ASSERT_TRUE(taken && *taken);
  ASSERT_EQ((**taken).id, leases[0].id);
  ASSERT_TRUE((*q)->cancel(leases[2].id));
  leases.push_back({"r-0000", 1});
  auto r = (*q)->renew_all(leases, 60s);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 4u);
  ASSERT_FALSE((*r)[0]);
  EXPECT_TRUE((*r)[0].error().is(weir::Errc::thread_busy));
  EXPECT_NE((*r)[0].error().message.find("held by w2"), std::string::npos)
      << (*r)[0].error().message;
  ASSERT_TRUE((*r)[1]) << (*r)[1].error().message;
  EXPECT_FALSE(*(*r)[1]);
  ASSERT_TRUE((*r)[2]) << (*r)[2].error().message;
  EXPECT_TRUE(*(*r)[2]) << "cancel requested";
  ASSERT_FALSE((*r)[3]);
  EXPECT_EQ((*r)[3].error().to_string().rfind("not_found: no run 'r-0000'", 0), 0u)
      << (*r)[3].error().to_string();
  // The two still held got a fresh lease: lapsing none, nobody can take them.
  auto none = (*q)->claim("w3", 60s);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  EXPECT_TRUE((*q)->renew_all({}, 60s)->empty());
}

// Runs keep the order they were queued in even when many share a millisecond (created_at's
// unit): `weir runs` lists them newest first, its cursor pages through them without a gap or a
// repeat, and workers claim them oldest first. (CI's machine queues several a millisecond.)
TEST(RunQueue, RunsQueuedInOneMillisecondKeepTheirOrder) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  std::vector<std::string> queued;
  for (int i = 0; i < 24; ++i) {
    auto id = (*q)->submit(tiny_request());
    ASSERT_TRUE(id) << id.error().message;
    queued.push_back(*id);
  }
  ASSERT_EQ(
      PgServer::get().exec_admin("UPDATE weir_runs SET created_at = 1767323045678", dbname(db)),
      "");
  std::vector<std::string> listed;
  std::string after;
  for (;;) {
    auto page = (*q)->list(5, std::nullopt, after);
    ASSERT_TRUE(page) << page.error().message;
    if (page->empty()) break;
    for (const auto& r : *page) listed.push_back(r.id);
    after = page->back().id;
  }
  EXPECT_EQ(listed, std::vector<std::string>(queued.rbegin(), queued.rend()));
  std::vector<std::string> claimed;
  for (std::size_t i = 0; i < queued.size(); ++i) {
    auto c = (*q)->claim("w", 60s);
    ASSERT_TRUE(c && *c);
    claimed.push_back((**c).id);
  }
  EXPECT_EQ(claimed, queued);
}

// Ids are refused, not truncated: PostgreSQL text stops at a NUL, so "a\0b" would have become
// thread "a", one thread for two ids. Nothing is queued.
TEST(RunQueue, SubmitRefusesAThreadIdThatIsNotText) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto req = tiny_request();
  req.thread_id = std::string("a\0b", 3);
  auto id = (*q)->submit(req);
  ASSERT_FALSE(id) << "queued " << *id << " on thread '" << (*q)->get(*id)->thread_id << "'";
  EXPECT_TRUE(id.error().is(weir::Errc::invalid_argument)) << id.error().message;
  EXPECT_EQ(id.error().message,
            "thread_id holds a control character (byte 0x00 at offset 1, after 'a'); an id is 1 "
            "to 1024 bytes of UTF-8 text without control characters");
  req.thread_id = "t\xff";
  auto bad_utf8 = (*q)->submit(req);
  ASSERT_FALSE(bad_utf8);
  EXPECT_EQ(bad_utf8.error().message,
            "thread_id is not valid UTF-8 (byte 0xff at offset 1, after 't'); an id is 1 to "
            "1024 bytes of UTF-8 text without control characters");
  auto listed = (*q)->list(10);
  ASSERT_TRUE(listed);
  EXPECT_TRUE(listed->empty());
}

// A run's input and result are JSON text of any bytes, as a checkpoint's values are (bytea, not
// text: invalid UTF-8 in a string is kept as it was), and its error message is recorded even
// when it quotes bytes text cannot hold (they become U+FFFD): an end is never unrecordable.
TEST(RunQueue, InputsResultsAndErrorsOfAnyBytesAreRecorded) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  auto req = tiny_request();
  req.input = "{\"s\": \"caf\xe9\"}";  // Latin-1, as a file read as bytes would give it
  auto id = (*q)->submit(req);
  ASSERT_TRUE(id) << id.error().message;
  auto held = (*q)->claim("w", 60s);
  ASSERT_TRUE(held && *held);
  EXPECT_EQ((**held).input, req.input);
  const std::string result = "{\"out\": \"\xff\xfe\"}";
  ASSERT_TRUE(
      (*q)->finish(*id, (**held).fence, weir::cluster::RunState::succeeded, result, "", ""));
  auto rec = (*q)->get(*id);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->result, result);
  auto other = (*q)->submit(tiny_request());
  ASSERT_TRUE(other);
  auto held2 = (*q)->claim("w", 60s);
  ASSERT_TRUE(held2 && *held2);
  auto fin = (*q)->finish(*other, (**held2).fence, weir::cluster::RunState::failed, "",
                          "tool_failed", std::string("tool said \xff and \0 then stopped", 30));
  ASSERT_TRUE(fin) << fin.error().message;
  auto failed = (*q)->get(*other);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->error, "tool said \xef\xbf\xbd and \xef\xbf\xbd then stopped");
}

}  // namespace
