// bench_graph: the graph executor's hot path and its scale (see bench/README.md, "bench_graph").
// Single-threaded (Executor(1)). Prints one JSON object as its last line:
//   seq_us       3-node chain a->b->c on one last-value counter, µs per invocation (median)
//   par_us       fan-out to 5 workers appending to a list, then a join; µs per invocation
//   steps_per_s  supersteps per second in the chain benchmark
//   concurrent_runs / concurrent_peak_rss_mb / concurrent_wall_s
//                100,000 chain runs in flight at once, each node awaiting a 1 ms timer;
//                peak RSS above the baseline measured just before they start
// Usage: bench_graph [--json] [--runs N]
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include "weir/graph/runtime.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/runtime/executor.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/metrics.hpp"

namespace asio = boost::asio;
namespace json = boost::json;
using namespace weir;
using namespace weir::graph;
using Clock = std::chrono::steady_clock;

namespace {

double rss_mb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1024.0 * 1024.0);
}

std::shared_ptr<const CompiledGraph> chain(bool async) {
  StateGraph g;
  auto c = g.add_channel(ChannelDef::last_value("counter", 0));
  for (const char* n : {"a", "b", "c"}) {
    if (async)
      g.add_async_node(n, [c](StateView s, NodeContext&) -> asio::awaitable<Result<Update>> {
        auto v = s[c].as_int64();
        asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
        co_await t.async_wait(asio::use_awaitable);
        co_return Update().set(c, v + 1);
      });
    else
      g.add_node(n, [c](StateView s, NodeContext&) -> Result<Update> {
        return Update().set(c, s[c].as_int64() + 1);
      });
  }
  g.add_edge(std::string(kStart), "a");
  g.add_edge("a", "b");
  g.add_edge("b", "c");
  g.add_edge("c", std::string(kEnd));
  return *std::move(g).compile({.name = async ? "chain_async" : "chain"});
}

std::shared_ptr<const CompiledGraph> fanout() {
  StateGraph g;
  auto items = g.add_channel(ChannelDef::append("items"));
  auto count = g.add_channel(ChannelDef::last_value("count", 0));
  for (int i = 0; i < 5; ++i) {
    std::string name = "w" + std::to_string(i);
    g.add_node(name, [items, i](StateView, NodeContext&) -> Result<Update> {
      return Update().set(items, i);
    });
    g.add_edge(std::string(kStart), name);
    g.add_edge(name, "join");
  }
  g.add_node("join", [items, count](StateView s, NodeContext&) -> Result<Update> {
    return Update().set(count, static_cast<std::int64_t>(s[items].as_array().size()));
  });
  g.add_edge("join", std::string(kEnd));
  return *std::move(g).compile({.name = "fanout"});
}

// Median µs per invocation over `batches` batches of `per_batch` sequential invocations.
double time_sequential(Executor& ex, GraphRuntime& rt, std::shared_ptr<const CompiledGraph> g,
                       json::value input, int batches, int per_batch, bool* ok) {
  auto body = [&]() -> asio::awaitable<std::vector<double>> {
    std::vector<double> us;
    for (int b = 0; b < batches; ++b) {
      auto t0 = Clock::now();
      for (int i = 0; i < per_batch; ++i) {
        json::value in = input;
        RunConfig cfg;
        auto graph = g;
        Result<RunResult> r =
            co_await rt.async_invoke(std::move(graph), std::move(in), std::move(cfg));
        if (!r) *ok = false;
      }
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                   per_batch);
    }
    co_return us;
  };
  auto us = ex.run_sync(body());
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool json_only = false;
  int runs = 100000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json_only = true;
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
  }
  Executor ex(1);
  Registry reg;
  MemoryBudget budget;
  GraphRuntime rt(
      ex, &budget, nullptr, &reg, nullptr,
      {.max_concurrent_runs = static_cast<std::size_t>(runs) + 16, .max_queued_runs = 1024});
  bool ok = true;

  // Concurrency first, so that the baseline is not inflated by earlier phases.
  auto async_chain = chain(true);
  double base = rss_mb();
  std::atomic<double> peak{base};
  std::atomic<bool> sampling{true};
  const double heap_base = static_cast<double>(mallinfo2().uordblks);
  std::atomic<double> heap_peak{heap_base};
  std::thread sampler([&] {
    unsigned ticks = 0;
    while (sampling.load()) {
      double now = rss_mb();
      if (now > peak.load()) peak.store(now);
      // mallinfo2 walks the heap under its lock: sample it rarely so it does not slow the runs.
      if (++ticks % 20 == 0) {
        double heap = static_cast<double>(mallinfo2().uordblks);
        if (heap > heap_peak.load()) heap_peak.store(heap);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto t0 = Clock::now();
  int finished_ok = 0;
  {
    auto body = [&]() -> asio::awaitable<int> {
      auto exec = co_await asio::this_coro::executor;
      int done = 0, good = 0;
      asio::steady_timer all(exec, Clock::time_point::max());
      for (int i = 0; i < runs; ++i) {
        asio::co_spawn(exec, rt.async_invoke(async_chain, nullptr, RunConfig{}),
                       [&](std::exception_ptr e, Result<RunResult> r) {
                         if (!e && r && r->get("counter") == 3) ++good;
                         if (++done == runs) all.cancel();
                       });
      }
      boost::system::error_code ec;
      co_await all.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      co_return good;
    };
    finished_ok = ex.run_sync(body());
  }
  double concurrent_wall = std::chrono::duration<double>(Clock::now() - t0).count();
  sampling = false;
  sampler.join();
  if (finished_ok != runs) ok = false;

  auto seq = chain(false);
  json::value seq_in = json::object{{"counter", 0}};
  time_sequential(ex, rt, seq, seq_in, 3, 10000, &ok);  // warm-up
  double seq_us = time_sequential(ex, rt, seq, seq_in, 21, 20000, &ok);
  auto par = fanout();
  double par_us = time_sequential(ex, rt, par, nullptr, 21, 10000, &ok);

  json::object out;
  out["bench"] = "graph";
  out["threads"] = 1;
  out["seq_us"] = seq_us;
  out["par_us"] = par_us;
  out["steps_per_s"] = 3.0 / (seq_us * 1e-6);
  out["concurrent_runs"] = runs;
  out["concurrent_ok"] = finished_ok;
  out["concurrent_peak_rss_mb"] = peak.load() - base;
  out["concurrent_wall_s"] = concurrent_wall;
  out["concurrent_heap_bytes_per_run"] = (heap_peak.load() - heap_base) / runs;
  out["ok"] = ok;
  if (!json_only) {
    std::printf("seq (3-node chain):      %.3f us/invocation\n", seq_us);
    std::printf("par (5-way fan-out+join): %.3f us/invocation\n", par_us);
    std::printf("concurrent: %d runs, peak RSS +%.1f MB, %.2f s\n", runs, peak.load() - base,
                concurrent_wall);
  }
  std::printf("%s\n", json::serialize(out).c_str());
  return ok ? 0 : 1;
}
