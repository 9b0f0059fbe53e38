// The trace core: W3C trace context, the Tracer's bounded export, OTLP/HTTP against a receiver
// on loopback, the file exporter and `weir trace`'s reader and tree.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "../cli/run_weir.hpp"
#include "otlp_receiver.hpp"
#include "weir/http/otlp.hpp"
#include "weir/runtime/metrics.hpp"
#include "weir/runtime/trace.hpp"
#include "weir/runtime/trace_read.hpp"

namespace weir {
namespace {

using namespace std::chrono_literals;
using testing::OtlpReceiver;

std::shared_ptr<trace::Tracer> otlp_tracer(const std::string& url, trace::TracerOptions o = {},
                                           http::OtlpOptions h = {}) {
  h.endpoint = url;
  auto e = http::make_otlp_exporter(h);
  EXPECT_TRUE(e) << e.error().message;
  std::vector<std::unique_ptr<trace::SpanExporter>> ex;
  ex.push_back(std::move(*e));
  return std::make_shared<trace::Tracer>(std::move(o), std::move(ex));
}

double metric(const std::string& name, const Labels& labels = {}) {
  auto snap = Registry::global().snapshot();
  const auto* fam = snap.if_contains(name);
  if (!fam) return 0;
  for (const auto& s : fam->as_object().at("series").as_array()) {
    const auto& l = s.as_object().at("labels").as_object();
    bool match = true;
    for (const auto& [k, v] : labels) {
      const auto* x = l.if_contains(k);
      if (!x || x->as_string() != v) match = false;
    }
    if (match) return s.as_object().at("value").to_number<double>();
  }
  return 0;
}

TEST(TraceContext, ParsesAndFormatsW3CTraceparent) {
  auto c = trace::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                    "vendor=abc");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(c->span_id.hex(), "00f067aa0ba902b7");
  EXPECT_TRUE(c->sampled());
  EXPECT_EQ(c->trace_state, "vendor=abc");
  EXPECT_EQ(trace::format_traceparent(*c),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  // A later version may carry more fields; version 00 may not.
  EXPECT_TRUE(
      trace::parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-xyz"));
  for (const char* bad : {"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"})
    EXPECT_FALSE(trace::parse_traceparent(bad)) << bad;
}

TEST(TraceContext, IdsAreRandomAndValid) {
  auto a = trace::random_trace_id(), b = trace::random_trace_id();
  EXPECT_TRUE(a.valid());
  EXPECT_NE(a, b);
  auto p = trace::parse_span_id("zz");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message, "a span id is 16 hex digits, not all zero; got 'zz'");
}

TEST(Tracer, ANullContextRecordsNothing) {
  trace::Context off;
  trace::Span s = off.start("anything");
  EXPECT_FALSE(s.recording());
  s.set("k", 1);  // no-ops
  s.add_event("e");
  EXPECT_FALSE(s.context().valid());
}

TEST(Tracer, SendsSpansOverOtlpHttpWithTheirTreeAndAttributes) {
  OtlpReceiver rx;
  trace::TracerOptions o;
  o.service_name = "trace-test";
  o.schedule_delay = 50ms;
  auto tracer = otlp_tracer(rx.traces_url(), o);
  trace::SpanContext root_ctx;
  {
    trace::Span root = tracer->start_span("invoke_workflow demo");
    root.set(trace::attr::kOperation, "invoke_workflow");
    root_ctx = root.context();
    trace::Context ctx{tracer.get(), root.context()};
    trace::Span child = ctx.start("chat tiny", trace::SpanKind::client);
    child.set(trace::attr::kInputTokens, 12);
    child.set("weir.ratio", 0.5);
    child.set("weir.flag", true);
    child.set(trace::attr::kFinishReasons, std::vector<std::string>{"stop"});
    child.add_event("weir.fence.preemption", {{"weir.preemptions", std::int64_t{2}}});
    child.set_error("tool_timeout", "took too long");
  }
  ASSERT_TRUE(tracer->flush(10s));
  auto spans = rx.wait_for_spans(2);
  ASSERT_EQ(spans.size(), 2u) << (rx.errors().empty() ? "" : rx.errors()[0]);
  const auto* root = testing::find_span(spans, "invoke_workflow demo");
  const auto* child = testing::find_span(spans, "chat tiny");
  ASSERT_TRUE(root && child);
  EXPECT_EQ(root->service, "trace-test");
  EXPECT_FALSE(root->span.parent_span_id.valid());
  EXPECT_EQ(child->span.parent_span_id, root->span.span_id);
  EXPECT_EQ(child->span.trace_id, root_ctx.trace_id);
  EXPECT_EQ(child->span.kind, trace::SpanKind::client);
  EXPECT_EQ(testing::int_attr(child->span, "gen_ai.usage.input_tokens"), 12);
  EXPECT_EQ(std::get<double>(*child->span.attribute("weir.ratio")), 0.5);
  EXPECT_EQ(std::get<bool>(*child->span.attribute("weir.flag")), true);
  EXPECT_EQ(std::get<std::vector<std::string>>(*child->span.attribute(trace::attr::kFinishReasons)),
            std::vector<std::string>{"stop"});
  ASSERT_EQ(child->span.events.size(), 1u);
  EXPECT_EQ(child->span.events[0].name, "weir.fence.preemption");
  EXPECT_EQ(child->span.status, trace::StatusCode::error);
  EXPECT_EQ(child->span.status_message, "took too long");
  EXPECT_EQ(testing::str_attr(child->span, "error.type"), "tool_timeout");
  EXPECT_LE(root->span.start_unix_ns, child->span.start_unix_ns);
  EXPECT_GE(root->span.end_unix_ns, child->span.end_unix_ns);
  // The exporter says what it sends.
  auto h = rx.headers();
  ASSERT_FALSE(h.empty());
  bool json = false;
  for (const auto& [k, v] : h[0])
    if (k == "content-type" && v == "application/json") json = true;
  EXPECT_TRUE(json);
  EXPECT_EQ(tracer->spans_exported(), 2u);
}

TEST(Tracer, AnUnsampledParentRecordsNothing) {
  OtlpReceiver rx;
  auto tracer = otlp_tracer(rx.traces_url());
  auto parent = trace::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(parent);
  trace::Span s = tracer->start_span("x", &*parent);
  EXPECT_FALSE(s.recording());
}

TEST(Tracer, ContentIsRecordedOnlyWhenAskedAndCapped) {
  OtlpReceiver rx;
  trace::TracerOptions o;
  o.max_content_bytes = 8;
  auto off = otlp_tracer(rx.traces_url());
  trace::TracerOptions on_opts;
  on_opts.capture_content = true;
  on_opts.max_content_bytes = 8;
  auto on = otlp_tracer(rx.traces_url(), on_opts);
  {
    trace::Span a = off->start_span("a");
    a.set_content("gen_ai.prompt", "secret prompt");
    trace::Span b = on->start_span("b");
    b.set_content("gen_ai.prompt", "héllo wörld, long");
  }
  ASSERT_TRUE(off->flush(10s));
  ASSERT_TRUE(on->flush(10s));
  auto spans = rx.wait_for_spans(2);
  const auto* a = testing::find_span(spans, "a");
  const auto* b = testing::find_span(spans, "b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->span.attribute("gen_ai.prompt"), nullptr);
  // Cut at 8 bytes on a character boundary ("héllo w" is 8 bytes).
  EXPECT_EQ(testing::str_attr(b->span, "gen_ai.prompt"), "héllo w... [11 bytes cut]");
}

// With the defaults (4 KiB of content, 4 KiB an attribute) a long text keeps its marker: the
// breaking pass found gen_ai.tool.call.result cut at 4096 bytes with none.
TEST(Tracer, ALongContentKeepsItsMarkerUnderTheDefaultCaps) {
  OtlpReceiver rx;
  trace::TracerOptions o;
  o.capture_content = true;
  auto tracer = otlp_tracer(rx.traces_url(), o);
  {
    trace::Span s = tracer->start_span("long");
    s.set_content("gen_ai.tool.call.result", std::string(100000, 'x'));
  }
  ASSERT_TRUE(tracer->flush(10s));
  auto spans = rx.wait_for_spans(1);
  const auto* s = testing::find_span(spans, "long");
  ASSERT_TRUE(s);
  const std::string v = testing::str_attr(s->span, "gen_ai.tool.call.result");
  EXPECT_LE(v.size(), 4096u);
  const auto kept = v.find("... [");
  ASSERT_NE(kept, std::string::npos) << v.substr(v.size() - 40);
  EXPECT_EQ(v.substr(kept), "... [" + std::to_string(100000 - kept) + " bytes cut]");
  EXPECT_GT(kept, 4000u);
}

// A receiver that accepts and never answers: spans are dropped and counted, ending a span never
// waits, memory stays bounded by the queue, and shutdown keeps its deadline.
TEST(Tracer, AHangingReceiverDropsAndCountsSpansWithoutBlocking) {
  OtlpReceiver rx(OtlpReceiver::Mode::hang);
  trace::TracerOptions o;
  o.max_queue_spans = 16;
  o.max_batch_spans = 4;
  o.schedule_delay = 10ms;
  o.export_timeout = 60s;
  http::OtlpOptions h;
  h.timeout = 30s;
  const double full_before = metric("weir_trace_spans_dropped_total", {{"reason", "queue_full"}});
  auto tracer = otlp_tracer(rx.traces_url(), o, h);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    trace::Span s = tracer->start_span("span " + std::to_string(i));
    s.set("i", i);
  }
  const auto spent = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(spent, 5s);  // 1,000 spans ended while the exporter hung (generous for a loaded host)
  // One batch is in flight (4 spans), at most 16 wait: the rest were dropped at once.
  EXPECT_GE(tracer->spans_dropped(), 1000u - 16 - 4);
  EXPECT_GE(metric("weir_trace_spans_dropped_total", {{"reason", "queue_full"}}) - full_before,
            1000.0 - 16 - 4);
  for (int i = 0; i < 1000 && rx.requests() < 1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(rx.requests(), 1);  // the receiver got the batch that hangs
  const auto s0 = std::chrono::steady_clock::now();
  tracer->shutdown(500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - s0, 10s);
  EXPECT_EQ(tracer->spans_exported(), 0u);
  EXPECT_EQ(tracer->spans_dropped(), 1000u);  // every span accounted for
  EXPECT_GE(tracer->export_failures(), 1u);
}

TEST(Tracer, RetriesA503WithBackoffThenDelivers) {
  OtlpReceiver rx(OtlpReceiver::Mode::fail, 503);
  trace::TracerOptions o;
  o.schedule_delay = 10ms;
  http::OtlpOptions h;
  h.initial_backoff = 50ms;
  h.max_backoff = 100ms;
  h.max_attempts = 50;
  auto tracer = otlp_tracer(rx.traces_url(), o, h);
  { trace::Span s = tracer->start_span("retried"); }
  // Let it fail a few times, then heal the receiver.
  for (int i = 0; i < 500 && rx.requests() < 3; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(rx.requests(), 3);
  rx.set_mode(OtlpReceiver::Mode::ok);
  auto spans = rx.wait_for_spans(1);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].span.name, "retried");
  ASSERT_TRUE(tracer->flush(10s));
  EXPECT_EQ(tracer->spans_dropped(), 0u);
}

TEST(Tracer, ARefusedBatchIsNotRetried) {
  OtlpReceiver rx(OtlpReceiver::Mode::fail, 400);
  trace::TracerOptions o;
  o.schedule_delay = 10ms;
  auto tracer = otlp_tracer(rx.traces_url(), o);
  { trace::Span s = tracer->start_span("refused"); }
  ASSERT_TRUE(tracer->flush(10s));
  EXPECT_EQ(rx.requests(), 1);
  EXPECT_EQ(tracer->spans_dropped(), 1u);
  EXPECT_EQ(tracer->export_failures(), 1u);
}

TEST(Otlp, EndpointsAndHeadersFollowTheOtelVariables) {
  EXPECT_EQ(http::otlp_traces_url("http://h:4318"), "http://h:4318/v1/traces");
  EXPECT_EQ(http::otlp_traces_url("http://h:4318/"), "http://h:4318/v1/traces");
  EXPECT_EQ(http::otlp_traces_url("https://cloud.langfuse.com/api/public/otel"),
            "https://cloud.langfuse.com/api/public/otel/v1/traces");
  EXPECT_EQ(http::otlp_traces_url("http://h:4318/v1/traces"), "http://h:4318/v1/traces");
  auto h = http::parse_otlp_headers(" Authorization=Basic%20YWJj , x-team = blue ,");
  ASSERT_TRUE(h);
  ASSERT_EQ(h->size(), 2u);
  EXPECT_EQ((*h)[0].name, "Authorization");
  EXPECT_EQ((*h)[0].value, "Basic YWJj");
  EXPECT_EQ((*h)[1].name, "x-team");
  EXPECT_EQ((*h)[1].value, "blue");
  auto bad = http::parse_otlp_headers("novalue");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "OTLP header 'novalue' is not key=value");
  auto crlf = http::parse_otlp_headers("a=b%0D%0AInjected: 1");
  ASSERT_FALSE(crlf);
  EXPECT_EQ(crlf.error().message, "OTLP header 'a' holds a line break or NUL");
}

// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as given: a URL without a path must still make a
// valid request line ("POST / HTTP/1.1", not "POST  HTTP/1.1").
TEST(Otlp, AUrlWithoutAPathPostsToTheRoot) {
  OtlpReceiver rx;
  for (const std::string url : {rx.base_url(), rx.base_url() + "/"}) {
    auto tracer = otlp_tracer(url, {}, [] {
      http::OtlpOptions h;
      h.max_attempts = 1;
      return h;
    }());
    { trace::Span s = tracer->start_span("root"); }
    (void)tracer->flush(10s);
  }
  EXPECT_EQ(rx.paths(), (std::vector<std::string>{"/", "/"}));
}

// A header the exporter cannot send as given is refused at start, naming it: a name that is
// not an HTTP token, and the headers weir itself sets from the body and the URL.
TEST(Otlp, HeadersThatCannotBeSentAreRefused) {
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"x:y=1",
            "OTLP header name 'x:y' is not an HTTP token (letters, digits and "
            "!#$%&'*+-.^_`|~)"},
           {"x a=2",
            "OTLP header name 'x a' is not an HTTP token (letters, digits and "
            "!#$%&'*+-.^_`|~)"},
           {"Content-Length=5",
            "OTLP header 'Content-Length' is set by weir from the request; "
            "leave it out"},
           {"transfer-encoding=chunked",
            "OTLP header 'transfer-encoding' is set by weir from "
            "the request; leave it out"},
           {"Host=evil", "OTLP header 'Host' is set by weir from the request; leave it out"},
           {"Content-Type=text/plain",
            "OTLP header 'Content-Type' is set by weir from the "
            "request; leave it out"}}) {
    auto h = http::parse_otlp_headers(text);
    ASSERT_FALSE(h) << text;
    EXPECT_EQ(h.error().message, why);
  }
  auto ok = http::parse_otlp_headers("x-honeycomb-team=abc,Authorization=Bearer%20k");
  ASSERT_TRUE(ok) << ok.error().message;
  // The command refuses to start (exit 1) and says which variable.
  auto run = testing::run_weir_env(
      "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9 "
      "OTEL_EXPORTER_OTLP_HEADERS='x a=2'",
      "run " + testing::sample("map_reduce.json").string());
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(run.err.find("OTEL_EXPORTER_OTLP_HEADERS: OTLP header name 'x a' is not an HTTP token"),
            std::string::npos)
      << run.err;
}

