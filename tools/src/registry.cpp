#include "weir/tools/registry.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <variant>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/schema.hpp"

namespace weir::tools {

namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using Channel =
    asio::experimental::concurrent_channel<void(boost::system::error_code, Result<std::string>)>;

// One registered tool and its limits. Shared with background invocations.
struct ToolRegistry::Entry {
  Entry(std::shared_ptr<Tool> t, ToolOptions o, std::size_t max_waiters)
      : tool(std::move(t)),
        options(o),
        limiter("tool '" + tool->name() +
                    "' (max_concurrency=" + std::to_string(o.max_concurrency) + ")",
                static_cast<std::size_t>(o.max_concurrency), max_waiters),
        tokens(o.rate_burst > 0 ? o.rate_burst : o.rate_per_minute),
        last_refill(Clock::now()) {}

  // Token bucket: takes one token, possibly borrowing against the future. Returns how long the
  // caller must wait for its token, or nullopt (nothing taken) when that wait exceeds `budget`.
  std::optional<Clock::duration> take_token(Clock::duration budget) {
    if (options.rate_per_minute <= 0) return Clock::duration::zero();
    std::lock_guard lock(mu);
    const auto now = Clock::now();
    const double per_ns = options.rate_per_minute / 60e9;
    const double burst = options.rate_burst > 0 ? options.rate_burst : options.rate_per_minute;
    tokens = std::min(
        burst,
        tokens + std::chrono::duration<double, std::nano>(now - last_refill).count() * per_ns);
    last_refill = now;
    tokens -= 1;
    if (tokens >= 0) return Clock::duration::zero();
    const auto wait = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::nano>(-tokens / per_ns));
    if (wait > budget) {
      tokens += 1;
      return std::nullopt;
    }
    return wait;
  }

  std::shared_ptr<Tool> tool;
  ToolOptions options;
  Limiter limiter;
  std::mutex mu;
  double tokens;                  // GUARDED_BY(mu)
  Clock::time_point last_refill;  // GUARDED_BY(mu)
};

struct ToolRegistry::Shared {
  explicit Shared(std::size_t threads) : pool(std::max<std::size_t>(threads, 1)) {}
  ~Shared() { pool.join(); }
  asio::thread_pool pool;
};

