// What a run does with the user's code and numbers at its edges (found by a breaking pass): a
// router, a custom reducer, a token counter or a node that throws ends the run with an error
// naming it (the events end too); a sum past its type's range is an error, not a wrapped or
// infinite value; message ids stay distinct across Send tasks and a window's evictions; run ids
// stay distinct across runtimes that share an artifact store.
#include <atomic>
#include <set>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "graph_test_util.hpp"
#include "weir/graph/events.hpp"
#include "weir/runtime/artifact_store.hpp"

namespace weir::graph {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using testing::run;

// START -> a -> END on `g` (which has node "a"), compiled with `limits` and run once.
Result<RunResult> run_one(StateGraph& g, GraphLimits limits = {}) {
  g.add_edge("START", "a");
  g.add_edge("a", "END");
  auto cg = g.compile(limits);
  if (!cg) return std::move(cg).error();
  GraphRuntime rt;
  return run(rt, *cg, {});
}

// START -> a -> (router) -> END, where `a` writes `count`.
std::shared_ptr<const CompiledGraph> routed(Router router) {
  StateGraph g;
  g.add_channel("count");
  g.add_node("a", [](const StateView&, NodeContext&) -> Result<Update> { return Update(); });
  g.add_edge("START", "a");
  g.add_conditional_edges("a", std::move(router), {"END"});
  auto cg = g.compile();
  EXPECT_TRUE(cg) << cg.error().to_string();
  return *cg;
}

TEST(RunUserCode, ARouterThatThrowsFailsTheRunNamingIt) {
  GraphRuntime rt;
  auto g = routed([](const StateView& s) -> std::vector<std::string> {
    (void)s.get("count").as_int64();  // count is null: boost::json throws
    return {"END"};
  });
  auto r = run(rt, g, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::tool_failed);
  EXPECT_NE(r.error().message.find("node 'a': its router threw: "), std::string::npos)
      << r.error().message;
}

TEST(RunUserCode, ACustomReducerThatThrowsFailsTheRunNamingTheChannel) {
  StateGraph g;
  ChannelOptions o;
  o.custom = [](const json::value&, const json::value& w) -> Result<json::value> {
    return json::value(w.as_string().size());  // an int write throws
  };
  g.add_channel("x", o);
  g.add_node("a",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("x", 7); });
  auto r = run_one(g);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::tool_failed);
  EXPECT_NE(r.error().message.find("channel 'x' reducer threw: "), std::string::npos)
      << r.error().message;
}

TEST(RunUserCode, ATokenCounterThatThrowsFailsTheRunNamingTheChannel) {
  StateGraph g;
  ChannelOptions o;
  o.reducer = ReducerKind::messages;
  o.max_tokens = 100;
  o.token_counter = [](std::string_view) -> std::int64_t { throw std::runtime_error("no"); };
  g.add_channel("messages", o);
  g.add_node("a", [](const StateView&, NodeContext&) -> Result<Update> {
    return Update().set("messages", json::object{{"role", "user"}, {"content", "hi"}});
  });
  auto r = run_one(g);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::tool_failed);
  EXPECT_NE(r.error().message.find("channel 'messages' token counter threw: no"), std::string::npos)
      << r.error().message;
}

TEST(RunUserCode, ANodeThatThrowsANonStandardExceptionFailsTheRun) {
  StateGraph g;
  g.add_channel("x");
  g.add_node("a", [](const StateView&, NodeContext&) -> Result<Update> { throw 42; });
  auto r = run_one(g);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::tool_failed);
  EXPECT_EQ(r.error().message, "node 'a': threw an exception that is not a std::exception");
}

TEST(RunUserCode, AnEventStreamEndsWhenARouterThrows) {
  auto g = routed([](const StateView& s) -> std::vector<std::string> {
    (void)s.get("count").as_int64();
    return {"END"};
  });
  GraphRuntime rt;
  auto stream = std::make_shared<EventStream>(16);
  RunOptions opt;
  opt.events = stream;
  std::vector<EventKind> kinds;
  auto consume = [&]() -> asio::awaitable<void> {
    while (auto e = co_await stream->async_next()) kinds.push_back(e->kind);
  };
  auto r = testing::run_with(rt, g, {}, std::move(opt), consume);
  ASSERT_FALSE(r);
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.back(), EventKind::run_failed);
}

