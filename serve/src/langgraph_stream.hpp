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
// Token by token. In the messages modes the text of a message a node is generating (an llm
// node's reply: RunService::watch_text) goes out as it comes: messages-tuple as
// `messages` events of AIMessageChunk pieces (the SDK joins them by message id), messages as
// `messages/partial` with the text so far. A step's pieces go after the previous step's events
// and before its own; when the step is committed its message is not sent again whole
// (messages-tuple: a last chunk holds what the pieces missed, if anything).
//
// Subgraphs. A run asked with stream_subgraphs records its subgraphs' steps in the checkpoint
// of the step that called them (graph::RunOptions::record_subgraph_steps); that step's events
// open with theirs, named as LangGraph's: "values|<ns>" (the subgraph's state, its input first)
// and "updates|<ns>", ns "<node>:<task id>" per enclosing call joined by '|'. Pieces of a
// subgraph node's message are then "messages|<ns>". The other modes show subgraphs only
// through the step that called them. Pieces carry no
// event id "<checkpoint>:<n>;<message id>=<bytes>..." (the last step's last event, and the
// bytes of each message being generated sent so far): a stream rejoined after one sends each
// message's text from there on (in-process, where a watch gets the text so far), or what its
// client lacks as one chunk with the step (PostgreSQL, whose watch starts with the next piece).
// Without a step of the run streamed before them (a resume's first step) pieces carry no id.
//
// Resumable. Every event's id is "<checkpoint_id>:<k>", the k-th event of that step in this
// stream's modes, so the same run streamed again gives the same ids: a stream that starts after
// a Last-Event-ID is the one that was cut, from the next event on (ask with the same modes).
// The error event's id is "end".
//
// Thread safety: one LangGraphStream per stream.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "langgraph_request.hpp"
#include "weir/cluster/run_service.hpp"
#include "weir/graph/events.hpp"
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
  // Token by token (see above).
  std::vector<graph::MessageText> held;      // pieces not sent yet
  std::map<std::string, std::string> texts;  // message id -> its text sent in pieces so far
  std::set<std::string> missed;  // messages whose first piece came before the stream: whole
  // A rejoin (Last-Event-ID of a piece: seen.texts): the bytes of each message's text its client
  // has; only what follows goes out.
  std::map<std::string, std::uint64_t> skip;
  std::optional<std::int64_t> last_step;  // the step of the last checkpoint streamed
  std::string last_checkpoint;            // its id
  long last_index = 0;                    // the number of its last event in this stream
  std::string run_id, thread_id;          // the run's (set by langgraph_stream_events)
  std::int64_t attempt = 0;               // its record's attempts at the last look
  // The run streams subgraphs (its controls' subgraph_steps: stream_subgraphs), read at the
  // first look.
  bool subgraphs = false, controls_read = false;
};

// The nodes a workflow's START edges lead to (static targets; a routed start names none).
std::vector<std::string> start_nodes(const graph::WorkflowSpec& spec);

// The events of run `r`'s steps `steps` (its checkpoints, oldest first, after those of earlier
// calls) with the message text `pieces` (taken since the last call) placed among them, and the
// error event when the record says the run failed.
Result<std::string> langgraph_stream_events(const graph::Checkpointer& cp,
                                            const cluster::RunRecord& r,
                                            const std::vector<graph::Checkpoint>& steps,
                                            std::vector<graph::MessageText> pieces,
                                            LangGraphStream& st);
// The events of message text `pieces` alone (between two looks at the run's steps): those of
// the step after the last one streamed; later ones wait for their step's predecessor.
std::string langgraph_text_events(std::vector<graph::MessageText> pieces, LangGraphStream& st);

}  // namespace weir::serve