TEST(Otlp, NoExporterMeansNoTracer) {
  ::unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  ::unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  auto t = http::make_tracer({});
  ASSERT_TRUE(t);
  EXPECT_EQ(*t, nullptr);
  http::TraceSettings s;
  s.otlp_endpoint = "ftp://nowhere";
  auto bad = http::make_tracer(s);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--otlp-endpoint: invalid URL 'ftp://nowhere': expected http:// or https://");
  // The URL as the user gave it (scheme kept, no /v1/traces added), under its own name.
  s.otlp_endpoint = "http://127.0.0.1:99999";
  auto port = http::make_tracer(s);
  ASSERT_FALSE(port);
  EXPECT_EQ(port.error().message,
            "--otlp-endpoint: invalid URL 'http://127.0.0.1:99999': port must be 1..65535");
  s.otlp_endpoint.clear();
  ::setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://[::1", 1);
  auto traces = http::make_tracer(s);
  ::unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  ASSERT_FALSE(traces);
  EXPECT_EQ(traces.error().message,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: invalid URL 'https://[::1': unclosed '[' in "
            "the host");
  ::setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://:4318", 1);
  auto base = http::make_tracer(s);
  ::unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  ASSERT_FALSE(base);
  EXPECT_EQ(base.error().message,
            "OTEL_EXPORTER_OTLP_ENDPOINT: invalid URL 'http://:4318': no host");
}

