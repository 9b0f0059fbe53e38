#include "weir/serve/service.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "constraint.hpp"
#include "runs.hpp"
#include "runs_api.hpp"
#include "stop_filter.hpp"
#include "weir/agents/local_model.hpp"
#include "weir/agents/tool_call_parser.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/http/openai.hpp"
#include "weir/http/server.hpp"
#include "weir/http/sse.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/metrics.hpp"
#include "weir/tools/jsonrpc.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/mcp_server.hpp"

namespace weir::serve {

namespace asio = boost::asio;
namespace json = boost::json;
namespace inf = weir::inference;
namespace oa = weir::http::openai;
using asio::awaitable;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

// --- configuration --------------------------------------------------------------------------

ModelSpec parse_model_spec(const std::string& arg) {
  auto eq = arg.find('=');
  // NAME=PATH, unless the '=' is part of a path (a '/' before it).
  if (eq != std::string::npos && eq > 0 && arg.substr(0, eq).find('/') == std::string::npos)
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  return {std::filesystem::path(arg).stem().string(), arg};
}

namespace {

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string ms_text(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(ms.count()) + "ms";
}

}  // namespace

std::string describe(const ServeConfig& c) {
  std::string s = "weir serve configuration:\n";
  auto line = [&](const char* k, const std::string& v) {
    s += "  " + std::string(k) + " = " + v + "\n";
  };
  for (const auto& m : c.models) line("--model", m.name + "=" + m.path.string());
  line("--host", c.host);
  line("--port", std::to_string(c.port));
  line("--api-key-env", c.api_key ? "set (Bearer key required)" : "unset (no auth)");
  line("--insecure", c.insecure ? "yes" : "no");
  line("--max-num-seqs", std::to_string(c.max_num_seqs));
  line("--max-model-len", c.max_model_len ? std::to_string(c.max_model_len) : "model's (<= 4096)");
  line("--kv-cache-mb", std::to_string(c.kv_cache_bytes >> 20));
  line("--kv-cache-type", c.kv_cache_type);
  line("--chat-template", c.chat_template.value_or("detected"));
  line("--ignore-eos", c.ignore_eos ? "yes" : "no");
  line("--max-queued-requests", std::to_string(c.max_queued_requests));
  line("--max-queued-tokens", std::to_string(c.max_queued_tokens));
  line("--max-connections", std::to_string(c.max_connections));
  line("--max-body-bytes", std::to_string(c.max_body_bytes));
  line("--default-max-tokens", std::to_string(c.default_max_tokens));
  line("--max-n", std::to_string(c.max_n));
  line("--request-timeout", ms_text(c.request_timeout));
  line("--grace", ms_text(c.grace));
  line("--write-timeout", ms_text(c.write_timeout));
  line("--idle-timeout", ms_text(c.idle_timeout));
  line("/mcp", c.mcp ? std::to_string(c.mcp->tool_count()) + " tools (--mcp-tools, --mcp-workflows)"
                     : "off");
  line("/v1/runs", !c.workflows
                       ? std::string("off")
                       : "workflows in " + c.workflows->string() + ", " +
                             (c.runs_db.empty() ? std::string("in-process queue")
                                                : "queue in " + graph::redact_store(c.runs_db)) +
                             ", --max-runs " + std::to_string(c.max_runs) + ", --max-queued-runs " +
                             std::to_string(c.max_queued_runs));
  return s;
}

Status validate(const ServeConfig& c) {
  auto bad = [](std::string m) { return Status(Error(Errc::invalid_argument, std::move(m))); };
  if (c.models.empty() && !c.mcp && !c.workflows)
    return bad("no model given: --model PATH (or NAME=PATH), once per model");
  if (!c.runs_db.empty() && !c.workflows)
    return bad("--db needs --workflows DIR: the database holds the runs of those workflows");
  if (c.workflows && c.max_runs < 1) return bad("--max-runs must be at least 1");
  std::set<std::string> names;
  for (const auto& m : c.models) {
    if (m.name.empty()) return bad("a model has an empty name: use --model NAME=PATH");
    if (!names.insert(m.name).second)
      return bad("two models are named '" + m.name + "': name them with --model NAME=PATH");
  }
  if (!is_loopback(c.host) && !c.api_key && !c.insecure)
    return bad("refusing to listen on " + c.host +
               " without an API key: anyone who can reach it could use the models. Set "
               "--api-key-env VAR (Bearer key), or pass --insecure to do it anyway");
  if (c.api_key && c.api_key->empty()) return bad("the API key is empty");
  if (c.max_num_seqs < 1) return bad("--max-num-seqs must be at least 1");
  if (c.max_connections < 1) return bad("--max-connections must be at least 1");
  if (c.max_body_bytes < 64) return bad("--max-body-bytes must be at least 64");
  if (c.max_queued_tokens < 0) return bad("--max-queued-tokens must not be negative");
  if (c.default_max_tokens < 1) return bad("--default-max-tokens must be at least 1");
  if (c.max_n < 1) return bad("--max-n must be at least 1");
  if (c.request_timeout.count() <= 0) return bad("--request-timeout must be positive");
  return {};
}

// --- state ----------------------------------------------------------------------------------

namespace {

struct ModelEntry {
  ModelSpec spec;
  std::shared_ptr<agents::LocalChatModel> chat;  // engine + tokenizer + chat template
  std::unique_ptr<Limiter> limiter;              // running permits + bounded queue
  std::int64_t queued_tokens = 0;                // io thread
  std::int64_t max_model_len = 0;
  Counter* rejected_queue = nullptr;
  Counter* rejected_tokens = nullptr;
  Counter* prompt_tokens = nullptr;
  Counter* generation_tokens = nullptr;
  Counter* cached_tokens = nullptr;
  Histogram* ttft = nullptr;
  Histogram* itl = nullptr;
  Histogram* duration = nullptr;

  inf::Engine& engine() const { return chat->engine(); }
  const inf::Tokenizer& tok() const { return chat->tokenizer(); }
};

// One choice of a generation: the engine request and what it has sent so far.
struct ChoiceState {
  inf::RequestId id = 0;
  std::deque<std::int32_t> tokens;
  std::deque<inf::SampledLogprobs> logprobs;
  std::optional<Result<inf::GenerateResult>> done;
  std::optional<Clock::time_point> last_token;
  bool consumed = false;  // the handler has seen `done`
};

// The n engine requests of one HTTP request. Engine callbacks post into it on the io thread;
// the handler waits on `wake`.
struct Batch {
  explicit Batch(asio::io_context& io) : io(io), wake(io) {}
  asio::io_context& io;
  asio::steady_timer wake;
  inf::Engine* engine = nullptr;
  std::vector<ChoiceState> choices;
  Clock::time_point start;
  ModelEntry* model = nullptr;
  bool cancelled = false;
  bool timed_out = false;

