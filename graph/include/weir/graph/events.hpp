// Streaming a graph run: the events a run produces and the bounded channel that carries them.
//
// A run streams when RunOptions::events holds an EventStream; with a null pointer nothing is
// built or sent (zero cost). One stream serves one run and one consumer:
//
//   auto events = std::make_shared<EventStream>(16);
//   RunOptions opt; opt.events = events;
//   co_spawn(ex, runtime.async_invoke(graph, input, opt), on_done);
//   while (auto e = co_await events->async_next()) use(*e);   // ends after the last event
//
// Order. run_started first; per superstep: node_started for each node of the step (task order),
// then, per node in task order, its custom events (in emit order) and node_finished; then
// `state` (with RunOptions::stream_state); last exactly one of run_finished, run_failed,
// run_interrupted, after which async_next() returns nullopt. Events of a subgraph's nodes come
// between its node's node_started and node_finished, their node names prefixed with the
// subgraph node's name ("research/plan"); the child's run_* and state events are not
// forwarded.
//
// Backpressure. The stream holds at most `capacity` events. When it is full the run waits in
// its push until the consumer takes one: a slow consumer slows the run, nothing queues without
// bound. A consumer that stops reading must say so: close() (or destroying the EventStream,
// i.e. dropping every shared_ptr the caller holds; the run keeps no owning reference) makes
// every later push a no-op and releases a push that is waiting, so the run finishes unhindered.
// A consumer that holds the stream but never reads stalls the run (by design: that is what
// backpressure means); use a deadline on the run or close the stream.
//
// Thread safety: one producer (the run) and one consumer may use the stream from any threads
// at once; close() and size() may be called from any thread. The stream is a queue of its own,
// not bound to an io_context: it may outlive one. A side that waits is resumed by a post to its
// coroutine's executor, which must still be running then (the usual Asio rule).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

namespace weir::graph {

enum class EventKind {
  run_started,      // data: the run's input object (the resume value for async_resume)
  node_started,     // node, step; data: the Send input (null for an edge-triggered node)
  node_finished,    // data: the node's writes {"channel": value}, large values as references
  state,            // data: the full state after the step (RunOptions::stream_state only)
  custom,           // name + data: what the node passed to NodeContext::emit
  warning,          // a problem the run survived; data: {"code","message","channel"}
  run_finished,     // data: {"steps": n}
  run_failed,       // step: the step it failed in (0: before the first); data: {"code": errc
                    // name, "message": text}
  run_interrupted,  // node: the interrupting node; data: {"payload": value}
};
// The stable lower-case name ("node_started"); "unknown" for a value outside the enum.
const char* event_kind_name(EventKind kind) noexcept;

struct Event {
  EventKind kind = EventKind::custom;
  std::string run_id;
  std::string node;  // "" for run-level events
  std::int64_t step = 0;
  std::string name;  // custom events: the name given to emit(); "" otherwise
  boost::json::value data;
};

// A piece of a chat message a node is writing, sent while the node runs (a model's reply as
// it is generated): RunOptions::on_message_text. The pieces of one message, in order, make its
// text; the message the node writes at the end carries `message_id` as its "id".
struct MessageText {
  std::string run_id;
  std::string node;       // a subgraph's node is prefixed as in events ("research/plan")
  std::int64_t step = 0;  // the thread step writing it (a subgraph node: its top-level run's)
  std::string message_id;
  std::uint64_t offset = 0;  // where `text` starts in the message's text (bytes)
  std::string text;
};

class EventStream {
 public:
  // REQUIRES: capacity >= 1 (0 is treated as 1).
  explicit EventStream(std::size_t capacity = 64);
  // Closes the stream (see close()).
  ~EventStream();
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // The next event; nullopt after the run's terminal event was delivered or after close().
  // Waits while the stream is empty. One consumer at a time.
  boost::asio::awaitable<std::optional<Event>> async_next();

  // Producer side (the runtime's): waits while the stream is full; returns at once, dropping
  // the event, when the stream is closed.
  boost::asio::awaitable<void> async_push(Event event);

  // The consumer gives up: queued events are dropped, pushes become no-ops, a waiting push and
  // a waiting async_next return. Idempotent.
  void close() noexcept;
  bool closed() const noexcept;

  std::size_t capacity() const noexcept { return capacity_; }
  // Events pushed and not yet taken (a snapshot; never above capacity()).
  std::size_t size() const noexcept;

  struct Impl;

 private:
  friend class GraphRuntime;
  friend struct Runner;
  std::size_t capacity_;
  std::shared_ptr<Impl> impl_;  // shared with a push in flight, so destruction can release it
};

}  // namespace weir::graph
