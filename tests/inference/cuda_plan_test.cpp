// The CUDA backend's host-side decisions, which need no GPU: BF16 rounding, the memory plan,
// the split-K decode attention plan, CUDA graph keys, argument checks that fail before any
// launch, and the cuBLAS entry points. Runs on every build with CUDA, GPU or not.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_plan.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference::cuda {
namespace {

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reference: the nearest BF16 by exhaustive comparison of the two neighbours, ties to even.
std::uint16_t bf16_reference(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
  const double dl = std::fabs(double(f) - double(bf16_to_float(lo)));
  const double dh = std::fabs(double(f) - double(bf16_to_float(hi)));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(CudaPlanBf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808000u)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to even.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f818000u)), 0x3f82);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808001u)), 0x3f81);  // just above half: up
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload is only in the low bits stays NaN (would round to inf otherwise).
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_to_float(0x7f800001u)))));
  // The largest float rounds to infinity, as __float2bfloat16_rn does.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(CudaPlanBf16, EveryBf16RoundTripsAndRandomFloatsRoundToTheNearest) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), h) << h;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> U;
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_to_float(U(rng));
    if (std::isnan(f) || std::isinf(f) || std::fabs(f) > 3.38e38f) continue;
    ASSERT_EQ(float_to_bf16(f), bf16_reference(f)) << f;
  }
}

// Every half against the CPU path's F16 dequantisation (dequantize_row of an F16 Weight).
TEST(CudaPlanFp16, EveryHalfConvertsLikeTheCpuPath) {
  std::vector<std::uint16_t> halves(0x10000);
  for (std::uint32_t h = 0; h < 0x10000u; ++h) halves[h] = static_cast<std::uint16_t>(h);
  Weight w{GgmlType::f16, reinterpret_cast<const std::byte*>(halves.data()), 1, 0x10000};
  std::vector<float> want(0x10000);
  dequantize_row(w, 0, want.data());
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float got = fp16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(want[h])) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::memcmp(&got, &want[h], 4), 0) << h << ": " << got << " vs " << want[h];
    }
  }
}

TEST(CudaPlanMemory, KvGetsWhatTheFractionLeavesAfterWeightsAndWorkspace) {
  const std::size_t MiB = 1 << 20;
  auto p = plan_memory(10000 * MiB, 0.9, 4000 * MiB, 1000 * MiB, 1 * MiB);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->usable_bytes, 9000 * MiB);
  EXPECT_EQ(p->kv_bytes, 4000 * MiB);
  EXPECT_EQ(p->weight_bytes, 4000 * MiB);
  EXPECT_EQ(p->workspace_bytes, 1000 * MiB);
}

TEST(CudaPlanMemory, AModelThatDoesNotFitFailsWithTheNumbers) {
  const std::size_t MiB = 1 << 20;
  auto p = plan_memory(10000 * MiB, 0.9, 8500 * MiB, 1000 * MiB, 2 * MiB);
  ASSERT_FALSE(p);
  EXPECT_TRUE(p.error().is(Errc::memory_budget_exceeded));
  EXPECT_EQ(p.error().message,
            "the model does not fit in GPU memory: 90% of 10000 MiB free is 9000 MiB; weights "
            "8500 MiB and activation workspace 1000 MiB leave -500 MiB for the KV cache, which "
            "needs at least 2 MiB (lower max_batch_tokens, use a smaller or quantised model, or "
            "--device cpu)");
  // Fits the weights and workspace but not one KV block.
  EXPECT_FALSE(plan_memory(10000 * MiB, 0.9, 7999 * MiB, 1000 * MiB, 2 * MiB));
  EXPECT_TRUE(plan_memory(10000 * MiB, 0.9, 7998 * MiB, 1000 * MiB, 2 * MiB));
  EXPECT_TRUE(plan_memory(10000 * MiB, 0.0, 0, 0, 0).error().is(Errc::invalid_argument));
  EXPECT_TRUE(plan_memory(10000 * MiB, 1.5, 0, 0, 0).error().is(Errc::invalid_argument));
}

