#include <algorithm>
#include <cstdlib>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "mcp_http.hpp"
#include "mcp_stdio.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/jsonrpc.hpp"
#include "weir/tools/mcp.hpp"

namespace weir::tools {

namespace asio = boost::asio;
namespace json = boost::json;
namespace rpc = jsonrpc;
using namespace std::chrono_literals;
using Reply = Result<json::value>;
using Chan = asio::experimental::concurrent_channel<void(boost::system::error_code, Reply)>;

// A completion handler for the client's own coroutines: an exception (a bug) is logged, never
// lost silently; the calls it strands still end at their timeouts.
auto log_exception(std::string who) {
  return [who = std::move(who)](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      weir::log(LogLevel::error, who + ": internal error: " + x.what());
    } catch (...) {
      weir::log(LogLevel::error, who + ": internal error");
    }
  };
}

// Everything below the public API runs on `ioc`'s one thread unless it says otherwise.
struct McpClient::Impl {
  enum class State { connecting, ready, restarting, failed, stopped };
  struct Pending {
    std::shared_ptr<Chan> chan;
    std::string what;  // "tool 'echo'", "initialize"
    bool sent = false;
  };

  explicit Impl(McpServerConfig c) : cfg(std::move(c)), work(ioc.get_executor()) {}

  std::string who() const { return "mcp server '" + cfg.name + "'"; }

  // --- requests -------------------------------------------------------------------------
  // Registers a request; it is written now when `now` (the handshake) or the server is ready,
  // else held until the next handshake completes.
  Status start_request(std::string method, json::value params, std::string what,
                       std::shared_ptr<Chan> chan, bool now) {
    if (state == State::failed || state == State::stopped)
      return Error(Errc::tool_failed, who() + " is down: " + last_error);
    if (pending.size() >= cfg.max_in_flight)
      return Error(Errc::overloaded, who() + ": " + std::to_string(pending.size()) +
                                         " requests are already in flight (max_in_flight=" +
                                         std::to_string(cfg.max_in_flight) + ")");
    const std::int64_t id = next_id++;
    std::string line = rpc::request(json::value(id), method, params);
    if (now || state == State::ready) {
      if (auto s = enqueue(std::move(line)); !s) return s;
      pending.emplace(id, Pending{std::move(chan), std::move(what), true});
    } else {
      if (held.size() >= cfg.max_write_queue)
        return Error(Errc::overloaded, who() + ": " + std::to_string(held.size()) +
                                           " calls wait for the server to restart");
      held.emplace_back(id, std::move(line));
      pending.emplace(id, Pending{std::move(chan), std::move(what), false});
    }
    return {};
  }

  Status enqueue(std::string line) {
    if (out_queue.size() >= cfg.max_write_queue)
      return Error(Errc::overloaded, who() + ": " + std::to_string(out_queue.size()) +
                                         " messages wait to be written (max_write_queue=" +
                                         std::to_string(cfg.max_write_queue) + ")");
    out_queue.push_back(std::move(line));
    if (!writing && transport) {
      writing = true;
      asio::co_spawn(ioc, writer(generation, transport), log_exception(who()));
    }
    return {};
  }

