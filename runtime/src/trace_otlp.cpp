// OTLP/JSON encoding of a batch of spans (opentelemetry-proto's ExportTraceServiceRequest in
// the protobuf JSON mapping: ids as hex, 64-bit integers as decimal strings, enums as numbers),
// and the file exporter that writes one batch a line.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <boost/json.hpp>

#include "weir/runtime/trace.hpp"

namespace weir::trace {

namespace json = boost::json;

namespace {

json::object any_value(const AttributeValue& v) {
  json::object o;
  if (const auto* b = std::get_if<bool>(&v)) {
    o["boolValue"] = *b;
  } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
    o["intValue"] = std::to_string(*i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    // JSON has no NaN or infinity; the protobuf JSON mapping spells them as strings.
    if (std::isnan(*d))
      o["doubleValue"] = "NaN";
    else if (std::isinf(*d))
      o["doubleValue"] = *d > 0 ? "Infinity" : "-Infinity";
    else
      o["doubleValue"] = *d;
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    o["stringValue"] = *s;
  } else if (const auto* a = std::get_if<std::vector<std::string>>(&v)) {
    json::array values;
    for (const auto& x : *a) values.push_back(json::object{{"stringValue", x}});
    o["arrayValue"] = json::object{{"values", std::move(values)}};
  }
  return o;
}

json::array attributes(const std::vector<Attribute>& attrs) {
  json::array a;
  a.reserve(attrs.size());
  for (const auto& kv : attrs)
    a.push_back(json::object{{"key", kv.key}, {"value", any_value(kv.value)}});
  return a;
}

json::object span_json(const SpanData& s) {
  json::object o;
  o["traceId"] = s.trace_id.hex();
  o["spanId"] = s.span_id.hex();
  if (s.parent_span_id.valid()) o["parentSpanId"] = s.parent_span_id.hex();
  if (!s.trace_state.empty()) o["traceState"] = s.trace_state;
  o["flags"] = static_cast<std::uint32_t>(s.flags);
  o["name"] = s.name;
  o["kind"] = static_cast<int>(s.kind);
  o["startTimeUnixNano"] = std::to_string(s.start_unix_ns);
  o["endTimeUnixNano"] = std::to_string(s.end_unix_ns);
  o["attributes"] = attributes(s.attributes);
  if (s.dropped_attributes) o["droppedAttributesCount"] = s.dropped_attributes;
  if (!s.events.empty()) {
    json::array ev;
    for (const auto& e : s.events)
      ev.push_back(json::object{{"timeUnixNano", std::to_string(e.time_unix_ns)},
                                {"name", e.name},
                                {"attributes", attributes(e.attributes)}});
    o["events"] = std::move(ev);
  }
  if (s.dropped_events) o["droppedEventsCount"] = s.dropped_events;
  json::object status{{"code", static_cast<int>(s.status)}};
  if (!s.status_message.empty()) status["message"] = s.status_message;
  o["status"] = std::move(status);
  return o;
}

class FileExporter final : public SpanExporter {
 public:
  explicit FileExporter(std::string path) : path_(std::move(path)) {}
  // A file this exporter created and never wrote (a command refused before its run started)
  // is removed again: no empty trace file is left behind.
  ~FileExporter() override {
    if (!created_ || written_) return;
    out_.close();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  bool open() {
    std::error_code ec;
    created_ = !std::filesystem::exists(path_, ec) && !ec;
    out_.open(path_, std::ios::app | std::ios::binary);
    return out_.is_open();
  }
  std::string describe() const override { return "file " + path_; }
  Status export_json(std::string_view body, std::size_t, const ExportDeadline&) override {
    written_ = true;
    out_ << body << '\n';
    out_.flush();
    if (!out_) {
      out_.clear();
      return Error(Errc::io_error, "cannot write the trace file '" + path_ + "'");
    }
    return {};
  }

 private:
  std::string path_;
  std::ofstream out_;
  bool created_ = false;
  bool written_ = false;
};

}  // namespace

std::string encode_otlp_json(std::span<const SpanData> spans, const TracerOptions& options) {
  std::vector<Attribute> res;
  res.push_back({"service.name", options.service_name});
  res.push_back({"telemetry.sdk.name", std::string("weir")});
  res.push_back({"telemetry.sdk.language", std::string("cpp")});
  for (const auto& a : options.resource) res.push_back(a);
  json::array list;
  list.reserve(spans.size());
  for (const auto& s : spans) list.push_back(span_json(s));
  json::object scope_spans{{"scope", json::object{{"name", "weir"}}}, {"spans", std::move(list)}};
  json::object resource_spans{{"resource", json::object{{"attributes", attributes(res)}}},
                              {"scopeSpans", json::array{std::move(scope_spans)}}};
  json::object req{{"resourceSpans", json::array{std::move(resource_spans)}}};
  return json::serialize(req);
}

Result<std::unique_ptr<SpanExporter>> make_file_exporter(std::string path) {
  auto e = std::make_unique<FileExporter>(path);
  if (!e->open())
    return Error(Errc::io_error, "cannot open the trace file '" + path + "' for writing");
  return std::unique_ptr<SpanExporter>(std::move(e));
}

}  // namespace weir::trace
