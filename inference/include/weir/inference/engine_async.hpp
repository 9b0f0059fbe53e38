// async_generate: the Asio front of the Engine, for coroutines:
//
//   auto result = co_await async_generate(engine, request, asio::use_awaitable);
//
// The only inference header that includes Asio (engine.hpp stays free of it). The completion
// runs on the awaiting operation's executor, never on the engine thread. Per-operation
// cancellation (a cancelled parent coroutine, a timeout) cancels the request: its blocks are
// freed and the result has finish reason `cancelled`. `on_token`, when given, runs on the
// engine thread for each token (keep it short; post elsewhere for real work).
//
// REQUIRES: the Engine outlives the operation.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include "weir/inference/engine.hpp"

namespace weir::inference {

template <class CompletionToken>
auto async_generate(Engine& engine, GenerateRequest request, CompletionToken&& token,
                    std::function<void(std::int32_t)> on_token = {}) {
  using Signature = void(Result<GenerateResult>);
  return boost::asio::async_initiate<CompletionToken, Signature>(
      [&engine](auto handler, GenerateRequest req, std::function<void(std::int32_t)> tok) {
        using Handler = decltype(handler);
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        auto ex = boost::asio::get_associated_executor(handler);
        auto shared = std::make_shared<Handler>(std::move(handler));
        RequestId id = engine.submit(
            std::move(req), {std::move(tok), [shared, ex, slot](Result<GenerateResult> r) mutable {
                               boost::asio::post(ex, [shared, slot, r = std::move(r)]() mutable {
                                 if (slot.is_connected()) slot.clear();
                                 std::move (*shared)(std::move(r));
                               });
                             }});
        if (slot.is_connected()) {
          slot.assign([&engine, id](boost::asio::cancellation_type) { engine.cancel(id); });
        }
      },
      token, std::move(request), std::move(on_token));
}

}  // namespace weir::inference