  bool all_done() const {
    for (const auto& c : choices)
      if (!c.done) return false;
    return true;
  }
  bool all_consumed() const {
    for (const auto& c : choices)
      if (!c.consumed) return false;
    return true;
  }
  bool has_events() const {
    for (const auto& c : choices)
      if (!c.tokens.empty() || (c.done && !c.consumed)) return true;
    return false;
  }
  void cancel() {
    if (cancelled) return;
    cancelled = true;
    for (const auto& c : choices)
      if (!c.done) engine->cancel(c.id);
    wake.cancel();
  }
};

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string finish_name(inf::FinishReason r) {
  switch (r) {
    case inf::FinishReason::length:
      return "length";
    case inf::FinishReason::cancelled:
      return "cancelled";
    case inf::FinishReason::error:
      return "error";
    default:
      return "stop";
  }
}

http::Response json_response(int status, std::string body) {
  return {status, "application/json", {}, std::move(body)};
}
http::Response error_response(const oa::ApiError& e) {
  http::Response r = json_response(e.status, e.body());
  if (e.status == 429 || e.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Time depends only on the length of `b` (the secret's length is not hidden; its bytes are).
  unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

std::string random_id(const char* prefix) {
  static std::atomic<std::uint64_t> n{0};
  static const std::uint64_t base = static_cast<std::uint64_t>(now_unix()) * 2654435761u;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix,
                static_cast<unsigned long long>(base ^ (n.fetch_add(1) * 0x9E3779B97F4A7C15ull)));
  return buf;
}

}  // namespace

struct Service::Impl {
  explicit Impl(ServeConfig c) : cfg(std::move(c)) {}
  ~Impl();

  ServeConfig cfg;
  asio::io_context io{1};
  std::unique_ptr<http::Server> server;
  std::thread io_thread;
  std::thread loader;
  MemoryBudget budget;
  Registry metrics;                // serve's own series (engines report to Registry::global())
  Counter* http_requests[6] = {};  // by status class: 2xx, 4xx (not 429), 429, 5xx, 401, 413

  // Set by the loader, then read-only.
  std::vector<std::unique_ptr<ModelEntry>> models;
  std::atomic<bool> ready{false};
  std::mutex load_mu;
  std::condition_variable load_cv;
  bool load_finished = false;  // GUARDED_BY(load_mu)
  Status load_status;          // GUARDED_BY(load_mu)

  // io thread only.
  std::set<Batch*> active;
  std::list<std::string> mcp_sessions;  // most recently used first
  std::map<std::string, std::list<std::string>::iterator> mcp_session_index;
  bool draining = false;
  bool shut = false;
  // The runs API (cfg.workflows); its backend's calls run on `blocking`.
  std::unique_ptr<Runs> runs;
  asio::thread_pool blocking{2};
  RunsApi runs_api;
  std::mutex shut_mu;

  void load_models();
  ModelEntry* find_model(const std::string& name, std::optional<oa::ApiError>& err);
  awaitable<void> handle(http::Exchange& ex);
  awaitable<void> route(http::Exchange& ex, http::Response& out, bool& streamed);
  awaitable<void> chat(http::Exchange& ex, http::Response& out, bool& streamed);
  awaitable<void> completions(http::Exchange& ex, http::Response& out, bool& streamed);
  awaitable<void> mcp(http::Exchange& ex, http::Response& out);
  http::Response models_list();
  http::Response health();
  http::Response metrics_text();
  http::Response tokenize(const http::Request& rq);
  http::Response detokenize(const http::Request& rq);

  // Admission + submission. Returns the batch, or the error to send.
  awaitable<std::variant<std::shared_ptr<Batch>, oa::ApiError>> admit_and_submit(
      http::Exchange& ex, ModelEntry& m, inf::GenerateRequest rq, int n,
      std::vector<Limiter::Permit>& permits);
  awaitable<void> wait_events(Batch& b, Clock::time_point deadline);
  std::optional<oa::ApiError> check_context(const ModelEntry& m, std::size_t prompt_len,
                                            std::optional<std::int64_t> max_tokens,
                                            std::int32_t& out_max);
  void record(const Batch& b, const ChoiceState& c, const inf::GenerateResult& r);
  awaitable<void> drain(std::chrono::milliseconds grace, std::shared_ptr<std::promise<void>> done);
  std::string token_text(const ModelEntry& m, std::int32_t id) const {
    return agents::to_valid_utf8(m.tok().decode(std::span<const std::int32_t>(&id, 1), false));
  }
};

Service::Impl::~Impl() {
  if (loader.joinable()) loader.join();
  for (auto& m : models) {
    if (m && m->chat) {
      auto path = m->spec.path;
      m->chat.reset();
      inf::EngineRegistry::global().release(path);
    }
  }
  models.clear();
}

void Service::Impl::load_models() {
  Status st;
  std::vector<std::unique_ptr<ModelEntry>> loaded;
  for (const auto& spec : cfg.models) {
    agents::LocalModelOptions opt;
    opt.chat_template = cfg.chat_template;
    opt.max_num_seqs = cfg.max_num_seqs;
    opt.max_model_len = cfg.max_model_len;
    opt.kv_cache_bytes = cfg.kv_cache_bytes;
    opt.kv_cache_type = cfg.kv_cache_type;
    opt.budget = &budget;
    opt.ignore_eog = cfg.ignore_eos;
    opt.metrics_name = spec.name;
    auto chat = agents::LocalChatModel::open(spec.path, opt);
    if (!chat) {
      st = Error(chat.error().code,
                 "model '" + spec.name + "' (" + spec.path.string() + "): " + chat.error().message);
      break;
    }
    auto m = std::make_unique<ModelEntry>();
    m->spec = spec;
    m->chat = std::move(*chat);
    m->max_model_len = m->engine().config().max_model_len;
    m->limiter = std::make_unique<Limiter>(
        "model '" + spec.name + "' admission (--max-num-seqs=" + std::to_string(cfg.max_num_seqs) +
            ", --max-queued-requests=" + std::to_string(cfg.max_queued_requests) + ")",
        static_cast<std::size_t>(cfg.max_num_seqs), cfg.max_queued_requests);
    Labels l{{"model", spec.name}};
    Limiter* lim = m->limiter.get();
    metrics.gauge_callback("weir_serve_requests_running", "requests generating", l,
                           [lim] { return static_cast<double>(lim->in_use()); });
    metrics.gauge_callback("weir_serve_requests_waiting", "requests queued for admission", l,
                           [lim] { return static_cast<double>(lim->waiting()); });
    ModelEntry* mp = m.get();
    metrics.gauge_callback("weir_serve_queued_prompt_tokens", "prompt tokens of queued requests", l,
                           [mp] { return static_cast<double>(mp->queued_tokens); });
    auto lr = l;
    lr.emplace_back("reason", "queue_full");
    m->rejected_queue =
        &metrics.counter("weir_serve_requests_rejected_total", "requests refused with 429", lr);
    lr.back().second = "queued_tokens";
    m->rejected_tokens =
        &metrics.counter("weir_serve_requests_rejected_total", "requests refused with 429", lr);
    m->prompt_tokens = &metrics.counter("weir_serve_prompt_tokens_total", "prompt tokens in", l);
    m->generation_tokens =
        &metrics.counter("weir_serve_generation_tokens_total", "tokens generated out", l);
    m->cached_tokens = &metrics.counter("weir_serve_cached_prompt_tokens_total",
                                        "prompt tokens served from the prefix cache", l);
    m->ttft = &metrics.histogram("weir_serve_time_to_first_token_seconds",
                                 "request arrival to first token", latency_buckets_seconds(), l);
    m->itl = &metrics.histogram("weir_serve_inter_token_latency_seconds",
                                "time between consecutive tokens of a choice",
                                latency_buckets_seconds(), l);
    m->duration = &metrics.histogram("weir_serve_request_duration_seconds",
                                     "request arrival to last token", latency_buckets_seconds(), l);
    loaded.push_back(std::move(m));
  }
  // Publish on the io thread, which is the only reader of `models` besides the destructor.
  std::promise<void> published;
  asio::post(io, [&] {
    if (st) {
      models = std::move(loaded);
      ready = true;
    }
    published.set_value();
  });
  published.get_future().wait();
  if (!st) {
    for (auto& m : loaded) {
      auto path = m->spec.path;
      m->chat.reset();
      inf::EngineRegistry::global().release(path);
    }
  }
  std::lock_guard lock(load_mu);
  load_finished = true;
  load_status = st;
  load_cv.notify_all();
}

ModelEntry* Service::Impl::find_model(const std::string& name, std::optional<oa::ApiError>& err) {
  if (name.empty() && models.size() == 1) return models.front().get();
  for (auto& m : models)
    if (m->spec.name == name) return m.get();
  std::string names;
  for (auto& m : models) names += (names.empty() ? "" : ", ") + m->spec.name;
  err = oa::ApiError{404,
                     name.empty()
                         ? "'model' is required: this server has " + names
                         : "the model '" + name + "' does not exist; this server has " + names,
                     "model", "model_not_found"};
  return nullptr;
}

// --- routes ---------------------------------------------------------------------------------

awaitable<void> Service::Impl::handle(http::Exchange& ex) {
  http::Response out;
  bool streamed = false;
  const auto& rq = ex.request();
  if (cfg.api_key) {
    auto auth = rq.header("authorization").value_or("");
    constexpr std::string_view kBearer = "Bearer ";
    bool ok = auth.size() > kBearer.size() && auth.substr(0, kBearer.size()) == kBearer &&
              constant_time_equal(auth.substr(kBearer.size()), *cfg.api_key);
    if (!ok) {
      out = error_response({401,
                            auth.empty() ? "missing API key: send the header 'Authorization: "
                                           "Bearer <key>' (the key in the server's --api-key-env)"
                                         : "invalid API key: send 'Authorization: Bearer <key>' "
                                           "with the key in the server's --api-key-env",
                            "", "invalid_api_key"});
      out.headers.emplace_back("WWW-Authenticate", "Bearer");
      http_requests[4]->inc();
      (void)co_await ex.async_respond(std::move(out));
      co_return;
    }
  }
  co_await route(ex, out, streamed);
  int idx = out.status < 400    ? 0
            : out.status == 429 ? 2
            : out.status >= 500 ? 3
            : out.status == 413 ? 5
                                : 1;
  http_requests[idx]->inc();
  if (!streamed) (void)co_await ex.async_respond(std::move(out));
}

awaitable<void> Service::Impl::route(http::Exchange& ex, http::Response& out, bool& streamed) {
  const auto& rq = ex.request();
  const std::string& p = rq.path;
  auto method_is = [&](const char* m) {
    if (rq.method == m) return true;
    out = error_response({405, rq.method + " is not allowed on " + p + "; use " + m, "", ""});
    return false;
  };
  if (p == "/health") {
    if (method_is("GET")) out = health();
  } else if (p == "/metrics") {
    if (method_is("GET")) out = metrics_text();
  } else if (p == "/mcp" && cfg.mcp && !draining) {
    co_await mcp(ex, out);
  } else if (runs && !draining && is_runs_path(p)) {
    co_await route_runs(runs_api, ex, out, streamed);
  } else if (!ready) {
    out = error_response({503,
                          "the models are still loading; retry shortly (GET /health says "
                          "when they are ready)",
                          "", "model_loading"});
  } else if (draining) {
    out = error_response({503, "the server is shutting down", "", "shutting_down"});
  } else if (p == "/v1/models") {
    if (method_is("GET")) out = models_list();
  } else if (p == "/v1/chat/completions") {
    if (method_is("POST")) co_await chat(ex, out, streamed);
  } else if (p == "/v1/completions") {
    if (method_is("POST")) co_await completions(ex, out, streamed);
  } else if (p == "/tokenize") {
    if (method_is("POST")) out = tokenize(rq);
  } else if (p == "/detokenize") {
    if (method_is("POST")) out = detokenize(rq);
  } else {
    out = error_response(
        {404,
         "no route " + rq.method + " " + p +
             " (routes: POST /v1/chat/completions, POST /v1/completions, "
             "GET /v1/models, GET /health, GET /metrics, POST /tokenize, "
             "POST /detokenize" +
             std::string(cfg.mcp ? ", POST /mcp" : "") +
             std::string(runs ? ", the runs API under /v1/runs and /v1/threads" : "") + ")",
         "", "not_found"});
  }
}

// --- MCP (Streamable HTTP) -------------------------------------------------------------------

namespace {

// The host of an Origin header ("http://localhost:3000" -> "localhost", "http://[::1]" -> "::1").
std::string origin_host(std::string_view origin) {
  auto scheme = origin.find("://");
  if (scheme == std::string_view::npos) return {};
  std::string_view rest = origin.substr(scheme + 3);
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    return close == std::string_view::npos ? std::string() : std::string(rest.substr(1, close - 1));
  }
  return std::string(rest.substr(0, rest.find_first_of(":/")));
}

// 128 random bits: a session id is a capability, so it must not be guessable.
std::string session_id() {
  static thread_local std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

http::Response mcp_error(int status, std::int64_t code, const std::string& message) {
  return json_response(status, tools::jsonrpc::error_response(nullptr, code, message));
}

}  // namespace

awaitable<void> Service::Impl::mcp(http::Exchange& ex, http::Response& out) {
  namespace rpc = tools::jsonrpc;
  const auto& rq = ex.request();
  // A web page the user visits must not drive a loopback server's tools (DNS rebinding): a
  // browser's request carries its Origin, which must then be this machine too.
  if (auto origin = rq.header("origin");
      origin && is_loopback(cfg.host) && !is_loopback(origin_host(*origin))) {
    out = mcp_error(403, rpc::kInvalidRequest,
                    "Origin '" + std::string(*origin) +
                        "' is not allowed: this server listens on a loopback address and takes "
                        "MCP requests only from this machine");
    co_return;
  }
  if (rq.method == "GET") {
    out = mcp_error(405, rpc::kInvalidRequest,
                    "GET /mcp: weir sends no server-initiated messages; POST JSON-RPC messages");
    out.headers.emplace_back("Allow", "POST, DELETE");
    co_return;
  }
  const std::string session(rq.header("mcp-session-id").value_or(""));
  if (!session.empty() && !mcp_session_index.contains(session)) {
    out =
        mcp_error(404, rpc::kInvalidRequest,
                  "unknown MCP session '" + session + "' (ended, or expired after " +
                      std::to_string(cfg.max_mcp_sessions) + " newer sessions): initialize again");
    co_return;
  }
  if (rq.method == "DELETE") {
    if (session.empty()) {
      out = mcp_error(400, rpc::kInvalidRequest, "DELETE /mcp needs the Mcp-Session-Id header");
    } else {
      mcp_sessions.erase(mcp_session_index.at(session));
      mcp_session_index.erase(session);
      out = {200, "application/json", {}, ""};
    }
    co_return;
  }
  if (rq.method != "POST") {
    out = mcp_error(405, rpc::kInvalidRequest, rq.method + " is not allowed on /mcp; use POST");
    out.headers.emplace_back("Allow", "POST, DELETE");
    co_return;
  }
  if (auto v = rq.header("mcp-protocol-version")) {
    bool known = false;
    for (auto s : tools::kMcpSupportedVersions) known = known || *v == s;
    if (!known) {
      std::string list;
      for (auto s : tools::kMcpSupportedVersions)
        list += (list.empty() ? "" : ", ") + std::string(s);
      out = mcp_error(
          400, rpc::kInvalidRequest,
          "MCP-Protocol-Version '" + std::string(*v) + "' is not supported (" + list + ")");
      co_return;
    }
  }
  auto msg = rpc::parse(rq.body);
  if (!msg) {
    out = mcp_error(400, rpc::kParseError, msg.error().message);
    co_return;
  }
  std::string sid = session;
  if (msg->kind == rpc::Kind::request && msg->method == "initialize") {
    sid = session_id();
    if (mcp_sessions.size() >= cfg.max_mcp_sessions && !mcp_sessions.empty()) {
      mcp_session_index.erase(mcp_sessions.back());
      mcp_sessions.pop_back();
    }
    mcp_sessions.push_front(sid);
    mcp_session_index[sid] = mcp_sessions.begin();
  } else if (!sid.empty()) {
    mcp_sessions.splice(mcp_sessions.begin(), mcp_sessions, mcp_session_index.at(sid));
  }
  auto answer = co_await cfg.mcp->handle(rq.body, sid);
  if (!answer) {
    out = {202, "application/json", {}, ""};  // a notification or a response: accepted
  } else {
    out = json_response(200, std::move(*answer));
    if (sid != session) out.headers.emplace_back("Mcp-Session-Id", sid);
  }
}

http::Response Service::Impl::health() {
  if (draining) return json_response(503, R"({"status":"shutting_down"})");
  if (!ready) return json_response(503, R"({"status":"loading"})");
  return json_response(200, R"({"status":"ok"})");
}

http::Response Service::Impl::models_list() {
  json::array data;
  for (const auto& m : models) {
    data.push_back({{"id", m->spec.name},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "weir"},
                    {"max_model_len", m->max_model_len}});
  }
  return json_response(200, json::serialize(json::object{{"object", "list"}, {"data", data}}));
}

http::Response Service::Impl::metrics_text() {
  std::string text = metrics.prometheus();
  text += Registry::global().prometheus();
  return {200, "text/plain; version=0.0.4; charset=utf-8", {}, std::move(text)};
}

http::Response Service::Impl::tokenize(const http::Request& rq) {
  json::object o;
  if (auto e = oa::parse_object(rq.body, o)) return error_response(*e);
  std::optional<oa::ApiError> err;
  std::string model = o.contains("model") && o.at("model").is_string()
                          ? std::string(o.at("model").as_string())
                          : std::string();
  ModelEntry* m = find_model(model, err);
  if (!m) return error_response(*err);
  const json::value* text = o.if_contains("prompt");
  if (!text) text = o.if_contains("text");
  if (!text || !text->is_string())
    return error_response({400, "'prompt' must be a string (the text to tokenize)", "prompt", ""});
  bool add_special = true;
  if (const auto* a = o.if_contains("add_special_tokens"); a && a->is_bool())
    add_special = a->as_bool();
  auto ids = m->tok().encode(text->as_string(), add_special, true);
  json::array toks;
  for (auto t : ids) toks.push_back(t);
  return json_response(
      200, json::serialize(json::object{
               {"tokens", toks}, {"count", ids.size()}, {"max_model_len", m->max_model_len}}));
}

http::Response Service::Impl::detokenize(const http::Request& rq) {
  json::object o;
  if (auto e = oa::parse_object(rq.body, o)) return error_response(*e);
  std::optional<oa::ApiError> err;
  std::string model = o.contains("model") && o.at("model").is_string()
                          ? std::string(o.at("model").as_string())
                          : std::string();
  ModelEntry* m = find_model(model, err);
  if (!m) return error_response(*err);
  const auto* t = o.if_contains("tokens");
  if (!t || !t->is_array())
    return error_response({400, "'tokens' must be an array of token ids", "tokens", ""});
  std::vector<std::int32_t> ids;
  const auto n_vocab = m->tok().n_vocab();
  for (const auto& v : t->as_array()) {
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() >= n_vocab)
      return error_response({400,
                             "'tokens' holds " + json::serialize(v) +
                                 ", which is not a token id of this model (0.." +
                                 std::to_string(n_vocab - 1) + ")",
                             "tokens", ""});
    ids.push_back(static_cast<std::int32_t>(v.as_int64()));
  }
  return json_response(
      200, json::serialize(json::object{{"prompt", agents::to_valid_utf8(m->tok().decode(ids))}}));
}

// --- generation -----------------------------------------------------------------------------

std::optional<oa::ApiError> Service::Impl::check_context(const ModelEntry& m,
                                                         std::size_t prompt_len,
                                                         std::optional<std::int64_t> max_tokens,
                                                         std::int32_t& out_max) {
  const auto ctx = m.max_model_len;
  const auto plen = static_cast<std::int64_t>(prompt_len);
  if (plen >= ctx)
    return oa::ApiError{400,
                        "the prompt has " + std::to_string(plen) +
                            " tokens, but the model's context is " + std::to_string(ctx) +
                            " tokens (prompt plus completion); shorten the prompt",
                        "messages", "context_length_exceeded"};
  if (max_tokens && plen + *max_tokens > ctx)
    return oa::ApiError{400,
                        "max_tokens=" + std::to_string(*max_tokens) + " plus the prompt's " +
                            std::to_string(plen) + " tokens exceeds the model's context of " +
                            std::to_string(ctx) + " tokens; lower max_tokens to at most " +
                            std::to_string(ctx - plen),
                        "max_tokens", "context_length_exceeded"};
  out_max = static_cast<std::int32_t>(max_tokens ? *max_tokens
                                                 : std::min(cfg.default_max_tokens, ctx - plen));
  return std::nullopt;
}

awaitable<std::variant<std::shared_ptr<Batch>, oa::ApiError>> Service::Impl::admit_and_submit(
    http::Exchange& ex, ModelEntry& m, inf::GenerateRequest rq, int n,
    std::vector<Limiter::Permit>& permits) {
  const auto tokens = static_cast<std::int64_t>(rq.prompt.size()) * n;
  auto overloaded = [&](std::string why, Counter* c) {
    c->inc();
    return oa::ApiError{
        429, "model '" + m.spec.name + "' is overloaded: " + why + "; retry after 1 second", "",
        "overloaded"};
  };
  // Fast path: every permit free now.
  for (int i = 0; i < n; ++i) {
    auto p = m.limiter->try_acquire();
    if (!p) break;
    permits.push_back(std::move(*p));
  }
  if (static_cast<int>(permits.size()) < n) {
    if (m.queued_tokens + tokens > cfg.max_queued_tokens) {
      permits.clear();
      co_return overloaded(std::to_string(m.queued_tokens) + " prompt tokens are queued and " +
                               std::to_string(tokens) + " more would pass --max-queued-tokens=" +
                               std::to_string(cfg.max_queued_tokens),
                           m.rejected_tokens);
    }
    if (m.limiter->waiting() + 1 > m.limiter->max_waiters()) {
      permits.clear();
      co_return overloaded(
          std::to_string(m.limiter->in_use()) + " requests running and " +
              std::to_string(m.limiter->waiting()) +
              " queued (--max-queued-requests=" + std::to_string(cfg.max_queued_requests) + ")",
          m.rejected_queue);
    }
    m.queued_tokens += tokens;
    asio::cancellation_signal gone;
    ex.on_disconnect([&gone] { gone.emit(asio::cancellation_type::terminal); });
    while (static_cast<int>(permits.size()) < n) {
      auto r = co_await asio::co_spawn(io, m.limiter->async_acquire(),
                                       asio::bind_cancellation_slot(gone.slot(), use_awaitable));
      if (!r) {
        m.queued_tokens -= tokens;
        ex.on_disconnect({});
        permits.clear();
        if (r.error().is(Errc::overloaded))
          co_return overloaded(r.error().message, m.rejected_queue);
        co_return oa::ApiError{499, "the client went away", "", "cancelled"};
      }
      permits.push_back(std::move(*r));
    }
    m.queued_tokens -= tokens;
    ex.on_disconnect({});
    if (ex.disconnected()) {
      permits.clear();
      co_return oa::ApiError{499, "the client went away", "", "cancelled"};
    }
    if (draining) {
      permits.clear();
      co_return oa::ApiError{503, "the server is shutting down", "", "shutting_down"};
    }
  }
  auto b = std::make_shared<Batch>(io);
  b->engine = &m.engine();
  b->model = &m;
  b->start = Clock::now();
  b->choices.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    inf::GenerateRequest r = rq;
    if (i > 0) r.sampling.seed = rq.sampling.seed + static_cast<std::uint64_t>(i);
    inf::RequestCallbacks cb;
    const auto idx = static_cast<std::size_t>(i);
    std::weak_ptr<Batch> wb = b;
    if (r.logprobs >= 0) {
      cb.on_logprobs = [this, wb, idx](const inf::SampledLogprobs& lp) {
        asio::post(io, [wb, idx, lp] {
          if (auto b = wb.lock()) b->choices[idx].logprobs.push_back(lp);
        });
      };
    }
    cb.on_token = [this, wb, idx](std::int32_t t) {
      asio::post(io, [wb, idx, t] {
        if (auto b = wb.lock()) {
          b->choices[idx].tokens.push_back(t);
          b->wake.cancel();
        }
      });
    };
    // on_done must reach the batch even when the handler has gone: keep it alive until then.
    cb.on_done = [this, b, idx](Result<inf::GenerateResult> res) {
      asio::post(io, [b, idx, res = std::move(res)]() mutable {
        b->choices[idx].done = std::move(res);
        b->wake.cancel();
      });
    };
    b->choices[idx].id = m.engine().submit(std::move(r), std::move(cb));
  }
  active.insert(b.get());
  std::weak_ptr<Batch> wb = b;
  ex.on_disconnect([wb] {
    if (auto b = wb.lock()) b->cancel();
  });
  co_return b;
}

