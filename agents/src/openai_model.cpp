#include "weir/agents/openai_model.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <random>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
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

// OpenAI (and weir serve, and servers that check as it does) take tool names of
// ^[a-zA-Z0-9_-]{1,64}$ only, and weir's MCP tools are named "server/tool". Such a name goes out
// as its allowed characters ('_' for each other byte), cut to 55, then '_' and the 8 hex digits
// of its FNV-1a hash, so that two names never meet; the answer's calls are mapped back.
std::string wire_tool_name(const std::string& name) {
  if (oa::valid_tool_name(name)) return name;
  std::string out;
  std::uint32_t h = 2166136261u;
  for (unsigned char c : name) {
    h = (h ^ c) * 16777619u;
    out += std::isalnum(c) || c == '_' || c == '-' ? static_cast<char>(c) : '_';
  }
  if (out.size() > 55) out.resize(55);
  char hex[10];
  std::snprintf(hex, sizeof hex, "_%08x", h);
  return out + hex;
}

std::string ms_text(std::chrono::milliseconds d) {
  return std::to_string(d.count());
}

// Why the watchdog of an attempt ended it.
enum class Stop { none, stalled, deadline };

// Waits until `attempt_end`; if nothing of the answer arrived by then (`alive`), the attempt
// stalled. Otherwise waits on until the call's `deadline`. Cancelled (the request finished
// first): none.
asio::awaitable<Stop> async_watch(Clock::time_point attempt_end, Clock::time_point deadline,
                                  const std::atomic<bool>* alive) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  if (attempt_end < deadline) {
    t.expires_at(attempt_end);
    auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return Stop::none;
    if (!alive->load()) co_return Stop::stalled;
  }
  t.expires_at(deadline);
  auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return ec ? Stop::none : Stop::deadline;
}

// A reply's text passed on as it streams in (ChatParams::on_text), over every attempt of one
// call: an attempt after a failed one passes on only what goes beyond what was passed on, once
// its text has matched it; one whose text differs stops the passing on (the reply arrives whole).
struct Streamed {
  std::function<void(std::string_view)> on_text;  // empty: nothing is passed on
  std::string sent;
  bool off = false;

  // `now`: an attempt's text so far; `matched`: how much of it the attempt has passed on or
  // matched against `sent` (the attempt's own counter).
  void grew(std::string_view now, std::size_t& matched) {
    if (off || !on_text || now.size() <= matched) return;
    if (matched < sent.size()) {  // catching up with what an earlier attempt passed on
      const std::size_t upto = std::min(now.size(), sent.size());
      if (now.substr(matched, upto - matched) !=
          std::string_view(sent).substr(matched, upto - matched)) {
        off = true;
        return;
      }
      matched = upto;
      if (now.size() <= sent.size()) return;
    }
    const std::string_view piece = now.substr(sent.size());
    sent.append(piece);
    matched = now.size();
    on_text(piece);
  }
};

// What a 2xx body turned out to be, filled as its bytes arrive. A stream request expects an
// event stream; a server that ignores `stream: true` answers with one JSON body, which is read
// as the whole answer (the assembled reply would be the same).
struct Body {
  enum class Form { unknown, events, json } form = Form::unknown;
  std::string json;  // the whole JSON body (or, before the form is known, leading whitespace)
  std::string head;  // the first bytes, for messages
  oa::StreamAssembler assembler;
  http::SseReader sse;
  std::atomic<bool> alive{false};  // a byte of a JSON answer, or a token of a stream
  Streamed* streamed = nullptr;    // the call's, when its text is passed on as it comes
  std::size_t matched = 0;         // see Streamed::grew

