// weir trace FILE: the spans of OTLP JSON lines (weir run --trace FILE) as a tree with durations.
#include <cstdio>
#include <string>

#include "args.hpp"
#include "commands.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/trace_read.hpp"

namespace weir::cli {

int cmd_trace(Args args) {
  Flags f("trace", {"--trace-id"}, {"--attributes"});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) {
    f.fail(f.positional().empty() ? "give a trace file (OTLP JSON lines)"
                                  : "one trace file at a time");
    return kExitInvalidInput;
  }
  const std::string& file = f.positional()[0];
  // A trace file holds a line per batch: allow more than one JSON document's cap.
  auto text = read_json_file(file, std::size_t{1} << 30);
  if (!text) {
    std::fprintf(stderr, "weir trace: %s\n", text.error().message.c_str());
    return kExitInvalidInput;
  }
  auto spans = trace::parse_otlp_json_lines(*text, file);
  if (!spans) {
    std::fprintf(stderr, "weir trace: %s\n", spans.error().message.c_str());
    return kExitInvalidInput;
  }
  if (auto id = f.get("--trace-id")) {
    auto tid = trace::parse_trace_id(*id);
    if (!tid) {
      f.fail("--trace-id: " + tid.error().message);
      return kExitInvalidInput;
    }
    std::erase_if(*spans, [&](const trace::ReadSpan& s) { return s.span.trace_id != *tid; });
    if (spans->empty()) {
      std::fprintf(stderr, "weir trace: %s has no span of trace %s\n", file.c_str(), id->c_str());
      return kExitInvalidInput;
    }
  }
  if (spans->empty()) {
    std::fprintf(stderr, "weir trace: %s holds no spans\n", file.c_str());
    return kExitOk;
  }
  trace::TreeOptions opt;
  opt.attributes = f.has("--attributes");
  std::fputs(trace::render_tree(*spans, opt).c_str(), stdout);
  return kExitOk;
}

}  // namespace weir::cli
