// Traces: OpenTelemetry spans from a run down to each model call and tool call.
//
// A Tracer makes Spans and sends the finished ones, in batches, to its exporters (OTLP over
// HTTP: weir/http/otlp.hpp; OTLP JSON lines in a file: make_file_exporter below). What a run
// hands to the code it calls is a Context: the tracer and the span to be the parent. A null
// Context (tracing off, the default) makes no-op Spans: every call on them is one branch on a
// null pointer, and nothing is allocated.
//
// The Tracer never blocks its callers and never grows: a finished span goes into a bounded
// queue (TracerOptions::max_queue_spans); when the queue is full the span is dropped and
// counted (weir_trace_spans_dropped_total{reason="queue_full"} in Registry::global()). One
// thread of the Tracer's own takes batches from the queue and calls the exporters, which may
// retry and wait (an OTLP receiver that hangs delays only that thread).
//
// Sampling is parent-based, always on: a span whose parent context came in unsampled (a
// `traceparent` with flags 00) records nothing; every other span is recorded and exported.
//
// Attribute names follow the OpenTelemetry GenAI semantic conventions where they exist
// (gen_ai.operation.name, gen_ai.request.model, gen_ai.usage.input_tokens, ...); weir's own
// are under `weir.*` (docs/tracing.md lists them). Prompt and completion text are recorded
// only when TracerOptions::capture_content is set, cut to max_content_bytes.
//
// Thread safety: a Tracer may be used from any thread. A Span is used by one thread at a time
// (it is a value owned by the code doing the work); ending it hands its data to the Tracer.
// REQUIRES: the Tracer outlives every Span and Context made from it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "weir/runtime/error.hpp"

namespace weir {
class Registry;
}

namespace weir::trace {

// 16 bytes; all zero is invalid (W3C trace context).
struct TraceId {
  std::array<std::uint8_t, 16> bytes{};
  bool valid() const noexcept;
  std::string hex() const;  // 32 lower-case hex digits
  friend bool operator==(const TraceId&, const TraceId&) = default;
};

// 8 bytes; all zero is invalid (and stands for "no parent").
struct SpanId {
  std::array<std::uint8_t, 8> bytes{};
  bool valid() const noexcept;
  std::string hex() const;  // 16 lower-case hex digits
  friend bool operator==(const SpanId&, const SpanId&) = default;
};

// 32 (TraceId) or 16 (SpanId) hex digits, either case. invalid_argument otherwise (all zero
// included).
Result<TraceId> parse_trace_id(std::string_view hex);
Result<SpanId> parse_span_id(std::string_view hex);
TraceId random_trace_id();
SpanId random_span_id();

// Where a span sits: its trace, itself, and the W3C flags and tracestate it carries on.
struct SpanContext {
  TraceId trace_id;
  SpanId span_id;
  std::uint8_t flags = 0;   // bit 0: sampled
  std::string trace_state;  // W3C tracestate, passed on as received (at most 512 bytes)
  bool valid() const noexcept { return trace_id.valid() && span_id.valid(); }
  bool sampled() const noexcept { return (flags & 1) != 0; }
};

// W3C trace context. parse_traceparent reads "00-<32 hex>-<16 hex>-<2 hex>" (a later version
// may carry more fields after a '-'); anything else, or zero ids, is nullopt (the standard says
// to ignore such a header and start a new trace). `tracestate` is kept when the traceparent is
// valid and it is at most 512 bytes of printable ASCII.
std::optional<SpanContext> parse_traceparent(std::string_view traceparent,
                                             std::string_view tracestate = {});
std::string format_traceparent(const SpanContext& ctx);  // "00-<trace>-<span>-<flags>"

enum class SpanKind : std::uint8_t { internal = 1, server = 2, client = 3 };
enum class StatusCode : std::uint8_t { unset = 0, ok = 1, error = 2 };

using AttributeValue =
    std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;
struct Attribute {
  std::string key;
  AttributeValue value;
};

struct SpanEvent {
  std::string name;
  std::int64_t time_unix_ns = 0;
  std::vector<Attribute> attributes;
};

// A finished span, as exported.
struct SpanData {
  TraceId trace_id;
  SpanId span_id;
  SpanId parent_span_id;  // invalid for a root span
  std::uint8_t flags = 1;
  std::string trace_state;
  std::string name;
  SpanKind kind = SpanKind::internal;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  StatusCode status = StatusCode::unset;
  std::string status_message;
  std::uint32_t dropped_attributes = 0;  // over TracerOptions::max_attributes
  std::uint32_t dropped_events = 0;      // over TracerOptions::max_events
  // The attribute `key`, or null.
  const AttributeValue* attribute(std::string_view key) const;
};

// When an export must be over. It may move earlier while the export runs (Tracer::shutdown
// shortens it), so an exporter reads it again while it waits. Thread safety: any thread.
class ExportDeadline {
 public:
  explicit ExportDeadline(std::chrono::steady_clock::time_point t) { set(t); }
  std::chrono::steady_clock::time_point get() const {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(ns_.load(std::memory_order_relaxed)));
  }
  void set(std::chrono::steady_clock::time_point t) {
    ns_.store(t.time_since_epoch().count(), std::memory_order_relaxed);
  }
  bool passed() const { return std::chrono::steady_clock::now() >= get(); }

