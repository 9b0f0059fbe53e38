// Server-sent events (text/event-stream): the writer's framing and an incremental reader.
//
// Writer: sse_event("{...}") is "data: {...}\n\n" (multi-line data becomes several data:
// lines). Reader: push() bytes as they arrive; complete events come out in order. The reader
// holds at most `max_event_bytes` of one unfinished event; past that it fails (overflowed())
// rather than growing: a server that never ends an event cannot exhaust the client's memory.
//
// Thread safety: free functions; an SseReader is used by one thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace weir::http {

std::string sse_event(std::string_view data, std::string_view event = {});

class SseReader {
 public:
  struct Event {
    std::string event;  // "" when the event had no event: line
    std::string data;   // data: lines joined by '\n'
  };
  explicit SseReader(std::size_t max_event_bytes = 1u << 20) : max_(max_event_bytes) {}
  // Appends complete events to `out`. Returns false (and drops the input) once overflowed.
  bool push(std::string_view bytes, std::vector<Event>& out);
  bool overflowed() const { return overflowed_; }

 private:
  void line(std::string_view l, std::vector<Event>& out);
  std::size_t max_;
  std::string partial_;  // the unfinished line
  Event cur_;
  bool has_data_ = false;
  bool overflowed_ = false;
};

}  // namespace weir::http
