// The LangGraph Server API's request bodies and paths, read (langgraph_api.hpp serves them).
// No Asio: the fuzz build compiles this file alone (fuzz/fuzz_langgraph_request.cpp).
//
// Every reader returns a value or an Error whose code decides the HTTP status and whose
// message is the answer's "detail": corrupt_data (400: the body is not JSON), invalid_argument
// (422: a field of the wrong type or out of range, named), unsupported (501: a field weir cannot
// honour yet, named, so a client never gets a 200 that did something else). Fields a LangGraph
// client sends that change nothing weir does (durability, feedback_keys, checkpoint_during, ...)
// and unknown ones are ignored, as the LangGraph servers do.
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/cluster/run_queue.hpp"
#include "weir/runtime/error.hpp"

namespace weir::serve {

// A path segment percent-encoded (RFC 3986: only unreserved characters stay), so an id with
// '/', '?', '#', spaces or non-ASCII bytes makes one segment of a URL (langgraph_segments
// decodes it back).
std::string encode_segment(std::string_view s);

// "/threads/t%201/runs" -> {"threads", "t 1", "runs"}: segments percent-decoded, a trailing '/'
// dropped.
std::vector<std::string> langgraph_segments(std::string_view path);

// A request body: a JSON object, or {} for an empty body (a cancel has none).
Result<boost::json::object> langgraph_body(std::string_view text);

// A run request (POST /threads/{id}/runs[/wait|/stream], /runs[/wait|/stream]). `route` ("POST
// /runs/wait") names the endpoint in 501 texts.
struct LangGraphRun {
  std::string assistant_id;  // a graph id or an assistant id (checked by the caller)
  boost::json::object input;
  std::optional<boost::json::value> resume;  // command.resume
  boost::json::object update;                // command.update: channel values set first
  boost::json::object metadata;
  std::vector<std::string> stream_modes{"values"};
  bool cancel_on_disconnect = false;  // on_disconnect: "cancel"
  bool create_thread = false;         // if_not_exists: "create"
  std::string checkpoint_id;          // checkpoint / checkpoint_id: run from it ("": the latest)
  // A second run on a busy thread: reject (409), interrupt (cancel the thread's runs, keep what
  // they did), rollback (cancel them, back to where the first began), enqueue (wait for them).
  std::string multitask = "reject";
  // interrupt_before / interrupt_after ("*" or node names), config.recursion_limit,
  // stream_subgraphs (controls.subgraph_steps).
  cluster::RunControls controls;
  // after_seconds: the run starts no earlier than this (cluster::RunRequest::delay); 0 to a day.
  std::chrono::milliseconds after{0};
  // webhook: POSTed the run when it ends (webhooks.hpp); "": none. A URL read_webhook_url takes.
  std::string webhook;
};
Result<LangGraphRun> read_langgraph_run(const boost::json::object& body, std::string_view route);

// A webhook's URL: http:// or https://, a host (no credentials), a path, maybe a query; at most
// 2048 bytes. `origin` is "scheme://host:port" (http::parse_url reads it), `target` the request
// target ("/" at least). Errors: invalid_argument naming 'webhook' and what is wrong.
struct WebhookUrl {
  std::string origin, host, port, target;
  bool tls = false;
};
Result<WebhookUrl> read_webhook_url(std::string_view url);

// Stream modes: values, updates, messages-tuple, messages, custom, debug, tasks, checkpoints;
// events, tools and lifecycle are unsupported (501), anything else invalid_argument.
Status check_stream_modes(const std::vector<std::string>& modes, std::string_view route);

// POST /runs/batch: a list of 1 to kMaxBatch run requests (each read by read_langgraph_run).
inline constexpr std::size_t kMaxBatch = 100;
Result<std::vector<boost::json::object>> langgraph_batch(std::string_view text);

// POST /runs/cancel: the runs to cancel: run_ids (of thread_id when given), or the runs of
// thread_id; status pending, running or all (default).
struct LangGraphCancelMany {
  std::string thread_id;
  std::vector<std::string> run_ids;
  std::string status = "all";
};
Result<LangGraphCancelMany> read_langgraph_cancel_many(const boost::json::object& body);

// A stream event's id (langgraph_stream.hpp): the step's checkpoint and the event's number in
// it; checkpoint "" none, "end" the error event.
struct LangGraphEventId {
  std::string checkpoint;
  long index = -1;
  // A piece of message text's id adds, for each message being generated, the bytes of its text
  // the stream had sent: a rejoin sends only what comes after them.
  std::map<std::string, std::uint64_t> texts;
};
// A Last-Event-ID header: "" (and "null", "-1", which clients send for none) reads as none;
// otherwise "<checkpoint_id>:<n>", that followed by ";<message id>=<bytes>" for each message
// being generated (at most kMaxPieceIds; a piece's id), or "end". Errors: invalid_argument
// naming the header.
inline constexpr std::size_t kMaxPieceIds = 32;
Result<LangGraphEventId> read_last_event_id(std::string_view header);

// The checkpoint a body names by 'checkpoint_id' (a string) or 'checkpoint' ({"checkpoint_id"},
// maybe under "configurable"); "" when neither. Errors: invalid_argument (a subgraph's
// namespace, two different ids, an id the id rule refuses).
Result<std::string> read_langgraph_checkpoint(const boost::json::object& body);

// POST /threads/{id}/state: values (channel -> value), as_node, the checkpoint to update from.
struct LangGraphStateUpdate {
  std::optional<boost::json::object> values;
  std::string as_node;
  std::string checkpoint_id;  // "": the latest
};
Result<LangGraphStateUpdate> read_langgraph_state_update(const boost::json::object& body);

// POST /threads/prune: thread_ids (at most 1000), strategy delete (default) or keep_latest.
struct LangGraphPrune {
  std::vector<std::string> ids;
  bool keep_latest = false;
};
Result<LangGraphPrune> read_langgraph_prune(const boost::json::object& body);

// POST /threads: the thread id ("" when the server names it), metadata (graph_id folded in),
// if_exists "do_nothing".
struct LangGraphThreadCreate {
  std::string thread_id;
  boost::json::object metadata;
  bool do_nothing_if_exists = false;
};
Result<LangGraphThreadCreate> read_langgraph_thread_create(const boost::json::object& body);

// limit (1..1000, default 10) and offset (>= 0) of a search or history body.
struct LangGraphPage {
  std::size_t limit = 10, offset = 0;
};
Result<LangGraphPage> read_langgraph_page(const boost::json::object& body);

// POST /threads/search and /threads/count: filters (metadata and values: containment; ids: at
// most 1000; status: idle, busy, interrupted or error), the order (sort_by thread_id,
// created_at or updated_at; sort_order asc or desc, default created_at desc) and the page.
// status and state_updated_at as sort keys, select and extract: unsupported (501).
struct LangGraphThreadSearch {
  LangGraphPage page;
  std::optional<boost::json::object> metadata, values;
  std::optional<std::vector<std::string>> ids;
  std::string status;  // "": any
  std::string sort_by = "created_at";
  bool ascending = false;
};
Result<LangGraphThreadSearch> read_langgraph_thread_search(const boost::json::object& body);

// POST /assistants/search and /assistants/count: graph_id, name (a case-insensitive part of
// it), metadata (containment), the page; sort_by and sort_order checked; select: 501.
struct LangGraphAssistantSearch {
  LangGraphPage page;
  std::optional<std::string> graph_id, name;
  std::optional<boost::json::object> metadata;
  std::string sort_by = "name";
  bool ascending = true;
};

// POST /assistants (create) and PATCH /assistants/{id} (a new version): the fields given.
// config: tags, recursion_limit (1 up to 1,000,000; the graph's cap is checked by the caller),
// configurable; context and other config keys: 501 (as on a run). name: at most 256 bytes;
// description: a string or null; metadata: an object.
struct LangGraphAssistantWrite {
  std::optional<std::string> graph_id, assistant_id, name;
  std::optional<boost::json::value> description;  // a string or null
  std::optional<boost::json::object> config, metadata;
  bool do_nothing_if_exists = false;  // if_exists "do_nothing" (else "raise": 409)
};
Result<LangGraphAssistantWrite> read_langgraph_assistant_write(const boost::json::object& body,
                                                               std::string_view route);
// POST /assistants/{id}/latest: {"version": n}.
Result<std::int64_t> read_langgraph_assistant_version(const boost::json::object& body);
Result<LangGraphAssistantSearch> read_langgraph_assistant_search(const boost::json::object& body);

// A history body's `before`: a checkpoint id, or a config {"configurable": {"checkpoint_id"}}
// (what the JS SDK sends), or {"checkpoint_id"}. "" when absent.
Result<std::string> read_langgraph_before(const boost::json::object& body);

// JSONB-style containment, as the LangGraph server filters metadata and values: every key of
// `want` is in `have` with an equal value (objects: contained, recursively).
bool json_contains(const boost::json::value& have, const boost::json::value& want);

}  // namespace weir::serve
