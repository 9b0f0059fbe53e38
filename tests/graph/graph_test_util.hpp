// Helpers shared by the graph executor tests: run one coroutine to completion on a fresh
// io_context.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "weir/graph/state_graph.hpp"

namespace weir::graph::testing {

// Runs `graph` on `input` with `options` and, concurrently, `consumer` (may be null) on the
// same io_context; returns the run's result.
template <typename Consumer>
Result<RunResult> run_with(GraphRuntime& rt, std::shared_ptr<const CompiledGraph> graph,
                           boost::json::object input, RunOptions options, Consumer consumer) {
  boost::asio::io_context io;
  Result<RunResult> out = Error(Errc::cancelled, "not run");
  auto task = [&]() -> boost::asio::awaitable<void> {
    out = co_await rt.async_invoke(graph, std::move(input), std::move(options));
  };
  boost::asio::co_spawn(io, task(), boost::asio::detached);
  if constexpr (!std::is_same_v<Consumer, std::nullptr_t>)
    boost::asio::co_spawn(io, consumer(), boost::asio::detached);
  io.run();
  return out;
}

inline Result<RunResult> run(GraphRuntime& rt, std::shared_ptr<const CompiledGraph> graph,
                             boost::json::object input, RunOptions options = {}) {
  return run_with(rt, std::move(graph), std::move(input), std::move(options), nullptr);
}

inline Result<RunResult> resume(GraphRuntime& rt, std::shared_ptr<const CompiledGraph> graph,
                                std::string thread, boost::json::value value, RunOptions options) {
  boost::asio::io_context io;
  Result<RunResult> out = Error(Errc::cancelled, "not run");
  auto task = [&]() -> boost::asio::awaitable<void> {
    out = co_await rt.async_resume(graph, thread, std::move(value), std::move(options));
  };
  boost::asio::co_spawn(io, task(), boost::asio::detached);
  io.run();
  return out;
}

}  // namespace weir::graph::testing
