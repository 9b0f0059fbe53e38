#include "weir/http/sse.hpp"

namespace weir::http {

std::string sse_event(std::string_view data, std::string_view event) {
  std::string out;
  out.reserve(data.size() + 16);
  if (!event.empty()) out.append("event: ").append(event).append("\n");
  std::size_t start = 0;
  while (true) {
    auto nl = data.find('\n', start);
    out.append("data: ").append(data.substr(start, nl == std::string_view::npos ? nl : nl - start));
    out.push_back('\n');
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out.push_back('\n');
  return out;
}

Status SseReader::feed(std::string_view bytes, const OnEvent& on_event) {
  if (failed_) return Error(Errc::corrupt_data, error_);
  for (std::size_t i = 0; i < bytes.size();) {
    const char c = bytes[i];
    if (last_was_cr_ && c == '\n') {  // the LF of a CRLF split from its CR
      last_was_cr_ = false;
      ++i;
      continue;
    }
    last_was_cr_ = false;
    if (c == '\n' || c == '\r') {
      last_was_cr_ = c == '\r';
      ++i;
      if (auto s = line_done(on_event); !s) {
        failed_ = true;
        error_ = s.error().message;
        return s;
      }
      continue;
    }
    // Copy the run of ordinary bytes up to the next line end in one go.
    std::size_t end = bytes.find_first_of("\r\n", i);
    if (end == std::string_view::npos) end = bytes.size();
    if (line_.size() + (end - i) > limits_.max_line_bytes) {
      failed_ = true;
      error_ =
          "event stream line longer than max_line_bytes=" + std::to_string(limits_.max_line_bytes);
      return Error(Errc::corrupt_data, error_);
    }
    line_.append(bytes.substr(i, end - i));
    i = end;
  }
  return {};
}

Status SseReader::line_done(const OnEvent& on_event) {
  if (line_.empty()) {  // blank line: dispatch
    Status s;
    if (has_data_) s = on_event(event_);
    event_ = SseEvent{};
    has_data_ = false;
    return s;
  }
  std::string_view line = line_;
  if (line.front() == ':') {
    line_.clear();
    return {};
  }
  std::string_view field = line, value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  Status s;
  if (field == "data") {
    const std::size_t add = value.size() + (has_data_ ? 1 : 0);
    if (event_.data.size() + add > limits_.max_event_bytes) {
      s = Error(Errc::corrupt_data, "event stream event larger than max_event_bytes=" +
                                        std::to_string(limits_.max_event_bytes));
    } else {
      if (has_data_) event_.data += '\n';
      event_.data.append(value);
      has_data_ = true;
    }
  } else if (field == "event") {
    event_.event.assign(value.substr(0, 256));
  } else if (field == "id") {
    event_.id.assign(value.substr(0, 256));
  }
  line_.clear();
  return s;
}

}  // namespace weir::http
