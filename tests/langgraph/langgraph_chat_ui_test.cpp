// Agent Chat UI against `weir serve`: tests/langgraph/clients/chat_ui_flows.mjs makes the calls
// Agent Chat UI (its pages over the SDK's React hook useStream) makes, in its order and with its
// bodies, and computes what the page shows with the SDK's own helpers; this test checks what a
// user would see: the messages, the interrupt and its answers, the branch after an edit, a
// cancelled run and a rejoined one. samples/workflows/human_review.json (interrupt, resume) and
// tests/langgraph/workflows/chat.json (messages, tool calls). Skipped, saying why, without node
// or the SDK (tests/langgraph/clients/setup installs it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "langgraph_fixture.hpp"

namespace weir::serve {
namespace {

std::vector<std::string> strings(const json::value& a) {
  std::vector<std::string> out;
  for (const auto& x : a.as_array()) out.emplace_back(x.as_string());
  return out;
}

// The shown messages as "type:text" (an AI message's tool calls as "ai:->name").
std::vector<std::string> shown(const json::value& view) {
  std::vector<std::string> out;
  for (const auto& m : view.at("messages").as_array()) {
    std::string s = std::string(m.at("type").as_string()) + ":";
    if (const auto* t = m.as_object().if_contains("text"); t && t->is_string()) s += t->as_string();
    if (const auto* c = m.as_object().if_contains("tool_calls"); c && c->is_array())
      for (const auto& t : c->as_array()) s += "->" + std::string(t.at("name").as_string());
    out.push_back(std::move(s));
  }
  return out;
}

// A call's JSON body, or null when it sent none.
const json::value* body_of(const json::value& call) {
  const auto* b = call.as_object().if_contains("body");
  return b && b->is_object() ? b : nullptr;
}

// A call as the test compares it: method and path, the thread and run ids as {t} and {r}.
std::string call_of(const json::value& c) {
  std::string path(c.at("path").as_string());
  for (const char* what : {"/threads/", "/runs/"}) {
    const std::string w = what;
    auto at = path.find(w);
    if (at == std::string::npos) continue;
    auto from = at + w.size(), to = path.find_first_of("/?", from);
    const std::string id =
        path.substr(from, to == std::string::npos ? std::string::npos : to - from);
    if (id != "search" && id != "stream" && !id.empty())
      path.replace(from, id.size(), w == "/threads/" ? "{t}" : "{r}");
  }
  return std::string(c.at("method").as_string()) + " " + path;
}

TEST(LangGraphChatUi, AgentChatUisCallsShowTheConversationTheInterruptAndTheBranch) {
  const std::string dir = std::string(WEIR_SOURCE_DIR) + "/tests/langgraph/clients";
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !fs::exists(dir + "/node_modules/@langchain/langgraph-sdk"))
    GTEST_SKIP() << "node or tests/langgraph/clients/node_modules is missing (run "
                    "tests/langgraph/clients/setup, which needs npm and its registry)";
  ServeConfig rc;
  rc.workflows = fs::path(WEIR_SOURCE_DIR) / "samples/workflows";
  auto review = start(rc);
  ServeConfig cc;
  cc.workflows = fs::path(WEIR_SOURCE_DIR) / "tests/langgraph/workflows";
  auto chat = start(cc);
  // samples/crews on a random model with room for the crew's prompts (its text is noise; the
  // crew's mechanics are real: loops, tools, artifacts, messages).
  ServeConfig crc;
  crc.workflows = fs::path(WEIR_SOURCE_DIR) / "samples/crews";
  crc.models.push_back({"crew", tiny_model("crew", 4096)});
  crc.kv_cache_bytes = 8u << 20;
  auto crew = start(crc);
  const json::value v = run_client_script(
      "chat_ui_flows.mjs", {loopback(review.port), loopback(chat.port), loopback(crew.port)});
  ASSERT_TRUE(v.is_object());
  const std::string all = json::serialize(v);
  for (const auto& kv : v.as_object())
    ASSERT_FALSE(kv.value().as_object().contains("thrown"))
        << kv.key() << ": " << json::serialize(kv.value());