  // The caller gave up on the request whose answer goes to `chan`: forget it and tell the
  // server (notifications/cancelled) when it was sent.
  void cancel_request(const std::shared_ptr<Chan>& chan, std::string reason) {
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->second.chan != chan) continue;
      const std::int64_t id = it->first;
      const bool sent = it->second.sent;
      pending.erase(it);
      if (sent) {
        (void)enqueue(
            rpc::notification("notifications/cancelled",
                              json::object{{"requestId", id}, {"reason", std::move(reason)}}));
      } else {
        std::erase_if(held, [&](const auto& h) { return h.first == id; });
      }
      return;
    }
  }

  // Awaited on the I/O thread (the handshake): one request, its answer or an error.
  asio::awaitable<Reply> request(std::string method, json::value params,
                                 std::chrono::steady_clock::time_point deadline) {
    using namespace asio::experimental::awaitable_operators;
    auto chan = std::make_shared<Chan>(ioc, 1);
    if (auto s = start_request(method, std::move(params), method, chan, true); !s)
      co_return std::move(s).error();
    asio::steady_timer timer(ioc, deadline);
    auto won = co_await (chan->async_receive(asio::as_tuple(asio::use_awaitable)) ||
                         timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (won.index() == 1) {
      cancel_request(chan, "timeout");
      co_return Error(Errc::tool_timeout, who() + " did not answer '" + method + "' within " +
                                              std::to_string(cfg.connect_timeout.count()) +
                                              " ms (connect_timeout)");
    }
    co_return std::move(std::get<1>(std::get<0>(won)));
  }

  // --- the connection -------------------------------------------------------------------
  asio::awaitable<void> writer(std::uint64_t gen, std::shared_ptr<Transport> t) {
    while (gen == generation && !out_queue.empty()) {
      std::string line = std::move(out_queue.front());
      out_queue.pop_front();
      auto op = t->async_write_message(std::move(line));
      auto s = co_await std::move(op);
      if (!s) {
        if (gen == generation) writing = false;
        down(gen, s.error().message);
        co_return;
      }
    }
    if (gen == generation) writing = false;
  }

  asio::awaitable<void> reader(std::uint64_t gen, std::shared_ptr<Transport> t) {
    while (gen == generation) {
      auto line = co_await t->async_read_message();
      if (gen != generation) co_return;
      if (!line) {
        down(gen, line.error().message);
        co_return;
      }
      dispatch(*line);
    }
  }

  void dispatch(const std::string& line) {
    auto m = rpc::parse(line);
    if (!m) {
      const std::string msg = who() + " sent a malformed message (" + m.error().message +
                              "): " + escape_control(line, 200);
      weir::log(LogLevel::warn, msg);
      // The answer it broke cannot be told apart: every request in flight gets the reason.
      for (auto it = pending.begin(); it != pending.end();) {
        if (!it->second.sent) {
          ++it;
          continue;
        }
        it->second.chan->try_send(boost::system::error_code{},
                                  Reply(Error(Errc::tool_failed, msg)));
        it = pending.erase(it);
      }
      return;
    }
    switch (m->kind) {
      case rpc::Kind::response:
      case rpc::Kind::error: {
        if (!m->id.is_int64()) return;
        auto it = pending.find(m->id.get_int64());
        if (it == pending.end()) return;  // an answer to a call that timed out
        Reply r =
            m->kind == rpc::Kind::response
                ? Reply(std::move(m->result))
                : Reply(Error(Errc::tool_failed, "JSON-RPC error " + std::to_string(m->error_code) +
                                                     ": " + m->error_message));
        it->second.chan->try_send(boost::system::error_code{}, std::move(r));
        pending.erase(it);
        return;
      }
      case rpc::Kind::request:
        if (m->method == "ping")
          (void)enqueue(rpc::response(m->id, json::object{}));
        else
          (void)enqueue(
              rpc::error_response(m->id, rpc::kMethodNotFound, "Method not found: " + m->method));
        return;
      case rpc::Kind::notification:
        if (m->method == "notifications/tools/list_changed" && state == State::ready)
          asio::co_spawn(ioc, refresh_tools(generation), log_exception(who()));
        return;
    }
  }

  asio::awaitable<Status> list_tools(std::chrono::steady_clock::time_point deadline) {
    std::vector<McpToolInfo> out;
    json::value cursor;
    for (int page = 0; page < 1000; ++page) {
      json::object params;
      if (!cursor.is_null()) params["cursor"] = cursor;
      auto op = request("tools/list", std::move(params), deadline);
      auto r = co_await std::move(op);
      if (!r) co_return Error(r.error().code, who() + ": tools/list: " + r.error().message);
      const auto* o = r->if_object();
      const auto* tools = o ? o->if_contains("tools") : nullptr;
      if (!tools || !tools->is_array())
        co_return Error(Errc::corrupt_data,
                        who() + ": tools/list answered without a \"tools\" array");
      for (const auto& t : tools->get_array()) {
        const auto* to = t.if_object();
        const auto* name = to ? to->if_contains("name") : nullptr;
        if (!name || !name->is_string())
          co_return Error(Errc::corrupt_data, who() + ": tools/list: a tool without a name");
        McpToolInfo info;
        info.name = name->get_string();
        if (const auto* d = to->if_contains("description"); d && d->is_string())
          info.description = d->get_string();
        if (const auto* s = to->if_contains("inputSchema"); s && s->is_object())
          info.input_schema = s->get_object();
        else
          info.input_schema = json::object{{"type", "object"}};
        out.push_back(std::move(info));
      }
      const auto* next = o->if_contains("nextCursor");
      if (!next || next->is_null()) {
        std::lock_guard lock(mu);
        tool_list = std::move(out);
        co_return Status{};
      }
      cursor = *next;
    }
    co_return Error(Errc::corrupt_data, who() + ": tools/list did not end after 1000 pages");
  }

  asio::awaitable<void> refresh_tools(std::uint64_t gen) {
    auto s = co_await list_tools(std::chrono::steady_clock::now() + cfg.connect_timeout);
    if (!s && gen == generation)
      weir::log(LogLevel::warn, "refreshing the tools failed: " + s.error().message);
  }

  asio::awaitable<void> run_connection(std::uint64_t gen) {
    const auto deadline = std::chrono::steady_clock::now() + cfg.connect_timeout;
    if (cfg.url.empty()) {
      auto t = detail::StdioTransport::spawn(ioc.get_executor(), cfg);
      if (!t) {
        down(gen, t.error().message, t.error().code);
        co_return;
      }
      transport = std::shared_ptr<Transport>(std::move(*t));
    } else {
      auto t = detail::HttpTransport::open(ioc.get_executor(), cfg);
      if (!t) {
        down(gen, t.error().message, t.error().code);
        co_return;
      }
      transport = std::shared_ptr<Transport>(std::move(*t));
    }
    asio::co_spawn(ioc, reader(gen, transport), log_exception(who()));
    json::object init{{"protocolVersion", std::string(kMcpProtocolVersion)},
                      {"capabilities", json::object{}},
                      {"clientInfo", json::object{{"name", "weir"}, {"version", "0.1"}}}};
    auto op = request("initialize", std::move(init), deadline);
    auto r = co_await std::move(op);
    if (gen != generation) co_return;
    if (!r) {
      down(gen, "initialize: " + r.error().message, r.error().code);
      co_return;
    }
    const auto* o = r->if_object();
    const auto* v = o ? o->if_contains("protocolVersion") : nullptr;
    if (!v || !v->is_string()) {
      down(gen, "initialize answered without a protocolVersion", Errc::corrupt_data);
      co_return;
    }
    const std::string version(v->get_string());
    if (std::find(std::begin(kMcpSupportedVersions), std::end(kMcpSupportedVersions), version) ==
        std::end(kMcpSupportedVersions)) {
      std::string list;
      for (auto s : kMcpSupportedVersions) list += (list.empty() ? "" : ", ") + std::string(s);
      down(gen, "answered protocol version '" + version + "'; weir supports " + list,
           Errc::unsupported);
      co_return;
    }
    {
      std::lock_guard lock(mu);
      negotiated = version;
    }
    transport->set_protocol_version(version);
    (void)enqueue(rpc::notification("notifications/initialized", {}));
    state = State::ready;  // tools/list goes out like any request from here on
    auto s = co_await list_tools(deadline);
    if (gen != generation) co_return;
    if (!s) {
      down(gen, s.error().message, s.error().code);
      co_return;
    }
    consecutive = 0;
    for (auto& [id, line] : held) {
      if (auto it = pending.find(id); it != pending.end()) it->second.sent = true;
      (void)enqueue(std::move(line));
    }
    held.clear();
    if (!connected_once) {
      connected_once = true;
      first.set_value(Status{});
    }
  }

  // The connection of generation `gen` ended: fail what waits on it, then restart (bounded).
  void down(std::uint64_t gen, std::string why,
            std::error_code code = make_error_code(Errc::io_error)) {
    if (gen != generation || state == State::stopped) return;
    ++generation;
    writing = false;
    out_queue.clear();
    if (transport) transport->close();
    transport.reset();
    std::string msg = why.starts_with(who()) ? why : who() + ": " + why;
    for (auto it = pending.begin(); it != pending.end();) {
      if (!it->second.sent) {
        ++it;
        continue;
      }
      it->second.chan->try_send(
          boost::system::error_code{},
          Reply(Error(Errc::tool_failed, msg + " (during " + it->second.what + ")")));
      it = pending.erase(it);
    }
    last_error = msg;
    if (!connected_once) {  // the first connection: connect() reports it, nothing restarts
      state = State::failed;
      fail_all(Error(code, msg));
      first.set_value(Error(code, msg));
      return;
    }
    if (consecutive >= cfg.max_restarts) {
      state = State::failed;
      last_error = msg + "; gave up after " + std::to_string(consecutive) +
                   " restarts (max_restarts=" + std::to_string(cfg.max_restarts) + ")";
      weir::log(LogLevel::error, last_error);
      fail_all(Error(Errc::tool_failed, last_error));
      return;
    }
    const auto delay = cfg.restart_backoff * (1 << std::min(consecutive, 16));
    ++consecutive;
    restarts_count.fetch_add(1);
    state = State::restarting;
    weir::log(LogLevel::warn, msg + "; restarting in " + std::to_string(delay.count()) + " ms");
    auto timer = std::make_shared<asio::steady_timer>(ioc, delay);
    timer->async_wait([this, timer, g = generation](boost::system::error_code ec) {
      if (ec || g != generation || state == State::stopped) return;
      state = State::connecting;
      asio::co_spawn(ioc, run_connection(g), log_exception(who()));
    });
  }

  void fail_all(const Error& e) {
    for (auto& [id, p] : pending) p.chan->try_send(boost::system::error_code{}, Reply(e));
    pending.clear();
    held.clear();
  }

  void stop() {
    state = State::stopped;
    ++generation;
    fail_all(Error(Errc::cancelled, who() + " was shut down"));
    if (transport) transport->close();
    transport.reset();
  }

  McpServerConfig cfg;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::thread thread;
  std::promise<Status> first;  // the first handshake's outcome, for connect()
  bool connected_once = false;

  // Confined to the I/O thread.
  State state = State::connecting;
  std::uint64_t generation = 0;  // one per connection; coroutines of an older one stop
  std::shared_ptr<Transport> transport;
  std::int64_t next_id = 1;
  std::map<std::int64_t, Pending> pending;
  std::deque<std::pair<std::int64_t, std::string>> held;  // calls waiting for a handshake
  std::deque<std::string> out_queue;
  bool writing = false;
  std::string last_error;
  std::int32_t consecutive = 0;

  std::atomic<std::int64_t> restarts_count{0};
  mutable std::mutex mu;
  std::vector<McpToolInfo> tool_list;  // GUARDED_BY(mu)
  std::string negotiated;              // GUARDED_BY(mu)
};

