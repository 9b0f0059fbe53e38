// The tracing flags every command that runs something takes (docs/tracing.md); a command lists
// them among its Flags:
//   --otlp-endpoint URL   OTLP/HTTP base URL (else OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)
//   --trace FILE          OTLP JSON lines, for `weir trace FILE`
//   --trace-content       prompts, completions, tool arguments and results in the spans
#pragma once

#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "args.hpp"
#include "weir/http/otlp.hpp"

namespace weir::cli {

// The tracer the flags and the OTEL_* variables ask for (null: tracing off). On a bad setting
// prints it, naming the command, and returns false. The tracer flushes (at most 3 s) when it
// is destroyed: keep it until the command's runs are over.
inline bool open_tracer(Flags& f, std::shared_ptr<trace::Tracer>& out) {
  http::TraceSettings s;
  s.otlp_endpoint = f.get("--otlp-endpoint").value_or("");
  s.file = f.get("--trace").value_or("");
  s.capture_content = f.has("--trace-content");
  if (f.has("--otlp-endpoint") && s.otlp_endpoint.empty())
    return f.fail("--otlp-endpoint is empty");
  if (f.has("--trace") && s.file.empty()) return f.fail("--trace needs a file name");
  auto t = http::make_tracer(s);
  if (!t) return f.fail(t.error().message);
  out = std::move(*t);
  if (s.capture_content && !out)
    return f.fail(
        "--trace-content needs somewhere to send spans: --trace FILE, --otlp-endpoint "
        "URL or OTEL_EXPORTER_OTLP_ENDPOINT");
  return true;
}

// Flushes what the command's runs recorded; a receiver that does not answer costs at most
// `timeout` (its spans are dropped and counted).
inline void close_tracer(std::shared_ptr<trace::Tracer>& t,
                         std::chrono::milliseconds timeout = std::chrono::seconds(3)) {
  if (!t) return;
  t->shutdown(timeout);
  if (t->spans_dropped() > 0)
    std::fprintf(stderr, "weir: %llu trace spans were dropped (%s)\n",
                 static_cast<unsigned long long>(t->spans_dropped()), t->describe().c_str());
  t.reset();
}

}  // namespace weir::cli
