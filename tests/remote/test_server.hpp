// A fault-injecting HTTP/1.1 server on 127.0.0.1 (port 0) for the remote-model tests: plain Asio,
// raw bytes on the wire, so replies can be malformed, cut, late or reset at will.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

namespace weir::testing {

struct Action {
  std::string raw;         // bytes written as the reply
  bool hang = false;       // write nothing, keep the connection open
  bool reset = false;      // abort the connection (RST) instead of replying
  bool close = false;      // close after writing `raw`
  bool then_hang = false;  // write `raw`, then keep the connection open and send nothing more
};

inline std::string reason_of(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

inline Action reply(int status, std::string body, std::string extra_headers = {},
                    std::string type = "application/json") {
  Action a;
  a.raw = "HTTP/1.1 " + std::to_string(status) + " " + reason_of(status) +
          "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\n" + extra_headers + "\r\n" + body;
  return a;
}

// A chunked text/event-stream reply with one "data:" event per element; `cut` closes the
// connection in the middle of the last event instead of finishing the stream; `hold_open` sends
// the events and then nothing more, the stream left open (a server that stalls mid-stream).
inline Action sse_reply(const std::vector<std::string>& data, bool cut = false,
                        bool hold_open = false) {
  Action a;
  a.raw =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  auto chunk = [&](const std::string& s) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%zx", s.size());
    a.raw += std::string(hex) + "\r\n" + s + "\r\n";
  };
  for (std::size_t i = 0; i < data.size(); ++i) {
    std::string ev = "data: " + data[i] + "\n\n";
    if (cut && i + 1 == data.size()) {
      chunk(ev.substr(0, ev.size() / 2));
      a.close = true;
      return a;
    }
    chunk(ev);
  }
  if (hold_open) {
    a.then_hang = true;
    return a;
  }
  chunk(": done\n\n");
  a.raw += "0\r\n\r\n";
  return a;
}

class TestServer {
 public:
  // handler(n, request): n counts requests from 1; request is the head and body as received.
  using Handler = std::function<Action(int n, const std::string& request)>;

  explicit TestServer(Handler h)
      : handler_(std::move(h)), acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    boost::asio::co_spawn(io_, accept_loop(), boost::asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TestServer() {
    io_.stop();
    thread_.join();
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  int requests() const { return requests_.load(); }
  int connections() const { return connections_.load(); }
  std::vector<std::string> received() const {
    std::lock_guard lock(mu_);
    return received_;
  }

 private:
  boost::asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, sock] =
          co_await acceptor_.async_accept(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) co_return;
      ++connections_;
      boost::asio::co_spawn(io_, session(std::move(sock)), boost::asio::detached);
    }
  }

  boost::asio::awaitable<void> session(boost::asio::ip::tcp::socket s) {
    namespace asio = boost::asio;
    constexpr auto tok = asio::as_tuple(asio::use_awaitable);
    std::string buf;
    for (;;) {
      auto [ec, n] = co_await asio::async_read_until(s, asio::dynamic_buffer(buf), "\r\n\r\n", tok);
      if (ec) co_return;
      std::size_t length = 0;
      std::string head = buf.substr(0, n);
      for (std::string key : {"Content-Length: ", "content-length: "})
        if (auto p = head.find(key); p != std::string::npos)
          length = std::stoul(head.substr(p + key.size()));
      if (buf.size() < n + length) {
        auto [ec2, m] = co_await asio::async_read(
            s, asio::dynamic_buffer(buf), asio::transfer_exactly(n + length - buf.size()), tok);
        if (ec2) co_return;
      }
      std::string request = buf.substr(0, n + length);
      buf.erase(0, n + length);
      const int index = ++requests_;
      {
        std::lock_guard lock(mu_);
        received_.push_back(request);
      }
      Action a = handler_(index, request);
      if (a.hang) {
        asio::steady_timer t(s.get_executor(), std::chrono::hours(1));
        co_await t.async_wait(tok);
        co_return;
      }
      if (a.reset) {
        s.set_option(asio::socket_base::linger(true, 0));
        s.close();
        co_return;
      }
      auto [wec, wn] = co_await asio::async_write(s, asio::buffer(a.raw), tok);
      if (!wec && a.then_hang) {
        asio::steady_timer t(s.get_executor(), std::chrono::hours(1));
        co_await t.async_wait(tok);
        co_return;
      }
      if (wec || a.close) {
        boost::system::error_code ignored;
        s.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
        co_return;
      }
    }
  }

  Handler handler_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::atomic<int> connections_{0};
  mutable std::mutex mu_;
  std::vector<std::string> received_;
};

}  // namespace weir::testing