namespace {

std::string timeout_message(const std::string& name, std::chrono::milliseconds t) {
  return "tool '" + name + "' did not answer within " + std::to_string(t.count()) + " ms";
}

// A call whose caller stopped waiting (a cancellation slot, a node's timeout, a run's cancel):
// before its tool started, while it waited for its slot, or while the tool ran.
Error call_cancelled(std::string_view name) {
  return Error(Errc::cancelled, "tool '" + std::string(name) + "': the call was cancelled");
}

// The invocation proper: runs on the caller's executor, possibly after the caller gave up.
// Holds `entry` (the tool, its limiter) and the blocking pool until it finishes. The slot
// (permit) is shared with the caller: it is returned when both are done with it, i.e. once the
// caller has consumed the output (checks, spill) or gave up. So at most max_concurrency outputs
// exist at once, however many callers wait: a 50 MB tool with max_concurrency 2 holds at most
// ~100 MB, not 50 MB per queued caller.
asio::awaitable<void> run_invocation(std::shared_ptr<ToolRegistry::Entry> entry,
                                     std::shared_ptr<void> pool_owner,
                                     std::shared_ptr<Limiter::Permit> permit, json::object args,
                                     ToolContext ctx, std::shared_ptr<Channel> chan) {
  Result<std::string> r;
  try {
    auto op = entry->tool->invoke(std::move(args), ctx);
    r = co_await std::move(op);
  } catch (const std::exception& e) {
    r = Error(Errc::tool_failed, "tool '" + entry->tool->name() + "' threw: " + e.what());
  } catch (...) {
    r = Error(Errc::tool_failed,
              "tool '" + entry->tool->name() + "' threw a non-standard exception");
  }
  chan->try_send(boost::system::error_code{}, std::move(r));
  permit.reset();  // the caller's reference (if it still waits) keeps the slot until it is done
}

asio::awaitable<void> wait_until(asio::steady_timer& timer) {
  co_await timer.async_wait(asio::use_awaitable);
}

// "unknown tool 'x'; did you mean 'y'? (available: ...)".
std::string unknown_tool(const std::string& name, const std::vector<std::string>& available) {
  std::string msg = "unknown tool '" + name + "'" + did_you_mean(name, available);
  if (available.empty()) return msg + " (no tools are registered)";
  msg += " (available: ";
  for (std::size_t i = 0; i < available.size(); ++i) msg += (i ? ", " : "") + available[i];
  return msg + ")";
}

// A tool's output as the caller gets it: refused when it is binary or invalid UTF-8; parsed for
// a json_output tool; above max_output_bytes, stored whole as an artifact (ctx.artifacts) and
// cut to its head plus a note naming it.
Result<ToolOutput> finish_output(const std::string& name, const ToolOptions& opt, std::string text,
                                 const ToolContext& ctx) {
  if (auto nul = text.find('\0'); nul != std::string::npos)
    return Error(Errc::tool_failed, "tool '" + name +
                                        "' returned binary output (a NUL byte at offset " +
                                        std::to_string(nul) + ")");
  if (auto bad = find_invalid_utf8(text))
    return Error(Errc::tool_failed,
                 "tool '" + name + "' returned invalid UTF-8 at byte " + std::to_string(*bad));
  ToolOutput result;
  result.output_bytes = text.size();
  if (text.size() <= opt.max_output_bytes || ctx.whole_output) {
    if (opt.json_output) {
      boost::system::error_code ec;
      json::value v = json::parse(text, ec);
      if (!ec) result.value = std::move(v);
    }
    result.content = std::move(text);
    return result;
  }
  const std::size_t head = utf8_cut(text, opt.max_output_bytes);
  std::string note = "\n[output truncated: showing the first " + std::to_string(head) + " of " +
                     std::to_string(text.size()) + " bytes; ";
  if (ctx.artifacts) {
    auto ref = ctx.artifacts->put(text, "text/plain", {}, ctx.owner);
    if (ref) {
      result.artifact_id = ref->id;
      note += "the full output is artifact " + ref->id + " (read it with the artifacts tool)]";
    } else {
      note += "the rest was lost: " + ref.error().message + "]";
    }
  } else {
    note += "the rest was dropped (no artifact store)]";
  }
  // A fresh string: the head of a 50 MB output must not keep 50 MB of capacity alive.
  result.content.reserve(head + note.size());
  result.content.append(text, 0, head);
  result.content += note;
  return result;
}

}  // namespace

ToolRegistry::ToolRegistry() : ToolRegistry(RegistryOptions{}) {}

ToolRegistry::ToolRegistry(RegistryOptions options)
    : options_(options), shared_(std::make_shared<Shared>(options.sync_threads)) {}

ToolRegistry::~ToolRegistry() = default;

Status ToolRegistry::add(std::shared_ptr<Tool> tool) {
  if (!tool) return Error(Errc::invalid_argument, "tool registry: cannot add a null tool");
  const std::string& name = tool->name();
  if (name.empty()) return Error(Errc::invalid_argument, "tool registry: a tool needs a name");
  const auto& schema = tool->parameters();
  if (auto s = check_schema(schema); !s)
    return Error(Errc::invalid_argument, "tool '" + name + "': " + s.error().message);
  const auto* type = schema.if_contains("type");
  if (!type || !type->is_string() || type->get_string() != "object")
    return Error(Errc::invalid_argument,
                 "tool '" + name + "': the parameters schema must have \"type\": \"object\"");
  const ToolOptions o = tool->options();
  if (o.timeout.count() <= 0)
    return Error(Errc::invalid_argument, "tool '" + name + "': timeout must be positive");
  if (o.max_concurrency < 1)
    return Error(Errc::invalid_argument, "tool '" + name + "': max_concurrency must be at least 1");
  if (o.rate_per_minute < 0 || o.rate_burst < 0)
    return Error(Errc::invalid_argument,
                 "tool '" + name + "': rate_per_minute and rate_burst must not be negative");
  if (o.max_output_bytes == 0)
    return Error(Errc::invalid_argument, "tool '" + name + "': max_output_bytes must be positive");
  std::lock_guard lock(mu_);
  if (tools_.contains(name))
    return Error(Errc::invalid_argument,
                 "tool registry: a tool named '" + name + "' is already registered");
  auto entry = std::make_shared<Entry>(tool, o, options_.max_waiters_per_tool);
  tools_.emplace(name, std::move(entry));
  return {};
}

