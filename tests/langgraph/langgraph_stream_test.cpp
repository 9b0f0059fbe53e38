// The LangGraph API's run streams over real HTTP on loopback (serve/src/langgraph_stream.hpp):
// what each stream mode carries, event ids, and a stream cut and rejoined with Last-Event-ID
// that misses nothing and repeats nothing.
#include <gtest/gtest.h>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "langgraph_fixture.hpp"
#include "langgraph_stream.hpp"
#include "weir/runtime/sha256.hpp"

namespace weir::serve {
namespace {

using testing_http::SseFrame;

std::vector<SseFrame> of_event(const std::vector<SseFrame>& all, std::string_view event) {
  std::vector<SseFrame> out;
  for (const auto& f : all)
    if (f.event == event) out.push_back(f);
  return out;
}

TEST(LangGraphStream, EachModeCarriesWhatTheStepsDid) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  auto r = call(s.port, "POST", "/threads/" + t + "/runs/stream", R"({"assistant_id": "chat",
      "input": {"messages": [{"type": "human", "content": "6 times 7?"}]},
      "stream_mode": ["values", "messages-tuple", "tasks", "checkpoints", "custom"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto frames = frames_of(r.body);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames[0].event, "metadata");
  for (std::size_t i = 1; i < frames.size(); ++i)  // "<checkpoint_id>:<n>"
    EXPECT_NE(frames[i].id.find(':'), std::string::npos) << frames[i].event << " " << frames[i].id;

  // messages-tuple: each message a node added, with the node, in LangChain's shape.
  const auto messages = of_event(frames, "messages");
  ASSERT_EQ(messages.size(), 3u) << r.body;
  const auto m0 = json::parse(messages[0].data);
  EXPECT_EQ(m0.at(0).at("type"), "ai");
  EXPECT_EQ(m0.at(0).at("tool_calls").at(0).at("name"), "calculator");
  EXPECT_EQ(json::serialize(m0.at(0).at("tool_calls").at(0).at("args")), R"({"expression":"6*7"})");
  EXPECT_EQ(m0.at(1).at("langgraph_node"), "call");
  EXPECT_EQ(m0.at(1).at("thread_id"), json::value(t));
  const auto m1 = json::parse(messages[1].data);
  EXPECT_EQ(m1.at(0).at("type"), "tool");
  EXPECT_EQ(m1.at(0).at("content"), "42");
  EXPECT_EQ(m1.at(0).at("tool_call_id"), "call_1");
  const auto m2 = json::parse(messages[2].data);
  EXPECT_EQ(m2.at(0).at("content"), "It is 42.");
  EXPECT_EQ(m2.at(1).at("langgraph_node"), "reply");

  // tasks: each node's start, then its result.
  std::vector<std::string> tasks;
  for (const auto& f : of_event(frames, "tasks")) {
    const auto d = json::parse(f.data);
    tasks.push_back(std::string(d.at("name").as_string()) +
                    (d.as_object().contains("result") ? " done" : " starts"));
  }
  EXPECT_EQ(tasks,
            (std::vector<std::string>{"call starts", "call done", "reply starts", "reply done"}));

  // checkpoints: one per checkpoint the run committed, as history lists them (newest first).
  const auto cps = of_event(frames, "checkpoints");
  auto history = body_json(call(s.port, "POST", "/threads/" + t + "/history", R"({"limit": 50})"));
  ASSERT_EQ(cps.size() + 1, history.as_array().size());  // history ends with the root state
  EXPECT_EQ(json::parse(cps.back().data).at("config").at("configurable").at("checkpoint_id"),
            history.at(0).at("checkpoint").at("checkpoint_id"));
  EXPECT_EQ(json::parse(cps.back().data).at("next"), json::array{});

  // values: the last is the thread's state.
  const auto values = of_event(frames, "values");
  ASSERT_FALSE(values.empty());
  EXPECT_EQ(json::parse(values.back().data).at("messages").as_array().size(), 4u);

  // The older `messages` mode: metadata and the complete message, per message.
  auto old = call(s.port, "POST", "/runs/stream", R"({"assistant_id": "chat",
      "input": {"messages": [{"type": "human", "content": "again"}]}, "stream_mode": "messages"})");
  const auto old_frames = frames_of(old.body);
  EXPECT_EQ(of_event(old_frames, "messages/metadata").size(), 3u) << old.body;
  const auto complete = of_event(old_frames, "messages/complete");
  ASSERT_EQ(complete.size(), 3u);
  EXPECT_EQ(json::parse(complete[2].data).at(0).at("content"), "It is 42.");
}

// Reads a stream's events until `n` with ids have come; the connection then is dropped.
std::vector<SseFrame> read_some(Conn& c, std::size_t n) {
  std::string body;
  std::vector<SseFrame> got;
  for (;;) {
    const std::string chunk = c.next_chunk();
    if (chunk.empty()) break;
    body += chunk;
    got = frames_of(body);
    std::size_t with_id = 0;
    for (const auto& f : got) with_id += f.id.empty() ? 0 : 1;
    if (with_id >= n) break;
  }
  return got;
}

TEST(LangGraphStream, ARejoinedStreamMissesNothingAndRepeatsNothing) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  std::vector<SseFrame> first;
  std::string location, run;
  {
    Conn c(s.port);
    ASSERT_TRUE(c.request("POST", "/threads/" + t + "/runs/stream",
                          R"({"assistant_id": "ticks", "stream_mode": ["values", "updates"],
                              "stream_resumable": true})"));
    Reply head;
    ASSERT_TRUE(c.read_head(head));
    ASSERT_EQ(head.status, 200);
    location = head.header("location");
    run = head.header("content-location").substr(("/threads/" + t + "/runs/").size());
    EXPECT_EQ(location, "/threads/" + t + "/runs/" + run + "/stream?stream_mode=values&" +
                            "stream_mode=updates");
    first = read_some(c, 3);
  }  // cut: the run goes on (on_disconnect defaults to continue)
  ASSERT_GE(first.size(), 4u);
  EXPECT_EQ(first[0].event, "metadata");
  const std::string last = first.back().id;
  auto rest = call(s.port, "GET", location, {}, "Last-Event-ID: " + last + "\r\n");
  ASSERT_EQ(rest.status, 200) << rest.body;
  EXPECT_EQ(rest.header("content-type"), "text/event-stream");
  const auto tail = frames_of(rest.body);
  ASSERT_FALSE(tail.empty());
  EXPECT_NE(tail[0].event, "metadata");  // a continuation, not a new stream

