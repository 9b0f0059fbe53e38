#include "mcp_stdio.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"

extern char** environ;

namespace weir::tools::detail {

namespace asio = boost::asio;

namespace {

// The server's stderr, one log line per line, each cut at `max_line` bytes. Ends at EOF.
asio::awaitable<void> log_stderr(std::shared_ptr<asio::posix::stream_descriptor> err,
                                 std::string server, std::size_t max_line) {
  std::string line;
  bool cut = false;
  char buf[4096];
  for (;;) {
    auto [ec, n] =
        co_await err->async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
    for (std::size_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        weir::log(LogLevel::info, "mcp server '" + server + "' stderr: " + escape_control(line) +
                                      (cut ? " [cut]" : ""));
        line.clear();
        cut = false;
      } else if (line.size() < max_line) {
        line += buf[i];
      } else {
        cut = true;
      }
    }
    if (ec) break;
  }
  if (!line.empty())
    weir::log(LogLevel::info, "mcp server '" + server + "' stderr: " + escape_control(line));
}

}  // namespace

std::vector<std::string> server_environment(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    // A value that starts with "()" is a shell function (Shellshock's vector); the SDKs skip
    // those too.
    if (env.contains(std::string(key)) || value.starts_with("()")) continue;
    if (std::find(std::begin(kInheritedEnvironment), std::end(kInheritedEnvironment), key) !=
        std::end(kInheritedEnvironment))
      out.emplace_back(kv);
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

Result<std::unique_ptr<StdioTransport>> StdioTransport::spawn(asio::any_io_executor ex,
                                                              const McpServerConfig& cfg) {
  const std::string who = "mcp server '" + cfg.name + "'";
  if (cfg.command.empty()) return Error(Errc::invalid_argument, who + ": \"command\" is empty");
  for (const auto& [k, v] : cfg.env)
    if (auto st = check_environment_variable(k, v); !st)
      return Error(Errc::invalid_argument, who + ": env: " + st.error().message);
  // A missing folder would fail the spawn as if the program were missing (ENOENT either way).
  if (std::error_code ec; !cfg.cwd.empty() && !std::filesystem::is_directory(cfg.cwd, ec))
    return Error(Errc::invalid_argument,
                 who + ": cwd '" + cfg.cwd.string() + "' is not a folder weir can enter");
  // A write to a server that died must be an error, not a signal that ends weir.
  static const bool sigpipe_ignored = [] {
    ::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)sigpipe_ignored;
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0)
    return Error(Errc::io_error, who + ": pipe: " + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    return Error(Errc::io_error, who + ": pipe: " + std::strerror(errno));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]), ::close(out[0]), ::close(out[1]);
    return Error(Errc::io_error, who + ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  if (!cfg.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cfg.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: npx's children die with it
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> env_store = server_environment(cfg.env);
  std::vector<char*> envp, argv;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = cfg.command;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]), ::close(out[1]), ::close(err[1]);
  if (rc != 0) {
    ::close(in[1]), ::close(out[0]), ::close(err[0]);
    if (rc == ENOENT)
      return Error(Errc::not_found,
                   who + ": cannot start: command '" + cfg.command[0] + "' not found" +
                       (cfg.command[0].find('/') == std::string::npos ? " (not in PATH)" : ""));
    return Error(Errc::io_error,
                 who + ": cannot start '" + cfg.command[0] + "': " + std::strerror(rc));
  }
  return std::unique_ptr<StdioTransport>(new StdioTransport(ex, cfg, pid, in[1], out[0], err[0]));
}

StdioTransport::StdioTransport(asio::any_io_executor ex, const McpServerConfig& cfg, pid_t pid,
                               int in, int out, int err)
    : server_(cfg.name),
      max_message_bytes_(cfg.max_message_bytes),
      grace_(cfg.shutdown_grace),
      pid_(pid),
      in_(ex, in),
      out_(ex, out),
      err_(std::make_shared<asio::posix::stream_descriptor>(ex, err)) {
  asio::co_spawn(ex, log_stderr(err_, server_, cfg.max_stderr_line), asio::detached);
}

StdioTransport::~StdioTransport() {
  close();
}

asio::awaitable<Result<std::string>> StdioTransport::async_read_message() {
  for (;;) {
    if (auto nl = buf_.find('\n', scan_); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      scan_ = 0;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      co_return line;
    }
    scan_ = buf_.size();
    if (buf_.size() > max_message_bytes_) {
      const std::size_t n = buf_.size();
      buf_.clear();
      buf_.shrink_to_fit();
      scan_ = 0;
      co_return Error(Errc::corrupt_data,
                      "mcp server '" + server_ + "' sent a message of more than " +
                          std::to_string(max_message_bytes_) + " bytes (" + std::to_string(n) +
                          " bytes without a newline; max_message_bytes=" +
                          std::to_string(max_message_bytes_) + "); the connection was reset");
    }
    char tmp[65536];
    auto [ec, n] =
        co_await out_.async_read_some(asio::buffer(tmp), asio::as_tuple(asio::use_awaitable));
    if (ec) {
      std::string why = exit_reason();
      co_return Error(Errc::io_error,
                      "mcp server '" + server_ + "' " + (why.empty() ? "closed its output" : why));
    }
    buf_.append(tmp, n);
  }
}

asio::awaitable<Status> StdioTransport::async_write_message(std::string message) {
  message += '\n';
  auto [ec, n] =
      co_await asio::async_write(in_, asio::buffer(message), asio::as_tuple(asio::use_awaitable));
  if (ec) {
    // A server that has exited (the usual cause of EPIPE) is named by how it ended, as a read
    // would name it: which of the two notices first is a race the user should not see.
    std::string why = exit_reason();
    if (!why.empty()) co_return Error(Errc::io_error, "mcp server '" + server_ + "' " + why);
    co_return Error(Errc::io_error, "mcp server '" + server_ + "': cannot write to its stdin (" +
                                        ec.message() + ")");
  }
  co_return Status{};
}

bool StdioTransport::reap(bool block) {
  if (reaped_) return true;
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    reaped_ = true;
    status_ = st;
  } else if (r < 0) {
    reaped_ = true;  // not our child any more (someone reaped it): nothing to wait for
  }
  return reaped_;
}

std::string StdioTransport::exit_reason() {
  // The process usually closes stdout as it exits: give it a moment to be reapable.
  for (int i = 0; i < 100 && !reap(false); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!reaped_) return "";
  if (WIFEXITED(status_)) return "exited with status " + std::to_string(WEXITSTATUS(status_));
  if (WIFSIGNALED(status_)) return "was killed by signal " + std::to_string(WTERMSIG(status_));
  return "ended";
}

void StdioTransport::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  in_.close(ignored);
  out_.close(ignored);
  if (err_) err_->close(ignored);
  if (reap(false)) {
    ::kill(-pid_, SIGKILL);  // children left in its group (npx's node), if any
    return;
  }
  ::kill(-pid_, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + grace_;
  while (!reap(false) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    reap(true);
  }
}

}  // namespace weir::tools::detail
