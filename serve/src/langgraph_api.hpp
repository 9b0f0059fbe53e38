// The LangGraph Server API on `weir serve` (docs/langgraph-api.md), so that the clients people
// already use (the LangGraph SDK, Agent Chat UI) drive weir's workflows: an assistant is a
// workflow of the --workflows folder (graph_id = its name), a thread is a weir thread, a run is
// a run of the one cluster::RunService (the same queue, fences and records as /v1/runs), a
// checkpoint is a weir checkpoint. Routes (the SDK's request and response shapes):
//   GET  /ok, /info
//   POST /assistants/search; GET /assistants/{id}[/graph|/schemas|/subgraphs]
//   POST /threads, /threads/search, /threads/count; GET /threads/{id}[/state]
//   POST /threads/{id}/history
//   POST /threads/{id}/runs[/wait|/stream], /runs[/wait|/stream]; GET /threads/{id}/runs[/{run}]
//   GET  /threads/{id}/runs/{run}/join, /threads/{id}/runs/{run}/stream (rejoin, Last-Event-ID)
//   POST /threads/{id}/runs/{run}/cancel
// Any other route of the API answers 501 naming itself, never a wrong 200. Errors are
// {"detail": text} (the LangGraph server's shape; the JS SDK shows the text, the Python SDK
// reads "detail"): 400/422 bad input, 404 unknown assistant / thread / run, 409 a thread that
// exists or is busy, 429 (Retry-After) a full run queue, 501 what weir does not do yet.
// Thread metadata (what POST /threads and runs set, what /threads/search filters on) lives in
// the thread list (langgraph_book.hpp): this server's memory, at most max_threads threads, or
// with --db a PostgreSQL table every server shares; their checkpoints live in the run service's
// store.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "weir/cluster/run_service.hpp"
#include "weir/http/server.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::graph {
class Store;
}

namespace weir::serve {

class LangGraphThreads;     // the threads' metadata (langgraph_book.hpp)
class LangGraphAssistants;  // assistants made with POST /assistants (langgraph_assistants.hpp)
class Webhooks;             // runs' webhooks (webhooks.hpp)

struct LangGraphApi {
  cluster::RunService* runs = nullptr;
  boost::asio::thread_pool* blocking = nullptr;
  const bool* draining = nullptr;                // read on the I/O thread: streams and waits end
  std::chrono::milliseconds check{200};          // how often a follower looks at a quiet run
  std::chrono::milliseconds keep_alive{15'000};  // a heartbeat comment on a quiet stream
  std::size_t max_threads = 100'000;
  std::shared_ptr<LangGraphThreads> threads;  // the thread list (langgraph_book.hpp)
  // Assistants made with POST /assistants (langgraph_assistants.hpp), in the thread list's store.
  std::shared_ptr<LangGraphAssistants> assistants;
  std::int64_t started_ms = 0;          // the assistants' created_at (unix ms)
  std::shared_ptr<graph::Store> store;  // the /store routes' items (langgraph_store.hpp)
  std::shared_ptr<Webhooks> webhooks;   // a run's `webhook` (webhooks.hpp)
};

// True when `path` belongs to the LangGraph Server API (then route_langgraph answers it).
bool is_langgraph_path(const std::string& path);
// `request_span`: as route_runs's.
boost::asio::awaitable<void> route_langgraph(const LangGraphApi& api, http::Exchange& ex,
                                             http::Response& out, bool& streamed,
                                             const trace::SpanContext& request_span);

}  // namespace weir::serve
