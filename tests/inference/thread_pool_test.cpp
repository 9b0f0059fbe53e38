// ThreadPool::parallel_for: every index is run exactly once, each thread starts on its own
// contiguous share, and a thread that stalls has its share finished by the others.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/thread_pool.hpp"

namespace weir::inference {
namespace {

TEST(ThreadPool, EveryIndexRunsOnceOverManyCalls) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (std::int64_t n : {0, 1, 2, 3, 7, 16, 17, 100, 1001}) {
      for (int rep = 0; rep < 20; ++rep) {  // back-to-back generations, as in a decode step
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        pool.parallel_for(n, [&](int thread, std::int64_t b, std::int64_t e) {
          ASSERT_GE(thread, 0);
          ASSERT_LT(thread, threads);
          ASSERT_LE(0, b);
          ASSERT_LE(b, e);
          ASSERT_LE(e, n);
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        for (std::int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1)
              << "index " << i << " of " << n << ", " << threads << " threads";
      }
    }
  }
}

// The first chunk each thread runs is the first of its own share: thread t begins at
// about t * n / threads, so each core reads its own slice of a weight matrix front to back.
TEST(ThreadPool, EachThreadStartsOnItsOwnShare) {
  constexpr int kThreads = 3;
  constexpr std::int64_t kN = 24 * kThreads;  // 8 chunks a thread, 3 indices each
  ThreadPool pool(kThreads);
  std::vector<std::int64_t> first(kThreads, -1);
  std::atomic<int> arrived{0};
  pool.parallel_for(kN, [&](int thread, std::int64_t b, std::int64_t) {
    if (first[static_cast<std::size_t>(thread)] < 0) {
      first[static_cast<std::size_t>(thread)] = b;
      // Hold every thread on its first chunk until all have one, so none steals before the
      // others start (bounded: a worker the OS never schedules must not hang the test).
      arrived.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (arrived.load() < kThreads && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    }
  });
  if (arrived.load() < kThreads) GTEST_SKIP() << "a worker did not get a core within 2 s";
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(first[static_cast<std::size_t>(t)], t * kN / kThreads);
}

// A thread that stalls on its first chunk does not hold up the rest of its share: the others
// claim it, so the call returns once the stalled chunk itself is done.
TEST(ThreadPool, OthersFinishAStalledThreadsShare) {
  ThreadPool pool(2);
  constexpr std::int64_t kN = 64;
  std::vector<int> runner(kN, -1);
  std::atomic<bool> stalled{false};
  pool.parallel_for(kN, [&](int thread, std::int64_t b, std::int64_t e) {
    if (thread == 1 && !stalled.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } else if (thread == 0 && b == 0) {  // let the worker claim its first chunk (bounded wait)
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!stalled.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    }
    for (std::int64_t i = b; i < e; ++i) runner[static_cast<std::size_t>(i)] = thread;
  });
  for (std::int64_t i = 0; i < kN; ++i) ASSERT_NE(runner[static_cast<std::size_t>(i)], -1) << i;
  if (!stalled.load()) GTEST_SKIP() << "the worker did not get a core within 2 s";
  // Thread 1's share is the second half; it slept on one chunk, so thread 0 ran most of it.
  const auto by_0 = std::count(runner.begin() + kN / 2, runner.end(), 0);
  EXPECT_GE(by_0, kN / 4) << "thread 0 ran " << by_0 << " of thread 1's " << kN / 2 << " indices";
}

}  // namespace
}  // namespace weir::inference
