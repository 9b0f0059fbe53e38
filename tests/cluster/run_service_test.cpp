// The run service's in-process backend as a C++ program uses it (no database, no HTTP): a
// workflow given by file, the one input check, watches that hear of each step and of nothing
// else, resume, and the run's one JSON shape.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "weir/cluster/run_service.hpp"

namespace weir::cluster {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("weir_run_service_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

// `left` rounds of (nap 100 ms, tick).
const char* kCount = R"({"name": "count",
 "state": {"n": {"reducer": "sum", "default": 0}, "left": {"reducer": "sum", "default": 0},
           "slept": {}},
 "input": ["left"], "output": ["n"],
 "tools": {"wait": {"builtin": "sleep"}},
 "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": 100}, "output": "slept"},
           "tick": {"kind": "set", "values": {"n": 1, "left": -1}}},
 "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "tick"},
           {"from": "tick", "route": {"when": {"channel": "left", "op": "<=", "value": 0},
                                      "then": "END", "else": "nap"}}]})";

const char* kAsk = R"({"name": "ask",
 "state": {"verdict": {}, "done": {"default": false}},
 "nodes": {"ask": {"kind": "interrupt", "payload": "ok?", "output": "verdict"},
           "finish": {"kind": "set", "values": {"done": true}}},
 "edges": [{"from": "START", "to": "ask"}, {"from": "ask", "to": "finish"},
           {"from": "finish", "to": "END"}]})";

RunRecord wait_end(RunService& svc, const std::string& id) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    auto r = svc.get(id);
    EXPECT_TRUE(r) << r.error().message;
    if (!r || is_terminal(r->state) || std::chrono::steady_clock::now() > until) return *r;
    std::this_thread::sleep_for(10ms);
  }
}

std::unique_ptr<RunService> in_process() {
  RunServiceOptions o;
  o.max_runs = 2;
  auto s = RunService::open(std::move(o));
  EXPECT_TRUE(s) << s.error().message;
  return s ? std::move(*s) : nullptr;
}

// A watch hears of every step (in-process it follows the run's event stream) and, once the run
// ended, of nothing more: an event stream over it reads the store only when a step was
// committed.
TEST(RunService, AWatchHearsOfEachStepAndNothingElse) {
  auto svc = in_process();
  ASSERT_TRUE(svc);
  const auto wf = write_file("count.json", kCount);
  RunRequest rq;
  rq.workflow_file = wf;
  rq.input = json::object{{"left", 3}};
  auto rec = svc->submit(rq);
  ASSERT_TRUE(rec) << rec.error().message;
  EXPECT_EQ(rec->workflow_name, "count");
  EXPECT_EQ(rec->workflow_file, fs::absolute(wf).string());
  EXPECT_EQ(rec->workflow_sha256.size(), 64u);
  EXPECT_EQ(rec->thread_id, rec->id);
  std::atomic<int> calls{0};
  auto watch = svc->watch(rec->id, [&] { ++calls; });
  auto end = wait_end(*svc, rec->id);
  ASSERT_EQ(end.state, RunState::succeeded) << end.error;
  EXPECT_EQ(end.result, R"({"n":3})");
  const int at_end = calls.load();
  EXPECT_GE(at_end, 5) << "six supersteps after the watch began, and the end";
  EXPECT_LE(at_end, 12);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(calls.load(), at_end) << "nothing moved, yet the watch was called";
  watch.reset();
  fs::remove(wf);
}

// The service checks a run's input as every door does, and says which channels it takes.
TEST(RunService, AnInputTheWorkflowDoesNotTakeIsRefusedBeforeItIsQueued) {
  auto svc = in_process();
  ASSERT_TRUE(svc);
  const auto wf = write_file("count_in.json", kCount);
  RunRequest rq;
  rq.workflow_file = wf;
  rq.input = json::object{{"n", 5}};
  auto r = svc->submit(rq);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "invalid_argument: 'input' sets 'n', which count does not take as input (its "
            "\"input\": left)");
  auto none = svc->list({});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->runs.empty());
  rq.workflow_file = "/nonexistent/flow.json";
  auto missing = svc->submit(rq);
  ASSERT_FALSE(missing);
  EXPECT_TRUE(missing.error().is(Errc::not_found)) << missing.error().to_string();
  fs::remove(wf);
}

