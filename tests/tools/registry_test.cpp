#include "weir/tools/registry.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <stdexcept>

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/tools/builtin.hpp"

namespace weir::tools {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

json::object obj(std::string_view s) {
  return json::parse(s).as_object();
}

const json::object& no_args_schema() {
  static const json::object s = obj(R"({"type":"object"})");
  return s;
}

ToolOptions opts(std::chrono::milliseconds timeout, int concurrency = 8) {
  ToolOptions o;
  o.timeout = timeout;
  o.max_concurrency = concurrency;
  return o;
}

std::string show(const Result<ToolOutput>& r) {
  return r ? "ok: " + r->content : r.error().to_string();
}

// Starts a test coroutine; an exception escaping it is rethrown from io.run().
void spawn(asio::io_context& io, asio::awaitable<void> a) {
  asio::co_spawn(io, std::move(a), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
}

// Runs one call to completion on a fresh io_context.
Result<ToolOutput> call(ToolRegistry& reg, std::string_view name, std::string_view args,
                        ToolContext ctx = {}) {
  asio::io_context io;
  auto f = asio::co_spawn(io, reg.async_call(name, obj(args), std::move(ctx)), asio::use_future);
  io.run();
  return f.get();
}

TEST(ToolRegistryTest, AddRefusesDuplicatesAndBadSchemas) {
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_calculator()));
  auto dup = reg.add(make_calculator());
  ASSERT_FALSE(dup);
  EXPECT_TRUE(dup.error().is(Errc::invalid_argument));
  EXPECT_EQ(dup.error().message, "tool registry: a tool named 'calculator' is already registered");

  auto fn = [](const json::object&, const ToolContext&) -> Result<std::string> {
    return std::string("x");
  };
  auto bad = reg.add(
      make_tool("bad", "d", obj(R"({"type":"object","properties":{"k":{"minimum":"1"}}})"), fn));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "tool 'bad': schema /properties/k/minimum: expected a number, got string");
  auto not_object = reg.add(make_tool("arr", "d", obj(R"({"type":"array"})"), fn));
  ASSERT_FALSE(not_object);
  EXPECT_EQ(not_object.error().message,
            "tool 'arr': the parameters schema must have \"type\": \"object\"");
  auto zero = reg.add(make_tool("zero", "d", no_args_schema(), fn, opts(100ms, 0)));
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().message, "tool 'zero': max_concurrency must be at least 1");
  EXPECT_EQ(reg.names(), std::vector<std::string>{"calculator"});
  EXPECT_NE(reg.find("calculator"), nullptr);
  EXPECT_EQ(reg.find("nope"), nullptr);
}

TEST(ToolRegistryTest, UnknownToolListsToolsWithDidYouMean) {
  ToolRegistry reg;
  EXPECT_EQ(show(call(reg, "calculator", "{}")),
            "not_found: unknown tool 'calculator' (no tools are registered)");
  ASSERT_TRUE(reg.add(make_calculator()));
  ASSERT_TRUE(reg.add(make_files_tool("/tmp")));
  EXPECT_EQ(show(call(reg, "calculater", "{}")),
            "not_found: unknown tool 'calculater'; did you mean 'calculator'? (available: "
            "calculator, files)");
  EXPECT_EQ(show(call(reg, "web_browser", "{}")),
            "not_found: unknown tool 'web_browser' (available: calculator, files)");
}

TEST(ToolRegistryTest, SchemaViolationNamesToolAndPointer) {
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_calculator()));
  auto r = call(reg, "calculator", R"({"expression":3})");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::invalid_argument));
  EXPECT_EQ(r.error().message, "calculator: /expression: expected string, got number");
  EXPECT_EQ(show(call(reg, "calculator", R"({"expr":"1"})")),
            "invalid_argument: calculator: /expression: missing required property");
  EXPECT_EQ(show(call(reg, "calculator", R"({"expression":"6*7"})")), "ok: 42");
}

TEST(ToolRegistryTest, ToolErrorsPassThrough) {
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_calculator()));
  EXPECT_EQ(show(call(reg, "calculator", R"({"expression":"1/0"})")),
            "invalid_argument: calculator: division by zero at column 2");
}

TEST(ToolRegistryTest, ThrowingToolsBecomeToolFailed) {
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_tool("bomb", "throws", no_args_schema(),
                                [](const json::object&, const ToolContext&) -> Result<std::string> {
                                  throw std::runtime_error("boom");
                                })));
  ASSERT_TRUE(reg.add(
      make_async_tool("async_bomb", "throws", no_args_schema(),
                      [](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
                        throw std::logic_error("async boom");
                        co_return std::string();
                      })));
  auto r = call(reg, "bomb", "{}");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::tool_failed));
  EXPECT_EQ(r.error().message, "tool 'bomb' threw: boom");
  EXPECT_EQ(show(call(reg, "async_bomb", "{}")),
            "tool_failed: tool 'async_bomb' threw: async boom");
  EXPECT_EQ(reg.in_flight("bomb"), 0u);
}

