// Token by token on each backend of the run service (included by langgraph_suite.hpp): an llm
// node's reply streams to a LangGraph client as it is generated, in-process (the run's own
// text watch) and on PostgreSQL (the worker's NOTIFY weir_text, heard by the server's
// listener), and the pieces join into the message the thread stored.
#pragma once

#include "runs_api_suite.hpp"
#include "serve_fixture.hpp"

namespace weir::serve::runs_suite {

TEST_P(RunsApi, LangGraphAnLlmReplyStreamsTokenByTokenOnThisBackend) {
  // A reply of a few hundred tokens on a slow model: it takes several of the PostgreSQL
  // publisher's flush intervals, so it arrives in more than one piece there too.
  talk_workflows(slow_model(), 300, 0, dir_);
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto r = post("/threads/" + t + "/runs/stream", R"({"assistant_id": "talk",
      "input": {"messages": [{"type": "human", "content": "Tell me a story"}]},
      "stream_mode": ["messages-tuple", "values"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto frames = frames_of(r.body);
  std::string text, id;
  std::size_t pieces = 0;
  for (const auto& f : frames) {
    if (f.event != "messages") continue;
    const auto d = json::parse(f.data);
    EXPECT_EQ(d.at(0).at("type"), "AIMessageChunk") << f.data;  // never the whole message again
    if (id.empty()) id = d.at(0).at("id").as_string();
    EXPECT_EQ(d.at(0).at("id"), json::value(id));
    text += d.at(0).at("content").as_string();
    ++pieces;
  }
  EXPECT_GE(pieces, 2u) << r.body;
  std::vector<std::string> values;
  for (const auto& f : frames)
    if (f.event == "values") values.push_back(f.data);
  ASSERT_EQ(values.size(), 2u) << r.body;
  const auto reply = json::parse(values.back()).at("messages").at(1);
  EXPECT_EQ(reply.at("id"), json::value(id));
  EXPECT_EQ(reply.at("content"), json::value(text)) << "the pieces join into the stored message";
  EXPECT_GE(text.size(), 300u);  // about a byte or more a token
}

// A stream cut in the middle of a reply and rejoined with the last piece's id (the SDK's
// reconnect) goes on from the text its client has: in-process with the pieces that follow, on
// PostgreSQL with what the client lacks as one chunk with the step. Either way the pieces of
// both streams join into the stored message, nothing repeated.
TEST_P(RunsApi, LangGraphAStreamCutMidReplyRejoinsWithoutRepeatingText) {
  talk_workflows(slow_model(), 1200, 0, dir_);
  start();
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  std::string location, last, text;
  {
    testing_http::Conn conn(port_);
    ASSERT_TRUE(conn.request("POST", "/threads/" + t + "/runs/stream", R"({"assistant_id": "talk",
        "input": {"messages": [{"type": "human", "content": "Tell me a story"}]},
        "stream_mode": ["messages-tuple", "values"], "stream_resumable": true})"));
    Reply head;
    ASSERT_TRUE(conn.read_head(head));
    ASSERT_EQ(head.status, 200);
    location = head.header("location");
    std::string body;
    std::vector<testing_http::SseFrame> pieces;
    while (pieces.size() < 2) {
      const std::string chunk = conn.next_chunk();
      ASSERT_FALSE(chunk.empty()) << body;
      body += chunk;
      pieces.clear();
      for (auto& f : frames_of(body))
        if (f.event == "messages") pieces.push_back(std::move(f));
    }
    for (const auto& f : pieces) text += json::parse(f.data).at(0).at("content").as_string();
    last = pieces.back().id;
  }  // cut mid-reply: the run goes on
  // The piece's id: the step before it, and the bytes of the reply sent so far.
  ASSERT_NE(last.find(';'), std::string::npos) << last;
  EXPECT_EQ(last.substr(last.rfind('=') + 1), std::to_string(text.size())) << last;
  auto rest = get(location, "Last-Event-ID: " + last + "\r\n");
  ASSERT_EQ(rest.status, 200) << rest.body;
  const auto tail = frames_of(rest.body);
  ASSERT_FALSE(tail.empty());
  EXPECT_NE(tail[0].event, "metadata");  // a continuation
  for (const auto& f : tail)
    if (f.event == "messages") text += json::parse(f.data).at(0).at("content").as_string();
  const json::value values = json::parse(get("/threads/" + t + "/state").body).at("values");
  const auto& messages = values.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[1].at("content"), json::value(text))
      << "cut and rejoined: the whole reply once";
}

}  // namespace weir::serve::runs_suite
