// WaitQueue: the FIFO of coroutines waiting for a resource (Limiter permits, MemoryBudget
// bytes). Private to runtime/.
//
// The owner (Limiter, MemoryBudget) guards the queue with its own mutex: every *_locked method
// REQUIRES that mutex to be held. A waiter is woken by grant_locked() (the owner has already
// moved the resource to it), by its timeout, or by per-operation cancellation of the awaiting
// coroutine. Each waiter has a one-slot concurrent_channel, which is safe to signal from any
// thread, so a release on one thread can wake a coroutine that runs on another.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>

namespace weir::detail {

class WaitQueue {
 public:
  enum class Outcome {
    granted,            // the resource was handed over
    granted_cancelled,  // handed over while the wait was being cancelled: give it back
    timed_out,
    cancelled,
  };

  struct Waiter {
    Waiter(boost::asio::any_io_executor ex, std::size_t amount, int tag)
        : channel(ex, 1), amount(amount), tag(tag) {}
    boost::asio::experimental::concurrent_channel<void(boost::system::error_code)> channel;
    std::size_t amount;  // bytes or permits asked for
    int tag;             // owner-defined (the budget category)
    // waiting -> granted (owner, under its mutex) | timed_out (timer) | cancelled (waiter).
    // Atomic so that the timer's handler needs neither the owner nor its mutex.
    enum State : int { waiting, granted, timed_out, cancelled };
    std::atomic<int> state{waiting};
    bool queued = true;  // GUARDED_BY(owner's mutex)
    std::list<std::shared_ptr<Waiter>>::iterator pos;
    // Set once the waiter's execution context shuts down (its destructor runs): its channel
    // can no longer wake anyone, so grant_locked() passes it by.
    const std::atomic<bool>* context_down = nullptr;
    // Called (without the owner's mutex) when the waiting coroutine's frame is destroyed
    // after the resource was handed to it but before it resumed (its io_context was destroyed
    // in between): the owner takes the resource back. Empty: the owner does not.
    std::function<void()> give_back;
  };
  using WaiterPtr = std::shared_ptr<Waiter>;

  std::size_t size_locked() const noexcept { return waiters_.size(); }
  bool empty_locked() const noexcept { return waiters_.empty(); }
  std::list<WaiterPtr>& waiters_locked() noexcept { return waiters_; }

  WaiterPtr push_locked(boost::asio::any_io_executor ex, std::size_t amount, int tag);
  // Removes `w` from the queue; when it is still waiting, marks it granted, wakes it and
  // returns true. False means it timed out or was cancelled, or its execution context is
  // shutting down: the owner keeps the resource.
  bool grant_locked(const WaiterPtr& w);

  // Suspends until `w` is granted, times out, or the awaiting operation is cancelled.
  // Takes `mu` itself (REQUIRES: not held by the caller). Should the coroutine's frame be
  // destroyed while it waits (its execution context destroyed), `w` leaves the queue then
  // (REQUIRES: the owner and `mu` outlive the frame), and a grant it never heard of goes back
  // through w->give_back.
  boost::asio::awaitable<Outcome> wait(std::mutex& mu, WaiterPtr w,
                                       std::optional<std::chrono::milliseconds> timeout);

 private:
  void remove_locked(const WaiterPtr& w);
  std::list<WaiterPtr> waiters_;
};

}  // namespace weir::detail