std::shared_ptr<Tool> ToolRegistry::find(std::string_view name) const {
  std::lock_guard lock(mu_);
  auto it = tools_.find(name);
  return it == tools_.end() ? nullptr : it->second->tool;
}

std::vector<std::string> ToolRegistry::names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, unused] : tools_) out.push_back(name);
  return out;
}

std::size_t ToolRegistry::in_flight(std::string_view name) const {
  std::lock_guard lock(mu_);
  auto it = tools_.find(name);
  return it == tools_.end() ? 0 : it->second->limiter.in_use();
}

asio::awaitable<Result<ToolOutput>> ToolRegistry::async_call(std::string_view name,
                                                             json::object args, ToolContext ctx) {
  if (!ctx.trace) return call(name, std::move(args), std::move(ctx));
  return traced_call(std::string(name), std::move(args), std::move(ctx));
}

// The call inside an `execute_tool <name>` span (GenAI semantic conventions) with what weir's
// fences did to it: argument and output sizes, a spill to the artifact store, the error type.
asio::awaitable<Result<ToolOutput>> ToolRegistry::traced_call(std::string name, json::object args,
                                                              ToolContext ctx) {
  trace::Span span = trace::start_tool_span(ctx.trace, name, json::serialize(args), ctx.call_id);
  ctx.trace = ctx.trace.child(span);
  auto op = call(name, std::move(args), std::move(ctx));
  Result<ToolOutput> r = Error(Errc::cancelled, "");
  try {
    r = co_await std::move(op);
  } catch (const boost::system::system_error& e) {
    // A wait of the call that the caller's cancellation cut (the slot's, the rate limit's):
    // a result, as every other outcome (it escaped async_call).
    if (e.code() != asio::error::operation_aborted) throw;
    r = call_cancelled(name);
  }
  if (r)
    trace::set_tool_output(span, r->output_bytes, r->content, r->artifact_id);
  else
    span.set_error(r.error());
  span.end();  // not with the frame, which the caller's awaitable may keep alive
  co_return r;
}

