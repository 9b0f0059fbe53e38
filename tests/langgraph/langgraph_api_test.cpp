// The LangGraph Server API on `weir serve` (serve/src/langgraph_api.hpp) over real HTTP on
// loopback: the shapes a LangGraph client reads, the errors it gets, and weir's fences at this
// door (the key, another site's page, a full run queue, a client that leaves).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "langgraph_fixture.hpp"

namespace weir::serve {
namespace {

using namespace std::chrono_literals;

// LangGraph names a graph's default assistant uuid5(graph_id) in its own namespace; clients
// that stored such an id (or the graph id itself) reach the same workflow.
TEST(LangGraphApi, AssistantIdsAreLangGraphsUuid5OfTheGraphId) {
  auto s = start(lg_config());
  // uuid5("steps") in LangGraph's namespace (6ba7b821-...; Python's uuid module agrees).
  auto a = call(s.port, "GET", "/assistants/01d10e59-d4b4-51ec-8e94-9b2716b34de8");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(body_json(a).at("graph_id"), "steps");
  auto g = call(s.port, "GET", "/assistants/steps/graph");
  ASSERT_EQ(g.status, 200) << g.body;
  const json::value graph = body_json(g);
  const auto& edges = graph.at("edges").as_array();
  ASSERT_EQ(edges.size(), 4u);
  EXPECT_EQ(edges[0].at("source"), "__start__");
  EXPECT_EQ(edges[3].at("target"), "__end__");
  auto missing = call(s.port, "GET", "/assistants/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(
      detail(missing),
      "Assistant 'nope' not found (this server's graphs: ask, boom, chat, slow, steps, ticks; "
      "and the assistants made with POST /assistants)");
  auto info = call(s.port, "GET", "/info");
  EXPECT_EQ(body_json(info).at("flags").at("assistants"), true);
  EXPECT_EQ(body_json(call(s.port, "GET", "/ok")).at("ok"), true);
}

// A LangChain message sent to a run is kept in weir's one message shape (docs/agents.md), which
// the runs API and the CLI read; its id stays with it.
TEST(LangGraphApi, MessagesAreStoredInWeirsOneShape) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  auto r = call(s.port, "POST", "/threads/" + t + "/runs/wait",
                R"({"assistant_id": "chat", "input": {"messages": [
                      {"type": "human", "content": [{"type": "text", "text": "hi"}], "id": "m-1"}]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto st = call(s.port, "GET", "/v1/threads/" + t + "/state");
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_EQ(json::serialize(body_json(st).at("values").at("messages").at(0)),
            R"({"role":"user","content":"hi","id":"m-1"})");
}

// PATCH merges metadata; a checkpoint's state is read by its id (an unknown one is a 404).
TEST(LangGraphApi, PatchAThreadAndReadAnOlderCheckpoint) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  auto patched = call(s.port, "PATCH", "/threads/" + t, R"({"metadata": {"owner": "ana"}})");
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(body_json(patched).at("metadata").at("owner"), "ana");
  auto found = call(s.port, "POST", "/threads/search", R"({"metadata": {"owner": "ana"}})");
  EXPECT_EQ(body_json(found).as_array().size(), 1u);
  EXPECT_EQ(call(s.port, "PATCH", "/threads/" + t, R"({"metadata": 5})").status, 422);
  ASSERT_EQ(call(s.port, "POST", "/threads/" + t + "/runs/wait",
                 R"({"assistant_id": "steps", "input": {"topic": "p"}})")
                .status,
            200);
  auto history = body_json(call(s.port, "POST", "/threads/" + t + "/history", "{}"));
  const json::value second = history.at(2);  // after the step of `first`
  const std::string id(second.at("checkpoint").at("checkpoint_id").as_string());
  auto at = call(s.port, "GET", "/threads/" + t + "/state/" + id);
  ASSERT_EQ(at.status, 200) << at.body;
  EXPECT_EQ(body_json(at), second);
  auto none = call(s.port, "GET", "/threads/" + t + "/state/000000000009-nope");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(detail(none), "Checkpoint 000000000009-nope not found on thread " + t);
}