TEST(Otlp, TheStandardVariablesConfigureTheExporter) {
  OtlpReceiver rx;
  ::setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url().c_str(), 1);
  ::setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-weir-test=yes", 1);
  ::setenv("OTEL_SERVICE_NAME", "from-env", 1);
  ::setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test", 1);
  auto t = http::make_tracer({});
  ::unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  ::unsetenv("OTEL_EXPORTER_OTLP_HEADERS");
  ::unsetenv("OTEL_SERVICE_NAME");
  ::unsetenv("OTEL_RESOURCE_ATTRIBUTES");
  ASSERT_TRUE(t) << t.error().message;
  ASSERT_NE(*t, nullptr);
  { trace::Span s = (*t)->start_span("configured"); }
  ASSERT_TRUE((*t)->flush(10s));
  auto spans = rx.wait_for_spans(1);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].service, "from-env");
  bool header = false;
  const auto headers = rx.headers();  // (a range-for over rx.headers()[0] would dangle)
  ASSERT_FALSE(headers.empty());
  for (const auto& [k, v] : headers[0])
    if (k == "x-weir-test" && v == "yes") header = true;
  EXPECT_TRUE(header);
  ::setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", 1);
  ::setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url().c_str(), 1);
  auto grpc = http::make_tracer({});
  ::unsetenv("OTEL_EXPORTER_OTLP_PROTOCOL");
  ::unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  ASSERT_FALSE(grpc);
  EXPECT_NE(grpc.error().message.find("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: weir exports traces over "
                                      "OTLP/HTTP with JSON bodies"),
            std::string::npos);
}