  // The whole stream again, now that the run ended: the cut one and its rest, exactly.
  auto whole = call(s.port, "GET", location);
  auto all = frames_of(whole.body);
  ASSERT_EQ(all.size(), first.size() + tail.size()) << whole.body;
  std::vector<SseFrame> joined = first;
  joined.insert(joined.end(), tail.begin(), tail.end());
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].id, joined[i].id) << i;
    EXPECT_EQ(all[i].event, joined[i].event) << i;
    if (all[i].event != "metadata") EXPECT_EQ(all[i].data, joined[i].data) << i;
  }
  EXPECT_EQ(json::parse(all.back().data).at("n"), 4);

  // Other modes asked on a rejoin are made from the same steps.
  auto upd = call(s.port, "GET", "/threads/" + t + "/runs/" + run + "/stream?stream_mode=updates");
  EXPECT_EQ(of_event(frames_of(upd.body), "updates").size(), of_event(all, "updates").size());
}

// The ids in Location and Content-Location are percent-encoded: a thread id with a space, '?',
// '#', '/' or non-ASCII bytes stays one segment, so the SDKs' reconnect reaches its run.
TEST(LangGraphStream, WhereToReconnectIsAUrlForAnyThreadId) {
  auto s = start(lg_config());
  const std::string t = "a b?c#d/\xc3\xa9";
  auto made = call(s.port, "POST", "/threads", json::serialize(json::object{{"thread_id", t}}));
  ASSERT_EQ(made.status, 200) << made.body;
  const std::string enc = "a%20b%3Fc%23d%2F%C3%A9";
  auto streamed = call(s.port, "POST", "/threads/" + enc + "/runs/stream",
                       R"({"assistant_id": "steps", "input": {"topic": "x"}})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::string where = streamed.header("content-location");
  ASSERT_EQ(where.rfind("/threads/" + enc + "/runs/r-", 0), 0u) << where;
  EXPECT_EQ(streamed.header("location"), where + "/stream?stream_mode=values");
  auto again = call(s.port, "GET", streamed.header("location"));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(frames_of(again.body).size(), frames_of(streamed.body).size());
  EXPECT_EQ(call(s.port, "GET", where).status, 200);
}

// A run without input writes no input checkpoint: its first step's update still says which
// node ran (the graph's entry), as every later step's does.
TEST(LangGraphStream, ARunWithoutInputStreamsItsFirstStepsUpdate) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  auto r = call(s.port, "POST", "/threads/" + t + "/runs/stream",
                R"({"assistant_id": "ticks", "input": {}, "stream_mode": ["updates"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto ups = of_event(frames_of(r.body), "updates");
  ASSERT_FALSE(ups.empty()) << r.body;
  EXPECT_TRUE(json::parse(ups[0].data).as_object().contains("nap")) << ups[0].data;
  auto again = call(s.port, "GET", r.header("location"));
  EXPECT_EQ(of_event(frames_of(again.body), "updates").size(), ups.size());
}

TEST(LangGraphStream, ARejoinSaysWhatIsWrongWithIt) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  auto done = call(s.port, "POST", "/threads/" + t + "/runs/wait", R"({"assistant_id": "steps"})");
  ASSERT_EQ(done.status, 200);
  auto runs = body_json(call(s.port, "GET", "/threads/" + t + "/runs"));
  const std::string run(runs.at(0).at("run_id").as_string());
  const std::string path = "/threads/" + t + "/runs/" + run + "/stream";

  auto garbage = call(s.port, "GET", path, {}, "Last-Event-ID: garbage\r\n");
  EXPECT_EQ(garbage.status, 400);
  EXPECT_EQ(detail(garbage),
            "Last-Event-ID 'garbage' is not an event id of this API (\"<checkpoint_id>:<n>\", that "
            "with \";<message id>=<bytes>\" for each message being generated, or \"end\")");
  auto unknown =
      call(s.port, "GET", path, {}, "Last-Event-ID: 000000000001-00000000000000abcd:0\r\n");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(detail(unknown),
            "Last-Event-ID '000000000001-00000000000000abcd:0' is not an event "
            "of run " +
                run);
  auto tools = call(s.port, "GET", path + "?stream_mode=tools");
  EXPECT_EQ(tools.status, 501);
  EXPECT_EQ(detail(tools),
            "GET /threads/{thread_id}/runs/{run_id}/stream: 'stream_mode' 'tools' is not "
            "supported by weir yet (docs/langgraph-api.md)");
  auto bogus = call(s.port, "GET", path + "?stream_mode=values&stream_mode=colours");
  EXPECT_EQ(bogus.status, 422);
  const std::string other = new_thread(s.port);
  auto elsewhere = call(s.port, "GET", "/threads/" + other + "/runs/" + run + "/stream");
  EXPECT_EQ(elsewhere.status, 404);
  EXPECT_EQ(detail(elsewhere), "Run " + run + " not found on thread " + other);
  // The whole of a finished run, from the start: metadata first, values of every step; the
  // same after a later run on the thread (its steps are passed over).
  auto whole = frames_of(call(s.port, "GET", path).body);
  ASSERT_GE(whole.size(), 4u);
  EXPECT_EQ(whole[0].event, "metadata");
  EXPECT_EQ(json::parse(whole.back().data).at("done"), true);
  ASSERT_EQ(call(s.port, "POST", "/threads/" + t + "/runs/wait",
                 R"({"assistant_id": "steps", "input": {"topic": "later"}})")
                .status,
            200);
  auto again = frames_of(call(s.port, "GET", path).body);
  ASSERT_EQ(again.size(), whole.size());
  for (std::size_t i = 1; i < whole.size(); ++i) EXPECT_EQ(again[i].data, whole[i].data) << i;
}

