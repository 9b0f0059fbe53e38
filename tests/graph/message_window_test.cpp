// Messages channels bounded by tokens or count: the system prompt stays, evicted turns go to an
// archive artifact and into a bounded rolling summary; a failing summary hook is survived.
#include <set>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::graph {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using testing::run;
using testing::run_with;

json::object msg(std::string role, std::string content) {
  return json::object{{"role", role}, {"content", content}};
}

// "turn-3" padded with dots to `width` bytes.
std::string turn_text(std::int64_t i, std::size_t width) {
  std::string s = "turn-" + std::to_string(i);
  s.resize(width, '.');
  return s;
}

// One node appending turn i (of `turns`, each `width` bytes) per superstep.
std::shared_ptr<const CompiledGraph> chat(ChannelOptions messages, int turns,
                                          std::size_t width = 10) {
  messages.reducer = ReducerKind::messages;
  StateGraph b;
  b.add_channel("messages", std::move(messages));
  b.add_channel("i", {.default_value = 0});
  b.add_node("talk", [width](const StateView& s, NodeContext&) -> Result<Update> {
    const std::int64_t i = s.get("i").as_int64();
    return Update().set("messages", msg("user", turn_text(i, width))).set("i", i + 1);
  });
  b.add_edge("START", "talk");
  b.add_conditional_edges(
      "talk",
      [turns](const StateView& s) {
        return std::vector<std::string>{s.get("i").as_int64() < turns ? "talk" : "END"};
      },
      {"talk", "END"});
  return *b.compile({.recursion_limit = 100});
}

std::int64_t bytes_counter(std::string_view text) {
  return static_cast<std::int64_t>(text.size());
}

std::int64_t total_tokens(const json::array& arr) {
  std::int64_t n = 0;
  for (const auto& m : arr) n += static_cast<std::int64_t>(m.at("content").as_string().size());
  return n;
}

// The archive artifact's JSON Lines, parsed.
// The messages as written: the ids the messages reducer gives them left out.
json::value without_ids(json::value v) {
  if (v.is_object()) v.as_object().erase("id");
  if (v.is_array())
    for (auto& m : v.as_array())
      if (m.is_object()) m.as_object().erase("id");
  return v;
}

// The turns one archive artifact holds (JSON Lines), and the archive before it (a chain: each
// eviction writes only what it evicted, after a line naming the archive before).
struct ArchiveLink {
  std::vector<std::string> contents;
  json::value previous;  // null for the first
};
ArchiveLink archive_link(ArtifactStore& store, const json::value& ref_json) {
  ArchiveLink out;
  auto ref = ArtifactRef::from_json(ref_json);
  EXPECT_TRUE(ref);
  if (!ref) return out;
  EXPECT_EQ(ref->media_type, "application/x-ndjson");
  auto text = store.get(ref->id);
  EXPECT_TRUE(text);
  std::size_t pos = 0;
  while (text && pos < text->size()) {
    auto end = text->find('\n', pos);
    const json::value line = json::parse(text->substr(pos, end - pos));
    if (pos == 0 && line.as_object().contains("previous_archive"))
      out.previous = line.at("previous_archive");
    else
      out.contents.push_back(std::string(line.at("content").as_string()));
    pos = end + 1;
  }
  return out;
}

// Every turn the chain ending at the marker's archive holds, oldest first.
std::vector<std::string> archived_contents(ArtifactStore& store, const json::value& marker) {
  std::vector<std::vector<std::string>> links;
  for (json::value at = marker.at("archive"); !at.is_null();) {
    auto link = archive_link(store, at);
    links.push_back(std::move(link.contents));
    at = link.previous;
  }
  std::vector<std::string> out;
  for (auto it = links.rbegin(); it != links.rend(); ++it)
    out.insert(out.end(), it->begin(), it->end());
  return out;
}