TEST(CudaPlanMemory, WorkspaceCountsEveryActivationBuffer) {
  ActivationShape s{.max_batch_tokens = 100,
                    .max_logit_rows = 10,
                    .dim = 64,
                    .hidden = 172,
                    .n_heads = 8,
                    .n_kv_heads = 4,
                    .head_dim = 8,
                    .n_vocab = 512,
                    .precision = Precision::fp32,
                    .sm_count = 0};
  // x, xb, proj; q, att; k, v; h1, h2 for 100 tokens; 10 rows of logits; 4 ints of metadata
  // and 2 of prefill tiles per token.
  const std::size_t floats = 100 * (3 * 64 + 2 * 64 + 2 * 32 + 2 * 172) + 10 * 512;
  EXPECT_EQ(activation_workspace_bytes(s), floats * 4 + 100 * 6 * 4 + kCublasWorkspaceBytes);
  auto bf16 = s;
  bf16.precision = Precision::bf16;  // plus a BF16 copy of the widest GEMM input (hidden)
  EXPECT_EQ(activation_workspace_bytes(bf16), activation_workspace_bytes(s) + 100 * 172 * 2);
  auto gpu = s;
  gpu.sm_count = 132;  // plus the split-K partials
  EXPECT_EQ(activation_workspace_bytes(gpu),
            activation_workspace_bytes(s) + attention_partial_floats(132, 8) * 4);
  auto no_chunk = s;
  no_chunk.max_logit_rows = 0;  // every token's logits
  EXPECT_EQ(activation_workspace_bytes(no_chunk), activation_workspace_bytes(s) + 90 * 512 * 4);
}

TEST(CudaPlanSplit, ShortContextsAndBusyBatchesAreNotSplit) {
  EXPECT_EQ(plan_attention_split(32, kSplitMinContext - 1, 132), AttentionSplit{});
  EXPECT_EQ(plan_attention_split(132 * kSplitBlocksPerSm, 1 << 20, 132), AttentionSplit{});
  EXPECT_EQ(plan_attention_split(32, 1 << 20, 0), AttentionSplit{});  // no device
  EXPECT_EQ(plan_attention_split(0, 1 << 20, 132), AttentionSplit{});
}

TEST(CudaPlanSplit, LongContextsOfSmallBatchesAreSplit) {
  // One sequence, 32 heads, 32K context on 132 SMs: 528 target blocks / 32 = 17 splits.
  auto s = plan_attention_split(32, 32768, 132);
  EXPECT_EQ(s.splits, 17);
  EXPECT_EQ(s.chunk, (32768 + 16) / 17);
  // Capped at kSplitMaxSplits.
  EXPECT_EQ(plan_attention_split(1, 1 << 20, 132).splits, kSplitMaxSplits);
}

TEST(CudaPlanSplit, EverySplitCoversTheContextAndFitsThePartials) {
  for (int sms : {1, 2, 46, 108, 132}) {
    for (long long th : {1LL, 2LL, 7LL, 32LL, 64LL, 100LL, 257LL, 1000LL}) {
      for (long long ctx : {1LL, 255LL, 512LL, 513LL, 1000LL, 4096LL, 65536LL, 1LL << 20}) {
        const auto s = plan_attention_split(th, ctx, sms);
        SCOPED_TRACE(std::to_string(sms) + " SMs, " + std::to_string(th) + " token-heads, " +
                     std::to_string(ctx) + " positions");
        ASSERT_GE(s.splits, 1);
        ASSERT_LE(s.splits, kSplitMaxSplits);
        if (s.splits == 1) continue;
        ASSERT_GE(s.chunk, kSplitMinChunk);
        ASSERT_GE(static_cast<long long>(s.splits) * s.chunk, ctx);      // covers
        ASSERT_LT(static_cast<long long>(s.splits - 1) * s.chunk, ctx);  // no empty split
        ASSERT_LE(static_cast<std::size_t>(th) * s.splits * (128 + 2),
                  attention_partial_floats(sms, 128));
      }
    }
  }
}

