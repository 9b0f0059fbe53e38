// The official LangGraph JS client (@langchain/langgraph-sdk from npm, unchanged) drives
// `weir serve`: tests/langgraph/clients/sdk_flows.mjs runs each flow a user's program would
// (assistants, threads, wait, stream, interrupt then command.resume, background + join, cancel,
// errors) and prints what it saw; this test checks it. Skipped, saying why, without node or the
// package (tests/langgraph/clients/setup installs it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "langgraph_fixture.hpp"

namespace weir::serve {
namespace {

TEST(LangGraphSdk, TheOfficialJsClientRunsEveryFlow) {
  if (auto why = no_js_client(); !why.empty()) GTEST_SKIP() << why;
  auto s = start(lg_config());
  const json::value v = run_client_script("sdk_flows.mjs", {loopback(s.port)});
  ASSERT_TRUE(v.is_object());
  const std::string all = json::serialize(v);
  for (const auto& kv : v.as_object())
    EXPECT_FALSE(kv.value().is_object() && kv.value().as_object().contains("thrown") &&
                 kv.value().at("thrown").is_string())
        << kv.key() << ": " << json::serialize(kv.value());

  const auto& a = v.at("assistants");
  EXPECT_EQ(json::serialize(a.at("graph_ids")), R"(["ask","boom","chat","slow","steps","ticks"])");
  EXPECT_EQ(a.at("steps").at("assistant_id"), "01d10e59-d4b4-51ec-8e94-9b2716b34de8");
  EXPECT_EQ(a.at("by_id"), "steps");
  EXPECT_EQ(a.at("graph").at("nodes").as_array().size(), 5u);  // __start__, 3 nodes, __end__
  EXPECT_EQ(json::serialize(a.at("schemas").at("input_schema").at("properties")),
            R"({"topic":{}})");
  EXPECT_EQ(json::serialize(a.at("one")), R"(["ask"])");

  const auto& t = v.at("threads");
  const auto id = t.at("created").at("thread_id");
  EXPECT_EQ(t.at("created").at("status"), "idle");
  EXPECT_EQ(t.at("created").at("values"), nullptr);
  EXPECT_EQ(json::serialize(t.at("final")),
            R"({"done":true,"seen":["first t","second"],"topic":"t"})");
  EXPECT_EQ(t.at("after").at("status"), "idle");
  // A run stamps the graph into the thread's metadata: Agent Chat UI finds its threads so.
  EXPECT_EQ(t.at("after").at("metadata").at("graph_id"), "steps");
  EXPECT_EQ(t.at("after").at("metadata").at("user"), "u1");
  EXPECT_EQ(t.at("state").at("values"), t.at("final"));
  EXPECT_TRUE(t.at("state").at("next").as_array().empty());
  const auto& history = t.at("history").as_array();
  ASSERT_EQ(history.size(), 5u) << all;  // newest first, the root state (step -1) last
  EXPECT_EQ(history[4].at("checkpoint").at("checkpoint_id"), "root");
  EXPECT_EQ(history[4].at("metadata").at("step"), -1);
  EXPECT_EQ(history[3].at("parent_checkpoint").at("checkpoint_id"), "root");
  EXPECT_EQ(history[0].at("checkpoint").at("checkpoint_id"),
            t.at("state").at("checkpoint").at("checkpoint_id"));
  EXPECT_EQ(history[0].at("parent_checkpoint").at("checkpoint_id"),
            history[1].at("checkpoint").at("checkpoint_id"));
  EXPECT_EQ(t.at("older_count"), 4);  // `before` the newest, as the SDK sends it
  EXPECT_EQ(json::serialize(t.at("mine")), "[" + json::serialize(id) + "]");
  EXPECT_EQ(json::serialize(t.at("by_graph")), "[" + json::serialize(id) + "]");
  EXPECT_EQ(t.at("again").at("status"), 409);
  EXPECT_EQ(t.at("same"), id);
  EXPECT_EQ(t.at("missing").at("status"), 404);

  const auto& i = v.at("interrupt");
  const auto& first = i.at("first").at("__interrupt__").as_array();
  ASSERT_EQ(first.size(), 1u) << all;
  EXPECT_EQ(json::serialize(first[0].at("value")), R"({"question":"proceed?"})");
  EXPECT_EQ(i.at("paused_status"), "interrupted");
  // Thread.interrupts is keyed by the interrupted task's id, as LangGraph keys it.
  const std::string task(i.at("tasks").at(0).at("id").as_string());
  EXPECT_EQ(i.at("interrupts").at(task).at(0).at("id"), first[0].at("id"));
  EXPECT_EQ(json::serialize(i.at("next")), R"(["ask"])");
  EXPECT_EQ(i.at("tasks").at(0).at("interrupts").at(0).at("value"), first[0].at("value"));
  const auto& events = i.at("events").as_array();
  ASSERT_EQ(events.size(), 6u) << all;
  EXPECT_EQ(events[0].at("event"), "metadata");
  // A resume opens with the state it resumes from, as LangGraph's does.
  EXPECT_EQ(json::serialize(events[1]), R"({"event":"values","data":{"question":"proceed?"}})");
  EXPECT_EQ(json::serialize(events[2]), R"({"event":"updates","data":{"ask":{"answer":"yes"}}})");
  EXPECT_EQ(events[5].at("event"), "values");
  EXPECT_EQ(events[5].at("data").at("after"), true);
  // The run id the stream's Content-Location gave (onRunCreated) is the metadata event's.
  EXPECT_EQ(i.at("created").at("run_id"), events[0].at("data").at("run_id"));
  EXPECT_EQ(i.at("done_status"), "idle");

  const auto& b = v.at("background");
  EXPECT_EQ(b.at("created").at("run_id"), b.at("run").at("run_id"));
  EXPECT_EQ(b.at("joined").at("done"), true);
  EXPECT_EQ(b.at("status"), "success");
  EXPECT_EQ(json::serialize(b.at("listed")), "[" + json::serialize(b.at("run").at("run_id")) + "]");

  const auto& c2 = v.at("cancel");
  EXPECT_EQ(c2.at("busy_status"), "busy");
  EXPECT_EQ(c2.at("second").at("status"), 409);  // multitask_strategy reject
  EXPECT_EQ(c2.at("status"), "interrupted");

  const auto& e = v.at("errors");
  EXPECT_EQ(e.at("waited").at("thrown"),
            "invalid_argument: node 'broken': calculator: unexpected end of expression at "
            "column 4");
  const auto& ev = e.at("events").as_array();
  ASSERT_EQ(ev.size(), 2u) << all;
  EXPECT_EQ(ev[1].at("event"), "error");
  EXPECT_EQ(e.at("unknown").at("status"), 404);
  EXPECT_EQ(e.at("bad_input").at("status"), 422);
  EXPECT_EQ(e.at("fork").at("status"), 422);  // a stateless run has no checkpoint to fork
  EXPECT_EQ(e.at("stateless").at("done"), true);

  // Messages in LangChain's shape both ways; weir keeps them in its own (OpenAI's).
  const auto& m = v.at("messages");
  const auto& final_messages = m.at("final").at("messages").as_array();
  ASSERT_EQ(final_messages.size(), 4u) << all;
  EXPECT_EQ(json::serialize(final_messages[0]),
            R"({"type":"human","content":"what is 6*7?","id":"m-1","name":null,)"
            R"("additional_kwargs":{},"response_metadata":{}})");
  EXPECT_EQ(final_messages[1].at("type"), "ai");
  EXPECT_EQ(
      json::serialize(final_messages[1].at("tool_calls")),
      R"([{"id":"call_1","name":"calculator","args":{"expression":"6*7"},"type":"tool_call"}])");
  EXPECT_EQ(final_messages[2].at("type"), "tool");
  EXPECT_EQ(final_messages[2].at("tool_call_id"), "call_1");
  EXPECT_EQ(final_messages[3].at("content"), "It is 42.");
  const auto& updates = m.at("updates").as_array();
  ASSERT_EQ(updates.size(), 2u) << all;
  // `updates` show what a node added, not the whole list.
  EXPECT_EQ(updates[0].at("call").at("messages").as_array().size(), 2u) << all;
  ASSERT_EQ(updates[1].at("reply").at("messages").as_array().size(), 1u) << all;
  EXPECT_EQ(updates[1].at("reply").at("messages").at(0).at("content"), "It is 42.");
  // Ids are stable: the four of the first run keep theirs in the state after the second.
  const auto& ids = m.at("ids").as_array();
  ASSERT_EQ(ids.size(), 8u) << all;
  for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(ids[k], final_messages[k].at("id")) << k;
  EXPECT_NE(ids[4], ids[0]);

  // Streams as Agent Chat UI asks for them, and a run joined again after an event.
  const auto& st = v.at("streams");
  const auto& chat = st.at("chat").as_array();
  std::vector<std::string> kinds;
  for (const auto& e : chat) kinds.emplace_back(e.at("event").as_string());
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "messages"), 3) << all;
  for (const auto& e : chat) {
    if (e.at("event") != "messages") continue;  // [message chunk, metadata]
    EXPECT_TRUE(e.at("data").at(0).as_object().contains("type")) << e;
    EXPECT_TRUE(e.at("data").at(1).as_object().contains("langgraph_node")) << e;
  }
  const auto& whole = st.at("whole").as_array();
  const auto& after = st.at("after").as_array();
  ASSERT_GE(whole.size(), 4u) << all;
  EXPECT_EQ(whole[0], nullptr);                      // the metadata event has no id
  ASSERT_EQ(after.size(), whole.size() - 3) << all;  // everything after the second id'd event
  for (std::size_t k = 0; k < after.size(); ++k) EXPECT_EQ(after[k], whole[k + 3]) << k;
  EXPECT_EQ(st.at("last").at("n"), 4);

