// weir's CUDA kernels run on the CPU under a host emulation of the CUDA execution model
// (cuda_emu.hpp), against the CPU references: checks their logic (index math through the
// block table, causal masking, split-K partials and their reduce, tile boundaries, barrier
// and shuffle structure) on any machine, GPU or not. The same kernels on a real GPU:
// cuda_ops_test.cpp (label gpu). Sizes are small: every block runs on 128 host threads.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/paged_attention.hpp"
#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_plan.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/model.hpp"

// clang-format off
#include "cuda_emu.hpp"
#include "kernels.cuh"
// clang-format on

// inference_cuda_race_test compiles this file again under ThreadSanitizer, as CudaEmulatedTsan.
#ifndef WEIR_EMU_SUITE
#define WEIR_EMU_SUITE CudaEmulated
#endif

namespace weir::inference {
namespace {

namespace cu = weir::inference::cuda;

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> U(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = U(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << "element " << i << " was not written";
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.0f, std::fabs(want[i]))) << "element " << i;
  }
}

// One decode token per sequence over a scattered block table; the CPU reference result.
struct DecodeCase {
  int hd, n_heads = 2, n_kv = 1, bs = 16;  // GQA: two query heads per KV head
  std::vector<std::int32_t> positions, seq, tables;
  int max_blocks = 0;
  KvLayout L;
  std::vector<float> pool, q, want;