  Status add(std::string_view bytes, bool stream) {
    if (head.size() < 200) head.append(bytes.substr(0, 200 - head.size()));
    if (form == Form::unknown) {
      const auto first = bytes.find_first_not_of(" \t\r\n");
      if (stream && first == std::string_view::npos) {
        json.append(bytes);
        return {};
      }
      form = !stream || bytes[first] == '{' ? Form::json : Form::events;
      if (form == Form::events && !json.empty()) {
        std::string blank;
        blank.swap(json);
        if (auto st = feed(blank); !st) return st;
      }
    }
    if (form == Form::json) {
      json.append(bytes);
      alive = true;
      return {};
    }
    return feed(bytes);
  }

 private:
  Status feed(std::string_view bytes) {
    auto st = sse.feed(bytes, [&](http::SseEvent& e) { return assembler.add(e.data); });
    if (assembler.has_tokens()) alive = true;
    if (st && streamed) streamed->grew(assembler.text(), matched);
    return st;
  }
};

// A sample of what agents send (instructions, a tool's JSON, prose) that a server tokenizes to
// tell how many bytes its tokens hold.
constexpr const char* kTokenSample =
    "You are a careful researcher. Your goal: find what the documents say about the topic and "
    "report it with sources. Use the tools when they help; answer in plain English.\n"
    "Tools:\n- doc_search: searches the documents. parameters: {\"type\": \"object\", "
    "\"properties\": {\"query\": {\"type\": \"string\"}, \"k\": {\"type\": \"integer\"}}, "
    "\"required\": [\"query\"]}\n"
    "BM25 ranks documents by term frequency, saturated by k1 = 1.2, and by inverse document "
    "frequency, with the length of each document normalised by b = 0.75 against the average.";

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
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

  // What the server says of the model (async_context_length): its context in tokens, -1 until
  // asked (0: the server does not say), and the bytes one of its tokens holds on average.
  std::atomic<std::int64_t> context{-1};
  std::atomic<double> bytes_per_token{4.0};
  std::atomic<Clock::rep> ask_after{0};  // a server that could not be reached: not before then

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

  // Whether an endpoint not in `tried` is there to fail over to (its breaker closed).
  bool has_untried(const std::vector<bool>& tried) {
    std::lock_guard lock(mu);
    const auto now = Clock::now();
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      const auto& e = endpoints[i];
      if (!tried[i] && now >= e.open_until &&
          !(e.failures >= options.breaker_failures && e.probing))
        return true;
    }
    return false;
  }

  // One attempt's outcome: an answer, or what failed and whether trying again can help.
  struct Attempt {
    std::optional<ChatResponse> answer;
    Errc code = Errc::model_error;
    std::string failure;                                        // what went wrong
    std::string detail;                                         // ": <the server's message>", or ""
    std::string retry_after;                                    // the server's Retry-After
    int status = 0;                                             // the HTTP status, when one came
    enum class Retry { no, yes, elsewhere } retry = Retry::no;  // elsewhere: an untried endpoint
    bool unhealthy = false;                                     // counts against the breaker
  };

  // Sends `req` to `e`. An attempt that has not begun to answer by `attempt_end` (no byte of a
  // JSON answer, no token of a stream) is given up as stalled, to be sent elsewhere; one that
  // has runs on to `deadline`, the call's.
  asio::awaitable<Attempt> async_attempt(const Endpoint& e, http::ClientRequest req,
                                         Clock::time_point attempt_end, Clock::time_point deadline,
                                         Streamed* streamed) {
    using namespace asio::experimental::awaitable_operators;
    const bool stream = options.stream;
    Body body;
    body.streamed = streamed;
    http::BodySink sink = [&body, stream](std::string_view bytes) {
      return body.add(bytes, stream);
    };
    auto request = client.async_request(e.url, std::move(req), std::move(sink));
    auto watchdog = async_watch(attempt_end, deadline, &body.alive);
    auto race = std::move(request) || std::move(watchdog);
    auto raced = co_await std::move(race);

    Attempt a;
    if (raced.index() == 1) {
      a.code = Errc::deadline_exceeded;
      a.unhealthy = true;
      if (std::get<1>(raced) == Stop::stalled) {
        a.failure = std::string(stream ? "no token" : "no answer") +
                    " within attempt_timeout_ms=" + ms_text(attempt_timeout());
        a.retry = Attempt::Retry::elsewhere;
      } else {
        a.failure = std::string(body.alive ? "the answer did not end" : "no answer") +
                    " within timeout_ms=" + ms_text(options.timeout);
      }
      co_return a;
    }
    auto& r = std::get<0>(raced);
    if (!r) {
      const auto& err = r.error();
      a.code = err.code.category() == weir::error_category() ? static_cast<Errc>(err.code.value())
                                                             : Errc::io_error;
      // The client's message starts with the origin; ours names the base URL instead.
      a.failure = err.message;
      if (auto p = a.failure.find(": "); p != std::string::npos && a.failure.starts_with("http"))
        a.failure.erase(0, p + 2);
      if (err.is(Errc::io_error)) {
        a.retry = Attempt::Retry::yes;
        a.unhealthy = true;
      } else if (err.is(Errc::deadline_exceeded)) {  // connecting took connect_timeout
        a.unhealthy = true;
        if (!body.alive) a.retry = Attempt::Retry::elsewhere;
      }
      co_return a;
    }
    a.status = r->status;
    if (r->status < 200 || r->status >= 300) {
      a.failure = std::to_string(r->status) + " " + r->reason;
      a.code = status_errc(r->status);
      a.retry = retryable_status(r->status) ? Attempt::Retry::yes : Attempt::Retry::no;
      a.unhealthy = a.retry == Attempt::Retry::yes;
      a.retry_after = std::string(r->header("Retry-After"));
      if (!r->body.empty()) {
        const auto err = oa::parse_error_body(r->status, r->body);
        a.detail = ": " + err.message;
        if (err.code == "context_length_exceeded")
          a.detail +=
              " (weir sizes a turn to the context the server publishes at GET /models, else to "
              "--max-model-len or \"context_length\": give it there, or lower the history "
              "window: an agent's \"history\" or a group chat's \"window\" {\"max_tokens\": N})";
      }
      co_return a;
    }
    Result<ChatResponse> answer = Error(Errc::model_error, "");
    if (body.form == Body::Form::json || !stream) {
      auto parsed = oa::parse_chat_completion(body.json);
      answer = parsed ? from_openai(*parsed) : Result<ChatResponse>(std::move(parsed).error());
      if (!answer && stream)
        answer = Error(Errc::model_error,
                       "asked for an event stream (stream: true), the server answered with one "
                       "JSON body that is not a chat completion: " +
                           answer.error().message);
    } else if (body.assembler.done() || body.assembler.finished()) {
      answer = from_openai(body.assembler.finish());
    } else if (auto type = r->header("Content-Type");
               !type.starts_with("text/event-stream") && !type.starts_with("Text/Event-Stream")) {
      // Not an event stream: trying again gets the same.
      a.failure = "asked for an event stream (stream: true), but the server answered " +
                  (type.empty() ? std::string("without a Content-Type")
                                : "Content-Type " + std::string(type)) +
                  ": " + one_line(body.head);
      co_return a;
    } else {
      a.code = Errc::io_error;
      a.failure = body.sse.mid_event() ? "the event stream ended in the middle of an event"
                                       : "the event stream ended before [DONE]";
      a.retry = Attempt::Retry::yes;
      a.unhealthy = true;
      co_return a;
    }
    if (!answer) {
      a.failure = answer.error().message;
      co_return a;
    }
    a.answer = std::move(*answer);
    co_return a;
  }

  // How long an attempt may go without an answer beginning before it is sent elsewhere.
  std::chrono::milliseconds attempt_timeout() const {
    if (options.attempt_timeout.count() > 0) return options.attempt_timeout;
    const auto tries = std::min<std::int64_t>(static_cast<std::int64_t>(endpoints.size()),
                                              options.max_retries + 1);
    return options.timeout / std::max<std::int64_t>(1, tries);
  }

  // A prompt of `bytes` bytes of text took `tokens` tokens (usage.prompt_tokens: the chat
  // template's markers included): counts are kept at or above what the server counted, so a
  // window sized by them fits. Small prompts, where the markers weigh most, teach nothing.
  void learn_token_size(std::size_t bytes, std::int64_t tokens) {
    if (bytes < 128 || tokens <= 0) return;
    const double seen = std::max(0.5, static_cast<double>(bytes) / static_cast<double>(tokens));
    double now = bytes_per_token.load();
    while (seen < now && !bytes_per_token.compare_exchange_weak(now, seen)) {
    }
  }

  // One GET or POST of JSON to `target` under `url`, bounded by `limit`; the body of a 200, or
  // nullopt (a failure to reach the server: try again later) or a non-200 status in `status`.
  asio::awaitable<std::optional<std::string>> async_fetch(http::Url url, std::string method,
                                                          std::string target, std::string body,
                                                          std::chrono::milliseconds limit,
                                                          int& status) {
    using namespace asio::experimental::awaitable_operators;
    http::ClientRequest rq;
    rq.method = std::move(method);
    rq.target = std::move(target);
    rq.body = std::move(body);
    if (!rq.body.empty()) rq.headers.push_back({"Content-Type", "application/json"});
    if (!api_key.empty()) rq.headers.push_back({"Authorization", "Bearer " + api_key});
    const std::atomic<bool> never{false};
    const auto end = Clock::now() + limit;
    auto request = client.async_request(url, std::move(rq));
    auto watchdog = async_watch(end, end, &never);
    auto race = std::move(request) || std::move(watchdog);
    auto raced = co_await std::move(race);
    status = 0;
    if (raced.index() != 0 || !std::get<0>(raced)) co_return std::nullopt;
    auto& r = *std::get<0>(raced);
    status = r.status;
    if (r.status != 200) co_return std::string();
    co_return std::move(r.body);
  }

  // Asks the first endpoint that answers for the model's context (GET /models: vLLM and weir
  // serve publish max_model_len, some others context_length) and, when there is one, for the
  // size of its tokens (POST /tokenize, vLLM's and weir serve's, of a sample text). Stores what
  // it learns; a server that cannot be reached is asked again on a later call.
  asio::awaitable<void> async_discover() {
    const auto limit =
        std::min<std::chrono::milliseconds>(options.timeout, std::chrono::seconds(10));
    for (const auto& e : endpoints) {
      int status = 0;
      // (Each awaited operation is built first: no temporary in a co_await, STYLE.md.)
      auto list = async_fetch(e.url, "GET", "/models", "", limit, status);
      auto body = co_await std::move(list);
      if (!body) continue;  // unreachable: the next endpoint
      std::int64_t ctx = 0;
      if (auto parsed = parse_json(*body, "model list")) {
        const auto* data =
            parsed->value.is_object() ? parsed->value.as_object().if_contains("data") : nullptr;
        if (data && data->is_array())
          for (const auto& m : data->as_array()) {
            const auto* mo = m.if_object();
            const auto* id = mo ? mo->if_contains("id") : nullptr;
            if (!id || !id->is_string() || id->as_string() != options.model) continue;
            for (const char* key : {"max_model_len", "context_length"})
              if (const auto* v = mo->if_contains(key); v && (v->is_int64() || v->is_uint64()))
                if (ctx == 0 && v->to_number<std::int64_t>() > 0)
                  ctx = v->to_number<std::int64_t>();
          }
      }
      if (ctx > 0) {
        // The root's /tokenize (the base URL less its /v1).
        http::Url root = e.url;
        if (root.path.ends_with("/v1")) root.path.resize(root.path.size() - 3);
        const std::string sample = kTokenSample;
        auto count =
            async_fetch(root, "POST", "/tokenize",
                        json::serialize(json::object{{"model", options.model}, {"prompt", sample}}),
                        limit, status);
        auto tok = co_await std::move(count);
        if (tok && !tok->empty())
          if (auto parsed = parse_json(*tok, "tokenize"); parsed && parsed->value.is_object()) {
            const auto& o = parsed->value.as_object();
            std::int64_t n = 0;
            if (const auto* c = o.if_contains("count"); c && c->is_int64()) n = c->as_int64();
            if (const auto* t = o.if_contains("tokens"); n == 0 && t && t->is_array())
              n = static_cast<std::int64_t>(t->as_array().size());
            if (n > 0)
              bytes_per_token =
                  std::clamp(static_cast<double>(sample.size()) / static_cast<double>(n), 0.5, 8.0);
          }
      }
      context = ctx;
      co_return;
    }
    ask_after = (Clock::now() + std::chrono::seconds(30)).time_since_epoch().count();
    weir::log(LogLevel::warn, where + ": cannot ask the server for the model's context (GET " +
                                  "/models); agents size their windows without it until it "
                                  "answers (or give it: --max-model-len, \"context_length\")");
  }

  Impl(OpenAIModelOptions o, std::vector<http::Url> urls, std::string key)
      : options(std::move(o)),
        api_key(std::move(key)),
        client(http::ClientOptions{.connect_timeout = options.connect_timeout,
                                   // A backstop: the call's deadline ends attempts first.
                                   .total_timeout = options.timeout + std::chrono::seconds(1),
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
  if (impl_->options.context_length > 0) return impl_->options.context_length;
  return std::max<std::int64_t>(0, impl_->context.load());
}

asio::awaitable<std::int64_t> OpenAIChatModel::async_context_length() {
  auto& impl = *impl_;
  if (impl.options.context_length > 0) co_return impl.options.context_length;
  auto due = [&impl] {
    return impl.context.load() < 0 && Clock::now().time_since_epoch().count() >= impl.ask_after;
  };
  if (due()) {
    auto permit = co_await impl.limiter.async_acquire();
    if (permit && due()) co_await impl.async_discover();
  }
  co_return context_length();
}

std::int64_t OpenAIChatModel::count_tokens(std::string_view text) const {
  const double per = impl_->bytes_per_token.load();
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(text.size()) / per));
}

