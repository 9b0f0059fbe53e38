#include "weir/runtime/memory_budget.hpp"

#include <atomic>
#include <chrono>

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/runtime/executor.hpp"

namespace weir {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using BC = BudgetCategory;

BudgetLimits limits(std::size_t total, std::size_t run_state = kUnlimited,
                    std::size_t kv = kUnlimited) {
  BudgetLimits l;
  l.total = total;
  l.category[static_cast<int>(BC::run_state)] = run_state;
  l.category[static_cast<int>(BC::kv_cache)] = kv;
  return l;
}

TEST(MemoryBudget, TryReserveTracksUseAndPeakAndRefusesOverLimit) {
  MemoryBudget b(limits(10 << 20, 4 << 20));
  {
    auto r = b.try_reserve(BC::run_state, 3 << 20);
    ASSERT_TRUE(r);
    EXPECT_EQ(b.used(BC::run_state), 3u << 20);
    auto over = b.try_reserve(BC::run_state, 2 << 20);
    ASSERT_FALSE(over);
    EXPECT_TRUE(over.error().is(Errc::memory_budget_exceeded));
    EXPECT_EQ(over.error().message,
              "run_state needs 2.0 MiB more but 3.0 MiB of its 4.0 MiB limit is in use; raise "
              "limits.run_state or lower the load");
    auto kv = b.try_reserve(BC::kv_cache, 8 << 20);
    ASSERT_FALSE(kv);
    EXPECT_EQ(kv.error().message,
              "kv_cache needs 8.0 MiB more but 3.0 MiB of the 10.0 MiB total budget is in use; "
              "raise limits.memory_total or lower the load");
    EXPECT_EQ(b.headroom(BC::kv_cache), 7u << 20);
  }
  EXPECT_EQ(b.used_total(), 0u);
  EXPECT_EQ(b.peak(BC::run_state), 3u << 20);
  EXPECT_EQ(b.peak_total(), 3u << 20);
}

// A budget without limits has unlimited headroom however much is in use: a caller that sizes
// something from headroom() (the engine's KV pool) reads "no limit", not "unlimited minus what
// is used" (which made a second engine ask for 2^31 blocks).
TEST(MemoryBudget, HeadroomOfAnUnlimitedBudgetStaysUnlimited) {
  MemoryBudget b;
  auto r = b.try_reserve(BC::kv_cache, 64 << 20);
  ASSERT_TRUE(r);
  EXPECT_EQ(b.headroom(BC::kv_cache), kUnlimited);
  BudgetLimits only_total;
  only_total.total = 100 << 20;
  MemoryBudget t(only_total);
  auto r2 = t.try_reserve(BC::kv_cache, 64 << 20);
  ASSERT_TRUE(r2);
  EXPECT_EQ(t.headroom(BC::kv_cache), std::size_t{36} << 20);
}

TEST(MemoryBudget, ResizeGrowsWithinLimitAndFailsWithoutChange) {
  MemoryBudget b(limits(100));
  auto r = b.try_reserve(BC::history, 40);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->resize(90));
  EXPECT_EQ(b.used(BC::history), 90u);
  auto s = r->resize(101);
  EXPECT_FALSE(s);
  EXPECT_EQ(r->bytes(), 90u);
  EXPECT_TRUE(r->resize(10));
  EXPECT_EQ(b.used_total(), 10u);
}

// A reservation that does not fit waits, then proceeds when another is released.
TEST(MemoryBudget, AsyncReserveWaitsForHeadroomThenProceeds) {
  asio::io_context io;
  MemoryBudget b(limits(100));
  auto first = b.try_reserve(BC::kv_cache, 80);
  ASSERT_TRUE(first);
  bool got = false;
  auto task = [&]() -> asio::awaitable<void> {
    auto r = co_await b.async_reserve(BC::kv_cache, 50, 10s);
    EXPECT_TRUE(r);
    got = r.has_value();
    EXPECT_EQ(b.used(BC::kv_cache), 50u);
  };
  asio::co_spawn(io, task(), asio::detached);
  io.poll();
  EXPECT_FALSE(got);
  EXPECT_EQ(b.waiting(), 1u);
  first->release();
  io.run();
  EXPECT_TRUE(got);
  EXPECT_EQ(b.used_total(), 0u);
}

TEST(MemoryBudget, AsyncReserveDeadlineGivesTypedError) {
  asio::io_context io;
  MemoryBudget b(limits(100));
  auto held = b.try_reserve(BC::activations, 100);
  std::optional<Error> err;
  auto task = [&]() -> asio::awaitable<void> {
    auto r = co_await b.async_reserve(BC::activations, 10, 20ms);
    if (!r) err = r.error();
  };
  asio::co_spawn(io, task(), asio::detached);
  auto t0 = std::chrono::steady_clock::now();
  io.run();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  ASSERT_TRUE(err);
  EXPECT_TRUE(err->is(Errc::deadline_exceeded));
  EXPECT_EQ(err->message,
            "waited 20 ms for 10 B of activations memory; the budget stayed full. activations "
            "needs 10 B more but 100 B of the 100 B total budget is in use; raise "
            "limits.memory_total or lower the load");
  EXPECT_EQ(b.waiting(), 0u);
  held->release();
  EXPECT_EQ(b.used_total(), 0u);
}

