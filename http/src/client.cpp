#include "weir/http/client.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "weir/runtime/limiter.hpp"
#include "weir/runtime/text.hpp"

namespace weir::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTok = asio::as_tuple(asio::use_awaitable);

// One pooled connection: plain TCP or TLS over TCP, with its read buffer.
struct Conn {
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;

  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  void close() {
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().close();
  }
};

struct Pool {
  std::unique_ptr<Limiter> limiter;
};

// Idle connections of one Client, shared with the reapers of the contexts they are bound to.
struct IdleState {
  std::mutex mu;
  std::multimap<std::string, std::unique_ptr<Conn>> conns;  // GUARDED_BY(mu); by origin
};

asio::execution_context* context_of(const asio::any_io_executor& ex) {
  return &asio::query(ex, asio::execution::context);
}

// An idle connection is bound to the execution context it was made on. When that context is
// destroyed before the Client, this service (one per context) closes and frees the Client's idle
// connections bound to it during the context's shutdown, while its I/O services still exist.
class IdleReaper final : public asio::execution_context::service {
 public:
  using key_type = IdleReaper;
  static inline asio::execution_context::id id;
  explicit IdleReaper(asio::execution_context& ctx) : service(ctx) {}

  void watch(const std::shared_ptr<IdleState>& s) {
    std::lock_guard lock(mu_);
    std::erase_if(states_, [](const auto& w) { return w.expired(); });
    for (const auto& w : states_)
      if (!w.owner_before(s) && !s.owner_before(w)) return;
    states_.push_back(s);
  }

 private:
  void shutdown() override {
    std::vector<std::weak_ptr<IdleState>> states;
    {
      std::lock_guard lock(mu_);
      states.swap(states_);
    }
    for (auto& w : states) {
      auto s = w.lock();
      if (!s) continue;
      std::vector<std::unique_ptr<Conn>> doomed;
      {
        std::lock_guard lock(s->mu);
        for (auto it = s->conns.begin(); it != s->conns.end();) {
          if (context_of(it->second->lowest().get_executor()) == &context()) {
            doomed.push_back(std::move(it->second));
            it = s->conns.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (auto& c : doomed) c->close();
    }
  }

  std::mutex mu_;
  std::vector<std::weak_ptr<IdleState>> states_;  // GUARDED_BY(mu_)
};

// Why a request failed, with what the caller needs to decide about a stale pooled connection.
struct Failure {
  Error error;
  bool before_response = false;  // nothing of a response was read
};

Error net_error(const Url& url, std::string_view what, const beast::error_code& ec,
                std::string_view timeout_setting) {
  const std::string where = url.origin() + ": ";
  if (ec == beast::error::timeout)
    return {Errc::deadline_exceeded,
            where + std::string(what) + " timed out (" + std::string(timeout_setting) + ")"};
  if (ec == asio::error::operation_aborted)
    return {Errc::cancelled, where + std::string(what) + " cancelled"};
  if (ec == bhttp::error::end_of_stream)  // closed (or the server died) before a response byte
    return {Errc::io_error, where + "connection closed by the server before it answered"};
  if (ec == bhttp::error::partial_message || ec == asio::error::eof ||
      ec == asio::ssl::error::stream_truncated)
    return {Errc::io_error, where + "connection closed by the server, response cut before its end"};
  if (ec == bhttp::error::header_limit)
    return {Errc::corrupt_data, where + "response header larger than max_header_bytes"};
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_version).category())
    return {Errc::corrupt_data, where + "malformed HTTP response: " + ec.message()};
  return {Errc::io_error, where + std::string(what) + " failed: " + ec.message()};
}

}  // namespace

std::string_view ClientResponse::header(std::string_view name) const {
  for (const auto& h : headers)
    if (iequals(h.name, name)) return h.value;
  return {};
}

struct Client::Impl {
  ClientOptions options;
  std::optional<asio::ssl::context> ssl;
  std::string ssl_error;  // set when the TLS context could not be made
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Pool>> pools;  // GUARDED_BY(mu); one per origin
  std::atomic<std::size_t> opened{0};
  std::shared_ptr<IdleState> idle = std::make_shared<IdleState>();

  Pool& pool(const Url& url) {
    std::lock_guard lock(mu);
    auto& p = pools[url.origin()];
    if (!p) {
      p = std::make_unique<Pool>();
      p->limiter = std::make_unique<Limiter>(
          "http connections to " + url.origin() + " (max_connections_per_endpoint=" +
              std::to_string(options.max_connections_per_endpoint) +
              ", max_queued_per_endpoint=" + std::to_string(options.max_queued_per_endpoint) + ")",
          options.max_connections_per_endpoint, options.max_queued_per_endpoint);
    }
    return *p;
  }

