// Tool: a named function a model may call, with a JSON Schema for its arguments.
//
// A tool declares its name, a description for the model, a JSON Schema (type: object) for its
// arguments and its ToolOptions (timeout, concurrency, rate, output cap). Callers normally go
// through ToolRegistry::async_call, which validates the arguments, applies the options and turns
// failures into errors; Tool::invoke itself sees only arguments that passed the schema.
//
// make_tool wraps a synchronous function: under a registry it runs on the registry's small
// blocking thread pool (ToolContext::blocking_executor), so a slow or stuck function never
// blocks the caller's io_context; called directly with no blocking executor it runs inline.
// make_async_tool wraps a coroutine, which runs on the caller's executor.
//
// Thread safety: Tool implementations must allow concurrent invoke() calls (the registry runs up
// to ToolOptions::max_concurrency at once). A Tool is shared (shared_ptr) by every caller.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/trace.hpp"

namespace weir {
class ArtifactStore;
}

namespace weir::tools {

struct ToolOptions {
  // From the call's start (rate wait and concurrency wait included) to its answer.
  std::chrono::milliseconds timeout{30000};
  std::int32_t max_concurrency = 8;      // concurrent invocations of this tool (all callers)
  std::int32_t rate_per_minute = 0;      // 0: unlimited; calls over the rate wait (bounded) or fail
  std::int32_t rate_burst = 0;           // token bucket size; 0: rate_per_minute (a minute's quota)
  std::size_t max_output_bytes = 16384;  // larger output -> artifact; the model sees head + ref
  // The output text is one JSON value (the calculator's number): the registry also returns it
  // parsed, in ToolOutput::value, so a workflow's tool node writes the number, not its text.
  bool json_output = false;
};

struct ToolContext {
  ArtifactStore* artifacts = nullptr;  // where oversized outputs go; may be null (then truncated)
  std::string owner;                   // artifact owner (the run id)
  // Where synchronous tool bodies run; set by ToolRegistry. Empty: they run inline.
  boost::asio::any_io_executor blocking_executor;
  // True once the caller's run was asked to stop (a workflow run's RunOptions::cancel); a tool
  // that waits a long time looks at it now and then (the `sleep` tool every 50 ms). May be null.
  std::shared_ptr<const std::atomic<bool>> cancel;
  // True once ToolRegistry stopped waiting for this call (its timeout passed, the caller has its
  // tool_timeout): a tool that waits a long time stops then too, so nothing outlives the call's
  // answer. Set by ToolRegistry.
  std::shared_ptr<const std::atomic<bool>> abandoned;
  // The caller takes the whole output and bounds it itself (a workflow's tool node: the graph's
  // payload fence moves a large value to the artifact store): max_output_bytes does not cut it.
  bool whole_output = false;
  // Tracing: ToolRegistry::async_call records an `execute_tool <name>` span under it and hands
  // the tool the context of that span (an MCP tool's call goes under it). Empty: not traced.
  trace::Context trace;
  std::string call_id;  // the model's id for this call (gen_ai.tool.call.id), when known
};

class Tool {
 public:
  virtual ~Tool() = default;
  virtual const std::string& name() const = 0;
  virtual const std::string& description() const = 0;
  virtual const boost::json::object& parameters() const = 0;  // JSON Schema (type: object)
  virtual ToolOptions options() const { return {}; }
  // Arguments already validated against parameters(). Returns the output text (valid UTF-8).
  // Expected failures are Errors (the registry passes them through); exceptions become
  // Errc::tool_failed at the registry.
  virtual boost::asio::awaitable<Result<std::string>> invoke(boost::json::object args,
                                                             const ToolContext& ctx) = 0;
};

// A Tool whose name, description, schema and options are fixed at construction: subclasses
// implement invoke() only. The built-ins and make_tool / make_async_tool derive from it.
class BasicTool : public Tool {
 public:
  BasicTool(std::string name, std::string description, boost::json::object parameters,
            ToolOptions options = {})
      : name_(std::move(name)),
        description_(std::move(description)),
        parameters_(std::move(parameters)),
        options_(options) {}
  const std::string& name() const override { return name_; }
  const std::string& description() const override { return description_; }
  const boost::json::object& parameters() const override { return parameters_; }
  ToolOptions options() const override { return options_; }

 private:
  std::string name_, description_;
  boost::json::object parameters_;
  ToolOptions options_;
};

using SyncToolFn =
    std::function<Result<std::string>(const boost::json::object&, const ToolContext&)>;
using AsyncToolFn = std::function<boost::asio::awaitable<Result<std::string>>(boost::json::object,
                                                                              const ToolContext&)>;

// A tool from a synchronous function. It runs on ctx.blocking_executor when one is set (the
// registry sets it): a function that blocks forever then holds one pool thread until it returns.
std::shared_ptr<Tool> make_tool(std::string name, std::string description,
                                boost::json::object parameters, SyncToolFn fn,
                                ToolOptions options = {});
// A tool from a coroutine function; it runs on the caller's executor. `fn` is kept by the tool
// for the tool's lifetime, so a lambda's captures outlive every invocation.
std::shared_ptr<Tool> make_async_tool(std::string name, std::string description,
                                      boost::json::object parameters, AsyncToolFn fn,
                                      ToolOptions options = {});

// What a call returns to the caller (and, as `content`, to the model).
struct ToolOutput {
  std::string content;  // <= max_output_bytes (+ a short note naming the artifact when spilled)
  std::optional<std::string> artifact_id;  // set when the full output was stored as an artifact
  std::uint64_t output_bytes = 0;          // full output size
  // The output parsed, for a tool with ToolOptions::json_output whose output was not cut.
  std::optional<boost::json::value> value;
};

}  // namespace weir::tools
