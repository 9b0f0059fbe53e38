// The `weir` binary's durable threads (artifacts, visit caps and one runner per thread across
// processes) and the fences on what it reads (input files, workflow sizes, where workflows come
// from): exit codes, stdout, and the text of errors.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <signal.h>

#include "run_weir.hpp"
#include "test_workflows.hpp"
#include "thread_checks.hpp"
#include "weir/graph/checkpointer.hpp"

namespace fs = std::filesystem;

using weir::testing::kBigDoc;
using weir::testing::kLoopGuard;
using weir::testing::Run;
using weir::testing::run_weir;
using weir::testing::run_weir_env;
using weir::testing::sample;
using weir::testing::temp_file;

namespace {

fs::path temp_db(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("weir_cli_" + name + "_" + std::to_string(::getpid()) + ".db");
  fs::remove(p);
  return p;
}

}  // namespace

// The document lives in the store file with the thread: `weir resume` in a new process reads it
// (before, it died with the first process's temporary folder: "no artifact with id").
TEST(Cli, ArtifactsOfAThreadOutliveItsProcess) {
  const fs::path wf = temp_file("big_doc.json", kBigDoc);
  const fs::path db = temp_db("artifacts");
  const std::string store = " --store " + db.string();
  // A folder left by a process killed with SIGKILL is removed by the next command; one of a
  // live process (this test's) is not.
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const fs::path stale = fs::temp_directory_path() / ("weir-run-" + std::to_string(child));
  const fs::path live = fs::temp_directory_path() / ("weir-run-" + std::to_string(::getpid()));
  fs::create_directories(stale);
  fs::create_directories(live);
  auto first = run_weir("run " + wf.string() + " --thread a1" + store);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out,
            "{\"interrupted\":\"review\",\"payload\":{\"size\":100000},\"thread\":\"a1\"}\n");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  fs::remove_all(live);
  auto done = run_weir("resume a1" + store + " --value '\"ok\"'");
  ASSERT_EQ(done.code, 0) << done.err;
  auto state = boost::json::parse(done.out).as_object();
  EXPECT_EQ(state.at("tail"), " water pas\n[bytes 99990-100000 of 100000]") << done.out;
  EXPECT_EQ(state.at("doc").at("bytes"), 100000);
  fs::remove(wf);
  fs::remove(db);
}

// human_review promises at most 3 revisions (review's max_visits is 4): every `weir resume` is
// a new process, and the count holds across them.
TEST(Cli, MaxVisitsHoldsAcrossResumes) {
  const fs::path db = temp_db("visits");
  const std::string store = " --store " + db.string();
  auto first = run_weir("run " + sample("human_review.json").string() + " --thread h1" + store);
  ASSERT_EQ(first.code, 0) << first.err;
  for (int i = 1; i <= 3; ++i) {
    auto again = run_weir("resume h1" + store + " --value '\"shorter\"'");
    ASSERT_EQ(again.code, 0) << i << again.err;
    EXPECT_NE(again.out.find("(revision " + std::to_string(i) + ")"), std::string::npos)
        << again.out;
  }
  auto over = run_weir("resume h1" + store + " --value '\"shorter\"'");
  EXPECT_EQ(over.code, 2);
  EXPECT_EQ(over.err,
            "weir resume: visit_limit_exceeded: node 'review' would run a 5th time "
            "(max_visits=4)\n");
  fs::remove(db);
}

