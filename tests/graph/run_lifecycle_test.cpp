// A run's lifecycle at its edges: cancelled through Asio while several nodes run, its
// io_context destroyed while runs wait for admission.
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/graph/state_graph.hpp"

namespace weir::graph {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

// What the nodes of a test saw: how many started, how many saw their wait cancelled, how many
// finished, and whether one ran on after the run had ended.
struct Seen {
  std::atomic<int> started{0}, cut{0}, finished{0};
  std::atomic<bool> run_over{false}, after_run{false};
  std::atomic<bool> names_ok{true};
};

// START -> each of `names` (async nodes waiting 10 s on a timer) -> END. A node's wait that is
// cancelled ends the node with an error; `throws` nodes let the cancellation escape instead.
std::shared_ptr<const CompiledGraph> sleepers(std::shared_ptr<Seen> seen,
                                              std::vector<std::string> names, bool throws,
                                              GraphLimits limits = {}) {
  StateGraph b;
  b.add_channel("x", {});
  for (const auto& name : names) {
    b.add_async_node(
        name, [seen, name, throws](StateView, NodeContext& c) -> asio::awaitable<Result<Update>> {
          ++seen->started;
          asio::steady_timer t(co_await asio::this_coro::executor, 10s);
          boost::system::error_code ec;
          if (throws) {
            try {
              co_await t.async_wait(asio::use_awaitable);
            } catch (const boost::system::system_error& e) {
              ec = e.code();
            }
          } else {
            std::tie(ec) = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
          }
          if (seen->run_over) seen->after_run = true;
          if (c.node() != name) seen->names_ok = false;  // reads the run
          if (ec) ++seen->cut;
          ++seen->finished;
          if (ec && throws) throw boost::system::system_error(ec);
          if (ec) co_return Error(Errc::cancelled, "the wait was cancelled");
          co_return Update().set("x", 1);
        });
    b.add_edge("START", name);
    b.add_edge(name, "END");
  }
  return *b.compile(limits);
}

// Runs `graph` on a fresh io_context and cancels its awaiter (a cancellation slot bound to its
// completion) after 50 ms; returns what the run completed with (none if it never did).
std::optional<Result<RunResult>> cancelled_after_50ms(GraphRuntime& rt,
                                                      std::shared_ptr<const CompiledGraph> graph) {
  asio::io_context io;
  asio::cancellation_signal cancel;
  std::optional<Result<RunResult>> out;
  asio::co_spawn(
      io, rt.async_invoke(std::move(graph), {}),
      asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, Result<RunResult> r) {
        EXPECT_FALSE(e);
        out = std::move(r);
      }));
  asio::steady_timer later(io, 50ms);
  later.async_wait([&](boost::system::error_code) { cancel.emit(asio::cancellation_type::all); });
  io.run();
  return out;
}

// A run cancelled through its completion's cancellation slot while a step runs several async
// nodes: their waits are cancelled, the run ends cancelled only once every node has finished,
// and no node runs against the ended run.
TEST(RunLifecycle, CancellingTheAwaiterCancelsEveryNodeOfTheStep) {
  for (bool throws : {false, true}) {
    auto seen = std::make_shared<Seen>();
    auto graph = sleepers(seen, {"d", "e"}, throws);
    GraphRuntime rt;
    asio::io_context io;
    asio::cancellation_signal cancel;
    std::optional<Result<RunResult>> out;
    int finished_at_end = -1;
    asio::co_spawn(
        io, rt.async_invoke(graph, {}),
        asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, Result<RunResult> r) {
          ASSERT_FALSE(e);
          finished_at_end = seen->finished.load();
          seen->run_over = true;
          out = std::move(r);
        }));
    asio::steady_timer later(io, 50ms);
    later.async_wait([&](boost::system::error_code) { cancel.emit(asio::cancellation_type::all); });
    io.run();
    ASSERT_TRUE(out.has_value());
    ASSERT_FALSE(*out);
    EXPECT_TRUE(out->error().is(Errc::cancelled)) << out->error().to_string();
    EXPECT_EQ(out->error().message, "node 'd': run cancelled while it ran");
    EXPECT_EQ(seen->started.load(), 2);
    EXPECT_EQ(seen->cut.load(), 2) << "both nodes' waits were cancelled";
    EXPECT_EQ(finished_at_end, 2) << "the run ended before its nodes did";
    EXPECT_FALSE(seen->after_run.load());
    EXPECT_TRUE(seen->names_ok.load());
  }
}

