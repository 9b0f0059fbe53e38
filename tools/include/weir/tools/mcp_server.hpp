// McpServer: the server side of MCP, independent of the transport. `weir mcp` feeds it lines
// from stdin; `weir serve` feeds it the bodies POSTed to /mcp (Streamable HTTP).
//
// handle() takes one JSON-RPC 2.0 message and completes with the answer to send, or nothing
// when the message needs none (a notification, a response, a call its client cancelled).
// Methods: initialize (version negotiation: the client's version when weir speaks it, else
// kMcpProtocolVersion), ping, tools/list (every tool of the registry with its inputSchema, in
// one page), tools/call (the registry's fences apply: argument validation against the schema,
// timeout, concurrency, output cap with the artifact spill), notifications/cancelled. Anything
// else is JSON-RPC error -32601. At most max_calls_in_flight calls run at once; one more is
// answered at once with error -32000 saying so. A tool's failure is a result with isError:
// true and the error's text, as the specification asks, not a JSON-RPC error.
//
// Request ids are scoped by `session` (stdio: one session, ""; HTTP: the Mcp-Session-Id), so
// two HTTP clients that both number their requests from 1 cancel only their own.
//
// Threads: calls run on the server's own thread pool (`threads`), never on the caller's
// executor, so a slow tool cannot stall an HTTP server's I/O thread. handle() may be called
// from any thread and any executor; it completes on the caller's executor.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>

namespace weir {
class ArtifactStore;
namespace trace {
class Tracer;
struct SpanContext;
}  // namespace trace
}  // namespace weir

namespace weir::tools {

class ToolRegistry;

struct McpServerOptions {
  std::string name = "weir";  // serverInfo.name
  std::string version;        // serverInfo.version; empty: weir's version
  std::size_t max_calls_in_flight = 64;
  int threads = 2;
  ArtifactStore* artifacts = nullptr;  // where oversized tool outputs spill (optional)
  // Tracing (optional; must outlive the server): each tools/call is a server span
  // "tools/call <tool>" (MCP semantic conventions: mcp.method.name, gen_ai.tool.name,
  // jsonrpc.request.id, mcp.session.id), with the registry's execute_tool span under it. Its
  // parent: the transport's span when handle() is given one (weir serve's HTTP request span),
  // else the client's params._meta.traceparent, else none (a new trace).
  trace::Tracer* tracer = nullptr;
};

class McpServer {
 public:
  // REQUIRES: `registry` (and options.artifacts) outlive the server.
  McpServer(ToolRegistry& registry, McpServerOptions options);
  // Waits for the calls in flight (see drain()).
  ~McpServer();
  McpServer(const McpServer&) = delete;
  McpServer& operator=(const McpServer&) = delete;

  boost::asio::awaitable<std::optional<std::string>> handle(std::string message,
                                                            std::string session,
                                                            const trace::SpanContext* parent);
  boost::asio::awaitable<std::optional<std::string>> handle(std::string message,
                                                            std::string session) {
    return handle(std::move(message), std::move(session), nullptr);
  }
  // Without a session. (An overload, not a default argument: a coroutine's class-type default is
  // built inside the caller's co_await; docs/architecture.md, "the co_await rule".)
  boost::asio::awaitable<std::optional<std::string>> handle(std::string message) {
    return handle(std::move(message), std::string(), nullptr);
  }
  // Blocks until no call is in flight (each tool's timeout bounds the wait) and the server's
  // threads have stopped; calls that arrive meanwhile or later are refused (error -32000,
  // "shutting down"). Once it returns, the server touches no caller's executor again: the
  // answers of the last calls are queued on their callers' executors. Idempotent.
  // REQUIRES: not called on an executor that awaits handle().
  void drain();
  std::size_t calls_in_flight() const;
  std::size_t tool_count() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::tools
