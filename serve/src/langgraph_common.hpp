// What the LangGraph API's route files share (private to serve/): the threads' book, the
// answers and error shapes, the thread lookups. langgraph_api.cpp serves assistants and runs,
// langgraph_threads.cpp threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "langgraph_answer.hpp"
#include "langgraph_api.hpp"
#include "langgraph_assistants.hpp"
#include "langgraph_book.hpp"
#include "langgraph_request.hpp"
#include "langgraph_stream.hpp"

namespace weir::serve {

namespace json = boost::json;

std::int64_t now_ms();

// answer, detail and from_error: langgraph_answer.hpp. A 501 naming the route:
http::Response not_implemented(const http::Request& rq, std::string_view route);
// A field's value when it is present and not null.
const json::value* field(const json::object& o, std::string_view key);

// The request's body (or page), or an error answer in `out`.
std::optional<json::object> body_of(const http::Request& rq, http::Response& out);
std::optional<LangGraphPage> page_of(const json::object& body, http::Response& out);

// A thread as LangGraph's Thread: its status from its newest run and checkpoint.
Result<json::object> thread_json(cluster::RunService& runs, const LangGraphThreads::Thread& t);
// The thread of the book, or one the store holds that the book does not know (a thread of
// /v1/runs, `weir run --thread`, or a stateless run): shown without metadata, and not added to
// the book (only a run started here adds one, within max_threads).
Result<LangGraphThreads::Thread> find_thread(const LangGraphApi& api, const std::string& id);
Error threads_full(const LangGraphApi& api);
// The thread id of a new thread: a UUID (version 4), as LangGraph makes them.
std::string new_thread_id();

// --- assistants (langgraph_assistant_routes.cpp)
// What an assistant id names: a graph's default assistant (the graph id, or its uuid5), or one
// made with POST /assistants (`made`), and the graph either runs.
struct FoundAssistant {
  std::string graph;
  std::shared_ptr<const graph::WorkflowSpec> spec;
  std::optional<LangGraphAssistant> made;
};
// nullopt with `out` set: unknown (404, naming the graphs) or the store's error.
boost::asio::awaitable<std::optional<FoundAssistant>> find_assistant(const LangGraphApi& api,
                                                                     const std::string& id,
                                                                     http::Response& out);
boost::asio::awaitable<void> route_assistants(const LangGraphApi& api, const http::Request& rq,
                                              const std::vector<std::string>& s,
                                              http::Response& out);

boost::asio::awaitable<void> route_threads(const LangGraphApi& api, http::Exchange& ex,
                                           const std::vector<std::string>& s, http::Response& out,
                                           bool& streamed, const trace::SpanContext& request_span);
// --- waits and streams of runs (langgraph_run_streams.cpp)
// ----------------------------------------

// Where a run is read: /threads/{id}/runs/{run_id}, or /runs/{run_id} for a stateless one.
std::string content_location(const cluster::RunRecord& r, bool stateless);
// Follows run `id` until it ends (its record), the server drains or the client leaves (nullopt).
boost::asio::awaitable<std::optional<cluster::RunRecord>> wait_until_ended(const LangGraphApi& api,
                                                                           http::Exchange& ex,
                                                                           const std::string& id);
// POST .../runs/wait and GET .../join: the final chunk once the run ended (`ask`: the request
// that started it, for on_disconnect).
boost::asio::awaitable<void> wait_for(const LangGraphApi& api, http::Exchange& ex,
                                      const cluster::RunRecord& started, const LangGraphRun* ask,
                                      http::Response& out);
// A run's SSE stream (langgraph_stream.hpp's events), from its start or after the event `st`
// says the client saw; `metadata_first`: opened with the run's `metadata` event.
boost::asio::awaitable<void> stream_run(const LangGraphApi& api, http::Exchange& ex,
                                        LangGraphStream st, const cluster::RunRecord& started,
                                        bool stateless, bool cancel_on_disconnect,
                                        bool metadata_first, bool& streamed);
// An update's values as checkpoint writes (POST /threads/{id}/state's `values`, a run's
// `command.update`; `field` names it in errors): channels of the workflow, messages in weir's
// shape, last_value channels only (the others' reducers are the graph runtime's).
Result<boost::json::object> state_writes(const graph::WorkflowSpec& spec,
                                         const LangGraphStateUpdate& u, std::string_view field);
// GET /threads/{id}/runs/{run_id}/stream.
boost::asio::awaitable<void> rejoin(const LangGraphApi& api, http::Exchange& ex,
                                    const cluster::RunRecord& rec, http::Response& out,
                                    bool& streamed);
// GET /threads/{thread_id}/stream.
boost::asio::awaitable<void> route_thread_stream(const LangGraphApi& api, http::Exchange& ex,
                                                 const std::string& thread, http::Response& out,
                                                 bool& streamed);
boost::asio::awaitable<void> route_thread_runs(const LangGraphApi& api, http::Exchange& ex,
                                               const std::vector<std::string>& s,
                                               const std::string& thread, http::Response& out,
                                               bool& streamed,
                                               const trace::SpanContext& request_span);

}  // namespace weir::serve
