// A whole client session on one HTTP connection, decoded from bytes: raw bytes and well-formed
// requests (keep-alive, pipelined, Expect: 100-continue, chunked, streamed, HTTP/1.0, an
// over-long header), pauses between pieces (slow headers), reads, a half-close, and a
// disconnect at any byte (then a new connection). Played against a server on 127.0.0.1 with
// blocking POSIX sockets. Shared by fuzz_http_session (libFuzzer, an http::Server) and the serve
// soak test (the real weir serve), which both check the server's invariants after each session.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace weir::fuzzing {

// Requests a session may send whole. `{body}` requests carry a small JSON body.
inline const std::vector<std::string>& canned_requests() {
  static const std::vector<std::string> r = [] {
    auto post = [](std::string path, std::string body, std::string extra = {}) {
      return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra +
             "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    };
    const std::string json = "Content-Type: application/json\r\n";
    return std::vector<std::string>{
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        post("/v1/completions", R"({"prompt": "x", "max_tokens": 3, "seed": 1})", json),
        post("/v1/completions", R"({"prompt": "x", "max_tokens": 24, "stream": true, "n": 2})",
             json),
        // Expect: 100-continue (the body follows at once, as curl does after a short wait)
        post("/v1/completions", R"({"prompt": [1], "max_tokens": 2})",
             json + "Expect: 100-continue\r\n"),
        // a chunked body
        "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n" + json +
            "Transfer-Encoding: chunked\r\n\r\n9\r\n{\"prompt\"\r\n"
            "a\r\n: \"hello\"}\r\n0\r\n\r\n",
        "GET /v1/models HTTP/1.0\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        post("/v1/chat/completions", R"({"messages": 1})", json),
        post("/v1/completions", "{}", "Content-Type: text/plain\r\n"),
        "GET /metrics HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        "OPTIONS /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://a.example\r\n"
        "Access-Control-Request-Method: POST\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + std::string(20000, 'x') +
            "\r\n\r\n",
    };
  }();
  return r;
}

class SessionPlayer {
 public:
  explicit SessionPlayer(std::uint16_t port) : port_(port) {}
  ~SessionPlayer() { disconnect(); }
  SessionPlayer(const SessionPlayer&) = delete;

  // Plays the session the bytes describe. Each op is one byte (its low 3 bits pick the op) and
  // what it takes from the bytes after it:
  //   0 raw n bytes (n = next byte % 64)   1 a canned request (next byte picks it)
  //   2 a pause of 1-4 ms                  3 read what has arrived (up to 5 ms)
  //   4 half-close (no more writes)        5 disconnect, then a new connection
  //   6 two canned requests in one write (pipelined)   7 a canned request cut at a byte
  void play(std::string_view in) {
    connect();
    std::size_t i = 0;
    auto next = [&]() -> std::uint8_t {
      return i < in.size() ? static_cast<std::uint8_t>(in[i++]) : 0;
    };
    const auto& canned = canned_requests();
    while (i < in.size()) {
      const std::uint8_t op = next();
      switch (op & 7) {
        case 0: {
          const std::size_t n = std::min<std::size_t>(next() % 64, in.size() - i);
          send(in.substr(i, n));
          i += n;
          break;
        }
        case 1:
          send(canned[next() % canned.size()]);
          break;
        case 2:
          std::this_thread::sleep_for(std::chrono::milliseconds(1 + (op >> 3) % 4));
          break;
        case 3:
          drain(5);
          break;
        case 4:
          if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
          break;
        case 5:
          disconnect();
          connect();
          break;
        case 6:
          send(canned[next() % canned.size()] + canned[next() % canned.size()]);
          break;
        case 7: {
          const std::string& r = canned[next() % canned.size()];
          send(std::string_view(r).substr(0, next() % (r.size() + 1)));
          disconnect();
          connect();
          break;
        }
      }
    }
    drain(5);
    disconnect();
  }

  // A GET /health on a new connection: the status of its answer, 0 when none came in 2 s.
  int health_status() {
    disconnect();
    connect();
    send(canned_requests()[0]);
    std::string got;
    char buf[4096];
    while (fd_ >= 0 && got.find("\r\n") == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) break;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    disconnect();
    if (got.size() < 12 || got.rfind("HTTP/1.", 0) != 0) return 0;
    return std::atoi(got.c_str() + 9);
  }

 private:
  void connect() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) disconnect();
  }
  void disconnect() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(std::string_view s) {
    while (fd_ >= 0 && !s.empty()) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 50) <= 0) return;  // the server is not reading: move on
      const ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n <= 0) return;
      s.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void drain(int ms) {
    char buf[16384];
    while (fd_ >= 0) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, ms) <= 0) return;
      if (::recv(fd_, buf, sizeof buf, MSG_DONTWAIT) <= 0) return;
    }
  }

  std::uint16_t port_;
  int fd_ = -1;
};

}  // namespace weir::fuzzing
