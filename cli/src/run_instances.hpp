// Starting many runs at once on one io_context (weir run of a crew file with --instances,
// weir demo) without losing any of them.
#pragma once

#include <exception>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

namespace weir::cli {

// Starts body(0) ... body(count - 1) on `io`, each with a completion handler (STYLE.md: run
// work is never spawned asio::detached): on_done(id, e) runs when instance `id` ends, however
// it ends, with the exception that escaped it (null when none). So a failure is counted and
// never lost, and a caller that waits for all `count` to end always sees them end.
// REQUIRES: `body` outlives io.run(): a lambda coroutine's closure is its coroutines' `this`
// (body is taken by reference for that reason). `on_done` is copied.
template <class Body, class OnDone>
void spawn_instances(boost::asio::io_context& io, int count, const Body& body, OnDone on_done) {
  for (int i = 0; i < count; ++i)
    boost::asio::co_spawn(io, body(i), [on_done, i](std::exception_ptr e) { on_done(i, e); });
}

}  // namespace weir::cli