TEST(LangGraphStream, AThreadsStreamCarriesEveryRunStartedOnIt) {
  auto s = start(lg_config());
  const std::string t = new_thread(s.port);
  Conn c(s.port);
  ASSERT_TRUE(c.request("GET", "/threads/" + t + "/stream?stream_mode=updates"));
  Reply head;
  ASSERT_TRUE(c.read_head(head));
  ASSERT_EQ(head.status, 200);
  EXPECT_EQ(head.header("content-type"), "text/event-stream");
  std::vector<std::string> runs;
  for (const char* topic : {"a", "b"}) {
    auto r =
        call(s.port, "POST", "/threads/" + t + "/runs/wait",
             std::string(R"({"assistant_id": "steps", "input": {"topic": ")") + topic + R"("}})");
    ASSERT_EQ(r.status, 200) << r.body;
    runs.push_back(r.header("content-location").substr(("/threads/" + t + "/runs/").size()));
  }
  // Two runs: each its metadata, then its three nodes' updates.
  std::string body;
  std::vector<SseFrame> got;
  while (of_event(got, "updates").size() < 6) {
    const std::string chunk = c.next_chunk();
    ASSERT_FALSE(chunk.empty()) << body;
    body += chunk;
    got = frames_of(body);
  }
  const auto meta = of_event(got, "metadata");
  ASSERT_EQ(meta.size(), 2u) << body;
  EXPECT_EQ(json::parse(meta[0].data).at("run_id"), json::value(runs[0]));
  EXPECT_EQ(json::parse(meta[1].data).at("run_id"), json::value(runs[1]));
  const auto upd = of_event(got, "updates");
  EXPECT_EQ(json::serialize(json::parse(upd[0].data)), R"({"first":{"seen":["first a"]}})");
  EXPECT_EQ(json::serialize(json::parse(upd[3].data)), R"({"first":{"seen":["first b"]}})");
  EXPECT_EQ(call(s.port, "GET", "/threads/no-such-thread/stream").status, 404);
}

// POST /threads/{t}/runs/stream of `talk` with one question, in messages-tuple and values.
Reply stream_talk(std::uint16_t port, const std::string& t) {
  return call(port, "POST", "/threads/" + t + "/runs/stream", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Tell me a story"}]},
      "stream_mode": ["messages-tuple", "values"]})");
}

