// Server-sent events (text/event-stream): the writer's framing (weir serve) and an incremental,
// bounded reader (the clients: remote models, MCP over Streamable HTTP, tests).
//
// Writer: sse_event("{...}") is "data: {...}\n\n" (multi-line data becomes several data: lines).
//
// Reader: bytes arrive in pieces of any size (a line or a CRLF may be split across pieces);
// every complete event (ended by a blank line) is handed to the callback. Lines end with LF,
// CRLF or CR. Fields: "data" (lines joined with '\n'), "event", "id"; "retry" and unknown fields
// are ignored; a line starting with ':' is a comment. An event with no data field is not
// dispatched. A line longer than max_line_bytes or an event whose data passes max_event_bytes
// is an error (corrupt_data) naming the limit: memory held is at most about max_line_bytes +
// max_event_bytes whatever the stream's length, so a server that never ends an event cannot
// exhaust the client's memory.
//
// Thread safety: sse_event is a free function; one reader per stream. No Asio: the fuzz build
// compiles it alone.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "weir/runtime/error.hpp"

namespace weir::http {

std::string sse_event(std::string_view data, std::string_view event = {});

struct SseEvent {
  std::string event;  // "" when the stream gave none ("message" by the spec)
  std::string data;
  std::string id;
};

struct SseLimits {
  std::size_t max_line_bytes = 1u << 20;
  std::size_t max_event_bytes = 4u << 20;
};

class SseReader {
 public:
  // Returning an error from the callback stops feed() with that error.
  using OnEvent = std::function<Status(SseEvent&)>;

  explicit SseReader(SseLimits limits = {}) : limits_(limits) {}

  // Parses `bytes`, dispatching every event completed by them. After an error the reader is
  // unusable (further feeds return the same error).
  Status feed(std::string_view bytes, const OnEvent& on_event);

  // True when a partial line or an undispatched event is pending: a stream that ends here was
  // cut in the middle of an event.
  bool mid_event() const noexcept { return !line_.empty() || has_data_ || !event_.event.empty(); }

 private:
  Status line_done(const OnEvent& on_event);

  SseLimits limits_;
  std::string line_;
  SseEvent event_;
  bool has_data_ = false;
  bool last_was_cr_ = false;
  bool failed_ = false;
  std::string error_;
};

}  // namespace weir::http
