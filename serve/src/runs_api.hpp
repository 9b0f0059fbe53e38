// The runs API's routes (docs/serve.md "Runs"), over a cluster::RunService (the runs themselves,
// their records and their JSON shape live there; serve keeps only the routes):
//   GET  /v1/workflows                 the workflows this server runs
//   POST /v1/runs                      {"workflow", "input"?, "thread_id"?} -> 202 and the run
//   GET  /v1/runs[?limit=N][&after=ID][&state=S]   newest first, a page: has_more, last_id
//   GET  /v1/runs/{id}                 the run: state, attempts, result or error
//   GET  /v1/runs/{id}/events          SSE: one "step" event per committed superstep of the run
//                                      (id: the step's checkpoint id), then one "end" event
//                                      (id: end) with the run; Last-Event-ID resumes after that
//   POST /v1/runs/{id}/cancel          -> the run, as it stands after the request
//   POST /v1/threads/{id}/resume       {"value"} -> 202 and the run that continues the thread
//   GET  /v1/threads/{id}/state        the thread's latest checkpoint and its channel values
// Backend calls may block (PostgreSQL): they run on `blocking`, never on the I/O thread. An
// event stream reads the store only when RunService::watch says the run moved; between, it
// wakes every `check` to notice a server that drains or a client that left, and writes a
// keep-alive comment after `keep_alive` of quiet.
// Errors in OpenAI's shape: 400 bad input (an input channel the workflow does not take
// included), 404 unknown run / thread / workflow, 409 a thread busy or not interrupted, 429
// (Retry-After) when the run queue is full, 503 when the store cannot be reached.
#pragma once

#include <chrono>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "weir/cluster/run_service.hpp"
#include "weir/http/server.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::serve {

struct RunsApi {
  cluster::RunService* runs = nullptr;
  boost::asio::thread_pool* blocking = nullptr;
  const bool* draining = nullptr;        // read on the I/O thread: event streams end when set
  std::chrono::milliseconds check{200};  // see above; no store read
  std::chrono::milliseconds keep_alive{15'000};  // a comment line on a quiet stream
  std::size_t max_body_bytes = 4u << 20;
};

// True when `rq.path` is one of the routes above (then `out` or the stream holds the answer).
bool is_runs_path(const std::string& path);
// `request_span`: the request's span (invalid when the server does not trace); a run queued
// here continues it, else the caller's `traceparent` header (RunRequest::traceparent).
boost::asio::awaitable<void> route_runs(const RunsApi& api, http::Exchange& ex, http::Response& out,
                                        bool& streamed, const trace::SpanContext& request_span);

}  // namespace weir::serve
