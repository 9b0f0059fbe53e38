#include "kernels/paged_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "model/quant.hpp"
#include "weir/inference/engine.hpp"

namespace weir::inference {
namespace {

struct Case {
  std::int32_t n_heads, n_kv_heads, head_dim, block_size;
};

// A pool for L: L.total_bytes() (L.total_elems() elements of L.type, and Q8_0's scales) in a
// float buffer, poisoned with NaN.
std::vector<float> make_pool(const KvLayout& L) {
  return std::vector<float>(static_cast<std::size_t>((L.total_bytes() + 3) / 4), NAN);
}

// x as the pool keeps it: rounded to half (F16), or to the nearest multiple of its block's
// scale (Q8_0: per `block` values, a head of a token, the largest magnitude / 127 rounded to
// bf16, the upper half of an F32, to nearest even).
void round_as_stored(std::vector<float>& x, KvType type, std::size_t block) {
  if (type == KvType::f16) {
    for (auto& v : x) v = fp16_to_fp32(fp32_to_fp16(v));
  } else if (type == KvType::q8_0) {
    for (std::size_t b = 0; b < x.size(); b += block) {
      float amax = 0;
      for (std::size_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
      std::uint32_t u;
      const float want = amax / 127.0f;
      std::memcpy(&u, &want, 4);
      u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
      float d;
      std::memcpy(&d, &u, 4);
      for (std::size_t i = b; i < b + block; ++i)
        x[i] = d > 0 ? std::clamp(std::nearbyint(x[i] / d), -127.0f, 127.0f) * d : 0.0f;
    }
  }
}

class PagedAttention : public ::testing::TestWithParam<std::tuple<Case, KvType>> {};

// Two sequences through scattered blocks, filled by a chunked prefill then decode steps, must
// match contiguous reference attention at every position. F16 and Q8_0 K/V: the reference gets
// K and V rounded as they are stored, so the two see the same values.
TEST_P(PagedAttention, MatchesContiguousReference) {
  const auto [c, type] = GetParam();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> U(-1, 1);
  KvLayout L{2, c.n_kv_heads, c.head_dim, c.block_size, 32, type};
  std::vector<float> pool = make_pool(L);
  const std::int32_t lens[2] = {37, 20};
  // Scattered, interleaved block tables.
  std::vector<BlockId> tables[2];
  for (BlockId b = 0; b < 32; ++b) tables[b % 2].push_back(31 - b);
  std::span<const BlockId> spans[2] = {tables[0], tables[1]};
  const auto kv_dim = L.kv_dim();
  const std::int32_t qdim = c.n_heads * c.head_dim;
  std::vector<float> K[2], V[2], Q[2];
  for (int s = 0; s < 2; ++s) {
    K[s].resize(static_cast<std::size_t>(lens[s] * kv_dim));
    V[s].resize(K[s].size());
    Q[s].resize(static_cast<std::size_t>(lens[s] * qdim));
    for (auto* vec : {&K[s], &V[s], &Q[s]})
      for (auto& x : *vec) x = U(rng);
  }
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  const std::int32_t layer = 1;
  std::vector<float> scratch;
  std::vector<float> got[2];
  for (int s = 0; s < 2; ++s) got[s].assign(Q[s].size(), NAN);
  // Steps: a prefill chunk of up to 16 tokens per sequence, both sequences in one batch.
  std::int32_t done[2] = {0, 0};
  while (done[0] < lens[0] || done[1] < lens[1]) {
    std::vector<std::int32_t> pos, seq;
    std::vector<float> k, v, q;
    for (int s = 0; s < 2; ++s) {
      std::int32_t n = std::min(16, lens[s] - done[s]);
      for (std::int32_t t = done[s]; t < done[s] + n; ++t) {
        pos.push_back(t);
        seq.push_back(s);
        k.insert(k.end(), K[s].begin() + t * kv_dim, K[s].begin() + (t + 1) * kv_dim);
        v.insert(v.end(), V[s].begin() + t * kv_dim, V[s].begin() + (t + 1) * kv_dim);
        q.insert(q.end(), Q[s].begin() + t * qdim, Q[s].begin() + (t + 1) * qdim);
      }
      done[s] += n;
    }
    AttentionBatch b{pos, seq, spans, c.n_heads};
    write_kv(pool, L, layer, b, k.data(), v.data());
    std::vector<float> out(q.size());
    paged_attention(pool, L, layer, b, q.data(), out.data(), scale, 0,
                    static_cast<std::int64_t>(pos.size()) * c.n_heads, scratch);
    for (std::size_t i = 0; i < pos.size(); ++i) {
      std::copy_n(out.begin() + static_cast<std::ptrdiff_t>(i * qdim), qdim,
                  got[seq[i]].begin() + static_cast<std::ptrdiff_t>(pos[i]) * qdim);
    }
  }
  for (int s = 0; s < 2; ++s) {
    std::vector<std::int32_t> qpos(static_cast<std::size_t>(lens[s]));
    for (std::int32_t t = 0; t < lens[s]; ++t) qpos[t] = t;
    for (auto* vec : {&K[s], &V[s]})
      round_as_stored(*vec, type, static_cast<std::size_t>(c.head_dim));
    std::vector<float> want(Q[s].size());
    reference_attention(Q[s].data(), qpos, K[s].data(), V[s].data(), c.n_heads, c.n_kv_heads,
                        c.head_dim, scale, want.data());
    // Q8_0's AVX-512 VNNI path takes the scores as integer dot products: each head of the query
    // rounded to int8 steps of its largest magnitude / 127. Its results match the reference
    // with the query rounded so.
    if (type == KvType::q8_0 && got[s] != want) {
      std::vector<float> q = Q[s], want_rounded(want.size());
      for (std::size_t h = 0; h < q.size(); h += static_cast<std::size_t>(c.head_dim)) {
        float amax = 0;
        for (std::int32_t d = 0; d < c.head_dim; ++d) amax = std::max(amax, std::fabs(q[h + d]));
        const float inv = amax > 0 ? 127.0f / amax : 0.0f;
        for (std::int32_t d = 0; d < c.head_dim; ++d)
          q[h + d] = std::nearbyint(q[h + d] * inv) * (amax / 127.0f);
      }
      reference_attention(q.data(), qpos, K[s].data(), V[s].data(), c.n_heads, c.n_kv_heads,
                          c.head_dim, scale, want_rounded.data());
      double err = 0, err_rounded = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, double(std::fabs(got[s][i] - want[i])));
        err_rounded = std::max(err_rounded, double(std::fabs(got[s][i] - want_rounded[i])));
      }
      if (err_rounded < err) want = want_rounded;
    }
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[s][i], want[i], 1e-5) << "seq " << s << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttention,
    ::testing::Combine(::testing::Values(Case{4, 4, 16, 16}, Case{8, 4, 8, 4}, Case{6, 2, 48, 16},
                                         Case{4, 1, 13, 3}),
                       ::testing::Values(KvType::f32, KvType::f16, KvType::q8_0)));

void check_split(KvType type);

// Heads of 16 * k floats take a path that handles a token's heads in the work range together:
// the result must not depend on where the ranges split (threads split anywhere).
TEST(PagedAttentionSplit, RangesSplitAnywhereGiveTheSameResult) {
  for (KvType type : {KvType::f32, KvType::f16, KvType::q8_0}) {
    SCOPED_TRACE(kv_type_name(type));
    check_split(type);
  }
}

void check_split(KvType type) {
  const std::int32_t n_heads = 8, n_kv_heads = 2, hd = 64, bs = 16, layer = 0;
  KvLayout L{1, n_kv_heads, hd, bs, 12, type};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> U(-1, 1);
  std::vector<float> pool = make_pool(L);
  if (type == KvType::f16) {
    auto* h = reinterpret_cast<std::uint16_t*>(pool.data());
    for (std::int64_t i = 0; i < L.total_elems(); ++i) h[i] = fp32_to_fp16(U(rng));
  } else if (type == KvType::q8_0) {
    auto* v = reinterpret_cast<std::int8_t*>(pool.data());
    for (std::int64_t i = 0; i < L.total_elems(); ++i)
      v[i] = static_cast<std::int8_t>(rng() % 255 - 127);
    auto* d = reinterpret_cast<std::uint16_t*>(v + L.values_bytes());
    for (std::int64_t i = 0; i < L.total_elems() / L.head_dim; ++i)
      d[i] = static_cast<std::uint16_t>(0x3c00 + rng() % 64);  // bf16 scales of about 1/128
  } else {
    for (auto& x : pool) x = U(rng);
  }
  std::vector<BlockId> table = {7, 2, 9, 0, 11, 4};
  std::span<const BlockId> spans[1] = {table};
  const std::vector<std::int32_t> pos = {0, 15, 16, 40, 90}, seq(pos.size(), 0);
  AttentionBatch b{pos, seq, spans, n_heads};
  std::vector<float> q(pos.size() * n_heads * hd);
  for (auto& x : q) x = U(rng);
  const std::int64_t items = static_cast<std::int64_t>(pos.size()) * n_heads;
  std::vector<float> scratch, whole(q.size(), NAN);
  paged_attention(pool, L, layer, b, q.data(), whole.data(), 0.125f, 0, items, scratch);
  for (std::int64_t chunk : {1, 3, 5, 7, 13}) {
    std::vector<float> split(q.size(), NAN);
    for (std::int64_t begin = 0; begin < items; begin += chunk)
      paged_attention(pool, L, layer, b, q.data(), split.data(), 0.125f, begin,
                      std::min(items, begin + chunk), scratch);
    ASSERT_EQ(split, whole) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(
    FastPathShapes, PagedAttention,
    ::testing::Combine(::testing::Values(Case{8, 2, 128, 16}, Case{3, 3, 64, 5}, Case{2, 1, 32, 3}),
                       ::testing::Values(KvType::f32, KvType::f16, KvType::q8_0)));

}  // namespace
}  // namespace weir::inference

namespace weir::inference {
namespace {

// A Q8_0 cache keeps a head of a token in head_dim bytes and a 2-byte scale: for heads of 64,
// 66 bytes against F32's 256 (0.26), so the same budget holds 3.9 times the tokens; heads of 48
// (the 15M shape): 50 against 192.
TEST(KvLayout, AQ8BlockCostsAboutAQuarterOfAnF32One) {
  const KvLayout f32{6, 8, 64, 16, 100, KvType::f32}, q8{6, 8, 64, 16, 100, KvType::q8_0},
      f16{6, 8, 64, 16, 100, KvType::f16};
  EXPECT_EQ(f32.type_block_bytes(), 16 * 512 * 2 * 6 * 4);
  EXPECT_EQ(f16.type_block_bytes() * 2, f32.type_block_bytes());
  EXPECT_EQ(q8.type_block_bytes() * 256, f32.type_block_bytes() * 66);
  EXPECT_EQ(q8.total_bytes(), q8.type_block_bytes() * 100);
  EXPECT_EQ(q8.values_bytes(), q8.total_elems());

  const KvLayout f32_15m{6, 6, 48, 16, 100, KvType::f32}, q8_15m{6, 6, 48, 16, 100, KvType::q8_0};
  EXPECT_EQ(q8_15m.type_block_bytes() * 192, f32_15m.type_block_bytes() * 50);
}

}  // namespace
}  // namespace weir::inference
