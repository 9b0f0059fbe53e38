// Helpers shared by the agents tests.
#pragma once

#include <functional>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "weir/runtime/error.hpp"

namespace weir::agents::testing {

// Runs the coroutine `fn` makes on a fresh io_context until everything on it is done.
template <class T>
Result<T> run_sync(std::function<boost::asio::awaitable<Result<T>>()> fn) {
  boost::asio::io_context io;
  Result<T> out = Error(Errc::cancelled, "not run");
  auto task = [&]() -> boost::asio::awaitable<void> { out = co_await fn(); };
  boost::asio::co_spawn(io, task(), boost::asio::detached);
  io.run();
  return out;
}

}  // namespace weir::agents::testing