awaitable<void> Service::Impl::wait_events(Batch& b, Clock::time_point deadline) {
  while (!b.has_events()) {
    if (Clock::now() >= deadline && !b.timed_out) {
      b.timed_out = true;
      b.cancel();
    }
    b.wake.expires_at(b.timed_out ? Clock::time_point::max() : deadline);
    co_await b.wake.async_wait(asio::as_tuple(use_awaitable));
  }
}

void Service::Impl::record(const Batch& b, const ChoiceState& c, const inf::GenerateResult& r) {
  (void)c;
  b.model->generation_tokens->inc(static_cast<double>(r.tokens.size()));
  b.model->duration->observe(std::chrono::duration<double>(Clock::now() - b.start).count());
}

namespace {

// Per-choice output state of a request.
struct ChoiceOut {
  explicit ChoiceOut(const inf::Tokenizer& t, std::vector<std::string> stops)
      : decoder(t), stop(std::move(stops)) {}
  inf::StreamDecoder decoder;
  StopFilter stop;
  std::string text;  // sent or kept so far
  std::vector<std::int32_t> ids;
  std::optional<std::vector<oa::TokenLogprobs>> logprobs;
  bool finished = false;
};

}  // namespace

// The shared body of both endpoints.
struct GenerationSpec {
  bool chat = true;
  bool tools_active = false;  // parse tool calls from the text (no incremental content)
  std::vector<std::string> tool_names;
  int first_tool_id = 1;
  std::string prefix;  // completions echo
  // tool_choice required / named: the prompt ends with "<tool_call>", which the output lacks.
  std::string forced_prefix;
  bool close_open_call = false;  // a constrained call stops before its closing tag
};

