// HTTPS through weir::http::Client against a TLS server on loopback, with certificates made by
// the openssl command for the test: a trusted certificate is accepted; an untrusted one, or one
// for another host name, is refused before anything is sent.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "weir/http/client.hpp"

namespace weir::http {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

// A self-signed certificate (its own CA) for `san` ("IP:127.0.0.1" or "DNS:other.example").
struct Cert {
  fs::path dir, cert, key;
  bool ok = false;
  explicit Cert(const std::string& name, const std::string& san) {
    dir = fs::temp_directory_path() / ("weir-tls-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    cert = dir / (name + ".pem");
    key = dir / (name + ".key");
    const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name +
                            " -addext subjectAltName=" + san + " -keyout " + key.string() +
                            " -out " + cert.string() + " >/dev/null 2>&1";
    ok = std::system(cmd.c_str()) == 0;
  }
};

// Answers every request on a TLS connection with `200 OK` and a small JSON body.
class TlsServer {
 public:
  explicit TlsServer(const Cert& c)
      : ctx_(asio::ssl::context::tls_server),
        acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    ctx_.use_certificate_chain_file(c.cert.string());
    ctx_.use_private_key_file(c.key.string(), asio::ssl::context::pem);
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TlsServer() {
    io_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto [ec, sock] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      asio::co_spawn(io_, session(std::move(sock)), asio::detached);
    }
  }
  asio::awaitable<void> session(asio::ip::tcp::socket sock) {
    constexpr auto tok = asio::as_tuple(asio::use_awaitable);
    asio::ssl::stream<asio::ip::tcp::socket> s(std::move(sock), ctx_);
    auto [hec] = co_await s.async_handshake(asio::ssl::stream_base::server, tok);
    if (hec) co_return;
    asio::streambuf buf;
    auto [rec, n] = co_await asio::async_read_until(s, buf, "\r\n\r\n", tok);
    if (rec) co_return;
    ++requests_;
    static const std::string reply =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
        "Connection: close\r\n\r\n{\"ok\":true}";
    (void)co_await asio::async_write(s, asio::buffer(reply), tok);
    (void)co_await s.async_shutdown(tok);
  }

  asio::io_context io_;
  asio::ssl::context ctx_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
};

Result<ClientResponse> get(Client& c, int port) {
  auto url = parse_url("https://127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(url);
  asio::io_context io;
  std::optional<Result<ClientResponse>> out;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        ClientRequest r;
        r.method = "GET";
        r.target = "/";
        out = co_await c.async_request(*url, std::move(r));
      },
      asio::detached);
  io.run();
  return std::move(*out);
}

#define REQUIRE_OPENSSL_CLI(cert) \
  if (!(cert).ok) GTEST_SKIP() << "the openssl command could not make a test certificate"

TEST(Tls, ATrustedCertificateForTheHostIsAccepted) {
  Cert cert("loopback", "IP:127.0.0.1");
  REQUIRE_OPENSSL_CLI(cert);
  TlsServer server(cert);
  Client c(ClientOptions{.ca_file = cert.cert.string()});
  auto r = get(c, server.port());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"ok\":true}");
}

TEST(Tls, AnUntrustedCertificateIsRefusedBeforeTheRequest) {
  Cert cert("loopback", "IP:127.0.0.1");
  REQUIRE_OPENSSL_CLI(cert);
  TlsServer server(cert);
  Client c;  // the system's CA store, which does not hold the test's certificate
  auto r = get(c, server.port());
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::io_error)) << r.error().message;
  EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(server.requests(), 0);
}

TEST(Tls, ACertificateForAnotherHostIsRefused) {
  Cert cert("elsewhere", "DNS:other.example");
  REQUIRE_OPENSSL_CLI(cert);
  TlsServer server(cert);
  Client c(ClientOptions{.ca_file = cert.cert.string()});  // trusted, but not for 127.0.0.1
  auto r = get(c, server.port());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(server.requests(), 0);
}

}  // namespace
}  // namespace weir::http