TEST(ToolRegistryTest, GarbageOutputIsRefused) {
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_tool("latin1", "d", no_args_schema(),
                                [](const json::object&, const ToolContext&) -> Result<std::string> {
                                  return std::string("caf\xe9 au lait");
                                })));
  ASSERT_TRUE(reg.add(make_tool("nul", "d", no_args_schema(),
                                [](const json::object&, const ToolContext&) -> Result<std::string> {
                                  return std::string("ab\0c", 4);
                                })));
  EXPECT_EQ(show(call(reg, "latin1", "{}")),
            "tool_failed: tool 'latin1' returned invalid UTF-8 at byte 3");
  EXPECT_EQ(show(call(reg, "nul", "{}")),
            "tool_failed: tool 'nul' returned binary output (a NUL byte at offset 2)");
}

TEST(ToolRegistryTest, LargeOutputSpillsToAnArtifact) {
  auto store = ArtifactStore::open({});
  ASSERT_TRUE(store);
  std::string big;
  for (int i = 0; big.size() < 10000; ++i) big += "line " + std::to_string(i) + "\n";
  big += "\xc3\xa9";  // a 2-byte character at the very end
  ToolOptions o;
  o.max_output_bytes = 1000;
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_tool(
      "big", "d", no_args_schema(),
      [&big](const json::object&, const ToolContext&) -> Result<std::string> { return big; }, o)));

  ToolContext ctx;
  ctx.artifacts = store->get();
  ctx.owner = "run-1";
  auto r = call(reg, "big", "{}", ctx);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->artifact_id);
  EXPECT_EQ(r->output_bytes, big.size());
  EXPECT_EQ(r->content.substr(0, 1000), big.substr(0, 1000));
  EXPECT_EQ(r->content.substr(1000), "\n[output truncated: showing the first 1000 of " +
                                         std::to_string(big.size()) +
                                         " bytes; the full output is artifact " + *r->artifact_id +
                                         " (read it with the artifacts tool)]");
  auto stored = (*store)->get(*r->artifact_id);
  ASSERT_TRUE(stored);
  EXPECT_EQ(*stored, big);
  EXPECT_EQ((*store)->release_owner("run-1"), 1u);

  // Without a store the output is cut, and the note says so.
  auto cut = call(reg, "big", "{}");
  ASSERT_TRUE(cut);
  EXPECT_FALSE(cut->artifact_id);
  EXPECT_EQ(cut->content.substr(1000), "\n[output truncated: showing the first 1000 of " +
                                           std::to_string(big.size()) +
                                           " bytes; the rest was dropped (no artifact store)]");
}

TEST(ToolRegistryTest, SpillCutsOnACharacterBoundary) {
  ToolOptions o;
  o.max_output_bytes = 4;
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_tool(
      "u", "d", no_args_schema(),
      [](const json::object&, const ToolContext&) -> Result<std::string> {
        return std::string("abc\xc3\xa9xyz");
      },
      o)));
  auto r = call(reg, "u", "{}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->content.substr(0, 4), "abc\n");
  EXPECT_EQ(r->content,
            "abc\n[output truncated: showing the first 3 of 8 bytes; the rest was "
            "dropped (no artifact store)]");
}