TEST(LangGraphStream, AnLlmNodesReplyStreamsTokenByToken) {
  ServeConfig c;
  c.workflows = talk_workflows(tiny_model("talk"), 24);
  auto s = start(c);
  const std::string t = new_thread(s.port);
  auto r = stream_talk(s.port, t);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto frames = frames_of(r.body);
  // values (the input), the reply's pieces as they were generated, values (with the reply).
  std::string text, id;
  std::size_t pieces = 0, first_piece = 0, last_piece = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].event != "messages") continue;
    const auto d = json::parse(frames[i].data);
    EXPECT_EQ(d.at(0).at("type"), "AIMessageChunk") << frames[i].data;  // never whole again
    EXPECT_EQ(d.at(1).at("langgraph_node"), "answer");
    if (id.empty()) id = d.at(0).at("id").as_string();
    EXPECT_EQ(d.at(0).at("id"), json::value(id));
    text += d.at(0).at("content").as_string();
    if (pieces++ == 0) first_piece = i;
    last_piece = i;
  }
  ASSERT_GE(pieces, 2u) << r.body;
  const auto values = of_event(frames, "values");
  ASSERT_EQ(values.size(), 2u) << r.body;
  const auto reply = json::parse(values.back().data).at("messages").at(1);
  EXPECT_EQ(reply.at("type"), "ai");
  EXPECT_EQ(reply.at("id"), json::value(id));
  EXPECT_EQ(reply.at("content"), json::value(text));
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(frames[first_piece - 1].event, "values");  // after the input's state
  EXPECT_EQ(frames[last_piece + 1].event, "values");   // before the step's

  // The older `messages` mode: the text so far in each partial, then the message complete.
  auto old = call(s.port, "POST", "/runs/stream", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Tell me a story"}]},
      "stream_mode": "messages"})");
  const auto old_frames = frames_of(old.body);
  ASSERT_EQ(of_event(old_frames, "messages/metadata").size(), 1u) << old.body;  // once
  // One partial per message per wake-up (a fast reply has one). A stateless run's stream
  // watches the run once it started: a reply generated whole before that, on a loaded machine,
  // comes whole (no partial), never twice.
  const auto partial = of_event(old_frames, "messages/partial");
  std::string so_far;
  for (const auto& p : partial) {
    const std::string now(json::parse(p.data).at(0).at("content").as_string());
    EXPECT_EQ(now.rfind(so_far, 0), 0u) << so_far << " then " << now;
    so_far = now;
  }
  const auto complete = of_event(old_frames, "messages/complete");
  ASSERT_EQ(complete.size(), 1u);
  const json::value whole = json::parse(complete[0].data).at(0).at("content");
  if (!partial.empty()) EXPECT_EQ(whole, json::value(so_far));
  EXPECT_EQ(whole, json::value(text));  // greedy: the same reply
  fs::remove_all(*c.workflows);
}