 private:
  std::atomic<std::chrono::steady_clock::rep> ns_{0};
};

// Where batches go. The Tracer encodes each batch once as an OTLP/JSON
// ExportTraceServiceRequest (`{"resourceSpans": [...]}`) and hands the same text to every
// exporter, from its export thread (one call at a time). An exporter may retry until the
// deadline and must return soon after it passes (a request in flight is cancelled).
class SpanExporter {
 public:
  virtual ~SpanExporter() = default;
  // "otlp http://host:4318/v1/traces", "file trace.jsonl": for logs and errors.
  virtual std::string describe() const = 0;
  virtual Status export_json(std::string_view otlp_json, std::size_t spans,
                             const ExportDeadline& deadline) = 0;
};

// OTLP JSON lines: each batch is one line of `path` (appended; created when missing). Errors:
// io_error naming the file when it cannot be opened.
Result<std::unique_ptr<SpanExporter>> make_file_exporter(std::string path);

struct TracerOptions {
  std::string service_name = "weir";  // resource attribute service.name
  std::vector<Attribute> resource;    // more resource attributes (service.version, ...)
  bool capture_content = false;       // prompts, completions, tool arguments and results
  std::size_t max_content_bytes = 4096;
  std::size_t max_queue_spans = 2048;  // finished spans waiting; more are dropped
  std::size_t max_batch_spans = 512;
  std::chrono::milliseconds schedule_delay{1000};   // a batch leaves at least this often
  std::chrono::milliseconds export_timeout{30000};  // one batch, retries included
  std::size_t max_attributes = 64;                  // per span; more are dropped and counted
  std::size_t max_events = 64;                      // per span
  std::size_t max_attribute_bytes = 4096;           // a string value is cut to this
  Registry* metrics = nullptr;                      // null: Registry::global()
};

class Tracer;

// A span being recorded, or a no-op (default-constructed, tracing off, unsampled parent).
// Ends when end() is called or it is destroyed. Move-only.
class Span {
 public:
  Span() = default;
  ~Span() { end(); }
  Span(Span&& o) noexcept : tracer_(o.tracer_), data_(std::move(o.data_)) {}
  Span& operator=(Span&& o) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool recording() const noexcept { return data_ != nullptr; }
  explicit operator bool() const noexcept { return recording(); }
  // This span's context (to parent children and fill a traceparent); empty when not recording.
  SpanContext context() const;
  // The Tracer's content switch (false when not recording).
  bool capture_content() const noexcept;

  void set(std::string_view key, std::string_view v);
  void set(std::string_view key, const char* v) { set(key, std::string_view(v)); }
  void set(std::string_view key, const std::string& v) { set(key, std::string_view(v)); }
  void set(std::string_view key, bool v);
  void set(std::string_view key, double v);
  template <std::integral I>
  requires(!std::same_as<I, bool>) void set(std::string_view key, I v) {
    set_int(key, static_cast<std::int64_t>(v));
  }
  void set(std::string_view key, std::vector<std::string> v);
  // Text that is recorded only with TracerOptions::capture_content, cut to max_content_bytes
  // (on a UTF-8 boundary, with "... [N bytes cut]").
  void set_content(std::string_view key, std::string_view text);
  void add_event(std::string_view name, std::vector<Attribute> attributes = {});
  // Status error, with `error.type` = `type` (e.g. "tool_timeout") and the message.
  void set_error(std::string_view type, std::string_view message);
  void set_error(const Error& e);
  void set_ok();
  void end();  // idempotent

