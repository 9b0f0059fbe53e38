// weir serve: the server's life, routing, and the model, health and metrics endpoints. The
// generation endpoints: service_generate.cpp; /mcp: service_mcp.cpp; the configuration's checks
// and summary: service_config.cpp; Service::Impl: service_impl.hpp.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <future>
#include <memory>
#include <thread>

#include "console.hpp"
#include "langgraph_assistants.hpp"
#include "langgraph_book.hpp"
#include "request_trace.hpp"
#include "service_impl.hpp"
#include "weir/graph/store.hpp"
#include "weir/runtime/text.hpp"

namespace weir::serve {

// --- state ----------------------------------------------------------------------------------

Service::Impl::~Impl() {
  if (loader.joinable()) loader.join();
  models.clear();  // the engines stop with their last holders: these models, then `engines`
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
    auto chat = agents::LocalChatModel::open(engines, spec.path, opt);
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
    m->gather = std::make_unique<Limiter>(
        "model '" + spec.name + "' admission of several choices (--max-queued-requests=" +
            std::to_string(cfg.max_queued_requests) + ")",
        1, cfg.max_queued_requests);
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

namespace {

// Every request body is JSON and says so: a page of another site can make a browser send a form
// or text/plain without asking (no CORS preflight), never application/json. A body-less request
// may leave Content-Type out. The 415's message, or nullopt.
std::optional<std::string> unsupported_body(const http::Request& rq) {
  const auto type = rq.header("content-type");
  if (!type) {
    if (rq.body.empty()) return std::nullopt;
    return std::string("a request body needs 'Content-Type: application/json'");
  }
  std::string media(type->substr(0, type->find(';')));
  while (!media.empty() && (media.back() == ' ' || media.back() == '\t')) media.pop_back();
  while (!media.empty() && (media.front() == ' ' || media.front() == '\t')) media.erase(0, 1);
  for (char& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media == "application/json") return std::nullopt;
  return "Content-Type '" + std::string(*type) +
         "' is not accepted: send the body as JSON with 'Content-Type: application/json'";
}

// The API key, checked on the request's head before its body is read (http::ServerConfig::
// before_body): a caller without the key cannot make the server read a body. Probes carry no
// secrets: GET /health answers without the key (it says ok, loading or shutting_down). Nor do
// the console's files (the same page in every weir binary; the data it shows comes from the
// API, which needs the key): a browser cannot send a header when it opens a page, so the page
// loads, asks for the key and sends it as X-Api-Key on its API calls.
std::optional<http::Response> api_key_refusal(const ServeConfig& cfg, const http::Request& rq) {
  const auto& key = cfg.api_key;
  if (!key || (rq.path == "/health" && rq.method == "GET")) return std::nullopt;
  if (cfg.console && rq.method == "GET" && is_console_file(rq.path)) return std::nullopt;
  // The LangGraph SDKs send the key as X-Api-Key: the same key, another header.
  const auto x = rq.header("x-api-key");
  if (x && constant_time_equal(*x, *key)) return std::nullopt;
  auto auth = rq.header("authorization").value_or("");
  if (auth.empty() && x) auth = "x";  // a key was sent, and it is wrong
  // The scheme's name is case-insensitive (RFC 9110 11.1): "bearer KEY" is the same.
  constexpr std::string_view kBearer = "bearer ";
  const bool bearer =
      auth.size() > kBearer.size() && iequals(auth.substr(0, kBearer.size()), kBearer);
  if (bearer && constant_time_equal(auth.substr(kBearer.size()), *key)) return std::nullopt;
  auto out = error_response({401,
                             auth.empty() ? "missing API key: send the header 'Authorization: "
                                            "Bearer <key>' (the key in the server's --api-key-env)"
                                          : "invalid API key: send 'Authorization: Bearer <key>' "
                                            "(or 'X-Api-Key: <key>') with the key in the server's "
                                            "--api-key-env",
                             "", "invalid_api_key"});
  out.headers.emplace_back("WWW-Authenticate", "Bearer");
  return out;
}

}  // namespace

awaitable<void> Service::Impl::handle(http::Exchange& ex) {
  http::Response out;
  bool streamed = false;
  const auto& rq = ex.request();
  if (rq.method != "GET" && rq.method != "HEAD") {
    if (auto why = unsupported_body(rq)) {
      out = error_response({415, std::move(*why), "", "unsupported_media_type"});
      (void)co_await ex.async_respond(std::move(out));
      co_return;
    }
  }
  // The body's transient memory (its JSON value, the tokenizer's work, the answer) is charged to
  // the budget while the handler runs: requests that would take more than --request-memory-mb
  // at once wait for a retry instead of growing the process.
  MemoryBudget::Reservation body_memory;
  if (!rq.body.empty()) {
    const std::size_t need = rq.body.size() * kRequestMemoryPerByte;
    auto r = budget.try_reserve(BudgetCategory::run_state, need);
    if (!r) {
      const bool never = need > cfg.request_memory_bytes;
      const std::string limit =
          "--request-memory-mb=" + std::to_string(cfg.request_memory_bytes >> 20);
      out = error_response(
          never ? oa::ApiError{413,
                               "the request needs up to " + format_bytes(need) +
                                   " of memory to read (" + std::to_string(kRequestMemoryPerByte) +
                                   " times its " + std::to_string(rq.body.size()) +
                                   " bytes), more than " + limit + " allows; send less",
                               "", "request_too_large"}
                : oa::ApiError{503,
                               "the server's memory for requests being read is in use (" +
                                   format_bytes(budget.used(BudgetCategory::run_state)) + " of " +
                                   format_bytes(cfg.request_memory_bytes) + ", " + limit +
                                   "; this one needs " + format_bytes(need) + "); retry shortly",
                               "", "overloaded"});
      (void)co_await ex.async_respond(std::move(out));
      co_return;
    }
    body_memory = std::move(*r);
  }
  trace::Span span = start_request_span(cfg.tracer.get(), rq);
  const trace::SpanContext request_span = span.context();
  co_await route(ex, out, streamed, request_span);
  finish_request_span(span, rq, out, streamed);
  if (!streamed) (void)co_await ex.async_respond(std::move(out));
}

void Service::Impl::count_response(int status) {
  std::string label = std::to_string(status);
  if (std::find(std::begin(kCountedStatuses), std::end(kCountedStatuses), status) ==
      std::end(kCountedStatuses))
    label = std::to_string(status / 100) + "xx";
  if (auto it = http_responses.find(label); it != http_responses.end()) it->second->inc();
}

awaitable<void> Service::Impl::route(http::Exchange& ex, http::Response& out, bool& streamed,
                                     const trace::SpanContext& request_span) {
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
  } else if (is_console_path(p)) {
    out = console_answer(rq.method, p, cfg.console);
  } else if (p == "/mcp" && cfg.mcp && !draining) {
    co_await mcp(ex, out, request_span);
  } else if (runs && !draining && is_runs_path(p)) {
    co_await route_runs(runs_api, ex, out, streamed, request_span);
  } else if (runs && !draining && is_langgraph_path(p)) {
    co_await route_langgraph(langgraph_api, ex, out, streamed, request_span);
  } else if (!ready) {
    out = error_response({503,
                          "the models are still loading; retry shortly (GET /health says "
                          "when they are ready)",
                          "", "model_loading"});
  } else if (draining) {
    out = error_response({503, "the server is shutting down", "", "shutting_down"});
  } else if (p == "/v1/models") {
    if (method_is("GET")) out = models_list();
  } else if (p.starts_with("/v1/models/")) {
    if (method_is("GET")) out = model_info(p.substr(std::string_view("/v1/models/").size()));
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
             std::string(runs ? ", the runs API under /v1/runs and /v1/threads" : "") +
             std::string(cfg.console ? ", GET /console" : "") + ")",
         "", "not_found"});
  }
}