// Another process (this test) holds the thread: weir refuses it, naming the holder; once the
// holder's process is gone the claim is taken over at once.
TEST(Cli, OneRunnerPerThread) {
  const fs::path db = temp_db("claim");
  const std::string store = " --store " + db.string();
  const fs::path loop = temp_file("claim_loop.json", kLoopGuard);
  const std::string wf = loop.string();
  auto cp = weir::graph::open_sqlite_checkpointer(db);
  ASSERT_TRUE(cp) << cp.error().message;
  auto me = weir::graph::this_process_holder(weir::graph::new_claim_token(), 30000);
  ASSERT_TRUE((*cp)->claim_thread("d1", me));
  auto busy = run_weir("run " + wf + " --thread d1" + store);
  EXPECT_EQ(busy.code, 3);  // README: 3, its thread has a run in progress
  EXPECT_EQ(busy.err.rfind("weir run: thread_busy: thread 'd1' is being run by pid " +
                               std::to_string(::getpid()) + " on host " + me.host + " since ",
                           0),
            0u)
      << busy.err;
  EXPECT_NE(busy.err.find("; wait for it or, if that process is gone, it will be taken over "
                          "after 30 s\n"),
            std::string::npos)
      << busy.err;
  auto latest = (*cp)->latest("d1");
  ASSERT_TRUE(latest);
  EXPECT_FALSE(*latest);  // nothing written
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  auto gone = weir::graph::this_process_holder(weir::graph::new_claim_token(), 30000);
  gone.pid = child;
  ASSERT_TRUE((*cp)->release_thread("d1", me.token));
  ASSERT_TRUE((*cp)->claim_thread("d1", gone));
  auto taken = run_weir("run " + wf + " --thread d1" + store);
  EXPECT_EQ(taken.code, 0) << taken.err;
  EXPECT_EQ(taken.out, "{\"n\":10}\n");
  auto holder = (*cp)->thread_holder("d1");
  ASSERT_TRUE(holder);
  EXPECT_FALSE(*holder);  // released when the run ended
  fs::remove(loop);
  fs::remove(db);
}

// Retention never deletes a thread a run holds (age-based pruning skips it and says so).
TEST(Cli, StorePruneSkipsAThreadInUse) {
  const fs::path db = temp_db("prune_live");
  weir::testing::expect_prune_skips_a_thread_in_use(db.string());
  fs::remove(db);
}

// A run killed mid-way and continued with the same command (twice) ends as if never killed.
TEST(Cli, AContinuedRunAppliesItsInputOnce) {
  const fs::path db = temp_db("continue");
  weir::testing::expect_continued_run_equals_uninterrupted(db.string());
  fs::remove(db);
}

// Messages name the CLI's commands and flags, not the C++ API.
TEST(Cli, ThreadErrorsNameTheCommandsToUse) {
  const fs::path db = temp_db("texts");
  const std::string store = " --store " + db.string();
  const std::string wf = sample("human_review.json").string();
  auto none = run_weir("run " + wf);
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err,
            "weir run: unsupported: node 'review' called interrupt(), which needs a thread to "
            "resume from: run it with --thread ID (and weir resume ID --value JSON to "
            "continue)\n");
  ASSERT_EQ(run_weir("run " + wf + " --thread t1" + store).code, 0);
  auto twice = run_weir("run " + wf + " --thread t1" + store);
  EXPECT_EQ(twice.code, 1);
  EXPECT_EQ(twice.err,
            "weir run: invalid_argument: thread 't1' is interrupted at node 'review'; "
            "continue it with: weir resume t1 --value JSON" +
                store + "\n");
  auto bare = run_weir("resume t1" + store + " --value approve");
  EXPECT_EQ(bare.code, 1);
  EXPECT_EQ(bare.err, "weir resume: --value expects JSON: did you mean --value '\"approve\"'?\n");
  const std::string crew = std::string(WEIR_SOURCE_DIR) + "/samples/crews/research_crew.json";
  auto crew_thread = run_weir("run " + crew + " --thread c1");
  EXPECT_EQ(crew_thread.code, 1);
  EXPECT_NE(crew_thread.err.find("--thread and --store keep the checkpoints of a workflow file; "
                                 "crew and group-chat files run without checkpoints"),
            std::string::npos)
      << crew_thread.err;
  fs::remove(db);
}