  DecodeCase(int head_dim, std::vector<std::int32_t> pos, std::mt19937& rng)
      : hd(head_dim), positions(std::move(pos)) {
    const int n = static_cast<int>(positions.size());
    int total = 0;
    for (int p : positions) max_blocks = std::max(max_blocks, p / bs + 1), total += p / bs + 1;
    L = KvLayout{1, n_kv, hd, bs, total + 2};
    std::vector<std::int32_t> perm(static_cast<std::size_t>(L.num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(static_cast<std::size_t>(n) * max_blocks, 0);
    for (int s = 0, next = 0; s < n; ++s)
      for (int b = 0; b <= positions[s] / bs; ++b) tables[s * max_blocks + b] = perm[next++];
    seq.resize(static_cast<std::size_t>(n));
    std::iota(seq.begin(), seq.end(), 0);
    pool = random_floats(rng, static_cast<std::size_t>(L.total_elems()));
    q = random_floats(rng, static_cast<std::size_t>(n) * n_heads * hd);
    std::vector<std::span<const BlockId>> spans;
    for (int s = 0; s < n; ++s) spans.emplace_back(tables.data() + s * max_blocks, max_blocks);
    AttentionBatch cb{positions, seq, spans, n_heads};
    want.resize(q.size());
    std::vector<float> scratch;
    paged_attention(pool, L, 0, cb, q.data(), want.data(), scale(), 0,
                    static_cast<std::int64_t>(n) * n_heads, scratch);
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(hd)); }
  cu::PagedBatch batch() const {
    return {positions.data(), seq.data(), tables.data(), max_blocks,
            static_cast<int>(positions.size())};
  }
};

template <int HD>
std::vector<float> emulate_attention(const DecodeCase& c, cu::AttentionSplit split) {
  const int n = static_cast<int>(c.positions.size());
  const long long th = static_cast<long long>(n) * c.n_heads;
  std::vector<float> out(c.q.size(), NAN);
  std::vector<float> partials(static_cast<std::size_t>(th) * split.splits * (HD + 2), NAN);
  float* part_o = split.splits > 1 ? partials.data() : nullptr;
  float* part_ml = split.splits > 1 ? partials.data() + th * split.splits * HD : nullptr;
  weir_emu::launch(dim3(static_cast<unsigned>(th), static_cast<unsigned>(split.splits)),
                   cu::kAttnWarps * 32, cu::paged_attention_kernel<HD>, c.pool.data(), c.L, 0,
                   c.batch(), c.q.data(), out.data(), c.n_heads, c.scale(), split.chunk, part_o,
                   part_ml);
  if (split.splits > 1) {
    weir_emu::launch(dim3(static_cast<unsigned>(th)), 128, cu::attention_reduce_kernel,
                     static_cast<const float*>(part_o), static_cast<const float*>(part_ml),
                     c.positions.data(), out.data(), c.n_heads, HD, split.splits, split.chunk);
  }
  return out;
}

TEST(WEIR_EMU_SUITE, DecodeAttentionUnsplitAndSplitMatchTheCpu) {
  std::mt19937 rng(11);
  // Contexts of 1 to 301 positions; splits whose later chunks start past short contexts
  // (they must write nothing the reduce reads), a last split running past splits x chunk,
  // and the most splits allowed. (Chunks are shorter than the planner's minimum: the kernels
  // take any chunk, and small sizes keep the emulation fast.)
  DecodeCase c16(16, {300, 100, 0, 64, 255, 256}, rng);
  for (cu::AttentionSplit split :
       {cu::AttentionSplit{}, cu::AttentionSplit{3, 80}, cu::AttentionSplit{2, 151},
        cu::AttentionSplit{cu::kSplitMaxSplits, 10}}) {
    SCOPED_TRACE(std::to_string(split.splits) + " splits of " + std::to_string(split.chunk));
    expect_close(emulate_attention<16>(c16, split), c16.want, 1e-4f);
  }
  DecodeCase c64(64, {200, 17, 0}, rng);
  for (cu::AttentionSplit split : {cu::AttentionSplit{}, cu::AttentionSplit{4, 50}}) {
    SCOPED_TRACE("head_dim 64, " + std::to_string(split.splits) + " splits");
    expect_close(emulate_attention<64>(c64, split), c64.want, 1e-4f);
  }
  DecodeCase c48(48, {100, 40}, rng);  // a head size that is not a multiple of 32
  expect_close(emulate_attention<48>(c48, cu::AttentionSplit{2, 60}), c48.want, 1e-4f);
}

template <int HD>
void check_prefill(std::mt19937& rng) {
  SCOPED_TRACE("head_dim " + std::to_string(HD));
  const int n_kv = 1, n_heads = 2, bs = 16, max_blocks = 6, n_seqs = 4;
  KvLayout L{2, n_kv, HD, bs, n_seqs * max_blocks};
  std::vector<std::int32_t> positions, seq;
  for (int p = 5; p < 42; ++p) positions.push_back(p), seq.push_back(0);  // 37 after a prefix
  for (int p = 0; p < 20; ++p) positions.push_back(p), seq.push_back(1);
  positions.push_back(90), seq.push_back(2);                               // a decode token
  for (int p : {0, 1, 2, 7, 8}) positions.push_back(p), seq.push_back(3);  // a gap
  const int n = static_cast<int>(positions.size());
  std::vector<std::int32_t> tables(static_cast<std::size_t>(n_seqs) * max_blocks);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  auto pool = random_floats(rng, static_cast<std::size_t>(L.total_elems()));
  auto q = random_floats(rng, static_cast<std::size_t>(n) * n_heads * HD);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  std::vector<std::span<const BlockId>> spans;
  for (int s = 0; s < n_seqs; ++s) spans.emplace_back(tables.data() + s * max_blocks, max_blocks);
  AttentionBatch cb{positions, seq, spans, n_heads};
  std::vector<float> want(q.size()), scratch;
  paged_attention(pool, L, 1, cb, q.data(), want.data(), scale, 0,
                  static_cast<std::int64_t>(n) * n_heads, scratch);

  std::vector<std::int32_t> tiles;
  const int n_tiles = cu::build_prefill_tiles(positions.data(), seq.data(), n, tiles);
  std::vector<float> out(q.size(), NAN);
  cu::PagedBatch gb{positions.data(), seq.data(), tables.data(), max_blocks, n};
  weir_emu::launch(dim3(static_cast<unsigned>(n_tiles * n_heads)), cu::kAttnWarps * 32,
                   cu::paged_prefill_kernel<HD>, static_cast<const float*>(pool.data()), L, 1, gb,
                   static_cast<const std::int32_t*>(tiles.data()),
                   static_cast<const float*>(q.data()), out.data(), n_heads, scale);
  expect_close(out, want, 1e-4f);
}

TEST(WEIR_EMU_SUITE, TiledPrefillAttentionMatchesTheCpu) {
  std::mt19937 rng(12);
  check_prefill<8>(rng);
  check_prefill<48>(rng);
  check_prefill<64>(rng);
}

TEST(WEIR_EMU_SUITE, Bf16ConversionAndEmbeddingMatchTheHost) {
  std::mt19937 rng(13);
  auto x = random_floats(rng, 1000, -1000, 1000);
  x[0] = 1.00390625f;  // a tie
  std::vector<std::uint16_t> got(x.size(), 0xFFFF);
  weir_emu::launch(dim3(4), 256, cu::f32_to_bf16_kernel, static_cast<const float*>(x.data()),
                   got.data(), static_cast<long long>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], cu::float_to_bf16(x[i])) << i;

