// `weir` with `--store postgres://...` against a throwaway PostgreSQL cluster (pg_server.hpp;
// ctest label scaleout): pause and resume across processes, the artifacts a thread needs in
// another process, one runner per thread, `weir store prune`, and a password never echoed.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "pg_server.hpp"
#include "run_weir.hpp"
#include "test_workflows.hpp"
#include "thread_checks.hpp"
#include "weir/graph/checkpointer.hpp"

namespace {

namespace fs = std::filesystem;
using weir::testing::PgServer;

using weir::testing::kBigDoc;
using weir::testing::Run;
using weir::testing::run_weir;

using weir::testing::temp_file;

std::string fresh_store() {
  return weir::testing::fresh_database_uri();
}

std::string redacted(const std::string& store) {
  return "postgres://weir:***@" + store.substr(store.find('@') + 1);
}

const char* kLoop = R"({"name": "loop", "state": {"n": {"reducer": "sum", "default": 0}},
 "nodes": {"tick": {"kind": "set", "values": {"n": 1}}, "check": {"kind": "router"}},
 "edges": [{"from": "START", "to": "tick"}, {"from": "tick", "to": "check"},
           {"from": "check", "route": {"when": {"channel": "n", "op": ">=", "value": 10}, "then": "END", "else": "tick"}}]})";

// Pause in one process, resume in others; the resume hint names the store without its password.
TEST(CliPostgres, HumanReviewPausesAndResumesFromThePostgresStore) {
  const std::string uri = fresh_store();
  ASSERT_NE(uri, "");
  const std::string wf = std::string(WEIR_SOURCE_DIR) + "/samples/workflows/human_review.json";
  const std::string store = " --store '" + uri + "'";
  auto first = run_weir("run " + wf + " --thread t1" + store);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out.rfind("{\"interrupted\":\"review\"", 0), 0u) << first.out;
  EXPECT_NE(
      first.err.find("continue with:\n  weir resume t1 --value JSON --store " + redacted(uri)),
      std::string::npos)
      << first.err;
  EXPECT_EQ(first.err.find("Secr3tPw"), std::string::npos) << first.err;
  auto again = run_weir("resume t1" + store + " --value '\"shorter\"'");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("(revision 1)"), std::string::npos) << again.out;
  auto done = run_weir("resume t1" + store + " --value '\"approve\"'");
  ASSERT_EQ(done.code, 0) << done.err;
  EXPECT_NE(done.out.find("\"notes\":[\"shorter\"],\"published\":true}"), std::string::npos)
      << done.out;
  auto unknown = run_weir("resume t9" + store);
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err, "weir resume: no thread 't9' in " + redacted(uri) + "\n");
}

// A 100 KB value moved to the artifact store in one process is read in another: the blob
// travelled with the checkpoint into PostgreSQL.
TEST(CliPostgres, ArtifactsOfAThreadOutliveItsProcess) {
  const std::string uri = fresh_store();
  ASSERT_NE(uri, "");
  const fs::path wf = temp_file("big_doc.json", kBigDoc);
  const std::string store = " --store '" + uri + "'";
  auto first = run_weir("run " + wf.string() + " --thread a1" + store);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out,
            "{\"interrupted\":\"review\",\"payload\":{\"size\":100000},\"thread\":\"a1\"}\n");
  auto done = run_weir("resume a1" + store + " --value '\"ok\"'");
  ASSERT_EQ(done.code, 0) << done.err;
  auto state = boost::json::parse(done.out).as_object();
  EXPECT_EQ(state.at("tail"), " water pas\n[bytes 99990-100000 of 100000]") << done.out;
  fs::remove(wf);
}

// A thread held by a live runner is refused (nothing written); once released it runs.
TEST(CliPostgres, OneRunnerPerThread) {
  const std::string uri = fresh_store();
  ASSERT_NE(uri, "");
  const fs::path wf = temp_file("loop.json", kLoop);
  const std::string store = " --store '" + uri + "'";
  auto cp = weir::graph::open_checkpointer(uri);
  ASSERT_TRUE(cp) << cp.error().message;
  auto me = weir::graph::this_process_holder(weir::graph::new_claim_token(), 30000);
  ASSERT_TRUE((*cp)->claim_thread("d1", me));
  auto busy = run_weir("run " + wf.string() + " --thread d1" + store);
  EXPECT_EQ(busy.code, 3);  // README: 3, its thread has a run in progress
  EXPECT_EQ(busy.err.rfind("weir run: thread_busy: thread 'd1' is being run by pid " +
                               std::to_string(::getpid()) + " on host " + me.host + " since ",
                           0),
            0u)
      << busy.err;
  auto latest = (*cp)->latest("d1");
  ASSERT_TRUE(latest);
  EXPECT_FALSE(*latest);
  ASSERT_TRUE((*cp)->release_thread("d1", me.token));
  auto ok = run_weir("run " + wf.string() + " --thread d1" + store);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out, "{\"n\":10}\n");
  auto holder = (*cp)->thread_holder("d1");
  ASSERT_TRUE(holder);
  EXPECT_FALSE(*holder);
  fs::remove(wf);
}

// Retention never deletes a thread a run holds (age-based pruning skips it and says so).
TEST(CliPostgres, StorePruneSkipsAThreadInUse) {
  const std::string uri = fresh_store();
  ASSERT_NE(uri, "");
  weir::testing::expect_prune_skips_a_thread_in_use(uri);
}

// As on SQLite (cli_threads_test): killed twice and continued, the run applies its input once.
TEST(CliPostgres, AContinuedRunAppliesItsInputOnce) {
  const std::string uri = fresh_store();
  ASSERT_NE(uri, "");
  weir::testing::expect_continued_run_equals_uninterrupted(uri);
}

// weir store prune on a PostgreSQL store: as on SQLite (cli_test), the newest N checkpoints and
// what they need to rebuild their state (back to the snapshot the executor writes every 32 steps).
TEST(CliPostgres, StorePruneKeepsTheNewestCheckpointsAndTheirSnapshot) {
  const std::string uri = fresh_store();
  ASSERT_NE(uri, "");
  const fs::path wf =
      temp_file("loop50.json", R"({"name": "loop50", "limits": {"recursion_limit": 200},
 "state": {"n": {"reducer": "sum", "default": 0}},
 "nodes": {"tick": {"kind": "set", "values": {"n": 1}}, "check": {"kind": "router"}},
 "edges": [{"from": "START", "to": "tick"}, {"from": "tick", "to": "check"},
           {"from": "check", "route": {"when": {"channel": "n", "op": ">=", "value": 50}, "then": "END", "else": "tick"}}]})");
  const std::string store = " --store '" + uri + "'";
  auto run = run_weir("run " + wf.string() + " --thread t" + store);
  ASSERT_EQ(run.code, 0) << run.err;
  auto pruned = run_weir("store prune" + store + " --keep 5");
  ASSERT_EQ(pruned.code, 0) << pruned.err;
  EXPECT_EQ(pruned.out, "pruned 95 checkpoints from 1 threads in " + redacted(uri) + "\n");
  auto cp = weir::graph::open_checkpointer(uri);
  ASSERT_TRUE(cp) << cp.error().message;
  auto all = (*cp)->list("t", 1000);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 5u);
  fs::remove(wf);
}

}  // namespace
