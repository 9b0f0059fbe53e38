#include "weir/runtime/metrics.hpp"

#include <thread>

#include <gtest/gtest.h>
#include <boost/json/serialize.hpp>

namespace weir {
namespace {

TEST(Metrics, PrometheusTextExposition) {
  Registry reg;
  reg.counter("weir_runs_total", "Graph runs started", {{"graph", "crew"}}).inc(3);
  reg.gauge("weir_kv_blocks_used", "KV blocks in use").set(12);
  auto& h =
      reg.histogram("weir_step_seconds", "Superstep latency", {0.001, 0.01}, {{"graph", "crew"}});
  h.observe(0.0005);
  h.observe(0.005);
  h.observe(2);
  reg.gauge_callback("weir_headroom_bytes", "Budget headroom", {{"category", "kv_cache"}},
                     [] { return 4096.0; });
  EXPECT_EQ(reg.prometheus(),
            "# HELP weir_headroom_bytes Budget headroom\n"
            "# TYPE weir_headroom_bytes gauge\n"
            "weir_headroom_bytes{category=\"kv_cache\"} 4096\n"
            "# HELP weir_kv_blocks_used KV blocks in use\n"
            "# TYPE weir_kv_blocks_used gauge\n"
            "weir_kv_blocks_used 12\n"
            "# HELP weir_runs_total Graph runs started\n"
            "# TYPE weir_runs_total counter\n"
            "weir_runs_total{graph=\"crew\"} 3\n"
            "# HELP weir_step_seconds Superstep latency\n"
            "# TYPE weir_step_seconds histogram\n"
            "weir_step_seconds_bucket{graph=\"crew\",le=\"0.001\"} 1\n"
            "weir_step_seconds_bucket{graph=\"crew\",le=\"0.01\"} 2\n"
            "weir_step_seconds_bucket{graph=\"crew\",le=\"+Inf\"} 3\n"
            "weir_step_seconds_sum{graph=\"crew\"} 2.0055\n"
            "weir_step_seconds_count{graph=\"crew\"} 3\n");
}

TEST(Metrics, LabelValuesAreEscaped) {
  Registry reg;
  reg.counter("c", "h", {{"path", "a\"b\\c\nd"}}).inc();
  EXPECT_NE(reg.prometheus().find("c{path=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos)
      << reg.prometheus();
}

TEST(Metrics, ConcurrentIncrementsSumExactly) {
  Registry reg;
  auto& c = reg.counter("hits", "h");
  auto& g = reg.gauge("level", "h");
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        c.inc();
        g.add(1);
        g.sub(1);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(c.value(), 800000.0);
  EXPECT_EQ(g.value(), 0.0);
  // The same name and labels give the same series.
  EXPECT_EQ(&reg.counter("hits", "h"), &c);
}

TEST(Metrics, HistogramQuantilesAndSnapshot) {
  Registry reg;
  auto& h = reg.histogram("lat", "h", {1, 2, 4, 8});
  for (int i = 0; i < 100; ++i) h.observe(i < 50 ? 0.5 : 3.0);
  EXPECT_NEAR(h.quantile(0.5), 1.0, 1e-9);
  EXPECT_GT(h.quantile(0.9), 2.0);
  EXPECT_LE(h.quantile(0.9), 4.0);
  auto snap = reg.snapshot();
  const auto& s = snap.at("lat").at("series").at(0).as_object();
  EXPECT_EQ(s.at("count").as_uint64(), 100u);
  EXPECT_EQ(snap.at("lat").at("type").as_string(), "histogram");
  reg.gauge_callback("cb", "h", {{"run", "1"}}, [] { return 1.0; });
  reg.remove_callbacks({{"run", "1"}});
  EXPECT_TRUE(reg.snapshot().at("cb").at("series").as_array().empty());
}

}  // namespace
}  // namespace weir