TEST(CudaPlanPrefill, TilesAreRunsOfConsecutivePositionsOfOneSequence) {
  // seq 0: 0..19 (two tiles: 16 + 4); seq 1: one decode token; seq 2: 5..7 then a gap at 9.
  std::vector<std::int32_t> pos, seq;
  for (int p = 0; p < 20; ++p) pos.push_back(p), seq.push_back(0);
  pos.push_back(300), seq.push_back(1);
  for (int p : {5, 6, 7, 9}) pos.push_back(p), seq.push_back(2);
  std::vector<std::int32_t> tiles = {99};
  const int n = build_prefill_tiles(pos.data(), seq.data(), static_cast<int>(pos.size()), tiles);
  EXPECT_EQ(n, 5);
  EXPECT_EQ(tiles, (std::vector<std::int32_t>{0, 16, 16, 4, 20, 1, 21, 3, 24, 1}));
  // Every token in exactly one tile, in order, none longer than kPrefillTile.
  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    pos.clear(), seq.clear();
    const int n_seqs = 1 + static_cast<int>(rng() % 5);
    for (int s = 0; s < n_seqs; ++s) {
      int p = static_cast<int>(rng() % 100);
      const int len = static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) pos.push_back(p + i + (rng() % 10 == 0)), seq.push_back(s);
    }
    const int nt = build_prefill_tiles(pos.data(), seq.data(), static_cast<int>(pos.size()), tiles);
    ASSERT_EQ(static_cast<std::size_t>(nt) * 2, tiles.size());
    int next = 0;
    for (int t = 0; t < nt; ++t) {
      ASSERT_EQ(tiles[2 * t], next);
      const int c = tiles[2 * t + 1];
      ASSERT_GE(c, 1);
      ASSERT_LE(c, kPrefillTile);
      for (int i = 1; i < c; ++i) {
        ASSERT_EQ(seq[next + i], seq[next]);
        ASSERT_EQ(pos[next + i], pos[next] + i);
      }
      next += c;
    }
    ASSERT_EQ(next, static_cast<int>(pos.size()));
  }
}

TEST(CudaPlanGraphs, TableStridesArePowersOfTwoWithinTheCap) {
  EXPECT_EQ(table_stride_for(1, 1000), 4);
  EXPECT_EQ(table_stride_for(4, 1000), 4);
  EXPECT_EQ(table_stride_for(5, 1000), 8);
  EXPECT_EQ(table_stride_for(129, 1000), 256);
  EXPECT_EQ(table_stride_for(600, 1000), 1000);  // the cap, not 1024
  EXPECT_EQ(table_stride_for(3, 2), 3);          // never below the longest table
  EXPECT_EQ(table_stride_for(3, 0), 4);          // no cap
  // A growing decode context changes graph keys only at powers of two.
  std::set<int> strides;
  for (int blocks = 1; blocks <= 128; ++blocks) strides.insert(table_stride_for(blocks, 1 << 20));
  EXPECT_EQ(strides, (std::set<int>{4, 8, 16, 32, 64, 128}));
}

TEST(CudaPlanGraphs, OnlyPureDecodeStepsWithinTheLimitGetAKey) {
  auto k = decode_graph_key(8, 8, 8, 16, 256);
  ASSERT_TRUE(k);
  EXPECT_EQ(*k, (GraphKey{8, 8, 16, 8}));
  EXPECT_EQ(*decode_graph_key(8, 8, 8, 16, 256), *k);  // same shape, same graph
  EXPECT_FALSE(*decode_graph_key(8, 8, 8, 32, 256) == *k);
  EXPECT_TRUE(*k < *decode_graph_key(8, 8, 8, 32, 256) || *decode_graph_key(8, 8, 8, 32, 256) < *k);
  EXPECT_FALSE(decode_graph_key(40, 2, 2, 16, 256));       // prefill chunks
  EXPECT_FALSE(decode_graph_key(300, 300, 300, 16, 256));  // over the limit
  EXPECT_FALSE(decode_graph_key(0, 0, 0, 16, 256));
  EXPECT_FALSE(decode_graph_key(4, 4, 5, 16, 256));  // more logit rows than tokens
  EXPECT_TRUE(decode_graph_key(4, 4, 0, 16, 256));   // no logits wanted (e.g. all cancelled)
}