// A sum channel's values stay numbers a client can read: past int64 or a double's range is the
// run's error, naming the channel and the node.
TEST(RunUserCode, ASumPastItsRangeIsAnError) {
  for (auto [first, second] : {std::pair{json::value(INT64_MAX), json::value(1)},
                               std::pair{json::value(INT64_MIN), json::value(-1)},
                               std::pair{json::value(1.79e308), json::value(1.79e308)}}) {
    StateGraph g;
    g.add_channel("x", {.reducer = ReducerKind::sum});
    g.add_node("a", [v = first](const StateView&, NodeContext&) -> Result<Update> {
      return Update().set("x", v);
    });
    g.add_node("b", [v = second](const StateView&, NodeContext&) -> Result<Update> {
      return Update().set("x", v);
    });
    g.add_edge("START", "a");
    g.add_edge("START", "b");
    g.add_edge("a", "END");
    g.add_edge("b", "END");
    auto cg = g.compile();
    ASSERT_TRUE(cg);
    GraphRuntime rt;
    auto r = run(rt, *cg, {});
    ASSERT_FALSE(r) << json::serialize(r->state);
    EXPECT_EQ(r.error().code, Errc::invalid_argument);
    EXPECT_NE(r.error().message.find(" from node 'b' added to the channel's "), std::string::npos)
        << r.error().message;
  }
}

// A list channel's default is its first items: a non-list one is refused (it was dropped).
TEST(RunUserCode, AListChannelsDefaultMustBeAList) {
  StateGraph g;
  g.add_channel("xs", {.reducer = ReducerKind::append, .default_value = 5});
  g.add_node("a", [](const StateView&, NodeContext&) -> Result<Update> { return Update(); });
  auto r = run_one(g);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "channel 'xs' appends to a list, but its default is 5: give it a list or no default");
}

// A messages channel's default items are messages (objects) or texts, as its writes must be.
TEST(RunUserCode, AMessagesChannelsDefaultHoldsMessages) {
  StateGraph g;
  g.add_channel("messages",
                {.reducer = ReducerKind::messages,
                 .default_value = json::array{"hi", json::object{{"role", "user"}}, 5}});
  g.add_node("a", [](const StateView&, NodeContext&) -> Result<Update> { return Update(); });
  g.add_edge("START", "a");
  g.add_edge("a", "END");
  auto cg = g.compile();
  ASSERT_FALSE(cg);
  EXPECT_EQ(cg.error().message,
            "channel 'messages' holds a list of messages, but its default holds 5 as item 2: give "
            "it a list of messages (objects or texts) or no default");
}

TEST(RunUserCode, ANumberChannelsDefaultMustBeANumber) {
  StateGraph g;
  g.add_channel("x", {.reducer = ReducerKind::sum, .default_value = "abc"});
  g.add_node("a",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("x", 1); });
  g.add_edge("START", "a");
  g.add_edge("a", "END");
  auto cg = g.compile();
  ASSERT_FALSE(cg);
  EXPECT_EQ(cg.error().message,
            "channel 'x' sums numbers, but its default is \"abc\": give it a number or no default");
}

// Every Send task of a node gets its own message id, as do two nodes of one step.
TEST(RunUserCode, NewMessageIdsDifferAcrossSendTasks) {
  StateGraph g;
  g.add_channel("messages", {.reducer = ReducerKind::messages});
  g.add_node("map", [](const StateView&, NodeContext&) -> Result<Update> {
    Update u;
    for (int i = 0; i < 5; ++i) u.sends.push_back({"llm", i});
    return u;
  });
  g.add_node("llm", [](const StateView&, NodeContext& c) -> Result<Update> {
    json::object m{{"role", "assistant"},
                   {"content", "answer " + json::serialize(c.input())},
                   {"id", c.new_message_id()}};
    return Update().set("messages", std::move(m));
  });
  g.add_edge("START", "map");
  g.add_sends("map", {"llm"});
  g.add_edge("llm", "END");
  auto cg = g.compile();
  ASSERT_TRUE(cg) << cg.error().to_string();
  GraphRuntime rt;
  auto r = run(rt, *cg, {});
  ASSERT_TRUE(r) << r.error().to_string();
  const auto& msgs = r->state.at("messages").as_array();
  ASSERT_EQ(msgs.size(), 5u) << json::serialize(msgs);
  std::set<std::string> contents;
  for (const auto& m : msgs) contents.insert(std::string(m.at("content").as_string()));
  EXPECT_EQ(contents,
            (std::set<std::string>{"answer 0", "answer 1", "answer 2", "answer 3", "answer 4"}));
}

