// MCP client: tools from a Model Context Protocol server, under weir's tool fences.
//
// McpClient::connect starts one server (stdio transport: weir spawns `command`, writes
// JSON-RPC 2.0 messages one per line to its stdin and reads them from its stdout), negotiates
// the protocol version (offers kMcpProtocolVersion; accepts any of kMcpSupportedVersions),
// sends notifications/initialized and lists the server's tools (following nextCursor pages).
// add_mcp_tools then registers each remote tool in a ToolRegistry as "server/tool", its
// inputSchema as the Tool's parameters, so the registry validates arguments and applies the
// server's fences (timeout, max_concurrency, rate) before a request leaves weir.
//
// Bounds (McpServerConfig): a line from the server over max_message_bytes is an error naming
// the server and the size, and the connection is reset (the process is killed and restarted);
// at most max_in_flight requests wait for answers and max_write_queue messages wait to be
// written (beyond either: Errc::overloaded); the server's stderr goes to weir's log line by line,
// each line cut at max_stderr_line bytes. When the server dies, the calls waiting on it fail
// with Errc::tool_failed naming the server and the tool, and weir restarts it after
// restart_backoff, doubling each time, at most max_restarts times in a row (a successful
// handshake resets the count); after that every call fails at once with the last reason.
// A call whose timeout passes sends notifications/cancelled for its request and fails with
// Errc::tool_timeout. The server's ping requests are answered; other requests from the server
// get JSON-RPC error -32601; unknown notifications are ignored; notifications/tools/list_changed
// refreshes tools() (tools already registered keep their names; new ones are not added).
//
// Lifetimes and threads: the client runs its own I/O thread (one per server): a slow or stuck
// server never blocks the caller's io_context. Every public method is safe from any thread and
// any executor. The tools made by make_mcp_tools hold the client (shared_ptr); the last owner's
// destruction stops the server: stdin closed, SIGTERM, SIGKILL after shutdown_grace, reaped.
//
// Transports: stdio (config.command), or Streamable HTTP (config.url, on weir::http's client):
// every message is POSTed; the answer comes back as the response's JSON body or as the events
// of its SSE stream; the Mcp-Session-Id the server assigns is sent back; a session the server
// ended (404) or a refused connection ends the connection, and the client reconnects as it
// restarts a stdio server. A transport moves whole messages and reports the peer's end as an
// error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"
#include "weir/tools/tool.hpp"

namespace weir {
class JsonFields;
}

