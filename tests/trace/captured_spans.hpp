// A span exporter that keeps what the tracer exports (OTLP JSON lines) for a test to read back
// with trace::parse_otlp_json_lines: the in-process way to see a component's spans.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weir/runtime/trace.hpp"
#include "weir/runtime/trace_read.hpp"

namespace weir::testing {

class CapturedSpans final : public trace::SpanExporter {
 public:
  explicit CapturedSpans(std::shared_ptr<std::string> into) : into_(std::move(into)) {}
  std::string describe() const override { return "captured"; }
  Status export_json(std::string_view body, std::size_t, const trace::ExportDeadline&) override {
    into_->append(body).push_back('\n');
    return {};
  }

 private:
  std::shared_ptr<std::string> into_;
};

// A tracer whose spans land in `*into`.
inline std::unique_ptr<trace::Tracer> captured_tracer(std::shared_ptr<std::string> into) {
  std::vector<std::unique_ptr<trace::SpanExporter>> ex;
  ex.push_back(std::make_unique<CapturedSpans>(std::move(into)));
  return std::make_unique<trace::Tracer>(trace::TracerOptions{}, std::move(ex));
}

}  // namespace weir::testing