  // An idle connection made on `ex` (handlers of a pooled stream must run where it was made).
  std::unique_ptr<Conn> take_idle(const Url& url, const asio::any_io_executor& ex) {
    std::lock_guard lock(idle->mu);
    auto [b, e] = idle->conns.equal_range(url.origin());
    for (auto it = b; it != e; ++it) {
      if (it->second->lowest().get_executor() == ex) {
        auto c = std::move(it->second);
        idle->conns.erase(it);
        return c;
      }
    }
    return nullptr;
  }

  void give_back(const Url& url, std::unique_ptr<Conn> c) {
    c->lowest().expires_never();
    if (c->buffer.size() != 0) {  // bytes past the response: the connection is not clean
      c->close();
      return;
    }
    asio::use_service<IdleReaper>(*context_of(c->lowest().get_executor())).watch(idle);
    std::lock_guard lock(idle->mu);
    if (idle->conns.count(url.origin()) >= options.max_idle_per_endpoint) {
      c->close();
      return;
    }
    idle->conns.emplace(url.origin(), std::move(c));
  }

  asio::awaitable<Result<std::unique_ptr<Conn>>> connect(const Url& url,
                                                         Clock::time_point deadline);

  template <class Stream>
  asio::awaitable<Result<ClientResponse>> exchange(Stream& s, Conn& c, const Url& url,
                                                   bhttp::request<bhttp::string_body>& req,
                                                   const BodySink& sink, Clock::time_point deadline,
                                                   bool& reusable, bool& before_response);
};

asio::awaitable<Result<std::unique_ptr<Conn>>> Client::Impl::connect(const Url& url,
                                                                     Clock::time_point deadline) {
  auto ex = co_await asio::this_coro::executor;
  const auto connect_setting =
      "http.connect_timeout_ms=" + std::to_string(options.connect_timeout.count());
  tcp::resolver resolver(ex);
  auto [rec, endpoints] = co_await resolver.async_resolve(url.host, url.port, kTok);
  if (rec)
    co_return Error(Errc::io_error, url.origin() + ": cannot resolve host: " + rec.message());
  auto conn = std::make_unique<Conn>();
  if (url.tls) {
    if (!ssl) co_return Error(Errc::io_error, url.origin() + ": TLS unavailable: " + ssl_error);
    conn->tls.emplace(ex, *ssl);
  } else {
    conn->plain.emplace(ex);
  }
  conn->lowest().expires_at(std::min(deadline, Clock::now() + options.connect_timeout));
  auto [cec, ep] = co_await conn->lowest().async_connect(endpoints, kTok);
  if (cec) co_return net_error(url, "connect", cec, connect_setting);
  ++opened;
  if (url.tls) {
    if (!SSL_set_tlsext_host_name(conn->tls->native_handle(), url.host.c_str()))
      co_return Error(Errc::io_error, url.origin() + ": cannot set the TLS server name");
    if (options.verify_tls)
      conn->tls->set_verify_callback(asio::ssl::host_name_verification(url.host));
    auto [hec] = co_await conn->tls->async_handshake(asio::ssl::stream_base::client, kTok);
    if (hec) co_return net_error(url, "TLS handshake", hec, connect_setting);
  }
  co_return conn;
}

