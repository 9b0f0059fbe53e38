// OTLP over HTTP: the trace exporter weir sends its spans with, on weir's own HTTP client, and
// the tracer that `weir run`, `weir serve` and `weir worker` build from their flags and the
// standard OpenTelemetry variables.
//
// Debian's main archive has no OpenTelemetry C++ SDK (bookworm: only the Go one), so weir
// speaks OTLP/HTTP with JSON bodies itself (docs/tracing.md, docs/architecture.md). Protobuf
// bodies would need opentelemetry-proto's generated code, which Debian does not package either.
//
// The exporter POSTs each batch (Content-Type: application/json) to the traces URL. A batch is
// retried with exponential backoff (initial_backoff doubling up to max_backoff, a Retry-After
// header honoured within the same cap) after a connection error, a timeout, or HTTP 429, 502,
// 503 or 504, until max_attempts or the batch's deadline (TracerOptions::export_timeout; a
// shutdown shortens it); any other status fails the batch at once. Each attempt has its own
// timeout. A failed batch is dropped and counted by the Tracer; nothing waits on it but the
// Tracer's export thread.
//
// Thread safety: the exporter is called by one thread at a time (the Tracer's export thread).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weir/http/client.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::http {

struct OtlpOptions {
  std::string endpoint;  // the traces URL itself ("http://127.0.0.1:4318/v1/traces")
  std::vector<Header> headers;
  std::chrono::milliseconds timeout{10'000};  // one attempt (OTEL_EXPORTER_OTLP_TIMEOUT)
  int max_attempts = 5;
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{5'000};
  ClientOptions client;  // TLS settings (ca_file), response caps
};

// The traces URL for an OTLP base URL: `base` + "/v1/traces", unless it already ends with
// "/v1/traces" (OTEL_EXPORTER_OTLP_ENDPOINT's rule; a trailing '/' is dropped first).
std::string otlp_traces_url(std::string_view base);

// OTEL_EXPORTER_OTLP_HEADERS: "key1=value1,key2=value2", values percent-decoded, blanks around
// keys and values dropped. Errors: invalid_argument naming the pair without '=' or key, or the
// header http::check_header refuses.
Result<std::vector<Header>> parse_otlp_headers(std::string_view text);

// Errors: invalid_argument for a URL parse_url refuses.
Result<std::unique_ptr<trace::SpanExporter>> make_otlp_exporter(OtlpOptions options);

// What a command's flags say about tracing; the rest comes from the environment.
struct TraceSettings {
  // --otlp-endpoint: an OTLP base URL ("http://127.0.0.1:4318", ".../api/public/otel"); the
  // traces go to otlp_traces_url() of it. Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as
  // it is), else OTEL_EXPORTER_OTLP_ENDPOINT (a base URL), else no OTLP export.
  std::string otlp_endpoint;
  std::string file;              // --trace FILE: OTLP JSON lines
  bool capture_content = false;  // --trace-content
  std::size_t max_content_bytes = 4096;
  // Empty: OTEL_SERVICE_NAME, else service.name in OTEL_RESOURCE_ATTRIBUTES, else "weir".
  // OTEL_RESOURCE_ATTRIBUTES adds its other pairs as resource attributes.
  std::string service_name;
};

// The tracer for `settings` and the environment, or null when no exporter is configured
// (tracing off: nothing is recorded or sent anywhere) or OTEL_SDK_DISABLED=true (any case). Reads
// OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT (ms),
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/json; http/protobuf is sent as http/json with a
// warning; grpc is refused), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE, OTEL_BSP_SCHEDULE_DELAY (ms),
// OTEL_BSP_EXPORT_TIMEOUT (ms). Errors: invalid_argument naming the flag or variable and
// what it needs; io_error for a trace file that cannot be opened.
Result<std::shared_ptr<trace::Tracer>> make_tracer(const TraceSettings& settings);

}  // namespace weir::http