// The text tool calls are parsed from: the forced opening tag put back, an open call closed.
std::string call_text(const GenerationSpec& spec, const std::string& text) {
  std::string t = spec.forced_prefix + text;
  if (spec.close_open_call) {
    const auto open = t.rfind("<tool_call>");
    if (open != std::string::npos && t.find("</tool_call>", open) == std::string::npos)
      t += "</tool_call>";
  }
  return t;
}

namespace {

oa::TokenLogprobs to_wire(const inf::SampledLogprobs& lp,
                          const std::function<std::string(std::int32_t)>& text) {
  oa::TokenLogprobs t;
  t.token = text(lp.chosen.token);
  t.logprob = lp.chosen.logprob;
  for (const auto& a : lp.top) t.top.push_back({text(a.token), a.logprob});
  return t;
}

}  // namespace

awaitable<void> run_generation(Service::Impl& s, http::Exchange& ex, ModelEntry& m,
                               inf::GenerateRequest rq, const oa::Sampling& sp,
                               const GenerationSpec& spec, http::Response& out, bool& streamed) {
  const auto arrival = Clock::now();
  const int n = sp.n;
  const std::size_t prompt_len = rq.prompt.size();
  std::vector<Limiter::Permit> permits;
  auto admitted = co_await s.admit_and_submit(ex, m, std::move(rq), n, permits);
  if (auto* e = std::get_if<oa::ApiError>(&admitted)) {
    out = error_response(*e);
    co_return;
  }
  auto b = std::get<std::shared_ptr<Batch>>(std::move(admitted));
  struct Leave {
    Service::Impl& s;
    Batch* b;
    ~Leave() { s.active.erase(b); }
  } leave{s, b.get()};
  m.prompt_tokens->inc(static_cast<double>(prompt_len));
  const auto deadline = arrival + s.cfg.request_timeout;
  auto text_of = [&](std::int32_t id) { return s.token_text(m, id); };

  std::vector<ChoiceOut> outs;
  outs.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) outs.emplace_back(m.tok(), sp.stop);
  oa::Envelope env{random_id(spec.chat ? "chatcmpl" : "cmpl"), now_unix(), m.spec.name};
  oa::Usage usage;
  usage.prompt_tokens = static_cast<std::int64_t>(prompt_len);
  bool stream_ok = true;
  if (sp.stream) {
    streamed = true;
    auto st = co_await ex.async_start_stream(200, "text/event-stream");
    stream_ok = static_cast<bool>(st);
    if (!stream_ok) b->cancel();
    if (stream_ok && spec.chat) {  // the role first, as OpenAI does
      std::vector<oa::Choice> first;
      for (int i = 0; i < n; ++i) first.push_back({i, "", {}, "", std::nullopt});
      stream_ok = static_cast<bool>(
          co_await ex.async_write(http::sse_event(oa::chat_chunk(env, first, true))));
    }
  }
  std::string error_message;
  int error_status = 0;
  while (!b->all_consumed()) {
    co_await s.wait_events(*b, deadline);
    std::vector<oa::Choice> chunk;
    for (int i = 0; i < n; ++i) {
      auto& c = b->choices[static_cast<std::size_t>(i)];
      auto& o = outs[static_cast<std::size_t>(i)];
      std::string delta;
      std::optional<std::vector<oa::TokenLogprobs>> lps;
      while (!c.tokens.empty()) {
        const auto t = c.tokens.front();
        c.tokens.pop_front();
        const auto now = Clock::now();
        if (!c.last_token)
          m.ttft->observe(std::chrono::duration<double>(now - arrival).count());
        else
          m.itl->observe(std::chrono::duration<double>(now - *c.last_token).count());
        c.last_token = now;
        o.ids.push_back(t);
        if (!c.logprobs.empty()) {
          if (!lps) lps.emplace();
          lps->push_back(to_wire(c.logprobs.front(), text_of));
          c.logprobs.pop_front();
        }
        if (std::find(m.engine().config().eog_tokens.begin(), m.engine().config().eog_tokens.end(),
                      t) != m.engine().config().eog_tokens.end())
          continue;  // the end-of-generation token is not text
        delta += o.decoder.push(t);
      }
      std::string finish;
      if (c.done && !o.finished) {
        o.finished = true;
        c.consumed = true;
        delta += o.decoder.flush();
        if (!*c.done) {
          error_status = 500;
          error_message = c.done->error().message;
        } else {
          const auto& r = **c.done;
          s.record(*b, c, r);
          usage.completion_tokens += static_cast<std::int64_t>(r.tokens.size());
          usage.cached_tokens = std::max(usage.cached_tokens, r.usage.cached_prompt_tokens);
          if (r.usage.cached_prompt_tokens > 0 && i == 0)
            m.cached_tokens->inc(static_cast<double>(r.usage.cached_prompt_tokens));
          finish = finish_name(r.finish);
          if (r.finish == inf::FinishReason::cancelled && b->timed_out) {
            error_status = 504;
            error_message =
                "the request ran past --request-timeout=" + ms_text(s.cfg.request_timeout) +
                " after " + std::to_string(r.tokens.size()) +
                " tokens; ask for fewer "
                "tokens (max_tokens) or raise the server's limit";
          }
        }
      }
      // A model can emit any bytes: clients get valid UTF-8 (U+FFFD for what is not).
      delta = agents::to_valid_utf8(delta);
      std::string visible = o.stop.push(delta);
      if (o.finished) visible += o.stop.flush();
      if (spec.tools_active) {
        o.text += visible;
        visible.clear();
      } else {
        o.text += visible;
      }
      if (lps) {
        if (!o.logprobs) o.logprobs.emplace();
        o.logprobs->insert(o.logprobs->end(), lps->begin(), lps->end());
      }
      if (!sp.stream) continue;
      oa::Choice ch{i, visible, {}, "", lps};
      if (o.finished && !finish.empty()) {
        if (spec.tools_active) {
          auto parsed = agents::parse_tool_calls(call_text(spec, o.text), spec.tool_names,
                                                 spec.first_tool_id);
          ch.text = parsed.calls.empty() ? o.text : parsed.content;
          for (auto& call : parsed.calls)
            ch.tool_calls.push_back({call.id, call.name, json::serialize(call.arguments)});
          if (!parsed.calls.empty()) finish = "tool_calls";
        }
        ch.finish_reason = finish == "cancelled" ? "length" : finish;
      }
      if (ch.text.empty() && ch.tool_calls.empty() && ch.finish_reason.empty() && !ch.logprobs)
        continue;
      chunk.push_back(std::move(ch));
    }
    if (sp.stream && stream_ok && !chunk.empty()) {
      std::string body =
          spec.chat ? oa::chat_chunk(env, chunk, false) : oa::completion_chunk(env, chunk);
      stream_ok = static_cast<bool>(co_await ex.async_write(http::sse_event(body)));
      if (!stream_ok) b->cancel();  // the reader is gone or stopped reading
    }
  }
  if (sp.stream) {
    if (!stream_ok) co_return;
    if (error_status) {
      (void)co_await ex.async_write(http::sse_event(
          oa::ApiError{error_status, error_message, "", error_status == 504 ? "timeout" : ""}
              .body()));
    } else if (sp.include_usage) {
      std::string body = spec.chat ? oa::chat_chunk(env, {}, false, &usage)
                                   : oa::completion_chunk(env, {}, &usage);
      (void)co_await ex.async_write(http::sse_event(body));
    }
    if (co_await ex.async_write(http::sse_event("[DONE]"))) (void)co_await ex.async_finish();
    co_return;
  }
  if (error_status) {
    out = error_response({error_status, error_message, "", error_status == 504 ? "timeout" : ""});
    co_return;
  }
  if (b->cancelled) {  // the client went away: nobody reads this
    out = error_response({499, "the client went away", "", "cancelled"});
    co_return;
  }
  std::vector<oa::Choice> choices;
  for (int i = 0; i < n; ++i) {
    auto& o = outs[static_cast<std::size_t>(i)];
    const auto& r = **b->choices[static_cast<std::size_t>(i)].done;
    oa::Choice ch{i, spec.prefix + o.text, {}, finish_name(r.finish), o.logprobs};
    if (spec.tools_active) {
      auto parsed =
          agents::parse_tool_calls(call_text(spec, o.text), spec.tool_names, spec.first_tool_id);
      if (!parsed.calls.empty()) {
        ch.text = parsed.content;
        for (auto& call : parsed.calls)
          ch.tool_calls.push_back({call.id, call.name, json::serialize(call.arguments)});
        ch.finish_reason = "tool_calls";
      }
    }
    choices.push_back(std::move(ch));
  }
  out = json_response(200, spec.chat ? oa::chat_completion(env, choices, usage)
                                     : oa::completion(env, choices, usage));
}