namespace {

// Peak resident memory (bytes) of `weir ARGS...` run as a child, from wait4's rusage.
long weir_peak_rss(const std::vector<std::string>& args, int& code) {
  std::vector<std::string> all = {std::string(WEIR_BIN_DIR) + "/weir"};
  all.insert(all.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ru.ru_maxrss * 1024L;
}

}  // namespace

TEST(Cli, InputFilesAreRefusedBeforeTheyCostMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "peak memory is not measured under AddressSanitizer (its shadow memory and "
                  "quarantine grow with what the process frees)";
#endif
  // A 30 MB --input, over the run's 16 MiB state cap: refused in under 4x its size.
  fs::path big = fs::temp_directory_path() / ("weir_cli_big_input_" + std::to_string(::getpid()));
  {
    std::ofstream out(big);
    out << "{\"docs\": [";
    std::string doc(1000, 'x');
    for (int i = 0; i < 30000; ++i) out << (i ? "," : "") << '"' << doc << '"';
    out << "]}";
  }
  const long size = static_cast<long>(fs::file_size(big));
  auto wf = temp_file("small.json", R"({"name": "s", "state": {"docs": {}},
    "nodes": {"a": {"kind": "router"}}, "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
  int code = 0;
  long rss = weir_peak_rss({"run", wf.string(), "--input", "@" + big.string()}, code);
  EXPECT_EQ(code, 1);
  EXPECT_LT(rss, 4 * size) << "peak " << rss << " bytes for a " << size << "-byte input";
  // The same bytes as a workflow file: parsed as it is read (and refused: not a workflow) in
  // under 4x (the document, then the text read again to place the diagnostic).
  rss = weir_peak_rss({"validate", big.string()}, code);
  EXPECT_EQ(code, 1);
  EXPECT_LT(rss, 4 * size) << "peak " << rss << " bytes for a " << size << "-byte file";
  auto r = run_weir("run " + wf.string() + " --input @" + big.string());
  EXPECT_EQ(r.err,
            "weir run: --input would grow to 16.0 MiB, over its limit of 16.0 MiB; raise the "
            "per-run state limit (limits.max_state_bytes) or move large values to artifacts "
            "(limits.inline_limit)\n");
  fs::remove(big);
}

TEST(Cli, AWorkflowOfManySmallNodesIsAcceptedInUnder4xItsSize) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "peak memory is not measured under AddressSanitizer (its shadow memory and "
                  "quarantine grow with what the process frees)";
#endif
  // 130,000 set nodes in a chain, as bench/inputs/gen_workflow.py writes them (32 MB): the
  // loader's own structures, not only the parse, must stay within the bound.
  const int n = 130000;
  fs::path big = fs::temp_directory_path() / ("weir_cli_many_nodes_" + std::to_string(::getpid()));
  {
    std::ofstream out(big);
    const std::string pad(135, 'd');
    out << "{\"name\": \"big\", \"state\": {\"c\": {}}, \"nodes\": {\n";
    for (int i = 0; i < n; ++i)
      out << (i ? "," : "") << "\"n" << i << "\": {\"kind\": \"set\", \"description\": \"" << pad
          << "\", \"values\": {\"c\": " << i << "}}\n";
    out << "}, \"edges\": [\n{\"from\": \"START\", \"to\": \"n0\"}";
    for (int i = 1; i < n; ++i)
      out << ",\n{\"from\": \"n" << i - 1 << "\", \"to\": \"n" << i << "\"}";
    out << ",\n{\"from\": \"n" << n - 1 << "\", \"to\": \"END\"}]}\n";
  }
  const long size = static_cast<long>(fs::file_size(big));
  int code = 0;
  long rss = weir_peak_rss({"validate", big.string()}, code);
  EXPECT_EQ(code, 0);
  EXPECT_LT(rss, 4 * size) << "peak " << rss << " bytes for a " << size << "-byte file";
  // It runs: the graph of 130,000 nodes is built at once (names are found by binary search),
  // and the chain stops at the step limit.
  auto r = run_weir("run " + big.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.substr(0, 56), "weir run: step_limit_exceeded: run stopped after 25 supe")
      << r.err;
  fs::remove(big);
}

TEST(Cli, WorkflowFilesFromDirectoriesPipesAndCrews) {
  fs::path dir = fs::temp_directory_path() / ("weir_cli_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto d = run_weir("validate " + dir.string());
  EXPECT_EQ(d.code, 1);
  EXPECT_EQ(d.err,
            dir.string() + ": is a directory, not a JSON file\n" + dir.string() + ": 1 error\n");
  fs::remove_all(dir);
  auto loop = temp_file("pipe.json", kLoopGuard);
  auto v = run_weir("validate - < " + loop.string());
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_EQ(v.out, "-: ok (2 nodes, 3 edges)\n");
  auto r = run_weir("run /dev/stdin < " + loop.string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"n\":10"), std::string::npos) << r.out;
  auto bom = temp_file("bom.json", "\xEF\xBB\xBF" + std::string(kLoopGuard));
  EXPECT_EQ(run_weir("validate " + bom.string()).code, 0);
  auto nul = temp_file("nul.json", std::string("{\"name\":\n \0}", 13));
  auto n = run_weir("validate " + nul.string());
  EXPECT_EQ(n.code, 1);
  EXPECT_NE(n.err.find("nul.json:2:2: a NUL byte (0x00), which JSON text cannot contain"),
            std::string::npos)
      << n.err;
  const std::string crew = std::string(WEIR_SOURCE_DIR) + "/samples/crews/research_crew.json";
  auto g = run_weir("graph " + crew);
  EXPECT_EQ(g.code, 1);
  EXPECT_EQ(g.err,
            "weir graph: " + crew +
                " is a crew or group-chat file, which has no graph to draw; 'weir validate " +
                crew + "' lists its agents and tasks, 'weir run " + crew + "' runs it\n");
}

TEST(Cli, TopLevelInputAndOutputApply) {
  auto wf = temp_file("io.json",
                      R"({"name": "io", "state": {"topic": {}, "n": {"default": 1}, "scratch": {}},
    "input": ["topic"], "output": ["n", "topic"],
    "nodes": {"a": {"kind": "set", "values": {"n": {"$expr": "n + 1"}, "scratch": "x"}}},
    "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
  auto ok = run_weir("run " + wf.string() + " --input '{\"topic\": \"t\"}'");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out, "{\"n\":2,\"topic\":\"t\"}\n");
  auto bad = run_weir("run " + wf.string() + " --input '{\"scratch\": 1}'");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err,
            "weir run: --input sets 'scratch', which io does not take as input (its \"input\": "
            "topic)\n");
  // weir batch checks each line the same way (its lines were applied unchecked).
  auto lines = temp_file("io_lines.jsonl", "{\"topic\": \"a\"}\n{\"scratch\": 1}\n");
  auto batch = run_weir("batch " + wf.string() + " --inputs " + lines.string());
  EXPECT_EQ(batch.code, 2) << batch.err;
  EXPECT_NE(
      batch.out.find("{\"index\":1,\"ok\":false,\"error\":{\"code\":\"invalid_argument\","
                     "\"message\":\"the input sets 'scratch', which io does not take as input "
                     "(its \\\"input\\\": topic)\"}}"),
      std::string::npos)
      << batch.out;
  EXPECT_NE(batch.out.find("{\"index\":0,\"ok\":true,"), std::string::npos) << batch.out;
  fs::remove(lines);
  // map_reduce divides by the number of items it was given.
  auto mr = run_weir("run " + std::string(WEIR_SOURCE_DIR) +
                     "/samples/workflows/map_reduce.json --input '{\"numbers\": [2, 4]}'");
  EXPECT_EQ(mr.code, 0) << mr.err;
  EXPECT_NE(mr.out.find("\"mean\":10}"), std::string::npos) << mr.out;
}
