// The CUDA forward pass end to end, against the CPU fast path and the reference goldens.
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_runner.hpp"
#include "weir/inference/llama_runner.hpp"
#include "weir/inference/runner.hpp"

namespace weir::inference {
namespace {

namespace fs = std::filesystem;

class CudaRunnerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "no CUDA device: the CUDA forward pass was not run";
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
  auto runner = make_runner(model, Device::cuda, 1);
  ASSERT_TRUE(runner) << runner.error().message;
  EXPECT_EQ(runner->device, Device::cuda);
  auto engine = Engine::create(std::move(runner->runner), {.max_num_seqs = 16,
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

TEST_P(CudaRunnerTest, LogitsMatchTheCpuPath) {
  auto model = *Model::load(fs::path(WEIR_SHARED_DIR) / "models" / (GetParam() + ".gguf"));
  const auto& hp = model->hp();
  auto gpu = cuda::make_cuda_runner(model);
  ASSERT_TRUE(gpu) << gpu.error().message;
  auto cpu = make_llama_runner(model, 1);
  KvLayout L{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 8};
  ASSERT_TRUE((*gpu)->allocate_kv_pool(L));
  std::vector<float> pool(static_cast<std::size_t>(L.total_elems()));
  std::vector<BlockId> t0 = {5, 2}, t1 = {7};
  StepBatch b;
  for (int p = 0; p < 20; ++p)
    b.tokens.push_back(1 + (p * 37) % 500), b.positions.push_back(p), b.seq_index.push_back(0);
  for (int p = 0; p < 9; ++p)
    b.tokens.push_back(3 + (p * 11) % 500), b.positions.push_back(p), b.seq_index.push_back(1);
  b.seqs = {{t0, 20}, {t1, 9}};
  b.logit_rows = {19, 3, 28};
  std::vector<float> want(3 * static_cast<std::size_t>(hp.n_vocab)), got(want.size(), NAN);
  ASSERT_TRUE(cpu->forward(b, L, pool, want));
  ASSERT_TRUE((*gpu)->forward(b, L, {}, got));
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-3f * std::max(1.0f, std::fabs(want[i]))) << i;
}

INSTANTIATE_TEST_SUITE_P(Models, CudaRunnerTest,
                         ::testing::Values("aidreams260K", "stories260K-gqa"));

}  // namespace
}  // namespace weir::inference
