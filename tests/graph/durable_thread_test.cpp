// A thread outlives the process that ran it: its artifacts live with its checkpoints, the caps
// that bound a run hold across resumes and continuations, and one runner at a time holds it.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <boost/asio.hpp>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/runtime/artifact_store.hpp"

namespace weir::graph {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;
namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::resume;
using testing::run;

fs::path temp_db(const std::string& name) {
  auto p = fs::temp_directory_path() /
           ("weir_durable_" + name + "_" + std::to_string(::getpid()) + ".sqlite");
  fs::remove(p);
  return p;
}

// fetch writes a 100 KB document (moved to the artifact store), review asks a human, read
// fetches the document back through the run's store.
std::shared_ptr<const CompiledGraph> document_graph() {
  StateGraph b;
  b.add_channel("doc", {});
  b.add_channel("verdict", {});
  b.add_channel("head", {});
  b.add_node("fetch", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("doc", json::string(std::string(100000, 'x') + "END"));
  });
  b.add_node("review", [](const StateView&, NodeContext& c) -> Result<Update> {
    if (const json::value* v = c.resume_value()) return Update().set("verdict", *v);
    return c.interrupt("approve?");
  });
  b.add_node("read", [](const StateView& s, NodeContext& c) -> Result<Update> {
    auto text = c.fetch(s.get("doc"), 99998, 5);
    if (!text) return text.error();
    return Update().set("head", json::string(*text));
  });
  b.add_edge("START", "fetch").add_edge("fetch", "review").add_edge("review", "read");
  b.add_edge("read", "END");
  return *b.compile();
}

// A restarted process has a new checkpointer connection and a new, empty artifact store: the
// document comes back from the checkpoint database.
TEST(DurableThread, ArtifactsResolveInANewProcessAndGoWithTheThread) {
  const auto db = temp_db("artifacts");
  auto g = document_graph();
  std::string doc_id;
  {
    auto cp = open_sqlite_checkpointer(db);
    ASSERT_TRUE(cp) << cp.error().message;
    auto store = ArtifactStore::open({});
    ASSERT_TRUE(store);
    GraphRuntime rt({.artifacts = store->get()});
    auto r = run(rt, g, {}, {.checkpointer = cp->get(), .thread_id = "d1"});
    ASSERT_TRUE(r && r->interrupted) << (r ? "" : r.error().message);
    auto ref = ArtifactRef::from_json(r->state.at("doc"));
    ASSERT_TRUE(ref);
    doc_id = ref->id;
    EXPECT_EQ(ref->bytes, 100003u);
  }  // the first process's store is gone with it
  auto cp = open_sqlite_checkpointer(db);
  ASSERT_TRUE(cp) << cp.error().message;
  auto stored = (*cp)->get_artifact("d1", doc_id);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((**stored).bytes.size(), 100003u);
  EXPECT_EQ((**stored).media_type, "text/plain");
  auto store = ArtifactStore::open({});
  ASSERT_TRUE(store);
  GraphRuntime rt({.artifacts = store->get()});
  auto r = resume(rt, g, "d1", "yes", {.checkpointer = cp->get()});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("head"), "xxEND");
  EXPECT_EQ(r->state.at("verdict"), "yes");
  ASSERT_TRUE((*cp)->delete_thread("d1"));
  auto gone = (*cp)->get_artifact("d1", doc_id);
  ASSERT_TRUE(gone);
  EXPECT_FALSE(*gone);
  fs::remove(db);
}

