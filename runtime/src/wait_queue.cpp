#include "wait_queue.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace weir::detail {

namespace asio = boost::asio;
using State = WaitQueue::Waiter::State;

namespace {

// Tells the waiters of an execution context that it is shutting down. Services shut down in
// the reverse order of their creation, and this one is made after the context's scheduler, so
// the flag is set before the scheduler destroys the coroutines still queued on it: one of
// them may release a resource (a run's permit) while the others' channels are already shut.
class ContextDown : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit ContextDown(asio::execution_context& ctx) : service(ctx) {}
  std::atomic<bool> down{false};

 private:
  void shutdown() override { down.store(true); }
};

}  // namespace

WaitQueue::WaiterPtr WaitQueue::push_locked(asio::any_io_executor ex, std::size_t amount, int tag) {
  auto& ctx = asio::query(ex, asio::execution::context);
  const std::atomic<bool>* down = &asio::use_service<ContextDown>(ctx).down;
  auto w = std::make_shared<Waiter>(std::move(ex), amount, tag);
  w->context_down = down;
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
  // A context shutting down has shut the channel's service: a send would find no receiver.
  // The waiter's frame is destroyed without resuming.
  const bool down = w->context_down && w->context_down->load();
  if (!w->state.compare_exchange_strong(expected, down ? State::cancelled : State::granted) || down)
    return false;
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
  // Destroyed with the frame while it waits (its context destroyed): `w` leaves the queue.
  struct Abandon {
    std::mutex& mu;
    WaitQueue& q;
    const WaiterPtr& w;
    bool armed = true;
    ~Abandon() {
      if (!armed) return;
      int was = State::waiting;
      {
        std::lock_guard lock(mu);
        q.remove_locked(w);
        w->state.compare_exchange_strong(was, State::cancelled);
      }
      if (was == State::granted && w->give_back) w->give_back();
    }
  } abandon{mu, *this, w};
  auto [ec] = co_await w->channel.async_receive(asio::as_tuple(asio::use_awaitable));
  abandon.armed = false;
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
