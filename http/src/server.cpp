#include "weir/http/server.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"

namespace weir::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using asio::use_awaitable;
using namespace asio::experimental::awaitable_operators;

std::optional<std::string_view> Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return std::string_view(v);
  return std::nullopt;
}

namespace {

struct Conn {
  explicit Conn(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buf;
  bool in_request = false;
};

std::string status_reason(int status) {
  return std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(status)));
}

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, ServerConfig c, Handler h, ErrorBody e)
      : io(io), cfg(std::move(c)), handler(std::move(h)), error_body(std::move(e)), acceptor(io) {}

  asio::io_context& io;
  ServerConfig cfg;
  Handler handler;
  ErrorBody error_body;
  tcp::acceptor acceptor;
  bool stopping = false;
  bool draining = false;  // drain(): answer, then close each connection
  std::set<Conn*> conns;
  std::size_t active = 0;
  std::uint64_t refused = 0;

  void count(int status) const {
    if (cfg.on_response) cfg.on_response(status);
  }
  std::string error_text(int status, std::string_view message) const {
    return error_body ? error_body(status, message)
                      : error_json(message, error_type_for_status(status), {}, {});
  }

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> session(tcp::socket sock);
  std::optional<Response> browser_gate(const Request& req) const;
  asio::awaitable<void> reply_and_close(Conn& c, int status, std::string message, unsigned version);
  asio::awaitable<void> drain(Conn& c);
};

// One request on a connection.
class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(Server::Impl& s, Conn& c, Request req, bool keep_alive, unsigned version)
      : s_(s), c_(c), req_(std::move(req)), keep_alive_(keep_alive), version_(version) {}

  using Exchange::async_start_stream;
  const Request& request() const override { return req_; }
  bool disconnected() const override { return gone_; }
  void on_disconnect(std::function<void()> fn) override {
    if (gone_) {
      if (fn) fn();
      return;
    }
    on_gone_ = std::move(fn);
  }

  asio::awaitable<Status> async_respond(Response r) override {
    if (started_) co_return Error(Errc::invalid_argument, "http: a response was already started");
    started_ = true;
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), version_};
    res.set(bhttp::field::server, "weir");
    if (!r.content_type.empty()) res.set(bhttp::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
    add_cors(res);
    res.keep_alive(keep_alive());
    res.body() = std::move(r.body);
    res.prepare_payload();
    s_.count(r.status);
    c_.stream.expires_after(s_.cfg.write_timeout);
    auto [ec, n] = co_await bhttp::async_write(c_.stream, res, asio::as_tuple(use_awaitable));
    c_.stream.expires_never();
    if (ec) co_return fail(ec);
    finished_ = true;
    co_return Status{};
  }

  asio::awaitable<Status> async_start_stream(int status, std::string content_type,
                                             Headers headers) override {
    if (started_) co_return Error(Errc::invalid_argument, "http: a response was already started");
    started_ = true;
    bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), version_};
    res.set(bhttp::field::server, "weir");
    res.set(bhttp::field::content_type, content_type);
    res.set(bhttp::field::cache_control, "no-cache");
    for (const auto& [k, v] : headers) res.set(k, v);
    add_cors(res);
    res.keep_alive(keep_alive());
    res.chunked(true);
    s_.count(status);
    bhttp::response_serializer<bhttp::empty_body> sr(res);
    c_.stream.expires_after(s_.cfg.write_timeout);
    auto [ec, n] = co_await bhttp::async_write_header(c_.stream, sr, asio::as_tuple(use_awaitable));
    c_.stream.expires_never();
    if (ec) co_return fail(ec);
    co_return Status{};
  }

  asio::awaitable<Status> async_write(std::string data) override {
    if (failed_) co_return Error(Errc::io_error, "http: the client is gone");
    if (data.empty()) co_return Status{};
    char head[24];
    int len = std::snprintf(head, sizeof head, "%zx\r\n", data.size());
    data.insert(0, head, static_cast<std::size_t>(len));
    data += "\r\n";
    co_return co_await write_raw(std::move(data));
  }

  asio::awaitable<Status> async_finish() override {
    if (failed_) co_return Error(Errc::io_error, "http: the client is gone");
    auto st = co_await write_raw("0\r\n\r\n");
    if (st) finished_ = true;
    co_return st;
  }

  // The connection's side: watches the socket while the handler runs.
  asio::awaitable<void> watch() {
    for (;;) {
      if (c_.buf.size() >= s_.cfg.max_body_bytes) break;  // a pipelining client: stop reading
      auto [ec, n] = co_await c_.stream.socket().async_read_some(c_.buf.prepare(4096),
                                                                 asio::as_tuple(use_awaitable));
      if (ec == asio::error::operation_aborted) co_return;
      if (ec) {
        gone_ = true;
        if (auto fn = std::move(on_gone_)) fn();
        break;
      }
      c_.buf.commit(n);
    }
    asio::steady_timer forever(s_.io, asio::steady_timer::time_point::max());
    co_await forever.async_wait(asio::as_tuple(use_awaitable));  // until the handler is done
  }

  bool keep_alive() const { return keep_alive_ && !s_.stopping && !s_.draining; }
  bool started() const { return started_; }
  bool finished() const { return finished_; }
  bool failed() const { return failed_ || gone_; }

 private:
  // An allowed page's origin may read the answer (CORS); any other gets no such header.
  template <class Message>
  void add_cors(Message& res) const {
    const auto origin = req_.header("origin");
    if (!origin || !s_.cfg.browser.allows_origin(*origin)) return;
    res.set(bhttp::field::access_control_allow_origin, *origin);
    res.set(bhttp::field::access_control_expose_headers, kCorsExposeHeaders);
    if (res.find(bhttp::field::vary) == res.end()) res.set(bhttp::field::vary, "Origin");
  }

  asio::awaitable<Status> write_raw(std::string data) {
    c_.stream.expires_after(s_.cfg.write_timeout);
    auto [ec, n] =
        co_await asio::async_write(c_.stream, asio::buffer(data), asio::as_tuple(use_awaitable));
    c_.stream.expires_never();
    if (ec) co_return fail(ec);
    co_return Status{};
  }
  Error fail(const boost::system::error_code& ec) {
    failed_ = true;
    if (!gone_) {
      gone_ = true;
      if (auto fn = std::move(on_gone_)) fn();
    }
    return Error(Errc::io_error, "http: write failed: " + ec.message());
  }

  Server::Impl& s_;
  Conn& c_;
  Request req_;
  bool keep_alive_;
  unsigned version_;
  bool started_ = false, finished_ = false, failed_ = false, gone_ = false;
  std::function<void()> on_gone_;
};