// An async tool that waits on a timer the test controls: it "hangs" until the gate opens.
TEST(ToolRegistryTest, HungAsyncToolTimesOutAndTheLoopKeepsServing) {
  asio::io_context io;
  asio::steady_timer gate(io, Clock::time_point::max());
  std::atomic<bool> finished{false};
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_async_tool(
      "hang", "never answers", no_args_schema(),
      [&gate, &finished](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
        boost::system::error_code ec;
        co_await gate.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        finished = true;
        co_return std::string("late");
      },
      opts(150ms))));
  ASSERT_TRUE(reg.add(make_calculator()));

  Clock::duration hang_took{}, calc_took{};
  Result<ToolOutput> hang_r = Error(Errc::ok, ""), calc_r = Error(Errc::ok, "");
  const auto start = Clock::now();
  auto hang_call = [&]() -> asio::awaitable<void> {
    auto call_op =
        reg.async_call("hang", json::object(), ToolContext());  // built outside co_await (GCC 12)
    hang_r = co_await std::move(call_op);
    hang_took = Clock::now() - start;
  };
  auto calc_call = [&]() -> asio::awaitable<void> {
    auto call_op = reg.async_call("calculator", obj(R"({"expression":"1+1"})"),
                                  ToolContext());  // built outside co_await (GCC 12)
    calc_r = co_await std::move(call_op);
    calc_took = Clock::now() - start;
  };
  auto check = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor, 400ms);
    co_await t.async_wait(asio::use_awaitable);
    // Timed out, but the invocation still runs and holds its slot until it finishes.
    EXPECT_EQ(reg.in_flight("hang"), 1u);
    gate.cancel();
  };
  spawn(io, hang_call());
  spawn(io, calc_call());
  spawn(io, check());
  io.run();  // returns only when the background invocation has finished too

  ASSERT_FALSE(hang_r);
  EXPECT_TRUE(hang_r.error().is(Errc::tool_timeout));
  EXPECT_EQ(hang_r.error().message, "tool 'hang' did not answer within 150 ms");
  EXPECT_GE(hang_took, 150ms);
  EXPECT_LT(hang_took, 400ms);
  ASSERT_TRUE(calc_r);
  EXPECT_EQ(calc_r->content, "2");
  EXPECT_LT(calc_took, 100ms);
  EXPECT_TRUE(finished);
  EXPECT_EQ(reg.in_flight("hang"), 0u);
}

// A caller that stops waiting (a node's timeout_ms or deadline, a cancelled run: the caller's
// Asio cancellation) cancels the invocation too.
TEST(ToolRegistryTest, ACancelledCallerCancelsTheInvocation) {
  using namespace asio::experimental::awaitable_operators;
  asio::io_context io;
  asio::steady_timer gate(io, Clock::time_point::max());
  std::atomic<bool> finished{false};
  boost::system::error_code waited;
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_async_tool(
      "hang", "never answers", no_args_schema(),
      [&](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
        co_await gate.async_wait(asio::redirect_error(asio::use_awaitable, waited));
        finished = true;
        co_return std::string("late");
      },
      opts(60s))));
  Result<ToolOutput> r = Error(Errc::ok, "");
  auto caller = [&]() -> asio::awaitable<void> {
    auto call_op = reg.async_call("hang", json::object(), ToolContext());
    asio::steady_timer t(co_await asio::this_coro::executor, 50ms);
    auto wait_op = t.async_wait(asio::use_awaitable);
    auto race = std::move(call_op) || std::move(wait_op);
    auto v = co_await std::move(race);
    EXPECT_EQ(v.index(), 1u);  // the timer won
  };
  auto check = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor, 300ms);
    co_await t.async_wait(asio::use_awaitable);
    EXPECT_TRUE(finished);
    EXPECT_EQ(waited, asio::error::operation_aborted);
    EXPECT_EQ(reg.in_flight("hang"), 0u);
    gate.cancel();
  };
  spawn(io, caller());
  spawn(io, check());
  io.run();
}

// Two callers of a one-slot tool, A holding the slot and B waiting for it, cancelled a few
// handlers apart (found by a breaking pass: with B's cancel two or three hops after A's, B was
// granted the slot as its cancel came, its call threw out of async_call, and its invocation ran
// to its end, holding the slot). Each call now ends with a result and no invocation runs on.
TEST(ToolRegistryTest, ACallCancelledAsItGetsItsSlotEndsCancelledAndStartsNothing) {
  for (int hops = 0; hops < 6; ++hops) {
    std::atomic<int> started{0}, ran_out{0};
    ToolRegistry reg;
    ASSERT_TRUE(reg.add(make_async_tool(
        "zz", "sleeps", no_args_schema(),
        [&](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
          ++started;
          asio::steady_timer t(co_await asio::this_coro::executor, 2s);
          co_await t.async_wait(asio::use_awaitable);
          ++ran_out;
          co_return std::string("done");
        },
        opts(10s, 1))));
    asio::io_context io;
    asio::cancellation_signal sa, sb;
    std::vector<std::string> outcomes;
    auto caller = [&]() -> asio::awaitable<void> {
      auto op = reg.async_call("zz", json::object(), ToolContext());
      try {
        auto r = co_await std::move(op);
        outcomes.push_back(show(r));
      } catch (const std::exception& e) {
        outcomes.push_back(std::string("threw: ") + e.what());
      }
    };
    asio::co_spawn(io, caller(), asio::bind_cancellation_slot(sa.slot(), asio::detached));
    asio::co_spawn(io, caller(), asio::bind_cancellation_slot(sb.slot(), asio::detached));
    std::function<void(int)> hop = [&](int n) {
      if (n == 0) return sb.emit(asio::cancellation_type::terminal);
      asio::post(io, [&hop, n] { hop(n - 1); });
    };
    asio::steady_timer t(io, 50ms);
    t.async_wait([&](boost::system::error_code) {
      sa.emit(asio::cancellation_type::terminal);
      hop(hops);
    });
    io.run();
    ASSERT_EQ(outcomes.size(), 2u) << hops;
    for (const auto& o : outcomes)  // "the call was cancelled", or its wait for a permit was
      EXPECT_EQ(o.substr(0, 20), "cancelled: tool 'zz'") << o << ", " << hops << " hops";
    EXPECT_EQ(ran_out.load(), 0) << hops << " hops";
    EXPECT_EQ(reg.in_flight("zz"), 0u);
  }
}

