// The events of a LangGraph run stream (POST .../runs/stream, GET .../runs/{run_id}/stream),
// made from the run's checkpoints as they are committed. No Asio (langgraph_api.cpp follows the
// run and writes what this makes).
//
// Modes: values (the state after each step), updates ({node: what the step changed}),
// messages-tuple (event "messages", data [message, metadata]: each message a step added, in
// LangChain's shape, with the node that added it), messages (the older pair
// "messages/metadata" + "messages/complete"), checkpoints (each checkpoint as LangGraph's
// checkpoint event), tasks (a task's result when its step was committed, then the next step's
// tasks), debug (the three as {"type", "timestamp", "step", "payload"}), custom (what nodes emit:
// workflow-file nodes emit none). A resume opens with the state it resumes from (values). A step
// that stops at an interrupt is {"__interrupt__": [...]} in updates and values; a failed run
// ends with an `error` event.
//
// Resumable. Every event's id is "<checkpoint_id>:<k>", the k-th event of that step in this
// stream's modes, so the same run streamed again gives the same ids: a stream that starts after
// a Last-Event-ID is the one that was cut, from the next event on (ask with the same modes).
// The error event's id is "end".
//
// Thread safety: one LangGraphStream per stream.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "langgraph_request.hpp"
#include "weir/cluster/run_service.hpp"
#include "weir/runtime/error.hpp"

namespace weir::graph {
class Checkpointer;
struct Checkpoint;
}  // namespace weir::graph

namespace weir::serve {

struct LangGraphStream {
  std::vector<std::string> modes;
  std::string graph_id;  // for messages' metadata
  // The nodes START leads to: who ran a thread's first step when no input checkpoint precedes it
  // (a run without input writes none).
  std::vector<std::string> entry;
  LangGraphEventId seen;  // resuming: the events up to this one were seen
  // Carried from one look to the next.
  std::vector<std::string> ran;              // the nodes the next step runs
  std::optional<boost::json::object> state;  // the state before the next step
  bool opened = false;                       // the first step was streamed
};

// The nodes a workflow's START edges lead to (static targets; a routed start names none).
std::vector<std::string> start_nodes(const graph::WorkflowSpec& spec);

// The events of run `r`'s steps `steps` (its checkpoints, oldest first, after those of earlier
// calls), and the error event when the record says the run failed.
Result<std::string> langgraph_stream_events(const graph::Checkpointer& cp,
                                            const cluster::RunRecord& r,
                                            const std::vector<graph::Checkpoint>& steps,
                                            LangGraphStream& st);

}  // namespace weir::serve