namespace {

inf::GenerateRequest base_request(const oa::Sampling& sp) {
  inf::GenerateRequest rq;
  rq.sampling.temperature = sp.temperature;
  rq.sampling.top_p = sp.top_p;
  rq.sampling.seed =
      sp.seed.value_or(static_cast<std::uint64_t>(Clock::now().time_since_epoch().count()));
  rq.sampling.presence_penalty = sp.presence_penalty;
  rq.sampling.frequency_penalty = sp.frequency_penalty;
  rq.stop_strings = sp.stop;
  rq.logprobs = sp.logprobs;
  return rq;
}

}  // namespace

awaitable<void> Service::Impl::chat(http::Exchange& ex, http::Response& out, bool& streamed) {
  oa::ChatRequest cr;
  oa::Limits lim;
  lim.max_n = cfg.max_n;
  if (auto e = oa::parse_chat_request(ex.request().body, cr, lim)) {
    out = error_response(*e);
    co_return;
  }
  std::optional<oa::ApiError> err;
  ModelEntry* m = find_model(cr.model, err);
  if (!m) {
    out = error_response(*err);
    co_return;
  }
  inf::GenerateRequest rq = base_request(cr.sampling);
  if (auto e = make_constraint(cr, m->tok(), rq)) {
    out = error_response(*e);
    co_return;
  }
  GenerationSpec spec;
  spec.chat = true;
  std::vector<agents::Message> msgs;
  for (const auto& cm : cr.messages) {
    agents::Message am;
    am.role = *agents::parse_role(cm.role);
    am.content = cm.content;
    am.name = cm.name;
    am.tool_call_id = cm.tool_call_id;
    for (const auto& tc : cm.tool_calls) {
      agents::ToolCall c;
      c.id = tc.id;
      c.name = tc.name;
      boost::system::error_code ec;
      auto v = json::parse(tc.arguments, ec);
      if (!ec && v.is_object()) c.arguments = std::move(v.as_object());
      am.tool_calls.push_back(std::move(c));
      ++spec.first_tool_id;
    }
    if (am.role == agents::Role::tool && am.name.empty()) {  // name the tool from its call
      for (const auto& prev : msgs)
        for (const auto& c : prev.tool_calls)
          if (c.id == am.tool_call_id) am.name = c.name;
    }
    msgs.push_back(std::move(am));
  }
  std::vector<agents::ToolSpec> tools;
  if (cr.tool_choice != oa::ToolChoice::none) {
    for (const auto& t : cr.tools) {
      tools.push_back({t.name, t.description, t.parameters});
      spec.tool_names.push_back(t.name);
    }
  }
  spec.tools_active = !tools.empty();
  std::string prompt = m->chat->render_prompt(msgs, tools);
  if (spec.tools_active) {
    rq.stop_strings.push_back("</tool_call>");
    // A tool call is valid by construction: {"name": one of the tools, "arguments": its
    // parameters}. With tool_choice auto, after the model opens "<tool_call>"; with required or
    // a named function, the prompt opens it and the reply is the call (of that function).
    const bool forced =
        cr.tool_choice == oa::ToolChoice::required || cr.tool_choice == oa::ToolChoice::named;
    std::vector<agents::ToolSpec> allowed;
    for (const auto& t : tools)
      if (cr.tool_choice != oa::ToolChoice::named || t.name == cr.tool_choice_name)
        allowed.push_back(t);
    if (!rq.constraint) {  // a response_format constraint leaves tool calls to the parser
      if (auto c = m->chat->tool_call_constraint(allowed)) {
        rq.constraint = *c;
        if (!forced) rq.constraint_trigger = "<tool_call>";
        spec.close_open_call = true;
      } else if (forced) {
        out = error_response(
            {400,
             "tool_choice '" +
                 std::string(cr.tool_choice == oa::ToolChoice::required ? "required" : "function") +
                 "' cannot be enforced: a tool's parameters use a JSON Schema keyword weir "
                 "cannot constrain (the server's log names it); use tool_choice 'auto'",
             "tool_choice", "invalid_schema"});
        co_return;
      }
    }
    if (forced) {
      prompt += "<tool_call>";
      spec.forced_prefix = "<tool_call>";
    }
  }
  rq.prompt = m->tok().encode(prompt, true, true);
  std::int32_t max_new = 0;
  if (auto e = check_context(*m, rq.prompt.size(), cr.sampling.max_tokens, max_new)) {
    out = error_response(*e);
    co_return;
  }
  rq.max_new_tokens = max_new;
  // The stop filter trims the user's stop sequences; a tool call keeps its closing tag.
  co_await run_generation(*this, ex, *m, std::move(rq), cr.sampling, spec, out, streamed);
}

