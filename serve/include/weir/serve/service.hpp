// weir serve: an OpenAI-compatible HTTP server for weir's engine, with the fences at the door.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
// GET /metrics (Prometheus text), POST /tokenize, POST /detokenize (docs/serve.md); with
// ServeConfig::workflows, the runs API (/v1/workflows, /v1/runs, /v1/threads: runs_api.hpp); with
// ServeConfig::mcp, MCP's Streamable HTTP transport at /mcp (POST a JSON-RPC message; the answer
// is application/json; DELETE ends a session; GET is 405: weir sends no server-initiated
// messages); with ServeConfig::console, the web console's page at /console.
// Each model file gets one engine (inference::EngineRegistry); a request's `model` picks it by
// name. Fences: a bounded admission queue per model (429 with Retry-After beyond it, at once),
// connection and body caps, context checks, per-request deadlines, cancellation when the client
// disconnects or stops reading, bearer-key auth, graceful drain on shutdown. Without a key, no
// page of another site may drive a route (Host/Origin rules, JSON bodies only, CORS refused
// unless allowed_origins names the page).
//
// Thread safety: a Service runs its own I/O thread (all HTTP work and routing) and its engines'
// threads; its public methods may be called from any thread. Asio and Beast stay in the .cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weir/cluster/run_queue.hpp"
#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir::tools {
class McpServer;
}

namespace weir::serve {

struct ModelSpec {
  std::string name;  // what requests put in "model" (default: the file's stem)
  std::filesystem::path path;
};

// "NAME=PATH" or "PATH" (name: the file's stem).
ModelSpec parse_model_spec(const std::string& arg);

struct ServeConfig {
  std::vector<ModelSpec> models;
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;           // 0: any free port
  std::optional<std::string> api_key;  // required as "Authorization: Bearer <key>" when set
  bool insecure = false;               // allow a non-loopback bind without a key
  // Browsers (docs/serve.md, "Browsers and other sites"): pages of these origins may call the
  // server (CORS), "scheme://host[:port]" or "*"; more Host names to accept (a reverse proxy's).
  std::vector<std::string> allowed_origins;
  std::vector<std::string> allowed_hosts;
  // Engine, per model.
  std::int32_t max_num_seqs = 32;  // requests running at once (admission permits)
  std::int64_t max_model_len = 0;  // 0: the model's context (capped at 4096)
  std::size_t kv_cache_bytes = 256u << 20;
  std::string kv_cache_type = "f32";         // or "f16", "q8_0": 2x, <=3.9x the tokens a byte (CPU)
  std::optional<std::string> chat_template;  // family name; default: detected from the GGUF
  bool ignore_eos = false;                   // random-weight models: generate to max_tokens
  // Fences.
  std::size_t max_queued_requests = 256;     // per model, waiting for a running slot
  std::int64_t max_queued_tokens = 1 << 18;  // prompt tokens of the queued requests, per model
  std::size_t max_connections = 512;
  std::size_t max_body_bytes = 4u << 20;
  // What the requests being read hold at once: a request's body is charged kRequestMemoryPerByte
  // times its size in the memory budget (run_state) while its handler runs (parsing and
  // tokenizing take up to that much); beyond the limit, 503 (413 for one request over it).
  std::size_t request_memory_bytes = std::size_t{512} << 20;
  std::int64_t default_max_tokens = 512;  // when a request sets no max_tokens
  int max_n = 8;
  std::chrono::milliseconds request_timeout{600'000};
  std::chrono::milliseconds grace{30'000};
  std::chrono::milliseconds write_timeout{30'000};  // a stream's reader that stops reading
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive connections between requests
  // MCP at /mcp (null: no such route). The server is drained by Service::shutdown.
  std::shared_ptr<tools::McpServer> mcp;
  std::size_t max_mcp_sessions = 1024;  // beyond: the least recently used session ends
  // The runs API at /v1/runs and /v1/threads (docs/serve.md "Runs"): the workflow files of this
  // folder, run in this process, or queued in PostgreSQL when runs_db is set (then `weir worker`
  // processes elsewhere share the work). nullopt: no such routes.
  std::optional<std::filesystem::path> workflows;
  // Graphs written in C++ served beside the folder's files (or alone: the runs API is on with
  // either): each is a workflow of its name, a LangGraph assistant (docs/langgraph-api.md "C++
  // graphs as assistants"). On PostgreSQL a `weir worker` process cannot run them: only this
  // server's own workers (max_runs) and C++ workers given the same graphs
  // (cluster::WorkerOptions::graphs).
  std::vector<cluster::CppGraph> graphs;
  std::string runs_db;                // "": an in-process queue (runs and threads kept in memory)
  std::size_t max_runs = 8;           // runs executing at once in this process
  std::size_t max_queued_runs = 256;  // runs waiting; beyond it POST /v1/runs answers 429
  std::size_t keep_runs = 1000;       // in-process: finished runs remembered (newest)
  std::size_t max_threads = 100'000;  // LangGraph API: threads whose metadata is kept
  // LangGraph API: the hosts a run's `webhook` may call ("host", "host:port", "[v6]:port", "*"
  // for any). Empty (the default): none, a run asking for one is refused (422). The server
  // makes the request from where it runs (SSRF): name only hosts meant to receive them.
  std::vector<std::string> webhook_hosts;
  // The web console at /console (docs/console.md): a page embedded in the binary that shows runs,
  // their graphs and the fences through the LangGraph API and /metrics. Off: /console is a 404
  // saying how to turn it on.
  bool console = false;
  // Tracing (docs/tracing.md): a server span per request, continuing the caller's trace from
  // its W3C traceparent header. Null: off.
  std::shared_ptr<trace::Tracer> tracer;
};

// A request body's bytes in memory while it is parsed and tokenized, at most (measured: the JSON
// value of an array of one-digit numbers is 25 times its text, a tokenizer's work 40-52 times).
inline constexpr std::size_t kRequestMemoryPerByte = 64;

// The configuration, one setting per line (printed at start-up).
std::string describe(const ServeConfig& c);
// Errors (invalid_argument) for settings that cannot work: no model (nor MCP, nor workflows), a
// database without workflows, a non-loopback host without an API key (unless insecure), zero
// limits, duplicate model names, an allowed origin or host that is not one.
Status validate(const ServeConfig& c);

class Service {
 public:
  // Validates, binds and starts serving; models load in the background (GET /health answers
  // 503 until they are loaded). Errors: invalid_argument (validate), io_error (bind).
  static Result<std::unique_ptr<Service>> start(ServeConfig config);
  // Shuts down at once (grace 0) if shutdown() was not called.
  ~Service();

  std::uint16_t port() const;
  // Blocks until every model is loaded (Ok) or one failed to load (its error).
  Status wait_ready();
  // Graceful shutdown: stops accepting, lets requests in flight finish within `grace`, cancels
  // the rest (their KV blocks are freed), closes connections. Blocks until done. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  struct Impl;

 private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `weir serve`: start, print the configuration and "listening on http://HOST:PORT" to stderr,
// serve until SIGTERM or SIGINT (drain within config.grace, exit 0); a second signal exits at
// once (exit code 1). Returns the process exit code.
int run(ServeConfig config);

}  // namespace weir::serve