// OTEL_SDK_DISABLED is a boolean, case-insensitive (the OpenTelemetry spec): TRUE disables.
TEST(Otlp, SdkDisabledIsCaseInsensitive) {
  http::TraceSettings s;
  s.file =
      (std::filesystem::temp_directory_path() / ("weir-disabled-" + std::to_string(::getpid())))
          .string();
  for (const char* v : {"true", "TRUE", "True"}) {
    ::setenv("OTEL_SDK_DISABLED", v, 1);
    auto t = http::make_tracer(s);
    ASSERT_TRUE(t) << t.error().message;
    EXPECT_EQ(*t, nullptr) << v;
  }
  ::setenv("OTEL_SDK_DISABLED", "false", 1);
  auto on = http::make_tracer(s);
  ::unsetenv("OTEL_SDK_DISABLED");
  ASSERT_TRUE(on);
  EXPECT_NE(*on, nullptr);
  on->reset();
  std::filesystem::remove(s.file);
}

// service.name in OTEL_RESOURCE_ATTRIBUTES names the service when OTEL_SERVICE_NAME does not
// (which wins when both are set); the errors speak of resource attributes, not headers.
TEST(Otlp, ResourceAttributesCanNameTheService) {
  const auto service = [](const char* attrs, const char* name) -> std::string {
    OtlpReceiver rx;
    http::TraceSettings s;
    s.otlp_endpoint = rx.base_url();
    ::setenv("OTEL_RESOURCE_ATTRIBUTES", attrs, 1);
    if (name) ::setenv("OTEL_SERVICE_NAME", name, 1);
    auto t = http::make_tracer(s);
    ::unsetenv("OTEL_RESOURCE_ATTRIBUTES");
    ::unsetenv("OTEL_SERVICE_NAME");
    if (!t) return t.error().message;
    { trace::Span sp = (*t)->start_span("x"); }
    (void)(*t)->flush(10s);
    auto spans = rx.wait_for_spans(1);
    return spans.empty() ? "<none>" : spans[0].service;
  };
  EXPECT_EQ(service("service.name=fromattrs,team=a", nullptr), "fromattrs");
  EXPECT_EQ(service("service.name=fromattrs", "fromname"), "fromname");
  EXPECT_EQ(service("team=a", nullptr), "weir");
  EXPECT_EQ(service("garbage", nullptr),
            "OTEL_RESOURCE_ATTRIBUTES: resource attribute 'garbage' is not key=value");
}

