// Human in the loop: NodeContext::interrupt, the "interrupted" checkpoint, async_resume.
#include <filesystem>

#include <unistd.h>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph {
namespace {

namespace json = boost::json;
using testing::resume;
using testing::run;

// draft -> {approve, notify} -> publish. approve asks a human (interrupt) unless resumed;
// notify runs in the same superstep, so its write is discarded and it runs again on resume.
std::shared_ptr<const CompiledGraph> approval_graph(std::shared_ptr<int> notify_runs) {
  StateGraph b;
  b.add_channel("draft", {});
  b.add_channel("approved", {});
  b.add_channel("published", {.default_value = false});
  b.add_channel("log", {.reducer = ReducerKind::append});
  b.add_node("draft", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("draft", "weir 1.0 is out").set("log", "drafted");
  });
  b.add_node("approve", [](const StateView& s, NodeContext& c) -> Result<Update> {
    if (const json::value* answer = c.resume_value())
      return Update().set("approved", *answer).set("log", "approved");
    return c.interrupt(json::object{{"question", "publish this?"}, {"draft", s.get("draft")}});
  });
  b.add_node("notify", [notify_runs](const StateView&, NodeContext&) -> Result<Update> {
    ++*notify_runs;
    return Update().set("log", "notified");
  });
  b.add_node("publish", [](const StateView& s, NodeContext& c) -> Result<Update> {
    EXPECT_EQ(c.resume_value(), nullptr);  // only the interrupted node, only its step
    return Update().set("published", s.get("approved") == "yes");
  });
  b.add_edge("START", "draft").add_edge("draft", "approve").add_edge("draft", "notify");
  b.add_edge("approve", "publish").add_edge("notify", "publish").add_edge("publish", "END");
  return *b.compile();
}

std::filesystem::path temp_db(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("weir_" + name + "_" + std::to_string(::getpid()) + ".sqlite");
  std::filesystem::remove(p);
  return p;
}

// The run stops at approve; a new runtime with a new SQLite connection (a restarted process)
// resumes it with the human's answer and runs to the end.
TEST(Interrupt, ResumeWithAValueAfterARestartWithSqlite) {
  const auto db = temp_db("interrupt");
  auto notify_runs = std::make_shared<int>(0);
  auto g = approval_graph(notify_runs);
  {
    auto cp = open_sqlite_checkpointer(db);
    ASSERT_TRUE(cp) << cp.error().message;
    GraphRuntime rt;
    auto r = run(rt, g, {}, {.checkpointer = cp->get(), .thread_id = "t1"});
    ASSERT_TRUE(r) << r.error().message;  // an interrupt is not an error
    EXPECT_TRUE(r->interrupted);
    EXPECT_EQ(r->interrupted_node, "approve");
    EXPECT_EQ(json::serialize(r->interrupt_payload),
              R"({"question":"publish this?","draft":"weir 1.0 is out"})");
    EXPECT_EQ(r->steps, 1);
    EXPECT_EQ(json::serialize(r->state.at("log")), R"(["drafted"])");  // notify's write dropped
    EXPECT_TRUE(r->state.at("approved").is_null());
    auto list = (*cp)->list("t1");
    ASSERT_TRUE(list);
    ASSERT_FALSE(list->empty());
    const Checkpoint& last = list->front();
    EXPECT_EQ(last.checkpoint_id, r->checkpoint_id);
    EXPECT_EQ(json::serialize(last.pending.at("status")), R"("interrupted")");
    EXPECT_EQ(json::serialize(last.pending.at("next")), R"(["approve","notify"])");
    EXPECT_EQ(json::serialize(last.pending.at("interrupt").at("node")), R"("approve")");
    EXPECT_TRUE(last.writes.empty());
  }
  EXPECT_EQ(*notify_runs, 1);
  auto cp = open_sqlite_checkpointer(db);
  ASSERT_TRUE(cp) << cp.error().message;
  GraphRuntime rt;
  auto r = resume(rt, g, "t1", "yes", {.checkpointer = cp->get()});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->interrupted);
  EXPECT_TRUE(r->resumed);
  EXPECT_EQ(r->steps, 2);  // the re-run step and publish
  EXPECT_EQ(r->state.at("approved"), "yes");
  EXPECT_EQ(r->state.at("published"), true);
  EXPECT_EQ(json::serialize(r->state.at("log")), R"(["drafted","approved","notified"])");
  EXPECT_EQ(*notify_runs, 2);
  auto latest = (*cp)->latest("t1");
  ASSERT_TRUE(latest && *latest);
  EXPECT_EQ(json::serialize((*latest)->pending.at("status")), R"("done")");
  std::filesystem::remove(db);
}

TEST(Interrupt, ResumeAndInvokeRefuseThreadsInTheWrongState) {
  auto notify_runs = std::make_shared<int>(0);
  auto g = approval_graph(notify_runs);
  auto cp = make_memory_checkpointer();
  GraphRuntime rt;

  auto none = resume(rt, g, "nope", "yes", {.checkpointer = cp.get()});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().to_string(), "not_found: thread 'nope' has no checkpoint to resume");

  auto no_cp = resume(rt, g, "t1", "yes", {});
  ASSERT_FALSE(no_cp);
  EXPECT_EQ(no_cp.error().to_string(),
            "unsupported: async_resume of thread 't1' needs a checkpointer: set "
            "RunOptions.checkpointer");

  auto first = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t1"});
  ASSERT_TRUE(first && first->interrupted);
  auto again = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t1"});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().to_string(),
            "invalid_argument: thread 't1' is interrupted at node 'approve'; call async_resume "
            "with a value to continue it");

  auto done = resume(rt, g, "t1", "no", {.checkpointer = cp.get()});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->state.at("published"), false);
  auto twice = resume(rt, g, "t1", "yes", {.checkpointer = cp.get()});
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().to_string(),
            "invalid_argument: thread 't1' is not interrupted (its last run finished)");
}

TEST(Interrupt, WithoutACheckpointerTheRunFailsClearly) {
  auto g = approval_graph(std::make_shared<int>(0));
  GraphRuntime rt;
  auto r = run(rt, g, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "unsupported: node 'approve' called interrupt(), which needs a checkpoint to resume "
            "from: set RunOptions.checkpointer and RunOptions.thread_id");
}

// The stream ends with run_interrupted naming the node and carrying the payload.
TEST(Interrupt, StreamEndsWithRunInterrupted) {
  auto g = approval_graph(std::make_shared<int>(0));
  auto cp = make_memory_checkpointer();
  auto events = std::make_shared<EventStream>();
  std::optional<Event> last;
  auto consumer = [&]() -> boost::asio::awaitable<void> {
    while (auto e = co_await events->async_next()) last = std::move(e);
  };
  GraphRuntime rt;
  auto r = testing::run_with(
      rt, g, {}, {.checkpointer = cp.get(), .thread_id = "t9", .events = events}, consumer);
  ASSERT_TRUE(r && r->interrupted);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->kind, EventKind::run_interrupted);
  EXPECT_EQ(last->node, "approve");
  EXPECT_EQ(last->step, 2);
  EXPECT_EQ(json::serialize(last->data),
            R"({"payload":{"question":"publish this?","draft":"weir 1.0 is out"}})");
}

}  // namespace
}  // namespace weir::graph
