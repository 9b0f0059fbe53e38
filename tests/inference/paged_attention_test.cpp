#include "weir/inference/paged_attention.hpp"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

struct Case {
  std::int32_t n_heads, n_kv_heads, head_dim, block_size;
};

class PagedAttention : public ::testing::TestWithParam<Case> {};

// Two sequences through scattered blocks, filled by a chunked prefill then decode steps, must
// match contiguous reference attention at every position.
TEST_P(PagedAttention, MatchesContiguousReference) {
  const Case c = GetParam();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> U(-1, 1);
  KvLayout L{2, c.n_kv_heads, c.head_dim, c.block_size, 32};
  std::vector<float> pool(static_cast<std::size_t>(L.total_elems()), NAN);  // poisoned
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
    std::vector<float> want(Q[s].size());
    reference_attention(Q[s].data(), qpos, K[s].data(), V[s].data(), c.n_heads, c.n_kv_heads,
                        c.head_dim, scale, want.data());
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[s][i], want[i], 1e-5) << "seq " << s << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttention,
                         ::testing::Values(Case{4, 4, 16, 16}, Case{8, 4, 8, 4}, Case{6, 2, 48, 16},
                                           Case{4, 1, 13, 3}));

}  // namespace
}  // namespace weir::inference
