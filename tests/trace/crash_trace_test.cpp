// A run that a second worker continues after the first was killed keeps its trace: `weir
// submit` records a traceparent in the run record, and every attempt's spans continue it.
// `weir worker` processes against a throwaway PostgreSQL cluster (pg_server.hpp; labels trace
// and scaleout), spans read back by an OTLP/HTTP receiver on loopback.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "otlp_receiver.hpp"
#include "pg_server.hpp"
#include "run_weir.hpp"
#include "weir/cluster/run_queue.hpp"

namespace weir {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using testing::OtlpReceiver;

// A `weir worker` process in the background (stderr to a file), killed if still running.
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
  ~WorkerProc() {
    if (pid > 0) kill9();
    std::error_code ec;
    fs::remove(log, ec);
  }
};

std::unique_ptr<WorkerProc> start_worker(const std::string& env, const std::string& args) {
  static int n = 0;
  auto w = std::make_unique<WorkerProc>();
  w->log = fs::temp_directory_path() /
           ("weir_trace_worker_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  const std::string cmd = "exec env " + env + " " + std::string(WEIR_BIN_DIR) + "/weir worker " +
                          args + " 2>" + w->log.string();
  w->pid = ::fork();
  if (w->pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return w;
}

TEST(CrashTrace, ARunContinuedByAnotherWorkerKeepsItsTraceId) {
  auto& pg = testing::PgServer::get();
  ASSERT_TRUE(pg.error().empty()) << pg.error();
  const std::string db = testing::fresh_database_uri();
  // Twelve loops of: sleep 400 ms, add 1 (three supersteps a loop): the first worker is killed
  // early in its ~5 s, whatever the machine's load.
  const auto wf = testing::temp_file("traced_loop.json", R"({"name": "traced_loop",
 "state": {"n": {"reducer": "sum", "default": 0}, "slept": {}},
 "tools": {"wait": {"builtin": "sleep"}},
 "limits": {"recursion_limit": 200},
 "nodes": {"nap": {"kind": "tool", "tool": "wait", "args": {"ms": 400}, "output": "slept"},
           "tick": {"kind": "set", "values": {"n": 1}},
           "check": {"kind": "router"}},
 "edges": [{"from": "START", "to": "nap"}, {"from": "nap", "to": "tick"},
           {"from": "tick", "to": "check"},
           {"from": "check", "route": {"when": {"channel": "n", "op": ">=", "value": 12},
                                       "then": "END", "else": "nap"}}]})");
  auto sub = testing::run_weir("submit " + wf.string() + " --db '" + db + "'");
  ASSERT_EQ(sub.code, 0) << sub.err;
  std::string id = sub.out;
  while (!id.empty() && id.back() == '\n') id.pop_back();

  // The run record holds the trace every attempt continues.
  auto queue = cluster::RunQueue::open(db);
  ASSERT_TRUE(queue) << queue.error().message;
  auto rec = (*queue)->get(id);
  ASSERT_TRUE(rec) << rec.error().message;
  auto parent = trace::parse_traceparent(rec->traceparent);
  ASSERT_TRUE(parent) << "'" << rec->traceparent << "'";

  OtlpReceiver rx;
  const std::string env = "OTEL_BSP_SCHEDULE_DELAY=10";
  const std::string args =
      "--db '" + db + "' --lease 1s --poll 100ms --otlp-endpoint " + rx.base_url();
  {
    auto first = start_worker(env, args);
    // Killed once its second superstep's span is out (its first steps are committed).
    auto seen = rx.wait_for(
        [](const auto& spans) { return testing::find_span(spans, "superstep 2") != nullptr; }, 60s);
    ASSERT_TRUE(testing::find_span(seen, "superstep 2")) << "no span from the first worker";
    first->kill9();
  }
  const std::size_t from_first = rx.spans().size();
  // The second worker takes the run over once the first one's lease lapsed, and finishes it.
  auto second = start_worker(env, args);
  Result<cluster::RunRecord> done = Error(Errc::not_found, "");
  for (int i = 0; i < 1200; ++i) {  // up to 120 s
    done = (*queue)->get(id);
    ASSERT_TRUE(done) << done.error().message;
    if (cluster::is_terminal(done->state)) break;
    std::this_thread::sleep_for(100ms);
  }
  ::kill(second->pid, SIGTERM);  // it flushes its spans as it exits
  EXPECT_EQ(second->wait_exit(), 0);
  EXPECT_EQ(done->state, cluster::RunState::succeeded) << done->error;
  EXPECT_EQ(done->attempts, 2);

  auto spans = rx.wait_for(
      [](const auto& s) { return testing::find_span(s, "invoke_workflow traced_loop") != nullptr; },
      30s);
  ASSERT_GT(spans.size(), from_first);
  // Every span of both attempts is in the run record's trace.
  std::set<std::string> traces;
  for (const auto& s : spans) traces.insert(s.span.trace_id.hex());
  EXPECT_EQ(traces, std::set<std::string>{parent->trace_id.hex()});
  // The second attempt's run span continues the record's context, and says it resumed.
  const auto* run = testing::find_span(spans, "invoke_workflow traced_loop");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->span.parent_span_id, parent->span_id);
  EXPECT_EQ(testing::str_attr(run->span, "weir.run.id"), id + ".2");
  EXPECT_NE(run->span.attribute("weir.run.resumed"), nullptr);
  EXPECT_EQ(run->span.status, trace::StatusCode::ok);
  fs::remove(wf);
}

}  // namespace
}  // namespace weir
