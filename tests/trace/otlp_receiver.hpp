// An OTLP/HTTP receiver on 127.0.0.1 (port 0) for the trace tests: weir's own http::Server on
// an io_context thread of its own. It answers POST /v1/traces with 200 `{}` and keeps the spans
// of every body (parsed with weir's OTLP reader, so a body that is not valid OTLP/JSON fails the
// test that looks at it), the request headers, and the count of requests. It can also hang
// (accept the request and never answer) or answer a status of the test's choosing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "weir/http/server.hpp"
#include "weir/runtime/trace_read.hpp"

namespace weir::testing {

class OtlpReceiver {
 public:
  enum class Mode { ok, hang, fail };

  explicit OtlpReceiver(Mode mode = Mode::ok, int fail_status = 503)
      : mode_(mode), status_(fail_status) {
    http::ServerConfig cfg;
    cfg.port = 0;
    cfg.max_body_bytes = 64u << 20;
    auto s = http::Server::create(io_, cfg, [this](http::Exchange& ex) { return handle(ex); });
    if (!s) throw std::runtime_error(s.error().message);
    server_ = std::move(*s);
    server_->start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~OtlpReceiver() {
    boost::asio::post(io_, [this] { server_->stop(); });
    io_.stop();
    thread_.join();
  }

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  std::string traces_url() const { return base_url() + "/v1/traces"; }

  void set_mode(Mode m) { mode_ = m; }
  int requests() const { return requests_.load(); }

  std::vector<trace::ReadSpan> spans() const {
    std::lock_guard lock(mu_);
    return spans_;
  }
  std::vector<http::Headers> headers() const {
    std::lock_guard lock(mu_);
    return headers_;
  }
  std::vector<std::string> errors() const {
    std::lock_guard lock(mu_);
    return errors_;
  }
  // The request target of every request, in order (what the request line carried).
  std::vector<std::string> paths() const {
    std::lock_guard lock(mu_);
    return paths_;
  }

  // Waits until `pred(spans)` holds or `timeout` passes; returns the last spans seen.
  std::vector<trace::ReadSpan> wait_for(
      const std::function<bool(const std::vector<trace::ReadSpan>&)>& pred,
      std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return pred(spans_); });
    return spans_;
  }
  std::vector<trace::ReadSpan> wait_for_spans(
      std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    return wait_for([n](const auto& s) { return s.size() >= n; }, timeout);
  }

 private:
  boost::asio::awaitable<void> handle(http::Exchange& ex) {
    ++requests_;
    const auto& rq = ex.request();
    {
      std::lock_guard lock(mu_);
      paths_.push_back(rq.path);
    }
    if (rq.method != "POST" || rq.path != "/v1/traces") {
      http::Response r;
      r.status = 404;
      r.body = "{}";
      co_await ex.async_respond(std::move(r));
      co_return;
    }
    if (mode_ == Mode::hang) {
      boost::asio::steady_timer t(co_await boost::asio::this_coro::executor,
                                  std::chrono::minutes(10));
      co_await t.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
      co_return;
    }
    if (mode_ == Mode::fail) {
      http::Response r;
      r.status = status_;
      r.body = "{}";
      co_await ex.async_respond(std::move(r));
      co_return;
    }
    auto spans = trace::parse_otlp_json(rq.body, "request body");
    {
      std::lock_guard lock(mu_);
      headers_.push_back(rq.headers);
      if (!spans) {
        errors_.push_back(spans.error().message);
      } else {
        for (auto& s : *spans) spans_.push_back(std::move(s));
      }
    }
    cv_.notify_all();
    http::Response r;
    r.status = spans ? 200 : 400;
    r.body = "{}";
    co_await ex.async_respond(std::move(r));
  }

  boost::asio::io_context io_;
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
  std::atomic<Mode> mode_;
  int status_;
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<trace::ReadSpan> spans_;  // GUARDED_BY(mu_)
  std::vector<http::Headers> headers_;  // GUARDED_BY(mu_)
  std::vector<std::string> errors_;     // GUARDED_BY(mu_)
  std::vector<std::string> paths_;      // GUARDED_BY(mu_)
};

// Helpers over spans read back.
inline const trace::ReadSpan* find_span(const std::vector<trace::ReadSpan>& spans,
                                        std::string_view name) {
  for (const auto& s : spans)
    if (s.span.name == name) return &s;
  return nullptr;
}

inline std::vector<const trace::ReadSpan*> spans_named(const std::vector<trace::ReadSpan>& spans,
                                                       std::string_view prefix) {
  std::vector<const trace::ReadSpan*> out;
  for (const auto& s : spans)
    if (s.span.name.starts_with(prefix)) out.push_back(&s);
  return out;
}

inline std::int64_t int_attr(const trace::SpanData& s, std::string_view key) {
  const auto* v = s.attribute(key);
  if (!v) return -1;
  if (const auto* i = std::get_if<std::int64_t>(v)) return *i;
  return -1;
}

inline std::string str_attr(const trace::SpanData& s, std::string_view key) {
  const auto* v = s.attribute(key);
  if (!v) return "<none>";
  if (const auto* x = std::get_if<std::string>(v)) return *x;
  return "<not a string>";
}

inline const trace::ReadSpan* parent_of(const std::vector<trace::ReadSpan>& spans,
                                        const trace::ReadSpan& s) {
  for (const auto& p : spans)
    if (p.span.span_id == s.span.parent_span_id && p.span.trace_id == s.span.trace_id) return &p;
  return nullptr;
}

}  // namespace weir::testing
