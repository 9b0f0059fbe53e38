#include "weir/agents/openai_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/http/client.hpp"
#include "weir/http/sse.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/log.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;
namespace oa = http::openai;
using Clock = std::chrono::steady_clock;

namespace {

Errc status_errc(int status) {
  if (status == 429) return Errc::overloaded;
  if (status == 404) return Errc::not_found;
  if (status == 400 || status == 401 || status == 403 || status == 422)
    return Errc::invalid_argument;
  return Errc::model_error;
}

bool retryable_status(int s) {
  return s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

}  // namespace

Result<OpenAIModelOptions> parse_openai_model_ref(std::string_view ref) {
  auto bad = [whole = std::string(ref)] {
    return Error(Errc::invalid_argument,
                 "model '" + whole +
                     "': expected openai:http(s)://HOST:PORT/BASE/MODEL, e.g. "
                     "openai:http://127.0.0.1:8080/v1/tiny");
  };
  if (!ref.starts_with("openai:")) return bad();
  ref.remove_prefix(7);
  // The model follows the base URL's "/v1/" when there is one (model names may hold '/', as
  // vLLM's "Qwen/Qwen2.5-0.5B-Instruct" does), else the last '/'.
  const auto v1 = ref.find("/v1/");
  const auto slash = v1 != std::string_view::npos ? v1 + 3 : ref.rfind('/');
  const auto scheme_end = ref.find("://");
  if (slash == std::string_view::npos || scheme_end == std::string_view::npos ||
      slash <= scheme_end + 2 || slash + 1 == ref.size())
    return bad();
  OpenAIModelOptions o;
  o.base_url = std::string(ref.substr(0, slash));
  o.model = std::string(ref.substr(slash + 1));
  if (!http::parse_url(o.base_url)) return bad();
  if (const char* k = std::getenv("OPENAI_API_KEY"); k && *k) o.api_key_env = "OPENAI_API_KEY";
  return o;
}

struct OpenAIChatModel::Impl {
  struct Endpoint {
    http::Url url;
    std::string where;             // "openai <base_url>"
    std::size_t outstanding = 0;   // GUARDED_BY(mu)
    std::int32_t failures = 0;     // GUARDED_BY(mu): consecutive
    Clock::time_point open_until;  // GUARDED_BY(mu): the breaker skips it until then
    bool probing = false;          // GUARDED_BY(mu): one request tries it after the cool-down
  };

  OpenAIModelOptions options;
  oa::ToolChoice tool_choice = oa::ToolChoice::automatic;  // options.tool_choice
  std::vector<Endpoint> endpoints;                         // [0] is base_url
  std::string api_key;                                     // never logged
  http::Client client;
  Limiter limiter;
  std::string where;  // "openai <base_url>"

  std::mutex mu;
  double tokens = 0;                             // GUARDED_BY(mu): the rate limiter's bucket
  Clock::time_point refilled;                    // GUARDED_BY(mu)
  std::minstd_rand rng{std::random_device{}()};  // GUARDED_BY(mu)