http::Response Service::Impl::health() {
  if (draining) return json_response(503, R"({"status":"shutting_down"})");
  if (!ready) return json_response(503, R"({"status":"loading"})");
  return json_response(200, R"({"status":"ok"})");
}

namespace {

json::object model_object(const ModelEntry& m) {
  return {{"id", m.spec.name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "weir"},
          {"max_model_len", m.max_model_len}};
}

}  // namespace

http::Response Service::Impl::models_list() {
  json::array data;
  for (const auto& m : models) data.push_back(model_object(*m));
  return json_response(200, json::serialize(json::object{{"object", "list"}, {"data", data}}));
}

// GET /v1/models/{id}: the model as /v1/models lists it, or 404 naming the models.
http::Response Service::Impl::model_info(const std::string& id) {
  std::optional<oa::ApiError> err;
  if (id.empty())
    return error_response(
        {404, "GET /v1/models/{id} needs a model's name", "model", "model_not_found"});
  ModelEntry* m = find_model(id, err);
  if (!m) return error_response(*err);
  return json_response(200, json::serialize(model_object(*m)));
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
  // As /v1/completions reads a prompt: client text is text, never a special token.
  const auto ids = m->tok().encode(text->as_string(), add_special, false);
  // Written out directly: a JSON array of a million ids would be 16 bytes an id, then its text.
  std::string body = "{\"tokens\":[";
  body.reserve(body.size() + ids.size() * 7 + 64);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) body += ',';
    body += std::to_string(ids[i]);
  }
  body += "],\"count\":" + std::to_string(ids.size()) +
          ",\"max_model_len\":" + std::to_string(m->max_model_len) + "}";
  return json_response(200, std::move(body));
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

