// weir serve: the OpenAI-compatible server (serve/). Flags map one to one onto ServeConfig.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "mcp_tools.hpp"
#include "trace_flags.hpp"
#include "weir/inference/engine.hpp"
#include "weir/serve/service.hpp"

namespace weir::cli {

int cmd_serve(Args args) {
  serve::ServeConfig c;
  // --model may repeat: collected here; every other flag goes through Flags (typed numbers).
  std::vector<std::string_view> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--model" && i + 1 < args.size()) {
      c.models.push_back(serve::parse_model_spec(std::string(args[++i])));
      continue;
    }
    rest.push_back(args[i]);
  }
  Flags f("serve",
          {"--model",
           "--host",
           "--port",
           "--api-key-env",
           "--max-num-seqs",
           "--max-model-len",
           "--kv-cache-mb",
           "--kv-cache-type",
           "--chat-template",
           "--max-queued-requests",
           "--max-queued-tokens",
           "--max-connections",
           "--max-body-bytes",
           "--request-memory-mb",
           "--allowed-origins",
           "--allowed-hosts",
           "--default-max-tokens",
           "--max-n",
           "--request-timeout",
           "--grace",
           "--write-timeout",
           "--idle-timeout",
           "--mcp-tools",
           "--mcp-workflows",
           "--mcp-root",
           "--workflows",
           "--db",
           "--max-runs",
           "--max-queued-runs",
           "--keep-runs",
           "--max-threads",
           "--webhook-hosts",
           "--otlp-endpoint",
           "--trace"},
          {"--insecure", "--ignore-eos", "--trace-content", "--console"});
  if (!f.parse(rest)) return kExitInvalidInput;
  if (!f.positional().empty())
    return f.fail("unexpected argument '" + f.positional()[0] + "'"), kExitInvalidInput;
  c.insecure = f.has("--insecure");
  c.ignore_eos = f.has("--ignore-eos");
  c.console = f.has("--console");
  // Seconds, given as numbers (0.5 is half a second).
  auto seconds = [&](const char* flag, double lo, std::chrono::milliseconds& dst) {
    double s = static_cast<double>(dst.count()) / 1000.0;
    if (!f.real(flag, s, lo, 1e7)) return false;
    dst = std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0));
    return true;
  };
  std::int64_t kv_mb = static_cast<std::int64_t>(c.kv_cache_bytes >> 20);
  std::int64_t request_mb = static_cast<std::int64_t>(c.request_memory_bytes >> 20);
  std::uint16_t port = c.port;
  if (!f.integer("--port", port, std::uint16_t{0}, std::uint16_t{65535}) ||
      !f.integer("--max-num-seqs", c.max_num_seqs, 1, 4096) ||
      !f.integer("--max-model-len", c.max_model_len, std::int64_t{0}, std::int64_t{1} << 24) ||
      !f.integer("--kv-cache-mb", kv_mb, std::int64_t{1}, std::int64_t{1} << 20) ||
      !f.integer("--max-queued-requests", c.max_queued_requests, std::size_t{0},
                 std::size_t{10'000'000}) ||
      !f.integer("--max-queued-tokens", c.max_queued_tokens, std::int64_t{0},
                 std::int64_t{1'000'000'000'000}) ||
      !f.integer("--max-connections", c.max_connections, std::size_t{1}, std::size_t{1'000'000}) ||
      !f.integer("--max-body-bytes", c.max_body_bytes, std::size_t{64},
                 std::size_t{10'000'000'000}) ||
      !f.integer("--request-memory-mb", request_mb, std::int64_t{1}, std::int64_t{1} << 20) ||
      !f.integer("--default-max-tokens", c.default_max_tokens, std::int64_t{1},
                 std::int64_t{10'000'000}) ||
      !f.integer("--max-n", c.max_n, 1, 128) ||
      !seconds("--request-timeout", 0.001, c.request_timeout) || !seconds("--grace", 0, c.grace) ||
      !seconds("--write-timeout", 0.001, c.write_timeout) ||
      !seconds("--idle-timeout", 0.001, c.idle_timeout) ||
      !f.integer("--max-runs", c.max_runs, std::size_t{1}, std::size_t{100'000}) ||
      !f.integer("--max-queued-runs", c.max_queued_runs, std::size_t{0}, std::size_t{10'000'000}) ||
      !f.integer("--keep-runs", c.keep_runs, std::size_t{1}, std::size_t{10'000'000}) ||
      !f.integer("--max-threads", c.max_threads, std::size_t{1}, std::size_t{10'000'000}))
    return kExitInvalidInput;
  if (auto v = f.get("--kv-cache-type")) {
    auto t = inference::parse_kv_type(*v);
    if (!t) return f.fail("--kv-cache-type: " + t.error().message), kExitInvalidInput;
    c.kv_cache_type = inference::kv_type_name(*t);
  }
  if (auto v = f.get("--workflows")) c.workflows = *v;
  if (auto v = f.get("--db")) c.runs_db = *v;
  c.kv_cache_bytes = static_cast<std::size_t>(kv_mb) << 20;
  c.request_memory_bytes = static_cast<std::size_t>(request_mb) << 20;
  // Comma-separated lists: --allowed-origins http://localhost:3000,https://app.example
  auto list = [](const std::string& v) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at <= v.size()) {
      const auto comma = std::min(v.find(',', at), v.size());
      if (comma > at) out.push_back(v.substr(at, comma - at));
      at = comma + 1;
    }
    return out;
  };
  if (auto v = f.get("--allowed-origins")) c.allowed_origins = list(*v);
  if (auto v = f.get("--allowed-hosts")) c.allowed_hosts = list(*v);
  if (auto v = f.get("--webhook-hosts")) c.webhook_hosts = list(*v);
  c.port = port;
  if (auto v = f.get("--host")) c.host = *v;
  if (auto v = f.get("--chat-template")) c.chat_template = *v;
  if (auto v = f.get("--api-key-env")) {
    const char* key = std::getenv(v->c_str());
    if (!key || !*key) {
      std::fprintf(stderr,
                   "weir serve: --api-key-env %s: the environment variable is unset or empty\n",
                   v->c_str());
      return kExitInvalidInput;
    }
    c.api_key = key;
  }
  if (f.has("--otlp-endpoint") || f.has("--trace") || std::getenv("OTEL_EXPORTER_OTLP_ENDPOINT") ||
      std::getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
    // The tracer's export thread must inherit the signal mask serve::run sets (see above).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    if (!open_tracer(f, c.tracer)) return kExitInvalidInput;
  } else if (f.has("--trace-content")) {
    return f.fail(
               "--trace-content needs --trace FILE, --otlp-endpoint URL or "
               "OTEL_EXPORTER_OTLP_ENDPOINT"),
           kExitInvalidInput;
  }
  // MCP at /mcp: built-in tools and workflows, as `weir mcp` serves them over stdio.
  std::unique_ptr<McpTools> mcp;
  if (f.has("--mcp-tools") || f.has("--mcp-workflows")) {
    // serve::run takes SIGTERM and SIGINT on one thread; the MCP server's threads start here,
    // so they must inherit the mask run() sets (or a signal could kill the process).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    McpToolsConfig tc;
    tc.tools = f.get("--mcp-tools").value_or(f.has("--mcp-workflows") ? "" : "calculator");
    if (auto v = f.get("--mcp-root")) tc.root = *v;
    if (auto v = f.get("--mcp-workflows")) tc.workflows = *v;
    tc.tracer = c.tracer.get();
    auto built = McpTools::build("serve", tc);
    if (!built) {
      std::fprintf(stderr, "%s\n", built.error().message.c_str());
      return built.error().is(Errc::invalid_argument) ? kExitInvalidInput : kExitRunFailed;
    }
    mcp = std::move(*built);
    c.mcp = mcp->server();
  } else if (f.has("--mcp-root")) {
    return f.fail("--mcp-root needs --mcp-tools files"), kExitInvalidInput;
  }
  if (auto st = serve::validate(c); !st) {
    std::fprintf(stderr, "weir serve: %s (see 'weir serve --help')\n", st.error().message.c_str());
    return kExitInvalidInput;
  }
  // The server holds the tracer while it serves; the flush at exit is this command's, with the
  // bound every command keeps (close_tracer: 3 s, and what was dropped is said).
  std::shared_ptr<trace::Tracer> tracer = c.tracer;
  const int code = serve::run(std::move(c));
  mcp.reset();  // its calls are over and its spans ended before the tracer flushes
  close_tracer(tracer);
  return code;
}

}  // namespace weir::cli
