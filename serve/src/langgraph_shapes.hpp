// The LangGraph Server API's JSON shapes of weir's things (langgraph_api.hpp serves them): an
// assistant and its graph and schemas from a workflow, a ThreadState from a checkpoint, a Run
// from a run record, what /wait answers, what a stream's `updates` show. No Asio.
//
// Thread safety: pure functions (those taking a store read it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/cluster/run_service.hpp"
#include "weir/runtime/error.hpp"

namespace weir::graph {
struct Checkpoint;
}

namespace weir::serve {

// uuid5(name) in LangGraph's namespace, as LangGraph names a graph's default assistant
// ("agent" -> "fe096781-5601-53d2-b2f6-0d3403f7e9ca").
std::string assistant_id_of(std::string_view graph_id);

// Unix ms as ISO 8601 in UTC: "2026-11-28T06:26:01.776Z"; null for 0 (not yet).
boost::json::value iso_time(std::int64_t ms);

// The workflow `name` as LangGraph's Assistant, created (and updated) at `created_ms`.
boost::json::object assistant_json(std::int64_t created_ms, const std::string& name,
                                   const graph::WorkflowSpec& spec);
// The graph as LangGraph draws it: __start__, the nodes, __end__, and the edges (a route's
// targets are conditional edges).
boost::json::object graph_json(const graph::WorkflowSpec& spec);
// {"graph_id", "input_schema", "output_schema", "state_schema", "config_schema": null, ...}:
// one property per channel.
boost::json::object schemas_json(const std::string& name, const graph::WorkflowSpec& spec);

// A checkpoint's interrupt as [{"id", "value"}] (empty when it has none; the id is stable per
// checkpoint), and its pending status ("running", "interrupted", "done", "failed" or "").
boost::json::array interrupts_of(const graph::Checkpoint& c);
std::string pending_status(const graph::Checkpoint& c);
// Whether the checkpoint is a stop at a breakpoint (interrupt_before/after), not a node's
// interrupt.
bool at_breakpoint(const graph::Checkpoint& c);
// The nodes a checkpoint's next step runs, one entry a task (a Send's node as often as it is
// sent), as LangGraph's `next`.
boost::json::array next_nodes(const graph::Checkpoint& c);
// The node an interrupted checkpoint waits at ("?" when it names none).
std::string interrupted_node(const graph::Checkpoint& c);
// {"thread_id", "checkpoint_ns": "", "checkpoint_id", "checkpoint_map": null}: a checkpoint's
// config as LangGraph names it.
boost::json::object checkpoint_ref(const std::string& thread, const std::string& id);
// The state before a thread's first checkpoint, as LangGraph's step -1 input checkpoint shows
// it (empty values, next __start__): weir writes none, so history shows this one, with the id
// kRootCheckpoint, as the parent of each root; a run or state update from it starts the thread
// afresh (RunService::root_thread). Agent Chat UI edits a first message by branching from it.
inline constexpr std::string_view kRootCheckpoint = "root";
boost::json::object root_state(const std::string& thread, std::int64_t created_ms);
// The state at checkpoint `checkpoint` of `thread` (Checkpointer::state_at) as clients are
// shown it: a message a run moved to the artifact store (one over the workflow's inline_limit
// is stored as a reference in its list) is put back in its list, read from the thread's blobs,
// up to kMaxInlinedMessage bytes each (a larger one, or one whose bytes are gone, stays a
// reference). Errors: state_at's.
inline constexpr std::size_t kMaxInlinedMessage = std::size_t{1} << 20;
Result<boost::json::object> client_state_at(const graph::Checkpointer& cp, std::string_view thread,
                                            std::string_view checkpoint);
// That putting back alone, on `values` of `thread` (a subgraph's recorded step's).
void inline_messages(const graph::Checkpointer& cp, std::string_view thread,
                     boost::json::object& values);
// A checkpoint as LangGraph's ThreadState (values with messages in LangChain's shape).
Result<boost::json::object> thread_state(const graph::Checkpointer& cp, const graph::Checkpoint& c);

// A run's status as LangGraph names it: pending, running, success (an interrupt too: then the
// thread is interrupted), error, interrupted (cancelled).
const char* run_status(cluster::RunState s);
boost::json::object run_object(const cluster::RunRecord& r);
// What /wait and /join answer once the run ended: the last `values` chunk the run would have
// streamed: the thread's values, {"__interrupt__": [...]} when it stopped at an interrupt, or
// {"__error__": {"error", "message"}} when it failed.
// `last`: the run's last checkpoint (null: the thread's latest), so an older run's answer is its
// own state, not what later runs made of the thread.
Result<boost::json::value> final_chunk(cluster::RunService& runs, const cluster::RunRecord& r,
                                       const graph::Checkpoint* last);

// What a step changed in a channel, as LangGraph's `updates` show a node's return: for a list
// (an append or messages channel, maybe windowed), the items after the longest tail of the old
// list that the new one starts with; else the new value.
boost::json::value delta(const boost::json::value* before, const boost::json::value& after);

}  // namespace weir::serve