awaitable<void> Service::Impl::completions(http::Exchange& ex, http::Response& out,
                                           bool& streamed) {
  oa::CompletionRequest cr;
  oa::Limits lim;
  lim.max_n = cfg.max_n;
  if (auto e = oa::parse_completion_request(ex.request().body, cr, lim)) {
    out = error_response(*e);
    co_return;
  }
  std::optional<oa::ApiError> err;
  ModelEntry* m = find_model(cr.model, err);
  if (!m) {
    out = error_response(*err);
    co_return;
  }
  inf::GenerateRequest rq = base_request(cr.sampling);
  GenerationSpec spec;
  spec.chat = false;
  if (cr.prompt_is_tokens) {
    for (auto t : cr.prompt_tokens) {
      if (t < 0 || t >= m->tok().n_vocab()) {
        out = error_response({400,
                              "prompt token id " + std::to_string(t) +
                                  " is not in this model's vocabulary (0.." +
                                  std::to_string(m->tok().n_vocab() - 1) + ")",
                              "prompt", ""});
        co_return;
      }
    }
    rq.prompt = cr.prompt_tokens;
    if (cr.echo) spec.prefix = agents::to_valid_utf8(m->tok().decode(rq.prompt));
  } else {
    rq.prompt = m->tok().encode(cr.prompt, true, false);
    if (cr.echo) spec.prefix = cr.prompt;
  }
  std::int32_t max_new = 0;
  if (auto e = check_context(*m, rq.prompt.size(), cr.sampling.max_tokens, max_new)) {
    e->param = e->param == "messages" ? "prompt" : e->param;
    out = error_response(*e);
    co_return;
  }
  rq.max_new_tokens = max_new;
  co_await run_generation(*this, ex, *m, std::move(rq), cr.sampling, spec, out, streamed);
}