awaitable<void> Service::Impl::drain(std::chrono::milliseconds grace,
                                     std::shared_ptr<std::promise<void>> done) {
  // New connections are still accepted while requests drain: /health says shutting_down and
  // new work is a 503 with Retry-After (a load balancer sees an answer, not a refused
  // connection); every response closes its connection. The listener closes at the end.
  draining = true;
  if (server) server->drain();
  for (auto* w : std::set<asio::cancellation_signal*>(admission_waits))
    w->emit(asio::cancellation_type::terminal);
  asio::steady_timer t(io);
  const auto until = Clock::now() + grace;
  while ((!active.empty() || (server && server->active_requests() > 0)) && Clock::now() < until) {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(asio::as_tuple(use_awaitable));
  }
  // Past the grace: each request ends with what it has (finish_reason "length"), never 499.
  for (Batch* b : std::set<Batch*>(active)) b->cancel();
  // Cancelled requests end within an engine step; give their handlers a bounded moment.
  const auto hard = Clock::now() + std::chrono::seconds(5);
  while ((!active.empty() || (server && server->active_requests() > 0)) && Clock::now() < hard) {
    t.expires_after(std::chrono::milliseconds(5));
    co_await t.async_wait(asio::as_tuple(use_awaitable));
  }
  if (server) server->stop();
  done->set_value();
}

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Service>> Service::start(ServeConfig config) {
  if (auto st = validate(config); !st) return std::move(st).error();
  auto impl = std::make_unique<Impl>(std::move(config));
  Impl* s = impl.get();
  std::vector<std::string> labels = {"2xx", "3xx", "4xx", "5xx"};
  for (int status : Impl::kCountedStatuses) labels.push_back(std::to_string(status));
  for (const auto& label : labels)
    s->http_responses[label] = &s->metrics.counter(
        "weir_serve_http_responses_total", "HTTP responses by status (the fences' own) or class",
        {{"status", label}});
  for (int c = 0; c < kBudgetCategoryCount; ++c) {
    auto cat = static_cast<BudgetCategory>(c);
    s->metrics.gauge_callback("weir_memory_used_bytes", "bytes reserved in the memory budget",
                              {{"category", budget_category_name(cat)}},
                              [s, cat] { return static_cast<double>(s->budget.used(cat)); });
    // The limits beside the use (the console draws one against the other); a category without
    // a limit of its own has no series.
    if (s->budget.limit(cat) != kUnlimited)
      s->metrics.gauge_callback("weir_memory_limit_bytes",
                                "the memory budget's limit for a category",
                                {{"category", budget_category_name(cat)}},
                                [s, cat] { return static_cast<double>(s->budget.limit(cat)); });
  }
  http::ServerConfig hc;
  hc.address = s->cfg.host;
  hc.port = s->cfg.port;
  hc.max_connections = s->cfg.max_connections;
  hc.max_body_bytes = s->cfg.max_body_bytes;
  hc.write_timeout = s->cfg.write_timeout;
  hc.idle_timeout = s->cfg.idle_timeout;
  // Without a key, no page of another site may drive the server; with one, the key decides.
  hc.browser.refuse_cross_site = !s->cfg.api_key;
  hc.browser.loopback = http::is_loopback_host(s->cfg.host);
  hc.browser.allowed_origins = *http::BrowserPolicy::normalize_origins(s->cfg.allowed_origins);
  hc.browser.allowed_hosts = *http::BrowserPolicy::normalize_hosts(s->cfg.allowed_hosts);
  hc.on_response = [s](int status) { s->count_response(status); };
  hc.before_body = [s](const http::Request& head) { return api_key_refusal(s->cfg, head); };
  auto server = http::Server::create(
      s->io, hc, [s](http::Exchange& ex) { return s->handle(ex); },
      [](int status, std::string_view msg) {
        std::string code = status == 413   ? "request_too_large"
                           : status == 403 ? "cross_site_request"
                           : status == 503 ? "overloaded"
                                           : "";
        return oa::ApiError{status, std::string(msg), "", code}.body();
      });
  if (!server) return std::move(server).error();
  s->server = std::move(*server);
  if (runs_api(s->cfg)) {
    cluster::RunServiceOptions rc;
    if (s->cfg.workflows) rc.workflows = *s->cfg.workflows;
    rc.graphs = s->cfg.graphs;
    // Crew files in the folder run on the first --model (an engine of the run service's own).
    if (!s->cfg.models.empty()) rc.crew_model = s->cfg.models.front().path;
    rc.db = s->cfg.runs_db;
    rc.max_runs = s->cfg.max_runs;
    rc.max_queued_runs = s->cfg.max_queued_runs;
    rc.keep_finished = s->cfg.keep_runs;
    rc.checkpoint_budget = &s->budget;  // the threads' checkpoints in memory, in /metrics
    rc.tracer = s->cfg.tracer.get();
    rc.log = [](const std::string& line) { weir::log(LogLevel::info, "serve: run " + line); };
    auto runs = cluster::RunService::open(std::move(rc));
    if (!runs) return std::move(runs).error();
    s->runs = std::move(*runs);
    // The runs by state, in-process (PostgreSQL's queue is the database's: no series).
    if (s->runs->counts()) {
      using Counts = cluster::RunService::Counts;
      for (auto [state, field] : {std::pair{"queued", &Counts::queued},
                                  {"running", &Counts::running},
                                  {"pending", &Counts::pending}})
        s->metrics.gauge_callback("weir_runs",
                                  "runs of the run service by state (queued, running, pending)",
                                  {{"state", state}}, [s, field] {
                                    auto c = s->runs->counts();
                                    return c ? static_cast<double>((*c).*field) : 0.0;
                                  });
    }
    s->runs_api.runs = s->runs.get();
    s->runs_api.blocking = &s->blocking;
    s->runs_api.draining = &s->draining;
    s->langgraph_api.runs = s->runs.get();
    s->langgraph_api.blocking = &s->blocking;
    s->langgraph_api.draining = &s->draining;
    s->langgraph_api.max_threads = s->cfg.max_threads;
    WebhookOptions wo;
    wo.hosts = s->cfg.webhook_hosts;
    s->webhooks = std::make_shared<Webhooks>(std::move(wo), *s->runs, s->blocking);
    s->langgraph_api.webhooks = s->webhooks;
    s->langgraph_api.started_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count();
    // The /store routes' items: in memory (bounded, charged to the budget's history category)
    // without --db, else in PostgreSQL beside the runs.
    // The thread list (langgraph_book.hpp): a memory store of its own (this process is its only
    // writer: --max-threads counts it), else a table of its own in that PostgreSQL.
    if (s->cfg.runs_db.empty()) {
      graph::MemoryStoreOptions store;
      store.budget = &s->budget;
      s->langgraph_api.store = graph::make_memory_store(store);
      graph::MemoryStoreOptions book;
      book.max_bytes = LangGraphThreads::kMemoryBookBytes;
      book.budget = &s->budget;
      std::shared_ptr<graph::Store> books = graph::make_memory_store(book);
      s->langgraph_api.threads = std::make_shared<LangGraphThreads>(books, true);
      s->langgraph_api.assistants = std::make_shared<LangGraphAssistants>(books);
    } else {
      auto store = graph::open_postgres_store(s->cfg.runs_db);
      if (!store) return std::move(store).error();
      s->langgraph_api.store = std::move(*store);
      auto book = graph::open_postgres_store(s->cfg.runs_db, {}, std::chrono::milliseconds(10000),
                                             "weir_langgraph_threads");
      if (!book) return std::move(book).error();
      std::shared_ptr<graph::Store> books = std::move(*book);
      s->langgraph_api.threads = std::make_shared<LangGraphThreads>(books, false);
      s->langgraph_api.assistants = std::make_shared<LangGraphAssistants>(books);
    }
  }
  s->metrics.gauge_callback("weir_serve_connections", "open HTTP connections", {},
                            [s] { return static_cast<double>(s->server->connections()); });
  s->metrics.counter_callback(
      "weir_serve_connections_refused_total", "connections refused at --max-connections", {},
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
  // Webhooks of runs not ended yet are not delivered (webhooks.hpp).
  if (impl_->webhooks) impl_->webhooks->stop();
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

namespace {
constexpr std::chrono::milliseconds kTeardownLimit{30000};
}  // namespace

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
  // The first signal drains; the waiter stays for a second, which exits at once, even while the
  // teardown below waits (an engine's last step, a model's copy being written).
  // The drain runs on a thread of its own, so that the waiter is back in sigwait at once (a
  // drain held up by a request that will not end must not hold up the second signal).
  std::promise<void> first_signal;
  auto drained = first_signal.get_future();
  auto draining = std::make_shared<std::atomic<bool>>(false);
  std::thread waiter([set, grace, &svc, draining, first = std::move(first_signal)]() mutable {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (draining->exchange(true)) {
        std::fprintf(stderr, "weir serve: second signal, exiting now\n");
        std::_Exit(1);
      }
      std::fprintf(stderr, "weir serve: signal %d, draining (grace %s; again to exit now)\n", sig,
                   ms_text(grace).c_str());
      std::thread([grace, &svc, first = std::move(first)]() mutable {
        (*svc)->shutdown(grace);
        first.set_value();
      }).detach();
    }
  });
  waiter.detach();
  if (auto st = (*svc)->wait_ready(); !st) {
    std::fprintf(stderr, "weir serve: %s\n", st.error().message.c_str());
    std::_Exit(1);
  }
  // A signal while the models loaded: the drain has begun, and the server is not ready.
  if (!draining->load()) std::fprintf(stderr, "weir serve: ready\n");
  drained.wait();
  std::fprintf(stderr, "weir serve: stopped\n");
  // Teardown stops each engine within one step. Should a step never end (a bug), a stopped
  // server must still go: after kTeardownLimit the process exits anyway, saying so.
  std::thread([] {
    std::this_thread::sleep_for(kTeardownLimit);
    std::fprintf(stderr, "weir serve: the engines did not stop within %s; exiting\n",
                 ms_text(kTeardownLimit).c_str());
    std::_Exit(1);
  }).detach();
  svc->reset();
  return 0;
}

}  // namespace weir::serve
