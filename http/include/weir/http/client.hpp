// HttpClient: an HTTP/1.1 client on Boost.Beast for weir's remote models (and later MCP).
//
// Requests run on the calling coroutine's executor. Connections are kept alive and pooled per
// endpoint (scheme, host, port): at most max_connections_per_endpoint open at once (more
// requests queue, up to max_queued_per_endpoint, then overloaded), at most
// max_idle_per_endpoint kept idle. https:// uses OpenSSL with the system CA store (or ca_file);
// the certificate chain and the host name are verified, SNI is sent.
//
// Fences, each with a typed error whose message names the endpoint and the setting:
//   connect_timeout  TCP connect plus TLS handshake          -> deadline_exceeded
//   total_timeout    the whole request, first byte to last   -> deadline_exceeded
//   max_response_bytes  body bytes (buffered or streamed)    -> memory_budget_exceeded
//   max_header_bytes    response header block                -> corrupt_data
// Refused connections, resets, TLS failures and malformed responses: io_error or corrupt_data.
// A response cut before its end (an SSE stream the server closed): io_error "... cut ...".
// Cancellation (asio per-operation cancellation of the awaiting coroutine) closes the
// connection and yields cancelled; the connection is never returned to the pool.
//
// Idle connections are bound to the execution context they were made on and are reused only by
// requests on the same executor; when that context is destroyed first, its idle connections are
// closed then (an asio service per context), so a Client may outlive the contexts it ran on.
//
// Thread safety: async_request may be called concurrently from any threads; the client must
// outlive every request it started.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "weir/runtime/error.hpp"

namespace weir::http {

// "http://host:port/base" split. Only http and https; IPv6 literals in brackets.
struct Url {
  bool tls = false;
  std::string host;  // without brackets
  std::string port;  // "80"/"443" when absent
  std::string path;  // "/v1" ("" for none); no trailing '/'
  // "http://host:port/path" as given, for messages.
  std::string text;
  std::string origin() const;  // "http://host:port"
};
Result<Url> parse_url(std::string_view url);  // invalid_argument with the reason

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds total_timeout{600'000};
  std::size_t max_response_bytes = 16u << 20;
  std::size_t max_header_bytes = 64u << 10;
  std::size_t max_connections_per_endpoint = 64;
  std::size_t max_queued_per_endpoint = 1024;
  std::size_t max_idle_per_endpoint = 16;
  std::string ca_file;  // PEM bundle; empty: the system's default verify paths
  bool verify_tls = true;
};

struct Header {
  std::string name;
  std::string value;
};

// Whether a header given from outside (a variable, a file) can be sent as it is: the name an
// HTTP token (RFC 9110: letters, digits and !#$%&'*+-.^_`|~), the value free of CR, LF and NUL,
// and none of the headers the client sets itself (Host, Content-Length, Transfer-Encoding,
// Content-Type). Errors: invalid_argument, "header name 'x a' is not an HTTP token (...)".
Status check_header(std::string_view name, std::string_view value);

struct ClientRequest {
  std::string method = "POST";
  std::string target;  // "/v1/chat/completions"
  std::vector<Header> headers;
  std::string body;
};

struct ClientResponse {
  int status = 0;
  std::string reason;
  std::vector<Header> headers;  // every header, names as sent
  std::string body;             // empty when streamed to a sink
  // The first header named `name` (case-insensitive), or "".
  std::string_view header(std::string_view name) const;
};

// Receives body bytes as they arrive (SSE). An error stops the request and is returned.
using BodySink = std::function<Status(std::string_view)>;

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `request` to `url`'s host. With a sink, a 2xx response's body goes to the sink as it
  // arrives (ClientResponse::body stays empty); other statuses are buffered for the error message.
  // A status is not an error here: the caller decides about 4xx and 5xx.
  boost::asio::awaitable<Result<ClientResponse>> async_request(const Url& url,
                                                               ClientRequest request,
                                                               BodySink sink = nullptr);

  const ClientOptions& options() const noexcept;
  // Connections opened, ever (tests check reuse with it).
  std::size_t connections_opened() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::http