// Each step's checkpoint names the fences that acted in it (its metadata's "fences"), so a
// thread's history says why its state looks as it does: a messages window that evicted turns,
// a value moved to the artifact store, a run that waited for admission.
TEST(DurableThread, CheckpointsNameTheFencesThatActed) {
  StateGraph b;
  b.add_channel("messages", {.reducer = ReducerKind::messages, .max_messages = 2});
  b.add_channel("doc", {});
  b.add_async_node("talk", [](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
    co_await t.async_wait(asio::use_awaitable);
    json::array said{json::object{{"role", "assistant"}, {"content", "one"}},
                     json::object{{"role", "assistant"}, {"content", "two"}}};
    co_return Update().set("messages", said).set("doc", json::string(std::string(100000, 'x')));
  });
  b.add_edge("START", "talk").add_edge("talk", "END");
  auto g = *b.compile();
  auto store = ArtifactStore::open({});
  ASSERT_TRUE(store);
  auto cp = make_memory_checkpointer();
  GraphRuntime rt({.artifacts = store->get(), .max_concurrent_runs = 1});
  asio::io_context io;
  int done = 0;
  for (const char* thread : {"first", "second"}) {
    json::object in{{"messages", json::object{{"role", "user"}, {"content", thread}}}};
    RunOptions o{.checkpointer = cp.get(), .thread_id = thread};
    asio::co_spawn(io, rt.async_invoke(g, std::move(in), std::move(o)),
                   [&](std::exception_ptr, Result<RunResult> r) {
                     EXPECT_TRUE(r) << r.error().message;
                     ++done;
                   });
  }
  io.run();
  ASSERT_EQ(done, 2);
  auto first = cp->list("first", 10);
  ASSERT_TRUE(first && first->size() == 2u);
  const auto& step = first->at(0).metadata;  // talk's step
  ASSERT_TRUE(step.contains("fences")) << json::serialize(step);
  const auto& fences = step.at("fences").as_array();
  ASSERT_EQ(fences.size(), 2u) << json::serialize(step);
  EXPECT_EQ(fences[0].at("fence"), "artifact_offload");  // as the writes are taken
  EXPECT_EQ(fences[0].at("channel"), "doc");
  EXPECT_EQ(fences[0].at("node"), "talk");
  EXPECT_EQ(fences[0].at("bytes"), 100000);
  EXPECT_EQ(fences[0].at("artifact").as_string().size(), 64u);
  EXPECT_EQ(json::serialize(fences[1]),  // then merged into the window
            R"({"fence":"window_eviction","channel":"messages","evicted_messages":1})");
  EXPECT_FALSE(first->at(1).metadata.contains("fences")) << "the input step: no fence acted";
  // The second run waited for the first to leave its one slot: its first checkpoint says so.
  auto second = cp->list("second", 10);
  ASSERT_TRUE(second && second->size() == 2u);
  const auto& input = second->at(1).metadata;
  ASSERT_TRUE(input.contains("fences")) << json::serialize(input);
  const auto& wait = input.at("fences").at(0);
  EXPECT_EQ(wait.at("fence"), "admission_wait");
  EXPECT_GE(wait.at("wait_ms").to_number<double>(), 30.0) << json::serialize(wait);
}

TEST(DurableThread, MemoryCheckpointerKeepsArtifactsForAnotherStore) {
  auto g = document_graph();
  auto cp = make_memory_checkpointer();
  {
    auto store = ArtifactStore::open({});
    GraphRuntime rt({.artifacts = store->get()});
    auto r = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "d1"});
    ASSERT_TRUE(r && r->interrupted);
  }
  auto store = ArtifactStore::open({});
  GraphRuntime rt({.artifacts = store->get()});
  auto r = resume(rt, g, "d1", "yes", {.checkpointer = cp.get()});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("head"), "xxEND");
}

// write -> review (interrupt, max_visits 3) -> write ...: each resume sends the draft round
// again. Every resume is a new runtime on a new connection (a new `weir resume` process).
TEST(DurableThread, MaxVisitsHoldsAcrossResumesInNewProcesses) {
  const auto db = temp_db("visits");
  StateGraph b;
  b.add_channel("revision", {.reducer = ReducerKind::sum, .default_value = 0});
  b.add_channel("verdict", {});
  b.add_node("write", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("revision", 1);
  });
  b.add_node("review",
             [](const StateView&, NodeContext& c) -> Result<Update> {
               if (const json::value* v = c.resume_value()) return Update().set("verdict", *v);
               return c.interrupt("approve?");
             },
             {.max_visits = 3});
  b.add_edge("START", "write").add_edge("write", "review");
  b.add_conditional_edges("review",
                          [](const StateView& s) -> std::vector<std::string> {
                            return {s.get("verdict") == "approve" ? "END" : "write"};
                          },
                          {"write", "END"});
  auto g = *b.compile();
  {
    auto cp = open_sqlite_checkpointer(db);
    GraphRuntime rt;
    auto r = run(rt, g, {}, {.checkpointer = cp->get(), .thread_id = "h1"});
    ASSERT_TRUE(r && r->interrupted);
  }
  for (int i = 1; i <= 2; ++i) {
    auto cp = open_sqlite_checkpointer(db);
    GraphRuntime rt;
    auto r = resume(rt, g, "h1", "shorter", {.checkpointer = cp->get()});
    ASSERT_TRUE(r && r->interrupted) << i << (r ? "" : r.error().message);
    EXPECT_EQ(r->state.at("revision"), i + 1);
  }
  auto cp = open_sqlite_checkpointer(db);
  GraphRuntime rt;
  auto r = resume(rt, g, "h1", "shorter", {.checkpointer = cp->get()});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "visit_limit_exceeded: node 'review' would run a 4th time (max_visits=3)");
  fs::remove(db);
}

