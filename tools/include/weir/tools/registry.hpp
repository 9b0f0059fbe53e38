// ToolRegistry: the tools a run may call, and the one place where tool calls are policed.
//
// async_call(name, args, ctx):
//   1. finds the tool (unknown -> Errc::not_found listing the tools, with a did-you-mean);
//   2. validates args against its schema (-> invalid_argument "tool: /pointer: problem");
//   3. takes a token from the tool's rate bucket (rate_per_minute, burst rate_burst), waiting
//      when the next token comes before the deadline, else failing with Errc::overloaded;
//   4. takes one of the tool's max_concurrency slots, waiting until the deadline at most;
//   5. runs the invocation as its own coroutine on the caller's executor and races it against
//      a steady_timer at the deadline (timeout counts from the call's start). On timeout the
//      call returns Errc::tool_timeout at once; the invocation goes on in the background, its
//      result is dropped, and its concurrency slot stays held until it really finishes (so a
//      tool that hangs forever eventually refuses new calls with tool_timeout, never piles up);
//   6. turns an exception from the tool into Errc::tool_failed ("tool 'x' threw: what"),
//      refuses output that is not valid UTF-8 or contains NUL bytes (tool_failed), and spills
//      output above max_output_bytes to ctx.artifacts: the caller sees the head (cut on a
//      character boundary) plus a note naming the artifact id.
//
// Synchronous tools (make_tool) run on the registry's own blocking pool (sync_threads threads)
// so they never block the caller's io_context; one that never returns keeps a pool thread.
//
// Lifetimes: background invocations keep their Tool, its limits and the blocking pool alive
// (shared ownership). The registry's destructor waits for running synchronous bodies, so destroy
// it before the io_contexts its callers run on; ctx.artifacts must outlive every invocation.
//
// Thread safety: add() and the lookups are safe from any thread (one mutex); async_call may run
// concurrently from any number of coroutines on any executors. `name` in async_call must stay
// valid until the call starts (the awaitable is lazy); it is copied then.
//
// GCC 12: do not pass temporaries with destructors (ToolContext{}, a json::object built in
// place) inside the co_await expression itself; build the awaitable first:
//   auto op = registry.async_call(name, std::move(args), ctx);
//   auto r = co_await std::move(op);
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "weir/runtime/error.hpp"
#include "weir/tools/tool.hpp"

namespace weir::tools {

struct RegistryOptions {
  std::size_t sync_threads = 4;             // the blocking pool for make_tool bodies
  std::size_t max_waiters_per_tool = 1024;  // calls queued for a tool's slots; beyond: overloaded
};

class ToolRegistry {
 public:
  ToolRegistry();
  explicit ToolRegistry(RegistryOptions options);
  ~ToolRegistry();
  ToolRegistry(const ToolRegistry&) = delete;
  ToolRegistry& operator=(const ToolRegistry&) = delete;

  // Errors (nothing added): invalid_argument on a null tool, an empty or duplicate name, a
  // schema that fails check_schema or is not of type "object", or options out of range
  // (timeout <= 0, max_concurrency < 1, rate_per_minute < 0, max_output_bytes == 0).
  Status add(std::shared_ptr<Tool> tool);
  std::shared_ptr<Tool> find(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted

  boost::asio::awaitable<Result<ToolOutput>> async_call(std::string_view name,
                                                        boost::json::object args, ToolContext ctx);

  // Invocations of `name` running now (timed-out ones that have not finished included).
  std::size_t in_flight(std::string_view name) const;

  struct Entry;  // internal: a tool with its limits, shared with background invocations

 private:
  // async_call without tracing, and inside its span (ToolContext::trace).
  boost::asio::awaitable<Result<ToolOutput>> call(std::string_view name, boost::json::object args,
                                                  ToolContext ctx);
  boost::asio::awaitable<Result<ToolOutput>> traced_call(std::string name, boost::json::object args,
                                                         ToolContext ctx);
  struct Shared;
  RegistryOptions options_;
  std::shared_ptr<Shared> shared_;  // the blocking pool, shared with background invocations
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>, std::less<>> tools_;  // GUARDED_BY(mu_)
};

}  // namespace weir::tools