// The `events` mode: LangChain's astream_events v2 events (what RemoteGraph.streamEvents
// reads): the graph's run and each node's begin and end, the reply's tokens as
// on_chat_model_stream chunks between them, joining into the stored message.
TEST(LangGraphStream, TheEventsModeIsLangChainsStreamEvents) {
  ServeConfig c;
  c.workflows = talk_workflows(slow_model(), 200);  // generating while the stream watches
  auto s = start(c);
  const std::string t = new_thread(s.port);
  auto r = call(s.port, "POST", "/threads/" + t + "/runs/stream", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Tell me a story"}]},
      "stream_mode": "events"})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> seq;
  std::string text, message_id, run_id;
  json::value node_end, graph_end;
  for (const auto& f : frames_of(r.body)) {
    if (f.event == "metadata") {
      run_id = json::parse(f.data).at("run_id").as_string();
      continue;
    }
    ASSERT_EQ(f.event, "events") << r.body;
    const json::value e = json::parse(f.data);
    const std::string kind(e.at("event").as_string()), name(e.at("name").as_string());
    if (kind == "on_chat_model_stream") {
      const auto& chunk = e.at("data").at("chunk");
      EXPECT_EQ(chunk.at("type"), "AIMessageChunk");
      message_id = chunk.at("id").as_string();
      text += chunk.at("content").as_string();
      EXPECT_EQ(e.at("metadata").at("langgraph_node"), "answer");
      EXPECT_EQ(e.at("parent_ids"), json::array{json::value(run_id)});
      if (!seq.empty() && seq.back() == "on_chat_model_stream answer") continue;
    }
    if (kind == "on_chain_end" && name == "answer") node_end = e;
    if (kind == "on_chain_end" && name == "LangGraph") graph_end = e;
    if (kind == "on_chain_start" && name == "LangGraph") {
      EXPECT_EQ(e.at("run_id"), json::value(run_id));
      EXPECT_EQ(e.at("data").at("input").at("messages").at(0).at("type"), "human");
    }
    seq.push_back(kind + " " + name);
  }
  EXPECT_EQ(seq, (std::vector<std::string>{"on_chain_start LangGraph", "on_chain_start answer",
                                           "on_chat_model_stream answer", "on_chain_end answer",
                                           "on_chain_end LangGraph"}))
      << r.body;
  ASSERT_TRUE(node_end.is_object()) << r.body;
  const auto& reply = node_end.at("data").at("output").at("messages").at(0);
  EXPECT_EQ(reply.at("type"), "ai");
  EXPECT_EQ(reply.at("id"), json::value(message_id));
  EXPECT_EQ(reply.at("content"), json::value(text)) << "the tokens join into the stored reply";
  ASSERT_TRUE(graph_end.is_object()) << r.body;
  EXPECT_EQ(graph_end.at("data").at("output").at("messages").as_array().size(), 2u);
  fs::remove_all(*c.workflows);
}

// The official JS client's UI helpers join the pieces (MessageTupleManager, as useStream and
// Agent Chat UI do) into the message the thread stored.
TEST(LangGraphStream, TheSdksUiHelpersJoinThePiecesIntoTheStoredMessage) {
  if (auto why = no_js_client(); !why.empty()) GTEST_SKIP() << why;
  ServeConfig c;
  c.workflows = talk_workflows(tiny_model("talk"), 24);
  auto s = start(c);
  const json::value v = run_client_script("token_flows.mjs", {loopback(s.port)});
  ASSERT_TRUE(v.is_object());
  const std::string all = json::serialize(v);
  EXPECT_FALSE(v.as_object().contains("thrown")) << all;
  EXPECT_GE(v.at("chunks").as_int64(), 2) << all;
  EXPECT_EQ(v.at("joined_type"), "ai") << all;
  EXPECT_EQ(v.at("joined_id"), v.at("stored_id")) << all;
  EXPECT_EQ(v.at("same_text"), true) << all;
  EXPECT_EQ(v.at("values_text_same"), true) << all;
  fs::remove_all(*c.workflows);
}