std::string OpenAIChatModel::request_body(const std::vector<Message>& messages,
                                          const std::vector<ToolSpec>& tools,
                                          const ChatParams& params) const {
  const auto& o = impl_->options;
  oa::ChatRequest r;
  r.model = o.model;
  for (const auto& m : messages) {
    r.messages.push_back(to_openai(m));
    auto& w = r.messages.back();
    // A name goes with user turns only: OpenAI refuses it on tool results, and an agent's
    // speaker name is no part of what it is asked.
    if (m.role != Role::user) w.name.clear();
    for (auto& c : w.tool_calls) c.name = wire_tool_name(c.name);
  }
  for (const auto& t : tools)
    r.tools.push_back({wire_tool_name(t.name), t.description, t.parameters});
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
  if (params.span && params.span->recording()) {  // the chat span's W3C context goes along
    params.span->set(trace::attr::kProvider, "openai");
    params.span->set(trace::attr::kRequestModel, o.model);  // as the provider names it
    const trace::SpanContext sc = params.span->context();
    req.headers.push_back({"traceparent", trace::format_traceparent(sc)});
    if (!sc.trace_state.empty()) req.headers.push_back({"tracestate", sc.trace_state});
  }
  req.body = request_body(messages, tools, params);
  // A streamed reply's text is passed on as it comes, when it is the content as it comes (no
  // tools: a call is assembled at the end).
  Streamed streamed;
  if (o.stream && tools.empty()) streamed.on_text = params.on_text;
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
  // The bytes of text the prompt holds, to learn from its token count how many a token holds.
  std::size_t prompt_bytes = 0;
  for (const auto& m : messages) {
    prompt_bytes += m.content.size() + m.name.size();
    for (const auto& c : m.tool_calls)
      prompt_bytes += c.name.size() + json::serialize(c.arguments).size();
  }
  for (const auto& t : tools)
    prompt_bytes += t.name.size() + t.description.size() + json::serialize(t.parameters).size();
  messages.clear();
  // Tool names sent in OpenAI's alphabet, mapped back in the answer.
  std::map<std::string, std::string> names;
  for (const auto& t : tools)
    if (auto w = wire_tool_name(t.name); w != t.name) names.emplace(std::move(w), t.name);
  auto named = [&names](Result<ChatResponse> a) {
    if (a)
      for (auto& c : a->message.tool_calls)
        if (auto it = names.find(c.name); it != names.end()) c.name = it->second;
    return a;
  };
  std::vector<bool> tried(impl.endpoints.size(), false);

  auto ex = co_await asio::this_coro::executor;
  std::chrono::milliseconds waited{0};
  const int attempts_max = o.max_retries + 1;
  Clock::time_point deadline;  // the call's: its first attempt's start + timeout
  for (int attempt = 1;; ++attempt) {
    auto permit = co_await impl.limiter.async_acquire();
    if (!permit) co_return Error(permit.error().code, impl.where + ": " + permit.error().message);
    if (auto w = impl.rate_wait(); w > Clock::duration::zero()) {
      asio::steady_timer t(ex, w);
      co_await t.async_wait(asio::use_awaitable);
    }
    if (attempt == 1) deadline = Clock::now() + o.timeout;
    const std::size_t ei = impl.pick(prefix_hash, tried);
    const auto& endpoint = impl.endpoints[ei];
    tried[ei] = true;
    // With an endpoint left to fail over to, an attempt gets attempt_timeout to begin answering.
    const auto attempt_end = impl.has_untried(tried)
                                 ? std::min(deadline, Clock::now() + impl.attempt_timeout())
                                 : deadline;
    auto attempt_op = impl.async_attempt(endpoint, req, attempt_end, deadline, &streamed);
    auto a = co_await std::move(attempt_op);
    permit->release();
    impl.finished(ei, !a.answer && a.unhealthy);
    if (a.answer) {
      impl.learn_token_size(prompt_bytes, a.answer->usage.prompt_tokens);
      co_return named(std::move(*a.answer));
    }

    if (params.span && params.span->recording()) {  // a 429 is a fence that acted
      std::vector<trace::Attribute> ev{{"weir.endpoint", endpoint.where},
                                       {"weir.attempt", std::int64_t{attempt}},
                                       {"weir.error", a.failure}};
      if (a.status) ev.push_back({"http.response.status_code", std::int64_t{a.status}});
      params.span->add_event(a.status == 429 ? "weir.fence.rate_limited" : "weir.retry",
                             std::move(ev));
    }
    auto fail = [&](std::string why) {
      return Error(a.code, endpoint.where + ": " + a.failure + " after " + std::to_string(attempt) +
                               (attempt == 1 ? " attempt" : " attempts") + why + a.detail);
    };
    const bool more = attempt < attempts_max && Clock::now() < deadline;
    if (more && a.retry == Impl::Attempt::Retry::elsewhere && impl.has_untried(tried)) continue;
    if (!more || a.retry != Impl::Attempt::Retry::yes) co_return fail("");
    // Another endpoint not tried yet: fail over at once.
    if (std::find(tried.begin(), tried.end(), false) != tried.end()) continue;
    std::fill(tried.begin(), tried.end(), false);
    auto delay = impl.backoff(attempt - 1, a.retry_after);
    if (waited + delay > o.retry_budget)
      co_return fail(" (retry_budget_ms=" + ms_text(o.retry_budget) + " spent)");
    if (Clock::now() + delay >= deadline)
      co_return fail(" (timeout_ms=" + ms_text(o.timeout) + " would pass)");
    waited += delay;
    asio::steady_timer t(ex, delay);
    co_await t.async_wait(asio::use_awaitable);
  }
}

}  // namespace weir::agents
