// The stdio transport: a child process, JSON-RPC messages one per line on its stdin/stdout,
// its stderr logged line by line. Private to weir::tools (see weir/tools/mcp.hpp).
//
// Thread safety: confined to the executor it was spawned on (the MCP client's I/O thread).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "weir/tools/mcp.hpp"

namespace weir::tools::detail {

// What a server weir starts inherits from weir's environment: the variables the official MCP
// SDKs' stdio transports pass (HOME, LOGNAME, PATH, SHELL, TERM, USER), the locale, and the
// temporary folder and time zone. Nothing else (API keys, database credentials) reaches it
// unless its configuration names it in `env`.
inline constexpr std::string_view kInheritedEnvironment[] = {
    "HOME", "LOGNAME",  "PATH",   "SHELL",    "TERM",   "USER",
    "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ"};

// The environment a stdio server starts with ("KEY=value" each): kInheritedEnvironment's
// variables that weir has, then `env` (which wins).
std::vector<std::string> server_environment(const std::map<std::string, std::string>& env);

class StdioTransport final : public Transport {
 public:
  // Spawns cfg.command in its own process group with pipes for stdin, stdout and stderr.
  // Errors: not_found (no such command), io_error (any other spawn failure).
  static Result<std::unique_ptr<StdioTransport>> spawn(boost::asio::any_io_executor ex,
                                                       const McpServerConfig& cfg);
  ~StdioTransport() override;

  boost::asio::awaitable<Result<std::string>> async_read_message() override;
  boost::asio::awaitable<Status> async_write_message(std::string message) override;
  // Closes stdin, sends SIGTERM to the process group, SIGKILL after `grace`, reaps the child.
  // Blocks the calling thread for at most `grace` (plus the reaping).
  void close() override;
  std::string exit_reason() override;

  pid_t pid() const { return pid_; }

 private:
  StdioTransport(boost::asio::any_io_executor ex, const McpServerConfig& cfg, pid_t pid, int in,
                 int out, int err);
  bool reap(bool block);

  std::string server_;
  std::size_t max_message_bytes_;
  std::chrono::milliseconds grace_;
  pid_t pid_;
  bool reaped_ = false;
  bool closed_ = false;
  int status_ = 0;
  boost::asio::posix::stream_descriptor in_, out_;              // the child's stdin and stdout
  std::shared_ptr<boost::asio::posix::stream_descriptor> err_;  // shared with the log reader
  std::string buf_;       // bytes read from stdout and not yet returned
  std::size_t scan_ = 0;  // buf_[0, scan_) holds no newline
};

}  // namespace weir::tools::detail
