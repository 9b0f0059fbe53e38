#include "call_stream.hpp"

#include <boost/json.hpp>

namespace weir::serve {

namespace {

// The length of `text` from `at` on that holds `lit` after optional spaces, or npos when the
// text does not (yet) hold it; `ok` false when it holds something else.
std::size_t expect(std::string_view text, std::size_t at, std::string_view lit, bool& ok) {
  while (at < text.size() && text[at] == ' ') ++at;
  const std::size_t n = std::min(lit.size(), text.size() - at);
  if (text.substr(at, n) != lit.substr(0, n)) ok = false;
  return ok && n == lit.size() ? at + n : std::string_view::npos;
}

}  // namespace

std::vector<http::openai::ToolCall> CallStream::push(std::string_view text) {
  std::vector<http::openai::ToolCall> out;
  std::string rest;
  if (state_ == State::head) {
    head_.append(text);
    // {"name": "<tool>", "arguments": <- then at least one more byte
    bool ok = true;
    std::size_t at = expect(head_, 0, "{", ok);
    if (at != std::string_view::npos) at = expect(head_, at, "\"name\"", ok);
    if (at != std::string_view::npos) at = expect(head_, at, ":", ok);
    if (at != std::string_view::npos) at = expect(head_, at, "\"", ok);
    std::string name;
    if (at != std::string_view::npos) {  // the name: a JSON string to its closing quote
      std::size_t end = at;
      while (end < head_.size() && head_[end] != '"') end += head_[end] == '\\' ? 2 : 1;
      if (end >= head_.size()) return out;
      boost::system::error_code ec;
      auto v = boost::json::parse(head_.substr(at - 1, end - at + 2), ec);
      if (ec || !v.is_string()) return out;
      name = std::string(v.as_string());
      at = end + 1;
      at = expect(head_, at, ",", ok);
      if (at != std::string_view::npos) at = expect(head_, at, "\"arguments\"", ok);
      if (at != std::string_view::npos) at = expect(head_, at, ":", ok);
      if (at != std::string_view::npos)
        while (at < head_.size() && head_[at] == ' ') ++at;
      if (at != std::string_view::npos && at >= head_.size()) at = std::string_view::npos;
    }
    if (at == std::string_view::npos) return out;  // wait for more (or never: not a call)
    out.push_back({id_, name, "", index_});
    state_ = State::arguments;
    rest = head_.substr(at);
    head_.clear();
    text = rest;
  }
  if (state_ != State::arguments) return out;
  std::size_t end = 0;
  for (; end < text.size() && state_ == State::arguments; ++end) {
    const char c = text[end];
    if (in_string_) {
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"')
        in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      state_ = State::done;
    }
  }
  if (end == 0) return out;
  if (!out.empty()) {
    out.back().arguments.assign(text.substr(0, end));
  } else {
    out.push_back({"", "", std::string(text.substr(0, end)), index_});
  }
  return out;
}

}  // namespace weir::serve