TEST(MemoryBudget, RequestThatCanNeverFitFailsAtOnce) {
  asio::io_context io;
  MemoryBudget b(limits(1000, 100));
  std::optional<Error> err;
  auto task = [&]() -> asio::awaitable<void> {
    auto r = co_await b.async_reserve(BC::run_state, 101, 10s);
    if (!r) err = r.error();
  };
  asio::co_spawn(io, task(), asio::detached);
  io.poll();
  ASSERT_TRUE(err);
  EXPECT_EQ(err->to_string(),
            "memory_budget_exceeded: run_state request of 101 B can never fit: its limit is "
            "100 B; raise limits.run_state or send smaller requests");
}

// FIFO within a category: a big waiter at the head is not starved by later small ones.
TEST(MemoryBudget, WaitersOfACategoryAreServedInOrder) {
  asio::io_context io;
  MemoryBudget b(limits(100));
  auto held = b.try_reserve(BC::kv_cache, 100);
  std::vector<int> order;
  auto waiter = [&](int id, std::size_t bytes) -> asio::awaitable<void> {
    auto r = co_await b.async_reserve(BC::kv_cache, bytes, 10s);
    EXPECT_TRUE(r);
    order.push_back(id);
  };
  asio::co_spawn(io, waiter(1, 90), asio::detached);
  asio::co_spawn(io, waiter(2, 10), asio::detached);
  io.poll();
  ASSERT_TRUE(held->resize(50));  // 50 free: fits #2 but #1 is first and must not be overtaken
  io.poll();
  EXPECT_TRUE(order.empty());
  held->release();
  io.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(MemoryBudget, CancelledWaiterReservesNothing) {
  asio::io_context io;
  MemoryBudget b(limits(100));
  auto held = b.try_reserve(BC::history, 100);
  asio::cancellation_signal sig;
  std::optional<Error> err;
  auto task = [&]() -> asio::awaitable<void> {
    auto r = co_await b.async_reserve(BC::history, 60, 10s);
    if (!r) err = r.error();
  };
  asio::co_spawn(io, task(), asio::bind_cancellation_slot(sig.slot(), asio::detached));
  io.poll();
  sig.emit(asio::cancellation_type::terminal);
  io.run();
  ASSERT_TRUE(err);
  EXPECT_TRUE(err->is(Errc::cancelled));
  held->release();
  EXPECT_EQ(b.used_total(), 0u);
  EXPECT_EQ(b.waiting(), 0u);
}

// Thousands of coroutines on a pool reserve and release: totals stay within limits and end at 0.
TEST(MemoryBudget, ContentionKeepsAccountingExact) {
  Executor ex(4);
  MemoryBudget b(limits(1 << 20));
  std::atomic<int> done{0};
  std::atomic<std::size_t> max_seen{0};
  auto task = [&](int i) -> asio::awaitable<void> {
    auto r = co_await b.async_reserve(BC::run_state, 1000 + (i % 50) * 1000, 30s);
    EXPECT_TRUE(r);
    std::size_t u = b.used_total();
    std::size_t prev = max_seen.load();
    while (u > prev && !max_seen.compare_exchange_weak(prev, u)) {
    }
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(10));
    co_await t.async_wait(asio::use_awaitable);
    ++done;
  };
  for (int i = 0; i < 4000; ++i) ex.spawn(task(i));
  ex.shutdown(60s);
  EXPECT_EQ(done.load(), 4000);
  EXPECT_LE(max_seen.load(), std::size_t{1} << 20);
  EXPECT_EQ(b.used_total(), 0u);
  EXPECT_LE(b.peak_total(), std::size_t{1} << 20);
}

// Run state allocated through the accounting resource is charged exactly; going over the
// per-run cap is a typed error for that allocation, not a crash.
TEST(AccountingResource, ChargesBudgetAndFailsOverLocalLimit) {
  MemoryBudget b(limits(1 << 20));
  {
    AccountingResource res(&b, BC::run_state, 64 * 1024, "run 7 state");
    boost::json::storage_ptr sp(&res);
    boost::json::object state(sp);
    state["name"] = "a string long enough to need its own allocation, for sure";
    state["list"] = boost::json::array({1, 2, 3}, sp);
    EXPECT_GT(res.bytes(), 0u);
    EXPECT_EQ(b.used(BC::run_state), res.bytes());
    try {
      state["big"] = boost::json::string(std::string(100 * 1024, 'x'), sp);
      FAIL() << "allocation over the run's limit must throw";
    } catch (const Exception& e) {
      EXPECT_TRUE(e.error().is(Errc::memory_budget_exceeded));
      EXPECT_NE(e.error().message.find("run 7 state would grow to"), std::string::npos)
          << e.error().message;
      EXPECT_NE(e.error().message.find("over its limit of 64.0 KiB"), std::string::npos);
    }
    EXPECT_EQ(state.size(), 2u);  // the failed write left state as it was
    EXPECT_EQ(b.used(BC::run_state), res.bytes());
    state.clear();
    boost::json::object().swap(state);
  }
  EXPECT_EQ(b.used_total(), 0u);
}

TEST(AccountingResource, GlobalBudgetExhaustionIsTyped) {
  MemoryBudget b(limits(1 << 20, 1024));
  AccountingResource res(&b, BC::run_state, kUnlimited, "run 9 state");
  boost::json::storage_ptr sp(&res);
  try {
    boost::json::string s(std::string(4096, 'y'), sp);
    FAIL();
  } catch (const Exception& e) {
    EXPECT_EQ(e.error().message.substr(0, 33), "run 9 state: run_state needs 4.0 ");
  }
  EXPECT_EQ(b.used_total(), 0u);
}

}  // namespace
}  // namespace weir