// --- lifecycle ------------------------------------------------------------------------------

awaitable<void> Service::Impl::drain(std::chrono::milliseconds grace,
                                     std::shared_ptr<std::promise<void>> done) {
  draining = true;
  if (server) server->stop();
  asio::steady_timer t(io);
  const auto until = Clock::now() + grace;
  while ((!active.empty() || (server && server->active_requests() > 0)) && Clock::now() < until) {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(asio::as_tuple(use_awaitable));
  }
  for (Batch* b : std::set<Batch*>(active)) b->cancel();
  // Cancelled requests end within an engine step; give their handlers a bounded moment.
  const auto hard = Clock::now() + std::chrono::seconds(5);
  while ((!active.empty() || (server && server->active_requests() > 0)) && Clock::now() < hard) {
    t.expires_after(std::chrono::milliseconds(5));
    co_await t.async_wait(asio::as_tuple(use_awaitable));
  }
  done->set_value();
}

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Service>> Service::start(ServeConfig config) {
  if (auto st = validate(config); !st) return std::move(st).error();
  auto impl = std::make_unique<Impl>(std::move(config));
  Impl* s = impl.get();
  const char* names[6] = {"2xx", "4xx", "429", "5xx", "401", "413"};
  for (int i = 0; i < 6; ++i)
    s->http_requests[i] =
        &s->metrics.counter("weir_serve_http_responses_total", "HTTP responses by status class",
                            {{"status", names[i]}});
  for (int c = 0; c < kBudgetCategoryCount; ++c) {
    auto cat = static_cast<BudgetCategory>(c);
    s->metrics.gauge_callback("weir_memory_used_bytes", "bytes reserved in the memory budget",
                              {{"category", budget_category_name(cat)}},
                              [s, cat] { return static_cast<double>(s->budget.used(cat)); });
  }
  http::ServerConfig hc;
  hc.address = s->cfg.host;
  hc.port = s->cfg.port;
  hc.max_connections = s->cfg.max_connections;
  hc.max_body_bytes = s->cfg.max_body_bytes;
  hc.write_timeout = s->cfg.write_timeout;
  hc.idle_timeout = s->cfg.idle_timeout;
  auto server = http::Server::create(
      s->io, hc, [s](http::Exchange& ex) { return s->handle(ex); },
      [](int status, std::string_view msg) {
        std::string code = status == 413 ? "request_too_large" : status == 503 ? "overloaded" : "";
        return oa::ApiError{status, std::string(msg), "", code}.body();
      });
  if (!server) return std::move(server).error();
  s->server = std::move(*server);
  if (s->cfg.workflows) {
    RunsConfig rc;
    rc.workflows = *s->cfg.workflows;
    rc.db = s->cfg.runs_db;
    rc.max_runs = s->cfg.max_runs;
    rc.max_queued_runs = s->cfg.max_queued_runs;
    rc.keep_finished = s->cfg.keep_runs;
    rc.log = [](const std::string& line) { weir::log(LogLevel::info, "serve: run " + line); };
    auto runs = Runs::open(rc);
    if (!runs) return std::move(runs).error();
    s->runs = std::move(*runs);
    s->runs_api.runs = s->runs.get();
    s->runs_api.blocking = &s->blocking;
    s->runs_api.draining = &s->draining;
    s->runs_api.poll = std::chrono::milliseconds(s->cfg.runs_db.empty() ? 100 : 250);
  }
  s->metrics.gauge_callback("weir_serve_connections", "open HTTP connections", {},
                            [s] { return static_cast<double>(s->server->connections()); });
  s->metrics.gauge_callback("weir_serve_connections_refused", "connections refused at the cap", {},
                            [s] { return static_cast<double>(s->server->connections_refused()); });
  s->server->start();
  s->io_thread = std::thread([s] {
    auto guard = asio::make_work_guard(s->io);
    s->io.run();
  });
  s->loader = std::thread([s] { s->load_models(); });
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

std::uint16_t Service::port() const {
  return impl_->server->port();
}

Status Service::wait_ready() {
  std::unique_lock lock(impl_->load_mu);
  impl_->load_cv.wait(lock, [&] { return impl_->load_finished; });
  return impl_->load_status;
}

void Service::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard lock(impl_->shut_mu);
  if (impl_->shut) return;
  impl_->shut = true;
  {  // models must finish loading before the io thread stops (the loader posts to it)
    std::unique_lock l(impl_->load_mu);
    impl_->load_cv.wait(l, [&] { return impl_->load_finished; });
  }
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  asio::co_spawn(impl_->io, impl_->drain(grace, done), [done](std::exception_ptr e) {
    if (!e) return;
    weir::log(LogLevel::error, "serve: drain failed");
    try {
      done->set_value();
    } catch (...) {
    }
  });
  fut.wait();
  // MCP calls still running finish (their tools' timeouts bound them) while the io thread runs,
  // so that none completes onto a stopped io_context.
  if (impl_->cfg.mcp) impl_->cfg.mcp->drain();
  // Runs stop (in-process: cancelled; PostgreSQL: handed back to the queue); the calls still on
  // the blocking pool complete onto the running io_context.
  if (impl_->runs) impl_->runs->shutdown();
  impl_->blocking.join();
  impl_->io.stop();
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
}

