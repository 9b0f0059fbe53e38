// `weir mcp`: weir's tools and workflows served over MCP's stdio transport.
//
// stdin carries JSON-RPC 2.0 messages one per line (each at most --max-message-bytes; a longer
// line is answered with a parse error and skipped); stdout carries the answers, one per line;
// logs go to stderr. tools::McpServer answers them (mcp_tools.hpp builds its tools): at most 64
// calls at once (beyond: JSON-RPC error -32000), each under the registry's fences (timeout,
// concurrency, output cap: large outputs spill to the artifact store and the answer says so).
// A call the client cancels (notifications/cancelled) gets no answer. At EOF weir waits for
// the calls in flight, then exits 0.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "mcp_tools.hpp"
#include "trace_flags.hpp"
#include "weir/runtime/log.hpp"
#include "weir/tools/jsonrpc.hpp"

namespace weir::cli {

namespace asio = boost::asio;
namespace rpc = tools::jsonrpc;

int cmd_mcp(Args args) {
  Flags f("mcp",
          {"--tools", "--root", "--workflows", "--max-message-bytes", "--otlp-endpoint", "--trace"},
          {"--trace-content"});
  if (!f.parse(args)) return kExitInvalidInput;
  std::shared_ptr<trace::Tracer> tracer;  // each tools/call a span (docs/tracing.md)
  if (!open_tracer(f, tracer)) return kExitInvalidInput;
  std::size_t max_line = 4u << 20;
  if (f.has("--max-message-bytes") &&
      !f.integer("--max-message-bytes", max_line, std::size_t{1024}, std::size_t{1} << 30))
    return kExitInvalidInput;
  McpToolsConfig tc;
  if (auto v = f.get("--tools")) tc.tools = *v;
  if (auto v = f.get("--root")) tc.root = *v;
  if (auto v = f.get("--workflows")) tc.workflows = *v;
  tc.tracer = tracer.get();
  auto built = McpTools::build("mcp", tc);
  if (!built) {
    std::fprintf(stderr, "%s\n", built.error().message.c_str());
    return built.error().is(Errc::invalid_argument) ? kExitInvalidInput : kExitRunFailed;
  }
  auto& mcp = **built;
  auto server = mcp.server();
  weir::log(LogLevel::info,
            "weir mcp: serving " + std::to_string(server->tool_count()) + " tools on stdio");
  std::mutex out_mu;
  auto write = [&](const std::string& line) {
    std::lock_guard lock(out_mu);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  asio::thread_pool callers(1);  // parses and answers; the tools run on the server's pool
  auto handle = [&](std::string line) {
    asio::co_spawn(
        callers,
        [&, line = std::move(line)]() mutable -> asio::awaitable<void> {
          auto answer = co_await server->handle(std::move(line));
          if (answer) write(*answer);
        },
        [](std::exception_ptr e) {
          if (e) weir::log(LogLevel::error, "weir mcp: a message ended with an exception");
        });
  };
  // Bounded line reading: a line over max_line is refused and skipped up to its newline.
  std::string line;
  bool skipping = false;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        if (!skipping && !line.empty()) handle(std::move(line));
        line.clear();
        skipping = false;
      } else if (!skipping) {
        line += buf[i];
        if (line.size() > max_line) {
          write(rpc::error_response(
              nullptr, rpc::kParseError,
              "message over " + std::to_string(max_line) + " bytes (--max-message-bytes)"));
          line.clear();
          line.shrink_to_fit();
          skipping = true;
        }
      }
    }
  }
  if (!skipping && !line.empty()) handle(std::move(line));
  // Every line read is answered first: joining the callers waits for their handle()s (a call
  // not yet started when stdin ended was refused as "shutting down" when drain() came first).
  callers.join();
  server->drain();
  server.reset();
  built->reset();  // the tools' spans are over before the tracer flushes
  close_tracer(tracer);
  return kExitOk;
}

}  // namespace weir::cli
