// bench_runtime: the cost of weir's runtime fences. Prints a table, or with --json one JSON
// object as the last line. Reproduce: build/bin/bench_runtime --json (see bench/README.md).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/metrics.hpp"

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

template <class F>
double ns_per_op(int n, F&& f) {
  f(n / 10);  // warm up
  auto t0 = Clock::now();
  f(n);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

template <class F>
double mb_per_s(std::size_t bytes_per_op, int n, F&& f) {
  auto t0 = Clock::now();
  f(n);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(bytes_per_op) * n / s / 1e6;
}

int main(int argc, char** argv) {
  const bool as_json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  boost::json::object out;

  weir::Limiter lim("bench", 1, 0);
  out["limiter_acquire_release_ns"] = ns_per_op(2'000'000, [&](int n) {
    for (int i = 0; i < n; ++i) lim.try_acquire();
  });
  {
    asio::io_context io;
    out["limiter_async_acquire_ns"] = ns_per_op(500'000, [&](int n) {
      auto task = [&](int k) -> asio::awaitable<void> {
        for (int i = 0; i < k; ++i) {
          auto p = co_await lim.async_acquire();
          (void)p;
        }
      };
      asio::co_spawn(io, task(n), asio::detached);
      io.restart();
      io.run();
    });
  }

  weir::MemoryBudget budget;
  out["budget_reserve_release_ns"] = ns_per_op(2'000'000, [&](int n) {
    for (int i = 0; i < n; ++i) (void)budget.try_reserve(weir::BudgetCategory::run_state, 4096);
  });

  auto& counter = weir::Registry::global().counter("bench_counter", "bench");
  out["metrics_counter_inc_ns"] = ns_per_op(5'000'000, [&](int n) {
    for (int i = 0; i < n; ++i) counter.inc();
  });

  const std::size_t blob = 1 << 20;
  auto dir = std::filesystem::temp_directory_path() /
             ("weir_bench_artifacts_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  for (const char* tier : {"memory", "disk"}) {
    const bool disk = std::strcmp(tier, "disk") == 0;
    // Memory tier: plenty of room. Disk tier: room for nothing, so every put is written out.
    auto store = *weir::ArtifactStore::open(
        {dir / tier, disk ? 1u : std::size_t{1} << 30, std::size_t{8} << 30, 200, nullptr});
    const int n = disk ? 64 : 256;
    std::vector<std::string> blobs(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      blobs[static_cast<std::size_t>(i)] = std::string(blob, static_cast<char>('a' + i % 26));
      std::memcpy(blobs[static_cast<std::size_t>(i)].data(), &i, sizeof i);  // distinct contents
    }
    std::vector<std::string> ids;
    out[std::string("artifact_put_mb_s_") + tier] = mb_per_s(blob, n, [&](int k) {
      for (int i = 0; i < k; ++i)
        ids.push_back(store->put(blobs[static_cast<std::size_t>(i)], "text/plain")->id);
    });
    std::size_t total = 0;
    out[std::string("artifact_get_mb_s_") + tier] = mb_per_s(blob, n, [&](int k) {
      for (int i = 0; i < k; ++i) total += store->get(ids[static_cast<std::size_t>(i)])->size();
    });
    if (total != blob * static_cast<std::size_t>(n)) return 1;
  }
  std::filesystem::remove_all(dir);

  if (!as_json) {
    for (const auto& [k, v] : out)
      std::printf("%-32s %12.1f\n", std::string(k).c_str(), v.as_double());
  }
  std::printf("%s\n", weir::to_json_text(out).c_str());
  return 0;
}
