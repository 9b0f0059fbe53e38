// serve's Service::Impl and what its two source files share: service.cpp (configuration, the
// server's life, routing, the model and MCP endpoints) and service_generate.cpp (admission and
// the completions and chat endpoints). Private to serve/.
#pragma once

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
#include "langgraph_api.hpp"
#include "runs_api.hpp"
#include "stop_filter.hpp"
#include "webhooks.hpp"
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

struct ModelEntry {
  ModelSpec spec;
  std::shared_ptr<agents::LocalChatModel> chat;  // engine + tokenizer + chat template
  std::unique_ptr<Limiter> limiter;              // running permits + bounded queue
  // One request of several choices (n > 1) at a time gathers its permits while it waits: two
  // holding part of theirs each could wait on the other forever.
  std::unique_ptr<Limiter> gather;
  std::int64_t queued_tokens = 0;  // io thread
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
  bool client_gone = false;  // its client disconnected: nobody reads the answer

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

// The runs API is on: a workflow folder, C++ graphs, or both (service_config.cpp).
bool runs_api(const ServeConfig& c);

inline std::string ms_text(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(ms.count()) + "ms";
}

inline std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string finish_name(inf::FinishReason r) {
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

inline http::Response json_response(int status, std::string body) {
  return {status, "application/json", {}, std::move(body)};
}
inline http::Response error_response(const oa::ApiError& e) {
  http::Response r = json_response(e.status, e.body());
  if (e.status == 429 || e.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

inline bool constant_time_equal(std::string_view a, std::string_view b) {
  // Time depends only on the length of `b` (the secret's length is not hidden; its bytes are).
  unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

inline std::string random_id(const char* prefix) {
  static std::atomic<std::uint64_t> n{0};
  static const std::uint64_t base = static_cast<std::uint64_t>(now_unix()) * 2654435761u;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix,
                static_cast<unsigned long long>(base ^ (n.fetch_add(1) * 0x9E3779B97F4A7C15ull)));
  return buf;
}

struct Service::Impl {
  explicit Impl(ServeConfig c) : cfg(std::move(c)), budget(limits_of(cfg)) {}
  ~Impl();

  ServeConfig cfg;
  asio::io_context io{1};
  std::unique_ptr<http::Server> server;
  std::thread io_thread;
  std::thread loader;
  MemoryBudget budget;  // kv_cache: the engines' pools; run_state: request bodies being read
  static BudgetLimits limits_of(const ServeConfig& c) {
    BudgetLimits l;
    l.category[static_cast<int>(BudgetCategory::run_state)] = c.request_memory_bytes;
    return l;
  }
  inf::EngineRegistry engines;  // the models' engines; their KV pools are reserved from budget
  Registry metrics;             // serve's own series (engines report to Registry::global())
  // weir_serve_http_responses_total: the statuses of the fences by their own label, the rest by
  // class (2xx, 3xx, 4xx, 5xx). Counted as the server writes each response (io thread).
  static constexpr int kCountedStatuses[] = {401, 403, 413, 415, 429, 431, 503};
  std::map<std::string, Counter*> http_responses;
  void count_response(int status);

  // Set by the loader, then read-only.
  std::vector<std::unique_ptr<ModelEntry>> models;
  std::atomic<bool> ready{false};
  std::mutex load_mu;
  std::condition_variable load_cv;
  bool load_finished = false;  // GUARDED_BY(load_mu)
  Status load_status;          // GUARDED_BY(load_mu)

  // io thread only.
  std::set<Batch*> active;
  // Requests waiting for admission; drain() wakes them (503) so none is left suspended when the
  // models go.
  std::set<asio::cancellation_signal*> admission_waits;
  std::list<std::string> mcp_sessions;  // most recently used first
  std::map<std::string, std::list<std::string>::iterator> mcp_session_index;
  bool draining = false;
  bool shut = false;
  // The runs API (cfg.workflows); its backend's calls run on `blocking`.
  std::unique_ptr<cluster::RunService> runs;
  asio::thread_pool blocking{2};
  RunsApi runs_api;
  LangGraphApi langgraph_api;          // the LangGraph Server API over the same run service
  std::shared_ptr<Webhooks> webhooks;  // the runs' webhooks (langgraph_api's); stopped first
  std::mutex shut_mu;

  void load_models();
  ModelEntry* find_model(const std::string& name, std::optional<oa::ApiError>& err);
  awaitable<void> handle(http::Exchange& ex);
  // `request_span`: the request's span context (invalid when not traced); runs it queues
  // continue it.
  awaitable<void> route(http::Exchange& ex, http::Response& out, bool& streamed,
                        const trace::SpanContext& request_span);
  awaitable<void> chat(http::Exchange& ex, http::Response& out, bool& streamed);
  awaitable<void> completions(http::Exchange& ex, http::Response& out, bool& streamed);
  // /mcp; a tools/call's span goes under the request's span.
  awaitable<void> mcp(http::Exchange& ex, http::Response& out,
                      const trace::SpanContext& request_span);
  http::Response models_list();
  http::Response model_info(const std::string& id);
  http::Response health();
  http::Response metrics_text();
  http::Response tokenize(const http::Request& rq);
  http::Response detokenize(const http::Request& rq);

  // Admission + submission. Returns the batch, or the error to send.
  // Waits for admission until `deadline` (--request-timeout: 504), the client leaving (499) or
  // the drain (503).
  awaitable<std::variant<std::shared_ptr<Batch>, oa::ApiError>> admit_and_submit(
      http::Exchange& ex, ModelEntry& m, inf::GenerateRequest rq, int n,
      std::vector<Limiter::Permit>& permits, Clock::time_point deadline);
  std::shared_ptr<Batch> submit_batch(http::Exchange& ex, ModelEntry& m, inf::GenerateRequest rq,
                                      int n);
  awaitable<void> wait_events(Batch& b, Clock::time_point deadline);
  // (`sampling`: its max_tokens, and the key the request sent it under, for messages.)
  std::optional<oa::ApiError> check_context(const ModelEntry& m, std::size_t prompt_len,
                                            const oa::Sampling& sampling, std::int32_t& out_max);
  void record(const Batch& b, const ChoiceState& c, const inf::GenerateResult& r);
  awaitable<void> drain(std::chrono::milliseconds grace, std::shared_ptr<std::promise<void>> done);
  std::string token_text(const ModelEntry& m, std::int32_t id) const {
    return agents::to_valid_utf8(m.tok().decode(std::span<const std::int32_t>(&id, 1), false));
  }
};

}  // namespace weir::serve