asio::awaitable<void> run_handler_impl(Server::Impl& s, ExchangeImpl& ex);

asio::awaitable<void> Server::Impl::reply_and_close(Conn& c, int status, std::string message,
                                                    unsigned version) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::server, "weir");
  res.set(bhttp::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = error_text(status, message);
  res.prepare_payload();
  count(status);
  c.stream.expires_after(cfg.write_timeout);
  auto [ec, n] = co_await bhttp::async_write(c.stream, res, asio::as_tuple(use_awaitable));
  if (ec) co_return;
  co_await drain(c);
}

// Lets the client finish sending what it was sending (a body over the limit, or one the server
// did not read), so that closing does not reset the connection before it has read the answer:
// bounded in time and bytes.
asio::awaitable<void> Server::Impl::drain(Conn& c) {
  boost::system::error_code ig;
  c.stream.socket().shutdown(tcp::socket::shutdown_send, ig);
  c.stream.expires_after(std::chrono::seconds(2));
  std::size_t drained = 0;
  static thread_local char sink[16384];
  while (drained < (64u << 20)) {
    auto [e, got] =
        co_await c.stream.async_read_some(asio::buffer(sink), asio::as_tuple(use_awaitable));
    if (e) break;
    drained += got;
  }
}

// The header rules Beast leaves to us (RFC 9112 3.2): an HTTP/1.1 request names one Host; the
// fields a door decides on (who is calling, from which page, in what format, in which MCP
// session, from which event on) come once, so that no two readers of one request can see two
// different values. nullopt: none broken.
static std::optional<std::string> header_refusal(const Request& req, unsigned version) {
  static constexpr std::string_view kSingle[] = {"host",           "origin",
                                                 "content-type",   "authorization",
                                                 "mcp-session-id", "mcp-protocol-version",
                                                 "last-event-id",  "x-api-key"};
  for (std::string_view name : kSingle) {
    const auto n = std::count_if(req.headers.begin(), req.headers.end(),
                                 [&](const auto& h) { return h.first == name; });
    if (n > 1)
      return "malformed HTTP request: " + std::to_string(n) + " '" + std::string(name) +
             "' headers; send it once";
    if (n == 0 && name == "host" && version >= 11)
      return std::string("malformed HTTP request: an HTTP/1.1 request needs a 'Host' header");
  }
  return std::nullopt;
}

