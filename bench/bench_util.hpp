// Helpers shared by the benchmarks: generated models, prompts, timing, peak RSS.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "weir/inference/engine.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/llama_runner.hpp"
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
  auto m = inference::Model::load(path);
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