  // The endpoint for a request whose prompt starts with `prefix_hash`, not one of `tried`
  // (unless every endpoint was). Counts it outstanding; give it back with finished().
  std::size_t pick(std::uint64_t prefix_hash, const std::vector<bool>& tried) {
    std::lock_guard lock(mu);
    const auto now = Clock::now();
    const std::size_t n = endpoints.size();
    auto usable = [&](std::size_t i, bool any) {
      const auto& e = endpoints[i];
      if (!any && tried[i]) return false;
      return now >= e.open_until && !(e.failures >= options.breaker_failures && e.probing);
    };
    std::size_t best = n;
    for (bool any : {false, true}) {
      // Least outstanding among the usable ones.
      std::size_t least = n;
      for (std::size_t i = 0; i < n; ++i)
        if (usable(i, any) &&
            (least == n || endpoints[i].outstanding < endpoints[least].outstanding))
          least = i;
      if (least == n) continue;
      // Affinity: the highest rendezvous score among the usable, unless it is too busy.
      std::size_t home = n;
      std::uint64_t top = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!usable(i, any)) continue;
        std::uint64_t h = (prefix_hash ^ (0x9E3779B97F4A7C15ull * (i + 1))) * 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        if (home == n || h > top) home = i, top = h;
      }
      best = endpoints[home].outstanding <= endpoints[least].outstanding + options.affinity_slack
                 ? home
                 : least;
      break;
    }
    if (best == n) {  // every breaker open: probe the one whose cool-down ends first
      best = 0;
      for (std::size_t i = 1; i < n; ++i)
        if (endpoints[i].open_until < endpoints[best].open_until) best = i;
    }
    auto& e = endpoints[best];
    if (e.failures >= options.breaker_failures) e.probing = true;
    ++e.outstanding;
    return best;
  }

  // The outcome of a request to endpoint `i`: a failure that counts against its health
  // (connection errors, 5xx, 429, timeouts), or not.
  void finished(std::size_t i, bool failed) {
    std::lock_guard lock(mu);
    auto& e = endpoints[i];
    --e.outstanding;
    e.probing = false;
    if (!failed) {
      e.failures = 0;
      e.open_until = {};
      return;
    }
    if (++e.failures >= options.breaker_failures) {
      e.open_until = Clock::now() + options.breaker_cooldown;
      if (e.failures == options.breaker_failures)
        weir::log(LogLevel::warn, e.where + ": " + std::to_string(e.failures) +
                                      " failures in a row; skipped for " +
                                      std::to_string(options.breaker_cooldown.count()) + " ms");
    }
  }

  Impl(OpenAIModelOptions o, std::vector<http::Url> urls, std::string key)
      : options(std::move(o)),
        api_key(std::move(key)),
        client(http::ClientOptions{.connect_timeout = options.connect_timeout,
                                   .total_timeout = options.timeout,
                                   .max_response_bytes = options.max_response_bytes,
                                   .max_connections_per_endpoint = options.max_concurrency,
                                   .max_queued_per_endpoint = options.max_queued}),
        limiter("openai " + options.base_url +
                    " (max_concurrency=" + std::to_string(options.max_concurrency) +
                    ", max_queued=" + std::to_string(options.max_queued) + ")",
                options.max_concurrency, options.max_queued),
        where("openai " + options.base_url),
        tokens(options.requests_per_minute),
        refilled(Clock::now()) {
    for (std::size_t i = 0; i < urls.size(); ++i) {
      Endpoint e;
      e.where = "openai " + (i == 0 ? options.base_url : options.more_base_urls[i - 1]);
      e.url = std::move(urls[i]);
      endpoints.push_back(std::move(e));
    }
  }

  // How long to wait before sending under the requests_per_minute bucket (a slot is taken).
  Clock::duration rate_wait() {
    const double rpm = options.requests_per_minute;
    if (rpm <= 0) return {};
    std::lock_guard lock(mu);
    const auto now = Clock::now();
    const double per_s = rpm / 60.0;
    tokens = std::min(rpm, tokens + std::chrono::duration<double>(now - refilled).count() * per_s);
    refilled = now;
    tokens -= 1;
    if (tokens >= 0) return {};
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(-tokens / per_s));
  }

  std::chrono::milliseconds backoff(int retry, std::string_view retry_after) {
    if (!retry_after.empty()) {
      char* end = nullptr;
      std::string ra(retry_after);
      const double s = std::strtod(ra.c_str(), &end);
      if (end != ra.c_str() && s >= 0 && std::isfinite(s))
        return std::min(options.max_backoff,
                        std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000)));
    }
    const double base =
        static_cast<double>(options.initial_backoff.count()) * std::pow(2.0, std::min(retry, 30));
    double jitter;
    {
      std::lock_guard lock(mu);
      jitter = std::uniform_real_distribution<double>(0.5, 1.0)(rng);
    }
    return std::min(options.max_backoff,
                    std::chrono::milliseconds(static_cast<std::int64_t>(base * jitter)));
  }
};

