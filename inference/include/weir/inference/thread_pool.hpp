// A small fork-join pool for the forward pass: parallel_for splits [0, n) into contiguous chunks
// (a few per thread) and returns when every chunk is done. Each thread, the calling thread
// included, owns a contiguous share of the chunks and claims them in order, so in a decode step
// every core streams its own slice of a weight matrix front to back (the hardware and software
// prefetchers run ahead within it). A thread that finishes its share claims what is left of the
// others', from their front: when the OS takes a core away mid-step (a busy machine), the step
// does not wait for it. A claim costs one compare-and-swap. Workers spin briefly between calls
// (a decode step makes dozens of calls a millisecond), then sleep on an atomic wait, so an idle
// engine costs no CPU.
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
  // One thread's share of the chunks: [next, end) are unclaimed. Written by parallel_for before
  // it publishes a generation; claimed by compare-and-swap on `next`.
  struct alignas(64) Share {
    // (generation << 32) | next chunk index: a claim succeeds only for the current generation.
    std::atomic<std::uint64_t> next{0};
    std::atomic<std::int64_t> end{0};
  };

  void worker(int index);
  // Claims and runs chunks of generation `gen`, its own share first, until none is left.
  void work(int thread, std::uint32_t gen);
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t chunk_ = 0;
  std::int64_t n_chunks_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  std::vector<Share> shares_;  // [n_threads_]
  std::atomic<std::int64_t> done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace weir::inference
