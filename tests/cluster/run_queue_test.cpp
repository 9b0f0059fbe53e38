// The run queue (weir::cluster) and `weir submit / worker / runs / cancel` against a throwaway
// PostgreSQL cluster (pg_server.hpp; ctest label scaleout). Workers are `weir worker` processes,
// so a test can kill one with SIGKILL in the middle of a run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "pg_server.hpp"
#include "run_weir.hpp"
#include "weir/cluster/run_queue.hpp"
#include "weir/graph/checkpointer.hpp"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using weir::testing::PgServer;
using Clock = std::chrono::steady_clock;

using weir::testing::Run;
using weir::testing::run_weir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("weir_queue_" + std::to_string(::getpid()) + "_" + name);
}

// A `weir worker` process in the background; its stderr goes to a file.
struct WorkerProc {
  pid_t pid = -1;
  fs::path log;
  int wait_exit() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void kill9() {
    ::kill(pid, SIGKILL);
    wait_exit();
  }
  std::string stderr_text() const { return slurp(log); }
  ~WorkerProc() {
    if (pid > 0) kill9();
    std::error_code ec;
    fs::remove(log, ec);
  }
};

std::unique_ptr<WorkerProc> start_worker(const std::string& args) {
  static int n = 0;
  auto w = std::make_unique<WorkerProc>();
  w->log = temp_path("worker" + std::to_string(n++));
  const std::string cmd =
      "exec " + std::string(WEIR_BIN_DIR) + "/weir worker " + args + " 2>" + w->log.string();
  w->pid = ::fork();
  if (w->pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return w;
}

std::string fresh_db() {
  return weir::testing::fresh_database_uri();
}

// `loops` times: sleep `ms`, then add 1 to n; three supersteps a loop (nap, tick, check).
fs::path slow_workflow(const std::string& name, int loops, int ms) {
  const fs::path p = temp_path(name + ".json");
  std::ofstream(p) << R"({"name": ")" << name << R"(",
 "state": {"n": {"reducer": "sum", "default": 0}, "slept": {}},
 "tools": {"wait": {"builtin": "sleep"}},
 "limits": {"recursion_limit": 200},
 "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": )"
                   << ms << R"(}, "output": "slept"},
           "tick": {"kind": "set", "values": {"n": 1}},
           "check": {"kind": "router"}},
 "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "tick"},
           {"from": "tick", "to": "check"},
           {"from": "check", "route": {"when": {"channel": "n", "op": ">=", "value": )"
                   << loops << R"(}, "then": "END", "else": "nap"}}]})";
  return p;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string submit(const std::string& db, const fs::path& wf, const std::string& extra = "") {
  auto r = run_weir("submit " + wf.string() + " --db '" + db + "'" + extra);
  EXPECT_EQ(r.code, 0) << r.err;
  return trim(r.out);
}

json::object run_json(const std::string& db, const std::string& id) {
  auto r = run_weir("runs --db '" + db + "' " + id);
  EXPECT_EQ(r.code, 0) << r.err;
  auto v = json::parse(r.out);
  return v.as_object();
}

// Checkpoints of the thread by step number, and by the attempt that committed them.
struct Committed {
  std::map<std::int64_t, int> per_step;
  std::map<std::int64_t, std::int64_t> attempt_of_step;
  std::size_t total = 0;
};
Committed committed(const std::string& db, const std::string& thread) {
  Committed c;
  auto cp = weir::graph::open_postgres_checkpointer(db);
  EXPECT_TRUE(cp) << cp.error().message;
  if (!cp) return c;
  auto list = (*cp)->list(thread, 100000);
  EXPECT_TRUE(list) << list.error().message;
  if (!list) return c;
  for (const auto& k : *list) {
    ++c.per_step[k.step];
    if (const auto* a = k.metadata.if_contains("attempt"); a && a->is_int64())
      c.attempt_of_step[k.step] = a->as_int64();
    ++c.total;
  }
  return c;
}

// Polls `pred` every 20 ms for up to `limit`; true when it held.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

std::string state_of(const std::string& db, const std::string& id) {
  auto q = weir::cluster::RunQueue::open(db);
  if (!q) return "error: " + q.error().message;
  auto r = (*q)->get(id);
  if (!r) return "error: " + r.error().message;
  return weir::cluster::run_state_name(r->state);
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

TEST(RunQueue, TwoWorkersRunTwentyRunsEachExactlyOnce) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("four_loops", 4, 20);
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(submit(db, wf));
  auto a = start_worker("--db '" + db + "' --max-runs 4 --exit-when-idle --name a");
  auto b = start_worker("--db '" + db + "' --max-runs 4 --exit-when-idle --name b");
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

TEST(RunQueue, CancelReachesARunningRunWithinASecond) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  const auto wf = slow_workflow("long_nap", 1, 60000);
  const std::string id = submit(db, wf);
  auto w = start_worker("--db '" + db + "' --once");
  ASSERT_TRUE(eventually([&] { return state_of(db, id) == "running"; }, 20s)) << w->stderr_text();
  std::this_thread::sleep_for(200ms);  // inside the nap
  const auto t0 = Clock::now();
  auto c = run_weir("cancel " + id + " --db '" + db + "'");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, id + ": cancel requested; its worker stops it before its next superstep\n");
  ASSERT_TRUE(eventually([&] { return state_of(db, id) == "cancelled"; }, 5s));
  const auto took = Clock::now() - t0;
  EXPECT_LT(took, 1s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                      << " ms";
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
  EXPECT_EQ(down.err.rfind("weir runs: cannot connect to postgres 'weir@127.0.0.1:1/x': ", 0), 0u)
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
  EXPECT_NE(down.err.find("weir worker: cannot connect to postgres 'weir@127.0.0.1:1/x': "),
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
// renew nor record an end.
TEST(RunQueue, AReclaimedRunsOldHolderIsFencedOut) {
  const std::string db = fresh_db();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  weir::cluster::SubmitRequest req;
  req.workflow = "{}";
  req.workflow_file = "/x.json";
  req.workflow_name = "x";
  auto id = (*q)->submit(req);
  ASSERT_TRUE(id) << id.error().message;
  auto first = (*q)->claim("w1", 100ms);
  ASSERT_TRUE(first && *first);
  EXPECT_EQ((**first).attempts, 1);
  auto none = (*q)->claim("w2", 100ms);  // still held
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  std::this_thread::sleep_for(150ms);
  auto second = (*q)->claim("w2", 10s);
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

}  // namespace