// A stream that joins while the reply is being generated gets the text so far as its first
// piece, then the rest: the pieces still make the whole message.
TEST(LangGraphStream, AStreamJoinedMidReplyGetsTheTextSoFarFirst) {
  ServeConfig c;
  c.workflows = talk_workflows(slow_model(), 1200);  // ~3 KB: stays inline
  auto s = start(c);
  const std::string t = new_thread(s.port);
  auto started = call(s.port, "POST", "/threads/" + t + "/runs", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Tell me a story"}]}})");
  ASSERT_EQ(started.status, 200) << started.body;
  const std::string run(body_json(started).at("run_id").as_string());
  // Wait until the reply has begun (the run's thread shows nothing until its step ends).
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  auto r =
      call(s.port, "GET", "/threads/" + t + "/runs/" + run + "/stream?stream_mode=messages-tuple");
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text;
  std::size_t pieces = 0;
  for (const auto& f : of_event(frames_of(r.body), "messages")) {
    const auto d = json::parse(f.data);
    EXPECT_EQ(d.at(0).at("type"), "AIMessageChunk") << f.data;
    text += d.at(0).at("content").as_string();
    ++pieces;
  }
  EXPECT_GE(pieces, 2u) << r.body;
  auto state = call(s.port, "GET", "/threads/" + t + "/state");
  const json::value values = body_json(state).at("values");
  const auto& messages = values.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u) << state.body;
  EXPECT_EQ(messages[1].at("content"), json::value(text));
  fs::remove_all(*c.workflows);
}

// A cancel stops an llm node in the middle of its reply (its generation is cancelled, its KV
// blocks freed), not after it: the run ends interrupted and the thread stores no reply.
TEST(LangGraphStream, ACancelStopsAReplyBeingGenerated) {
  ServeConfig c;
  c.workflows = talk_workflows(slow_model(), 3000);  // seconds of generation
  auto s = start(c);
  const std::string t = new_thread(s.port);
  auto started = call(s.port, "POST", "/threads/" + t + "/runs", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Tell me a story"}]}})");
  ASSERT_EQ(started.status, 200) << started.body;
  const std::string run(body_json(started).at("run_id").as_string());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // generating by now
  auto cancelled = call(s.port, "POST", "/threads/" + t + "/runs/" + run + "/cancel?wait=1", "{}");
  EXPECT_EQ(cancelled.status, 204) << cancelled.body;
  const json::value rec = body_json(call(s.port, "GET", "/threads/" + t + "/runs/" + run));
  EXPECT_EQ(rec.at("status"), "interrupted") << json::serialize(rec);
  const json::value values =
      body_json(call(s.port, "GET", "/threads/" + t + "/state")).at("values");
  EXPECT_EQ(values.at("messages").as_array().size(), 1u)
      << "no reply stored: " << json::serialize(values);
  fs::remove_all(*c.workflows);
}

// A stream whose run a newer one rolled back (cancelled) ends with an error event saying so, not
// cut in the middle of a reply without a word.
TEST(LangGraphStream, AStreamWhoseRunIsRolledBackSaysSo) {
  ServeConfig c;
  c.workflows = talk_workflows(slow_model(), 3000);
  auto s = start(c);
  const std::string t = new_thread(s.port);
  Conn conn(s.port);
  ASSERT_TRUE(conn.request("POST", "/threads/" + t + "/runs/stream", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Tell me a story"}]},
      "stream_mode": ["messages-tuple", "values"]})"));
  Reply head;
  ASSERT_TRUE(conn.read_head(head));
  ASSERT_EQ(head.status, 200);
  std::string body;
  while (of_event(frames_of(body), "messages").empty()) {  // the reply has begun
    const std::string chunk = conn.next_chunk();
    ASSERT_FALSE(chunk.empty()) << body;
    body += chunk;
  }
  auto rolled = call(s.port, "POST", "/threads/" + t + "/runs", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Another"}]},
      "multitask_strategy": "rollback"})");
  ASSERT_EQ(rolled.status, 200) << rolled.body;
  for (std::string chunk = conn.next_chunk(); !chunk.empty(); chunk = conn.next_chunk())
    body += chunk;
  const auto frames = frames_of(body);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().event, "error") << body;
  const json::value last = json::parse(frames.back().data);
  EXPECT_EQ(last.at("error"), "cancelled") << body;
  fs::remove_all(*c.workflows);
}

