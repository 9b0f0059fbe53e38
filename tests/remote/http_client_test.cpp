#include "weir/http/client.hpp"

#include <chrono>

#include <gtest/gtest.h>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "test_server.hpp"

namespace weir::http {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using weir::testing::Action;
using weir::testing::reply;
using weir::testing::TestServer;

// One io_context for the whole binary: pooled connections are bound to the context they were
// made on, which must outlive the Client (see client.hpp).
asio::io_context& test_io() {
  static asio::io_context io;
  return io;
}

template <class T>
T run(std::function<asio::awaitable<T>()> fn) {
  auto& io = test_io();
  io.restart();
  std::optional<T> out;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { out = co_await fn(); }, asio::detached);
  io.run();
  return std::move(*out);
}

Result<ClientResponse> get(Client& c, const std::string& url_text, std::string target = "/models") {
  auto url = parse_url(url_text);
  EXPECT_TRUE(url);
  return run<Result<ClientResponse>>([&]() -> asio::awaitable<Result<ClientResponse>> {
    ClientRequest r;
    r.method = "GET";
    r.target = target;
    co_return co_await c.async_request(*url, r);
  });
}

TEST(ParseUrl, SplitsAndRefuses) {
  auto u = parse_url("http://127.0.0.1:8080/v1/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8080");
  EXPECT_EQ(u->path, "/v1");
  EXPECT_FALSE(u->tls);
  auto s = parse_url("https://api.example.com");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->port, "443");
  EXPECT_EQ(s->path, "");
  auto v6 = parse_url("http://[::1]:9/x");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->origin(), "http://[::1]:9");
  // The scheme and the host are case-insensitive (RFC 3986): read in lowercase.
  auto upper = parse_url("HTTPS://Api.Example.COM/V1");
  ASSERT_TRUE(upper) << upper.error().message;
  EXPECT_TRUE(upper->tls);
  EXPECT_EQ(upper->host, "api.example.com");
  EXPECT_EQ(upper->path, "/V1");  // a path is not
  auto bad = parse_url("ftp://x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "invalid URL 'ftp://x': expected http:// or https://");
  EXPECT_FALSE(parse_url("http://h:0/"));
  EXPECT_FALSE(parse_url("http://h:99999/"));
  EXPECT_FALSE(parse_url("http://user:pw@h/"));
  EXPECT_FALSE(parse_url("http:///v1"));
}

TEST(HttpClient, KeepAliveReusesOneConnection) {
  TestServer server(
      [](int n, const std::string&) { return reply(200, "{\"n\":" + std::to_string(n) + "}"); });
  Client c;
  for (int i = 1; i <= 3; ++i) {
    auto r = get(c, server.url());
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "{\"n\":" + std::to_string(i) + "}");
    EXPECT_EQ(r->header("content-type"), "application/json");
  }
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.connections(), 1);
  EXPECT_NE(server.received()[0].find("GET /v1/models HTTP/1.1"), std::string::npos);
}

TEST(HttpClient, KeepAliveOnOneExecutor) {
  TestServer server([](int, const std::string&) { return reply(200, "ok", {}, "text/plain"); });
  Client c;
  auto url = *parse_url(server.url());
  auto n = run<int>([&]() -> asio::awaitable<int> {
    int ok = 0;
    for (int i = 0; i < 4; ++i) {
      ClientRequest req{.method = "GET", .target = "/"};
      auto r = co_await c.async_request(url, std::move(req));
      ok += r && r->body == "ok";
    }
    co_return ok;
  });
  EXPECT_EQ(n, 4);
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(c.connections_opened(), 1u);
}

TEST(HttpClient, OutlivesTheContextsItRanOn) {
  TestServer server([](int, const std::string&) { return reply(200, "ok", {}, "text/plain"); });
  auto url = *parse_url(server.url());
  Client c;
  for (int i = 0; i < 2; ++i) {
    asio::io_context io;  // destroyed with an idle connection of `c` bound to it
    Result<ClientResponse> r;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          ClientRequest req{.method = "GET", .target = "/"};
          r = co_await c.async_request(url, std::move(req));
        },
        asio::detached);
    io.run();
    ASSERT_TRUE(r) << r.error().message;
  }
  EXPECT_EQ(c.connections_opened(), 2u);  // nothing reused across contexts
}

TEST(HttpClient, ResponseOverTheCapIsATypedError) {
  TestServer server([](int, const std::string&) { return reply(200, std::string(5000, 'x')); });
  Client c(ClientOptions{.max_response_bytes = 1000});
  auto r = get(c, server.url());
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::memory_budget_exceeded));
  EXPECT_EQ(r.error().message, "http://127.0.0.1:" + std::to_string(server.port()) +
                                   ": response body larger than http.max_response_bytes=1000");
}

