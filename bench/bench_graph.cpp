// bench_graph: the state-graph executor's overhead and scale. Single-threaded.
// Reproduce: build/bin/bench_graph --json (or `seq` / `par`: one loop, for a profiler)
#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string_view>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/graph/state_graph.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/trace.hpp"

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
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

std::shared_ptr<const CompiledGraph> chain(bool async_nodes) {
  StateGraph b;
  b.add_channel("counter", {.default_value = 0});
  for (const char* n : {"a", "b", "c"}) {
    if (async_nodes) {
      b.add_async_node(n, [](StateView s, NodeContext&) -> asio::awaitable<Result<Update>> {
        asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
        co_await t.async_wait(asio::use_awaitable);
        co_return Update().set("counter", s.get("counter").as_int64() + 1);
      });
    } else {
      b.add_node(n, [](const StateView& s, NodeContext&) -> Result<Update> {
        return Update().set("counter", s.get("counter").as_int64() + 1);
      });
    }
  }
  b.add_edge("START", "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", "END");
  return *b.compile();
}

std::shared_ptr<const CompiledGraph> fan_out() {
  StateGraph b;
  b.add_channel("items", {.reducer = ReducerKind::append});
  b.add_channel("count", {});
  for (int i = 0; i < 5; ++i) {
    std::string n = "w" + std::to_string(i);
    b.add_node(n, [i](const StateView&, NodeContext&) -> Result<Update> {
      return Update().set("items", i);
    });
    b.add_edge("START", n).add_edge(n, "join");
  }
  b.add_node("join", [](const StateView& s, NodeContext&) -> Result<Update> {
    return Update().set("count", static_cast<std::int64_t>(s.get("items").as_array().size()));
  });
  b.add_edge("join", "END");
  return *b.compile();
}

// This thread's CPU time in µs: unlike the wall clock, it does not count time spent waiting for
// a core, so it stays comparable on a loaded machine.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

struct PerRun {
  double us = 0, cpu_us = 0;  // medians over batches of the wall and CPU µs per invocation
};

PerRun us_per_run(GraphRuntime& rt, std::shared_ptr<const CompiledGraph> g, int batches,
                  int per_batch, long& steps, const RunOptions* options = nullptr) {
  asio::io_context io;
  std::vector<double> samples, cpu_samples;
  auto loop = [&]() -> asio::awaitable<void> {
    for (int b = 0; b < batches; ++b) {
      auto t0 = Clock::now();
      const double c0 = thread_cpu_us();
      for (int i = 0; i < per_batch; ++i) {
        if (options) {
          // (Locals, not temporaries in the co_await: GCC 12 can destroy those twice.)
          RunOptions o = *options;
          auto op = rt.async_invoke(g, json::object(), std::move(o));
          auto r = co_await std::move(op);
          steps += r ? r->steps : 0;
        } else {
          json::object input;  // a local: no temporary inside a co_await (GCC 12)
          auto r = co_await rt.async_invoke(g, std::move(input));
          steps += r ? r->steps : 0;
        }
      }
      cpu_samples.push_back((thread_cpu_us() - c0) / per_batch);
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                        per_batch);
    }
  };
  asio::co_spawn(io, loop(), asio::detached);
  io.run();
  std::sort(samples.begin(), samples.end());
  std::sort(cpu_samples.begin(), cpu_samples.end());
  return {samples[samples.size() / 2], cpu_samples[cpu_samples.size() / 2]};
}

// A trace exporter that takes every batch and keeps nothing: what tracing costs a run when the
// receiver is free (the spans are built, queued and encoded as OTLP/JSON, then dropped here).
class DiscardExporter final : public trace::SpanExporter {
 public:
  std::string describe() const override { return "discard"; }
  Status export_json(std::string_view body, std::size_t spans,
                     const trace::ExportDeadline&) override {
    bytes += body.size();
    this->spans += spans;
    return {};
  }
  std::size_t bytes = 0, spans = 0;
};

// The node body of the concurrency test without a graph: await a 1 ms timer, return n + 1.
asio::awaitable<std::int64_t> bare_node(std::int64_t n) {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
  co_await t.async_wait(asio::use_awaitable);
  co_return n + 1;
}

struct Concurrent {
  int ok = 0;
  double seconds = 0, base_mb = 0, peak_mb = 0;  // peak: RSS above base
};