// Ten writers in one step into a window of three: the three kept have three ids.
TEST(RunUserCode, GeneratedMessageIdsStayDistinctWhenAWindowEvicts) {
  StateGraph g;
  g.add_channel("messages", {.reducer = ReducerKind::messages, .max_messages = 3});
  g.add_node("map", [](const StateView&, NodeContext&) -> Result<Update> {
    Update u;
    for (int i = 0; i < 10; ++i) u.sends.push_back({"w", i});
    return u;
  });
  g.add_node("w", [](const StateView&, NodeContext& c) -> Result<Update> {
    json::object m{{"role", "user"}, {"content", "u" + json::serialize(c.input())}};
    return Update().set("messages", std::move(m));
  });
  g.add_edge("START", "map");
  g.add_sends("map", {"w"});
  g.add_edge("w", "END");
  auto cg = g.compile();
  ASSERT_TRUE(cg) << cg.error().to_string();
  GraphRuntime rt;
  auto r = run(rt, *cg, {});
  ASSERT_TRUE(r) << r.error().to_string();
  const auto& msgs = r->state.at("messages").as_array();
  ASSERT_EQ(msgs.size(), 3u) << json::serialize(msgs);
  std::set<std::string> ids;
  for (const auto& m : msgs) ids.insert(std::string(m.at("id").as_string()));
  EXPECT_EQ(ids.size(), 3u) << json::serialize(msgs);
}

// Two runtimes on one artifact store: a run that fails (releasing its artifacts) must not take
// another runtime's run's artifacts with it, so their run ids differ.
TEST(RunUserCode, RunIdsDifferAcrossRuntimes) {
  StateGraph g;
  g.add_channel("id");
  g.add_node("a", [](const StateView&, NodeContext& c) -> Result<Update> {
    return Update().set("id", json::string(c.run_id()));
  });
  g.add_edge("START", "a");
  g.add_edge("a", "END");
  auto cg = g.compile();
  ASSERT_TRUE(cg);
  GraphRuntime one, two;
  auto a = run(one, *cg, {}), b = run(two, *cg, {});
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->state.at("id"), b->state.at("id"));
  EXPECT_EQ(std::string_view(a->state.at("id").as_string()).substr(0, 4), "run-");
}

// Once a task of a step failed, or the run was cancelled, the step starts no more of its tasks
// (200 Send tasks one at a time all ran after the first had failed the run: side effects for a
// run already lost).
TEST(RunUserCode, AStepStartsNoMoreTasksOnceOneFailedOrTheRunWasCancelled) {
  for (const bool cancel_it : {false, true}) {
    auto started = std::make_shared<std::atomic<int>>(0);
    auto flag = std::make_shared<std::atomic<bool>>(false);
    StateGraph g;
    g.add_channel("out", {.reducer = ReducerKind::append});
    g.add_node("map", [](const StateView&, NodeContext&) -> Result<Update> {
      Update u;
      for (int i = 0; i < 200; ++i) u.sends.push_back({"work", i});
      return u;
    });
    g.add_async_node(
        "work",
        [started, flag, cancel_it](StateView, NodeContext& c) -> asio::awaitable<Result<Update>> {
          ++*started;
          if (!cancel_it) co_return Error(Errc::tool_failed, "no");
          flag->store(true);
          co_return Update().set("out", c.input());
        });
    g.add_edge("START", "map");
    g.add_sends("map", {"work"});
    g.add_edge("work", "END");
    GraphLimits lim;
    lim.max_concurrency = 1;
    auto cg = g.compile(lim);
    ASSERT_TRUE(cg) << cg.error().to_string();
    GraphRuntime rt;
    RunOptions opt;
    opt.cancel = flag;
    auto r = run(rt, *cg, {}, std::move(opt));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, cancel_it ? Errc::cancelled : Errc::tool_failed)
        << r.error().to_string();
    EXPECT_EQ(started->load(), 1);
  }
}

// An append channel that keeps 3 items takes a write of 100,000 within a 1 MiB state: it holds
// the last 3 (the run was refused: the state would grow to 2.3 MiB).
TEST(RunUserCode, AnAppendChannelsMaxItemsBoundsWhatAWriteCosts) {
  StateGraph g;
  g.add_channel("xs", {.reducer = ReducerKind::append, .max_items = 3});
  g.add_node("a", [](const StateView&, NodeContext&) -> Result<Update> {
    json::array xs;
    for (int i = 0; i < 100000; ++i) xs.push_back(i);
    return Update().set("xs", std::move(xs));
  });
  GraphLimits lim;
  lim.max_state_bytes = 1 << 20;
  auto r = run_one(g, lim);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(json::serialize(r->state.at("xs")), "[99997,99998,99999]");
}

