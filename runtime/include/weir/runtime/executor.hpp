// Executor: the asio thread pool that every graph run and tool call runs on.
//
// It owns the threads (size configurable; default = hardware threads) and tracks the work it
// was given through spawn(), so that shutdown() can finish it or cancel it and never hangs.
//
// Thread safety: spawn(), get_executor() and the counters may be called from any thread.
// shutdown() may be called once from a thread that is not one of the pool's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>

namespace weir {

class Executor {
 public:
  // threads == 0 means std::thread::hardware_concurrency() (at least 1).
  explicit Executor(std::size_t threads = 0);
  // Calls shutdown() with the default grace period.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  boost::asio::any_io_executor get_executor() noexcept;
  std::size_t thread_count() const noexcept { return threads_; }
  // Tasks started with spawn() that have not completed.
  std::size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }

  // Starts `task` on the pool. `on_done(std::exception_ptr)` runs when it ends (null on
  // success); an exception escaping the task is never lost (unlike asio::detached). After
  // shutdown() began, the task is not started and on_done receives an exception carrying
  // Errc::cancelled.
  void spawn(boost::asio::awaitable<void> task,
             std::function<void(std::exception_ptr)> on_done = {});

  // Runs `task` on the pool and blocks the calling thread until it ends; rethrows its
  // exception. REQUIRES: not called from a pool thread (it would deadlock a 1-thread pool).
  template <class T>
  T run_sync(boost::asio::awaitable<T> task) {
    auto fut = boost::asio::co_spawn(get_executor(), std::move(task), boost::asio::use_future);
    return fut.get();
  }

  // Graceful shutdown: stops accepting spawn(), waits up to `grace` for spawned tasks to end,
  // then emits a terminal cancellation to those still running and waits up to `grace` again;
  // finally stops the pool and joins its threads. Idempotent. Returns the number of tasks
  // that had to be cancelled.
  std::size_t shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  struct Task;
  void finish(Task* t) noexcept;

  std::size_t threads_;
  boost::asio::thread_pool pool_;
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<bool> stopping_{false};
  bool joined_ = false;
  std::mutex mu_;
  std::condition_variable idle_;
  Task* tasks_ = nullptr;  // GUARDED_BY(mu_): intrusive list of running tasks
  Task* done_ = nullptr;   // GUARDED_BY(mu_): finished, record not yet freed
};

}  // namespace weir
