// Metrics: counters, gauges and histograms with labels, for every fence weir enforces.
//
// A Registry owns metric families by name; a family with labels hands out one series per label
// set. Series are created once and then updated lock-free (atomics), so hot paths keep a
// reference: `auto& c = reg.counter("weir_runs_total", "Runs started", {{"graph","x"}}); c.inc();`
// Snapshots come as JSON (snapshot()) and as Prometheus text exposition format 0.0.4
// (prometheus()). Gauges may also be callbacks, read at snapshot time.
//
// Thread safety: all methods may be called from any thread. References returned by counter(),
// gauge() and histogram() stay valid for the registry's lifetime.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

namespace weir {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0) noexcept;  // REQUIRES: v >= 0
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) noexcept { value_.store(v, std::memory_order_relaxed); }
  void add(double v) noexcept;
  void sub(double v) noexcept { add(-v); }
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: ascending upper bounds; an implicit +Inf bucket follows.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v) noexcept;
  std::uint64_t count() const noexcept;
  double sum() const noexcept;
  const std::vector<double>& bounds() const noexcept { return bounds_; }
  // Cumulative counts per bound (Prometheus `le` semantics), +Inf last.
  std::vector<std::uint64_t> cumulative() const;
  // Estimated quantile (q in [0,1]) by linear interpolation within buckets.
  double quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // [bounds_.size() + 1]
  std::atomic<double> sum_{0.0};
  std::atomic<std::uint64_t> count_{0};
};

class Registry {
 public:
  Registry();
  ~Registry();

  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                       const Labels& labels = {});
  // A gauge read by calling `fn` at snapshot time. Replaces an earlier callback with the same
  // name and labels. REQUIRES: fn stays callable for the registry's lifetime or until removed.
  void gauge_callback(std::string_view name, std::string_view help, const Labels& labels,
                      std::function<double()> fn);
  // The same for a count kept elsewhere that only grows (exposed as a counter).
  void counter_callback(std::string_view name, std::string_view help, const Labels& labels,
                        std::function<double()> fn);
  void remove_callbacks(const Labels& labels_subset);

  // {"name": {"type": "counter", "help": "...", "series": [{"labels": {...}, "value": n}]}}
  // Histograms give "count", "sum", "buckets" [{"le": b, "count": n}] and p50/p90/p99.
  boost::json::object snapshot() const;
  std::string prometheus() const;

  // The process-wide registry that weir's components report to by default.
  static Registry& global();

 private:
  void add_callback(std::string_view name, std::string_view help, const Labels& labels,
                    std::function<double()> fn, bool counter);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Default latency buckets in seconds (1 µs .. 60 s, roughly ×2.5 per step).
std::vector<double> latency_buckets_seconds();

}  // namespace weir