// A long message among short ones (a list over the inline limit, given or written) stays a
// message: each item over the limit is stored on its own, not the list as one item.
TEST(LangGraphStream, ALongMessageAmongShortOnesStaysAMessage) {
  ServeConfig c;
  c.workflows = talk_workflows(tiny_model("talk"), 8);
  auto s = start(c);
  const std::string t = new_thread(s.port);
  const std::string long_text(6000, 'z');
  auto r = call(s.port, "POST", "/threads/" + t + "/runs/wait",
                R"({"assistant_id": "talk", "input": {"messages": [)"
                R"({"type": "human", "content": "hi"}, {"type": "human", "content": ")" +
                    long_text + R"("}]}})");
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 400);
  // The llm node reads the long message as a message (the small model's context refuses it):
  // the thread's state holds both as messages.
  EXPECT_NE(r.body.find("the prompt is"), std::string::npos) << r.body.substr(0, 400);
  const json::value v = body_json(call(s.port, "GET", "/threads/" + t + "/state")).at("values");
  const auto& messages = v.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u) << json::serialize(v).substr(0, 400);
  EXPECT_EQ(messages[0].at("content"), "hi");
  EXPECT_EQ(messages[1].at("type"), "human");
  EXPECT_EQ(messages[1].at("content"), json::value(long_text));
  fs::remove_all(*c.workflows);
}

// Pieces of an attempt older than the run's (a paused worker back after another took the run
// over, still sending) are dropped; the current attempt's go out.
TEST(LangGraphStream, PiecesOfAnAttemptThatLostTheRunAreDropped) {
  LangGraphStream st;
  st.modes = {"messages-tuple"};
  st.run_id = "r-1";
  st.attempt = 2;
  st.last_step = 0;
  auto piece = [](std::string run, std::string id, std::string text) {
    graph::MessageText t;
    t.run_id = std::move(run);
    t.node = "answer";
    t.step = 1;
    t.message_id = std::move(id);
    t.text = std::move(text);
    return t;
  };
  std::vector<graph::MessageText> pieces{piece("r-1.1", "msg-old", "stale"),
                                         piece("r-1.2", "msg-new", "fresh")};
  const std::string out = langgraph_text_events(std::move(pieces), st);
  EXPECT_EQ(out.find("stale"), std::string::npos) << out;
  EXPECT_NE(out.find("fresh"), std::string::npos) << out;
}

// A piece of a subgraph node's reply (its node "outer/inner") names the node "inner" under the
// namespace of its call; with stream_subgraphs its event is "messages|<the subgraph's ns>", as
// LangGraph's (the SDK's useStream reads both).
TEST(LangGraphStream, APieceOfASubgraphNodeNamesItsNamespace) {
  for (const bool subgraphs : {false, true}) {
    LangGraphStream st;
    st.modes = {"messages-tuple"};
    st.run_id = "r-1";
    st.last_step = 0;
    st.last_checkpoint = "c0";
    st.subgraphs = subgraphs;
    graph::MessageText t;
    t.run_id = "r-1";
    t.node = "outer/inner";
    t.step = 1;
    t.message_id = "msg-1";
    t.text = "Once";
    const auto frames = frames_of(langgraph_text_events({t}, st));
    ASSERT_EQ(frames.size(), 1u);
    const std::string outer = "outer:" + sha256_hex("c0/outer").substr(0, 32);
    EXPECT_EQ(frames[0].event, subgraphs ? "messages|" + outer : "messages");
    const json::value meta = json::parse(frames[0].data).at(1);
    EXPECT_EQ(meta.at("langgraph_node"), "inner");
    const std::string ns(meta.at("langgraph_checkpoint_ns").as_string());
    EXPECT_EQ(ns.substr(0, outer.size() + 7), outer + "|inner:") << ns;
  }
}