 private:
  friend class Tracer;
  void set_int(std::string_view key, std::int64_t v);
  void put(std::string_view key, AttributeValue v);
  Tracer* tracer_ = nullptr;
  std::unique_ptr<SpanData> data_;
};

class Tracer {
 public:
  // Starts the export thread. REQUIRES: at least one exporter.
  explicit Tracer(TracerOptions options, std::vector<std::unique_ptr<SpanExporter>> exporters);
  // shutdown() with a 5 s deadline.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A span under `parent` (a new trace when null or invalid). With an unsampled valid parent,
  // a no-op span.
  Span start_span(std::string name, const SpanContext* parent = nullptr,
                  SpanKind kind = SpanKind::internal);

  // Exports every span finished before the call; returns when they are out or after `timeout`
  // (deadline_exceeded naming what is left). Errors from the exporters are counted, not
  // returned.
  Status flush(std::chrono::milliseconds timeout);
  // Flushes within `timeout`, then stops the export thread. Spans ended after it are dropped.
  void shutdown(std::chrono::milliseconds timeout);

  const TracerOptions& options() const;
  std::string describe() const;  // the exporters, ", "-separated

  // Counters (also in the metrics registry).
  std::uint64_t spans_exported() const;
  std::uint64_t spans_dropped() const;  // queue full, export failed, or after shutdown
  std::uint64_t export_failures() const;

  struct Impl;

 private:
  friend class Span;
  void submit(std::unique_ptr<SpanData> span);
  std::unique_ptr<Impl> impl_;
};

// What a run hands down: the tracer and the span that parents what the callee records. Empty
// (the default) when tracing is off. Cheap to copy while empty.
struct Context {
  Tracer* tracer = nullptr;
  SpanContext parent;
  explicit operator bool() const noexcept { return tracer != nullptr; }
  // A child of `parent` (no-op when empty).
  Span start(std::string name, SpanKind kind = SpanKind::internal) const {
    if (!tracer) return Span();
    return tracer->start_span(std::move(name), parent.valid() ? &parent : nullptr, kind);
  }
  // The context for the children of `s` (this one's parent when `s` does not record).
  Context child(const Span& s) const {
    if (!s.recording()) return *this;
    return Context{tracer, s.context()};
  }
};

// The `execute_tool <name>` span of one tool call (GenAI semantic conventions), a child of
// `ctx`'s parent: the tool registry records it for each call it runs (weir/tools/registry.hpp),
// the graph layer for the built-in tools it runs itself (lorem, sleep, calculator), so that
// every tool call has one. `arguments` is the call's JSON text: its size always, the text with
// TracerOptions::capture_content. `call_id`: the model's id for the call ("" for none).
Span start_tool_span(const Context& ctx, const std::string& name, std::string_view arguments,
                     std::string_view call_id = {});
// A tool span's success: the output's size and text (with capture_content), and the artifact
// that took the output when it was spilled (weir.tool.spilled). Status ok; the caller ends it.
void set_tool_output(Span& span, std::size_t output_bytes, std::string_view output,
                     const std::optional<std::string>& artifact_id = std::nullopt);

// OTLP/JSON of a batch (an ExportTraceServiceRequest), as the Tracer sends it.
std::string encode_otlp_json(std::span<const SpanData> spans, const TracerOptions& options);

// Attribute names used in more than one place (GenAI semantic conventions, and weir's).
namespace attr {
inline constexpr std::string_view kOperation = "gen_ai.operation.name";
inline constexpr std::string_view kProvider = "gen_ai.provider.name";
inline constexpr std::string_view kRequestModel = "gen_ai.request.model";
inline constexpr std::string_view kResponseModel = "gen_ai.response.model";
inline constexpr std::string_view kInputTokens = "gen_ai.usage.input_tokens";
inline constexpr std::string_view kOutputTokens = "gen_ai.usage.output_tokens";
inline constexpr std::string_view kCachedInputTokens = "gen_ai.usage.cache_read.input_tokens";
inline constexpr std::string_view kFinishReasons = "gen_ai.response.finish_reasons";
inline constexpr std::string_view kAgentName = "gen_ai.agent.name";
inline constexpr std::string_view kToolName = "gen_ai.tool.name";
inline constexpr std::string_view kToolCallId = "gen_ai.tool.call.id";
inline constexpr std::string_view kErrorType = "error.type";
inline constexpr std::string_view kRunId = "weir.run.id";
inline constexpr std::string_view kThreadId = "weir.thread.id";
}  // namespace attr

}  // namespace weir::trace