TEST(TraceFile, WritesOtlpJsonLinesThatReadBackAsATree) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("weir-trace-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  {
    auto f = trace::make_file_exporter(path.string());
    ASSERT_TRUE(f);
    std::vector<std::unique_ptr<trace::SpanExporter>> ex;
    ex.push_back(std::move(*f));
    trace::TracerOptions o;
    o.max_batch_spans = 2;  // several lines
    trace::Tracer tracer(o, std::move(ex));
    trace::Span root = tracer.start_span("invoke_workflow flow");
    trace::Context ctx{&tracer, root.context()};
    {
      trace::Span step = ctx.start("superstep 1");
      trace::Span node = ctx.child(step).start("node a");
      node.set_error("tool_failed", "no such file");
    }
    { trace::Span step2 = ctx.start("superstep 2"); }
    root.end();
    tracer.shutdown(5s);
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 2);
  auto spans = trace::parse_otlp_json_lines(text, path.string());
  ASSERT_TRUE(spans) << spans.error().message;
  ASSERT_EQ(spans->size(), 4u);
  std::string tree = trace::render_tree(*spans);
  // Durations vary: check the shape with them cut out.
  std::string shape;
  std::istringstream lines(tree);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("trace ")) {
      shape += "trace\n";
      continue;
    }
    shape += std::regex_replace(line, std::regex("  [0-9.]+ (µs|ms|s)"), "") + "\n";
  }
  EXPECT_EQ(shape,
            "trace\n"
            "invoke_workflow flow\n"
            "├─ superstep 1\n"
            "│  └─ node a  ! tool_failed: no such file\n"
            "└─ superstep 2\n");
  std::filesystem::remove(path);
}

