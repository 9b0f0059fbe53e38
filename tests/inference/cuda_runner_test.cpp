// The CUDA forward pass end to end, against the CPU fast path and the reference goldens
// (FP32 mode), BF16 mode against the CPU path, CUDA graph replay against eager steps.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "runner/llama_runner.hpp"
#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_runner.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/runner.hpp"

namespace weir::inference {
namespace {

namespace fs = std::filesystem;

class CudaRunnerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::available()) {
      if (std::getenv("WEIR_REQUIRE_GPU")) FAIL() << "WEIR_REQUIRE_GPU is set but no CUDA device";
      GTEST_SKIP() << "no CUDA device: the CUDA forward pass was not run";
    }
    if (!fs::exists(fs::path(WEIR_SHARED_DIR) / "models/aidreams260K.gguf"))
      GTEST_SKIP() << "../shared/models absent";
  }
};

TEST_P(CudaRunnerTest, GoldensAllAtOnceInFp32) {
  auto model = *Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".gguf"));
  std::ifstream in(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".golden.json"));
  std::stringstream ss;
  ss << in.rdbuf();
  const auto doc = boost::json::parse(ss.str());
  // The goldens are FP32 greedy decodes: FP32 weights and exact FP32 GEMMs.
  auto runner = cuda::make_cuda_runner(model, {.precision = cuda::Precision::fp32});
  ASSERT_TRUE(runner) << runner.error().message;
  auto engine = Engine::create(std::move(*runner), {.max_num_seqs = 16,
                                                    .max_model_len = 128,
                                                    .block_size = 16,
                                                    .kv_cache_bytes = 8u << 20,
                                                    .eog_tokens = {2}});
  ASSERT_TRUE(engine) << engine.error().message;
  std::vector<std::vector<std::int32_t>> want;
  std::vector<std::future<Result<GenerateResult>>> fs;
  for (const auto& c : doc.at("cases").as_array()) {
    GenerateRequest rq;
    for (const auto& t : c.at("prompt_tokens").as_array())
      rq.prompt.push_back(static_cast<std::int32_t>(t.as_int64()));
    std::vector<std::int32_t> g;
    for (const auto& t : c.at("greedy_tokens").as_array())
      g.push_back(static_cast<std::int32_t>(t.as_int64()));
    rq.max_new_tokens = static_cast<std::int32_t>(g.size());
    want.push_back(g);
    auto p = std::make_shared<std::promise<Result<GenerateResult>>>();
    fs.push_back(p->get_future());
    (*engine)->submit(rq, {{}, [p](Result<GenerateResult> r) { p->set_value(std::move(r)); }});
  }
  for (std::size_t i = 0; i < fs.size(); ++i) {
    auto r = fs[i].get();
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->tokens, want[i]) << "case " << i;
  }
}

// A prefill step of two sequences, then decode steps; logits of every step from the CUDA
// runner `gpu` and the CPU runner. The decode steps share one shape, so with graphs on the
// first is captured and the rest replay it with new metadata.
// alternate: odd decode steps decode sequence 0 alone (a second graph shape).
std::vector<std::pair<std::vector<float>, std::vector<float>>> run_steps(
    std::shared_ptr<const Model> model, cuda::CudaRunnerOptions opt, int decode_steps,
    bool alternate = false) {
  const auto& hp = model->hp();
  std::vector<std::pair<std::vector<float>, std::vector<float>>> out;
  auto gpu = cuda::make_cuda_runner(model, opt);
  EXPECT_TRUE(gpu) << gpu.error().message;
  if (!gpu) return out;
  auto cpu = make_llama_runner(model, 1);
  KvLayout L{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 8};
  EXPECT_TRUE((*gpu)->allocate_kv_pool(L));
  std::vector<float> pool(static_cast<std::size_t>(L.total_elems()));
  std::vector<BlockId> t0 = {5, 2}, t1 = {7, 1};
  StepBatch b;
  for (int p = 0; p < 20; ++p)
    b.tokens.push_back(1 + (p * 37) % 500), b.positions.push_back(p), b.seq_index.push_back(0);
  for (int p = 0; p < 9; ++p)
    b.tokens.push_back(3 + (p * 11) % 500), b.positions.push_back(p), b.seq_index.push_back(1);
  b.seqs = {{t0, 20}, {t1, 9}};
  b.logit_rows = {19, 3, 28};
  int p0 = 19, p1 = 8;  // last positions written
  for (int step = 0; step <= decode_steps; ++step) {
    if (step > 0 && alternate && step % 2 == 1) {
      ++p0;
      b.tokens = {1 + (step * 13) % 500};
      b.positions = {p0};
      b.seq_index = {0};
      b.seqs = {{t0, p0 + 1}};
      b.logit_rows = {0};
    } else if (step > 0) {
      ++p0, ++p1;
      b.tokens = {1 + (step * 13) % 500, 2 + (step * 29) % 500};
      b.positions = {p0, p1};
      b.seq_index = {0, 1};
      b.seqs = {{t0, p0 + 1}, {t1, p1 + 1}};
      b.logit_rows = {0, 1};
    }
    std::vector<float> want(b.logit_rows.size() * static_cast<std::size_t>(hp.n_vocab));
    std::vector<float> got(want.size(), NAN);
    EXPECT_TRUE(cpu->forward(b, L, pool, want));
    auto st = (*gpu)->forward(b, L, {}, got);
    EXPECT_TRUE(st) << st.error().message;
    out.emplace_back(std::move(got), std::move(want));
  }
  return out;
}