McpClient::McpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::shared_ptr<McpClient>> McpClient::connect(McpServerConfig config) {
  if (config.name.empty() || config.name.find('/') != std::string::npos)
    return Error(Errc::invalid_argument,
                 "mcp server '" + config.name + "': a server needs a name without '/'");
  if (config.command.empty() == config.url.empty())
    return Error(Errc::invalid_argument,
                 "mcp server '" + config.name +
                     "': give either \"command\" (a server weir starts, stdio) or \"url\" "
                     "(Streamable HTTP)");
  // A secret header: read from the environment now, never from a file, never logged.
  for (const auto& [header, variable] : config.headers_env) {
    const char* value = std::getenv(variable.c_str());
    if (!value || !*value)
      return Error(Errc::invalid_argument, "mcp server '" + config.name + "': headers_env '" +
                                               header + "': the environment variable '" + variable +
                                               "' is unset or empty");
    config.headers.emplace_back(header, value);
  }
  config.headers_env.clear();
  if (config.max_message_bytes < 1024 || config.max_in_flight < 1 || config.max_write_queue < 1 ||
      config.max_restarts < 0)
    return Error(Errc::invalid_argument,
                 "mcp server '" + config.name +
                     "': max_message_bytes must be at least 1024, max_in_flight and "
                     "max_write_queue at least 1, max_restarts not negative");
  auto impl = std::make_unique<Impl>(std::move(config));
  Impl* p = impl.get();
  auto fut = p->first.get_future();
  p->thread = std::thread([p] { p->ioc.run(); });
  std::shared_ptr<McpClient> client(new McpClient(std::move(impl)));
  asio::post(p->ioc,
             [p] { asio::co_spawn(p->ioc, p->run_connection(0), log_exception(p->who())); });
  // run_connection bounds itself by connect_timeout; the margin covers spawning.
  if (fut.wait_for(p->cfg.connect_timeout + 5s) != std::future_status::ready)
    return Error(Errc::tool_timeout, "mcp server '" + p->cfg.name + "' did not start within " +
                                         std::to_string(p->cfg.connect_timeout.count()) + " ms");
  auto s = fut.get();
  if (!s) return std::move(s).error();
  return client;
}

