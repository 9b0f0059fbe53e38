// weir run's driver for many crew instances at once (cli/src/run_instances.hpp): every instance
// is accounted for however it ends, so the process always exits.
#include "run_instances.hpp"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace weir::cli {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST(RunInstances, AnInstanceThatThrowsIsCountedAndTheOthersFinish) {
  asio::io_context io;
  std::atomic<int> remaining{4};
  std::vector<std::string> failures;
  int finished = 0;
  auto body = [&](int id) -> asio::awaitable<void> {
    asio::steady_timer t(io, std::chrono::milliseconds(5 * id));
    co_await t.async_wait(asio::use_awaitable);
    if (id == 1) throw std::runtime_error("a bug in instance 1");
    ++finished;
  };
  spawn_instances(io, 4, body, [&](int id, std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        failures.push_back(std::to_string(id) + ": " + x.what());
      }
    }
    --remaining;
  });
  // What weir run's progress sampler does: wait until every instance has ended.
  auto sampler = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(io);
    while (remaining.load() > 0) {
      t.expires_after(1ms);
      co_await t.async_wait(asio::use_awaitable);
    }
  };
  asio::co_spawn(io, sampler(), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  // The instance that threw once left `remaining` at 1 and the sampler looping for ever.
  io.run_for(10s);
  EXPECT_TRUE(io.stopped()) << "the io_context still had work: an instance was never counted";
  EXPECT_EQ(remaining.load(), 0);
  EXPECT_EQ(finished, 3);
  EXPECT_EQ(failures, std::vector<std::string>{"1: a bug in instance 1"});
}

}  // namespace
}  // namespace weir::cli