// Errors about a write name the node once when one node wrote twice (it read "nodes 'a' and
// 'a' both wrote"), and a custom reducer's refusal names the node whose write it refused.
TEST(RunUserCode, WriteErrorsNameTheNodeOnce) {
  StateGraph g;
  g.add_channel("x");
  ChannelOptions o;
  o.custom = [](const json::value&, const json::value&) -> Result<json::value> {
    return Error(Errc::invalid_argument, "no");
  };
  g.add_channel("cnt", o);
  g.add_channel("which");
  g.add_node("a", [](const StateView& s, NodeContext&) -> Result<Update> {
    if (s.get("which") == "cnt") return Update().set("cnt", 1);
    return Update().set("x", 1).set("x", 2);
  });
  g.add_edge("START", "a");
  g.add_edge("a", "END");
  auto cg = g.compile();
  ASSERT_TRUE(cg) << cg.error().to_string();
  GraphRuntime rt;
  auto r = run(rt, *cg, {{"which", "x"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(
      r.error().to_string(),
      "conflicting_writes: node 'a' wrote channel 'x' more than once (twice in its update, or "
      "from two of its Send tasks) in superstep 1; a last-value channel takes one write per "
      "step: give it a reducer (e.g. append) or write it once");
  r = run(rt, *cg, {{"which", "cnt"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().to_string(),
            "invalid_argument: channel 'cnt' reducer refused the write of node 'a': no");
}

// RunOptions::go_to takes END as Update::go_to does (nothing runs), a bad go_to_sends target
// names go_to_sends, and an input key's typo gets a suggestion.
TEST(RunUserCode, GoToEndAndWhatABadNameSuggests) {
  auto ran = std::make_shared<int>(0);
  StateGraph g;
  g.add_channel("numbers");
  g.add_node("a", [ran](const StateView&, NodeContext&) -> Result<Update> {
    ++*ran;
    return Update();
  });
  g.add_edge("START", "a");
  g.add_edge("a", "END");
  auto cg = g.compile();
  ASSERT_TRUE(cg);
  GraphRuntime rt;
  RunOptions end;
  end.go_to = {"END"};
  auto r = run(rt, *cg, {}, std::move(end));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*ran, 0);
  RunOptions sends;
  sends.go_to_sends = {{"zzz", 1}};
  r = run(rt, *cg, {}, std::move(sends));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "go_to_sends names node 'zzz', which the graph does not have (its nodes: a)");
  r = run(rt, *cg, {{"numbrs", 1}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "input key 'numbrs' is not a channel of this graph; did you mean 'numbers'?");
}

// What the run's input wrote is blamed on the input, not on a node that never wrote the channel
// (found by the second breaking pass).
TEST(RunUserCode, TheRunsInputIsNamedAsTheWriter) {
  StateGraph g;
  g.add_channel("s", {.reducer = ReducerKind::sum, .default_value = 1});
  g.add_channel("o");
  g.add_node("zeta",
             [](const StateView&, NodeContext&) -> Result<Update> { return Update().set("o", 1); });
  g.add_edge("START", "zeta");
  g.add_edge("zeta", "END");
  auto cg = g.compile();
  ASSERT_TRUE(cg);
  GraphRuntime rt;
  auto r = run(rt, *cg, {{"s", INT64_MAX}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "channel 's': 9223372036854775807 from the run's input added to the channel's 1 is "
            "past the range of a 64-bit integer");
  r = run(rt, *cg, {{"s", "x"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "channel 's' holds numbers; the run's input wrote \"x\"");
}

// A token counter's huge counts evict as any count past the window does (their sum overflowed,
// and nothing was evicted); a negative count is refused, naming the channel.
TEST(RunUserCode, ATokenCountersHugeOrNegativeCounts) {
  for (const std::int64_t small : {std::int64_t{1}, std::int64_t{-5}}) {
    StateGraph g;
    ChannelOptions o;
    o.reducer = ReducerKind::messages;
    o.max_tokens = 50;
    o.token_counter = [small](std::string_view text) -> std::int64_t {
      return text.size() > 3 ? INT64_MAX : small;
    };
    g.add_channel("messages", o);
    g.add_node("a", [](const StateView&, NodeContext&) -> Result<Update> {
      json::array ms{json::object{{"role", "user"}, {"content", "long one"}},
                     json::object{{"role", "user"}, {"content", "long two"}},
                     json::object{{"role", "user"}, {"content", "hi"}}};
      return Update().set("messages", std::move(ms));
    });
    g.add_edge("START", "a");
    g.add_edge("a", "END");
    auto cg = g.compile();
    ASSERT_TRUE(cg);
    GraphRuntime rt;
    auto r = run(rt, *cg, {});
    if (small < 0) {
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().message,
                "channel 'messages' token counter returned -5 for a message; a count is 0 or more");
      continue;
    }
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(json::serialize(r->state.at("messages")).find("long"), std::string::npos)
        << json::serialize(r->state.at("messages"));
  }
}

}  // namespace
}  // namespace weir::graph
