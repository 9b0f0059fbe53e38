// `weir worker`, `weir cancel`, `weir runs` and `weir store prune` against a throwaway
// PostgreSQL (pg_server.hpp; label scaleout), where they met the operator's truth badly: an idle
// worker that left a dead worker's run behind, a cancel that called a run with nine checkpoints
// "not started", a list that stopped at a thousand, a prune that deleted a thread a queued run
// was to continue.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

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
using weir::testing::eventually;
using weir::testing::run_weir;
using weir::testing::start_weir;

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("weir_queue_cmd_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

// `loops` rounds of (nap `ms`, tick): two supersteps a round.
fs::path loop_workflow(const std::string& name, int loops, int ms) {
  return write_file(name + ".json", R"({"name": ")" + name + R"(",
 "state": {"n": {"reducer": "sum", "default": 0}, "slept": {}},
 "tools": {"wait": {"builtin": "sleep"}},
 "limits": {"recursion_limit": 500},
 "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": )" +
                                        std::to_string(ms) + R"(}, "output": "slept"},
           "tick": {"kind": "set", "values": {"n": 1}}},
 "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "tick"},
           {"from": "tick", "route": {"when": {"channel": "n", "op": ">=", "value": )" +
                                        std::to_string(loops) +
                                        R"(}, "then": "END", "else": "nap"}}]})");
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A run for the queue that no worker here takes (it only fills the queue).
weir::cluster::SubmitRequest placeholder_run() {
  weir::cluster::SubmitRequest req;
  req.workflow = "{}";
  req.workflow_file = "/x.json";
  req.workflow_name = "x";
  return req;
}

std::string submit(const std::string& db, const fs::path& wf, const std::string& extra = "") {
  auto r = run_weir("submit " + wf.string() + " --db '" + db + "'" + extra);
  EXPECT_EQ(r.code, 0) << r.err;
  return trim(r.out);
}

weir::cluster::RunRecord record(const std::string& db, const std::string& id) {
  auto q = weir::cluster::RunQueue::open(db);
  EXPECT_TRUE(q) << q.error().message;
  auto r = (*q)->get(id);
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : weir::cluster::RunRecord{};
}

// The run's own checkpoints on its thread.
std::size_t checkpoints_of(const std::string& db, const std::string& thread,
                           const std::string& run) {
  auto cp = weir::graph::open_checkpointer(db);
  if (!cp) return 0;
  auto l = (*cp)->list(thread, 10000);
  std::size_t n = 0;
  if (l)
    for (const auto& c : *l) {
      const auto* q = c.metadata.if_contains("queue_run");
      if (q && q->is_string() && q->as_string() == run) ++n;
    }
  return n;
}

// The worker that held a run was killed: `weir worker --exit-when-idle` waits for its lease to
// lapse, takes the run over and finishes it before it exits (it exited at once, leaving the run
// `running` with nobody to continue it).
TEST(QueueCommands, ExitWhenIdleWaitsForARunWhoseWorkerDied) {
  const std::string db = weir::testing::fresh_database_uri();
  ASSERT_NE(db, "");
  const auto wf = loop_workflow("died", 6, 300);
  const std::string id = submit(db, wf);
  auto a = start_weir("worker --db '" + db + "' --lease 1s");
  ASSERT_TRUE(eventually([&] { return checkpoints_of(db, id, id) >= 2; })) << a->stderr_text();
  a->kill_now();
  ASSERT_EQ(record(db, id).state, weir::cluster::RunState::running);
  auto b = run_weir("worker --db '" + db + "' --lease 1s --exit-when-idle");
  EXPECT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.err.find("1 claimed: 1 succeeded"), std::string::npos) << b.err;
  auto r = record(db, id);
  EXPECT_EQ(r.state, weir::cluster::RunState::succeeded) << r.error;
  EXPECT_EQ(r.attempts, 2);
  fs::remove(wf);
}

// A run its worker handed back (SIGTERM) after committing steps is queued again; `weir cancel`
// says it had started and how many checkpoints it keeps (it said "it had not started").
TEST(QueueCommands, CancelSaysARunHandedBackHadStarted) {
  const std::string db = weir::testing::fresh_database_uri();
  ASSERT_NE(db, "");
  const auto wf = loop_workflow("handed", 40, 100);
  const std::string id = submit(db, wf);
  auto w = start_weir("worker --db '" + db + "'");
  ASSERT_TRUE(eventually([&] { return checkpoints_of(db, id, id) >= 4; })) << w->stderr_text();
  ::kill(w->pid, SIGTERM);
  EXPECT_EQ(w->wait(), 0) << w->stderr_text();
  auto before = record(db, id);
  ASSERT_EQ(before.state, weir::cluster::RunState::queued) << before.error;
  const std::size_t kept = checkpoints_of(db, id, id);
  auto c = run_weir("cancel " + id + " --db '" + db + "'");
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, id + ": cancelled while it waited to continue (it had started: " +
                       std::to_string(kept) + " checkpoints on thread '" + id + "', kept)\n");
  EXPECT_EQ(record(db, id).state, weir::cluster::RunState::cancelled);
  fs::remove(wf);
}

