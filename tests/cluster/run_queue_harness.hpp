// The run queue tests' harness (run_queue_test.cpp, run_queue_faults_test.cpp): `weir worker`
// processes, workflow files, submitting and reading runs with the CLI, and the checkpoints a
// thread committed, against the throwaway PostgreSQL cluster of pg_server.hpp.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <boost/json.hpp>

#include "pg_server.hpp"
#include "postgres_proxy.hpp"
#include "run_weir.hpp"
#include "weir/cluster/run_queue.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/pg/connection.hpp"

namespace weir::testing::queue {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using weir::testing::PgServer;
using Clock = std::chrono::steady_clock;

using weir::testing::Run;
using weir::testing::run_weir;

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline fs::path temp_path(const std::string& name) {
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

inline std::unique_ptr<WorkerProc> start_worker(const std::string& args) {
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

inline std::string fresh_db() {
  return weir::testing::fresh_database_uri();
}

// `loops` times: sleep `ms`, then add 1 to n; three supersteps a loop (nap, tick, check).
inline fs::path slow_workflow(const std::string& name, int loops, int ms,
                              int recursion_limit = 200) {
  const fs::path p = temp_path(name + ".json");
  std::ofstream(p) << R"({"name": ")" << name << R"(",
 "state": {"n": {"reducer": "sum", "default": 0}, "slept": {}},
 "tools": {"wait": {"builtin": "sleep"}},
 "limits": {"recursion_limit": )"
                   << recursion_limit << R"(},
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

inline std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

inline std::string submit(const std::string& db, const fs::path& wf,
                          const std::string& extra = "") {
  auto r = run_weir("submit " + wf.string() + " --db '" + db + "'" + extra);
  EXPECT_EQ(r.code, 0) << r.err;
  return trim(r.out);
}

inline json::object run_json(const std::string& db, const std::string& id) {
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
inline Committed committed(const std::string& db, const std::string& thread) {
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
inline bool eventually(Pred pred, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

inline std::string state_of(const std::string& db, const std::string& id) {
  auto q = weir::cluster::RunQueue::open(db);
  if (!q) return "error: " + q.error().message;
  auto r = (*q)->get(id);
  if (!r) return "error: " + r.error().message;
  return weir::cluster::run_state_name(r->state);
}

// A run request with a workflow that is never built (library-level tests claim it by hand).
inline weir::cluster::SubmitRequest tiny_request() {
  weir::cluster::SubmitRequest req;
  req.workflow = "{}";
  req.workflow_file = "/x.json";
  req.workflow_name = "x";
  return req;
}

// Moves every running run's lease into the past, by the database's clock (as a worker that
// stopped renewing would leave it after its lease).
inline void lapse_leases(const std::string& db) {
  ASSERT_EQ(PgServer::get().exec_admin(
                "UPDATE weir_runs SET lease_expires = lease_expires - 3600000 WHERE state = "
                "'running'",
                db.substr(db.rfind('/') + 1)),
            "");
}

inline std::string dbname(const std::string& db) {
  return db.substr(db.rfind('/') + 1);
}

// A fresh database whose sessions commit synchronously (the test server runs with
// synchronous_commit off for speed; an immediate stop would lose puts it acknowledged).
inline std::string durable_db() {
  const std::string db = fresh_db();
  if (db.empty()) return db;
  EXPECT_EQ(
      PgServer::get().exec_admin("ALTER DATABASE " + dbname(db) + " SET synchronous_commit = on"),
      "");
  return db;
}

inline std::vector<std::string> submit_many(const std::string& db, const fs::path& wf, int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(submit(db, wf));
  return ids;
}

inline std::size_t count_in_state(const std::string& db, const std::string& state) {
  auto q = weir::cluster::RunQueue::open(db);
  if (!q) return 0;
  auto n = (*q)->count(*weir::cluster::parse_run_state(state));
  return n ? *n : 0;
}

inline bool all_ended(const std::string& db, std::size_t runs) {
  return count_in_state(db, "succeeded") + count_in_state(db, "failed") +
             count_in_state(db, "cancelled") ==
         runs;
}

// Every run ended succeeded, after at most `max_attempts` claims, with each of its `steps`
// supersteps committed exactly once. `logs`: the workers' stderr, for the failure message.
inline void expect_all_succeeded_once(const std::string& db, const std::vector<std::string>& ids,
                                      std::size_t steps, int max_attempts,
                                      const std::string& logs) {
  for (const auto& id : ids) {
    auto r = run_json(db, id);
    EXPECT_EQ(r.at("state"), "succeeded") << r << "\n" << logs;
    EXPECT_LE(r.at("attempts").as_int64(), max_attempts) << r;
    auto c = committed(db, id);
    EXPECT_EQ(c.per_step.size(), steps) << id;
    for (const auto& [step, n] : c.per_step) EXPECT_EQ(n, 1) << id << " step " << step;
  }
}

}  // namespace weir::testing::queue
