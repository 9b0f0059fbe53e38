// The OTLP/HTTP (JSON) trace exporter on weir's HTTP client, and the tracer built from flags
// and OTEL_* variables.
#include "weir/http/otlp.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <random>
#include <thread>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"

namespace weir::http {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

class OtlpExporter final : public trace::SpanExporter {
 public:
  OtlpExporter(OtlpOptions o, Url url) : options_(std::move(o)), url_(std::move(url)) {
    ClientOptions co = options_.client;
    co.total_timeout = options_.timeout;
    co.connect_timeout = std::min(co.connect_timeout, options_.timeout);
    co.max_connections_per_endpoint = 1;
    co.max_idle_per_endpoint = 1;
    co.max_response_bytes = std::min<std::size_t>(co.max_response_bytes, 1u << 20);
    client_ = std::make_unique<Client>(co);
  }
  ~OtlpExporter() override {
    client_.reset();  // its idle connection closes while the io_context still exists
  }

  std::string describe() const override { return "otlp " + url_.text; }

  Status export_json(std::string_view body, std::size_t spans,
                     const trace::ExportDeadline& deadline) override {
    std::string last;
    int attempt = 0;
    for (;;) {
      ++attempt;
      if (deadline.passed())
        return Error(Errc::deadline_exceeded, describe() + ": " + std::to_string(spans) +
                                                  " spans not delivered before the "
                                                  "export deadline" +
                                                  (last.empty() ? "" : " (last: " + last + ")"));
      Result<ClientResponse> r = post(body, deadline);
      std::chrono::milliseconds retry_after{0};
      if (r) {
        if (r->status >= 200 && r->status < 300) return {};
        last = "HTTP " + std::to_string(r->status) + " " + r->reason;
        if (!r->body.empty()) last += ": " + r->body.substr(0, 200);
        const bool retryable =
            r->status == 429 || r->status == 502 || r->status == 503 || r->status == 504;
        if (!retryable) return Error(Errc::io_error, describe() + ": " + last);
        const std::string ra(r->header("retry-after"));
        if (!ra.empty() &&
            std::all_of(ra.begin(), ra.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
            ra.size() < 6)
          retry_after = std::chrono::seconds(std::stoi(ra));
      } else {
        last = r.error().message;
        if (r.error().is(Errc::cancelled) && deadline.passed()) continue;  // reported above
      }
      if (attempt >= options_.max_attempts)
        return Error(Errc::io_error, describe() + ": gave up after " + std::to_string(attempt) +
                                         " attempts: " + last);
      auto backoff = options_.initial_backoff * (1 << std::min(attempt - 1, 16));
      backoff =
          std::min<std::chrono::milliseconds>(std::max(backoff, retry_after), options_.max_backoff);
      // Jitter (0.75..1.0 of the wait), so exporters of many processes do not retry in step.
      std::uniform_real_distribution<double> jitter(0.75, 1.0);
      thread_local std::minstd_rand g{std::random_device{}()};
      sleep_until(Clock::now() + std::chrono::duration_cast<Clock::duration>(backoff * jitter(g)),
                  deadline);
    }
  }

 private:
  // Waits in short slices so that a deadline moved earlier (a shutdown) ends the wait.
  static void sleep_until(Clock::time_point t, const trace::ExportDeadline& deadline) {
    while (Clock::now() < t && !deadline.passed())
      std::this_thread::sleep_for(
          std::min<Clock::duration>(t - Clock::now(), std::chrono::milliseconds(20)));
  }

  // One POST, cancelled when the deadline passes.
  Result<ClientResponse> post(std::string_view body, const trace::ExportDeadline& deadline) {
    ClientRequest rq;
    rq.method = "POST";
    rq.target = "";
    rq.headers = options_.headers;
    rq.headers.push_back({"Content-Type", "application/json"});
    rq.body = std::string(body);
    Result<ClientResponse> out;
    bool done = false;
    asio::cancellation_signal cancel;
    asio::co_spawn(io_, client_->async_request(url_, std::move(rq)),
                   asio::bind_cancellation_slot(
                       cancel.slot(), [&](std::exception_ptr e, Result<ClientResponse> r) {
                         done = true;
                         out = e ? Result<ClientResponse>(Error(Errc::io_error, "request threw"))
                                 : std::move(r);
                       }));
    bool cancelled = false;
    while (!done) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(20));
      if (!done && !cancelled && deadline.passed()) {
        cancel.emit(asio::cancellation_type::terminal);
        cancelled = true;
      }
    }
    io_.restart();
    io_.poll();  // let the cancelled operation's handlers finish
    return out;
  }

