// What the two run doors of `weir serve` (the runs API, runs_api.hpp, and the LangGraph Server
// API, langgraph_api.hpp) share to follow a run of a cluster::RunService: blocking store calls
// off the I/O thread, the wake-up a RunService::watch sends, and the run's own checkpoints.
// Private to serve/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "weir/cluster/run_service.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/graph/events.hpp"
#include "weir/http/server.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::serve {

// Runs `f` on the blocking pool and resumes on the caller's executor with its result.
template <class F>
boost::asio::awaitable<std::invoke_result_t<F&>> off_thread(boost::asio::thread_pool& pool, F f) {
  std::optional<std::invoke_result_t<F&>> out;
  co_await boost::asio::co_spawn(
      pool,
      [&]() -> boost::asio::awaitable<void> {
        out.emplace(f());
        co_return;
      },
      boost::asio::use_awaitable);
  co_return std::move(*out);
}

// What a follower's watch (RunService::watch) shares with it: the watch bumps `version` and
// cancels the timer the follower waits on (on the follower's executor: a timer is not
// thread-safe).
struct Wake {
  explicit Wake(const boost::asio::any_io_executor& ex) : timer(ex) {}
  boost::asio::steady_timer timer;
  std::atomic<std::uint64_t> version{0};
};

// Watches run `id` (RunService::watch): each change bumps wake->version and cancels
// wake->timer on `executor`. The watch ends when the returned handle is destroyed; watch
// before the first look, so that no change between the two is missed.
std::unique_ptr<cluster::RunWatch> watch_run(cluster::RunService& runs, const std::string& id,
                                             const std::shared_ptr<Wake>& wake,
                                             const boost::asio::any_io_executor& executor);

// The message text a run's nodes send as it is generated (RunService::watch_text), queued for
// its follower. At most kMaxBytes wait: a message with a piece that does not fit sends no more
// pieces (its follower sends the rest with its step). Thread safety: any thread.
class TextQueue {
 public:
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 20;
  // Queues `t`; true when the follower should be woken (the first piece since its last take).
  bool push(const graph::MessageText& t);
  std::vector<graph::MessageText> take();

 private:
  std::mutex mu_;
  std::vector<graph::MessageText> pieces_;  // GUARDED_BY(mu_)
  std::size_t bytes_ = 0;                   // GUARDED_BY(mu_)
  std::set<std::string> dropped_;           // message ids; GUARDED_BY(mu_)
  bool woken_ = false;                      // GUARDED_BY(mu_)
};

// Watches run `id`'s message text into `q` (RunService::watch_text): the first piece since the
// last take cancels wake->timer on `executor` (without bumping wake->version: the store has not
// changed). Null where the backend sends no text (PostgreSQL).
std::unique_ptr<cluster::RunWatch> watch_text(cluster::RunService& runs, const std::string& id,
                                              const std::shared_ptr<TextQueue>& q,
                                              const std::shared_ptr<Wake>& wake,
                                              const boost::asio::any_io_executor& executor);

// A run's checkpoints on its thread put after the one with id `after` ("": all of them), oldest
// first; `found` says whether `after` was met.
struct Steps {
  std::vector<graph::Checkpoint> list;
  bool found = false;
};
// Reads the thread newest first in growing pages, past the steps of later runs, until it
// reaches `after`, another run's checkpoint before the run's, a step older than the run or the
// thread's first (a run longer than 65536 steps yields its newest only).
Result<Steps> run_steps(const graph::Checkpointer& cp, const cluster::RunRecord& run,
                        const std::string& after);

// The run and its steps after `after`. The record first: once it says the run ended, every step
// it committed is in the store.
Result<std::pair<cluster::RunRecord, Steps>> look_up(cluster::RunService& runs,
                                                     const std::string& id,
                                                     const std::string& after);

// The traceparent a run queued by request `rq` continues: the request's span when the server
// traces, else the caller's own traceparent header (RunRequest::traceparent).
std::string run_traceparent_of(const http::Request& rq, const trace::SpanContext& request_span);

}  // namespace weir::serve
