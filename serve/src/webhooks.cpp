#include "webhooks.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include "langgraph_messages.hpp"
#include "langgraph_request.hpp"
#include "langgraph_shapes.hpp"
#include "run_follow.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/http/client.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"
#include "weir/version.hpp"

namespace weir::serve {

namespace asio = boost::asio;
namespace json = boost::json;
using asio::awaitable;
using cluster::RunRecord;
using cluster::RunState;

namespace {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An allow-list entry as host and port ("" any); nullopt when it is not one.
std::optional<std::pair<std::string, std::string>> host_rule(std::string_view e) {
  if (e.empty() || e.find_first_of("/@?# \t") != std::string_view::npos) return std::nullopt;
  auto u = http::parse_url("http://" + std::string(e));
  if (!u || !u->path.empty()) return std::nullopt;
  // A port only when the entry names one (parse_url fills in 80).
  const bool v6 = e.starts_with("[");
  const auto colon = v6 ? e.find("]:") : e.rfind(':');
  return std::make_pair(u->host, colon == std::string_view::npos ? "" : u->port);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// What the webhook carries (webhooks.hpp): LangGraph's run object and the run's end (its own
// last values, not what later runs made of the thread).
Result<json::object> payload_of(cluster::RunService& runs, const RunRecord& r) {
  json::object p = run_object(r);
  p["run_started_at"] = r.started_ms ? iso_time(r.started_ms) : json::value(nullptr);
  p["run_ended_at"] = iso_time(r.finished_ms);
  json::value values(nullptr);
  if (r.state != RunState::cancelled) {
    const auto& cp = runs.checkpointer();
    auto steps = run_steps(cp, r, "");
    if (!steps) return std::move(steps).error();
    if (!steps->list.empty()) {
      auto v = client_state_at(cp, r.thread_id, steps->list.back().checkpoint_id);
      if (!v) return std::move(v).error();
      values = values_to_langchain(*v);
    }
  }
  p["values"] = std::move(values);
  if (r.state == RunState::failed) p["error"] = r.error;
  return p;
}

}  // namespace

Status check_webhook_hosts(const std::vector<std::string>& hosts) {
  for (const auto& h : hosts) {
    if (h != "*" && h.find('*') != std::string::npos)
      return Error(Errc::invalid_argument, "--webhook-hosts: '" + escape_control(h) +
                                               "': * stands alone (any host, any port)");
    if (!h.starts_with("[") && std::count(h.begin(), h.end(), ':') > 1)
      return Error(Errc::invalid_argument, "--webhook-hosts: '" + escape_control(h) +
                                               "' is an IPv6 address: write it in brackets, [" +
                                               escape_control(h) + "] or [" + escape_control(h) +
                                               "]:port");
    if (h != "*" && !host_rule(h))
      return Error(Errc::invalid_argument,
                   "--webhook-hosts: '" + escape_control(h) +
                       "' is not a host, host:port or [v6]:port (or * for any host)");
  }
  return {};
}

bool webhook_host_allowed(const std::vector<std::string>& hosts, std::string_view host,
                          std::string_view port) {
  for (const auto& h : hosts) {
    if (h == "*") return true;
    auto r = host_rule(h);
    if (r && iequals(r->first, host) && (r->second.empty() || r->second == port)) return true;
  }
  return false;
}

struct Delivery {
  Delivery(const asio::any_io_executor& ex) : wake(std::make_shared<Wake>(ex)), pause(ex) {}
  std::string run_id, url;
  WebhookUrl where;
  std::shared_ptr<Wake> wake;        // the run's watch wakes it
  asio::steady_timer pause;          // between tries
  asio::cancellation_signal cancel;  // cuts a try in flight (stop)
};

struct Webhooks::Impl {
  Impl(WebhookOptions opts, cluster::RunService& r, asio::thread_pool& b)
      : o(std::move(opts)), runs(r), blocking(b) {
    http::ClientOptions co;
    co.total_timeout = o.timeout;
    co.connect_timeout = std::min(co.connect_timeout, o.timeout);
    co.max_response_bytes = 64u << 10;  // the answer is read and dropped
    co.max_connections_per_endpoint = 8;
    // No kept-alive connections: the client sends a request again on a fresh connection when a
    // pooled one fails before any response byte (a stale connection), which for a receiver
    // that read the POST and closed unanswered is the same try twice.
    co.max_idle_per_endpoint = 0;
    client = std::make_unique<http::Client>(co);
  }