Result<std::shared_ptr<OpenAIChatModel>> OpenAIChatModel::open(OpenAIModelOptions options) {
  std::vector<http::Url> urls;
  for (std::size_t i = 0; i <= options.more_base_urls.size(); ++i) {
    auto url = http::parse_url(i == 0 ? options.base_url : options.more_base_urls[i - 1]);
    if (!url) return Error(Errc::invalid_argument, "openai model: " + url.error().message);
    urls.push_back(std::move(*url));
  }
  if (options.breaker_failures < 1)
    return Error(Errc::invalid_argument, "openai model: breaker_failures must be at least 1");
  if (options.model.empty())
    return Error(Errc::invalid_argument, "openai model at " + options.base_url + ": no \"model\"");
  if (options.max_concurrency == 0)
    return Error(Errc::invalid_argument, "openai model: max_concurrency must be at least 1");
  if (options.max_retries < 0)
    return Error(Errc::invalid_argument, "openai model: max_retries must be 0 or more");
  oa::ToolChoice choice = oa::ToolChoice::automatic;
  if (options.tool_choice == "none")
    choice = oa::ToolChoice::none;
  else if (options.tool_choice == "required")
    choice = oa::ToolChoice::required;
  else if (options.tool_choice != "auto")
    return Error(Errc::invalid_argument,
                 "openai model: tool_choice must be \"auto\", \"none\" or \"required\", not '" +
                     options.tool_choice + "'");
  std::string key;
  if (!options.api_key_env.empty()) {
    const char* v = std::getenv(options.api_key_env.c_str());
    if (!v || !*v)
      return Error(Errc::invalid_argument, "openai model at " + options.base_url +
                                               ": environment variable " + options.api_key_env +
                                               " (api_key_env) is not set");
    key = v;
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(urls), std::move(key));
  impl->tool_choice = choice;
  return std::make_shared<OpenAIChatModel>(std::move(impl));
}

OpenAIChatModel::OpenAIChatModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OpenAIChatModel::~OpenAIChatModel() = default;

std::string OpenAIChatModel::name() const {
  return "openai:" + impl_->options.model;
}
std::int64_t OpenAIChatModel::context_length() const {
  return impl_->options.context_length;
}

std::string OpenAIChatModel::request_body(const std::vector<Message>& messages,
                                          const std::vector<ToolSpec>& tools,
                                          const ChatParams& params) const {
  const auto& o = impl_->options;
  oa::ChatRequest r;
  r.model = o.model;
  for (const auto& m : messages) {
    r.messages.push_back(to_openai(m));
    // A name goes with user turns only: OpenAI refuses it on tool results, and an agent's
    // speaker name is no part of what it is asked.
    if (m.role != Role::user) r.messages.back().name.clear();
  }
  for (const auto& t : tools) r.tools.push_back({t.name, t.description, t.parameters});
  if (!tools.empty()) r.tool_choice = impl_->tool_choice;
  // An output_schema becomes OpenAI's structured output (weir serve, OpenAI, vLLM and llama.cpp's
  // server constrain decoding to it); with tools the turn may still call them, so only a
  // tool-free turn carries it (as LocalChatModel does).
  if (params.response_schema && tools.empty()) {
    r.response_format = oa::ResponseFormat::json_schema;
    r.json_schema =
        json::object{{"name", "output"}, {"schema", *params.response_schema}, {"strict", true}};
  }
  r.sampling.max_tokens = params.max_tokens;
  r.sampling.temperature = params.temperature;
  if (params.seed != 0) r.sampling.seed = params.seed;
  r.sampling.stop = params.stop;
  r.sampling.stream = o.stream;
  r.sampling.include_usage = o.stream;
  return oa::chat_request_body(r);
}