Service::~Service() {
  shutdown(std::chrono::milliseconds(0));
  impl_->server.reset();
}

// --- weir serve -----------------------------------------------------------------------------

int run(ServeConfig config) {
  std::fputs(describe(config).c_str(), stderr);
  // Signals go to one waiting thread (blocked everywhere else, before any thread starts).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  const auto grace = config.grace;
  const std::string host = config.host;
  auto svc = Service::start(std::move(config));
  if (!svc) {
    std::fprintf(stderr, "weir serve: %s\n", svc.error().message.c_str());
    return 1;
  }
  const std::uint16_t port = (*svc)->port();
  // Listening starts before the models are loaded: GET /health says 503 until they are.
  std::fprintf(stderr, "weir serve: listening on http://%s:%u\n", host.c_str(),
               static_cast<unsigned>(port));
  std::fprintf(stderr, "weir serve: loading models...\n");
  std::atomic<int> signals{0};
  std::thread waiter([&] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (signals.fetch_add(1) >= 1) {
        std::fprintf(stderr, "weir serve: second signal, exiting now\n");
        std::_Exit(1);
      }
      std::fprintf(stderr, "weir serve: signal %d, draining (grace %s; again to exit now)\n", sig,
                   ms_text(grace).c_str());
      (*svc)->shutdown(grace);
      return;
    }
  });
  if (auto st = (*svc)->wait_ready(); !st) {
    std::fprintf(stderr, "weir serve: %s\n", st.error().message.c_str());
    std::_Exit(1);
  }
  std::fprintf(stderr, "weir serve: ready\n");
  waiter.join();
  std::fprintf(stderr, "weir serve: stopped\n");
  svc->reset();
  return 0;
}

}  // namespace weir::serve
