// ThreadPool under stress: millions of small parallel_for calls back to back on 2 to 8
// threads, with yields injected at every step of the pool's protocol (this binary compiles
// kernels/thread_pool.cpp itself with WEIR_THREAD_POOL_STRESS) and in the chunks. Each call must
// run every index exactly once and return; a call that does not return within kHangSeconds is
// a deadlock, reported by a watchdog that ends the process (a hang must fail the test, not
// stall the suite). Built with ThreadSanitizer outside sanitizer builds
// (tests/inference/CMakeLists.txt: thread_pool_stress_test), so a data race on the pool's state
// is reported too.
//
// Each thread count runs WEIR_POOL_STRESS_CALLS calls (default 300,000: 1.2 million in all) or
// until WEIR_POOL_STRESS_SECONDS (default 100) have passed, whichever comes first, and prints
// how many ran: a quiet machine runs them all; one shared by many builds (where every injected
// yield costs a time slice) runs fewer in bounded time. The hang watchdog is separate.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/thread_pool.hpp"

namespace weir::inference {
namespace {

constexpr int kHangSeconds = 60;

// Ends the process when `progress` stops moving for kHangSeconds while armed.
class Watchdog {
 public:
  explicit Watchdog(std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void tick() { progress_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void watch() {
    std::unique_lock lock(mu_);
    std::uint64_t last = progress_.load();
    auto since = std::chrono::steady_clock::now();
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_; })) {
      const std::uint64_t now = progress_.load();
      if (now != last) {
        last = now;
        since = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - since > std::chrono::seconds(kHangSeconds)) {
        std::fprintf(stderr,
                     "FAILED: ThreadPool deadlock: %s: parallel_for call %llu has not returned "
                     "in %d s\n",
                     what_.c_str(), static_cast<unsigned long long>(now), kHangSeconds);
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  std::string what_;
  std::atomic<std::uint64_t> progress_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

std::int64_t env_or(const char* name, std::int64_t fallback) {
  if (const char* e = std::getenv(name); e && *e) return std::atoll(e);
  return fallback;
}

std::uint32_t next_random(std::uint32_t& s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

// 4 thread counts x 300,000 calls: 1.2 million calls, each index checked.
TEST(ThreadPoolStress, MillionsOfSmallCallsNeverHangAndRunEveryIndexOnce) {
  const std::int64_t calls = env_or("WEIR_POOL_STRESS_CALLS", 300'000);
  const auto budget = std::chrono::seconds(env_or("WEIR_POOL_STRESS_SECONDS", 100));
  constexpr std::int64_t kMaxN = 67;
  for (int threads : {2, 3, 4, 8}) {
    Watchdog dog(std::to_string(threads) + " threads");
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(kMaxN);
    std::uint32_t rng = 0x9e3779b9u + static_cast<std::uint32_t>(threads);
    const auto t0 = std::chrono::steady_clock::now();
    std::int64_t call = 0;
    for (; call < calls; ++call) {
      if ((call & 1023) == 0 && std::chrono::steady_clock::now() - t0 > budget) break;
      // Mostly tiny calls (fewer chunks than threads, one chunk a thread, ...), some larger.
      const std::int64_t n = 2 + static_cast<std::int64_t>(next_random(rng) % (kMaxN - 1));
      const std::uint32_t salt = next_random(rng);
      pool.parallel_for(n, [&](int thread, std::int64_t b, std::int64_t e) {
        if (thread < 0 || thread >= threads || b < 0 || b > e || e > n) {
          std::fprintf(stderr, "FAILED: chunk [%lld, %lld) of n=%lld on thread %d\n",
                       static_cast<long long>(b), static_cast<long long>(e),
                       static_cast<long long>(n), thread);
          std::_Exit(1);
        }
        if (((salt >> (thread & 15)) & 7) == 0) std::this_thread::yield();
        for (std::int64_t i = b; i < e; ++i)
          hits[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
      });
      for (std::int64_t i = 0; i < kMaxN; ++i) {
        const int h = hits[static_cast<std::size_t>(i)].exchange(0, std::memory_order_relaxed);
        if (h != (i < n ? 1 : 0)) {
          ADD_FAILURE() << "index " << i << " of n=" << n << " ran " << h << " times (call " << call
                        << ", " << threads << " threads)";
          return;
        }
      }
      dog.tick();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d threads: %lld calls in %.1f s\n", threads, static_cast<long long>(call), s);
    EXPECT_GT(call, 0);
  }
}

// A chunk that throws: the exception reaches parallel_for's caller once every other chunk
// of the call is done (none runs after the caller's function is gone), and the pool keeps
// working.
TEST(ThreadPoolStress, AThrowingChunkReachesTheCallerAfterTheOthersFinish) {
  Watchdog dog("throwing chunks");
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 500; ++rep) {
      std::atomic<int> running{0}, ran{0}, thrown{0};
      bool caught = false;
      try {
        pool.parallel_for(64, [&](int, std::int64_t b, std::int64_t e) {
          running.fetch_add(1);
          if (b <= 5 && 5 < e) {
            thrown.store(static_cast<int>(e - b));
            running.fetch_sub(1);
            throw std::runtime_error("chunk 5 failed");
          }
          std::this_thread::yield();
          ran.fetch_add(static_cast<int>(e - b));
          running.fetch_sub(1);
        });
      } catch (const std::runtime_error& e) {
        caught = std::string(e.what()) == "chunk 5 failed";
      }
      ASSERT_TRUE(caught) << "rep " << rep;
      ASSERT_EQ(running.load(), 0) << "a chunk still ran after parallel_for returned";
      ASSERT_EQ(ran.load() + thrown.load(), 64)
          << "rep " << rep << ": the other chunks did not all run";
      std::atomic<int> after{0};
      pool.parallel_for(10, [&](int, std::int64_t b, std::int64_t e) {
        after.fetch_add(static_cast<int>(e - b));
      });
      ASSERT_EQ(after.load(), 10);
      dog.tick();
    }
  }
}

}  // namespace
}  // namespace weir::inference