// `weir runs` pages: past a thousand runs stderr names the next command, and --after lists the
// rest; --json prints the page as GET /v1/runs does.
TEST(QueueCommands, RunsPagesPastAThousandWithACursor) {
  const std::string db = weir::testing::fresh_database_uri();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  const auto req = placeholder_run();
  std::string first;
  for (int i = 0; i < 1005; ++i) {
    auto id = (*q)->submit(req);
    ASSERT_TRUE(id) << id.error().message;
    if (i == 0) first = *id;
  }
  auto page = run_weir("runs --db '" + db + "' --limit 1000");
  ASSERT_EQ(page.code, 0) << page.err;
  std::size_t lines = 0;
  std::string last;
  for (std::size_t at = 0; (at = page.out.find('\n', at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1001u);  // the header and a thousand runs
  const std::string more = "weir runs: more runs follow: weir runs --after ";
  const auto m = page.err.find(more);
  ASSERT_NE(m, std::string::npos) << page.err;
  last = page.err.substr(m + more.size(), 18);
  auto rest = run_weir("runs --db '" + db + "' --after " + last + " --json");
  ASSERT_EQ(rest.code, 0) << rest.err;
  auto o = json::parse(rest.out).as_object();
  EXPECT_EQ(o.at("data").as_array().size(), 5u);
  EXPECT_EQ(o.at("has_more"), false);
  EXPECT_EQ(o.at("last_id"), json::value(first));
  EXPECT_EQ(o.at("data").as_array()[0].at("object"), "run");
}

// `weir submit` queues past serve's 256 (CI's scale-out benchmark queues 300 before its workers
// start; the bound serve's HTTP clients meet refused it), and --max-queued-runs bounds it: the
// submit past it exits 3, says why and queues nothing.
TEST(QueueCommands, SubmitQueuesPastServesBoundAndMaxQueuedRunsRefuses) {
  const std::string db = weir::testing::fresh_database_uri();
  ASSERT_NE(db, "");
  auto q = weir::cluster::RunQueue::open(db);
  ASSERT_TRUE(q) << q.error().message;
  const auto req = placeholder_run();
  for (int i = 0; i < 300; ++i) ASSERT_TRUE((*q)->submit(req));
  const auto wf = loop_workflow("bounded", 1, 1);
  submit(db, wf);
  auto full = run_weir("submit " + wf.string() + " --db '" + db + "' --max-queued-runs 301");
  EXPECT_EQ(full.code, 3) << full.err;
  EXPECT_EQ(full.out, "");
  EXPECT_NE(full.err.find("the run queue is full (301 runs queued in postgres '"),
            std::string::npos)
      << full.err;
  EXPECT_NE(full.err.find("; --max-queued-runs=301)"), std::string::npos) << full.err;
  auto n = (*q)->count(weir::cluster::RunState::queued);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 301u);
  auto zero = run_weir("submit " + wf.string() + " --db '" + db + "' --max-queued-runs 0");
  EXPECT_EQ(zero.code, 1);
  EXPECT_NE(zero.err.find("--max-queued-runs"), std::string::npos) << zero.err;
  fs::remove(wf);
}

// Age-based retention skips a thread that a queued run of the queue will continue (it deleted
// its history: the run then started over on an empty thread).
TEST(QueueCommands, StorePruneSkipsAThreadAQueuedRunWillUse) {
  const std::string db = weir::testing::fresh_database_uri();
  ASSERT_NE(db, "");
  const auto wf = loop_workflow("kept", 2, 1);
  auto ran = run_weir("run " + wf.string() + " --thread chat --store '" + db + "'");
  ASSERT_EQ(ran.code, 0) << ran.err;
  auto other = run_weir("run " + wf.string() + " --thread old --store '" + db + "'");
  ASSERT_EQ(other.code, 0) << other.err;
  const std::string id = submit(db, wf, " --thread chat");  // no worker: it stays queued
  std::this_thread::sleep_for(300ms);
  auto pruned = run_weir("store prune --older-than 100ms --store '" + db + "'");
  EXPECT_EQ(pruned.code, 0) << pruned.err;
  EXPECT_NE(
      pruned.out.find("\nskipped thread 'chat' for --older-than: run " + id + " is queued on it\n"),
      std::string::npos)
      << pruned.out;
  auto cp = weir::graph::open_checkpointer(db);
  ASSERT_TRUE(cp);
  auto chat = (*cp)->latest("chat");
  ASSERT_TRUE(chat);
  EXPECT_TRUE(*chat);  // kept
  auto old = (*cp)->latest("old");
  ASSERT_TRUE(old);
  EXPECT_FALSE(*old);  // pruned: nothing holds it
  fs::remove(wf);
}

}  // namespace
