#include "wait_queue.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace weir::detail {

namespace asio = boost::asio;
using State = WaitQueue::Waiter::State;

WaitQueue::WaiterPtr WaitQueue::push_locked(asio::any_io_executor ex, std::size_t amount, int tag) {
  auto w = std::make_shared<Waiter>(std::move(ex), amount, tag);
  w->pos = waiters_.insert(waiters_.end(), w);
  return w;
}

void WaitQueue::remove_locked(const WaiterPtr& w) {
  if (!w->queued) return;
  waiters_.erase(w->pos);
  w->queued = false;
}

bool WaitQueue::grant_locked(const WaiterPtr& w) {
  remove_locked(w);
  int expected = State::waiting;
  if (!w->state.compare_exchange_strong(expected, State::granted)) return false;
  w->channel.try_send(boost::system::error_code{});
  return true;
}

asio::awaitable<WaitQueue::Outcome> WaitQueue::wait(
    std::mutex& mu, WaiterPtr w, std::optional<std::chrono::milliseconds> timeout) {
  std::optional<asio::steady_timer> timer;
  if (timeout) {
    timer.emplace(co_await asio::this_coro::executor, *timeout);
    // Touches only the waiter, kept alive by its shared_ptr: the owner may be gone by the time
    // an expiry that raced with a grant runs.
    timer->async_wait([w](boost::system::error_code ec) {
      int expected = State::waiting;
      if (!ec && w->state.compare_exchange_strong(expected, State::timed_out)) {
        w->channel.try_send(boost::system::error_code{});
      }
    });
  }
  auto [ec] = co_await w->channel.async_receive(asio::as_tuple(asio::use_awaitable));
  if (timer) timer->cancel();

  std::lock_guard lock(mu);
  remove_locked(w);
  int expected = State::waiting;
  if (w->state.compare_exchange_strong(expected, State::cancelled)) {
    co_return Outcome::cancelled;  // woken by cancellation of the awaiting operation
  }
  switch (expected) {
    case State::granted:
      co_return ec ? Outcome::granted_cancelled : Outcome::granted;
    case State::timed_out:
      co_return Outcome::timed_out;
    default:
      co_return Outcome::cancelled;
  }
}

}  // namespace weir::detail
