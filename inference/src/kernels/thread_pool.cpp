#include "weir/inference/thread_pool.hpp"

#include <algorithm>

namespace weir::inference {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
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

void ThreadPool::work(int thread, std::uint32_t gen) {
  for (int k = 0; k < n_threads_; ++k) {
    Share& share = shares_[static_cast<std::size_t>((thread + k) % n_threads_)];
    std::uint64_t v = share.next.load(std::memory_order_acquire);
    while (true) {
      if (static_cast<std::uint32_t>(v >> 32) != gen) return;
      // `end` belongs to this generation: it was written before the generation was published.
      const auto c = static_cast<std::int64_t>(v & 0xffffffffu);
      if (c >= share.end.load(std::memory_order_relaxed)) break;
      if (!share.next.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                            std::memory_order_acquire))
        continue;
      // A claimed chunk of this generation: fn_, n_ and chunk_ stay put until it is done.
      const std::int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
      (*fn_)(thread, b, e);
      done_.fetch_add(1, std::memory_order_acq_rel);
      v = share.next.load(std::memory_order_acquire);
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
    work(index, static_cast<std::uint32_t>(g));
  }
}

void ThreadPool::parallel_for(std::int64_t n,
                              const std::function<void(int, std::int64_t, std::int64_t)>& fn) {
  if (n_threads_ == 1 || n < 2) {
    if (n > 0) fn(0, 0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  // 8 chunks a thread: when the OS takes a core away mid-step (a busy machine), the others
  // pick up the rest of its share at a finer grain.
  n_chunks_ = std::min<std::int64_t>(n, 8 * n_threads_);
  chunk_ = (n + n_chunks_ - 1) / n_chunks_;
  n_chunks_ = (n + chunk_ - 1) / chunk_;
  done_.store(0, std::memory_order_relaxed);
  const auto gen = static_cast<std::uint32_t>(generation_.load(std::memory_order_relaxed) + 1);
  for (int t = 0; t < n_threads_; ++t) {  // thread t's share: chunks [t C / T, (t + 1) C / T)
    Share& share = shares_[static_cast<std::size_t>(t)];
    share.end.store(n_chunks_ * (t + 1) / n_threads_, std::memory_order_relaxed);
    share.next.store(static_cast<std::uint64_t>(gen) << 32 |
                         static_cast<std::uint64_t>(n_chunks_ * t / n_threads_),
                     std::memory_order_release);
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  work(0, gen);
  // Wait for chunks other threads are still running; yield when that takes a while (a worker
  // descheduled mid-chunk needs a core to finish it).
  for (int spin = 0; done_.load(std::memory_order_acquire) != n_chunks_; ++spin) {
    if (spin < 2000)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}

}  // namespace weir::inference