// What weir does not do yet is a 501 that names the endpoint or the field, never a 200 that
// did something else.
TEST(LangGraphApi, WhatWeirDoesNotDoYetIs501NamingIt) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  auto crons = call(s.port, "POST", "/threads/" + t + "/runs/crons", "{}");
  EXPECT_EQ(crons.status, 501);
  EXPECT_EQ(detail(crons),
            "POST /threads/{thread_id}/runs/crons is not implemented by weir yet "
            "(docs/langgraph-api.md lists the endpoints it serves)");
  auto store = call(s.port, "PUT", "/store/items",
                    R"({"namespace": ["a"], "key": "k", "value": {}, "ttl": 5})");
  EXPECT_EQ(store.status, 501);
  auto context = call(s.port, "POST", "/threads/" + t + "/runs/wait",
                      R"({"assistant_id": "steps", "context": {"user": "u1"}})");
  EXPECT_EQ(context.status, 501);
  EXPECT_EQ(detail(context), "POST /threads/" + t +
                                 "/runs/wait: 'context' is not supported by weir yet "
                                 "(docs/langgraph-api.md)");
  // A delayed resume has no counterpart yet.
  auto later = call(s.port, "POST", "/threads/" + t + "/runs/wait",
                    R"({"assistant_id": "steps", "command": {"resume": 1}, "after_seconds": 5})");
  EXPECT_EQ(later.status, 501);
  EXPECT_EQ(detail(later), "POST /threads/" + t +
                               "/runs/wait: 'after_seconds' with 'command.resume' (a delayed "
                               "resume) is not supported by weir yet (docs/langgraph-api.md)");
  // Nothing ran on the thread.
  auto st = call(s.port, "GET", "/threads/" + t);
  EXPECT_EQ(body_json(st).at("values"), nullptr);
}

