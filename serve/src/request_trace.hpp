// The span of one HTTP request to weir serve (kind server), continuing the caller's trace when
// the request carries a W3C `traceparent` (and `tracestate`): a remote-model agent's `chat`
// span in another weir, or any OpenTelemetry client. Named by method and route
// ("POST /v1/chat/completions"; runs and threads paths by their first two segments, so the
// name stays low-cardinality), with http.request.method, url.path and
// http.response.status_code; 5xx is an error, 429 an event (a fence refused the request). A
// chat or completion answered whole also gets the GenAI attributes read from its answer
// (gen_ai.response.model, gen_ai.usage.*, gen_ai.response.finish_reasons).
#pragma once

#include "weir/http/server.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::serve {

// A no-op span when `tracer` is null.
trace::Span start_request_span(trace::Tracer* tracer, const http::Request& rq);
void finish_request_span(trace::Span& span, const http::Request& rq, const http::Response& out,
                         bool streamed);

}  // namespace weir::serve