  OtlpOptions options_;
  Url url_;
  asio::io_context io_;
  std::unique_ptr<Client> client_;
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(trim(v)) : std::string();
}

// The first of the two variables that is set (the signal-specific one first).
std::pair<std::string, std::string> env2(const char* traces_name, const char* general_name) {
  if (auto v = env(traces_name); !v.empty()) return {traces_name, v};
  return {general_name, env(general_name)};
}

Result<std::size_t> env_count(const char* name, std::size_t fallback) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  if (v.size() > 9 ||
      !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(v) == 0)
    return Error(Errc::invalid_argument,
                 std::string(name) + "='" + v + "': expected a positive whole number");
  return static_cast<std::size_t>(std::stoul(v));
}

// "key1=value1,key2=value2" (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES): values
// percent-decoded, blanks around keys and values dropped. `what` names a pair in errors.
Result<std::vector<Header>> parse_otel_pairs(std::string_view text, const std::string& what) {
  std::vector<Header> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    std::string_view pair = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (pair.empty()) continue;
    const std::size_t eq = pair.find('=');
    if (eq == std::string_view::npos || trim(pair.substr(0, eq)).empty())
      return Error(Errc::invalid_argument, what + " '" + std::string(pair) + "' is not key=value");
    out.push_back(
        {percent_decode(trim(pair.substr(0, eq))), percent_decode(trim(pair.substr(eq + 1)))});
  }
  return out;
}

}  // namespace

std::string otlp_traces_url(std::string_view base) {
  while (base.ends_with('/')) base.remove_suffix(1);
  if (base.ends_with("/v1/traces")) return std::string(base);
  return std::string(base) + "/v1/traces";
}

Result<std::vector<Header>> parse_otlp_headers(std::string_view text) {
  auto pairs = parse_otel_pairs(text, "OTLP header");
  if (!pairs) return std::move(pairs).error();
  for (const auto& [key, value] : *pairs)
    if (auto ok = check_header(key, value); !ok)
      return Error(ok.error().code, "OTLP " + ok.error().message);
  return pairs;
}

Result<std::unique_ptr<trace::SpanExporter>> make_otlp_exporter(OtlpOptions options) {
  auto url = parse_url(options.endpoint);
  if (!url) return std::move(url).error();
  if (options.max_attempts < 1) options.max_attempts = 1;
  return std::unique_ptr<trace::SpanExporter>(
      std::make_unique<OtlpExporter>(std::move(options), std::move(*url)));
}

