// Private to weir::graph: what the run loop needs of the event stream.
#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>

#include "weir/graph/events.hpp"

namespace weir::graph {

// Pushes `e`, waiting while the stream is full; a no-op once the consumer closed the stream
// (or dropped it). Holds `impl` for the whole push: destroying the EventStream meanwhile closes
// it, which releases this push instead of leaving it waiting.
boost::asio::awaitable<void> push_event(std::shared_ptr<EventStream::Impl> impl, Event e);

}  // namespace weir::graph
