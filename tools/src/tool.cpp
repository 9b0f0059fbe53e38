#include "weir/tools/tool.hpp"

#include <exception>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace weir::tools {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Runs fn(args, ctx) on `pool` and resumes the awaiting coroutine on its own executor.
// An exception thrown by fn is rethrown in the coroutine.
asio::awaitable<Result<std::string>> run_blocking(asio::any_io_executor pool, const SyncToolFn* fn,
                                                  json::object args, ToolContext ctx) {
  auto init = [pool, fn](auto handler, json::object args, ToolContext ctx) {
    auto work = asio::make_work_guard(asio::get_associated_executor(handler));
    asio::post(pool, [h = std::move(handler), w = std::move(work), fn, args = std::move(args),
                      ctx = std::move(ctx)]() mutable {
      std::exception_ptr ep;
      Result<std::string> r;
      try {
        r = (*fn)(args, ctx);
      } catch (...) {
        ep = std::current_exception();
      }
      auto ex = w.get_executor();
      asio::dispatch(ex, [h = std::move(h), ep, r = std::move(r)]() mutable {
        std::move(h)(ep, std::move(r));
      });
      w.reset();
    });
  };
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>,
                                          void(std::exception_ptr, Result<std::string>)>(
      std::move(init), asio::use_awaitable, std::move(args), std::move(ctx));
}

class SyncTool final : public BasicTool {
 public:
  SyncTool(std::string name, std::string description, json::object parameters, SyncToolFn fn,
           ToolOptions options)
      : BasicTool(std::move(name), std::move(description), std::move(parameters), options),
        fn_(std::move(fn)) {}
  asio::awaitable<Result<std::string>> invoke(json::object args, const ToolContext& ctx) override {
    if (!ctx.blocking_executor) co_return fn_(args, ctx);
    auto op = run_blocking(ctx.blocking_executor, &fn_, std::move(args), ctx);
    co_return co_await std::move(op);
  }

 private:
  SyncToolFn fn_;
};

class AsyncTool final : public BasicTool {
 public:
  AsyncTool(std::string name, std::string description, json::object parameters, AsyncToolFn fn,
            ToolOptions options)
      : BasicTool(std::move(name), std::move(description), std::move(parameters), options),
        fn_(std::move(fn)) {}
  asio::awaitable<Result<std::string>> invoke(json::object args, const ToolContext& ctx) override {
    auto op = fn_(std::move(args), ctx);
    co_return co_await std::move(op);
  }

 private:
  AsyncToolFn fn_;
};

}  // namespace

std::shared_ptr<Tool> make_tool(std::string name, std::string description, json::object parameters,
                                SyncToolFn fn, ToolOptions options) {
  return std::make_shared<SyncTool>(std::move(name), std::move(description), std::move(parameters),
                                    std::move(fn), options);
}

std::shared_ptr<Tool> make_async_tool(std::string name, std::string description,
                                      json::object parameters, AsyncToolFn fn,
                                      ToolOptions options) {
  return std::make_shared<AsyncTool>(std::move(name), std::move(description), std::move(parameters),
                                     std::move(fn), options);
}

}  // namespace weir::tools
