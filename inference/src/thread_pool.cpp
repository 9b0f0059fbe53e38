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

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  std::uint64_t seen = 0;
  while (true) {
    std::uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 20000; ++spin) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    const std::int64_t chunk = (n_ + n_threads_ - 1) / n_threads_;
    const std::int64_t b = std::min(n_, chunk * index), e = std::min(n_, b + chunk);
    if (b < e) (*fn_)(index, b, e);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
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
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  const std::int64_t chunk = (n + n_threads_ - 1) / n_threads_;
  fn(0, 0, std::min(n, chunk));
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

}  // namespace weir::inference
