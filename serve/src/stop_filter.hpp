// Stop sequences for OpenAI's `stop`: the text before the first stop sequence is the answer;
// the stop sequence and everything after it are not. While streaming, text that could still be
// the start of a stop sequence is held back (at most the longest sequence minus one byte, cut
// at a UTF-8 character boundary).
//
// Thread safety: a value used by one thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weir/runtime/text.hpp"

namespace weir::serve {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (const auto& s : stops_) hold_ = std::max(hold_, s.size());
  }
  // Text safe to send now.
  std::string push(std::string_view text) {
    if (stopped_) return {};
    buf_.append(text);
    std::size_t at = earliest();
    if (at != std::string::npos) {
      stopped_ = true;
      std::string out = buf_.substr(0, at);
      buf_.clear();
      return out;
    }
    std::size_t keep = hold_ > 0 ? hold_ - 1 : 0;
    if (buf_.size() <= keep) return {};
    const std::size_t cut = utf8_cut(buf_, buf_.size() - keep);
    std::string out = buf_.substr(0, cut);
    buf_.erase(0, cut);
    return out;
  }
  // The rest, at the end.
  std::string flush() {
    if (stopped_) return {};
    std::size_t at = earliest();
    std::string out = at == std::string::npos ? std::move(buf_) : buf_.substr(0, at);
    buf_.clear();
    stopped_ = true;
    return out;
  }
  bool stopped() const { return stopped_; }

 private:
  std::size_t earliest() const {
    std::size_t best = std::string::npos;
    for (const auto& s : stops_) best = std::min(best, buf_.find(s));
    return best;
  }
  std::vector<std::string> stops_;
  std::size_t hold_ = 0;
  std::string buf_;
  bool stopped_ = false;
};

}  // namespace weir::serve
