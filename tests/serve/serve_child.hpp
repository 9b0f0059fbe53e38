// `weir serve` (or any weir command) as a child process for the process tests: its stderr is
// read on demand, it dies with the test process, and the destructor kills what is left.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace weir::testing_serve {

struct Child {
  pid_t pid = -1;
  int err_fd = -1;
  std::string err;
  int port = 0;

  // Reads stderr until `pattern` matches (or timeout).
  std::smatch wait_for(const std::regex& pattern, int timeout_ms = 30000) {
    std::smatch m;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!std::regex_search(err, m, pattern) && std::chrono::steady_clock::now() < until) {
      pollfd p{err_fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(err_fd, buf, sizeof buf);
      if (n <= 0) break;
      err.append(buf, static_cast<std::size_t>(n));
    }
    std::regex_search(err, m, pattern);
    return m;
  }
  int wait_exit(int timeout_ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (err_fd >= 0) ::close(err_fd);
  }
};

inline std::unique_ptr<Child> spawn(std::vector<std::string> args) {
  auto c = std::make_unique<Child>();
  int fds[2];
  if (::pipe(fds) != 0) return c;
  c->pid = ::fork();
  if (c->pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan server if the test process aborts
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    std::vector<char*> argv;
    std::string bin = std::string(WEIR_BIN_DIR) + "/weir";
    argv.push_back(bin.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  c->err_fd = fds[0];
  return c;
}

}  // namespace weir::testing_serve