TEST(ToolRegistryTest, HungSyncToolDoesNotBlockTheCaller) {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_tool(
      "stuck", "blocks", no_args_schema(),
      [gate](const json::object&, const ToolContext&) -> Result<std::string> {
        gate.wait();
        return std::string("late");
      },
      opts(100ms))));
  ASSERT_TRUE(reg.add(make_calculator()));
  asio::io_context io;  // one thread: a blocking body on it would stall everything
  Result<ToolOutput> stuck_r = Error(Errc::ok, ""), calc_r = Error(Errc::ok, "");
  Clock::duration stuck_took{};
  const auto start = Clock::now();
  auto stuck_call = [&]() -> asio::awaitable<void> {
    auto call_op =
        reg.async_call("stuck", json::object(), ToolContext());  // built outside co_await (GCC 12)
    stuck_r = co_await std::move(call_op);
    stuck_took = Clock::now() - start;
    release.set_value();  // let the body return so the pool can be joined
  };
  auto calc_call = [&]() -> asio::awaitable<void> {
    auto call_op = reg.async_call("calculator", obj(R"({"expression":"2*3"})"),
                                  ToolContext());  // built outside co_await (GCC 12)
    calc_r = co_await std::move(call_op);
  };
  spawn(io, stuck_call());
  spawn(io, calc_call());
  io.run();
  ASSERT_FALSE(stuck_r);
  EXPECT_EQ(stuck_r.error().to_string(), "tool_timeout: tool 'stuck' did not answer within 100 ms");
  EXPECT_LT(stuck_took, 1s);
  ASSERT_TRUE(calc_r);
  EXPECT_EQ(calc_r->content, "6");
}

TEST(ToolRegistryTest, ConcurrencyLimitIsRespected) {
  std::atomic<int> now{0}, peak{0};
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_async_tool(
      "slow", "d", no_args_schema(),
      [&](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
        const int n = ++now;
        int p = peak.load();
        while (n > p && !peak.compare_exchange_weak(p, n)) {
        }
        asio::steady_timer t(co_await asio::this_coro::executor, 20ms);
        co_await t.async_wait(asio::use_awaitable);
        --now;
        co_return std::string("done");
      },
      opts(5s, 3))));
  asio::io_context io;
  int ok = 0;
  auto one = [&]() -> asio::awaitable<void> {
    auto call_op =
        reg.async_call("slow", json::object(), ToolContext());  // built outside co_await (GCC 12)
    auto r = co_await std::move(call_op);
    if (r && r->content == "done") ++ok;
  };
  for (int i = 0; i < 10; ++i) spawn(io, one());
  io.run();
  EXPECT_EQ(ok, 10);
  EXPECT_EQ(peak.load(), 3);
  EXPECT_EQ(reg.in_flight("slow"), 0u);
}

// A slot is held until the caller has consumed the output (checks, spill), not only until the
// tool returns: outputs that exist at once stay within max_concurrency however many callers
// queue (the gauntlet's 50 MB tool: 20 queued callers held 200 MB before this).
TEST(ToolRegistryTest, OutputsAliveAtOnceStayWithinMaxConcurrency) {
  int produced = 0, consumed = 0, peak_alive = 0;
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_async_tool(
      "big", "d", no_args_schema(),
      [&](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
        ++produced;
        peak_alive = std::max(peak_alive, produced - consumed);
        co_return std::string(100000, 'b');
      },
      opts(5s, 2))));
  asio::io_context io;
  auto one = [&]() -> asio::awaitable<void> {
    auto call_op = reg.async_call("big", json::object(), ToolContext());
    auto r = co_await std::move(call_op);
    if (r) ++consumed;
  };
  for (int i = 0; i < 20; ++i) spawn(io, one());
  io.run();
  EXPECT_EQ(consumed, 20);
  EXPECT_LE(peak_alive, 2);
}