Result<std::shared_ptr<trace::Tracer>> make_tracer(const TraceSettings& settings) {
  {
    // A boolean, case-insensitive (the OpenTelemetry spec): "true", "TRUE", "True".
    std::string off = env("OTEL_SDK_DISABLED");
    std::transform(off.begin(), off.end(), off.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (off == "true") return std::shared_ptr<trace::Tracer>();
  }
  std::vector<std::unique_ptr<trace::SpanExporter>> exporters;
  std::string endpoint, from, given;  // the traces URL; where it came from, as written there
  if (!settings.otlp_endpoint.empty()) {
    from = "--otlp-endpoint", given = settings.otlp_endpoint;
    endpoint = otlp_traces_url(given);
  } else if (auto v = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); !v.empty()) {
    from = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", given = v;
    endpoint = v;
  } else if (auto b = env("OTEL_EXPORTER_OTLP_ENDPOINT"); !b.empty()) {
    from = "OTEL_EXPORTER_OTLP_ENDPOINT", given = b;
    endpoint = otlp_traces_url(b);
  }
  if (!endpoint.empty()) {
    // Errors show the URL as the user wrote it, not the traces URL made from it.
    if (auto u = parse_url(given); !u)
      return Error(Errc::invalid_argument, from + ": " + u.error().message);
    OtlpOptions o;
    o.endpoint = endpoint;
    auto [pname, protocol] =
        env2("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL");
    if (protocol == "grpc")
      return Error(Errc::invalid_argument,
                   pname +
                       "=grpc: weir exports traces over OTLP/HTTP with JSON bodies; point "
                       "the endpoint at the receiver's HTTP port (4318) and unset it or set "
                       "http/json");
    if (!protocol.empty() && protocol != "http/json")
      log(LogLevel::warn, pname + "=" + protocol +
                              ": weir sends OTLP/HTTP with JSON bodies (http/json), which OTLP "
                              "receivers accept on the same URL");
    for (const char* name : {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}) {
      auto h = parse_otlp_headers(env(name));
      if (!h) return Error(Errc::invalid_argument, std::string(name) + ": " + h.error().message);
      for (auto& x : *h) o.headers.push_back(std::move(x));
    }
    auto [tname, timeout] = env2("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT");
    if (!timeout.empty()) {
      auto t = env_count(tname.c_str(), 0);
      if (!t) return std::move(t).error();
      o.timeout = std::chrono::milliseconds(*t);
    }
    auto e = make_otlp_exporter(std::move(o));
    if (!e) return Error(Errc::invalid_argument, from + ": " + e.error().message);
    exporters.push_back(std::move(*e));
  }
  if (!settings.file.empty()) {
    auto f = trace::make_file_exporter(settings.file);
    if (!f) return std::move(f).error();
    exporters.push_back(std::move(*f));
  }
  if (exporters.empty()) return std::shared_ptr<trace::Tracer>();

  trace::TracerOptions t;
  // service.name: the flag's, else OTEL_SERVICE_NAME, else OTEL_RESOURCE_ATTRIBUTES', else weir.
  std::string attrs_service;
  if (auto ra = env("OTEL_RESOURCE_ATTRIBUTES"); !ra.empty()) {
    auto kv = parse_otel_pairs(ra, "resource attribute");
    if (!kv)
      return Error(Errc::invalid_argument, "OTEL_RESOURCE_ATTRIBUTES: " + kv.error().message);
    for (auto& h : *kv) {
      if (h.name == "service.name")
        attrs_service = std::move(h.value);
      else
        t.resource.push_back({std::move(h.name), std::move(h.value)});
    }
  }
  t.service_name = settings.service_name;
  if (t.service_name.empty()) t.service_name = env("OTEL_SERVICE_NAME");
  if (t.service_name.empty()) t.service_name = attrs_service;
  if (t.service_name.empty()) t.service_name = "weir";
  t.capture_content = settings.capture_content;
  t.max_content_bytes = settings.max_content_bytes;
  auto q = env_count("OTEL_BSP_MAX_QUEUE_SIZE", t.max_queue_spans);
  if (!q) return std::move(q).error();
  t.max_queue_spans = *q;
  auto b = env_count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", t.max_batch_spans);
  if (!b) return std::move(b).error();
  t.max_batch_spans = std::min(*b, t.max_queue_spans);
  auto d = env_count("OTEL_BSP_SCHEDULE_DELAY", static_cast<std::size_t>(t.schedule_delay.count()));
  if (!d) return std::move(d).error();
  t.schedule_delay = std::chrono::milliseconds(*d);
  auto x = env_count("OTEL_BSP_EXPORT_TIMEOUT", static_cast<std::size_t>(t.export_timeout.count()));
  if (!x) return std::move(x).error();
  t.export_timeout = std::chrono::milliseconds(*x);
  return std::make_shared<trace::Tracer>(std::move(t), std::move(exporters));
}

}  // namespace weir::http
