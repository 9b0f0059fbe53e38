// Bytes -> weir trace's reader (OTLP JSON lines) and its tree: no crash, and every span read
// back is drawn (the tree has a line per span).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "weir/runtime/trace_read.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto spans = weir::trace::parse_otlp_json_lines(in, "fuzz");
  if (!spans) {
    if (spans.error().message.empty()) std::abort();  // an error always says what is wrong
    return 0;
  }
  weir::trace::TreeOptions opt;
  opt.attributes = size % 2 == 0;
  const std::string tree = weir::trace::render_tree(*spans, opt);
  std::size_t lines = 0;
  for (char c : tree) lines += c == '\n';
  if (!opt.attributes && lines < spans->size()) std::abort();  // a span was not drawn
  return 0;
}