// Argument checks happen before any launch, so they hold without a device.
TEST(CudaPlanChecks, UnsupportedHeadSizeIsAClearError) {
  EXPECT_FALSE(paged_attention_supported(24));
  for (int hd : {8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256})
    EXPECT_TRUE(paged_attention_supported(hd)) << hd;
  KvLayout L{1, 1, 24, 16, 1};
  PagedBatch b{nullptr, nullptr, nullptr, 1, 1};
  auto st = paged_attention(nullptr, L, 0, b, nullptr, nullptr, 1, 1.0f);
  ASSERT_FALSE(st);
  EXPECT_EQ(
      st.error().message,
      "paged_attention: head size 24 has no CUDA kernel (compiled: 8, 16, 32, 48, 64, 80, 96, 128, "
      "160, 192, 256); use --device cpu");
}

TEST(CudaPlanChecks, ABadSplitIsRejectedBeforeTheLaunch) {
  // Every call here must fail its checks: a launch would read null pointers on a GPU.
  KvLayout L{1, 2, 64, 16, 1};
  PagedBatch b{nullptr, nullptr, nullptr, 1, 1};
  auto st =
      paged_attention(nullptr, L, 0, b, nullptr, nullptr, 2, 1.0f, AttentionSplit{4, 256}, nullptr);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message,
            "paged_attention: bad split (4 splits of 256 positions, partials missing)");
  float dummy = 0;
  EXPECT_FALSE(paged_attention(nullptr, L, 0, b, nullptr, nullptr, 2, 1.0f,
                               AttentionSplit{kSplitMaxSplits + 1, 256}, &dummy));
  EXPECT_FALSE(
      paged_attention(nullptr, L, 0, b, nullptr, nullptr, 2, 1.0f, AttentionSplit{2, 0}, &dummy));
  EXPECT_FALSE(
      paged_attention(nullptr, L, 0, b, nullptr, nullptr, 2, 1.0f, AttentionSplit{0, 0}, &dummy));
  auto heads = paged_attention(nullptr, L, 0, b, nullptr, nullptr, 3, 1.0f);
  ASSERT_FALSE(heads);
  EXPECT_EQ(heads.error().message, "paged_attention: n_heads=3 is not a multiple of n_kv_heads=2");
}

TEST(CudaPlanChecks, Q8_0NeedsWholeBlocks) {
  float out = 0;
  auto st = dequantize_q8_0(nullptr, 2, 48, &out);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "dequantize_q8_0: a [2, 48] matrix is not whole Q8_0 blocks of 32");
}

TEST(CudaPlanChecks, TiledPrefillCoversHeadSizesUpTo128) {
  for (int hd : {8, 16, 32, 48, 64, 80, 96, 128}) EXPECT_TRUE(prefill_attention_supported(hd));
  for (int hd : {24, 160, 192, 256}) EXPECT_FALSE(prefill_attention_supported(hd));
  KvLayout L{1, 1, 256, 16, 1};
  PagedBatch b{nullptr, nullptr, nullptr, 1, 1};
  auto st = paged_prefill_attention(nullptr, L, 0, b, nullptr, 1, nullptr, nullptr, 1, 1.0f);
  ASSERT_FALSE(st);
  EXPECT_TRUE(st.error().is(Errc::unsupported));
}

// cuBLAS is opened on first use rather than linked; this checks the loading on any machine
// with the toolkit, GPU or not, including every entry point weir resolves.
TEST(CudaCublas, OpensWithTheEntryPointsWeirUses) {
  std::size_t n = 0;
  const char* const* names = cublas_entry_points(&n);
  std::set<std::string> got(names, names + n);
  EXPECT_EQ(got, (std::set<std::string>{"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                                        "cublasSetMathMode", "cublasSetWorkspace_v2",
                                        "cublasSgemm_v2", "cublasGemmEx"}));
  auto st = cublas_loadable();
  EXPECT_TRUE(st) << st.error().message;
}

}  // namespace
}  // namespace weir::inference::cuda
