// A small fork-join pool for the forward pass: parallel_for splits [0, n) into contiguous chunks
// (a few per thread) that the threads, the calling thread included, claim from a shared counter;
// it returns when every chunk is done. Claiming (rather than one fixed range per thread) keeps a
// step from waiting on a worker the OS has descheduled: on a busy machine the caller simply does
// more of the chunks itself. Workers spin briefly between calls (a decode step makes dozens of
// calls a millisecond), then sleep on an atomic wait, so an idle engine costs no CPU.
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
  // Claims and runs chunks of generation `gen` until none is left.
  void work(int thread, std::uint32_t gen);
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t chunk_ = 0;
  std::int64_t n_chunks_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  // (generation << 32) | next chunk index: a claim succeeds only for the current generation.
  std::atomic<std::uint64_t> next_{0};
  std::atomic<std::int64_t> done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace weir::inference