namespace weir::tools {

class ToolRegistry;

inline constexpr std::string_view kMcpProtocolVersion = "2025-06-18";
inline constexpr std::string_view kMcpSupportedVersions[] = {"2025-06-18", "2025-03-26",
                                                             "2024-11-05"};

struct McpServerConfig {
  std::string name;                  // tools are registered as "name/tool"
  std::vector<std::string> command;  // argv; argv[0] is looked up in PATH
  // Streamable HTTP instead of stdio: the server's MCP endpoint ("http://127.0.0.1:3000/mcp"),
  // and headers sent with every request (values are secrets: never logged).
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  // Headers whose values are read from environment variables (header -> variable) when the
  // client connects: a secret stays out of files and logs. Unset or empty: connect() fails.
  std::map<std::string, std::string> headers_env;
  // The server's environment (stdio): these, over a small default taken from weir's (HOME,
  // LOGNAME, PATH, SHELL, TERM, USER, the locale, TMPDIR, TZ); nothing else of weir's is passed.
  std::map<std::string, std::string> env;
  std::filesystem::path cwd;                         // empty: weir's working directory
  ToolOptions options;                               // the fences of every tool of this server
  std::size_t max_message_bytes = 4u << 20;          // one line from the server
  std::size_t max_in_flight = 64;                    // requests awaiting an answer
  std::size_t max_write_queue = 256;                 // messages waiting to be written
  std::size_t max_stderr_line = 4096;                // bytes of one stderr line kept for the log
  std::int32_t max_restarts = 3;                     // consecutive restarts after the server dies
  std::chrono::milliseconds restart_backoff{200};    // doubles each consecutive restart
  std::chrono::milliseconds connect_timeout{30000};  // start + initialize + tools/list
  std::chrono::milliseconds shutdown_grace{2000};    // SIGTERM -> SIGKILL
};

// Whether `name=value` can be put in a server's environment: a name that is not empty and holds
// no '=' or NUL, a value with no NUL. Errors: invalid_argument saying which.
Status check_environment_variable(std::string_view name, std::string_view value);

// One "mcp_servers" entry of a configuration file (workflow, crew or group-chat file) at `ptr`:
// {"command": [...]} (stdio) or {"url": "http://..."} (Streamable HTTP), with "env", "cwd"
// (resolved against `base_dir`), "headers", "headers_env" (url only), "timeout_ms",
// "max_concurrency" (1..4096), "rate_per_minute" (0..2^30), "max_message_bytes" (>= 1024).
// `name` must be a plain name (letters, digits, '_', '-'; its tools are "name/tool").
// nullopt, with every problem reported through `fields`, when the entry is not usable.
std::optional<McpServerConfig> parse_mcp_server(JsonFields& fields, std::string_view name,
                                                const boost::json::value& entry,
                                                std::string_view ptr,
                                                const std::filesystem::path& base_dir);

// One tool as the server lists it.
struct McpToolInfo {
  std::string name;
  std::string description;
  boost::json::object input_schema;
};

// A transport: one connection to one server, whole messages in and out.
// REQUIRES: its async methods are called from one coroutine each (one reader, one writer), on
// the executor it was made for.
class Transport {
 public:
  virtual ~Transport() = default;
  // The next message (no newline). Errors: io_error naming the server when the peer ended;
  // corrupt_data when a message is over the size cap.
  virtual boost::asio::awaitable<Result<std::string>> async_read_message() = 0;
  virtual boost::asio::awaitable<Status> async_write_message(std::string message) = 0;
  // Ends the connection (stops the process); pending reads and writes fail. Idempotent.
  virtual void close() = 0;
  // Why the peer ended ("exited with status 1", "killed by signal 9"), once it has.
  virtual std::string exit_reason() = 0;
  // The version initialize negotiated (HTTP sends it with every later request).
  virtual void set_protocol_version(std::string) {}
};

class McpClient {
 public:
  // Starts the server and completes the handshake and the tool listing, waiting at most
  // config.connect_timeout. Errors (nothing left running): invalid_argument for a bad config;
  // not_found when the command does not exist ("mcp server 'fs': command 'npx' not found");
  // io_error when it cannot start or exits; unsupported when the server answers a protocol
  // version weir does not implement; tool_timeout; corrupt_data for a malformed answer.
  static Result<std::shared_ptr<McpClient>> connect(McpServerConfig config);
  ~McpClient();
  McpClient(const McpClient&) = delete;
  McpClient& operator=(const McpClient&) = delete;

  const McpServerConfig& config() const;
  std::string protocol_version() const;    // the negotiated version
  std::vector<McpToolInfo> tools() const;  // the latest listing

  // tools/call: the raw CallToolResult. Sends notifications/cancelled and fails with
  // tool_timeout when `timeout` passes first. Errors name the server and the tool:
  // tool_failed (the server died, a JSON-RPC error, a malformed answer), overloaded (in-flight
  // or write-queue cap), tool_timeout, cancelled (the client shut down).
  boost::asio::awaitable<Result<boost::json::object>> async_call_tool(
      std::string tool, boost::json::object arguments, std::chrono::milliseconds timeout);
  // The same, traced: a client span `tools/call <tool>` under `trace` (MCP semantic
  // conventions: mcp.method.name, gen_ai.tool.name, jsonrpc.request.id is not known here), whose
  // W3C context goes to the server in params._meta.traceparent (and, over Streamable HTTP, in
  // the traceparent header).
  boost::asio::awaitable<Result<boost::json::object>> async_call_tool(
      std::string tool, boost::json::object arguments, std::chrono::milliseconds timeout,
      trace::Context trace);

  // Times the server was restarted after it died or was reset.
  std::int64_t restarts() const;

  struct Impl;

 private:
  explicit McpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Each remote tool as a weir Tool named "server/tool" (all of them when `only` is empty, else
// the named ones; "*" means all). The text the model sees: text content concatenated;
// structuredContent as JSON text when there is no text; images, audio and embedded resources
// stored in ctx.artifacts with a reference line ("[image image/png, 68 bytes: artifact <id>]");
// isError: true -> tool_failed "mcp server 'x': tool 'y' failed: <text>".
// Errors: not_found for a name the server does not offer (listing what it offers);
// invalid_argument for an inputSchema weir cannot check (naming server, tool and problem).
Result<std::vector<std::shared_ptr<Tool>>> make_mcp_tools(std::shared_ptr<McpClient> client,
                                                          std::span<const std::string> only = {});

// make_mcp_tools, then ToolRegistry::add for each. Nothing is added on error.
Status add_mcp_tools(ToolRegistry& registry, std::shared_ptr<McpClient> client,
                     std::span<const std::string> only = {});

}  // namespace weir::tools
