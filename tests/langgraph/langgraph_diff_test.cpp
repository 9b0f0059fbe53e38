// The differential suite: one client script (tests/langgraph/clients/diff_flows.mjs, the
// official @langchain/langgraph-sdk) runs the same flows against `weir serve --workflows
// tests/langgraph/workflows` and against the reference server @langchain/langgraph-api
// (bench/langgraph/peer/serve.mjs, with twins of those workflows in LangGraph.js), and what the
// client saw is compared key by key, ids and times aside. Every difference must be one of
// kKnown below, each with its reason; anything else fails, naming the path and both values.
// Skipped, saying why, without node, the SDK (tests/langgraph/clients/setup) or the reference
// server (bench/langgraph/setup).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string_view>
#include <thread>
#include <vector>

#include "langgraph_fixture.hpp"

namespace weir::serve {
namespace {

const std::string kSource = WEIR_SOURCE_DIR;
const std::string& kClients = kLangGraphClients;
const std::string kPeer = kSource + "/bench/langgraph/peer";

// A difference weir has on purpose, or has not closed yet. `path` matches a difference's path
// segment by segment ('*' matches any one segment) and everything under it.
struct Known {
  std::string_view path;
  std::string_view reason;
};

const Known kKnown[] = {
    // What each server is.
    {"/info/flags", "the reference adds langsmith_tracing_replicas, a LangSmith deployment flag"},
    {"/assistants/schemas_status",
     "the reference server cannot extract a plain JavaScript graph's schemas (500; its extractor "
     "reads TypeScript types): the twins are .mjs, so only weir's schemas are shown"},
    {"/assistants/schemas", "see schemas_status"},
    {"/assistants/input", "see schemas_status"},
    {"/assistants/state", "see schemas_status"},
    {"/background/run_keys",
     "weir's run has no `kwargs` (the reference echoes the run's request body there)"},
    {"/background/created_status",
     "timing: weir's queue starts an idle thread's run before answering (running), the "
     "reference's worker polls (pending)"},
    // Threads and checkpoints.
    {"/thread/created/values",
     "weir's thread always has values, interrupts, state_updated_at "
     "(Python's server's Thread shape); the JS server omits them"},
    {"/thread/created/interrupts", "as created/values"},
    {"/thread/created/state_updated_at", "as created/values"},
    {"/thread/after/state_updated_at", "as created/values"},
    {"/thread/after/config/configurable",
     "the reference copies the client's user-agent header into the thread's config"},
    {"/thread/state/interrupts",
     "weir's state carries `interrupts` (Python's server's ThreadState); the JS server's has none"},
    {"/interrupt/state/interrupts", "as thread/state/interrupts"},
    {"/thread/history_keys", "as thread/state/interrupts"},
    {"/thread/state/metadata",
     "checkpoint metadata is each server's own: weir's run, attempt and workflow file; the "
     "reference's LangSmith and request fields. step and source, which clients read, agree"},
    {"/thread/history",
     "channel defaults (see stream_values); and weir writes no input checkpoint: its root state "
     "(id root, step -1, source input, next __start__) stands where LangGraph's step -1 checkpoint "
     "is, without values of channel defaults"},
    {"/fork/history_length",
     "each server writes its own bookkeeping checkpoints around a fork (weir: one branch "
     "checkpoint; LangGraph: an input checkpoint per run), so the histories differ by one"},
    {"/state_ops/updated_keys",
     "weir's update answer adds `configurable` (Python's server's), beside `checkpoint`"},
    {"/state_ops/updated_checkpoint", "weir's checkpoint objects carry checkpoint_map: null"},
    {"/state_ops/copy_metadata/thread_id",
     "the reference writes the source thread's id into a copy's metadata"},
    // Values.
    {"/stream_values/events/*/data/done",
     "DIFFERENCE (weir): a channel's default (steps.json `done: false`) is not in values until "
     "a node writes the channel; LangGraph shows every channel with its default (and a list "
     "channel as []) from the first chunk"},
    {"/stream_values/events/*/data/seen", "as stream_values data/done: an empty list channel"},
    {"/stream_values_updates/events/*/data/done", "as stream_values data/done"},
    {"/stream_values_updates/events/*/data/seen", "as stream_values data/seen"},
    {"/interrupt/state/values/after", "as stream_values data/done (ask.json `after: false`)"},
    {"/stream_tasks/events/*/data/input/done", "as stream_values data/done"},
    {"/stream_tasks/events/*/data/input/seen", "as stream_values data/seen"},
    // Stream modes.
    {"/stream_checkpoints",
     "weir's checkpoints chunk is Python's (config, parent_config, values, metadata, next, "
     "tasks); the JS server's is {values, metadata, next}; and no step -1 input checkpoint"},
    {"/stream_debug",
     "debug wraps checkpoints and tasks: as stream_checkpoints and stream_tasks; and no step -1 "
     "input checkpoint"},
    {"/stream_tasks/events/*/data/result",
     "a task's result is Python's list of [channel, value] pairs in weir, an object in JS"},
    {"/stream_tasks/events/*/data/interrupts",
     "weir's task-start chunk has no `interrupts` (Python's has none either)"},
    {"/stream_tasks/events/*/data/metadata",
     "weir's task-start chunk has no `metadata` (the reference's is its run's LangSmith metadata)"},
    {"/stream_messages-tuple/events/*/data/1",
     "the metadata of a messages chunk: weir gives langgraph_node, langgraph_step, "
     "langgraph_triggers, langgraph_path, langgraph_checkpoint_ns, thread_id, run_id; the "
     "reference adds its run's LangSmith metadata, tags, name and checkpoint_ns"},
    {"/stream_messages-tuple/events/*/data/0/id",
     "a message written without an id: weir names it msg-<hash of run, step, place>, LangChain "
     "run-<uuid>-<n>"},
    {"/stream_messages-tuple/events/*/data/0/name",
     "weir writes LangChain's full message (name: null, tool_calls' type, a tool message's "
     "status) as Python's server does; the JS server leaves out what is null or default"},
    {"/stream_messages-tuple/events/*/data/0/status", "as data/0/name"},
    {"/stream_messages-tuple/events/*/data/0/tool_calls/*/type", "as data/0/name"},
    {"/chat/final/messages/*/name", "as stream_messages-tuple data/0/name"},
    {"/chat/final/messages/*/status", "as stream_messages-tuple data/0/name"},
    {"/chat/final/messages/*/tool_calls/*/type", "as stream_messages-tuple data/0/name"},
    {"/chat/updates/*/data/*/messages/*/name", "as stream_messages-tuple data/0/name"},
    {"/chat/updates/*/data/*/messages/*/status", "as stream_messages-tuple data/0/name"},
    {"/chat/updates/*/data/*/messages/*/tool_calls/*/type", "as stream_messages-tuple data/0/name"},
    // Interrupts.
    {"/interrupt_stream/events",
     "channel defaults in the values chunks (see stream_values); the events are the same"},
    {"/interrupt/events",
     "channel defaults in the values chunks (see stream_values); the events are the same, the "
     "resume opening with the state it resumes from"},
    {"/interrupt/paused_interrupts",
     "Thread.interrupts is keyed by task id on both, but task ids are each server's own (weir: a "
     "hash of checkpoint and node; LangGraph: a uuid)"},
    {"/interrupt/state/tasks/*/path", "weir's tasks have no `path` and `result` (internal)"},
    {"/interrupt/state/tasks/*/result", "as tasks/path"},
    // Runs.
    {"/cancel/second",
     "a run on a busy thread with multitask_strategy reject: weir answers 409 (Python's "
     "server), the JS reference 422"},
    {"/double_texting/reject/second", "as cancel/second"},
    {"/double_texting/rollback/first",
     "a rolled-back run: weir keeps it as `interrupted`; the reference deletes it and answers "
     "`error` for it until it is gone"},
    {"/double_texting/interrupt/joined",
     "weir's state is the thread's channels, whichever graph wrote them: the second graph's "
     "values keep the first (ticks) graph's n and slept; LangGraph shows the channels of the "
     "graph that reads them"},
    {"/double_texting/enqueue/joined", "as double_texting/interrupt/joined"},
};

struct Difference {
  std::string path;
  std::string weir;  // serialized; "(absent)" when only the reference has the key
  std::string ref;
};

bool known(const std::string& path, std::string_view* reason, std::size_t* which) {
  for (std::size_t i = 0; i < std::size(kKnown); ++i) {
    const auto& k = kKnown[i];
    std::string_view p = k.path, q = path;
    bool ok = true;
    while (!p.empty() && ok) {
      // both start with '/': compare one segment
      p.remove_prefix(1);
      if (q.empty()) {
        ok = false;
        break;
      }
      q.remove_prefix(1);
      const auto pe = std::min(p.find('/'), p.size()), qe = std::min(q.find('/'), q.size());
      ok = p.substr(0, pe) == "*" || p.substr(0, pe) == q.substr(0, qe);
      p.remove_prefix(pe);
      q.remove_prefix(qe);
    }
    if (ok) {
      *reason = k.reason;
      *which = i;
      return true;
    }
  }
  return false;
}

void diff(const json::value& w, const json::value& r, const std::string& path,
          std::vector<Difference>& out) {
  if (w.is_object() && r.is_object()) {
    for (const auto& kv : w.as_object()) {
      const std::string p = path + "/" + std::string(kv.key());
      if (const auto* x = r.as_object().if_contains(kv.key()))
        diff(kv.value(), *x, p, out);
      else
        out.push_back({p, json::serialize(kv.value()), "(absent)"});
    }
    for (const auto& kv : r.as_object())
      if (!w.as_object().contains(kv.key()))
        out.push_back(
            {path + "/" + std::string(kv.key()), "(absent)", json::serialize(kv.value())});
    return;
  }
  if (w.is_array() && r.is_array() && w.as_array().size() == r.as_array().size()) {
    for (std::size_t i = 0; i < w.as_array().size(); ++i)
      diff(w.as_array()[i], r.as_array()[i], path + "/" + std::to_string(i), out);
    return;
  }
  if (w != r) out.push_back({path, json::serialize(w), json::serialize(r)});
}

// A loopback port free now (the reference server binds it a moment later).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// The reference server as a child process (killed with the test process), its output in `log`.
struct ReferenceServer {
  pid_t pid = -1;
  std::uint16_t port = 0;
  fs::path dir;
  ReferenceServer() {
    port = free_port();
    dir = fs::temp_directory_path() / ("weir-lgref-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string log = (dir / "server.log").string();
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::chdir(kPeer.c_str()) != 0) ::_exit(126);
      std::FILE* f = std::fopen(log.c_str(), "w");
      if (f) {
        ::dup2(::fileno(f), 1);
        ::dup2(::fileno(f), 2);
      }
      ::setenv("LANGSMITH_TRACING", "false", 1);
      for (const char* k : {"LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "LANGGRAPH_API_KEY"})
        ::unsetenv(k);
      const std::string p = std::to_string(port), d = dir.string();
      ::execlp("node", "node", "serve.mjs", p.c_str(), d.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  bool wait_ready(std::chrono::seconds limit) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
      if (call(port, "GET", "/ok").status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }
  std::string log() const {
    std::ifstream in(dir / "server.log");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }
  ~ReferenceServer() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

TEST(LangGraphDiff, WeirAndTheReferenceServerShowAClientTheSameFlows) {
  if (std::system("command -v node >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "node is missing (apt-get install nodejs npm)";
  if (!fs::exists(kClients + "/node_modules/@langchain/langgraph-sdk"))
    GTEST_SKIP() << "tests/langgraph/clients/node_modules is missing (run "
                    "tests/langgraph/clients/setup, which needs npm and its registry)";
  if (!fs::exists(kPeer + "/node_modules/@langchain/langgraph-api"))
    GTEST_SKIP() << "the reference server is not installed (run bench/langgraph/setup, which "
                    "needs npm and its registry: @langchain/langgraph-api into "
                    "bench/langgraph/peer/node_modules)";

  ReferenceServer ref;
  ServeConfig c;
  c.workflows = fs::path(kSource) / "tests/langgraph/workflows";
  auto s = start(c);
  ASSERT_TRUE(ref.wait_ready(std::chrono::seconds(90)))
      << "the reference server did not answer /ok:\n"
      << ref.log();

  const json::value w = run_client_script("diff_flows.mjs", {loopback(s.port)});
  const json::value r = run_client_script("diff_flows.mjs", {loopback(ref.port)});
  ASSERT_TRUE(w.is_object() && r.is_object());
  // A flow that threw on either side is a failure of its own, not a difference to list.
  for (const auto* side : {&w, &r})
    for (const auto& kv : side->as_object())
      EXPECT_FALSE(kv.value().is_object() && kv.value().as_object().contains("thrown"))
          << (side == &w ? "weir: " : "reference: ") << kv.key() << ": "
          << json::serialize(kv.value());

  std::vector<Difference> found;
  diff(w, r, "", found);
  std::size_t named = 0;
  std::vector<bool> used(std::size(kKnown));
  for (const auto& d : found) {
    std::string_view reason;
    std::size_t which = 0;
    if (known(d.path, &reason, &which)) {
      if (std::getenv("WEIR_DIFF_SHOW"))
        std::printf("[ named    ] %s\n  weir: %s\n  ref:  %s\n", d.path.c_str(),
                    d.weir.substr(0, 400).c_str(), d.ref.substr(0, 400).c_str());
      ++named;
      used[which] = true;
      continue;
    }
    ADD_FAILURE() << "an unknown difference at " << d.path
                  << "\n  weir:      " << d.weir.substr(0, 600)
                  << "\n  reference: " << d.ref.substr(0, 600)
                  << "\n(if weir differs on purpose, add it to kKnown with the reason)";
  }
  std::printf("[ diff     ] %zu differences, %zu of them named in kKnown\n", found.size(), named);
  // A named difference that no longer shows (fixed, or timing that went the other way this
  // time) is said, so the list is kept true.
  for (std::size_t i = 0; i < used.size(); ++i)
    if (!used[i]) std::printf("[ unused   ] %s\n", std::string(kKnown[i].path).c_str());

  // What must agree, said plainly (the diff above would catch these too; here they read as the
  // contract): the same graphs, event sequences and final values.
  EXPECT_EQ(w.at("stream_values").at("names"), r.at("stream_values").at("names"));
  EXPECT_EQ(w.at("stream_updates").at("events"), r.at("stream_updates").at("events"));
  // The events mode: the graph's and its nodes' runs in the reference's order.
  EXPECT_EQ(json::serialize(w.at("stream_events").at("seq")),
            R"(["on_chain_start LangGraph","on_chain_start first","on_chain_end first",)"
            R"("on_chain_start second","on_chain_end second","on_chain_start third",)"
            R"("on_chain_end third","on_chain_end LangGraph"])");
  EXPECT_EQ(w.at("stream_events"), r.at("stream_events"));
  EXPECT_EQ(w.at("stream_values_updates").at("names"), r.at("stream_values_updates").at("names"));
  EXPECT_EQ(w.at("stream_messages-tuple").at("names"), r.at("stream_messages-tuple").at("names"));
  EXPECT_EQ(w.at("interrupt").at("first"), r.at("interrupt").at("first"));
  EXPECT_EQ(w.at("interrupt").at("done_values"), r.at("interrupt").at("done_values"));
  EXPECT_EQ(w.at("thread").at("final"), r.at("thread").at("final"));
  EXPECT_EQ(w.at("rejoin").at("rest_is_tail"), true);
  EXPECT_EQ(r.at("rejoin").at("rest_is_tail"), true);
  EXPECT_EQ(w.at("fork").at("forked"), r.at("fork").at("forked"));
}

}  // namespace
}  // namespace weir::serve