McpClient::~McpClient() {
  Impl* p = impl_.get();
  std::promise<void> done;
  auto fut = done.get_future();
  asio::post(p->ioc, [p, &done] {
    p->stop();
    done.set_value();
  });
  fut.wait();
  p->work.reset();
  p->ioc.stop();
  if (p->thread.get_id() == std::this_thread::get_id())
    p->thread.detach();
  else if (p->thread.joinable())
    p->thread.join();
}

const McpServerConfig& McpClient::config() const {
  return impl_->cfg;
}

std::string McpClient::protocol_version() const {
  std::lock_guard lock(impl_->mu);
  return impl_->negotiated;
}

std::vector<McpToolInfo> McpClient::tools() const {
  std::lock_guard lock(impl_->mu);
  return impl_->tool_list;
}

std::int64_t McpClient::restarts() const {
  return impl_->restarts_count.load();
}

asio::awaitable<Result<json::object>> McpClient::async_call_tool(
    std::string tool, json::object arguments, std::chrono::milliseconds timeout) {
  return async_call_tool(std::move(tool), std::move(arguments), timeout, trace::Context{});
}

asio::awaitable<Result<json::object>> McpClient::async_call_tool(std::string tool,
                                                                 json::object arguments,
                                                                 std::chrono::milliseconds timeout,
                                                                 trace::Context trace) {
  using namespace asio::experimental::awaitable_operators;
  Impl* p = impl_.get();
  auto ex = co_await asio::this_coro::executor;
  // The channel lives on the client's io_context, not the caller's: the client may hold it
  // (a request the server has not answered) after the caller's io_context is gone.
  auto chan = std::make_shared<Chan>(p->ioc.get_executor(), 1);
  const std::string what = "tool '" + tool + "'";
  json::object params{{"name", tool}, {"arguments", std::move(arguments)}};
  trace::Span span = trace.start("tools/call " + tool, trace::SpanKind::client);
  if (span) {
    span.set("mcp.method.name", "tools/call");
    span.set(trace::attr::kToolName, tool);
    span.set("weir.mcp.server", p->cfg.name);
    const trace::SpanContext sc = span.context();
    json::object meta{{"traceparent", trace::format_traceparent(sc)}};
    if (!sc.trace_state.empty()) meta["tracestate"] = sc.trace_state;
    params["_meta"] = std::move(meta);
  }
  asio::post(p->ioc, [p, chan, what, params = std::move(params)]() mutable {
    if (auto s = p->start_request("tools/call", std::move(params), what, chan, false); !s)
      chan->try_send(boost::system::error_code{}, Reply(std::move(s).error()));
  });
  asio::steady_timer timer(ex, timeout);
  auto won = co_await (chan->async_receive(asio::as_tuple(asio::use_awaitable)) ||
                       timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  const std::string prefix = "mcp server '" + p->cfg.name + "': " + what;
  if (won.index() == 1) {
    asio::post(p->ioc, [p, chan] { p->cancel_request(chan, "timeout"); });
    Error e(Errc::tool_timeout, prefix + " did not answer within " +
                                    std::to_string(timeout.count()) +
                                    " ms (the request was cancelled)");
    span.set_error(e);
    span.end();
    co_return e;
  }
  Reply r = std::move(std::get<1>(std::get<0>(won)));
  if (std::get<0>(std::get<0>(won))) {
    // The caller stopped waiting (a registry call whose caller was cancelled): the server is
    // told too, as on a timeout (the request stayed pending and the server worked on).
    asio::post(p->ioc, [p, chan] { p->cancel_request(chan, "cancelled"); });
    Error e(Errc::cancelled, prefix + ": the call was cancelled");
    span.set_error(e);
    span.end();
    co_return e;
  }
  if (!r) {
    Error e = std::move(r).error();
    if (!e.message.starts_with("mcp server '")) e.message = prefix + ": " + e.message;
    span.set_error(e);
    span.end();
    co_return e;
  }
  if (!r->is_object()) {
    Error e(Errc::tool_failed, prefix + ": the result is not an object");
    span.set_error(e);
    span.end();
    co_return e;
  }
  if (span) {
    const auto* is_error = r->get_object().if_contains("isError");
    if (is_error && is_error->is_bool() && is_error->get_bool())
      span.set_error("tool_error", "the tool answered isError: true");
    else
      span.set_ok();
  }
  span.end();  // not with the frame, which the caller's awaitable may keep alive
  co_return std::move(r->get_object());
}

}  // namespace weir::tools