  // Forks, state updates, copies, deletes and prunes as the SDK calls them.
  const auto& ops = v.at("thread_ops");
  EXPECT_EQ(json::serialize(ops.at("forked_seen")), R"(["first a","second","first c","second"])")
      << all;
  EXPECT_TRUE(ops.at("updated").at("checkpoint").as_object().contains("checkpoint_id")) << all;
  EXPECT_EQ(ops.at("topic"), "z");
  EXPECT_EQ(ops.at("copy_metadata").at("who"), "ops");
  EXPECT_EQ(ops.at("copied_topic"), "z");
  EXPECT_EQ(ops.at("deleted").at("status"), 404);
  EXPECT_EQ(ops.at("pruned").at("pruned_count"), 1);
  EXPECT_EQ(ops.at("history_length"), 2);  // the compacted checkpoint and the root state

  // An assistant made, versioned, set back, found, run and deleted as the SDK calls them.
  const auto& mk = v.at("assistants_made");
  const auto made_id = mk.at("made").at("assistant_id");
  EXPECT_EQ(mk.at("made").at("graph_id"), "steps");
  EXPECT_EQ(mk.at("made").at("version"), 1);
  EXPECT_EQ(mk.at("updated"), "Steps, reviewed");
  EXPECT_EQ(json::serialize(mk.at("versions")), "[2,1]");
  EXPECT_EQ(mk.at("back"), "Steps for docs");
  EXPECT_EQ(json::serialize(mk.at("found")), "[" + json::serialize(made_id) + "]");
  EXPECT_EQ(json::serialize(mk.at("final")),
            R"({"done":true,"seen":["first m","second"],"topic":"m"})");
  EXPECT_EQ(mk.at("gone").at("status"), 404);
}

}  // namespace
}  // namespace weir::serve
