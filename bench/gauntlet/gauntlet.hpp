// The OOM gauntlet's shared pieces: one memory budget per process, a sampler that records RSS
// and weir's signals (runs active/queued, state and artifact bytes, KV blocks, waste,
// preemptions, headroom) every 20 ms, and the scenario table. Each scenario runs in its own
// process (bench/gauntlet/run starts `weir_gauntlet <scenario>`), so its RSS starts clean.
//
// Thread safety: the Sampler runs on its own thread; attach()/detach() of the engine and the
// runtime may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "weir/runtime/memory_budget.hpp"

namespace weir {
class ArtifactStore;
namespace graph {
class GraphRuntime;
}
namespace inference {
class Engine;
}
}  // namespace weir

namespace weir::gauntlet {

using Clock = std::chrono::steady_clock;
namespace json = boost::json;

// The one budget every scenario runs under (MiB).
inline constexpr std::size_t kBudgetMb = 256;
inline constexpr std::size_t kRunStateMb = 96, kArtifactsMb = 32, kHistoryMb = 16, kKvMb = 64,
                             kActivationsMb = 32;
BudgetLimits budget_limits();

double rss_mb();      // current resident set (/proc/self/statm)
double max_rss_mb();  // peak resident set of the process (getrusage)
void trim_heap();     // malloc_trim(0): give freed heap pages back to the OS
double seconds_since(Clock::time_point t0);

struct Sample {
  double t = 0, rss_mb = 0;
  double runs_active = 0, runs_queued = 0, state_bytes = 0, artifact_mem_bytes = 0,
         artifact_disk_bytes = 0, kv_used = 0, kv_free = 0, kv_cached = 0, kv_waste_pct = 0,
         preemptions = 0, headroom_mb = 0;
};

class Sampler {
 public:
  explicit Sampler(MemoryBudget& budget);
  ~Sampler();
  void start();
  void stop();
  void attach(graph::GraphRuntime* rt);
  void attach(inference::Engine* e);
  void attach(ArtifactStore* s);
  void detach_all();
  // Seconds since start(), on the samples' time base.
  double now() const { return seconds_since(t0_); }
  // Samples taken so far (copy).
  std::vector<Sample> samples() const;
  // Mean RSS over samples with t in [t0, t1).
  double mean_rss(double t0, double t1) const;
  // Mean KV waste (%) over every sample (also those thinned out) where blocks were in use.
  double mean_kv_waste() const;
  // {"t": [...], "rss_mb": [...], ...}, at most `max_points` points (evenly thinned).
  json::object series(std::size_t max_points = 600) const;

 private:
  // At most this many samples are kept (the sampler must not grow the RSS it measures): when
  // full, every other one is dropped and from then on only every 2nd (4th, ...) is kept.
  static constexpr std::size_t kMaxSamples = 4096;
  void loop();
  void record();  // REQUIRES: mu_ held
  Sample take();
  MemoryBudget& budget_;
  mutable std::mutex mu_;  // guards the attached pointers and samples_
  graph::GraphRuntime* rt_ = nullptr;
  inference::Engine* engine_ = nullptr;
  ArtifactStore* store_ = nullptr;
  std::vector<Sample> samples_;
  std::uint64_t tick_ = 0, keep_every_ = 1;
  double waste_sum_ = 0;  // over every sample taken, kept or not
  std::uint64_t waste_n_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Clock::time_point t0_ = Clock::now();
};

// What a scenario gets: the budget, the sampler, the scale, a scratch folder.
struct Ctx {
  MemoryBudget& budget;
  Sampler& sampler;
  bool quick = false;
  std::filesystem::path scratch;  // removed at exit
};

// A scenario fills `out` (pass, throughput, its own numbers) and returns it.
using ScenarioFn = std::function<json::object(Ctx&)>;
void register_scenario(std::string name, ScenarioFn fn);
const std::map<std::string, ScenarioFn>& scenarios();

// Registered by each scenario file (called from main; no static-init order games).
void register_graph_scenarios();
void register_engine_scenarios();
void register_tool_scenarios();  // real ones when weir::tools is built, else "skipped"
void register_http_scenarios();  // real ones when weir::serve and weir::agents are built

}  // namespace weir::gauntlet