// A loop that never ends: each invocation stops at recursion_limit (a fresh count per
// invocation, as in LangGraph) and leaves the run unfinished; continuing it again and again
// ends at the thread-wide cap.
TEST(DurableThread, ContinuedRunsStopAtTheThreadWideStepCap) {
  StateGraph b;
  b.add_channel("n", {.reducer = ReducerKind::sum, .default_value = 0});
  b.add_node("tick",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("n", 1); });
  b.add_edge("START", "tick");
  b.add_conditional_edges("tick",
                          [](const StateView&) -> std::vector<std::string> { return {"tick"}; },
                          {"tick", "END"});
  auto g = *b.compile({.recursion_limit = 5, .max_thread_steps = 12});
  auto cp = make_memory_checkpointer();
  for (int i = 0; i < 2; ++i) {
    GraphRuntime rt;
    auto r = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "c1"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::step_limit_exceeded);
    EXPECT_THAT(r.error().message, HasSubstr("(recursion_limit=5)"));
  }
  GraphRuntime rt;
  auto r = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "c1"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "step_limit_exceeded: thread 'c1' stopped after 12 supersteps over all its runs "
            "(max_thread_steps=12); nodes active in the last step: tick; raise "
            "limits.max_thread_steps or continue on a new thread");
  auto latest = cp->latest("c1");
  ASSERT_TRUE(latest && *latest);
  EXPECT_EQ((**latest).step, 12);
}

// --- one runner per thread ----------------------------------------------------------------

struct Backend {
  const char* name;
  std::function<std::unique_ptr<Checkpointer>(const fs::path&)> open;
};

std::vector<Backend> backends() {
  return {{"sqlite",
           [](const fs::path& db) -> std::unique_ptr<Checkpointer> {
             auto cp = open_sqlite_checkpointer(db);
             return cp ? std::move(*cp) : nullptr;
           }},
          {"memory", [](const fs::path&) { return make_memory_checkpointer(); }}};
}

const char* kBusyPattern =
    "^thread_busy: thread 'd1' is being run by pid [0-9]+ on host [^ ]+ since "
    "[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} UTC \\(last heartbeat [0-9]+ s ago\\); "
    "wait for it or, if that process is gone, it will be taken over after [0-9]+ s$";

// The first run waits inside its node while a second runner tries the same thread (for SQLite
// through a second connection, as a second process would).
TEST(ThreadClaim, ASecondRunnerIsRefusedWhileTheFirstRuns) {
  for (const auto& be : backends()) {
    SCOPED_TRACE(be.name);
    const auto db = temp_db("claim_two");
    auto first_cp = be.open(db);
    ASSERT_TRUE(first_cp);
    std::unique_ptr<Checkpointer> second_own = be.open(db);
    Checkpointer* second_cp = std::string(be.name) == "memory" ? first_cp.get() : second_own.get();
    std::promise<void> entered, go_on;
    auto entered_f = entered.get_future();
    auto go_on_f = go_on.get_future().share();
    StateGraph b;
    b.add_channel("n", {.reducer = ReducerKind::sum, .default_value = 0});
    auto calls = std::make_shared<int>(0);
    b.add_node("slow",
               [&entered, go_on_f, calls](const StateView&, NodeContext&) -> Result<Update> {
                 if (++*calls > 1) return Update().set("n", 1);  // the third run, alone
                 entered.set_value();
                 go_on_f.wait();
                 return Update().set("n", 1);
               });
    b.add_edge("START", "slow").add_edge("slow", "END");
    auto g = *b.compile();
    Result<RunResult> first = Error(Errc::cancelled, "not run");
    std::thread runner([&] {
      GraphRuntime rt;
      first = run(rt, g, {}, {.checkpointer = first_cp.get(), .thread_id = "d1"});
    });
    entered_f.wait();
    auto holder = second_cp->thread_holder("d1");
    ASSERT_TRUE(holder && *holder);
    EXPECT_EQ((**holder).pid, ::getpid());
    EXPECT_EQ((**holder).lease_ms, 30000);
    GraphRuntime rt;
    auto second = run(rt, g, {}, {.checkpointer = second_cp, .thread_id = "d1"});
    go_on.set_value();
    runner.join();
    ASSERT_FALSE(second);
    EXPECT_THAT(second.error().to_string(), ContainsRegex(kBusyPattern));
    EXPECT_THAT(second.error().message, HasSubstr("taken over after 30 s"));
    ASSERT_TRUE(first) << first.error().message;
    EXPECT_EQ(first->state.at("n"), 1);
    // Released at the end: the thread runs again, once, and nothing was written twice.
    auto third = run(rt, g, {}, {.checkpointer = second_cp, .thread_id = "d1"});
    ASSERT_TRUE(third) << third.error().message;
    EXPECT_EQ(third->state.at("n"), 2);
    auto holder_after = second_cp->thread_holder("d1");
    ASSERT_TRUE(holder_after);
    EXPECT_FALSE(*holder_after);
    fs::remove(db);
  }
}