template <class Stream>
asio::awaitable<Result<ClientResponse>> Client::Impl::exchange(
    Stream& s, Conn& c, const Url& url, bhttp::request<bhttp::string_body>& req,
    const BodySink& sink, Clock::time_point deadline, bool& reusable, bool& before_response) {
  const auto total_setting = "http.timeout_ms=" + std::to_string(options.total_timeout.count());
  reusable = false;
  before_response = true;
  c.lowest().expires_at(deadline);
  auto [wec, wn] = co_await bhttp::async_write(s, req, kTok);
  if (wec) co_return net_error(url, "sending the request", wec, total_setting);

  bhttp::response_parser<bhttp::buffer_body> p;
  p.header_limit(
      static_cast<std::uint32_t>(std::min<std::size_t>(options.max_header_bytes, 0xFFFFFFFFu)));
  p.body_limit(std::numeric_limits<std::uint64_t>::max());  // counted below
  auto [hec, hn] = co_await bhttp::async_read_header(s, c.buffer, p, kTok);
  if (hec) {
    before_response = hn == 0 && c.buffer.size() == 0;
    co_return net_error(url, "waiting for the response", hec, total_setting);
  }
  before_response = false;
  ClientResponse r;
  const auto& head = p.get();
  r.status = static_cast<int>(head.result_int());
  r.reason = std::string(head.reason());
  for (const auto& f : head)
    r.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  const bool to_sink = sink && r.status >= 200 && r.status < 300;

  std::size_t total = 0;
  char chunk[16 * 1024];
  while (!p.is_done()) {
    p.get().body().data = chunk;
    p.get().body().size = sizeof chunk;
    // read_some: bytes reach the sink as they arrive (async_read held a stream's events back
    // until the chunk buffer was full or the body ended).
    auto [rec, rn] = co_await bhttp::async_read_some(s, c.buffer, p, kTok);
    if (rec == bhttp::error::need_buffer) rec = {};
    const std::size_t got = sizeof chunk - p.get().body().size;
    total += got;
    if (total > options.max_response_bytes)
      co_return Error(Errc::memory_budget_exceeded,
                      url.origin() + ": response body larger than http.max_response_bytes=" +
                          std::to_string(options.max_response_bytes));
    if (got > 0) {
      if (to_sink) {
        if (auto st = sink(std::string_view(chunk, got)); !st) co_return std::move(st).error();
      } else {
        r.body.append(chunk, got);
      }
    }
    if (rec) co_return net_error(url, "reading the response", rec, total_setting);
  }
  reusable = p.keep_alive();
  co_return r;
}

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  try {
    impl_->ssl.emplace(asio::ssl::context::tls_client);
    if (impl_->options.ca_file.empty())
      impl_->ssl->set_default_verify_paths();
    else
      impl_->ssl->load_verify_file(impl_->options.ca_file);
    impl_->ssl->set_verify_mode(impl_->options.verify_tls ? asio::ssl::verify_peer
                                                          : asio::ssl::verify_none);
  } catch (const std::exception& e) {
    impl_->ssl.reset();
    impl_->ssl_error = std::string(e.what()) + " (http.ca_file='" + impl_->options.ca_file + "')";
  }
}

Client::~Client() {
  // Idle connections close here, on this thread: REQUIRES no request in flight.
  std::multimap<std::string, std::unique_ptr<Conn>> conns;
  {
    std::lock_guard lock(impl_->idle->mu);
    conns.swap(impl_->idle->conns);
  }
  for (auto& [origin, c] : conns) c->close();
}

const ClientOptions& Client::options() const noexcept {
  return impl_->options;
}
std::size_t Client::connections_opened() const noexcept {
  return impl_->opened.load();
}

asio::awaitable<Result<ClientResponse>> Client::async_request(const Url& url, ClientRequest request,
                                                              BodySink sink) {
  auto& impl = *impl_;
  const auto deadline = Clock::now() + impl.options.total_timeout;
  Pool& pool = impl.pool(url);
  auto permit = co_await pool.limiter->async_acquire();
  if (!permit) co_return std::move(permit).error();

  bhttp::request<bhttp::string_body> req;
  req.method_string(request.method);
  // A URL without a path and a request without a target ask for the root: an empty
  // request-target is not HTTP ("POST  HTTP/1.1").
  std::string target = url.path + request.target;
  if (target.empty()) target = "/";
  req.target(target);
  req.version(11);
  req.set(bhttp::field::host, url.host + ":" + url.port);
  req.set(bhttp::field::user_agent, "weir");
  // Each header as given, a repeated name sent repeated (W3C tracestate, for one, may come in
  // several lines); a User-Agent given replaces weir's.
  for (auto& h : request.headers) {
    if (iequals(h.name, "User-Agent"))
      req.set(bhttp::field::user_agent, h.value);
    else
      req.insert(h.name, h.value);
  }
  req.body() = std::move(request.body);
  req.keep_alive(true);
  req.prepare_payload();

  auto ex = co_await asio::this_coro::executor;
  // A pooled connection the server closed while idle fails before any response byte: then
  // the request is sent once more on a fresh connection.
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Conn> conn = attempt == 0 ? impl.take_idle(url, ex) : nullptr;
    const bool pooled = conn != nullptr;
    if (!conn) {
      auto made = co_await impl.connect(url, deadline);
      if (!made) co_return std::move(made).error();
      conn = std::move(*made);
    }
    bool reusable = false, before_response = false;
    // (No co_await inside ?: : GCC 12 miscompiles it.)
    Result<ClientResponse> r;
    if (conn->tls)
      r = co_await impl.exchange(*conn->tls, *conn, url, req, sink, deadline, reusable,
                                 before_response);
    else
      r = co_await impl.exchange(*conn->plain, *conn, url, req, sink, deadline, reusable,
                                 before_response);
    if (r) {
      if (reusable)
        impl.give_back(url, std::move(conn));
      else
        conn->close();
      co_return r;
    }
    conn->close();
    if (pooled && before_response && !r.error().is(Errc::cancelled) &&
        !r.error().is(Errc::deadline_exceeded))
      continue;
    co_return r;
  }
}

}  // namespace weir::http
