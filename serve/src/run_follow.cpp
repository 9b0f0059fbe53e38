#include "run_follow.hpp"

#include <algorithm>

#include <boost/asio/post.hpp>

namespace weir::serve {

std::unique_ptr<cluster::RunWatch> watch_run(cluster::RunService& runs, const std::string& id,
                                             const std::shared_ptr<Wake>& wake,
                                             const boost::asio::any_io_executor& executor) {
  return runs.watch(id, [wake, executor] {
    ++wake->version;
    boost::asio::post(executor, [wake] { wake->timer.cancel(); });
  });
}

bool TextQueue::push(const graph::MessageText& t) {
  std::lock_guard lock(mu_);
  if (dropped_.count(t.message_id)) return false;
  if (bytes_ + t.text.size() > kMaxBytes) {
    dropped_.insert(t.message_id);
    return false;
  }
  bytes_ += t.text.size();
  pieces_.push_back(t);
  const bool wake = !woken_;
  woken_ = true;
  return wake;
}

std::vector<graph::MessageText> TextQueue::take() {
  std::lock_guard lock(mu_);
  std::vector<graph::MessageText> out;
  out.swap(pieces_);
  bytes_ = 0;
  woken_ = false;
  return out;
}

std::unique_ptr<cluster::RunWatch> watch_text(cluster::RunService& runs, const std::string& id,
                                              const std::shared_ptr<TextQueue>& q,
                                              const std::shared_ptr<Wake>& wake,
                                              const boost::asio::any_io_executor& executor) {
  return runs.watch_text(id, [q, wake, executor](const graph::MessageText& t) {
    if (q->push(t)) boost::asio::post(executor, [wake] { wake->timer.cancel(); });
  });
}

Result<Steps> run_steps(const graph::Checkpointer& cp, const cluster::RunRecord& run,
                        const std::string& after) {
  constexpr std::size_t kMaxSteps = 65536;  // a longer run streams its newest steps only
  for (std::size_t limit = 16;; limit *= 4) {
    auto page = cp.list(run.thread_id, limit);
    if (!page) return std::move(page).error();
    Steps out;
    bool reached = page->size() < limit || limit >= kMaxSteps;
    bool met = false;  // the newest of the run's steps was met
    for (auto& c : *page) {
      const auto* q = c.metadata.if_contains("queue_run");
      const bool ours = q && q->is_string() && q->as_string() == run.id;
      if (!met) {
        if (!ours) {
          // A later run's step (or a fork's) is passed over; a step put before the run was
          // queued means it has none (a second of slack for clocks).
          if (c.created_at_ms + 1000 < run.created_ms) {
            reached = true;
            break;
          }
          continue;
        }
        met = true;
      }
      if (!ours || (!after.empty() && c.checkpoint_id == after)) {
        out.found = ours;
        reached = true;
        break;
      }
      out.list.push_back(std::move(c));
    }
    if (reached) {
      std::reverse(out.list.begin(), out.list.end());
      return out;
    }
  }
}

Result<std::pair<cluster::RunRecord, Steps>> look_up(cluster::RunService& runs,
                                                     const std::string& id,
                                                     const std::string& after) {
  auto rec = runs.get(id);
  if (!rec) return std::move(rec).error();
  auto steps = run_steps(runs.checkpointer(), *rec, after);
  if (!steps) return std::move(steps).error();
  return std::pair{std::move(*rec), std::move(*steps)};
}

std::string run_traceparent_of(const http::Request& rq, const trace::SpanContext& request_span) {
  if (request_span.valid()) return trace::format_traceparent(request_span);
  return std::string(rq.header("traceparent").value_or(""));
}

}  // namespace weir::serve