// A pid that no process has any more: a child that has exited and been reaped.
int64_t dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST(ThreadClaim, ADeadOrSilentHolderIsTakenOver) {
  for (const auto& be : backends()) {
    SCOPED_TRACE(be.name);
    const auto db = temp_db("claim_takeover");
    auto cp = be.open(db);
    ASSERT_TRUE(cp);
    StateGraph b;
    b.add_channel("n", {.reducer = ReducerKind::sum, .default_value = 0});
    b.add_node("tick", [](const StateView&, NodeContext&) -> Result<Update> {
      return Update().set("n", 1);
    });
    b.add_edge("START", "tick").add_edge("tick", "END");
    auto g = *b.compile();
    GraphRuntime rt;

    // A live holder on this host: refused.
    ThreadHolder live = this_process_holder(new_claim_token(), 60000);
    ASSERT_TRUE(cp->claim_thread("d1", live));
    auto refused = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "d1"});
    ASSERT_FALSE(refused);
    EXPECT_THAT(refused.error().to_string(), ContainsRegex(kBusyPattern));
    ASSERT_TRUE(cp->release_thread("d1", live.token));

    // Same host, its process gone: taken over at once, though its lease has a minute left.
    ThreadHolder dead = this_process_holder(new_claim_token(), 60000);
    dead.pid = dead_pid();
    ASSERT_TRUE(cp->claim_thread("d1", dead));
    auto r = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "d1"});
    ASSERT_TRUE(r) << r.error().message;
    // The old holder, were it only slow, can no longer write.
    Checkpoint late;
    late.thread_id = "d1";
    late.checkpoint_id = new_checkpoint_id(99);
    late.claim_token = dead.token;
    auto put = cp->put(late);
    ASSERT_FALSE(put);
    EXPECT_EQ(put.error().to_string(),
              "thread_busy: thread 'd1' is no longer held by this runner: its claim was "
              "released; this run stops without writing");

    // Another host (its pids mean nothing here) whose heartbeat lapsed: taken over.
    ThreadHolder silent = this_process_holder(new_claim_token(), 50);
    silent.host = "elsewhere";
    ASSERT_TRUE(cp->claim_thread("d1", silent));
    ThreadHolder me = this_process_holder(new_claim_token(), 30000);
    auto busy = cp->claim_thread("d1", me);
    ASSERT_FALSE(busy);
    EXPECT_THAT(busy.error().message, HasSubstr("is being run by pid " +
                                                std::to_string(::getpid()) + " on host elsewhere"));
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    auto taken = cp->claim_thread("d1", me);
    ASSERT_TRUE(taken) << taken.error().message;
    auto renew = cp->renew_thread("d1", silent.token);
    ASSERT_FALSE(renew);
    EXPECT_THAT(renew.error().message,
                ContainsRegex("^thread 'd1' is no longer held by this runner: it was taken over "
                              "by pid [0-9]+ on host [^ ]+ at .* UTC \\(this runner's heartbeat "
                              "had lapsed\\); this run stops without writing$"));
    ASSERT_TRUE(cp->release_thread("d1", me.token));
    fs::remove(db);
  }
}

