// A TCP proxy in front of the test server (pg_server.hpp) that loses connections on purpose, the
// way a network or a server failure would, at a moment the test picks:
//   - cut_all(): every connection through it is cut now (both sides see the socket close);
//   - set_down(true): until set_down(false) a new connection is closed as soon as it arrives (the
//     server is unreachable); with cut_all() that is an outage of the length the test chooses;
//   - cut_on_reply("COMMIT"): the server's answer to the next statement whose CommandComplete tag
//     starts with that prefix is dropped and that connection cut right there, so the statement
//     took effect on the server but the client never hears so (a lost COMMIT answer).
// It reads the server's messages (type byte, int32 length, payload), so clients must not use
// TLS or GSS encryption: conninfo() says sslmode=disable gssencmode=disable. New connections are
// accepted until the proxy is destroyed: a client that reconnects gets through again.
// Thread safety: every method from any thread; one thread per connection moves the bytes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace weir::testing {

class PgProxy {
 public:
  explicit PgProxy(int server_port) : server_port_(server_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~PgProxy() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    ::close(listen_fd_);
    cut_all();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }
  PgProxy(const PgProxy&) = delete;
  PgProxy& operator=(const PgProxy&) = delete;

  // -1 when the listening socket could not be set up.
  int port() const { return port_; }

  // key=value conninfo for `dbname` through the proxy.
  std::string conninfo(const std::string& dbname) const {
    return "host=127.0.0.1 port=" + std::to_string(port_) + " user=weir dbname=" + dbname +
           " connect_timeout=10 sslmode=disable gssencmode=disable";
  }

  // Cuts every connection open now.
  void cut_all() {
    std::lock_guard lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }

  // While down, new connections are closed at once (existing ones are left: see cut_all).
  void set_down(bool down) { down_ = down; }

  // Arms a one-shot cut: the next CommandComplete whose tag starts with `tag_prefix` ("COMMIT",
  // "UPDATE", "SELECT 1") on any connection, after `skip` such answers were passed on, is not
  // passed on, and that connection is cut.
  void cut_on_reply(std::string tag_prefix, int skip = 0) {
    std::lock_guard lock(mu_);
    armed_ = std::move(tag_prefix);
    skip_ = skip;
    fired_ = 0;
  }
  // How many answers were dropped since the last cut_on_reply (0 or 1).
  int fired() const {
    std::lock_guard lock(mu_);
    return fired_;
  }
  // Connections accepted so far (a client that reconnected made a new one).
  int accepted() const { return accepted_.load(); }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      if (down_) {
        ::close(client);
        continue;
      }
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<std::uint16_t>(server_port_));
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(server);
        ::close(client);
        continue;
      }
      ++accepted_;
      std::lock_guard lock(mu_);
      open_fds_.insert(client);
      open_fds_.insert(server);
      threads_.emplace_back([this, client, server] { pump(client, server); });
    }
  }

  // Whether this complete server message must be dropped (and the connection cut).
  bool drop(const std::string& msg) {
    if (msg.size() < 5 || msg[0] != 'C') return false;
    const std::string tag(msg.c_str() + 5);  // NUL-terminated in the payload
    std::lock_guard lock(mu_);
    if (armed_.empty() || tag.rfind(armed_, 0) != 0) return false;
    if (skip_ > 0) {
      --skip_;
      return false;
    }
    armed_.clear();
    ++fired_;
    return true;
  }

  static bool send_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }

  void pump(int client, int server) {
    std::string from_server;  // bytes of the server's next (incomplete) message
    char buf[65536];
    bool open = true;
    while (open) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) break;
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::recv(client, buf, sizeof buf, 0);
        open = n > 0 && send_all(server, buf, static_cast<std::size_t>(n));
      }
      if (open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
        const ssize_t n = ::recv(server, buf, sizeof buf, 0);
        open = n > 0;
        if (open) from_server.append(buf, static_cast<std::size_t>(n));
        // Pass on every complete message; stop at a dropped one.
        while (open && from_server.size() >= 5) {
          std::uint32_t len = 0;
          std::memcpy(&len, from_server.data() + 1, 4);
          const std::size_t total = 1 + static_cast<std::size_t>(ntohl(len));
          if (from_server.size() < total) break;
          const std::string msg = from_server.substr(0, total);
          from_server.erase(0, total);
          open = !drop(msg) && send_all(client, msg.data(), msg.size());
        }
      }
    }
    std::lock_guard lock(mu_);
    open_fds_.erase(client);
    open_fds_.erase(server);
    ::close(client);
    ::close(server);
  }

  const int server_port_;
  int listen_fd_ = -1;
  int port_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> down_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::set<int> open_fds_;            // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;  // GUARDED_BY(mu_)
  std::string armed_;                 // GUARDED_BY(mu_)
  int skip_ = 0;                      // GUARDED_BY(mu_)
  int fired_ = 0;                     // GUARDED_BY(mu_)
};

}  // namespace weir::testing
