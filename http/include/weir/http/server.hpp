// http::Server: an HTTP/1.1 server on Boost.Beast, for weir's OpenAI-compatible routes (and any
// later HTTP front door). Beast stays in server.cpp: this header shows only plain types.
//
// Each connection is one coroutine on the given io_context: it reads a request (header and body
// limits enforced before the handler runs), applies the browser rules (browser.hpp: a request a
// page of another site could send is 403, a CORS preflight is answered here, an allowed page's
// answers carry the CORS headers), calls the Handler with an Exchange, and keeps the
// connection alive for the next request unless either side asked to close. While a handler
// runs, the connection watches its socket: a client that disconnects flips
// Exchange::disconnected() and runs the handler's on_disconnect callback, so work on its
// behalf can be cancelled at once. Every resource is bounded: connections (`max_connections`;
// one more is answered 503 and closed), header and body bytes (431 / 413 in OpenAI's error
// shape), idle time between requests, and the time one write may take (a reader that stops
// reading fails the write after `write_timeout`).
//
// Accepted sockets send without delay (TCP_NODELAY): a streamed token is one small write, which
// Nagle's algorithm would hold until the client's delayed ACK (40 ms on Linux).
//
// Thread safety: a Server and its Exchanges are used from the io_context's thread(s); run the
// io_context on one thread (handlers need no locks then). REQUIRES: the io_context outlives
// the Server, and the Server is destroyed only after the io_context has stopped running.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "weir/http/browser.hpp"
#include "weir/http/error_body.hpp"
#include "weir/runtime/error.hpp"

namespace weir::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // target without the query
  Headers headers;     // names lower-cased
  std::string body;
  // The first header named `name` (lower-case).
  std::optional<std::string_view> header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  Headers headers;  // extra headers (e.g. Retry-After)
  std::string body;
};

// One request and its reply. A handler answers with async_respond() once, or streams: one
// async_start_stream(), any number of async_write(), then async_finish(). Writes fail
// (io_error) when the client is gone or a write took longer than the server's write_timeout;
// the connection is closed after a failed write.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const Request& request() const = 0;
  virtual boost::asio::awaitable<Status> async_respond(Response response) = 0;
  // A chunked response (e.g. text/event-stream) whose body follows in async_write()s.
  virtual boost::asio::awaitable<Status> async_start_stream(int status, std::string content_type,
                                                            Headers headers) = 0;
  // Without extra headers. (An overload, not a default argument: a coroutine's class-type
  // default is built inside the caller's co_await; docs/architecture.md, "the co_await rule".)
  boost::asio::awaitable<Status> async_start_stream(int status, std::string content_type) {
    return async_start_stream(status, std::move(content_type), Headers());
  }
  virtual boost::asio::awaitable<Status> async_write(std::string data) = 0;
  virtual boost::asio::awaitable<Status> async_finish() = 0;
  // True once the client closed its side (or reset) while the handler ran.
  virtual bool disconnected() const = 0;
  // Runs `fn` (on the io thread) when the client disconnects while the handler runs; at once
  // if it already has. One callback; a later call replaces it.
  virtual void on_disconnect(std::function<void()> fn) = 0;
};

using Handler = std::function<boost::asio::awaitable<void>(Exchange&)>;

struct ServerConfig {
  std::string address = "127.0.0.1";
  std::uint16_t port = 8080;  // 0: any free port (see Server::port())
  std::size_t max_connections = 256;
  std::size_t max_body_bytes = 4u << 20;
  std::size_t max_header_bytes = 16u << 10;
  std::chrono::milliseconds idle_timeout{60'000};   // between requests, and reading one
  std::chrono::milliseconds write_timeout{30'000};  // one write (a stalled reader fails it)
  BrowserPolicy browser;                            // Host/Origin rules and CORS (browser.hpp)
  // Called on the io thread with each request's head (method, target, path, headers; the body
  // not read yet). A response refuses the request: it is sent without the body being read, and
  // the connection closes. For checks that need no body, such as an API key, so that a caller
  // without the key cannot make the server read one. Optional.
  std::function<std::optional<Response>(const Request& head)> before_body;
  // Called on the io thread with the status of every response the server starts to write: the
  // handlers' and its own (400 on a malformed request, 403 from the browser rules, 204 to a
  // CORS preflight, 413, 431, 503 at the connection cap). Optional.
  std::function<void(int status)> on_response;
};

// How an error body looks, so that limits enforced before the handler (413, 431, 400 on a
// malformed request, 503 at the connection cap) answer in the same shape as the handler's.
// Default: {"error": {"message", "type", "param": null, "code"}} (OpenAI's shape).
using ErrorBody = std::function<std::string(int status, std::string_view message)>;

class Server {
 public:
  // Binds and listens (nothing is accepted before start()). Errors: io_error naming the address
  // and port (in use, not an address of this host, ...), invalid_argument for a bad address.
  static Result<std::unique_ptr<Server>> create(boost::asio::io_context& io, ServerConfig config,
                                                Handler handler, ErrorBody error_body = {});
  ~Server();

  void start();
  std::uint16_t port() const;  // the bound port (useful with port 0)
  // The start of a shutdown: connections are still accepted and requests still reach the
  // handler (which answers what it will while draining), but every response now closes its
  // connection. Idempotent; stop() ends it.
  void drain();
  // Stops accepting and closes connections that are between requests; connections in a
  // request close after their response. Idempotent.
  void stop();
  std::size_t connections() const;            // open now
  std::size_t active_requests() const;        // handlers running now
  std::uint64_t connections_refused() const;  // over max_connections, ever

  struct Impl;

 private:
  explicit Server(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace weir::http
