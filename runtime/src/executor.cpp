#include "weir/runtime/executor.hpp"

#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "weir/runtime/error.hpp"

namespace weir {

namespace asio = boost::asio;

// One spawned task: its strand (so cancellation is emitted where the task runs) and the
// signal bound to its coroutine. Linked into Executor::tasks_ while it runs.
struct Executor::Task {
  explicit Task(asio::strand<asio::thread_pool::executor_type> s) : strand(std::move(s)) {}
  asio::strand<asio::thread_pool::executor_type> strand;
  asio::cancellation_signal signal;
  Task* prev = nullptr;
  Task* next = nullptr;
};

namespace {
std::size_t resolve_threads(std::size_t n) {
  if (n != 0) return n;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}
}  // namespace

namespace {
template <class T>
void link(T*& head, T* t) {
  t->prev = nullptr;
  t->next = head;
  if (head) head->prev = t;
  head = t;
}
template <class T>
void unlink(T*& head, T* t) {
  if (t->prev)
    t->prev->next = t->next;
  else
    head = t->next;
  if (t->next) t->next->prev = t->prev;
}
}  // namespace

Executor::Executor(std::size_t threads) : threads_(resolve_threads(threads)), pool_(threads_) {}

Executor::~Executor() {
  shutdown();
}

asio::any_io_executor Executor::get_executor() noexcept {
  return pool_.get_executor();
}

void Executor::spawn(asio::awaitable<void> task, std::function<void(std::exception_ptr)> on_done) {
  if (stopping_.load(std::memory_order_acquire)) {
    if (on_done) {
      on_done(std::make_exception_ptr(
          Exception(Errc::cancelled, "the executor is shutting down; no new work is started")));
    }
    return;
  }
  auto* t = new Task(asio::make_strand(pool_.get_executor()));
  {
    std::lock_guard lock(mu_);
    link(tasks_, t);
    in_flight_.fetch_add(1, std::memory_order_relaxed);
  }
  asio::co_spawn(
      t->strand, std::move(task),
      asio::bind_cancellation_slot(t->signal.slot(),
                                   [this, t, on_done = std::move(on_done)](std::exception_ptr e) {
                                     if (on_done) on_done(e);
                                     finish(t);
                                   }));
}

void Executor::finish(Task* t) noexcept {
  {
    std::lock_guard lock(mu_);
    unlink(tasks_, t);
    link(done_, t);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }
  idle_.notify_all();
  // The coroutine machinery may still touch the task's signal after this handler returns, so
  // the record is freed by a later handler on the same strand (or by shutdown()).
  asio::post(t->strand, [this, t] {
    {
      std::lock_guard lock(mu_);
      unlink(done_, t);
    }
    delete t;
  });
}

std::size_t Executor::shutdown(std::chrono::milliseconds grace) {
  if (stopping_.exchange(true, std::memory_order_acq_rel) && joined_) return 0;
  std::size_t cancelled = 0;
  {
    std::unique_lock lock(mu_);
    if (!idle_.wait_for(lock, grace, [&] { return tasks_ == nullptr; })) {
      for (Task* t = tasks_; t; t = t->next) {
        ++cancelled;
        asio::post(t->strand, [t] { t->signal.emit(asio::cancellation_type::terminal); });
      }
      idle_.wait_for(lock, grace, [&] { return tasks_ == nullptr; });
    }
  }
  if (!joined_) {
    pool_.stop();
    pool_.join();
    joined_ = true;
  }
  // Records of tasks that ignored cancellation, and of finished tasks whose cleanup handler
  // was still queued when the pool stopped.
  std::lock_guard lock(mu_);
  for (Task** list : {&tasks_, &done_}) {
    while (Task* t = *list) {
      *list = t->next;
      delete t;
    }
  }
  return cancelled;
}

}  // namespace weir