// A lone async node (awaited straight from the run, no step of its own) cancelled the same way:
// the run ends cancelled, not with the node's "threw: Operation canceled" (a node that catches
// the cancellation and returns its own `cancelled` error keeps its message).
TEST(RunLifecycle, CancellingTheAwaiterOfALoneNodeEndsTheRunCancelled) {
  for (bool throws : {false, true}) {
    auto seen = std::make_shared<Seen>();
    GraphRuntime rt;
    auto out = cancelled_after_50ms(rt, sleepers(seen, {"d"}, throws));
    ASSERT_TRUE(out.has_value());
    ASSERT_FALSE(*out);
    EXPECT_TRUE(out->error().is(Errc::cancelled)) << out->error().to_string();
    EXPECT_EQ(out->error().message,
              throws ? "node 'd': run cancelled while it ran" : "node 'd': the wait was cancelled");
    EXPECT_EQ(seen->cut.load(), 1);
    EXPECT_EQ(rt.active_runs(), 0u);
  }
}

// A lone node that goes through call() (retries, a timeout) cancelled the same way ends the run
// cancelled too (it ended tool_failed, "threw: Operation canceled" or "threw: multiple
// exceptions", which a retry policy would retry; found by the second breaking pass).
TEST(RunLifecycle, CancellingTheAwaiterOfANodeWithRetriesOrATimeoutEndsTheRunCancelled) {
  for (const NodeOptions& o : {NodeOptions{.max_attempts = 3}, NodeOptions{.timeout = 5s}}) {
    StateGraph b;
    b.add_channel("x", {});
    b.add_async_node(
        "a",
        [](StateView, NodeContext&) -> asio::awaitable<Result<Update>> {
          asio::steady_timer t(co_await asio::this_coro::executor, 10s);
          co_await t.async_wait(asio::use_awaitable);
          co_return Update();
        },
        o);
    b.add_edge("START", "a").add_edge("a", "END");
    GraphRuntime rt;
    auto out = cancelled_after_50ms(rt, *b.compile());
    ASSERT_TRUE(out.has_value());
    ASSERT_FALSE(*out);
    EXPECT_EQ(out->error().to_string(), "cancelled: node 'a': run cancelled while it ran");
  }
}

// The same through `run || timer` (the caller's timer wins): the awaiter resumes only after the
// run's nodes have stopped, and nodes past max_concurrency never start.
TEST(RunLifecycle, ARunLosingARaceStopsItsNodesBeforeTheAwaiterResumes) {
  using namespace asio::experimental::awaitable_operators;
  for (int limit : {16, 1}) {
    auto seen = std::make_shared<Seen>();
    auto graph = sleepers(seen, {"d", "e", "f"}, true, {.max_concurrency = limit});
    GraphRuntime rt;
    asio::io_context io;
    int winner = -1, finished_at_resume = -1;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer t(co_await asio::this_coro::executor, 50ms);
          auto run = rt.async_invoke(graph, {});
          auto race = std::move(run) || t.async_wait(asio::use_awaitable);
          auto v = co_await std::move(race);
          winner = static_cast<int>(v.index());
          finished_at_resume = seen->finished.load();
          seen->run_over = true;
        },
        asio::detached);
    io.run();
    EXPECT_EQ(winner, 1) << "the timer won";
    EXPECT_EQ(seen->started.load(), limit == 1 ? 1 : 3);
    EXPECT_EQ(finished_at_resume, seen->started.load()) << "the awaiter resumed before the nodes";
    EXPECT_EQ(seen->cut.load(), seen->started.load());
    EXPECT_FALSE(seen->after_run.load());
    EXPECT_TRUE(seen->names_ok.load());
    EXPECT_EQ(rt.active_runs(), 0u);
  }
}

