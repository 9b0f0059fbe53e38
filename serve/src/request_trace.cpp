#include "request_trace.hpp"

#include <boost/json.hpp>

namespace weir::serve {

namespace json = boost::json;

namespace {

std::string route_of(const std::string& path) {
  if (path.starts_with("/v1/runs") || path.starts_with("/v1/threads")) {
    const auto third = path.find('/', 4);
    return third == std::string::npos ? path : path.substr(0, third);
  }
  return path.size() <= 64 ? path : path.substr(0, 64);
}

std::int64_t int_at(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_int64()    ? v->as_int64()
         : v && v->is_uint64() ? static_cast<std::int64_t>(v->as_uint64())
                               : 0;
}

// What a whole chat or completion answer says (weir's own JSON, so a failed parse only skips).
void genai_attributes(trace::Span& span, const http::Request& rq, const std::string& body) {
  std::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return;
  const auto& o = v.as_object();
  span.set(trace::attr::kOperation, rq.path == "/v1/chat/completions" ? "chat" : "text_completion");
  span.set(trace::attr::kProvider, "weir");
  if (const auto* m = o.if_contains("model"); m && m->is_string())
    span.set(trace::attr::kResponseModel, std::string(m->as_string()));
  if (const auto* u = o.if_contains("usage"); u && u->is_object()) {
    span.set(trace::attr::kInputTokens, int_at(u->as_object(), "prompt_tokens"));
    span.set(trace::attr::kOutputTokens, int_at(u->as_object(), "completion_tokens"));
  }
  if (const auto* cs = o.if_contains("choices"); cs && cs->is_array()) {
    std::vector<std::string> reasons;
    for (const auto& c : cs->as_array())
      if (const auto* f = c.is_object() ? c.as_object().if_contains("finish_reason") : nullptr;
          f && f->is_string())
        reasons.emplace_back(f->as_string());
    span.set(trace::attr::kFinishReasons, std::move(reasons));
  }
}

}  // namespace

trace::Span start_request_span(trace::Tracer* tracer, const http::Request& rq) {
  if (!tracer) return {};
  // W3C Trace Context: two traceparent headers make the parent unknown (a new trace starts);
  // several tracestate headers are one list, joined with commas in their order.
  std::optional<trace::SpanContext> parent;
  std::size_t parents = 0;
  std::string state;
  for (const auto& [name, value] : rq.headers) {
    if (name == "traceparent") {
      ++parents;
    } else if (name == "tracestate" && !value.empty()) {
      if (!state.empty()) state += ',';
      state += value;
    }
  }
  if (parents == 1) parent = trace::parse_traceparent(*rq.header("traceparent"), state);
  trace::Span s = tracer->start_span(rq.method + " " + route_of(rq.path),
                                     parent ? &*parent : nullptr, trace::SpanKind::server);
  s.set("http.request.method", rq.method);
  s.set("url.path", rq.path);
  return s;
}

void finish_request_span(trace::Span& span, const http::Request& rq, const http::Response& out,
                         bool streamed) {
  if (!span) return;
  const int status = streamed ? 200 : out.status;
  span.set("http.response.status_code", status);
  if (status == 429)
    span.add_event("weir.fence.overloaded", {{"weir.http.status", std::int64_t{429}}});
  if (status >= 500)
    span.set_error(std::to_string(status), "HTTP " + std::to_string(status));
  else
    span.set_ok();
  if (!streamed && status == 200 &&
      (rq.path == "/v1/chat/completions" || rq.path == "/v1/completions"))
    genai_attributes(span, rq, out.body);
  span.end();
}

}  // namespace weir::serve