  const int dim = 40;
  std::vector<std::uint16_t> table(10 * dim);
  for (std::size_t i = 0; i < table.size(); ++i)
    table[i] = cu::float_to_bf16(static_cast<float>(i) * 0.37f);
  std::vector<std::int32_t> toks = {9, 0, 3};
  std::vector<float> out(toks.size() * dim, NAN), want;
  for (auto t : toks)
    for (int i = 0; i < dim; ++i) want.push_back(cu::bf16_to_float(table[t * dim + i]));
  weir_emu::launch(dim3(3), 128, cu::embed_bf16_kernel,
                   static_cast<const std::uint16_t*>(table.data()),
                   static_cast<const std::int32_t*>(toks.data()), out.data(), dim);
  expect_close(out, want, 0);
}

TEST(WEIR_EMU_SUITE, RmsNormAndArgmaxMatchTheHost) {
  std::mt19937 rng(14);
  const int n = 3, dim = 300;
  auto x = random_floats(rng, n * dim), w = random_floats(rng, dim);
  std::vector<float> want(x.size()), out(x.size(), NAN);
  for (int r = 0; r < n; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const float inv = 1.0f / std::sqrt(float(ss / dim) + 1e-5f);
    for (int i = 0; i < dim; ++i) want[r * dim + i] = w[i] * (x[r * dim + i] * inv);
  }
  weir_emu::launch(dim3(n), 256, cu::rms_norm_kernel, static_cast<const float*>(x.data()),
                   static_cast<const float*>(w.data()), out.data(), dim, 1e-5f);
  expect_close(out, want, 1e-5f);

  auto logits = random_floats(rng, 2 * 1000);
  logits[10] = logits[700] = 5.0f;  // a tie: the lowest index wins
  std::vector<std::int32_t> idx(2, -1);
  weir_emu::launch(dim3(2), 256, cu::argmax_kernel, static_cast<const float*>(logits.data()),
                   idx.data(), 1000);
  EXPECT_EQ(idx[0], 10);
  EXPECT_EQ(idx[1], std::max_element(logits.begin() + 1000, logits.end()) - logits.begin() - 1000);
}