// webhook and after_seconds that cannot be taken: a 422 naming the field, and nothing queued.
// Without --webhook-hosts the server calls no webhook at all (SSRF: docs/langgraph-api.md).
TEST(LangGraphApi, AWebhookOrADelayItCannotTakeIsA422NamingIt) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  auto ask = [&](const std::string& extra) {
    return call(s.port, "POST", "/threads/" + t + "/runs",
                R"({"assistant_id": "steps", )" + extra + "}");
  };
  auto off = ask(R"("webhook": "http://127.0.0.1:9/hook")");
  EXPECT_EQ(off.status, 422);
  EXPECT_EQ(detail(off),
            "'webhook': this server calls no webhooks; start it with --webhook-hosts naming the "
            "hosts it may call (docs/langgraph-api.md \"Webhooks\")");
  auto scheme = ask(R"("webhook": "ftp://127.0.0.1/hook")");
  EXPECT_EQ(scheme.status, 422);
  EXPECT_EQ(detail(scheme),
            "'webhook': invalid URL 'ftp://127.0.0.1/hook': expected http:// or https://");
  auto creds = ask(R"("webhook": "http://me:pw@127.0.0.1/hook")");
  EXPECT_EQ(creds.status, 422);
  EXPECT_EQ(
      detail(creds),
      "'webhook': invalid URL 'http://me:pw@127.0.0.1/hook': credentials in URLs are refused");
  auto number = ask(R"("webhook": 5)");
  EXPECT_EQ(number.status, 422);
  EXPECT_EQ(detail(number), "'webhook' must be a URL (a string), got an integer");
  auto query = ask(R"("webhook": "http://127.0.0.1/hook?a=b c")");
  EXPECT_EQ(query.status, 422);
  EXPECT_EQ(detail(query),
            "'webhook': invalid URL 'http://127.0.0.1/hook?a=b c': its query may not hold a space, "
            "a control character or a fragment");
  for (const char* wrong : {"-1", "86401", "\"soon\""}) {
    auto r = ask(std::string(R"("after_seconds": )") + wrong);
    EXPECT_EQ(r.status, 422) << wrong << r.body;
    EXPECT_EQ(detail(r), std::string("'after_seconds' must be a number of seconds from 0 to "
                                     "86400 (a day), got ") +
                             wrong);
  }
  // Nothing ran on the thread.
  EXPECT_EQ(body_json(call(s.port, "GET", "/threads/" + t)).at("status"), "idle");
  EXPECT_EQ(body_json(call(s.port, "GET", "/threads/" + t)).at("values"), nullptr);
}

// Bad input: a clear 4xx, and nothing queued.
TEST(LangGraphApi, BadRequestsSayWhatIsWrong) {
  auto s = start(lg_config());
  auto junk = call(s.port, "POST", "/threads", "{not json");
  EXPECT_EQ(junk.status, 400);
  EXPECT_EQ(detail(junk), "the request body:1:2: syntax error");
  auto no_assistant = call(s.port, "POST", "/runs/wait", R"({"input": {}})");
  EXPECT_EQ(no_assistant.status, 422);
  EXPECT_EQ(detail(no_assistant), "'assistant_id' is required: a graph id or an assistant id");
  auto configurable = call(s.port, "POST", "/runs/wait",
                           R"({"assistant_id": "steps", "config": {"configurable": 5}})");
  EXPECT_EQ(configurable.status, 422);
  EXPECT_EQ(detail(configurable), "'config.configurable' must be an object, got an integer");
  auto not_object = call(s.port, "POST", "/runs/wait", R"({"assistant_id": "steps", "input": 5})");
  EXPECT_EQ(not_object.status, 422);
  EXPECT_EQ(detail(not_object), "'input' must be an object of channel values, got an integer");
  auto id =
      call(s.port, "POST", "/threads", std::string(R"({"thread_id": "a)") + "\\u0001" + "\"}");
  EXPECT_EQ(id.status, 422);
  EXPECT_EQ(detail(id).substr(0, 39), "thread_id holds a control character (by");
  auto unknown = call(s.port, "POST", "/threads/nope/runs/wait", R"({"assistant_id": "steps"})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(detail(unknown), "Thread with ID nope not found");
  // if_not_exists "create" makes it.
  auto made =
      call(s.port, "POST", "/threads/fresh/runs/wait",
           R"({"assistant_id": "steps", "input": {"topic": "x"}, "if_not_exists": "create"})");
  EXPECT_EQ(made.status, 200) << made.body;
  EXPECT_EQ(body_json(made).at("done"), true);
  auto robot = call(s.port, "POST", "/runs/wait",
                    R"({"assistant_id": "chat", "input": {"messages": [{"type": "robot"}]}})");
  EXPECT_EQ(robot.status, 422);
  EXPECT_EQ(detail(robot),
            "'input.messages[0].type' must be human, ai, system or tool, got 'robot'");
  // A messages channel takes messages only (a text is a human message, as add_messages has it).
  const std::pair<const char*, const char*> not_messages[] = {
      {R"({"content": "no type"})",
       R"('input.messages[0]' must be a message ({"type": "human", "content": "..."}) or a text, got an object without 'type')"},
      {"5", "'input.messages' must be a list of messages, a message or a text, got an integer"},
      {R"([{"type": "human", "content": "hi", "id": 5}])",
       "'input.messages[0].id' must be a string, got an integer"},
      {R"([{"type": "tool", "content": "42"}])",
       "'input.messages[0].tool_call_id' is required: a tool message answers a tool call"},
      {R"([{"type": "ai", "content": "", "tool_calls": [{"name": "f", "args": "notobj"}]}])",
       "'input.messages[0].tool_calls[0].args' must be an object, got a string"}};
  for (const auto& [messages, why] : not_messages) {
    auto r =
        call(s.port, "POST", "/runs/wait",
             std::string(R"({"assistant_id": "chat", "input": {"messages": )") + messages + "}}");
    EXPECT_EQ(r.status, 422) << messages << " " << r.body;
    EXPECT_EQ(detail(r), why) << messages;
  }
  auto text = call(s.port, "POST", "/runs/wait",
                   R"({"assistant_id": "chat", "input": {"messages": "hello"}})");
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(body_json(text).at("messages").at(0).at("type"), "human") << text.body;
  EXPECT_EQ(body_json(text).at("messages").at(0).at("content"), "hello") << text.body;
  auto page = call(s.port, "POST", "/threads/search", R"({"limit": 0})");
  EXPECT_EQ(page.status, 422);
  EXPECT_EQ(detail(page), "'limit' must be an integer from 1 to 1000, got 0");
  // Filters of the wrong type or value are a 422 naming them, not ignored (break40 B2, C3, C4).
  const std::pair<const char*, const char*> refused[] = {
      {R"({"ids": "x"})", "'ids' must be a list of at most 1000 thread ids"},
      {R"({"status": "bogus"})",
       "'status' must be one of idle, busy, interrupted, error, got 'bogus'"},
      {R"({"sort_by": "nope"})",
       "'sort_by' must be one of thread_id, created_at, updated_at, status, state_updated_at, got "
       "'nope'"},
      {R"({"metadata": "x"})", "'metadata' must be an object, got a string"}};
  for (const auto& [body, why] : refused) {
    auto r = call(s.port, "POST", "/threads/search", body);
    EXPECT_EQ(r.status, 422) << body;
    EXPECT_EQ(detail(r), why) << body;
  }
  EXPECT_EQ(call(s.port, "POST", "/threads/search", R"({"select": ["thread_id"]})").status, 501);
  auto mode =
      call(s.port, "POST", "/runs/wait", R"({"assistant_id": "steps", "stream_mode": "bogus"})");
  EXPECT_EQ(mode.status, 422);
  auto strategy =
      call(s.port, "POST", "/runs", R"({"assistant_id": "steps", "multitask_strategy": "x"})");
  EXPECT_EQ(strategy.status, 422);
  EXPECT_EQ(detail(strategy),
            "'multitask_strategy' must be one of reject, interrupt, rollback, enqueue, got \"x\"");
  auto typed = call(s.port, "POST", "/runs", R"({"assistant_id": 5})");
  EXPECT_EQ(detail(typed),
            "'assistant_id' must be a graph id or an assistant id (a string), got 5");
  auto counted = call(s.port, "POST", "/assistants/count", R"({"graph_id": "steps"})");
  EXPECT_EQ(counted.body, "1");
  auto crons = call(s.port, "POST", "/threads/fresh/runs/crons", "{}");
  EXPECT_EQ(crons.status, 501);
  auto upper = call(s.port, "GET", "/assistants/01D10E59-D4B4-51EC-8E94-9B2716B34DE8");
  EXPECT_EQ(upper.status, 200);
  auto cancel = call(s.port, "POST", "/threads/fresh/runs/r-1/cancel?action=bogus");
  EXPECT_EQ(cancel.status, 404);  // the run is checked first
  // History filters on the metadata as shown (step and source included).
  auto loop = call(s.port, "POST", "/threads/fresh/history",
                   R"({"metadata": {"source": "loop", "step": 1}})");
  ASSERT_EQ(loop.status, 200) << loop.body;
  EXPECT_EQ(body_json(loop).as_array().size(), 1u) << loop.body;
  auto listed = call(s.port, "GET", "/v1/runs");
  EXPECT_EQ(body_json(listed).at("data").as_array().size(), 2u);  // only the two that ran
  auto before = call(s.port, "POST", "/threads/fresh/history", R"({"before": "nope"})");
  EXPECT_EQ(before.status, 404);
  EXPECT_EQ(detail(before), "thread fresh has no checkpoint 'nope' ('before')");
}

// The fences of every door hold here too: the key (the SDK's X-Api-Key or a Bearer token),
// another site's page, a full run queue.
TEST(LangGraphApi, TheFencesOfEveryDoorHoldHere) {
  {
    auto c = lg_config();
    c.api_key = "s3cret";
    auto s = start(c);
    auto none = call(s.port, "POST", "/threads", "{}");
    EXPECT_EQ(none.status, 401);
    EXPECT_EQ(call(s.port, "POST", "/threads", "{}", "X-Api-Key: s3cret\r\n").status, 200);
    auto wrong = call(s.port, "POST", "/threads", "{}", "X-Api-Key: wrong\r\n");
    EXPECT_EQ(wrong.status, 401);  // a wrong key is called wrong, not missing (break40 C2)
    EXPECT_EQ(std::string(body_json(wrong).at("error").at("message").as_string()).substr(0, 16),
              "invalid API key:");
    EXPECT_EQ(call(s.port, "POST", "/threads", "{}", "Authorization: Bearer s3cret\r\n").status,
              200);
  }
  auto c = lg_config();
  c.max_runs = 1;
  c.max_queued_runs = 1;
  auto s = start(c);
  auto evil = call(s.port, "POST", "/runs", R"({"assistant_id": "steps"})",
                   "Origin: https://evil.example\r\n");
  EXPECT_EQ(evil.status, 403);
  const std::string body = R"({"assistant_id": "slow"})";
  auto a = call(s.port, "POST", "/runs", body);
  auto b = call(s.port, "POST", "/runs", body);
  auto full = call(s.port, "POST", "/runs", body);
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_EQ(full.header("retry-after"), "1");
  EXPECT_EQ(detail(full).substr(0, 22), "the run queue is full ");
  EXPECT_EQ(a.header("content-location"),
            "/runs/" + std::string(body_json(a).at("run_id").as_string()));
}

// The thread list is bounded (--max-threads): one more is a 429 that says why, and stateless
// runs (threads of their own, forgotten with them) do not count.
TEST(LangGraphApi, TheThreadListIsBounded) {
  auto c = lg_config();
  c.max_threads = 2;
  auto s = start(c);
  const std::string first = new_thread(s.port);
  new_thread(s.port);
  auto third = call(s.port, "POST", "/threads", "{}");
  EXPECT_EQ(third.status, 429);
  EXPECT_EQ(detail(third),
            "the server holds 2 threads already (its limit): use an existing thread, or a "
            "stateless run (POST /runs)");
  auto run_on_new = call(s.port, "POST", "/threads/t3/runs/wait",
                         R"({"assistant_id": "steps", "if_not_exists": "create"})");
  EXPECT_EQ(run_on_new.status, 429);
  for (int i = 0; i < 3; ++i) {
    auto r =
        call(s.port, "POST", "/runs/wait", R"({"assistant_id": "steps", "input": {"topic": "x"}})");
    EXPECT_EQ(r.status, 200) << r.body;
    // Its thread is its own, named like the run.
    const auto where = r.header("content-location");
    EXPECT_EQ(where.substr(0, 8), "/runs/r-") << where;
  }
  auto count = call(s.port, "POST", "/threads/count", "{}");
  EXPECT_EQ(count.body, "2");
  // A thread's metadata is bounded too, and the refusal names it.
  const std::string big =
      std::string(R"({"metadata": {"k": ")") + std::string(300000, 'x') + "\"}}";
  auto heavy = call(s.port, "PATCH", "/threads/" + first, big);
  EXPECT_EQ(heavy.status, 422);
  EXPECT_EQ(detail(heavy),
            "'metadata' is 300008 bytes of JSON, more than the 262144 a thread keeps; keep large "
            "documents in the store (/store/items) and a reference in the metadata");
}

// A streaming client that leaves with on_disconnect "cancel" cancels its run within a step
// (LangGraph's Agent Chat UI sends it).
TEST(LangGraphApi, AClientThatLeavesWithOnDisconnectCancelCancelsItsRun) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  {
    Conn c(s.port);
    ASSERT_TRUE(c.request("POST", "/threads/" + t + "/runs/stream",
                          R"({"assistant_id": "slow", "on_disconnect": "cancel"})"));
    Reply head;
    ASSERT_TRUE(c.read_head(head));
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.header("content-type"), "text/event-stream");
    EXPECT_EQ(head.header("content-location").substr(0, 9 + t.size() + 6),
              "/threads/" + t + "/runs/");
  }  // the client is gone
  std::string status;
  for (int i = 0; i < 100 && status != "idle"; ++i) {
    std::this_thread::sleep_for(50ms);
    status = body_json(call(s.port, "GET", "/threads/" + t)).at("status").as_string();
  }
  EXPECT_EQ(status, "idle");
  auto runs = body_json(call(s.port, "GET", "/threads/" + t + "/runs")).as_array();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].at("status"), "interrupted");
  const auto state = body_json(call(s.port, "GET", "/threads/" + t + "/state"));
  const auto* n = state.at("values").as_object().if_contains("n");
  EXPECT_TRUE(!n || n->as_int64() < 20) << state;  // stopped long before its 60 steps
}

}  // namespace
}  // namespace weir::serve
