#include "weir/runtime/executor.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "weir/runtime/error.hpp"

namespace weir {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST(Executor, DefaultsToHardwareThreads) {
  Executor ex;
  EXPECT_EQ(ex.thread_count(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(Executor, RunSyncReturnsValueAndRethrows) {
  Executor ex(2);
  int v = ex.run_sync([]() -> asio::awaitable<int> { co_return 41 + 1; }());
  EXPECT_EQ(v, 42);
  EXPECT_THROW(ex.run_sync([]() -> asio::awaitable<int> {
    throw Exception(Errc::corrupt_data, "bad");
    co_return 0;
  }()),
               Exception);
}

// An exception escaping a spawned task reaches its completion, never silently lost.
TEST(Executor, SpawnReportsExceptions) {
  Executor ex(2);
  std::atomic<int> failures{0}, successes{0};
  // Coroutine lambdas must outlive their coroutines: parameters, not captures, carry values.
  auto task = [](int i) -> asio::awaitable<void> {
    if (i % 2) throw std::runtime_error("node blew up");
    co_return;
  };
  for (int i = 0; i < 100; ++i) {
    ex.spawn(task(i), [&](std::exception_ptr e) { (e ? failures : successes)++; });
  }
  ex.shutdown(10s);
  EXPECT_EQ(failures.load(), 50);
  EXPECT_EQ(successes.load(), 50);
}

// Shutdown waits for in-flight work to finish within the grace period.
TEST(Executor, ShutdownFinishesInFlightWork) {
  Executor ex(2);
  std::atomic<int> done{0};
  auto task = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor, 5ms);
    co_await t.async_wait(asio::use_awaitable);
    ++done;
  };
  for (int i = 0; i < 1000; ++i) ex.spawn(task());
  EXPECT_EQ(ex.shutdown(10s), 0u);
  EXPECT_EQ(done.load(), 1000);
  EXPECT_EQ(ex.in_flight(), 0u);
}

// Work that would wait forever is cancelled after the grace period; shutdown never hangs.
TEST(Executor, ShutdownCancelsStuckWorkAndNeverHangs) {
  Executor ex(2);
  std::atomic<int> aborted{0};
  auto task = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
    boost::system::error_code ec;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted) ++aborted;
  };
  for (int i = 0; i < 10; ++i) ex.spawn(task());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ex.shutdown(50ms), 10u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(aborted.load(), 10);
}

TEST(Executor, SpawnAfterShutdownIsRefusedWithCancelled) {
  Executor ex(1);
  ex.shutdown();
  std::exception_ptr got;
  auto task = []() -> asio::awaitable<void> { co_return; };
  ex.spawn(task(), [&](std::exception_ptr e) { got = e; });
  ASSERT_TRUE(got);
  try {
    std::rethrow_exception(got);
  } catch (const Exception& e) {
    EXPECT_TRUE(e.error().is(Errc::cancelled));
  }
}

}  // namespace
}  // namespace weir