TEST(WEIR_EMU_SUITE, RopeSwigluWriteKvAndGatherMatchTheHost) {
  std::mt19937 rng(15);
  const int n = 3, heads = 2, hd = 16;
  std::vector<std::int32_t> pos = {0, 7, 4095};
  for (bool neox : {false, true}) {
    auto x = random_floats(rng, n * heads * hd);
    std::vector<float> want = x;
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < heads; ++h) {
        float* v = &want[(t * heads + h) * hd];
        for (int j = 0; j < hd / 2; ++j) {
          const double theta = pos[t] * 0.5 * std::pow(10000.0, -2.0 * j / hd);
          const int i0 = neox ? j : 2 * j, i1 = neox ? j + hd / 2 : 2 * j + 1;
          const double a = v[i0], b = v[i1];
          v[i0] = float(a * std::cos(theta) - b * std::sin(theta));
          v[i1] = float(a * std::sin(theta) + b * std::cos(theta));
        }
      }
    weir_emu::launch(dim3(1), 64, cu::rope_kernel, x.data(),
                     static_cast<const std::int32_t*>(pos.data()), n, heads, hd, 10000.0f, 0.5f,
                     neox ? 1 : 0);
    expect_close(x, want, 2e-3f);
  }

  auto g = random_floats(rng, 300, -6, 6), u = random_floats(rng, 300);
  std::vector<float> out(300, NAN), swant(300);
  for (int i = 0; i < 300; ++i) swant[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  weir_emu::launch(dim3(2), 256, cu::swiglu_kernel, static_cast<const float*>(g.data()),
                   static_cast<const float*>(u.data()), out.data(), 300LL);
  expect_close(out, swant, 1e-5f);

  // write_kv through a block table into layer 1 of a two-layer pool, as the CPU path does.
  KvLayout L{2, 2, 8, 4, 6};
  std::vector<std::int32_t> kpos = {0, 5, 3}, kseq = {0, 0, 1}, tables = {4, 1, 0, 2, 5, 3};
  auto k = random_floats(rng, 3 * 16), v = random_floats(rng, 3 * 16);
  auto pool = random_floats(rng, static_cast<std::size_t>(L.total_elems()));
  std::vector<float> cpu_pool = pool;
  std::vector<std::span<const BlockId>> spans = {{tables.data(), 3}, {tables.data() + 3, 3}};
  AttentionBatch cb{kpos, kseq, spans, 2};
  write_kv(cpu_pool, L, 1, cb, k.data(), v.data());
  cu::PagedBatch gb{kpos.data(), kseq.data(), tables.data(), 3, 3};
  weir_emu::launch(dim3(3), 128, cu::write_kv_kernel, pool.data(), L, 1, gb,
                   static_cast<const float*>(k.data()), static_cast<const float*>(v.data()));
  expect_close(pool, cpu_pool, 0);

  std::vector<std::int32_t> rows = {2, 0};
  std::vector<float> gathered(2 * 16, NAN), gwant;
  for (int r : rows) gwant.insert(gwant.end(), k.begin() + r * 16, k.begin() + (r + 1) * 16);
  weir_emu::launch(dim3(2), 128, cu::gather_kernel, static_cast<const float*>(k.data()),
                   static_cast<const std::int32_t*>(rows.data()), gathered.data(), 16);
  expect_close(gathered, gwant, 0);
}

// Q8_0 blocks (from the reference quantiser) dequantised like the CPU path's dequantize_row,
// to FP32 exactly and to BF16 as the rounding of that.
TEST(WEIR_EMU_SUITE, Q8_0DequantisationMatchesTheCpuPath) {
  std::mt19937 rng(16);
  const int rows = 3, cols = 96;
  auto values = random_floats(rng, rows * cols, -3, 3);
  auto q8 = quantize_tensor(values, GgmlType::q8_0);
  ASSERT_TRUE(q8) << q8.error().message;
  Weight w{GgmlType::q8_0, reinterpret_cast<const std::byte*>(q8->data()), rows, cols};
  std::vector<float> want(rows * cols);
  for (int r = 0; r < rows; ++r) dequantize_row(w, r, want.data() + r * cols);
  std::vector<float> f32(want.size(), NAN);
  std::vector<std::uint16_t> b16(want.size(), 0xFFFF);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(q8->data());
  const long long n = rows * cols;
  weir_emu::launch(dim3(2), 256, cu::dequant_q8_0_kernel<false>, bytes,
                   static_cast<void*>(f32.data()), n, cols);
  weir_emu::launch(dim3(2), 256, cu::dequant_q8_0_kernel<true>, bytes,
                   static_cast<void*>(b16.data()), n, cols);
  expect_close(f32, want, 0);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(b16[i], cu::float_to_bf16(want[i])) << i;
}

}  // namespace
}  // namespace weir::inference