TEST_P(CudaRunnerTest, LogitsMatchTheCpuPathInFp32) {
  auto model = *Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".gguf"));
  auto steps = run_steps(model, {.precision = cuda::Precision::fp32, .cuda_graphs = false}, 3);
  ASSERT_EQ(steps.size(), 4u);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const auto& [got, want] = steps[s];
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-3f * std::max(1.0f, std::fabs(want[i])))
          << "step " << s << " element " << i;
  }
}

// BF16 weights and GEMM inputs: logits within 5% of the row's largest logit (a bound for
// BF16's 2^-9 relative rounding through a few layers, not calibrated on a GPU yet), and the
// same argmax wherever the CPU's top two logits are clearly apart.
TEST_P(CudaRunnerTest, LogitsMatchTheCpuPathInBf16) {
  auto model = *Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".gguf"));
  const std::size_t V = static_cast<std::size_t>(model->hp().n_vocab);
  auto steps = run_steps(model, {.precision = cuda::Precision::bf16}, 3);
  ASSERT_EQ(steps.size(), 4u);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const auto& [got, want] = steps[s];
    for (std::size_t r = 0; r * V < want.size(); ++r) {
      auto w0 = want.begin() + static_cast<std::ptrdiff_t>(r * V);
      auto g0 = got.begin() + static_cast<std::ptrdiff_t>(r * V);
      float scale = 1.0f;
      for (std::size_t i = 0; i < V; ++i) scale = std::max(scale, std::fabs(w0[i]));
      for (std::size_t i = 0; i < V; ++i)
        ASSERT_NEAR(g0[i], w0[i], 5e-2f * scale) << "step " << s << " row " << r << " logit " << i;
      std::vector<float> sorted(w0, w0 + static_cast<std::ptrdiff_t>(V));
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 0.1f * scale) {
        EXPECT_EQ(std::max_element(g0, g0 + static_cast<std::ptrdiff_t>(V)) - g0,
                  std::max_element(w0, w0 + static_cast<std::ptrdiff_t>(V)) - w0)
            << "step " << s << " row " << r;
      }
    }
  }
}

// Decode steps replayed from a captured CUDA graph give the eager pass's logits.
TEST_P(CudaRunnerTest, GraphReplayMatchesEagerDecode) {
  auto model = *Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".gguf"));
  auto eager = run_steps(model, {.precision = cuda::Precision::fp32, .cuda_graphs = false}, 5);
  auto graph = run_steps(model, {.precision = cuda::Precision::fp32, .cuda_graphs = true}, 5);
  ASSERT_EQ(eager.size(), graph.size());
  for (std::size_t s = 0; s < eager.size(); ++s) {
    ASSERT_EQ(graph[s].first.size(), eager[s].first.size());
    for (std::size_t i = 0; i < eager[s].first.size(); ++i)
      ASSERT_NEAR(graph[s].first[i], eager[s].first[i],
                  1e-5f * std::max(1.0f, std::fabs(eager[s].first[i])))
          << "step " << s << " element " << i;
  }
}

