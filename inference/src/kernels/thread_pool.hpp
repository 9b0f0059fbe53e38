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
//
// Invariants (the protocol; thread_pool_stress_test checks it under TSan with injected yields):
//   1. Each call has a number. Every thread's share of a call is one atomic word holding the
//      call's number, the share's next unclaimed chunk and its end: a claim is one
//      compare-and-swap of that whole word, so a thread still busy with an earlier call can
//      never pair that call's position with this call's bounds (its swap fails).
//   2. A thread reads the call's parameters (function, n, chunk size) only after a successful
//      claim, and the caller changes them only after every claimed chunk is counted done; so a
//      chunk always runs with the parameters of the call it was claimed from.
//   3. Exactly the call's chunks are claimed, each once; `done` reaches their number exactly,
//      and parallel_for returns only then: no chunk runs after the caller's function is gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace weir::inference {

class ThreadPool {
 public:
  using Fn = std::function<void(int, std::int64_t, std::int64_t)>;

  // n_threads: total threads working, the caller included (1 = run inline). 0 = hardware.
  explicit ThreadPool(int n_threads = 1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(thread, begin, end); thread in [0, size()). When a chunk throws, the other chunks still
  // run, and the first exception is rethrown here once all are done (the pool stays usable).
  void parallel_for(std::int64_t n, const Fn& fn);

 private:
  // One thread's share of a call's chunks: (call << 32) | (next << 16) | end; [next, end) are
  // unclaimed. Written by parallel_for before it publishes the call; claimed by
  // compare-and-swap of the whole word (invariant 1).
  struct alignas(64) Share {
    std::atomic<std::uint64_t> word{0};
  };
  // A call's parameters: written by parallel_for before it publishes the call, read by a thread
  // only while it holds a claimed chunk of that call (invariant 2).
  struct Call {
    const Fn* fn = nullptr;
    std::int64_t n = 0;
    std::int64_t chunk = 0;     // indices a chunk
    std::int64_t n_chunks = 0;  // <= kMaxChunks
  };
  static constexpr std::int64_t kMaxChunks = 0xffff;

  void worker(int index);
  // Claims and runs chunks of call `call`, its own share first, until none is left.
  void work(int thread, std::uint32_t call);
  void run_chunk(int thread, std::int64_t chunk);

  int n_threads_;
  std::vector<std::thread> threads_;
  Call call_;
  std::atomic<std::uint64_t> generation_{0};  // calls published so far (low 32 bits: the number)
  std::vector<Share> shares_;                 // [n_threads_]
  std::atomic<std::int64_t> done_{0};         // chunks of the current call run to the end
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;         // GUARDED_BY(error_mu_): the current call's first exception
  std::atomic<bool> failed_{false};  // error_ is set (so a call without one takes no lock)
};

}  // namespace weir::inference
