// weir_gauntlet: runs one OOM-gauntlet scenario (or lists them) under one MemoryBudget and
// prints a JSON result as its last line: pass, peak RSS, throughput, the scenario's own
// numbers, and the time series of RSS and weir's signals (scenario 11).
//
//   weir_gauntlet <scenario> [--quick]     weir_gauntlet --list
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "gauntlet.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/inference/engine.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_write.hpp"

namespace weir::gauntlet {

BudgetLimits budget_limits() {
  BudgetLimits l;
  l.total = kBudgetMb << 20;
  l.category[static_cast<int>(BudgetCategory::run_state)] = kRunStateMb << 20;
  l.category[static_cast<int>(BudgetCategory::artifacts)] = kArtifactsMb << 20;
  l.category[static_cast<int>(BudgetCategory::history)] = kHistoryMb << 20;
  l.category[static_cast<int>(BudgetCategory::kv_cache)] = kKvMb << 20;
  l.category[static_cast<int>(BudgetCategory::activations)] = kActivationsMb << 20;
  return l;
}

double rss_mb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

double max_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

void trim_heap() {
  malloc_trim(0);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Sampler::Sampler(MemoryBudget& budget) : budget_(budget) {
  samples_.reserve(kMaxSamples);
}
Sampler::~Sampler() {
  stop();
}

void Sampler::start() {
  t0_ = Clock::now();
  thread_ = std::thread([this] { loop(); });
}

void Sampler::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Sampler::attach(graph::GraphRuntime* rt) {
  std::lock_guard lock(mu_);
  rt_ = rt;
}
void Sampler::attach(inference::Engine* e) {
  std::lock_guard lock(mu_);
  engine_ = e;
}
void Sampler::attach(ArtifactStore* s) {
  std::lock_guard lock(mu_);
  store_ = s;
}
void Sampler::detach_all() {
  std::lock_guard lock(mu_);
  rt_ = nullptr;
  engine_ = nullptr;
  store_ = nullptr;
}

Sample Sampler::take() {
  Sample s;
  s.t = seconds_since(t0_);
  s.rss_mb = rss_mb();
  s.state_bytes = static_cast<double>(budget_.used(BudgetCategory::run_state));
  s.headroom_mb = static_cast<double>(budget_.total_limit() - budget_.used_total()) / 1048576.0;
  if (rt_) {
    s.runs_active = static_cast<double>(rt_->active_runs());
    s.runs_queued = static_cast<double>(rt_->queued_runs());
  }
  if (store_) {
    auto st = store_->stats();
    s.artifact_mem_bytes = static_cast<double>(st.memory_bytes);
    s.artifact_disk_bytes = static_cast<double>(st.disk_bytes);
  }
  if (engine_) {
    auto st = engine_->stats();
    s.kv_used = st.kv.used_blocks;
    s.kv_free = st.kv.free_blocks;
    s.kv_cached = st.kv.cached_blocks;
    s.kv_waste_pct = st.kv.used_blocks > 0 ? 100.0 * st.kv.waste() : -1.0;
    s.preemptions = static_cast<double>(st.sched.preemptions);
  } else {
    s.kv_waste_pct = -1.0;  // no engine: not applicable
  }
  return s;
}

void Sampler::record() {
  Sample s = take();
  if (s.kv_waste_pct >= 0) waste_sum_ += s.kv_waste_pct, ++waste_n_;
  if (++tick_ % keep_every_ != 0) return;
  if (samples_.size() == kMaxSamples) {  // bounded: keep every other sample, halve the rate
    for (std::size_t i = 0; i < kMaxSamples / 2; ++i) samples_[i] = samples_[2 * i + 1];
    samples_.resize(kMaxSamples / 2);
    keep_every_ *= 2;
  }
  samples_.push_back(s);
}

void Sampler::loop() {
  while (!stop_) {
    {
      std::lock_guard lock(mu_);
      record();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::lock_guard lock(mu_);
  tick_ = keep_every_ - 1;  // the last sample is always kept
  record();
}

std::vector<Sample> Sampler::samples() const {
  std::lock_guard lock(mu_);
  return samples_;
}

double Sampler::mean_rss(double t0, double t1) const {
  std::lock_guard lock(mu_);
  double sum = 0;
  int n = 0;
  for (const auto& s : samples_) {
    if (s.t >= t0 && s.t < t1) sum += s.rss_mb, ++n;
  }
  return n ? sum / n : 0.0;
}

double Sampler::mean_kv_waste() const {
  std::lock_guard lock(mu_);
  return waste_n_ ? waste_sum_ / static_cast<double>(waste_n_) : 0.0;
}

json::object Sampler::series(std::size_t max_points) const {
  auto all = samples();
  const std::size_t stride = std::max<std::size_t>(1, (all.size() + max_points - 1) / max_points);
  json::object out;
  auto col = [&](const char* name, auto field, int digits) {
    json::array a;
    const double scale = std::pow(10.0, digits);
    for (std::size_t i = 0; i < all.size(); i += stride)
      a.push_back(std::round(field(all[i]) * scale) / scale);
    out[name] = std::move(a);
  };
  col(
      "t", [](const Sample& s) { return s.t; }, 3);
  col(
      "rss_mb", [](const Sample& s) { return s.rss_mb; }, 2);
  col(
      "runs_active", [](const Sample& s) { return s.runs_active; }, 0);
  col(
      "runs_queued", [](const Sample& s) { return s.runs_queued; }, 0);
  col(
      "state_bytes", [](const Sample& s) { return s.state_bytes; }, 0);
  col(
      "artifact_mem_bytes", [](const Sample& s) { return s.artifact_mem_bytes; }, 0);
  col(
      "artifact_disk_bytes", [](const Sample& s) { return s.artifact_disk_bytes; }, 0);
  col(
      "kv_used_blocks", [](const Sample& s) { return s.kv_used; }, 0);
  col(
      "kv_free_blocks", [](const Sample& s) { return s.kv_free; }, 0);
  col(
      "kv_cached_blocks", [](const Sample& s) { return s.kv_cached; }, 0);
  col(
      "kv_waste_pct", [](const Sample& s) { return s.kv_waste_pct; }, 2);
  col(
      "preemptions", [](const Sample& s) { return s.preemptions; }, 0);
  col(
      "headroom_mb", [](const Sample& s) { return s.headroom_mb; }, 2);
  return out;
}

namespace {
std::map<std::string, ScenarioFn>& table() {
  static std::map<std::string, ScenarioFn> t;
  return t;
}
}  // namespace

void register_scenario(std::string name, ScenarioFn fn) {
  table()[std::move(name)] = std::move(fn);
}
const std::map<std::string, ScenarioFn>& scenarios() {
  return table();
}

}  // namespace weir::gauntlet

int main(int argc, char** argv) {
  using namespace weir::gauntlet;
  register_graph_scenarios();
  register_engine_scenarios();
  register_tool_scenarios();
  register_http_scenarios();
  std::string name;
  bool quick = false, list = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--list") == 0)
      list = true;
    else if (argv[i][0] != '-' && name.empty())
      name = argv[i];
    else
      return std::fprintf(stderr, "weir_gauntlet: unknown option '%s'\n", argv[i]), 2;
  }
  if (list) {
    for (const auto& [n, fn] : scenarios()) std::printf("%s\n", n.c_str());
    return 0;
  }
  auto it = scenarios().find(name);
  if (it == scenarios().end()) {
    std::string names;
    for (const auto& [n, fn] : scenarios()) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "weir_gauntlet: unknown scenario '%s' (one of: %s)\n", name.c_str(),
                 names.c_str());
    return 2;
  }
  weir::MemoryBudget budget(budget_limits());
  Sampler sampler(budget);
  const auto scratch =
      std::filesystem::temp_directory_path() / ("weir-gauntlet-" + std::to_string(getpid()));
  std::filesystem::create_directories(scratch);
  Ctx ctx{budget, sampler, quick, scratch};
  const double baseline = rss_mb();
  sampler.start();
  json::object out;
  try {
    out = it->second(ctx);
  } catch (const std::exception& e) {
    out["pass"] = false;
    out["error"] = std::string("threw: ") + e.what();
  }
  sampler.stop();
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  out["scenario"] = name;
  out["quick"] = quick;
  out["baseline_rss_mb"] = std::round(baseline * 10) / 10;
  const double peak = std::max(max_rss_mb(), 0.0);
  out["peak_rss_mb"] = std::round(peak * 10) / 10;
  out["budget_mb"] = kBudgetMb;
  out["budget_peak_used_mb"] =
      std::round(static_cast<double>(budget.peak_total()) / 1048576.0 * 10) / 10;
  const double weights = out.contains("weights_mb") ? out["weights_mb"].to_number<double>() : 0.0;
  const double target = static_cast<double>(kBudgetMb) + weights + 64.0;
  out["rss_target_mb"] = target;
  const bool within = peak <= target;
  out["rss_within_target"] = within;
  if (!within && out["pass"].is_bool() && out["pass"].as_bool()) {
    out["pass"] = false;
    out["why"] = "peak RSS over budget + weights + 64 MB";
  }
  out["series"] = sampler.series();
  std::printf("%s\n", weir::to_json_text(out).c_str());
  return 0;
}