// `runs` coroutines made by `make` (each returning whether its run was right) in flight at
// once on one thread; RSS sampled every 5 ms.
template <typename Make>
Concurrent concurrent(int runs, Make make) {
  Concurrent c;
  malloc_trim(0);  // what earlier tests freed goes back to the system: each starts afresh
  asio::io_context io;
  c.base_mb = rss_mb();
  double peak = c.base_mb;
  int done = 0;
  auto one = [&]() -> asio::awaitable<void> {
    c.ok += co_await make();
    ++done;
  };
  auto sampler = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor);
    while (done < runs) {
      peak = std::max(peak, rss_mb());
      t.expires_after(std::chrono::milliseconds(5));
      co_await t.async_wait(asio::use_awaitable);
    }
  };
  auto t0 = Clock::now();
  for (int i = 0; i < runs; ++i) asio::co_spawn(io, one(), asio::detached);
  asio::co_spawn(io, sampler(), asio::detached);
  io.run();
  c.peak_mb = std::max(peak, rss_mb()) - c.base_mb;
  c.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  GraphRuntime rt({.max_concurrent_runs = 200000, .max_queued_runs = 0});
  long steps = 0;
  if (argc > 1 && std::string_view(argv[1]) != "--json") {
    // `bench_graph seq` / `bench_graph par`: only that loop, a million runs (for a profiler,
    // e.g. perf record), then the median CPU µs per run.
    const std::string_view what = argv[1];
    if (what != "seq" && what != "par") {
      std::fprintf(stderr, "usage: bench_graph [--json | seq | par]\n");
      return 2;
    }
    const PerRun r = us_per_run(rt, what == "par" ? fan_out() : chain(false), 100, 10000, steps);
    std::printf("%.4f\n", r.cpu_us);
    return 0;
  }
  us_per_run(rt, chain(false), 3, 2000, steps);  // warm up
  steps = 0;
  auto t0 = Clock::now();
  const PerRun seq = us_per_run(rt, chain(false), 21, 5000, steps);
  const double steps_per_s = steps / std::chrono::duration<double>(Clock::now() - t0).count();
  long s2 = 0;
  const PerRun par = us_per_run(rt, fan_out(), 21, 5000, s2);
  std::fprintf(stderr, "seq %.3f us (%.3f CPU), par %.3f us (%.3f CPU), %.0f supersteps/s\n",
               seq.us, seq.cpu_us, par.us, par.cpu_us, steps_per_s);
  // 100,000 runs of the 3-node chain in flight at once, each node awaiting a 1 ms timer; then,
  // side by side, the floor: the same 100,000 caller coroutines awaiting the same three 1 ms
  // timers in nested coroutines without a graph (what Asio itself needs per run in flight).
  const int runs = 100000;
  auto g = chain(true);
  const Concurrent graph_run = concurrent(runs, [&]() -> asio::awaitable<bool> {
    json::object input;  // a local: no temporary inside a co_await (GCC 12)
    auto r = co_await rt.async_invoke(g, std::move(input));
    co_return r && r->state.at("counter").as_int64() == 3;
  });
  const Concurrent floor_run = concurrent(runs, []() -> asio::awaitable<bool> {
    std::int64_t counter = 0;
    for (int i = 0; i < 3; ++i) counter = co_await bare_node(counter);
    co_return counter == 3;
  });
  const int ok = graph_run.ok;
  const double secs = graph_run.seconds;
  std::fprintf(stderr,
               "%d concurrent runs: %d ok in %.2f s, peak RSS %.1f MB above a %.1f MB baseline; "
               "bare Asio coroutines doing the same waits: %.1f MB (%.0f bytes per run added by "
               "the executor)\n",
               runs, ok, secs, graph_run.peak_mb, graph_run.base_mb, floor_run.peak_mb,
               (graph_run.peak_mb - floor_run.peak_mb) * 1048576.0 / runs);
  // The same chain traced (a run, 3 supersteps and 3 nodes: 7 spans a run) into an exporter
  // that discards; the queue is large enough that no span is dropped. (After the concurrency
  // test: the spans it queues would leave the heap as the 100,000 runs find it.)
  PerRun traced{};
  std::uint64_t traced_dropped = 0, traced_exported = 0;
  {
    auto discard = std::make_unique<DiscardExporter>();
    std::vector<std::unique_ptr<trace::SpanExporter>> ex;
    ex.push_back(std::move(discard));
    trace::TracerOptions to;
    to.max_queue_spans = 1 << 20;
    trace::Tracer tracer(to, std::move(ex));
    RunOptions ro;
    const RunTracing tracing{{&tracer, {}}, "chain"};
    ro.trace = &tracing;
    long s3 = 0;
    traced = us_per_run(rt, chain(false), 21, 5000, s3, &ro);
    tracer.shutdown(std::chrono::seconds(60));
    traced_dropped = tracer.spans_dropped();
    traced_exported = tracer.spans_exported();
  }
  std::fprintf(stderr, "seq traced %.3f us (%.3f CPU), %llu spans exported, %llu dropped\n",
               traced.us, traced.cpu_us, static_cast<unsigned long long>(traced_exported),
               static_cast<unsigned long long>(traced_dropped));

  json::object out{{"seq_us", seq.us},
                   {"par_us", par.us},
                   {"seq_cpu_us", seq.cpu_us},
                   {"seq_traced_us", traced.us},
                   {"seq_traced_cpu_us", traced.cpu_us},
                   {"seq_traced_spans_dropped", traced_dropped},
                   {"par_cpu_us", par.cpu_us},
                   {"steps_per_s", steps_per_s},
                   {"concurrent_runs", runs},
                   {"concurrent_ok", ok},
                   {"concurrent_seconds", secs},
                   {"concurrent_peak_rss_mb", graph_run.peak_mb},
                   {"concurrent_floor_rss_mb", floor_run.peak_mb},
                   {"concurrent_floor_ok", floor_run.ok},
                   {"concurrent_bytes_per_run", graph_run.peak_mb * 1048576.0 / runs},
                   {"concurrent_floor_bytes_per_run", floor_run.peak_mb * 1048576.0 / runs}};
  std::printf("%s\n", to_json_text(out).c_str());
  return ok == runs && floor_run.ok == runs ? 0 : 1;
}
