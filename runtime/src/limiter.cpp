#include "weir/runtime/limiter.hpp"

#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "wait_queue.hpp"

namespace weir {

namespace asio = boost::asio;
using detail::WaitQueue;

struct Limiter::Waiters : WaitQueue {};

Limiter::Limiter(std::string name, std::size_t permits, std::size_t max_waiters)
    : name_(std::move(name)),
      permits_(permits),
      max_waiters_(max_waiters),
      waiters_(std::make_unique<Waiters>()) {}

Limiter::~Limiter() {
  assert(in_use_ == 0 && "a Permit outlived its Limiter");
  assert(waiters_->empty_locked() && "a coroutine is still waiting on a destroyed Limiter");
}

Limiter::Permit& Limiter::Permit::operator=(Permit&& o) noexcept {
  if (this != &o) {
    release();
    limiter_ = std::exchange(o.limiter_, nullptr);
  }
  return *this;
}

void Limiter::Permit::release() noexcept {
  if (auto* l = std::exchange(limiter_, nullptr)) l->release_one();
}

void Limiter::release_one() noexcept {
  std::lock_guard lock(mu_);
  // Hand the permit to the oldest waiter that is still waiting; it keeps in_use_ as it is.
  auto& q = waiters_->waiters_locked();
  while (!q.empty()) {
    auto w = q.front();
    if (waiters_->grant_locked(w)) return;
  }
  --in_use_;
}

std::optional<Limiter::Permit> Limiter::try_acquire() {
  std::lock_guard lock(mu_);
  if (in_use_ >= permits_ || !waiters_->empty_locked()) return std::nullopt;
  ++in_use_;
  return Permit(this);
}

asio::awaitable<Result<Limiter::Permit>> Limiter::async_acquire() {
  WaitQueue::WaiterPtr w;
  {
    std::lock_guard lock(mu_);
    if (in_use_ < permits_ && waiters_->empty_locked()) {
      ++in_use_;
      co_return Permit(this);
    }
    if (waiters_->size_locked() >= max_waiters_) {
      ++rejected_;
      co_return Error(Errc::overloaded, name_ + ": all " + std::to_string(permits_) +
                                            " permits in use and " +
                                            std::to_string(waiters_->size_locked()) +
                                            " waiting, the queue's limit; retry later or raise "
                                            "the limits");
    }
    w = waiters_->push_locked(co_await asio::this_coro::executor, 1, 0);
    w->give_back = [this] { release_one(); };  // a permit its destroyed frame never took
  }
  // Awaited into a local: GCC 12 corrupts the frame of a co_await inside a switch condition.
  const auto outcome = co_await waiters_->wait(mu_, w, std::nullopt);
  switch (outcome) {
    case WaitQueue::Outcome::granted:
      co_return Permit(this);
    case WaitQueue::Outcome::granted_cancelled:
      release_one();
      break;
    case WaitQueue::Outcome::timed_out:
    case WaitQueue::Outcome::cancelled:
      break;
  }
  co_return Error(Errc::cancelled, name_ + ": the wait for a permit was cancelled");
}

std::size_t Limiter::in_use() const noexcept {
  std::lock_guard lock(mu_);
  return in_use_;
}

std::size_t Limiter::waiting() const noexcept {
  std::lock_guard lock(mu_);
  return waiters_->size_locked();
}

std::size_t Limiter::rejected() const noexcept {
  std::lock_guard lock(mu_);
  return rejected_;
}

}  // namespace weir