// A messages window that evicts a turn and puts its summary first: the step's update holds the
// summary and the new reply, not the turns that stayed, and no message is streamed twice.
TEST(LangGraphStream, AWindowsEvictionSendsNoMessageAgain) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("weir-win-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json::object llm{{"kind", "llm"},
                   {"model", "small"},
                   {"prompt", "Once"},
                   {"messages", "messages"},
                   {"max_tokens", 8}};
  json::object wf{
      {"name", "win"},
      {"models", json::object{{"small", json::object{{"path", tiny_model("win").string()}}}}},
      {"state",
       json::object{{"messages", json::object{{"reducer", "messages"},
                                              {"window", json::object{{"max_messages", 2}}}}}}},
      {"nodes", json::object{{"gen", llm}, {"gen2", llm}}},
      {"edges", json::array{json::object{{"from", "START"}, {"to", "gen"}},
                            json::object{{"from", "gen"}, {"to", "gen2"}},
                            json::object{{"from", "gen2"}, {"to", "END"}}}}};
  std::ofstream(dir / "win.json") << json::serialize(wf);
  ServeConfig c;
  c.workflows = dir;
  auto s = start(c);
  const std::string t = new_thread(s.port);
  auto r = call(s.port, "POST", "/threads/" + t + "/runs/stream", R"({"assistant_id": "win",
      "input": {"messages": [{"type": "human", "content": "Hi"}]},
      "stream_mode": ["messages-tuple", "updates"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto frames = frames_of(r.body);
  std::map<std::string, std::string> whole;  // id -> node, for messages sent whole
  std::set<std::string> pieced;
  for (const auto& f : of_event(frames, "messages")) {
    const auto d = json::parse(f.data);
    const std::string id(d.at(0).at("id").as_string());
    if (d.at(0).at("type") == "AIMessageChunk") {
      pieced.insert(id);
      continue;
    }
    EXPECT_FALSE(whole.count(id)) << "sent whole twice: " << id << "\n" << r.body;
    EXPECT_FALSE(pieced.count(id)) << "streamed, then sent whole again: " << id << "\n" << r.body;
    whole[id] = d.at(1).at("langgraph_node").as_string();
  }
  EXPECT_EQ(pieced.size(), 2u) << r.body;  // the two replies
  const auto updates = of_event(frames, "updates");
  ASSERT_EQ(updates.size(), 2u) << r.body;
  const json::value second = json::parse(updates[1].data);
  const auto& added = second.at("gen2").at("messages").as_array();
  ASSERT_EQ(added.size(), 2u) << updates[1].data;
  EXPECT_EQ(added[0].at("type"), "system") << "the window's summary";
  EXPECT_EQ(added[1].at("type"), "ai");
  EXPECT_TRUE(pieced.count(std::string(added[1].at("id").as_string())));
  fs::remove_all(dir);
}

// A reply over the workflow's inline_limit (here 128 bytes) is moved to the artifact store in the
// thread, but clients still see a message: the state, the stream's values and its pieces agree.
TEST(LangGraphStream, AReplyOverTheInlineLimitIsStillAMessage) {
  ServeConfig c;
  c.workflows = talk_workflows(tiny_model("talk"), 200, 128);
  auto s = start(c);
  const std::string t = new_thread(s.port);
  auto r = stream_talk(s.port, t);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto frames = frames_of(r.body);
  std::string text;
  for (const auto& f : of_event(frames, "messages"))
    text += json::parse(f.data).at(0).at("content").as_string();
  ASSERT_GT(text.size(), 128u);
  const auto values = of_event(frames, "values");
  ASSERT_FALSE(values.empty());
  EXPECT_EQ(json::parse(values.back().data).at("messages").at(1).at("content"), json::value(text));
  auto state = call(s.port, "GET", "/threads/" + t + "/state");
  const json::value v = body_json(state).at("values");
  ASSERT_EQ(v.at("messages").as_array().size(), 2u) << state.body;
  EXPECT_EQ(v.at("messages").at(1).at("type"), "ai") << state.body;
  EXPECT_EQ(v.at("messages").at(1).at("content"), json::value(text));
  // The fence acted all the same: the step says it moved the reply.
  auto history = body_json(call(s.port, "POST", "/threads/" + t + "/history", R"({"limit": 1})"));
  EXPECT_EQ(history.at(0).at("metadata").at("fences").at(0).at("fence"), "artifact_offload")
      << json::serialize(history);
  fs::remove_all(*c.workflows);
}

}  // namespace
}  // namespace weir::serve