// A run whose nodes take longer than the lease keeps its claim: the heartbeat refreshes it.
TEST(ThreadClaim, TheHeartbeatKeepsALongRunsClaim) {
  auto cp = make_memory_checkpointer();
  std::promise<void> entered, go_on;
  auto go_on_f = go_on.get_future().share();
  StateGraph b;
  b.add_channel("n", {});
  b.add_node("slow", [&entered, go_on_f](const StateView&, NodeContext&) -> Result<Update> {
    entered.set_value();
    go_on_f.wait();
    return Update().set("n", 1);
  });
  b.add_edge("START", "slow").add_edge("slow", "END");
  auto g = *b.compile();
  Result<RunResult> first = Error(Errc::cancelled, "not run");
  std::thread runner([&] {
    GraphRuntime rt;
    first = run(rt, g, {},
                {.checkpointer = cp.get(),
                 .thread_id = "d1",
                 .thread_lease = std::chrono::milliseconds(90)});
  });
  entered.get_future().wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // over three leases
  ThreadHolder other = this_process_holder(new_claim_token(), 30000);
  other.host = "elsewhere";
  auto claim = cp->claim_thread("d1", other);
  go_on.set_value();
  runner.join();
  EXPECT_FALSE(claim);
  ASSERT_TRUE(first) << first.error().message;
}

}  // namespace
}  // namespace weir::graph

namespace weir::graph {
namespace {

// Three steps, each recording NodeContext::step(); `stop` is set by the second.
std::shared_ptr<const CompiledGraph> counting_graph(std::shared_ptr<std::atomic<bool>> stop) {
  StateGraph b;
  b.add_channel("steps", {.reducer = ReducerKind::append});
  for (const char* name : {"a", "b", "c"}) {
    b.add_node(name, [stop, name](const StateView&, NodeContext& c) -> Result<Update> {
      if (std::string_view(name) == "b" && stop) stop->store(true);
      return Update().set("steps", json::array{c.step()});
    });
  }
  b.add_edge("START", "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", "END");
  return *b.compile();
}

// A claim the caller holds: the run writes under it and never releases it; once another
// claimant took the thread over, no further step of the run is committed.
TEST(ThreadClaim, ARunUnderTheCallersClaimIsFencedByIt) {
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  const std::string token = new_claim_token();
  ASSERT_TRUE(cp->claim_thread("q1", this_process_holder(token, 60000)));
  RunOptions o;
  o.checkpointer = cp.get();
  o.thread_id = "q1";
  o.claim_token = token;
  auto r = run(rt, counting_graph(nullptr), {}, o);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(json::serialize(r->state.at("steps")), "[1,2,3]");
  auto holder = cp->thread_holder("q1");
  ASSERT_TRUE(holder && *holder);
  EXPECT_EQ((**holder).token, token);  // still the caller's
  // Another claimant takes the thread (the caller's claim was released here by hand, as a
  // lapse would): the old token writes nothing more.
  ASSERT_TRUE(cp->release_thread("q1", token));
  ASSERT_TRUE(cp->claim_thread("q1", this_process_holder(new_claim_token(), 60000)));
  const auto before = cp->list("q1")->size();
  auto again = run(rt, counting_graph(nullptr), {}, o);
  ASSERT_FALSE(again);
  EXPECT_TRUE(again.error().is(Errc::thread_busy)) << again.error().message;
  EXPECT_EQ(cp->list("q1")->size(), before);
}

// RunOptions::cancel stops the run before its next superstep; what it committed stays, and
// NodeContext::step() counts over the thread.
TEST(ThreadClaim, ACancelledRunStopsBeforeItsNextSuperstep) {
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;
  auto stop = std::make_shared<std::atomic<bool>>(false);
  RunOptions o;
  o.checkpointer = cp.get();
  o.thread_id = "c1";
  o.cancel = stop;
  auto r = run(rt, counting_graph(stop), {}, o);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::cancelled));
  EXPECT_EQ(r.error().message, "run cancelled before superstep 3");
  auto latest = cp->latest("c1");
  ASSERT_TRUE(latest && *latest);
  EXPECT_EQ((**latest).step, 2);
  // Continued without the flag: the last step runs, numbered 3 on the thread.
  stop->store(false);
  auto rest = run(rt, counting_graph(nullptr), {}, o);
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_EQ(json::serialize(rest->state.at("steps")), "[1,2,3]");
}

}  // namespace
}  // namespace weir::graph