  WebhookOptions o;
  cluster::RunService& runs;
  asio::thread_pool& blocking;
  asio::io_context io;
  std::unique_ptr<http::Client> client;  // before io goes: its idle connections close first
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{
      asio::make_work_guard(io)};
  std::thread thread;

  std::atomic<bool> stop_flag{false};
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;  // GUARDED_BY(mu)
  std::size_t live = 0;   // GUARDED_BY(mu): deliveries whose coroutine has not ended
  std::set<std::shared_ptr<Delivery>> deliveries;  // io thread only

  awaitable<void> async_deliver(std::shared_ptr<Delivery> d);
  awaitable<std::optional<RunRecord>> async_ended(Delivery& d);
  awaitable<void> async_send(Delivery& d, json::object payload);
};

// The run's record once it ended; nullopt when stopping or the run is gone.
awaitable<std::optional<RunRecord>> Webhooks::Impl::async_ended(Delivery& d) {
  const auto ex = co_await asio::this_coro::executor;
  auto watch = watch_run(runs, d.run_id, d.wake, ex);
  cluster::RunService* service = &runs;
  const std::string id = d.run_id;
  while (!stop_flag) {
    const auto seen = d.wake->version.load();
    auto read = [service, id] { return service->get(id); };
    auto rec = co_await off_thread(blocking, std::move(read));
    if (stop_flag) break;
    if (rec && cluster::is_terminal(rec->state)) co_return std::move(*rec);
    if (!rec && rec.error().is(Errc::not_found)) {
      log(LogLevel::warn, "webhook for run " + id + " to " + d.url +
                              " not delivered: the run is gone (" + rec.error().message + ")");
      break;
    }
    if (d.wake->version.load() != seen) continue;
    d.wake->timer.expires_after(o.check);
    auto [ec] = co_await d.wake->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
  }
  co_return std::nullopt;
}

awaitable<void> Webhooks::Impl::async_send(Delivery& d, json::object payload) {
  const auto ex = co_await asio::this_coro::executor;
  auto url = http::parse_url(d.where.origin);
  if (!url) {  // read_webhook_url took it: not expected
    log(LogLevel::warn,
        "webhook for run " + d.run_id + " to " + d.url + " not delivered: " + url.error().message);
    co_return;
  }
  std::string last;
  int attempt = 0;
  while (!stop_flag && attempt < o.max_attempts) {
    ++attempt;
    payload["webhook_sent_at"] = iso_time(unix_ms());
    http::ClientRequest rq;
    rq.method = "POST";
    rq.target = d.where.target;
    rq.headers.push_back({"Content-Type", "application/json"});
    rq.headers.push_back({"User-Agent", std::string("weir/") + WEIR_VERSION_STRING});
    rq.body = json::serialize(payload);
    auto op = client->async_request(*url, std::move(rq));
    auto token = asio::bind_cancellation_slot(d.cancel.slot(), asio::as_tuple(asio::use_awaitable));
    auto [e, r] = co_await asio::co_spawn(ex, std::move(op), token);
    bool again = true;
    if (e) {
      last = "the request threw";
    } else if (!r) {
      last = r.error().message;
    } else if (r->status >= 200 && r->status < 300) {
      log(LogLevel::info, "webhook for run " + d.run_id + " delivered to " + d.url + " (HTTP " +
                              std::to_string(r->status) + ", try " + std::to_string(attempt) + ")");
      co_return;
    } else {
      last = "HTTP " + std::to_string(r->status) + " " + r->reason;
      again = r->status >= 500 || r->status == 429 || r->status == 408;
    }
    if (!again || stop_flag || attempt >= o.max_attempts) break;
    auto wait = o.backoff * (1 << std::min(attempt - 1, 10));
    wait = std::min<std::chrono::milliseconds>(wait, std::chrono::seconds(30));
    std::uniform_real_distribution<double> jitter(0.75, 1.0);
    thread_local std::minstd_rand g{std::random_device{}()};
    d.pause.expires_after(std::chrono::duration_cast<std::chrono::milliseconds>(wait * jitter(g)));
    auto [ec] = co_await d.pause.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
  }
  log(LogLevel::warn, "webhook for run " + d.run_id + " to " + d.url + " not delivered after " +
                          std::to_string(attempt) + (attempt == 1 ? " try" : " tries") +
                          (stop_flag ? " (the server stopped)" : "") + ": " +
                          (last.empty() ? "not sent" : last));
}

awaitable<void> Webhooks::Impl::async_deliver(std::shared_ptr<Delivery> d) {
  deliveries.insert(d);
  auto end = co_await async_ended(*d);
  if (end) {
    cluster::RunService* service = &runs;
    const RunRecord rec = *end;
    auto build = [service, rec] { return payload_of(*service, rec); };
    auto payload = co_await off_thread(blocking, std::move(build));
    if (!payload)
      log(LogLevel::warn,
          "webhook for run " + d->run_id + " to " + d->url +
              " not delivered: reading the run's state: " + payload.error().message);
    else if (!stop_flag)
      co_await async_send(*d, std::move(*payload));
  }
  deliveries.erase(d);
}

Webhooks::Webhooks(WebhookOptions options, cluster::RunService& runs, asio::thread_pool& blocking)
    : impl_(std::make_shared<Impl>(std::move(options), runs, blocking)) {
  impl_->thread = std::thread([s = impl_.get()] { s->io.run(); });
}

Webhooks::~Webhooks() {
  stop();
}

Status Webhooks::check(std::string_view url) const {
  auto w = read_webhook_url(url);
  if (!w) return std::move(w).error();
  if (impl_->o.hosts.empty())
    return Error(Errc::invalid_argument,
                 "'webhook': this server calls no webhooks; start it with --webhook-hosts "
                 "naming the hosts it may call (docs/langgraph-api.md \"Webhooks\")");
  if (!webhook_host_allowed(impl_->o.hosts, w->host, w->port))
    return Error(Errc::invalid_argument, "'webhook': host '" + escape_control(w->host) + ":" +
                                             w->port +
                                             "' is not one this server may call (--webhook-hosts " +
                                             joined(impl_->o.hosts) + ")");
  return {};
}

Status Webhooks::deliver(const std::string& run_id, const std::string& url) {
  auto w = read_webhook_url(url);
  if (!w) return std::move(w).error();
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) return Error(Errc::cancelled, "the server is shutting down");
    if (impl_->live >= impl_->o.max_pending)
      return Error(Errc::overloaded, "webhooks: " + std::to_string(impl_->live) +
                                         " deliveries are pending already (at most " +
                                         std::to_string(impl_->o.max_pending) + ")");
    ++impl_->live;
  }
  auto d = std::make_shared<Delivery>(impl_->io.get_executor());
  d->run_id = run_id;
  d->url = url;
  d->where = std::move(*w);
  auto s = impl_;
  asio::co_spawn(impl_->io, impl_->async_deliver(std::move(d)), [s](std::exception_ptr e) {
    if (e) log(LogLevel::error, "webhooks: a delivery stopped on an exception");
    std::lock_guard lock(s->mu);
    --s->live;
    s->cv.notify_all();
  });
  return {};
}

void Webhooks::stop() {
  auto& s = *impl_;
  std::size_t pending = 0;
  {
    std::lock_guard lock(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    pending = s.live;
  }
  s.stop_flag = true;
  asio::post(s.io, [&s] {
    for (const auto& d : s.deliveries) {
      d->wake->timer.cancel();
      d->pause.cancel();
      d->cancel.emit(asio::cancellation_type::terminal);
    }
  });
  {
    std::unique_lock lock(s.mu);
    s.cv.wait(lock, [&] { return s.live == 0; });
  }
  if (pending > 0)
    log(LogLevel::warn, "webhooks: " + std::to_string(pending) +
                            " not delivered: the server stopped before their runs ended or "
                            "while they were sent");
  s.guard.reset();
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
}

}  // namespace weir::serve