// Destroying the io_context while runs are admitted and others wait for admission is clean:
// nothing is resumed during its destruction, the permits come back, and the runtime admits
// runs on another io_context afterwards.
TEST(RunLifecycle, DestroyingTheIoContextWithQueuedRunsIsClean) {
  auto seen = std::make_shared<Seen>();
  auto graph = sleepers(seen, {"slow"}, true);
  RuntimeOptions ro;
  ro.max_concurrent_runs = 5;
  GraphRuntime rt(ro);
  {
    asio::io_context io;
    for (int i = 0; i < 20; ++i)
      asio::co_spawn(io, rt.async_invoke(graph, {}), [](std::exception_ptr, Result<RunResult>) {});
    io.run_for(50ms);
    EXPECT_EQ(rt.active_runs(), 5u);
    EXPECT_EQ(rt.queued_runs(), 15u);
  }
  EXPECT_EQ(rt.active_runs(), 0u);
  EXPECT_EQ(rt.queued_runs(), 0u);
  EXPECT_EQ(seen->started.load(), 5);

  StateGraph b;
  b.add_channel("x", {});
  b.add_node("quick",
             [](StateView, NodeContext&) -> Result<Update> { return Update().set("x", 7); });
  b.add_edge("START", "quick");
  b.add_edge("quick", "END");
  auto quick = *b.compile();
  asio::io_context io;
  std::optional<Result<RunResult>> out;
  asio::co_spawn(io, rt.async_invoke(quick, {}),
                 [&](std::exception_ptr, Result<RunResult> r) { out = std::move(r); });
  io.run();
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(*out) << out->error().to_string();
  EXPECT_EQ((*out)->state.at("x").as_int64(), 7);
}

// A run waiting for admission (max_concurrent_runs=1, behind a run that goes on) stops waiting
// at its cancel flag or its deadline, with the error it would have got once started; the run
// ahead of it is not disturbed.
TEST(RunLifecycle, AQueuedRunStopsWaitingAtItsCancelOrDeadline) {
  for (bool by_deadline : {false, true}) {
    auto seen = std::make_shared<Seen>();
    auto blocker = sleepers(seen, {"slow"}, false);
    auto queued = sleepers(std::make_shared<Seen>(), {"next"}, false,
                           by_deadline ? GraphLimits{.deadline = 100ms} : GraphLimits{});
    RuntimeOptions ro;
    ro.max_concurrent_runs = 1;
    GraphRuntime rt(ro);
    asio::io_context io;
    auto stop_blocker = std::make_shared<std::atomic<bool>>(false);
    auto cancel = std::make_shared<std::atomic<bool>>(false);
    std::optional<Result<RunResult>> first, second;
    bool blocker_running_at_end = false;
    asio::co_spawn(io, rt.async_invoke(blocker, {}, {.cancel = stop_blocker}),
                   [&](std::exception_ptr, Result<RunResult> r) { first = std::move(r); });
    RunOptions o;
    if (!by_deadline) o.cancel = cancel;
    asio::co_spawn(io, rt.async_invoke(queued, {}, std::move(o)),
                   [&](std::exception_ptr, Result<RunResult> r) {
                     blocker_running_at_end = !first.has_value();
                     second = std::move(r);
                     stop_blocker->store(true);
                   });
    asio::steady_timer later(io, 50ms);
    later.async_wait([&](boost::system::error_code) {
      EXPECT_EQ(rt.queued_runs(), 1u);
      cancel->store(true);
    });
    io.run();
    ASSERT_TRUE(second.has_value());
    ASSERT_FALSE(*second);
    EXPECT_TRUE(blocker_running_at_end) << "the queued run waited for the run ahead to end";
    if (by_deadline) {
      EXPECT_TRUE(second->error().is(Errc::deadline_exceeded)) << second->error().to_string();
      EXPECT_EQ(second->error().message,
                "run stopped after 100 ms (limits.deadline_ms) in superstep 0");
    } else {
      EXPECT_TRUE(second->error().is(Errc::cancelled)) << second->error().to_string();
      EXPECT_EQ(second->error().message, "run cancelled before superstep 1");
    }
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(seen->started.load(), 1);
    EXPECT_EQ(rt.active_runs(), 0u);
    EXPECT_EQ(rt.queued_runs(), 0u);
  }
}

}  // namespace
}  // namespace weir::graph