asio::awaitable<Result<ChatResponse>> OpenAIChatModel::async_chat(std::vector<Message> messages,
                                                                  std::vector<ToolSpec> tools,
                                                                  ChatParams params) {
  auto& impl = *impl_;
  const auto& o = impl.options;
  http::ClientRequest req;
  req.method = "POST";
  req.target = "/chat/completions";
  req.headers.push_back({"Content-Type", "application/json"});
  req.headers.push_back({"Accept", o.stream ? "text/event-stream" : "application/json"});
  if (!impl.api_key.empty()) req.headers.push_back({"Authorization", "Bearer " + impl.api_key});
  req.body = request_body(messages, tools, params);
  // The prompt's start (FNV-1a of its first 512 bytes) picks the endpoint whose prefix cache
  // likely holds it.
  std::uint64_t prefix_hash = 14695981039346656037ull;
  {
    std::size_t left = 512;
    for (const auto& m : messages) {
      for (std::size_t i = 0; i < m.content.size() && left > 0; ++i, --left)
        prefix_hash = (prefix_hash ^ static_cast<unsigned char>(m.content[i])) * 1099511628211ull;
      if (left == 0) break;
    }
  }
  messages.clear();
  std::vector<bool> tried(impl.endpoints.size(), false);

  auto ex = co_await asio::this_coro::executor;
  std::chrono::milliseconds waited{0};
  const int attempts_max = o.max_retries + 1;
  for (int attempt = 1;; ++attempt) {
    auto permit = co_await impl.limiter.async_acquire();
    if (!permit) co_return Error(permit.error().code, impl.where + ": " + permit.error().message);
    if (auto w = impl.rate_wait(); w > Clock::duration::zero()) {
      asio::steady_timer t(ex, w);
      co_await t.async_wait(asio::use_awaitable);
    }

    oa::StreamAssembler assembler;
    http::SseReader sse;
    http::BodySink sink;
    if (o.stream) {
      sink = [&](std::string_view bytes) -> Status {
        return sse.feed(bytes, [&](http::SseEvent& e) { return assembler.add(e.data); });
      };
    }
    const std::size_t ei = impl.pick(prefix_hash, tried);
    const auto& endpoint = impl.endpoints[ei];
    tried[ei] = true;
    auto r = co_await impl.client.async_request(endpoint.url, req, sink);
    permit->release();

    std::string failure;
    std::string_view retry_after;
    Errc code = Errc::model_error;
    bool retry = false;
    if (!r) {
      const auto& e = r.error();
      code = static_cast<Errc>(e.code.value());
      // The client's message starts with the origin; ours names the base URL instead.
      std::string msg = e.message;
      if (auto p = msg.find(": "); p != std::string::npos && msg.starts_with("http"))
        msg.erase(0, p + 2);
      failure = msg;
      retry = e.is(Errc::io_error);
      if (e.code.category() != weir::error_category()) code = Errc::io_error;
    } else if (r->status < 200 || r->status >= 300) {
      failure = std::to_string(r->status) + " " + r->reason;
      code = status_errc(r->status);
      retry = retryable_status(r->status);
      retry_after = r->header("Retry-After");
    } else if (o.stream) {
      if (!assembler.done() && sse.mid_event()) {
        failure = "the event stream ended in the middle of an event", retry = true,
        code = Errc::io_error;
      } else {
        impl.finished(ei, false);
        auto answer = from_openai(assembler.finish());
        if (answer) co_return answer;
        co_return Error(Errc::model_error, endpoint.where + ": " + answer.error().message);
      }
    } else {
      impl.finished(ei, false);
      auto parsed = oa::parse_chat_completion(r->body);
      auto answer = parsed ? from_openai(*parsed) : Result<ChatResponse>(std::move(parsed).error());
      if (answer) co_return answer;
      co_return Error(Errc::model_error, endpoint.where + ": " + answer.error().message);
    }
    // Health: the endpoint failed (connection, 5xx, 429, a cut stream, a timeout), or it
    // answered a client error (the request's fault, not the endpoint's).
    impl.finished(ei, retry || code == Errc::deadline_exceeded);

    const std::string detail = r && !r->body.empty()
                                   ? ": " + oa::parse_error_body(r->status, r->body).message
                                   : std::string();
    if (retry && attempt < attempts_max) {
      // Another endpoint not tried yet: fail over at once.
      if (std::find(tried.begin(), tried.end(), false) != tried.end()) continue;
      std::fill(tried.begin(), tried.end(), false);
      auto delay = impl.backoff(attempt - 1, retry_after);
      if (waited + delay <= o.retry_budget) {
        waited += delay;
        asio::steady_timer t(ex, delay);
        co_await t.async_wait(asio::use_awaitable);
        continue;
      }
      co_return Error(code, endpoint.where + ": " + failure + " after " + std::to_string(attempt) +
                                (attempt == 1 ? " attempt" : " attempts") + " (retry_budget_ms=" +
                                std::to_string(o.retry_budget.count()) + " spent)" + detail);
    }
    co_return Error(code, endpoint.where + ": " + failure + " after " + std::to_string(attempt) +
                              (attempt == 1 ? " attempt" : " attempts") + detail);
  }
}

}  // namespace weir::agents
