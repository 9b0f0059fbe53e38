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

void SseReader::line(std::string_view l, std::vector<Event>& out) {
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (l.empty()) {  // dispatch
    if (has_data_) out.push_back(std::move(cur_));
    cur_ = {};
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment
  auto colon = l.find(':');
  std::string_view field = l.substr(0, colon), value;
  if (colon != std::string_view::npos) {
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) cur_.data.push_back('\n');
    cur_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    cur_.event.assign(value);
  }
}

bool SseReader::push(std::string_view bytes, std::vector<Event>& out) {
  if (overflowed_) return false;
  while (!bytes.empty()) {
    auto nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      break;
    }
    if (partial_.empty()) {
      line(bytes.substr(0, nl), out);
    } else {
      partial_.append(bytes.substr(0, nl));
      line(partial_, out);
      partial_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
  if (partial_.size() + cur_.data.size() > max_) {
    overflowed_ = true;
    partial_.clear();
    cur_ = {};
    return false;
  }
  return true;
}

}  // namespace weir::http