  // A conversation: the page connects, lists no thread, sends, shows the answer as it streams.
  const auto& c = v.at("chat");
  EXPECT_EQ(c.at("info"), true);
  EXPECT_EQ(c.at("before_has_none"), true);
  EXPECT_EQ(c.at("listed"), true) << "the new thread is in the list (metadata graph_id)";
  const auto first = strings(c.at("first").at("names"));
  EXPECT_EQ(first.front(), "metadata");
  EXPECT_EQ(std::count(first.begin(), first.end(), "messages"), 3) << all;
  EXPECT_EQ(first.back(), "values");
  const auto& tuples = c.at("first").at("tuples").as_array();
  ASSERT_EQ(tuples.size(), 3u);
  EXPECT_EQ(tuples[0].at("data").at(0).at("type"), "ai");
  EXPECT_EQ(tuples[0].at("data").at(1).at("langgraph_node"), "call");
  EXPECT_EQ(tuples[1].at("data").at(0).at("type"), "tool");
  EXPECT_EQ(tuples[2].at("data").at(0).at("content"), "It is 42.");
  EXPECT_EQ(tuples[2].at("data").at(1).at("langgraph_node"), "reply");
  using V = std::vector<std::string>;
  const V one = {"human:what is 6*7?", "ai:->calculator", "tool:42", "ai:It is 42."};
  EXPECT_EQ(shown(c.at("after_first")), one);
  EXPECT_EQ(c.at("after_first").at("messages").at(1).at("tool_calls").at(0).at("args"),
            json::parse(R"({"expression":"6*7"})"));
  V two = one;
  for (const auto& s : {"human:and 7*6?", "ai:->calculator", "tool:42", "ai:It is 42."})
    two.push_back(s);
  EXPECT_EQ(shown(c.at("after_second")), two);

  // The calls and bodies: the UI's order, its stream modes, resumable, the id it gave.
  const auto& calls = c.at("calls").as_array();
  ASSERT_GE(calls.size(), 7u);
  V seq;
  for (std::size_t i = 0; i < 7; ++i) seq.push_back(call_of(calls[i]));
  EXPECT_EQ(
      seq, (V{"GET /info", "POST /threads/search", "POST /threads", "POST /threads/{t}/runs/stream",
              "GET /threads/{t}/runs/{r}", "POST /threads/{t}/history", "POST /threads/search"}))
      << all;
  ASSERT_TRUE(body_of(calls[1]) && body_of(calls[3])) << all;
  EXPECT_EQ(calls[1].at("body").at("metadata"), json::parse(R"({"graph_id":"chat"})"));
  const auto& body = calls[3].at("body");
  EXPECT_EQ(body.at("stream_mode"), json::parse(R"(["values","messages-tuple","custom"])"));
  EXPECT_EQ(body.at("stream_resumable"), true);
  EXPECT_EQ(body.at("stream_subgraphs"), true);
  EXPECT_EQ(body.at("on_disconnect"), "continue");
  EXPECT_EQ(c.at("after_first").at("messages").at(0).at("id"),
            body.at("input").at("messages").at(0).at("id"))
      << "the human message keeps the id the UI gave it";

  // Edit the second question: a branch from its parent checkpoint, and a switcher of 2.
  ASSERT_TRUE(c.at("edit_parent_checkpoint").is_object()) << all;
  V edited = one;
  for (const auto& s : {"human:and 8*5?", "ai:->calculator", "tool:42", "ai:It is 42."})
    edited.push_back(s);
  EXPECT_EQ(shown(c.at("edited")), edited);
  EXPECT_EQ(c.at("edited").at("branches").at(4), 2) << all;
  EXPECT_EQ(shown(c.at("switched")), two) << "the other branch shows the original question";
  for (const auto& call : calls) {
    if (const auto* b = body_of(call); b && b->as_object().contains("checkpoint")) {
      EXPECT_FALSE(b->at("checkpoint").as_object().contains("thread_id"));
    }
  }

  // Edit the first question: its parent is the root state (history's last entry, step -1, as
  // LangGraph's input checkpoint), so the edit branches from an empty conversation.
  EXPECT_EQ(c.at("first_parent_checkpoint").at("checkpoint_id"), "root") << all;
  EXPECT_EQ(shown(c.at("edited_first")),
            (V{"human:what is 2*2?", "ai:->calculator", "tool:42", "ai:It is 42."}));
  // Regenerate the last answer from its parent checkpoint: only the answer's step runs again
  // (each message written by a node has an id of its own, so the hook's message map finds this
  // branch's checkpoint, not an older branch's equal answer), and the answer gets a switcher of
  // two.
  const auto& regen = c.at("regenerated");
  EXPECT_EQ(shown(regen), shown(c.at("edited_first")));
  EXPECT_EQ(json::serialize(c.at("regen_names")), R"(["metadata","messages","values"])") << all;
  EXPECT_EQ(regen.at("branches").at(3), 2) << all;
  EXPECT_NE(regen.at("messages").at(3).at("id"), c.at("edited_first").at("messages").at(3).at("id"))
      << "a regenerated answer is a message of its own";
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(regen.at("messages").at(i).at("id"),
              c.at("edited_first").at("messages").at(i).at("id"));
  // The first question's switcher: the page reads the newest 10 checkpoints (the SDK's
  // fetchStateHistory: true), which by now no longer hold the original branch's first step, so
  // it shows none, as it would against LangGraph's server; the whole history shows both.
  EXPECT_GT(c.at("history_length").as_int64(), 10) << all;
  EXPECT_EQ(c.at("first_branches_whole"), 2) << all;