TEST(TraceFile, ReaderErrorsNameTheLineAndThePointer) {
  const std::string good =
      R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7","name":"a","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]})";
  const std::string bad =
      R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"xyz","name":"a"}]}]}]})";
  auto r = trace::parse_otlp_json_lines(good + "\n\n" + bad + "\n", "t.jsonl");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "t.jsonl:3: /resourceSpans/0/scopeSpans/0/spans/0/spanId: expected 16 hex digits, "
            "not all zero");
  auto notjson = trace::parse_otlp_json_lines("{\"resourceSpans\": [", "t.jsonl");
  ASSERT_FALSE(notjson);
  EXPECT_EQ(notjson.error().message.rfind("t.jsonl:1:", 0), 0u) << notjson.error().message;
  auto wrong = trace::parse_otlp_json_lines("[1]", "t.jsonl");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message, "t.jsonl:1: /: expected an object with \"resourceSpans\"");
}

// Names come from files anyone can write: control characters are shown escaped, never sent
// to the terminal (ESC) or cutting the name (NUL).
TEST(TraceFile, TheTreeEscapesControlCharacters) {
  const std::string line =
      R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7","name":"red\u001b[31mX\u0000cut\nline","startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"k\u0007","value":{"stringValue":"v"}}],"events":[{"name":"ev\r","timeUnixNano":"1"}]}]}]}]})";
  auto spans = trace::parse_otlp_json_lines(line, "t.jsonl");
  ASSERT_TRUE(spans) << spans.error().message;
  trace::TreeOptions o;
  o.attributes = true;
  const std::string tree = trace::render_tree(*spans, o);
  EXPECT_NE(tree.find("red\\x1b[31mX\\x00cut\\nline  "), std::string::npos) << tree;
  EXPECT_NE(tree.find("k\\x07 = \"v\""), std::string::npos) << tree;
  EXPECT_NE(tree.find("event ev\\r at"), std::string::npos) << tree;
  for (char c : tree) EXPECT_FALSE((c >= 0 && c < 0x20 && c != '\n') || c == 0x7f) << int(c);
}

// OTLP's times are fixed64 (unsigned): values from 2^63 up are read (kept at 2^63 - 1, past
// the year 2262), a negative one is refused.
TEST(TraceFile, TimesAreUnsigned64Bit) {
  const auto line = [](const std::string& start, const std::string& end) {
    return R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7","name":"a","startTimeUnixNano":)" +
           start + R"(,"endTimeUnixNano":)" + end + "}]}]}]}";
  };
  for (const auto& end :
       {std::string("\"18446744073709551615\""), std::string("9223372036854775808"),
        std::string("\"9223372036854775808\"")}) {
    auto r = trace::parse_otlp_json_lines(line("\"9223372036854775000\"", end), "t.jsonl");
    ASSERT_TRUE(r) << end << ": " << r.error().message;
    EXPECT_EQ((*r)[0].span.end_unix_ns, INT64_MAX);
    EXPECT_NE(trace::render_tree(*r).find("a  1 µs"), std::string::npos) << trace::render_tree(*r);
  }
  auto neg = trace::parse_otlp_json_lines(line("\"-1\"", "\"2\""), "t.jsonl");
  ASSERT_FALSE(neg);
  EXPECT_EQ(neg.error().message,
            "t.jsonl:1: /resourceSpans/0/scopeSpans/0/spans/0/startTimeUnixNano: expected an "
            "unsigned 64-bit integer");
}

}  // namespace
}  // namespace weir