TEST(HttpClient, HeadersThatNeverComeTimeOut) {
  TestServer server([](int, const std::string&) { return Action{.hang = true}; });
  Client c(ClientOptions{.total_timeout = 300ms});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = get(c, server.url());
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::deadline_exceeded)) << r.error().message;
  EXPECT_NE(r.error().message.find("waiting for the response timed out (http.timeout_ms=300)"),
            std::string::npos)
      << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(HttpClient, RefusedAndResetConnectionsAreIoErrors) {
  int port;
  {
    TestServer gone([](int, const std::string&) { return reply(200, ""); });
    port = gone.port();
  }
  Client c;
  auto r = get(c, "http://127.0.0.1:" + std::to_string(port));
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::io_error));
  EXPECT_NE(r.error().message.find("connect failed"), std::string::npos) << r.error().message;

  TestServer reset([](int, const std::string&) { return Action{.reset = true}; });
  auto r2 = get(c, reset.url());
  ASSERT_FALSE(r2);
  EXPECT_TRUE(r2.error().is(Errc::io_error)) << r2.error().message;
}

TEST(HttpClient, MalformedResponseIsCorruptData) {
  TestServer server(
      [](int, const std::string&) { return Action{.raw = "HTTP/1.1 abc\r\n\r\n", .close = true}; });
  Client c;
  auto r = get(c, server.url());
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::corrupt_data)) << r.error().message;
}

TEST(HttpClient, HttpsVerifiesTheServer) {
  // A plain-HTTP server cannot complete a TLS handshake: the request fails, nothing is sent.
  TestServer server([](int, const std::string&) { return reply(200, "{}"); });
  // (This server waits for a request head that never comes: the handshake times out.)
  Client c(ClientOptions{.connect_timeout = 300ms});
  auto r = get(c, "https://127.0.0.1:" + std::to_string(server.port()));
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::deadline_exceeded)) << r.error().message;
  EXPECT_EQ(r.error().message, "https://127.0.0.1:" + std::to_string(server.port()) +
                                   ": TLS handshake timed out (http.connect_timeout_ms=300)");
  EXPECT_EQ(server.requests(), 0);
}

TEST(HttpClient, CancellationClosesTheRequest) {
  TestServer server([](int, const std::string&) { return Action{.hang = true}; });
  Client c(ClientOptions{.total_timeout = 10s});
  auto url = *parse_url(server.url());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run<Result<ClientResponse>>([&]() -> asio::awaitable<Result<ClientResponse>> {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer t(co_await asio::this_coro::executor, 200ms);
    ClientRequest req{.method = "GET", .target = "/"};
    auto v = co_await (c.async_request(url, std::move(req)) || t.async_wait(asio::use_awaitable));
    if (v.index() == 0) co_return std::get<0>(std::move(v));
    co_return Error(Errc::cancelled, "timer won");
  });
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::cancelled));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(HttpClient, AStreamedBodyReachesTheSinkAsItArrives) {
  // One event, then nothing more for as long as the stream stays open: the sink has the event
  // while the server still holds the stream.
  TestServer server([](int, const std::string&) {
    return weir::testing::sse_reply({"hello"}, false, /*hold_open=*/true);
  });
  Client c;
  auto url = *parse_url(server.url());
  std::string got;
  const bool seen = run<bool>([&]() -> asio::awaitable<bool> {
    using namespace asio::experimental::awaitable_operators;
    ClientRequest req{.method = "GET", .target = "/stream"};
    BodySink sink = [&got](std::string_view bytes) -> Status {
      got.append(bytes);
      return {};
    };
    // Looks for the event every 50 ms for 5 s (the request itself never ends).
    auto watch = [&got]() -> asio::awaitable<bool> {
      asio::steady_timer t(co_await asio::this_coro::executor);
      for (int i = 0; i < 100 && got.empty(); ++i) {
        t.expires_after(50ms);
        co_await t.async_wait(asio::use_awaitable);
      }
      co_return !got.empty();
    };
    auto request = c.async_request(url, std::move(req), std::move(sink));
    auto race = std::move(request) || watch();
    auto v = co_await std::move(race);
    co_return v.index() == 1 && std::get<1>(v);
  });
  EXPECT_TRUE(seen) << "the event came only with the end of the stream";
  EXPECT_EQ(got, "data: hello\n\n");
}

}  // namespace
}  // namespace weir::http