asio::awaitable<Result<ToolOutput>> ToolRegistry::call(std::string_view name_in, json::object args,
                                                       ToolContext ctx) {
  using namespace asio::experimental::awaitable_operators;
  const std::string name(name_in);
  const auto start = Clock::now();
  std::shared_ptr<Entry> entry;
  std::vector<std::string> available;
  {
    std::lock_guard lock(mu_);
    if (auto it = tools_.find(name); it != tools_.end()) entry = it->second;
    if (!entry)
      for (const auto& [n, unused] : tools_) available.push_back(n);
  }
  if (!entry) co_return Error(Errc::not_found, unknown_tool(name, available));
  const ToolOptions& opt = entry->options;
  if (auto s = validate(entry->tool->parameters(), args); !s)
    co_return Error(Errc::invalid_argument, name + ": " + s.error().message);

  const auto deadline = start + opt.timeout;
  auto ex = co_await asio::this_coro::executor;

  // Rate limit.
  auto wait = entry->take_token(deadline - Clock::now());
  if (!wait) {
    co_return Error(Errc::overloaded,
                    "tool '" + name + "': rate limit of " + std::to_string(opt.rate_per_minute) +
                        " calls per minute reached, and the next call slot opens after its " +
                        std::to_string(opt.timeout.count()) +
                        " ms timeout; retry later or raise rate_per_minute");
  }
  // The waits before the tool starts (the rate limit's, the slot's) throw operation_aborted once
  // the caller stopped waiting: the call then ends cancelled, and the tool is not started (an
  // exception escaped async_call, and a slot granted as the cancel came ran the tool to its end
  // with nobody waiting).
  if (*wait > Clock::duration::zero()) {
    asio::steady_timer t(ex, *wait);
    try {
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    } catch (const boost::system::system_error& e) {
      if (e.code() != asio::error::operation_aborted) throw;
      co_return call_cancelled(name);
    }
  }

  // Concurrency slot.
  Limiter::Permit permit;
  if (auto p = entry->limiter.try_acquire()) {
    permit = std::move(*p);
  } else {
    asio::steady_timer t(ex, deadline);
    auto acquire = entry->limiter.async_acquire();
    auto timed = wait_until(t);
    auto race = std::move(acquire) || std::move(timed);
    std::optional<std::variant<Result<Limiter::Permit>, std::monostate>> won;
    try {
      won = co_await std::move(race);
    } catch (const boost::system::system_error& e) {
      if (e.code() != asio::error::operation_aborted) throw;
      co_return call_cancelled(name);
    }
    if (won->index() == 1) {
      co_return Error(Errc::tool_timeout,
                      timeout_message(name, opt.timeout) + " (all " +
                          std::to_string(opt.max_concurrency) +
                          " of its concurrency slots stayed busy; max_concurrency=" +
                          std::to_string(opt.max_concurrency) + ")");
    }
    auto& r = std::get<0>(*won);
    if (!r) co_return std::move(r).error();
    permit = std::move(*r);
  }

  const auto cs = co_await asio::this_coro::cancellation_state;
  if (cs.cancelled() != asio::cancellation_type::none)
    co_return call_cancelled(name);  // the permit goes back

  // The invocation races a timer; both report through one channel, the first message wins. A
  // timeout marks the invocation abandoned (a blocking tool reads that); it runs on, holding its
  // slot, until it ends (an MCP tool's own timeout then cancels its request). A caller that
  // stops waiting (a node's timeout_ms, the run's deadline or cancel) also cancels the
  // invocation's wait, so a coroutine tool stops where it waits (a sleeping tool kept `weir run`
  // alive seconds after its node had failed). The signal is emitted on the invocation's strand
  // (within the caller's, when it has one).
  if (!ctx.blocking_executor) ctx.blocking_executor = shared_->pool.get_executor();
  auto chan = std::make_shared<Channel>(ex, 2);
  auto abandoned = std::make_shared<std::atomic<bool>>(false);
  auto stop = std::make_shared<asio::cancellation_signal>();  // lives until the invocation ends
  ctx.abandoned = abandoned;
  auto strand = asio::make_strand(ex);
  asio::steady_timer timer(strand, deadline);
  timer.async_wait(
      [chan, abandoned, msg = timeout_message(name, opt.timeout)](boost::system::error_code ec) {
        if (ec) return;
        abandoned->store(true, std::memory_order_relaxed);
        chan->try_send(boost::system::error_code{},
                       Result<std::string>(Error(Errc::tool_timeout, msg)));
      });
  auto slot = std::make_shared<Limiter::Permit>(std::move(permit));
  asio::co_spawn(strand, run_invocation(entry, shared_, slot, std::move(args), ctx, chan),
                 asio::bind_cancellation_slot(stop->slot(), [name, stop](std::exception_ptr e) {
                   if (e)
                     weir::log(LogLevel::error,
                               "tool '" + name + "': invocation ended with an exception");
                 }));
  // (No structured binding here: GCC 12 miscompiles them across co_await.)
  std::tuple<boost::system::error_code, Result<std::string>> received =
      co_await chan->async_receive(asio::as_tuple(asio::use_awaitable));
  timer.cancel();
  Result<std::string>& out = std::get<1>(received);
  if (std::get<0>(received)) {
    abandoned->store(true, std::memory_order_relaxed);
    asio::dispatch(strand, [stop] { stop->emit(asio::cancellation_type::terminal); });
    co_return call_cancelled(name);
  }
  if (!out) co_return std::move(out).error();

  co_return finish_output(name, opt, std::move(*out), ctx);
}

}  // namespace weir::tools
