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

}  // namespace weir::serve::runs_suite