  // human_review: the interrupt as the page shows it, answered twice (a note, then approve).
  const auto& r = v.at("review");
  EXPECT_EQ(r.at("info"), true);
  // On purpose: weir checks input against the workflow's input list; the UI's text box sends
  // `messages`, which human_review does not take (LangGraph would drop the unknown key).
  EXPECT_EQ(r.at("typed").at("status"), 422) << all;
  const auto& ask = r.at("streamed").at("interrupt");
  ASSERT_EQ(ask.as_array().size(), 1u) << all;
  EXPECT_EQ(ask.at(0).at("question"), "approve, or write what to change");
  EXPECT_NE(std::string(ask.at(0).at("draft").as_string()).find("KV caches"), std::string::npos);
  EXPECT_EQ(r.at("paused").at("interrupt"), ask) << "after the history read, from the tasks";
  EXPECT_EQ(r.at("thread_status"), "interrupted");
  const auto& again = r.at("again").at("interrupt");
  ASSERT_EQ(again.as_array().size(), 1u) << all;
  EXPECT_NE(std::string(again.at(0).at("draft").as_string()).find("revision 1"), std::string::npos);
  const auto& done = r.at("done");
  EXPECT_TRUE(done.at("interrupt").as_array().empty());
  EXPECT_EQ(done.at("values").at("published"), true);
  EXPECT_EQ(done.at("values").at("verdict"), "approve");
  EXPECT_EQ(done.at("values").at("notes"), json::parse(R"(["shorter, please"])"));
  EXPECT_EQ(r.at("done_status"), "idle");
  bool resumed = false;
  for (const auto& call : r.at("calls").as_array()) {
    const auto* b = body_of(call);
    if (!b || !b->as_object().contains("command")) continue;
    resumed = true;
    EXPECT_EQ(b->at("input"), json::object{});
    EXPECT_EQ(b->at("on_disconnect"), "cancel");
  }
  EXPECT_TRUE(resumed);

  // Cancel: the UI's button drops the stream and the resumable run goes on; the hook's stop
  // with reconnectOnMount cancels it; a rejoin from the start sees every values chunk.
  const auto& x = v.at("cancel");
  EXPECT_EQ(strings(x.at("cut_names")), (V{"metadata", "values"}));
  EXPECT_EQ(x.at("kept_status"), "success");
  const auto joined = strings(x.at("joined_names"));
  EXPECT_GE(joined.size(), 5u) << all;
  EXPECT_EQ(x.at("joined_last").at("n"), 4);
  EXPECT_EQ(x.at("cancelled_status"), "interrupted");
  EXPECT_EQ(x.at("thread_status"), "idle");
  bool rejoined = false;
  for (const auto& call : x.at("calls").as_array())
    if (call.as_object().contains("last_event_id") && call.at("last_event_id") == "-1")
      rejoined = call_of(call).starts_with("GET /threads/{t}/runs/{r}/stream");
  EXPECT_TRUE(rejoined) << all;

  // research_crew: the topic typed in the UI, each agent's answer a message, the crew's result
  // the last one; a second question runs the crew again on the thread.
  const auto& k = v.at("crew");
  EXPECT_EQ(k.at("info"), true);
  EXPECT_EQ(k.at("thread_status"), "idle") << all;
  const auto& a1 = k.at("after_first").as_array();
  ASSERT_EQ(a1.size(), 4u) << all;
  EXPECT_EQ(a1[0].at("type"), "human");
  EXPECT_EQ(a1[0].at("text"), "paged attention");
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(a1[i].at("type"), "ai") << all;
  EXPECT_EQ(json::serialize(k.at("names")),
            R"([null,"researcher","writer","reviewer",null,"researcher","writer","reviewer"])")
      << all;
  ASSERT_EQ(k.at("after_second").as_array().size(), 8u) << all;
  EXPECT_EQ(k.at("after_second").at(4).at("text"), "kv cache eviction");
  EXPECT_EQ(k.at("result"), k.at("after_second").at(7).at("text"));
  const auto& crew_tuples = k.at("tuples").as_array();
  // Each agent's answer streams as one piece as soon as its task is done, under the id the
  // message is then stored with, and is not sent again with the step.
  ASSERT_EQ(crew_tuples.size(), 3u) << all;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(crew_tuples[i].at(0).at("type"), "AIMessageChunk") << all;
    EXPECT_EQ(crew_tuples[i].at(0).at("content"), k.at("after_first").at(i + 1).at("text"));
    EXPECT_EQ(crew_tuples[i].at(0).at("id"), k.at("after_first").at(i + 1).at("id"));
    EXPECT_EQ(crew_tuples[i].at(1).at("langgraph_node"), "research_crew");
  }
  EXPECT_EQ(strings(k.at("first_names")).back(), "values");
}

}  // namespace
}  // namespace weir::serve
