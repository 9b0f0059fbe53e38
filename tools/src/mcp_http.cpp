#include "mcp_http.hpp"

#include <deque>
#include <list>
#include <optional>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/http/client.hpp"
#include "weir/http/sse.hpp"
#include "weir/runtime/log.hpp"
#include "weir/tools/jsonrpc.hpp"

namespace weir::tools::detail {

namespace asio = boost::asio;
namespace json = boost::json;
namespace rpc = jsonrpc;

namespace {

// Messages read but not yet taken by the client, past which the server is flooding it.
constexpr std::size_t kMaxInbox = 1024;

bool visible_ascii(std::string_view s) {
  for (char c : s)
    if (c < 0x21 || c > 0x7e) return false;
  return !s.empty();
}

}  // namespace

struct HttpTransport::State : std::enable_shared_from_this<State> {
  State(asio::any_io_executor e, const McpServerConfig& cfg, http::Url u)
      : ex(std::move(e)),
        who("mcp server '" + cfg.name + "'"),
        url(std::move(u)),
        headers(cfg.headers),
        max_message_bytes(cfg.max_message_bytes),
        wake(ex) {
    http::ClientOptions o;
    o.connect_timeout =
        std::min<std::chrono::milliseconds>(cfg.connect_timeout, std::chrono::seconds(10));
    // A tool call's stream lasts as long as the tool runs; the MCP client times calls out
    // itself (and sends notifications/cancelled), so the HTTP fence is only a backstop.
    o.total_timeout = std::chrono::hours(1);
    o.max_response_bytes = 16 * cfg.max_message_bytes;  // one stream: progress and the answer
    o.max_connections_per_endpoint = std::max<std::size_t>(cfg.max_in_flight, 1) + 2;
    o.max_queued_per_endpoint = cfg.max_write_queue;
    client = std::make_shared<http::Client>(o);
  }

  asio::any_io_executor ex;
  std::string who;
  http::Url url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::size_t max_message_bytes;
  std::shared_ptr<http::Client> client;
  std::string session_id;
  std::string protocol_version;
  std::deque<std::string> inbox;
  asio::steady_timer wake;
  std::optional<std::string> ended;            // why the connection ended
  std::list<asio::cancellation_signal> posts;  // one per POST in flight

  void push(std::string message) {
    if (ended) return;
    if (inbox.size() >= kMaxInbox)
      return end(who + " sent more than " + std::to_string(kMaxInbox) +
                 " messages that were not read yet");
    inbox.push_back(std::move(message));
    wake.cancel();
  }

  void end(std::string why) {
    if (ended) return;
    ended = std::move(why);
    wake.cancel();
    // A snapshot: a POST that completes inside emit() erases its own signal from the list.
    std::vector<asio::cancellation_signal*> signals;
    for (auto& s : posts) signals.push_back(&s);
    for (auto* s : signals) s->emit(asio::cancellation_type::terminal);
  }

  http::ClientRequest request_for(std::string body, std::string traceparent) const {
    http::ClientRequest r;
    r.method = "POST";
    r.target = url.path.empty() ? "/" : "";  // the URL's path is the endpoint
    r.headers.push_back({"Content-Type", "application/json"});
    r.headers.push_back({"Accept", "application/json, text/event-stream"});
    if (!session_id.empty()) r.headers.push_back({"Mcp-Session-Id", session_id});
    if (!protocol_version.empty()) r.headers.push_back({"MCP-Protocol-Version", protocol_version});
    for (const auto& [k, v] : headers) r.headers.push_back({k, v});
    // The W3C trace context the client put in the request's params._meta goes in the header too.
    if (!traceparent.empty()) r.headers.push_back({"traceparent", std::move(traceparent)});
    r.body = std::move(body);
    return r;
  }

