// Limiter: an awaitable counting semaphore with a bounded wait queue (weir's admission fence).
//
// Up to `permits` holders at once; up to `max_waiters` coroutines queue behind them in FIFO
// order; an acquire beyond that fails at once with Errc::overloaded. Permits are RAII.
// A waiter whose operation is cancelled (asio per-operation cancellation, e.g. a parent
// coroutine cancelled or `cancel_after`) leaves the queue and gets Errc::cancelled; a permit
// handed to a waiter at the same moment it was cancelled goes back to the pool, so none leaks.
//
// Thread safety: all methods may be called from any thread. A Permit must not outlive its
// Limiter.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <boost/asio/awaitable.hpp>

#include "weir/runtime/error.hpp"

namespace weir {

class Limiter {
 public:
  // `name` opens error messages; name the settings there, e.g.
  // "run limiter (limits.max_concurrent_runs=64, limits.max_queued_runs=1024)".
  Limiter(std::string name, std::size_t permits, std::size_t max_waiters);
  ~Limiter();
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  class Permit {
   public:
    Permit() = default;
    Permit(Permit&& o) noexcept : limiter_(std::exchange(o.limiter_, nullptr)) {}
    Permit& operator=(Permit&& o) noexcept;
    ~Permit() { release(); }
    explicit operator bool() const noexcept { return limiter_ != nullptr; }
    void release() noexcept;

   private:
    friend class Limiter;
    explicit Permit(Limiter* l) : limiter_(l) {}
    Limiter* limiter_ = nullptr;
  };

  // A permit now, or nullopt when none is free (never queues).
  std::optional<Permit> try_acquire();

  // A permit now, or after queueing. Errors: overloaded (queue full), cancelled.
  boost::asio::awaitable<Result<Permit>> async_acquire();

  std::size_t capacity() const noexcept { return permits_; }
  std::size_t max_waiters() const noexcept { return max_waiters_; }
  std::size_t in_use() const noexcept;
  std::size_t waiting() const noexcept;
  std::size_t rejected() const noexcept;  // acquires refused with overloaded, ever

 private:
  struct Waiters;
  void release_one() noexcept;

  std::string name_;
  std::size_t permits_;
  std::size_t max_waiters_;
  mutable std::mutex mu_;
  std::size_t in_use_ = 0;            // GUARDED_BY(mu_)
  std::size_t rejected_ = 0;          // GUARDED_BY(mu_)
  std::unique_ptr<Waiters> waiters_;  // GUARDED_BY(mu_)
};

}  // namespace weir