// With room for one graph and two alternating decode shapes, every step evicts and captures.
TEST_P(CudaRunnerTest, GraphEvictionMatchesEagerDecode) {
  auto model = *Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".gguf"));
  auto eager =
      run_steps(model, {.precision = cuda::Precision::fp32, .cuda_graphs = false}, 6, true);
  auto graph = run_steps(
      model, {.precision = cuda::Precision::fp32, .cuda_graphs = true, .max_graphs = 1}, 6, true);
  ASSERT_EQ(eager.size(), 7u);
  ASSERT_EQ(graph.size(), eager.size());
  for (std::size_t s = 0; s < eager.size(); ++s) {
    ASSERT_EQ(graph[s].first.size(), eager[s].first.size());
    for (std::size_t i = 0; i < eager[s].first.size(); ++i) {
      ASSERT_NEAR(graph[s].first[i], eager[s].first[i],
                  1e-5f * std::max(1.0f, std::fabs(eager[s].first[i])))
          << "step " << s << " element " << i;
      ASSERT_NEAR(eager[s].first[i], eager[s].second[i],
                  1e-3f * std::max(1.0f, std::fabs(eager[s].second[i])))
          << "step " << s << " element " << i << " against the CPU";
    }
  }
}

TEST_P(CudaRunnerTest, AModelThatDoesNotFitFailsAtLoadWithTheNumbers) {
  auto model = *Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".gguf"));
  auto r = cuda::make_cuda_runner(model, {.memory_fraction = 1e-9f});
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::memory_budget_exceeded));
  EXPECT_EQ(r.error().message.rfind("the model does not fit in GPU memory: ", 0), 0u)
      << r.error().message;
  EXPECT_NE(r.error().message.find("weights "), std::string::npos) << r.error().message;
}

// A random tiny model in Q8_0: layer matrices kept as Q8_0 and dequantised in the GEMM path
// give what converting them at load gives (the same BF16 values reach the same GEMMs), and
// stay near the CPU path (which multiplies Q8_0 differently).
TEST(CudaRunnerQ8_0, DequantisingInTheGemmPathMatchesConvertingAtLoad) {
  if (!cuda::available()) {
    if (std::getenv("WEIR_REQUIRE_GPU")) FAIL() << "WEIR_REQUIRE_GPU is set but no CUDA device";
    GTEST_SKIP() << "no CUDA device: the CUDA forward pass was not run";
  }
  const auto path = fs::temp_directory_path() / "weir-cuda-runner-q8_0.gguf";
  ASSERT_TRUE(write_random_llama(path, RandomModelShape::tiny(), GgmlType::q8_0));
  auto model = Model::load(path);
  ASSERT_TRUE(model) << model.error().message;
  auto kept = run_steps(*model, {.q8_0_on_device = true}, 3);
  auto converted = run_steps(*model, {.q8_0_on_device = false}, 3);
  fs::remove(path);
  ASSERT_EQ(kept.size(), 4u);
  ASSERT_EQ(converted.size(), kept.size());
  const std::size_t V = static_cast<std::size_t>((*model)->hp().n_vocab);
  for (std::size_t s = 0; s < kept.size(); ++s) {
    const auto& [got, want] = kept[s];
    for (std::size_t r = 0; r * V < want.size(); ++r) {
      float scale = 1.0f;
      for (std::size_t i = 0; i < V; ++i) scale = std::max(scale, std::fabs(want[r * V + i]));
      for (std::size_t i = r * V; i < (r + 1) * V; ++i) {
        ASSERT_NEAR(got[i], converted[s].first[i],
                    1e-4f * std::max(1.0f, std::fabs(converted[s].first[i])))
            << "step " << s << " element " << i;
        ASSERT_NEAR(got[i], want[i], 5e-2f * scale) << "step " << s << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaRunnerTest,
                         ::testing::Values("aidreams260K", "stories260K-gqa"));

}  // namespace
}  // namespace weir::inference
