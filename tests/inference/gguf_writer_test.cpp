#include "weir/inference/gguf_writer.hpp"

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "runner/forward_ref.hpp"
#include "runner/llama_runner.hpp"
#include "weir/inference/gguf.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {
namespace {

namespace fs = std::filesystem;

// llama.cpp refuses a vocabulary with two equal token strings (it asserts on load), so the
// models weir writes (the demo's, the benchmarks') must have none, at the 15M model's 32,000.
TEST(GgufWriter, RandomVocabularyHasNoDuplicateTokenStrings) {
  fs::path path =
      fs::temp_directory_path() / ("weir_vocab_" + std::to_string(::getpid()) + ".gguf");
  RandomModelShape shape{32, 64, 1, 2, 2, 32000, 64};
  ASSERT_TRUE(write_random_llama(path, shape, GgmlType::f32, 7));
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file) << file.error().message;
  auto tokens = (*file)->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens && *tokens);
  ASSERT_EQ((**tokens).size(), 32000u);
  std::set<std::string> seen;
  std::vector<std::string> dups;
  for (const auto& t : **tokens)
    if (!seen.insert(t).second) dups.push_back(t);
  EXPECT_TRUE(dups.empty()) << dups.size() << " duplicate token strings, e.g. '" << dups[0] << "'";
  fs::remove(path);
}

TEST(GgufWriter, RandomModelsLoadRunAndAreDeterministic) {
  fs::path dir = fs::temp_directory_path() / ("weir_writer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (GgmlType type : {GgmlType::f32, GgmlType::f16, GgmlType::q8_0}) {
    SCOPED_TRACE(ggml_type_name(type));
    auto a = dir / "a.gguf", b = dir / "b.gguf";
    ASSERT_TRUE(write_random_llama(a, RandomModelShape::tiny(), type, 7));
    ASSERT_TRUE(write_random_llama(b, RandomModelShape::tiny(), type, 7));
    std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
    std::string sa((std::istreambuf_iterator<char>(fa)), {}),
        sb((std::istreambuf_iterator<char>(fb)), {});
    EXPECT_EQ(sa, sb);
    auto m = Model::load(a);
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ((*m)->hp().n_vocab, 512);
    EXPECT_EQ((*m)->layers()[0].wq.type, type);
    // The fast path agrees with the reference on the generated model too (Q8_0 activations
    // are quantised on the fast path only, hence the looser bound there).
    ReferenceSession ref(**m);
    auto want = ref.step(1, 0);
    auto runner = make_llama_runner(*m, 2);
    KvLayout L{2, 4, 16, 16, 4};
    std::vector<float> pool(static_cast<std::size_t>(L.total_elems()));
    std::vector<BlockId> table = {3};
    StepBatch batch;
    batch.tokens = {1};
    batch.positions = {0};
    batch.seq_index = {0};
    batch.seqs = {{table, 1}};
    batch.logit_rows = {0};
    std::vector<float> got(512);
    ASSERT_TRUE(runner->forward(batch, L, pool, got));
    const float tol = type == GgmlType::q8_0 ? 0.1f : 1e-3f;
    for (int i = 0; i < 512; ++i) ASSERT_NEAR(got[i], want[i], tol) << i;
  }
  fs::remove_all(dir);
}

// Qwen2 (Q/K/V biases, NeoX RoPE): the fast paged path equals the reference over a prefill.
TEST(GgufWriter, Qwen2ModelsRunTheSameOnBothPaths) {
  fs::path p = fs::temp_directory_path() / ("weir_qwen2_" + std::to_string(::getpid()) + ".gguf");
  auto shape = RandomModelShape::tiny();
  shape.qwen2 = true;
  shape.n_kv_heads = 2;
  ASSERT_TRUE(write_random_llama(p, shape, GgmlType::f32, 3));
  auto m = Model::load(p);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ((*m)->hp().arch, Arch::qwen2);
  EXPECT_TRUE((*m)->hp().rope_neox);
  EXPECT_FALSE((*m)->layers()[0].bq.empty());
  ReferenceSession ref(**m);
  std::vector<std::vector<float>> want;
  const std::vector<std::int32_t> toks = {1, 300, 301, 302, 303, 304, 305};
  for (std::size_t i = 0; i < toks.size(); ++i)
    want.push_back(ref.step(toks[i], static_cast<std::int32_t>(i)));
  auto runner = make_llama_runner(*m, 1);
  KvLayout L{2, 2, 16, 4, 8};
  std::vector<float> pool(static_cast<std::size_t>(L.total_elems()));
  std::vector<BlockId> table = {6, 1};
  StepBatch batch;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    batch.tokens.push_back(toks[i]);
    batch.positions.push_back(static_cast<std::int32_t>(i));
    batch.seq_index.push_back(0);
    batch.logit_rows.push_back(static_cast<std::int32_t>(i));
  }
  batch.seqs = {{table, 7}};
  std::vector<float> got(toks.size() * 512);
  ASSERT_TRUE(runner->forward(batch, L, pool, got));
  for (std::size_t r = 0; r < toks.size(); ++r) {
    for (int i = 0; i < 512; ++i)
      ASSERT_NEAR(got[r * 512 + i], want[r][static_cast<std::size_t>(i)], 1e-3) << r << " " << i;
  }
  fs::remove(p);
}

}  // namespace
}  // namespace weir::inference