TEST(ToolRegistryTest, WaitingForASlotCountsAgainstTheTimeout) {
  asio::io_context io;
  asio::steady_timer gate(io, Clock::time_point::max());
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_async_tool(
      "single", "d", no_args_schema(),
      [&gate](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
        boost::system::error_code ec;
        co_await gate.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        co_return std::string("x");
      },
      opts(100ms, 1))));
  Result<ToolOutput> first = Error(Errc::ok, ""), second = Error(Errc::ok, "");
  auto a = [&]() -> asio::awaitable<void> {
    auto call_op =
        reg.async_call("single", json::object(), ToolContext());  // built outside co_await (GCC 12)
    first = co_await std::move(call_op);
  };
  auto b = [&]() -> asio::awaitable<void> {
    auto call_op =
        reg.async_call("single", json::object(), ToolContext());  // built outside co_await (GCC 12)
    second = co_await std::move(call_op);
    gate.cancel();
  };
  spawn(io, a());
  spawn(io, b());
  io.run();
  EXPECT_EQ(show(first), "tool_timeout: tool 'single' did not answer within 100 ms");
  EXPECT_EQ(show(second),
            "tool_timeout: tool 'single' did not answer within 100 ms (all 1 of its concurrency "
            "slots stayed busy; max_concurrency=1)");
}

// Many callers on a multi-threaded pool: fast calls all answer, slow ones all time out, and
// every invocation finishes (nothing left in flight) once the pool drains.
TEST(ToolRegistryTest, ManyCallersOnAThreadPool) {
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_calculator()));
  ASSERT_TRUE(reg.add(make_async_tool(
      "slow", "d", no_args_schema(),
      [](json::object, const ToolContext&) -> asio::awaitable<Result<std::string>> {
        asio::steady_timer t(co_await asio::this_coro::executor, 80ms);
        co_await t.async_wait(asio::use_awaitable);
        co_return std::string("late");
      },
      opts(20ms, 64))));
  std::atomic<int> answered{0}, timed_out{0};
  {
    asio::thread_pool pool(4);
    auto fast = [&](int i) -> asio::awaitable<void> {
      auto op = reg.async_call("calculator", obj(R"({"expression":"3*4"})"), ToolContext());
      auto r = co_await std::move(op);
      if (r && r->content == "12") ++answered;
    };
    auto slow = [&]() -> asio::awaitable<void> {
      auto op = reg.async_call("slow", json::object(), ToolContext());
      auto r = co_await std::move(op);
      if (!r && r.error().is(Errc::tool_timeout)) ++timed_out;
    };
    for (int i = 0; i < 100; ++i) {
      asio::co_spawn(pool, fast(i), asio::use_future);
      asio::co_spawn(pool, slow(), asio::use_future);
    }
    pool.join();
  }
  EXPECT_EQ(answered.load(), 100);
  EXPECT_EQ(timed_out.load(), 100);
  EXPECT_EQ(reg.in_flight("slow"), 0u);
}

TEST(ToolRegistryTest, RateLimitFailsWhenTheNextTokenComesAfterTheTimeout) {
  ToolOptions o = opts(200ms);
  o.rate_per_minute = 2;
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_tool(
      "rated", "d", no_args_schema(),
      [](const json::object&, const ToolContext&) -> Result<std::string> {
        return std::string("ok");
      },
      o)));
  EXPECT_EQ(show(call(reg, "rated", "{}")), "ok: ok");
  EXPECT_EQ(show(call(reg, "rated", "{}")), "ok: ok");
  EXPECT_EQ(show(call(reg, "rated", "{}")),
            "overloaded: tool 'rated': rate limit of 2 calls per minute reached, and the next "
            "call slot opens after its 200 ms timeout; retry later or raise rate_per_minute");
}

TEST(ToolRegistryTest, RateLimitWaitsWhenTheTokenComesInTime) {
  ToolOptions o = opts(1s);
  o.rate_per_minute = 600;  // one every 100 ms
  o.rate_burst = 1;
  ToolRegistry reg;
  ASSERT_TRUE(reg.add(make_tool(
      "rated", "d", no_args_schema(),
      [](const json::object&, const ToolContext&) -> Result<std::string> {
        return std::string("ok");
      },
      o)));
  const auto start = Clock::now();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(show(call(reg, "rated", "{}")), "ok: ok");
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 280ms);  // three waits of ~100 ms
  EXPECT_LT(took, 900ms);
}

}  // namespace
}  // namespace weir::tools
