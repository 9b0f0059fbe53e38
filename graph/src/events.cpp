// EventStream: the bounded queue between a run and its consumer (see events.hpp).
#include "events_impl.hpp"

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace weir::graph {

namespace asio = boost::asio;

const char* event_kind_name(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::run_started:
      return "run_started";
    case EventKind::node_started:
      return "node_started";
    case EventKind::node_finished:
      return "node_finished";
    case EventKind::state:
      return "state";
    case EventKind::custom:
      return "custom";
    case EventKind::warning:
      return "warning";
    case EventKind::run_finished:
      return "run_finished";
    case EventKind::run_failed:
      return "run_failed";
    case EventKind::run_interrupted:
      return "run_interrupted";
  }
  return "unknown";
}

// A bounded queue guarded by a mutex; a waiting producer or consumer parks its completion
// handler here and is resumed by a post to its own executor. (Not an Asio channel: a channel
// belongs to an io_context and must not outlive it, a stream may.)
namespace {

struct Waiter {
  virtual ~Waiter() = default;
  virtual void complete() = 0;  // posts the handler to its executor
};

template <typename Handler>
struct WaiterFor final : Waiter {
  explicit WaiterFor(Handler h) : handler(std::move(h)) {}
  void complete() override {
    auto ex = asio::get_associated_executor(handler);
    asio::post(ex, std::move(handler));
  }
  Handler handler;
};

using Waiters = std::vector<std::unique_ptr<Waiter>>;

void wake(Waiters& ws) {
  for (auto& w : ws) w->complete();
  ws.clear();
}

}  // namespace

struct EventStream::Impl {
  explicit Impl(std::size_t cap) : capacity(cap) {}
  const std::size_t capacity;
  std::mutex mu;
  std::deque<Event> queue;  // guarded by mu; size() <= capacity
  bool closed = false;      // guarded by mu
  bool ended = false;       // guarded by mu: the terminal event was taken
  Waiters producers;        // guarded by mu: pushes waiting for room
  Waiters consumers;        // guarded by mu: async_next waiting for an event
  std::atomic<std::size_t> size{0};

  bool ready(bool producer) const {
    return closed || (producer ? queue.size() < capacity : !queue.empty());
  }

  // Suspends until ready(producer) may have become true (a spurious wake-up is possible).
  asio::awaitable<void> wait(bool producer) {
    // A local: no lambda that captures by value inside a co_await (GCC 12, docs/architecture.md).
    auto initiate = [this, producer](auto handler) {
      std::unique_lock lock(mu);
      auto w = std::make_unique<WaiterFor<decltype(handler)>>(std::move(handler));
      if (ready(producer)) {
        lock.unlock();
        w->complete();
        return;
      }
      (producer ? producers : consumers).push_back(std::move(w));
    };
    co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(initiate,
                                                                         asio::use_awaitable);
  }

  void close() noexcept {
    Waiters woken;
    {
      std::lock_guard lock(mu);
      closed = true;
      queue.clear();
      size = 0;
      woken = std::move(producers);
      for (auto& w : consumers) woken.push_back(std::move(w));
      consumers.clear();
    }
    wake(woken);
  }
};

namespace {

bool is_terminal(EventKind k) {
  return k == EventKind::run_finished || k == EventKind::run_failed ||
         k == EventKind::run_interrupted;
}

}  // namespace

asio::awaitable<void> push_event(std::shared_ptr<EventStream::Impl> impl, Event e) {
  for (;;) {
    Waiters woken;
    bool pushed = false;
    {
      std::lock_guard lock(impl->mu);
      if (impl->closed) co_return;  // the consumer went away: a no-op
      if (impl->queue.size() < impl->capacity) {
        impl->queue.push_back(std::move(e));
        impl->size = impl->queue.size();
        woken = std::move(impl->consumers);
        impl->consumers.clear();
        pushed = true;
      }
    }
    if (pushed) {
      wake(woken);
      co_return;
    }
    co_await impl->wait(true);  // full: wait for room, then try again
  }
}

EventStream::EventStream(std::size_t capacity)
    : capacity_(std::max<std::size_t>(capacity, 1)), impl_(std::make_shared<Impl>(capacity_)) {}

EventStream::~EventStream() {
  impl_->close();
}

asio::awaitable<std::optional<Event>> EventStream::async_next() {
  for (;;) {
    std::optional<Event> out;
    Waiters woken;
    {
      std::lock_guard lock(impl_->mu);
      if (impl_->ended || (impl_->closed && impl_->queue.empty())) co_return std::nullopt;
      if (!impl_->queue.empty()) {
        out.emplace(std::move(impl_->queue.front()));
        impl_->queue.pop_front();
        impl_->size = impl_->queue.size();
        if (is_terminal(out->kind)) impl_->ended = true;
        woken = std::move(impl_->producers);
        impl_->producers.clear();
      }
    }
    if (out) {
      wake(woken);
      co_return out;
    }
    co_await impl_->wait(false);
  }
}

asio::awaitable<void> EventStream::async_push(Event event) {
  return push_event(impl_, std::move(event));
}

void EventStream::close() noexcept {
  impl_->close();
}

bool EventStream::closed() const noexcept {
  std::lock_guard lock(impl_->mu);
  return impl_->closed;
}

std::size_t EventStream::size() const noexcept {
  return impl_->size.load();
}

}  // namespace weir::graph