  // One message's POST. `id` is the request's id (null for notifications and responses).
  asio::awaitable<void> post(std::string body, json::value id, std::string traceparent) {
    auto self = shared_from_this();  // the client and this state outlive the request
    const bool is_request = !id.is_null();
    enum class Mode { unknown, json, sse } mode = Mode::unknown;
    std::string json_body;
    bool answered = false;
    http::SseReader sse(
        http::SseLimits{.max_line_bytes = max_message_bytes, .max_event_bytes = max_message_bytes});
    // Before a session exists (the initialize POST), what the stream carries is held until the
    // response is complete and its Mcp-Session-Id read: the client's next messages (sent as soon
    // as it reads the answer) must carry that id.
    bool hold = session_id.empty();
    std::vector<std::string> held;
    auto deliver = [&](std::string m) {
      if (is_request && !answered) {
        if (auto p = rpc::parse(m);
            p && (p->kind == rpc::Kind::response || p->kind == rpc::Kind::error) && p->id == id)
          answered = true;
      }
      if (hold && held.size() < kMaxInbox)
        held.push_back(std::move(m));
      else
        push(std::move(m));
    };
    auto sink = [&](std::string_view bytes) -> Status {
      if (mode == Mode::unknown) {
        const auto first = bytes.find_first_not_of(" \t\r\n");
        if (first == std::string_view::npos) return {};
        mode = bytes[first] == '{' || bytes[first] == '[' ? Mode::json : Mode::sse;
        bytes.remove_prefix(first);
      }
      if (mode == Mode::json) {
        if (json_body.size() + bytes.size() > max_message_bytes)
          return Error(Errc::corrupt_data, who + " sent a message larger than max_message_bytes=" +
                                               std::to_string(max_message_bytes));
        json_body.append(bytes);
        return {};
      }
      return sse.feed(bytes, [&](http::SseEvent& e) -> Status {
        if ((e.event.empty() || e.event == "message") && !e.data.empty())
          deliver(std::move(e.data));
        return {};
      });
    };
    http::ClientRequest request = request_for(std::move(body), std::move(traceparent));
    auto op = client->async_request(url, std::move(request), sink);
    auto r = co_await std::move(op);
    if (ended) co_return;  // closed, or the connection already ended for another reason
    if (!r) {
      end(who + ": " + r.error().message);
      co_return;
    }
    const int status = r->status;
    if (status >= 200 && status < 300) {
      if (session_id.empty()) {
        const auto sid = r->header("Mcp-Session-Id");
        if (!sid.empty() && sid.size() <= 256 && visible_ascii(sid)) session_id = std::string(sid);
      }
      hold = false;
      for (auto& m : held) push(std::move(m));
      held.clear();
      if (mode == Mode::json) deliver(std::move(json_body));
      if (is_request && !answered && !ended) {
        if (mode == Mode::sse && sse.mid_event())
          deliver(rpc::error_response(id, rpc::kInternalError,
                                      "the response stream was cut in the middle of an event"));
        else
          deliver(rpc::error_response(
              id, rpc::kInternalError,
              "HTTP " + std::to_string(status) + " without an answer to the request"));
      }
      co_return;
    }
    if (status == 404 && !session_id.empty()) {
      end(who + ": the server ended the session (HTTP 404 for session " + session_id + ")");
      co_return;
    }
    std::string excerpt = r->body.substr(0, 300);
    for (char& c : excerpt)
      if (c == '\n' || c == '\r') c = ' ';
    std::string what = "HTTP " + std::to_string(status) + (r->reason.empty() ? "" : " ") +
                       r->reason + (excerpt.empty() ? "" : ": " + excerpt);
    if (is_request)
      push(rpc::error_response(id, rpc::kInternalError, what));
    else
      weir::log(LogLevel::warn, who + ": a notification was refused: " + what);
  }
};

HttpTransport::HttpTransport(std::shared_ptr<State> state) : s_(std::move(state)) {}

HttpTransport::~HttpTransport() {
  close();
}

Result<std::unique_ptr<HttpTransport>> HttpTransport::open(asio::any_io_executor ex,
                                                           const McpServerConfig& cfg) {
  auto url = http::parse_url(cfg.url);
  if (!url)
    return Error(Errc::invalid_argument,
                 "mcp server '" + cfg.name + "': url: " + url.error().message);
  // The same rule as every other header weir sends (remote models, OTLP): an HTTP token for a
  // name, no line break or NUL in a value, none of the headers the client sets itself.
  for (const auto& [k, v] : cfg.headers)
    if (auto s = http::check_header(k, v); !s)
      return Error(Errc::invalid_argument, "mcp server '" + cfg.name + "': " + s.error().message);
  return std::unique_ptr<HttpTransport>(
      new HttpTransport(std::make_shared<State>(std::move(ex), cfg, std::move(*url))));
}

asio::awaitable<Result<std::string>> HttpTransport::async_read_message() {
  auto s = s_;
  for (;;) {
    if (!s->inbox.empty()) {
      std::string m = std::move(s->inbox.front());
      s->inbox.pop_front();
      co_return m;
    }
    if (s->ended) co_return Error(Errc::io_error, *s->ended);
    s->wake.expires_at(asio::steady_timer::time_point::max());
    (void)co_await s->wake.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<Status> HttpTransport::async_write_message(std::string message) {
  auto s = s_;
  if (s->ended) co_return Error(Errc::io_error, *s->ended);
  json::value id;
  std::string traceparent;
  if (auto m = rpc::parse(message); m && m->kind == rpc::Kind::request) {
    id = m->id;
    if (const auto* p = m->params.if_object())
      if (const auto* meta = p->if_contains("_meta"); meta && meta->is_object())
        if (const auto* tp = meta->get_object().if_contains("traceparent");
            tp && tp->is_string() && tp->get_string().size() <= 64)
          traceparent = std::string(tp->get_string());
  }
  auto& signal = s->posts.emplace_back();
  auto it = std::prev(s->posts.end());
  asio::co_spawn(
      s->ex,
      [s, it, body = std::move(message), id = std::move(id),
       traceparent = std::move(traceparent)]() mutable -> asio::awaitable<void> {
        try {
          auto op = s->post(std::move(body), std::move(id), std::move(traceparent));
          co_await std::move(op);
        } catch (const std::exception& e) {
          weir::log(LogLevel::error, s->who + ": POST failed: " + e.what());
        }
        s->posts.erase(it);
      },
      asio::bind_cancellation_slot(signal.slot(), asio::detached));
  co_return Status{};
}

void HttpTransport::close() {
  s_->end(s_->who + ": connection closed");
}

std::string HttpTransport::exit_reason() {
  return s_->ended.value_or("");
}

void HttpTransport::set_protocol_version(std::string version) {
  s_->protocol_version = std::move(version);
}

}  // namespace weir::tools::detail