// RFC 9112 3.2.2: a server accepts a request target in absolute form ("GET http://host:port/path",
// as clients send to a proxy) and takes its authority as the request's Host, ignoring the Host
// header. Turns req.target into origin form and sets the host header; false when the target is
// not in absolute form (an origin-form target, or an unknown scheme: served as a path, 404).
static bool take_absolute_form(Request& req) {
  const auto sep = req.target.find("://");
  if (req.target.empty() || req.target[0] == '/' || sep == std::string::npos) return false;
  const std::string_view scheme(req.target.data(), sep);
  if (!iequals(scheme, "http") && !iequals(scheme, "https")) return false;
  const auto start = sep + 3;
  const auto end = req.target.find_first_of("/?#", start);
  std::string authority = req.target.substr(start, end - start);
  std::string rest = end == std::string::npos ? "/" : req.target.substr(end);
  if (rest[0] != '/') rest.insert(rest.begin(), '/');
  req.target = std::move(rest);
  std::erase_if(req.headers, [](const auto& h) { return h.first == "host"; });
  req.headers.emplace_back("host", std::move(authority));
  return true;
}

asio::awaitable<void> Server::Impl::session(tcp::socket sock) {
  auto self = shared_from_this();
  Conn conn(std::move(sock));
  conns.insert(&conn);
  struct Leave {
    Impl& s;
    Conn& c;
    ~Leave() { s.conns.erase(&c); }
  } leave{*this, conn};

  while (!stopping) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(cfg.max_header_bytes));
    parser.body_limit(cfg.max_body_bytes);
    conn.stream.expires_after(cfg.idle_timeout);
    // The header section first, then the body: a chunked body's trailer fields land in the same
    // field list, and must not count as headers (RFC 9110 6.5.1: a trailer 'Host' or
    // 'Authorization' was taken as the request's).
    auto [ec, n] = co_await bhttp::async_read_header(conn.stream, conn.buf, parser,
                                                     asio::as_tuple(use_awaitable));
    Request req;
    std::optional<Response> early;
    if (!ec) {
      for (const auto& f : parser.get()) {
        std::string name(f.name_string());
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
        req.headers.emplace_back(std::move(name), std::string(f.value()));
      }
      const auto& head = parser.get();
      req.method = std::string(head.method_string());
      req.target = std::string(head.target());
      if (auto why = header_refusal(req, head.version())) {
        co_await reply_and_close(conn, 400, std::move(*why), head.version());
        break;
      }
      take_absolute_form(req);
      req.path = req.target.substr(0, req.target.find_first_of("?#"));
      // Refused on its head (the browser rules, a missing API key): a request with a body is
      // answered without reading it, and the connection closes, so that a caller the server
      // refuses cannot make it read one; a bodiless one (a CORS preflight) keeps the connection.
      early = browser_gate(req);
      if (!early && cfg.before_body) early = cfg.before_body(req);
      if (early && !parser.is_done()) {
        conn.stream.expires_never();
        ExchangeImpl ex(*this, conn, std::move(req), false, head.version());
        (void)co_await ex.async_respond(std::move(*early));
        co_await drain(conn);
        break;
      }
      if (!parser.is_done()) {
        auto [body_ec, body_n] = co_await bhttp::async_read(conn.stream, conn.buf, parser,
                                                            asio::as_tuple(use_awaitable));
        ec = body_ec;
      }
    }
    conn.stream.expires_never();
    if (ec) {
      const unsigned version = parser.is_header_done() ? parser.get().version() : 11;
      // The message is a local: no temporary inside a co_await (GCC 12 destroys it twice).
      int status = 0;
      std::string message;
      if (ec == bhttp::error::body_limit) {
        status = 413;
        message = "the request body is over the server's limit of " +
                  std::to_string(cfg.max_body_bytes) + " bytes (--max-body-bytes); send less";
      } else if (ec == bhttp::error::header_limit) {
        status = 431;
        message = "the request headers are over the server's limit of " +
                  std::to_string(cfg.max_header_bytes) + " bytes";
      } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
                 ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
        status = 400;
        message = "malformed HTTP request: " + ec.message();
      }
      if (status) co_await reply_and_close(conn, status, std::move(message), version);
      break;  // end of stream, timeout, reset, shutdown
    }
    auto& breq = parser.get();
    req.body = std::move(breq.body());
    ExchangeImpl ex(*this, conn, std::move(req), breq.keep_alive(), breq.version());
    if (early) {
      (void)co_await ex.async_respond(std::move(*early));
    } else {
      conn.in_request = true;
      ++active;
      co_await (run_handler_impl(*this, ex) || ex.watch());
      --active;
      conn.in_request = false;
      if (!ex.started() && !ex.failed()) {
        Response none{500, "application/json", {}, error_text(500, "the handler sent no response")};
        (void)co_await ex.async_respond(std::move(none));
      }
    }
    if (ex.failed() || !ex.finished() || !ex.keep_alive()) break;
  }
  boost::system::error_code ig;
  conn.stream.socket().shutdown(tcp::socket::shutdown_both, ig);
  conn.stream.socket().close(ig);
}

