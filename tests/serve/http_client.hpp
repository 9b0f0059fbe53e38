// A small blocking HTTP/1.1 client over POSIX sockets for the serve tests and bench_serve: real
// requests over loopback, no mocks. One request per connection unless told otherwise.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "weir/runtime/error.hpp"

#include "weir/http/sse.hpp"

namespace weir::testing_http {

struct Reply {
  int status = 0;       // 0: no answer (connection failed or closed early)
  std::string headers;  // raw, lower-cased names not guaranteed
  std::string body;     // de-chunked
  std::string header(const std::string& name) const {
    std::string lower_h, lower_n = name;
    for (char& c : lower_n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (char c : headers)
      lower_h += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto at = lower_h.find("\r\n" + lower_n + ":");
    if (at == std::string::npos) return {};
    at += 3 + lower_n.size();
    auto end = headers.find("\r\n", at);
    std::string v = headers.substr(at, end - at);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    return v;
  }
};

class Conn {
 public:
  explicit Conn(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) close();
  }
  ~Conn() { close(); }
  Conn(const Conn&) = delete;
  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send_all(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Sends a request. `extra`: more header lines ("Name: value\r\n"); a Host or Content-Type
  // line there replaces the default one (Host: 127.0.0.1; Content-Type: application/json on a
  // POST or a body).
  bool request(const std::string& method, const std::string& path, const std::string& body = {},
               const std::string& extra = {}) {
    std::string lower_extra = "\n" + extra;
    for (char& c : lower_extra) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string r = method + " " + path + " HTTP/1.1\r\n";
    if (lower_extra.find("\nhost:") == std::string::npos) r += "Host: 127.0.0.1\r\n";
    r += extra;
    if (!body.empty() || method == "POST") {
      if (lower_extra.find("\ncontent-type:") == std::string::npos)
        r += "Content-Type: application/json\r\n";
      r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    r += "\r\n" + body;
    return send_all(r);
  }
  // Reads bytes into the buffer; false on EOF, error or timeout.
  bool fill(int timeout_ms = 30000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }
  // Reads a status line and headers.
  bool read_head(Reply& r) {
    while (buf_.find("\r\n\r\n") == std::string::npos)
      if (!fill()) return false;
    auto end = buf_.find("\r\n\r\n");
    r.headers = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    r.status = std::atoi(r.headers.c_str() + 9);
    return true;
  }
  // Reads the next piece of the body (a chunk when chunked); "" at the end.
  bool chunked(const Reply& r) const { return r.header("transfer-encoding") == "chunked"; }
  std::string next_chunk() {
    while (buf_.find("\r\n") == std::string::npos)
      if (!fill()) return {};
    auto eol = buf_.find("\r\n");
    std::size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
    while (buf_.size() < eol + 2 + size + 2)
      if (!fill()) return {};
    std::string data = buf_.substr(eol + 2, size);
    buf_.erase(0, eol + 2 + size + 2);
    return data;
  }
  Reply read_reply() {
    Reply r;
    if (!read_head(r)) return r;
    if (chunked(r)) {
      for (std::string c; !(c = next_chunk()).empty();) r.body += c;
      return r;
    }
    std::string cl = r.header("content-length");
    std::size_t want = cl.empty() ? 0 : std::stoul(cl);
    while (buf_.size() < want)
      if (!fill()) break;
    r.body = buf_.substr(0, want);
    buf_.erase(0, want);
    return r;
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

inline Reply call(std::uint16_t port, const std::string& method, const std::string& path,
                  const std::string& body = {}, const std::string& extra = {}) {
  Conn c(port);
  if (!c.ok() || !c.request(method, path, body, extra)) return {};
  return c.read_reply();
}

// The data of every SSE event in a body.
inline std::vector<std::string> sse_data(const std::string& body) {
  http::SseReader rd;
  std::vector<std::string> out;
  (void)rd.feed(body, [&](http::SseEvent& e) -> Status {
    out.push_back(std::move(e.data));
    return {};
  });
  return out;
}

struct SseFrame {
  std::string id, event, data;
};

// Every event of a complete SSE body (ids kept, unlike sse_data).
inline std::vector<SseFrame> frames_of(const std::string& body) {
  http::SseReader rd;
  std::vector<SseFrame> out;
  (void)rd.feed(body, [&](http::SseEvent& e) -> Status {
    out.push_back({e.id, e.event, e.data});
    return {};
  });
  return out;
}

}  // namespace weir::testing_http
