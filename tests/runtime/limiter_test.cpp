#include "weir/runtime/limiter.hpp"

#include <atomic>
#include <chrono>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "weir/runtime/executor.hpp"

namespace weir {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

TEST(Limiter, TryAcquireRespectsCapacityAndPermitsAreRaii) {
  Limiter lim("test limiter", 2, 10);
  auto a = lim.try_acquire();
  auto b = lim.try_acquire();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(lim.try_acquire());
  EXPECT_EQ(lim.in_use(), 2u);
  a.reset();
  EXPECT_EQ(lim.in_use(), 1u);
  auto c = lim.try_acquire();
  EXPECT_TRUE(c);
  c->release();
  c->release();  // idempotent
  EXPECT_EQ(lim.in_use(), 1u);
}

// Thousands of coroutines on a multi-threaded pool contend for 8 permits: never more than 8
// hold one at once, and every one of them finishes.
TEST(Limiter, ThousandsOfCoroutinesNeverExceedCapacity) {
  Executor ex(4);
  Limiter lim("test limiter", 8, 100000);
  std::atomic<int> holders{0}, max_holders{0}, done{0};
  constexpr int kTasks = 5000;
  auto task = [&]() -> asio::awaitable<void> {
    auto permit = co_await lim.async_acquire();
    EXPECT_TRUE(permit.has_value());
    int now = ++holders;
    int prev = max_holders.load();
    while (now > prev && !max_holders.compare_exchange_weak(prev, now)) {
    }
    co_await sleep_for(0ms);
    --holders;
    ++done;
  };
  for (int i = 0; i < kTasks; ++i) ex.spawn(task());
  ex.shutdown(30s);
  EXPECT_EQ(done.load(), kTasks);
  EXPECT_LE(max_holders.load(), 8);
  EXPECT_GE(max_holders.load(), 2);
  EXPECT_EQ(lim.in_use(), 0u);
  EXPECT_EQ(lim.waiting(), 0u);
}

TEST(Limiter, QueueOverflowIsOverloadedAtOnce) {
  asio::io_context io;
  Limiter lim("run limiter (limits.max_concurrent_runs=1, limits.max_queued_runs=2)", 1, 2);
  auto held = lim.try_acquire();
  ASSERT_TRUE(held);
  int granted = 0;
  std::vector<Error> errors;
  auto task = [&]() -> asio::awaitable<void> {
    auto p = co_await lim.async_acquire();
    if (p) {
      ++granted;
    } else {
      errors.push_back(p.error());
    }
  };
  for (int i = 0; i < 4; ++i) asio::co_spawn(io, task(), asio::detached);
  io.poll();
  ASSERT_EQ(errors.size(), 2u);  // two queued, two refused
  EXPECT_TRUE(errors[0].is(Errc::overloaded));
  EXPECT_EQ(errors[0].message,
            "run limiter (limits.max_concurrent_runs=1, limits.max_queued_runs=2): all 1 permits "
            "in use and 2 waiting, the queue's limit; retry later or raise the limits");
  EXPECT_EQ(lim.waiting(), 2u);
  EXPECT_EQ(lim.rejected(), 2u);
  held.reset();  // the first waiter gets the permit, finishes, hands it to the second
  io.run();
  EXPECT_EQ(granted, 2);
  EXPECT_EQ(lim.in_use(), 0u);
}

// A waiter cancelled while queued leaves the queue; the permit later released is not lost.
TEST(Limiter, CancelledWaiterLeavesQueueAndLeaksNoPermit) {
  asio::io_context io;
  Limiter lim("test limiter", 1, 10);
  auto held = lim.try_acquire();
  asio::cancellation_signal cancel;
  std::optional<Error> cancelled_error;
  auto task = [&]() -> asio::awaitable<void> {
    auto p = co_await lim.async_acquire();
    if (!p) cancelled_error = p.error();
  };
  asio::co_spawn(io, task(), asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  io.poll();
  EXPECT_EQ(lim.waiting(), 1u);
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  ASSERT_TRUE(cancelled_error);
  EXPECT_TRUE(cancelled_error->is(Errc::cancelled));
  EXPECT_EQ(cancelled_error->message, "test limiter: the wait for a permit was cancelled");
  EXPECT_EQ(lim.waiting(), 0u);
  held.reset();
  EXPECT_EQ(lim.in_use(), 0u);
  EXPECT_TRUE(lim.try_acquire());
}

// Cancellations racing with releases on a thread pool never leak or double-count a permit.
TEST(Limiter, CancellationRacingWithReleaseKeepsCountsExact) {
  Executor ex(4);
  Limiter lim("test limiter", 4, 100000);
  std::atomic<int> ok{0}, cancelled{0};
  constexpr int kTasks = 3000;
  // Each task runs on its own strand, so its timer handler and its coroutine never run at
  // once; the signal is shared with the handler, which may run after the coroutine ended (an
  // expiry already queued when the acquire completed), and `done` keeps it from firing then.
  auto task = [&](int i) -> asio::awaitable<void> {
    auto ex2 = co_await asio::this_coro::executor;
    asio::steady_timer deadline(ex2, std::chrono::microseconds(50 + (i % 7) * 30));
    auto sig = std::make_shared<asio::cancellation_signal>();
    auto done = std::make_shared<bool>(false);
    deadline.async_wait([sig, done](boost::system::error_code ec) {
      if (!ec && !*done) sig->emit(asio::cancellation_type::terminal);
    });
    auto p = co_await asio::co_spawn(
        ex2, lim.async_acquire(), asio::bind_cancellation_slot(sig->slot(), asio::use_awaitable));
    *done = true;
    deadline.cancel();
    if (p) {
      ++ok;
      co_await sleep_for(0ms);
    } else {
      EXPECT_TRUE(p.error().is(Errc::cancelled));
      ++cancelled;
    }
  };
  for (int i = 0; i < kTasks; ++i)
    ex.spawn(asio::co_spawn(asio::make_strand(ex.get_executor()), task(i), asio::use_awaitable));
  ex.shutdown(60s);
  EXPECT_EQ(ok + cancelled, kTasks);
  EXPECT_EQ(lim.in_use(), 0u);
  EXPECT_EQ(lim.waiting(), 0u);
}

}  // namespace
}  // namespace weir
