// Helpers shared by the benchmarks: generated models, prompts, timing, peak RSS, the vector
// units' measured peaks.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runner/llama_runner.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/model.hpp"

namespace weir::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// ---- Measured peaks of the vector units ----
// Independent dependency chains in registers, `threads` threads at once, for about 0.2 s: what
// the cores retire, whatever the clock and however many FMA pipes a 512-bit operation takes
// (Zen 4 splits it over both 256-bit pipes: half the FLOPs a cycle of Zen 5 or Sapphire Rapids).
#if defined(__x86_64__)
// GCC 12 warns that its own AVX-512 headers use an undefined value (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace detail {
constexpr int kChains = 12;  // > latency x pipes on the CPUs above

__attribute__((target("avx512f"))) inline float fma_chains(std::int64_t iters) {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
  for (std::int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512vnni"))) inline int dot_chains(std::int64_t iters) {
  __m512i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
  for (std::int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_dpbusd_epi32(a[i], u, v);
  }
  __m512i s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_epi32(s, a[i]);
  return _mm512_reduce_add_epi32(s);
}

// Operations a second of f(iters) on `threads` threads at once, f doing ops_per_iter per iter.
template <class F>
double ops_per_second(F f, int threads, double ops_per_iter) {
  std::int64_t iters = 1 << 16;
  for (;;) {  // size a run to about 0.2 s on one thread
    const auto t0 = Clock::now();
    volatile auto sink = f(iters);
    (void)sink;
    if (seconds_since(t0) > 0.05) break;
    iters *= 2;
  }
  iters *= 4;
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      volatile auto sink = f(iters);
      (void)sink;
    });
  for (auto& t : ts) t.join();
  return threads * static_cast<double>(iters) * ops_per_iter / seconds_since(t0);
}
}  // namespace detail
#pragma GCC diagnostic pop

// FP32 FMA GFLOP/s (2 FLOPs per lane), 0 without AVX-512F.
inline double measured_fma_gflop_s(int threads) {
  if (!__builtin_cpu_supports("avx512f")) return 0;
  return detail::ops_per_second(detail::fma_chains, threads, detail::kChains * 16 * 2) / 1e9;
}

// int8 dot-product Gop/s (VNNI vpdpbusd: 64 multiply-adds, 128 ops), 0 without AVX-512 VNNI.
inline double measured_int8_dot_gop_s(int threads) {
  if (!__builtin_cpu_supports("avx512vnni")) return 0;
  return detail::ops_per_second(detail::dot_chains, threads, detail::kChains * 64 * 2) / 1e9;
}
#else
inline double measured_fma_gflop_s(int) {
  return 0;
}
inline double measured_int8_dot_gop_s(int) {
  return 0;
}
#endif

// How random_model() loads (bench_inference --file-layout turns cpu_layout off).
inline inference::ModelOptions& bench_model_options() {
  static inference::ModelOptions options;
  return options;
}

// A random-weight model of `shape` (seed 42), written once per name and type into `dir`.
inline std::shared_ptr<const inference::Model> random_model(
    inference::GgmlType type, const std::filesystem::path& dir, const std::string& name,
    const inference::RandomModelShape& shape) {
  std::filesystem::create_directories(dir);
  auto path = dir / ("weir-" + name + "-" + inference::ggml_type_name(type) + ".gguf");
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "generating %s ...\n", path.c_str());
    if (auto st = inference::write_random_llama(path, shape, type, 42); !st) {
      std::fprintf(stderr, "%s\n", st.error().message.c_str());
      std::exit(1);
    }
  }
  auto m = inference::Model::load(path, bench_model_options());
  if (!m) {
    std::fprintf(stderr, "%s\n", m.error().message.c_str());
    std::exit(1);
  }
  return *m;
}

// The 15M shape (llama2.c's stories15M: dim 288, hidden 768, 6 layers, 6 heads, vocab 32000)
// written once per type into a temporary folder.
inline std::shared_ptr<const inference::Model> model_15m(inference::GgmlType type,
                                                         const std::filesystem::path& dir) {
  return random_model(type, dir, "15m", inference::RandomModelShape::stories15m());
}

// The 1-minute load average (/proc/loadavg; -1 when unreadable), recorded beside absolute times:
// they depend on what else the machine runs.
inline double load_average_1m() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return l;
}

// Random token ids outside the control and byte tokens.
inline std::vector<std::int32_t> random_prompt(std::mt19937& rng, int n, std::int32_t vocab) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  for (auto& t : p)
    t = 259 + static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab - 259));
  p[0] = 1;  // BOS
  return p;
}

inline std::future<Result<inference::GenerateResult>> submit(inference::Engine& e,
                                                             inference::GenerateRequest rq) {
  auto p = std::make_shared<std::promise<Result<inference::GenerateResult>>>();
  auto f = p->get_future();
  e.submit(std::move(rq),
           {{}, [p](Result<inference::GenerateResult> r) { p->set_value(std::move(r)); }});
  return f;
}

}  // namespace weir::bench
