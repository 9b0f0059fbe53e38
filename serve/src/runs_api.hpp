// The runs API's routes (docs/serve.md "Runs"), over a Runs backend (runs.hpp):
//   GET  /v1/workflows                 the workflows this server runs
//   POST /v1/runs                      {"workflow", "input"?, "thread_id"?} -> 202 and the run
//   GET  /v1/runs[?limit=N]            newest first
//   GET  /v1/runs/{id}                 the run: state, attempts, result or error
//   GET  /v1/runs/{id}/events          SSE: one "step" event per committed superstep of the run
//                                      (id: the step number), then one "end" event (id: end)
//                                      with the run; Last-Event-ID resumes after that step
//   POST /v1/runs/{id}/cancel          -> the run, as it stands after the request
//   POST /v1/threads/{id}/resume       {"value"} -> 202 and the run that continues the thread
//   GET  /v1/threads/{id}/state        the thread's latest checkpoint and its channel values
// Backend calls may block (PostgreSQL): they run on `blocking`, never on the I/O thread.
// Errors in OpenAI's shape: 400 bad input, 404 unknown run / thread / workflow, 409 a thread
// busy or not interrupted, 429 (Retry-After) when the run queue is full, 503 when the store
// cannot be reached.
#pragma once

#include <chrono>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "weir/cluster/run_service.hpp"
#include "weir/http/server.hpp"

namespace weir::serve {

struct RunsApi {
  cluster::Runs* runs = nullptr;
  boost::asio::thread_pool* blocking = nullptr;
  const bool* draining = nullptr;       // read on the I/O thread: event streams end when set
  std::chrono::milliseconds poll{100};  // how often an event stream looks for steps
  std::chrono::milliseconds keep_alive{15'000};  // a comment line on a quiet stream
  std::size_t max_body_bytes = 4u << 20;
};

// True when `rq.path` is one of the routes above (then `out` or the stream holds the answer).
bool is_runs_path(const std::string& path);
boost::asio::awaitable<void> route_runs(const RunsApi& api, http::Exchange& ex, http::Response& out,
                                        bool& streamed);

}  // namespace weir::serve