// The browser rules before any handler (browser.hpp): a CORS preflight is answered here (204 for
// an allowed origin, else 403), and a request a page of another site could send is a 403.
// nullopt: the handler answers.
std::optional<Response> Server::Impl::browser_gate(const Request& req) const {
  const auto origin = req.header("origin");
  if (req.method == "OPTIONS" && origin && req.header("access-control-request-method")) {
    if (!cfg.browser.allows_origin(*origin)) {
      return Response{403,
                      "application/json",
                      {},
                      error_text(403, "cross-origin requests from '" + std::string(*origin) +
                                          "' are not allowed: the server answers pages of the "
                                          "origins in --allowed-origins only (none of them is "
                                          "this one)")};
    }
    return Response{
        204,
        "",
        {{"Access-Control-Allow-Methods", std::string(kCorsAllowMethods)},
         {"Access-Control-Allow-Headers", std::string(kCorsAllowHeaders)},
         {"Access-Control-Max-Age", "600"},
         {"Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"}},
        ""};
  }
  if (auto why = cross_site_refusal(cfg.browser, req.header("host"), origin))
    return Response{403, "application/json", {}, error_text(403, *why)};
  return std::nullopt;
}

asio::awaitable<void> Server::Impl::accept_loop() {
  auto self = shared_from_this();
  while (!stopping) {
    auto [ec, sock] = co_await acceptor.async_accept(asio::as_tuple(use_awaitable));
    if (stopping) break;
    if (ec) {
      // Out of descriptors or similar: wait a little instead of spinning.
      weir::log(LogLevel::warn, "http: accept failed: " + ec.message());
      asio::steady_timer t(io, std::chrono::milliseconds(50));
      co_await t.async_wait(asio::as_tuple(use_awaitable));
      continue;
    }
    if (conns.size() >= cfg.max_connections) {
      ++refused;
      count(503);
      // One small write to a fresh socket does not block; then the connection is closed.
      std::string body = error_text(503, "the server is at its connection limit of " +
                                             std::to_string(cfg.max_connections) +
                                             " (--max-connections); retry shortly");
      std::string msg = "HTTP/1.1 503 " + status_reason(503) +
                        "\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: "
                        "close\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body;
      boost::system::error_code ig;
      sock.non_blocking(true, ig);
      sock.write_some(asio::buffer(msg), ig);
      sock.shutdown(tcp::socket::shutdown_both, ig);
      sock.close(ig);
      continue;
    }
    boost::system::error_code nodelay;
    sock.set_option(tcp::no_delay(true), nodelay);  // a streamed token goes out as it is written
    asio::co_spawn(io, session(std::move(sock)), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        weir::log(LogLevel::error, std::string("http: connection failed: ") + x.what());
      }
    });
  }
}

// Runs the handler; an exception becomes a 500 when nothing was sent yet.
asio::awaitable<void> run_handler_impl(Server::Impl& s, ExchangeImpl& ex) {
  std::string what;
  try {
    co_await s.handler(ex);
    co_return;
  } catch (const std::exception& e) {
    what = e.what();
  }
  weir::log(LogLevel::error, "http: handler for " + ex.request().method + " " +
                                 ex.request().target + " failed: " + what);
  if (!ex.started() && !ex.failed()) {
    Response failed{500, "application/json", {}, s.error_text(500, "internal error: " + what)};
    (void)co_await ex.async_respond(std::move(failed));
  }
}

Server::Server(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  if (impl_) impl_->stopping = true;
}

Result<std::unique_ptr<Server>> Server::create(asio::io_context& io, ServerConfig config,
                                               Handler handler, ErrorBody error_body) {
  std::string host = config.address == "localhost" ? "127.0.0.1" : config.address;
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec)
    return Error(Errc::invalid_argument,
                 "'" + config.address + "' is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)");
  auto impl =
      std::make_shared<Impl>(io, std::move(config), std::move(handler), std::move(error_body));
  tcp::endpoint ep(addr, impl->cfg.port);
  const std::string where = host + ":" + std::to_string(impl->cfg.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error(Errc::io_error, "cannot listen on " + where + ": " + ec.message());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

void Server::start() {
  asio::co_spawn(impl_->io, impl_->accept_loop(), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      weir::log(LogLevel::error, std::string("http: accept loop failed: ") + x.what());
    }
  });
}

std::uint16_t Server::port() const {
  boost::system::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void Server::drain() {
  impl_->draining = true;
}

void Server::stop() {
  if (impl_->stopping) return;
  impl_->stopping = true;
  boost::system::error_code ig;
  impl_->acceptor.close(ig);
  for (Conn* c : impl_->conns)
    if (!c->in_request) c->stream.socket().cancel(ig);
}

std::size_t Server::connections() const {
  return impl_->conns.size();
}
std::size_t Server::active_requests() const {
  return impl_->active;
}
std::uint64_t Server::connections_refused() const {
  return impl_->refused;
}

}  // namespace weir::http