// A thread paused by a run of a file is resumed with that file's workflow; the result, the
// resume value and the record's JSON come out in the runs API's one shape.
TEST(RunService, AnInterruptedThreadIsResumedAndTheRecordHasOneShape) {
  auto svc = in_process();
  ASSERT_TRUE(svc);
  const auto wf = write_file("ask.json", kAsk);
  RunRequest rq;
  rq.workflow_file = wf;
  rq.thread_id = "t1";
  auto first = svc->submit(rq);
  ASSERT_TRUE(first) << first.error().message;
  auto paused = wait_end(*svc, first->id);
  ASSERT_EQ(paused.state, RunState::interrupted) << paused.error;
  EXPECT_EQ(paused.result, R"({"interrupted":"ask","payload":"ok?","thread":"t1"})");
  auto second = svc->resume("t1", json::value("yes"), "", {});
  ASSERT_TRUE(second) << second.error().message;
  auto done = wait_end(*svc, second->id);
  ASSERT_EQ(done.state, RunState::succeeded) << done.error;
  EXPECT_EQ(done.result, R"({"verdict":"yes","done":true})");
  auto j = run_json(done);
  std::set<std::string> keys;
  for (const auto& kv : j) keys.insert(std::string(kv.key()));
  EXPECT_EQ(keys, (std::set<std::string>{"id",
                                         "object",
                                         "workflow",
                                         "workflow_file",
                                         "workflow_sha256",
                                         "thread_id",
                                         "state",
                                         "attempts",
                                         "max_attempts",
                                         "cancel_requested",
                                         "worker",
                                         "lease_expires_at_ms",
                                         "fence",
                                         "created_at_ms",
                                         "started_at_ms",
                                         "finished_at_ms",
                                         "input",
                                         "result",
                                         "error",
                                         "resume",
                                         "traceparent"}));
  EXPECT_EQ(j.at("resume"), json::value("yes"));
  EXPECT_EQ(j.at("state"), json::value("succeeded"));
  EXPECT_EQ(j.at("thread_id"), json::value("t1"));
  auto list = svc->list({.limit = 1});
  ASSERT_TRUE(list);
  ASSERT_EQ(list->runs.size(), 1u);
  EXPECT_TRUE(list->has_more);
  EXPECT_EQ(json::serialize(run_list_json(*list).at("last_id")), "\"" + second->id + "\"");
  auto rest = svc->list({.limit = 5, .after = list->runs.back().id});
  ASSERT_TRUE(rest);
  ASSERT_EQ(rest->runs.size(), 1u);
  EXPECT_EQ(rest->runs[0].id, first->id);
  EXPECT_FALSE(rest->has_more);
  fs::remove(wf);
}

// A crew file in the folder (samples/crews beside workflows) without a model to run on is left
// out and said, not a refused start; a folder of nothing else says what was left out and why.
TEST(RunService, CrewFilesWithoutAModelAreLeftOutAndSaid) {
  const fs::path dir =
      fs::temp_directory_path() / ("weir_run_service_crews_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "crew.json") << R"({"weir": 1, "kind": "crew", "name": "c", "agents": []})";
  std::ofstream(dir / "chat.json")
      << R"({"weir": 1, "kind": "group_chat", "name": "g", "agents": [], "task": "t"})";
  RunServiceOptions only;
  only.workflows = dir;
  auto refused = RunService::open(only);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "--workflows: '" + dir.string() +
                "' holds nothing the run service runs: chat.json (a group-chat file: run it with "
                "`weir run FILE`); crew.json (a crew file: it runs on the model --model gives, "
                "and none was given)");
  std::ofstream(dir / "ask.json") << kAsk;
  std::vector<std::string> said;
  RunServiceOptions both;
  both.workflows = dir;
  both.log = [&](const std::string& line) { said.push_back(line); };
  auto svc = RunService::open(both);
  ASSERT_TRUE(svc) << svc.error().message;
  EXPECT_EQ((*svc)->workflow_names(), std::vector<std::string>{"ask"});
  ASSERT_EQ(said.size(), 2u);
  EXPECT_EQ(said[1], (dir / "crew.json").string() +
                         " (a crew file: it runs on the model --model gives, and none was "
                         "given): left out");
  (*svc)->shutdown();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weir::cluster
