// Reading traces back: OTLP/JSON (what weir's exporters send and `weir run --trace FILE`
// writes, one ExportTraceServiceRequest a line) into spans, and the tree `weir trace FILE`
// prints.
//
// The reader takes outside input (a file anyone may have written, a request body a receiver
// got): every field is checked for its type, ids for their length and digits, and an error
// names the line and the JSON pointer ("trace.jsonl:3: /resourceSpans/0/scopeSpans/0/spans/1/
// spanId: expected 16 hex digits"). Fields it does not know are skipped. Fuzzed:
// fuzz/fuzz_trace.cpp.
//
// Thread safety: free functions, reentrant.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::trace {

// A span read back, with the service that sent it (resource attribute service.name).
struct ReadSpan {
  SpanData span;
  std::string service;
};

// One ExportTraceServiceRequest. `source` names the text in errors. Errors: corrupt_data
// (malformed JSON, a field of the wrong type, a bad id), invalid_argument (over the JSON
// parser's size and depth fences).
Result<std::vector<ReadSpan>> parse_otlp_json(std::string_view body, std::string_view source);

// OTLP JSON lines: one request a line; blank lines are skipped. An error names the line
// ("source:LINE: ...") and nothing is returned.
Result<std::vector<ReadSpan>> parse_otlp_json_lines(std::string_view text, std::string_view source);

struct TreeOptions {
  bool attributes = false;  // each span's attributes and events under it
};

// Every trace as a tree, its spans under their parents in start order, each with its duration:
//   trace 4bf92f35... (12 spans, 1.84 s)
//   invoke_workflow research_crew  1.84 s
//   ├─ superstep 1  612.0 ms
//   │  └─ node research  611.8 ms
// Durations in µs under a millisecond, ms under 10 s, else s. A span whose parent is not in the
// input is shown as a root of its trace; a failed span ends with "  ! <error.type>: <message>".
// Indentation stops growing 40 levels down (the output stays linear in the input).
std::string render_tree(const std::vector<ReadSpan>& spans, const TreeOptions& options = {});

}  // namespace weir::trace
