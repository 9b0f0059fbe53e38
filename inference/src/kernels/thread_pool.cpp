#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <cassert>
#include <utility>

namespace weir::inference {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// A stress build (tests/inference: thread_pool_stress_test) defines WEIR_THREAD_POOL_STRESS: each
// step of the protocol may then give up the core, so the interleavings a quiet machine never
// shows come up in seconds. Otherwise nothing.
#if defined(WEIR_THREAD_POOL_STRESS)
void stress_point() {
  thread_local std::uint32_t s =
      0x2545f491u ^
      static_cast<std::uint32_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  if ((s & 1023) == 0) {
    std::this_thread::yield();  // rarely: a yield costs a time slice on a busy machine
  } else if ((s & 3) == 0) {
    for (std::uint32_t i = (s >> 10) & 511; i > 0; --i) cpu_relax();  // up to a few µs
  }
}
#else
inline void stress_point() {}
#endif

constexpr std::uint64_t share_word(std::uint32_t call, std::int64_t next, std::int64_t end) {
  return static_cast<std::uint64_t>(call) << 32 | static_cast<std::uint64_t>(next) << 16 |
         static_cast<std::uint64_t>(end);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads > 0
                     ? n_threads
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      shares_(static_cast<std::size_t>(n_threads_)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunk(int thread, std::int64_t chunk) {
  // Invariant 2: call_ is this chunk's call until done_ counts the chunk.
  const std::int64_t b = chunk * call_.chunk, e = std::min(call_.n, b + call_.chunk);
  try {
    (*call_.fn)(thread, b, e);
  } catch (...) {
    std::lock_guard lock(error_mu_);
    if (!error_) error_ = std::current_exception();
    failed_.store(true, std::memory_order_relaxed);  // read after done_ counts this chunk
  }
  done_.fetch_add(1, std::memory_order_acq_rel);
}

void ThreadPool::work(int thread, std::uint32_t call) {
  for (int k = 0; k < n_threads_; ++k) {
    Share& share = shares_[static_cast<std::size_t>((thread + k) % n_threads_)];
    std::uint64_t w = share.word.load(std::memory_order_acquire);
    while (true) {
      stress_point();
      // A newer call is published: this one's chunks are all done.
      if (static_cast<std::uint32_t>(w >> 32) != call) return;
      const auto next = static_cast<std::int64_t>((w >> 16) & 0xffff);
      const auto end = static_cast<std::int64_t>(w & 0xffff);
      if (next >= end) break;  // this share is all claimed: on to the next
      // Invariant 1: the swap succeeds only on this very word (call, next and end together).
      if (!share.word.compare_exchange_weak(w, w + (std::uint64_t{1} << 16),
                                            std::memory_order_acq_rel, std::memory_order_acquire))
        continue;
      stress_point();
      run_chunk(thread, next);
      w = share.word.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::worker(int index) {
  std::uint64_t seen = 0;
  while (true) {
    std::uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 4000; ++spin) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    stress_point();
    work(index, static_cast<std::uint32_t>(g));
  }
}

void ThreadPool::parallel_for(std::int64_t n, const Fn& fn) {
  if (n_threads_ == 1 || n < 2) {
    if (n > 0) fn(0, 0, n);
    return;
  }
  // 8 chunks a thread: when the OS takes a core away mid-step (a busy machine), the others
  // pick up the rest of its share at a finer grain.
  std::int64_t n_chunks = std::min({n, std::int64_t{8} * n_threads_, kMaxChunks});
  const std::int64_t chunk = (n + n_chunks - 1) / n_chunks;
  n_chunks = (n + chunk - 1) / chunk;
  call_ = {&fn, n, chunk, n_chunks};
  done_.store(0, std::memory_order_relaxed);
  const auto call = static_cast<std::uint32_t>(generation_.load(std::memory_order_relaxed) + 1);
  for (int t = 0; t < n_threads_; ++t) {  // thread t's share: chunks [t C / T, (t + 1) C / T)
    shares_[static_cast<std::size_t>(t)].word.store(
        share_word(call, n_chunks * t / n_threads_, n_chunks * (t + 1) / n_threads_),
        std::memory_order_release);
    stress_point();
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  work(0, call);
  // Wait for chunks other threads are still running; yield when that takes a while (a worker
  // descheduled mid-chunk needs a core to finish it).
  for (int spin = 0; done_.load(std::memory_order_acquire) < n_chunks; ++spin) {
    if (spin < 2000)
      cpu_relax();
    else
      std::this_thread::yield();
  }
  assert(done_.load() == n_chunks);
  if (failed_.load(std::memory_order_relaxed)) {
    failed_.store(false, std::memory_order_relaxed);
    std::exception_ptr error;
    {
      std::lock_guard lock(error_mu_);
      error = std::exchange(error_, nullptr);
    }
    std::rethrow_exception(error);
  }
}

}  // namespace weir::inference