// A message whose id the channel holds already takes that message's place (LangGraph's
// add_messages), on a thread's next turn as within a step; one without an id is appended.
TEST(MessageWindow, AMessageWithAnIdTheChannelHoldsReplacesIt) {
  auto g = chat({}, 1);
  GraphRuntime rt;
  auto cp = make_memory_checkpointer();
  json::object first = msg("user", "helo");
  first["id"] = "u-1";
  auto a =
      run(rt, g, {{"messages", json::array{first}}}, {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(a) << a.error().message;
  json::object fixed = msg("user", "hello");
  fixed["id"] = "u-1";
  json::object again = fixed;
  again["content"] = "hello!";
  auto b = run(rt, g, {{"messages", json::array{fixed, again}}},
               {.checkpointer = cp.get(), .thread_id = "t"});
  ASSERT_TRUE(b) << b.error().message;
  const auto& m = b->state.at("messages").as_array();
  ASSERT_EQ(m.size(), 3u) << json::serialize(m);  // u-1, then the two turns of talk
  EXPECT_EQ(m[0].at("id"), "u-1");
  EXPECT_EQ(m[0].at("content"), "hello!");
  EXPECT_NE(m[1].at("id"), m[2].at("id"));
}

// A messages channel holds messages (objects) or texts, written alone or in a list: a number,
// boolean or null is refused, from the run's input as from a node, naming the channel and the
// writer (they were kept as items of the list).
TEST(MessageWindow, ANumberBooleanOrNullIsNotAMessage) {
  auto g = chat({}, 1);
  GraphRuntime rt;
  auto refused = [&](json::value input) {
    auto r = run(rt, g, {{"messages", std::move(input)}});
    return r ? "accepted: " + json::serialize(r->state.at("messages")) : r.error().to_string();
  };
  EXPECT_EQ(refused(5),
            "invalid_argument: channel 'messages' holds messages (objects or texts); "
            "the run's input wrote 5");
  EXPECT_EQ(refused(true),
            "invalid_argument: channel 'messages' holds messages (objects or "
            "texts); the run's input wrote true");
  EXPECT_EQ(refused(nullptr),
            "invalid_argument: channel 'messages' holds messages (objects or "
            "texts); the run's input wrote null");
  EXPECT_EQ(refused(json::array{msg("user", "hi"), 5}),
            "invalid_argument: channel 'messages' holds messages (objects or texts); the run's "
            "input wrote 5 as item 1 of its list");
  EXPECT_EQ(refused(json::array{json::array{msg("user", "hi")}}),
            "invalid_argument: channel 'messages' holds messages (objects or texts); the run's "
            "input wrote a list as item 0 of its list");
  // A text and a message are taken as before.
  auto ok = run(rt, g, {{"messages", json::array{"hi", msg("user", "hello")}}});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(json::serialize(without_ids(ok->state.at("messages"))),
            R"(["hi",{"role":"user","content":"hello"},{"role":"user","content":"turn-0...."}])");

  StateGraph b;
  b.add_channel("messages", {.reducer = ReducerKind::messages});
  b.add_node("count", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("messages", 5);
  });
  b.add_edge("START", "count").add_edge("count", "END");
  auto r = run(rt, *b.compile(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "invalid_argument: channel 'messages' holds messages (objects or texts); node 'count' "
            "wrote 5");
}

// A message written without an id gets one of its own where it is merged: equal messages of two
// runs (the same answer on two branches) have two ids; a message's given id is kept.
TEST(MessageWindow, MessagesWrittenWithoutAnIdGetOneOfTheirOwn) {
  auto g = chat({}, 2);
  GraphRuntime rt;
  json::object given = msg("user", "hello");
  given["id"] = "u-1";
  auto a = run(rt, g, {{"messages", json::array{given}}});
  auto b = run(rt, g, {{"messages", json::array{given}}});
  ASSERT_TRUE(a && b);
  const auto& x = a->state.at("messages").as_array();
  const auto& y = b->state.at("messages").as_array();
  ASSERT_EQ(x.size(), 3u);
  ASSERT_EQ(y.size(), 3u);
  EXPECT_EQ(x[0].at("id"), "u-1");
  EXPECT_EQ(y[0].at("id"), "u-1");
  std::set<std::string> ids;
  for (const auto* arr : {&x, &y})
    for (std::size_t i = 1; i < 3; ++i) {
      const std::string id(arr->at(i).at("id").as_string());
      EXPECT_EQ(id.rfind("msg-", 0), 0u) << id;
      ids.insert(id);
    }
  EXPECT_EQ(ids.size(), 4u) << "equal turns of two runs, four ids";
  EXPECT_EQ(x[1].at("content"), y[1].at("content"));
}

TEST(MessageWindow, TokenWindowKeepsTheSystemPromptAndArchivesEvictedTurns) {
  auto store = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  auto g = chat({.max_tokens = 100, .token_counter = bytes_counter}, 12, 10);
  GraphRuntime rt({.artifacts = store.get()});
  auto r = run(rt, g, {{"messages", json::array{msg("system", "Be terse.")}}});
  ASSERT_TRUE(r) << r.error().message;
  const json::array& arr = r->state.at("messages").as_array();
  ASSERT_GE(arr.size(), 3u);
  EXPECT_EQ(without_ids(arr[0]), msg("system", "Be terse."));
  const json::value& marker = arr[1];
  EXPECT_EQ(marker.at("role"), "system");
  EXPECT_EQ(marker.at("name"), "summary");
  const std::int64_t archived = marker.at("archived").as_int64();
  EXPECT_EQ(marker.at("content").as_string(),
            "[" + std::to_string(archived) + " earlier messages archived]");
  // 9 (prompt) + 29 (marker) + 10 per turn <= 100: the newest 6 turns stay.
  EXPECT_LE(total_tokens(arr), 100);
  EXPECT_EQ(archived, 6);
  ASSERT_EQ(arr.size(), 2u + 6u);
  for (std::size_t k = 2; k < arr.size(); ++k)
    EXPECT_EQ(arr[k].at("content").as_string(),
              turn_text(static_cast<std::int64_t>(archived + k - 2), 10));
  // The archive holds every evicted turn, oldest first.
  std::vector<std::string> expected;
  for (std::int64_t i = 0; i < archived; ++i) expected.push_back(turn_text(i, 10));
  EXPECT_EQ(archived_contents(*store, marker), expected);
}

TEST(MessageWindow, WithoutArtifactsOrHookEvictedTurnsAreDropped) {
  auto g = chat({.max_messages = 3}, 5);
  GraphRuntime rt;
  auto r = run(rt, g, {{"messages", json::array{msg("system", "S")}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(json::serialize(without_ids(r->state.at("messages"))),
            R"([{"role":"system","content":"S"},{"role":"user","content":"turn-3...."},)"
            R"({"role":"user","content":"turn-4...."}])");
}

struct HookLog {
  std::vector<std::string> previous;
  std::vector<std::size_t> evicted;
  int fail_on_call = 0;  // 1-based; 0 = never
};

SummarizeFn joining_hook(std::shared_ptr<HookLog> log) {
  return [log](std::string previous, json::array evicted) -> asio::awaitable<Result<std::string>> {
    log->previous.push_back(previous);
    log->evicted.push_back(evicted.size());
    if (static_cast<int>(log->previous.size()) == log->fail_on_call)
      co_return Error(Errc::model_error, "the summarizer is down");
    std::string s = previous;
    for (const auto& m : evicted)
      s += (s.empty() ? "" : "+") + std::string(m.at("content").as_string()).substr(0, 6);
    co_return s;
  };
}

// The count window with a summary hook: called with the previous summary each time, its text
// kept right after the system prompt and capped at max_summary_bytes with a note.
TEST(MessageWindow, SummaryHookFoldsEvictedTurnsAndIsBounded) {
  auto store = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  auto log = std::make_shared<HookLog>();
  auto g = chat({.max_messages = 3, .summarize = joining_hook(log), .max_summary_bytes = 40}, 12);
  GraphRuntime rt({.artifacts = store.get()});
  auto r = run(rt, g, {{"messages", json::array{msg("system", "S")}}});
  ASSERT_TRUE(r) << r.error().message;
  const json::array& arr = r->state.at("messages").as_array();
  ASSERT_EQ(arr.size(), 4u);  // prompt, marker, the newest 2 turns (3 counting the prompt)
  EXPECT_EQ(without_ids(arr[0]), msg("system", "S"));
  EXPECT_EQ(arr[2].at("content").as_string(), turn_text(10, 10));
  EXPECT_EQ(arr[3].at("content").as_string(), turn_text(11, 10));
  EXPECT_EQ(arr[1].at("archived"), 10);
  // One eviction per step from the 3rd turn on; each call sees the previous (capped) summary.
  ASSERT_EQ(log->previous.size(), 10u);
  EXPECT_EQ(log->previous[0], "");
  EXPECT_EQ(log->previous[1], "turn-0");
  EXPECT_EQ(log->previous[2], "turn-0+turn-1");
  EXPECT_EQ(log->evicted, std::vector<std::size_t>(10, 1));
  const std::string summary(arr[1].at("content").as_string());
  EXPECT_LE(summary.size(), 40u);
  EXPECT_EQ(summary, "turn-0+turn-1+tur... [summary truncated]");  // 17 + 23 bytes
  EXPECT_EQ(archived_contents(*store, arr[1]).size(), 10u);
  // Each eviction wrote only the turn it evicted: the newest archive holds one turn, not ten
  // (a copy of every earlier turn each time made a long chat's archives quadratic).
  const auto newest = archive_link(*store, arr[1].at("archive"));
  EXPECT_EQ(newest.contents, std::vector<std::string>{turn_text(9, 10)});
  EXPECT_TRUE(ArtifactRef::from_json(newest.previous));
}

// A thread continued in another process (a new artifact store) gets its whole archive chain
// back from the checkpointer, not only the newest link.
TEST(MessageWindow, AThreadsArchiveChainIsRestoredWithTheThread) {
  auto g = chat({.max_messages = 3}, 6);
  auto cp = make_memory_checkpointer();
  {
    auto first = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
    GraphRuntime rt({.artifacts = first.get()});
    auto r = run(rt, g, {{"messages", json::array{msg("system", "S")}}},
                 {.checkpointer = cp.get(), .thread_id = "chat"});
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->state.at("messages").at(1).at("archived"), 4);
  }
  auto second = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  GraphRuntime rt({.artifacts = second.get()});
  auto r = run(rt, g, {}, {.checkpointer = cp.get(), .thread_id = "chat"});  // one more turn
  ASSERT_TRUE(r) << r.error().message;
  const auto& marker = r->state.at("messages").at(1);
  EXPECT_EQ(marker.at("archived"), 5);
  std::vector<std::string> expected;
  for (int i = 0; i < 5; ++i) expected.push_back(turn_text(i, 10));
  EXPECT_EQ(archived_contents(*second, marker), expected);
}

// A long chat's checkpoints grow with the turns it evicted, not with their square: each
// eviction's archive holds only the turns it evicted (before, each held a copy of every earlier
// one, and every checkpoint kept its own: 400 turns of 100 bytes took 13.0 MB, now 0.7 MB).
TEST(MessageWindow, ALongChatsCheckpointsGrowLinearly) {
  MemoryBudget budget;
  auto cp = make_memory_checkpointer(
      MemoryCheckpointerOptions{.budget = &budget, .category = BudgetCategory::history});
  auto store = *ArtifactStore::open({{}, 64u << 20, 0, 100, nullptr});
  GraphRuntime rt({.artifacts = store.get()});
  auto g = chat({.max_messages = 3}, 400, 100);
  auto r = run(rt, g, {{"messages", json::array{msg("system", "S")}}},
               {.checkpointer = cp.get(), .thread_id = "long", .recursion_limit = 1000});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->state.at("messages").at(1).at("archived"), 398);
  const std::size_t bytes = budget.used(BudgetCategory::history);
  RecordProperty("checkpoint_bytes_400_turns", std::to_string(bytes));
  EXPECT_LT(bytes, std::size_t{1} << 20) << "the thread's checkpoints hold " << bytes << " bytes";
}

// A hook that fails keeps the previous summary; the run goes on and says so in a warning event.
TEST(MessageWindow, AFailingSummaryHookDoesNotKillTheRun) {
  auto log = std::make_shared<HookLog>();
  log->fail_on_call = 2;
  auto g = chat({.max_messages = 2, .summarize = joining_hook(log)}, 4);
  auto events = std::make_shared<EventStream>();
  std::vector<Event> warnings;
  auto consumer = [&]() -> asio::awaitable<void> {
    while (auto e = co_await events->async_next()) {
      if (e->kind == EventKind::warning) warnings.push_back(std::move(*e));
    }
  };
  GraphRuntime rt;  // no artifact store: the summary alone
  auto r = run_with(rt, g, {{"messages", json::array{msg("system", "S")}}},
                    {.run_id = "r1", .events = events}, consumer);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(log->previous.size(), 3u);
  EXPECT_EQ(log->previous[2], "turn-0");  // the failed call left the summary as it was
  const json::array& arr = r->state.at("messages").as_array();
  ASSERT_EQ(arr.size(), 3u);
  EXPECT_EQ(arr[1].at("content").as_string(), "turn-0+turn-2");
  EXPECT_EQ(arr[1].at("archived"), 3);
  EXPECT_FALSE(arr[1].as_object().contains("archive"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].step, 3);
  EXPECT_EQ(json::serialize(warnings[0].data),
            R"({"code":"model_error","message":"run r1: channel 'messages': the summarize hook )"
            R"(failed (model_error: the summarizer is down); keeping the previous summary",)"
            R"("channel":"messages"})");
}

}  // namespace
}  // namespace weir::graph
