// A small fork-join pool for the forward pass: parallel_for splits [0, n) into one contiguous
// range per thread, the calling thread included, and returns when all ranges are done.
// Workers spin briefly between calls (a decode step makes dozens of calls a millisecond), then
// sleep on an atomic wait, so an idle engine costs no CPU.
//
// Thread safety: parallel_for is called by one thread at a time (the engine thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace weir::inference {

class ThreadPool {
 public:
  // n_threads: total threads working, the caller included (1 = run inline). 0 = hardware.
  explicit ThreadPool(int n_threads = 1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(thread, begin, end); thread in [0, size()).
  void parallel_for(std::int64_t n, const std::function<void(int, std::int64_t, std::int64_t)>& fn);

 private:
  void worker(int index);
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace weir::inference
