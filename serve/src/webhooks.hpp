// Webhooks of the LangGraph Server API (a run's `webhook`, docs/langgraph-api.md "Webhooks"):
// when a run ends (success, error, interrupted, cancelled, before it started or after), this
// server POSTs the run to the URL, as LangGraph does: the run object with "status",
// "run_started_at", "run_ended_at", "webhook_sent_at", "values" (the thread's state when it ended;
// null for a cancelled run) and, for a failed run, "error" (its message).
//
// The server that accepted the run delivers it: it watches the run (RunService::watch, on either
// backend, so a run a PostgreSQL worker elsewhere finishes is seen here) and sends from a thread
// of its own with weir's HTTP client: each try has `timeout` (connect to last byte), a refused
// connection, a timeout or a 5xx/429 is tried again after `backoff` (doubling, with jitter) up to
// `max_attempts` tries, other statuses are not; a failure is logged (warn) naming the run, the
// URL and the last error. Nothing waits for a delivery: not the run, not a request, not the
// server's I/O or blocking threads. A server that stops (or dies) before the run ended, or while
// it sends, does not deliver it: webhooks are at most once, not durable.
//
// SSRF: the server makes the request, from its own network position. Only the hosts of the
// allow-list are called (ServeConfig::webhook_hosts, `--webhook-hosts`): "host" (any port),
// "host:port", "[v6]:port", or "*" (any host: only where every reachable address is harmless).
// The default, an empty list, calls none: a run with a webhook is refused (422) saying so.
// Hosts are compared by name as written in the URL (case-insensitive), before any DNS lookup.
//
// Thread safety: check() and deliver() from any thread; stop() once, from one.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include "weir/cluster/run_service.hpp"
#include "weir/runtime/error.hpp"

namespace weir::serve {

struct WebhookOptions {
  std::vector<std::string> hosts;             // the allow-list (see above); empty: none
  std::chrono::milliseconds timeout{10'000};  // one try, connect to the response's last byte
  int max_attempts = 4;                       // tries of one delivery (the first and 3 more)
  std::chrono::milliseconds backoff{1'000};   // before the second try; doubles, at most 30 s
  std::chrono::milliseconds check{5'000};     // a quiet run's record is read at least this often
  std::size_t max_pending = 1'000;            // deliveries waiting or sending; beyond: refused
};

// An allow-list entry that is not one: invalid_argument naming it.
Status check_webhook_hosts(const std::vector<std::string>& hosts);
// Whether `hosts` allows a webhook to host `host` (as parse_url gives it) on `port`.
bool webhook_host_allowed(const std::vector<std::string>& hosts, std::string_view host,
                          std::string_view port);

class Webhooks {
 public:
  // REQUIRES: `runs` and `blocking` outlive this, and stop() is called before they stop.
  Webhooks(WebhookOptions options, cluster::RunService& runs, boost::asio::thread_pool& blocking);
  ~Webhooks();  // stop()
  Webhooks(const Webhooks&) = delete;
  Webhooks& operator=(const Webhooks&) = delete;

  // Whether a run may ask for this webhook: a URL read_webhook_url takes, to an allowed host.
  // Errors: invalid_argument naming 'webhook' (a 422), with the allow-list or how to set one.
  Status check(std::string_view url) const;
  // POSTs run `run_id` to `url` when it ends (the run object carries the request's metadata).
  // REQUIRES: check(url) passed. Errors: overloaded (max_pending deliveries already), cancelled
  // (stopping).
  Status deliver(const std::string& run_id, const std::string& url);
  // Deliveries still waiting or sending are dropped (one log line says how many); blocks until
  // they let go (a try in flight is cut). Idempotent.
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace weir::serve
