#include "weir/inference/paged_attention.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "simd.hpp"

namespace weir::inference {

namespace {

// Dot product with 8 independent partial sums, so the compiler vectorises it without
// -ffast-math (the result differs from a serial sum only in rounding order).
inline float dot(const float* a, const float* b, std::int32_t n) {
  float acc[8] = {};
  std::int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float a, const float* x, float* y, std::int32_t n) {
  for (std::int32_t i = 0; i < n; ++i) y[i] += a * x[i];
}

using simd::exp16;
using simd::load16;
using simd::store16;
using simd::sum16;
using simd::v16;

// Query heads [h0, h1) of one token of paged_attention, for head_dim == 16 * NV. Block-major:
// a KV block's tile (block_size rows of kv_dim floats, contiguous) is read for all these heads
// before the next, so the memory streams whole tiles (a head's slice alone is a few cache
// lines every kv_dim floats, which leaves the loads waiting on memory); the next tile is
// prefetched meanwhile. q, o: the token's rows, [n_heads * head_dim]. scratch: [heads *
// (pos + 16)]: scores, then probabilities, per head.
template <int NV>
[[gnu::always_inline]] inline void attend(const float* q, float* o, std::int32_t h0,
                                          std::int32_t h1, std::int32_t group, const float* k_plane,
                                          const float* v_plane, std::span<const BlockId> table,
                                          std::int32_t pos, const KvLayout& L, float scale,
                                          float* scratch) {
  constexpr std::int32_t hd = 16 * NV;
  const std::int32_t bs = L.block_size, nh = h1 - h0, n = pos + 1, n16 = (n + 15) / 16 * 16;
  const auto kv_dim = L.kv_dim();
  const std::int64_t stride = n16;
  // The KV columns these heads read: [c0, c1).
  const std::int64_t c0 = std::int64_t{h0 / group} * hd,
                     c1 = std::int64_t{(h1 - 1) / group + 1} * hd;
  auto tile = [&](const float* plane, std::int32_t bi) {
    return plane + table[static_cast<std::size_t>(bi)] * L.tile_elems();
  };
  auto prefetch_block = [&](const float* plane, std::int32_t bi) {
    const std::int32_t start = bi * bs;
    if (start > pos) return;
    const float* row = tile(plane, bi);
    const std::int32_t rows = std::min(pos + 1 - start, bs);
    for (std::int32_t p = 0; p < rows; ++p, row += kv_dim) {
      for (std::int64_t c = c0; c < c1; c += 16) __builtin_prefetch(row + c);
      __builtin_prefetch(row + c1 - 1);  // the range need not start a cache line
    }
  };

  // Scores: [nh][n16], q pre-scaled.
  prefetch_block(k_plane, 0);
  for (std::int32_t start = 0, bi = 0; start <= pos; start += bs, ++bi) {
    prefetch_block(k_plane, bi + 1);
    const std::int32_t end_p = std::min(pos + 1, start + bs);
    for (std::int32_t hh = 0; hh < nh; ++hh) {
      const std::int32_t h = h0 + hh;
      v16 qv[NV];
      for (int j = 0; j < NV; ++j) qv[j] = load16(q + std::int64_t{h} * hd + 16 * j) * scale;
      const float* krow = tile(k_plane, bi) + std::int64_t{h / group} * hd;
      float* scores = scratch + hh * stride;
      std::int32_t p = start;
      for (; p + 16 <= end_p; p += 16, krow += 16 * kv_dim) {  // 16 chains, summed as a tree
        v16 a[16];
        for (int c = 0; c < 16; ++c) a[c] = qv[0] * load16(krow + c * kv_dim);
        for (int j = 1; j < NV; ++j) {
          for (int c = 0; c < 16; ++c) a[c] += qv[j] * load16(krow + c * kv_dim + 16 * j);
        }
        store16(scores + p, simd::sum16x16(a));
      }
      for (; p + 4 <= end_p; p += 4, krow += 4 * kv_dim) {  // four independent chains
        v16 a[4];
        for (int c = 0; c < 4; ++c) a[c] = qv[0] * load16(krow + c * kv_dim);
        for (int j = 1; j < NV; ++j) {
          for (int c = 0; c < 4; ++c) a[c] += qv[j] * load16(krow + c * kv_dim + 16 * j);
        }
        for (int c = 0; c < 4; ++c) scores[p + c] = sum16(a[c]);
      }
      for (; p < end_p; ++p, krow += kv_dim) {
        v16 a = qv[0] * load16(krow);
        for (int j = 1; j < NV; ++j) a += qv[j] * load16(krow + 16 * j);
        scores[p] = sum16(a);
      }
    }
  }
  prefetch_block(v_plane, 0);

  // Softmax per head (exp in chunks of 16, the last padded past pos); 1 / sum kept for the end.
  float* inv = scratch + nh * stride;
  for (std::int32_t hh = 0; hh < nh; ++hh) {
    float* scores = scratch + hh * stride;
    float max_score = -INFINITY;
    for (std::int32_t p = 0; p < n; ++p) max_score = std::max(max_score, scores[p]);
    for (std::int32_t p = n; p < n16; ++p) scores[p] = max_score;
    v16 vsum = {};
    for (std::int32_t p = 0; p < n16; p += 16) {
      const v16 e = exp16(load16(scores + p) - max_score);
      *reinterpret_cast<v16*>(scores + p) = e;
      if (p + 16 <= n) vsum += e;
    }
    float sum = sum16(vsum);
    for (std::int32_t p = n / 16 * 16; p < n; ++p) sum += scores[p];
    inv[hh] = 1.0f / sum;
  }

  // Output: the weighted V rows, accumulated in registers within a block.
  for (std::int32_t hh = 0; hh < nh; ++hh) std::fill_n(o + std::int64_t{h0 + hh} * hd, hd, 0.0f);
  for (std::int32_t start = 0, bi = 0; start <= pos; start += bs, ++bi) {
    prefetch_block(v_plane, bi + 1);
    const std::int32_t end_p = std::min(pos + 1, start + bs);
    for (std::int32_t hh = 0; hh < nh; ++hh) {
      const std::int32_t h = h0 + hh;
      const float* vrow = tile(v_plane, bi) + std::int64_t{h / group} * hd;
      const float* pr = scratch + hh * stride;
      v16 acc[2][NV] = {};  // even and odd positions: two chains per vector
      std::int32_t p = start;
      for (; p + 2 <= end_p; p += 2, vrow += 2 * kv_dim) {
        for (int j = 0; j < NV; ++j) {
          acc[0][j] += pr[p] * load16(vrow + 16 * j);
          acc[1][j] += pr[p + 1] * load16(vrow + kv_dim + 16 * j);
        }
      }
      if (p < end_p) {
        for (int j = 0; j < NV; ++j) acc[0][j] += pr[p] * load16(vrow + 16 * j);
      }
      float* oh = o + std::int64_t{h} * hd;
      for (int j = 0; j < NV; ++j)
        *reinterpret_cast<v16*>(oh + 16 * j) = load16(oh + 16 * j) + acc[0][j] + acc[1][j];
    }
  }
  for (std::int32_t hh = 0; hh < nh; ++hh) {
    float* oh = o + std::int64_t{h0 + hh} * hd;
    for (int j = 0; j < NV; ++j)
      *reinterpret_cast<v16*>(oh + 16 * j) = load16(oh + 16 * j) * inv[hh];
  }
}

}  // namespace

void write_kv(std::span<float> pool, const KvLayout& L, std::int32_t layer,
              const AttentionBatch& batch, const float* k, const float* v) {
  const auto kv_dim = L.kv_dim();
  for (std::size_t i = 0; i < batch.positions.size(); ++i) {
    const std::int32_t pos = batch.positions[i];
    const auto& table = batch.block_tables[static_cast<std::size_t>(batch.seq_index[i])];
    const BlockId block = table[static_cast<std::size_t>(pos / L.block_size)];
    const std::int32_t slot = pos % L.block_size;
    std::copy_n(k + i * kv_dim, kv_dim, pool.data() + L.row_offset(layer, 0, block, slot));
    std::copy_n(v + i * kv_dim, kv_dim, pool.data() + L.row_offset(layer, 1, block, slot));
  }
}

WEIR_CLONES void paged_attention(std::span<const float> pool, const KvLayout& L, std::int32_t layer,
                                 const AttentionBatch& batch, const float* q, float* out,
                                 float scale, std::int64_t begin, std::int64_t end,
                                 std::vector<float>& scratch) {
  const std::int32_t hd = L.head_dim;
  const std::int32_t n_heads = batch.n_heads;
  const std::int32_t group = n_heads / L.n_kv_heads;
  assert(group * L.n_kv_heads == n_heads);
  const float* k_plane = pool.data() + L.row_offset(layer, 0, 0, 0);
  const float* v_plane = pool.data() + L.row_offset(layer, 1, 0, 0);
  const auto kv_dim = L.kv_dim();

  std::int64_t item = begin;
  if (hd % 16 == 0 && hd <= 128) {  // the fast path: a token's heads in [begin, end) at once
    while (item < end) {
      const auto i = static_cast<std::size_t>(item / n_heads);
      const auto h0 = static_cast<std::int32_t>(item % n_heads);
      const auto h1 = static_cast<std::int32_t>(
          std::min<std::int64_t>(n_heads, end - static_cast<std::int64_t>(i) * n_heads));
      const std::int32_t pos = batch.positions[i];
      const auto& table = batch.block_tables[static_cast<std::size_t>(batch.seq_index[i])];
      const std::size_t need = static_cast<std::size_t>(h1 - h0) * ((pos + 16) / 16 * 16 + 1);
      if (scratch.size() < need) scratch.resize(need);
      const float* qi = q + static_cast<std::int64_t>(i) * n_heads * hd;
      float* oi = out + static_cast<std::int64_t>(i) * n_heads * hd;
      switch (hd / 16) {
#define WEIR_ATTEND(NV)                                                                        \
  case NV:                                                                                     \
    attend<NV>(qi, oi, h0, h1, group, k_plane, v_plane, table, pos, L, scale, scratch.data()); \
    break;
        WEIR_ATTEND(1)
        WEIR_ATTEND(2)
        WEIR_ATTEND(3)
        WEIR_ATTEND(4)
        WEIR_ATTEND(5)
        WEIR_ATTEND(6)
        WEIR_ATTEND(7)
        WEIR_ATTEND(8)
#undef WEIR_ATTEND
        default:
          break;
      }
      item = static_cast<std::int64_t>(i) * n_heads + h1;
    }
    return;
  }
  for (; item < end; ++item) {
    const auto i = static_cast<std::size_t>(item / n_heads);
    const std::int32_t h = static_cast<std::int32_t>(item % n_heads);
    const std::int32_t kvh = h / group;
    const std::int32_t pos = batch.positions[i];
    const auto& table = batch.block_tables[static_cast<std::size_t>(batch.seq_index[i])];
    const float* qh = q + (static_cast<std::int64_t>(i) * n_heads + h) * hd;
    float* oh = out + (static_cast<std::int64_t>(i) * n_heads + h) * hd;
    if (scratch.size() < static_cast<std::size_t>(pos) + 1)
      scratch.resize(static_cast<std::size_t>(pos) + 1);
    float* scores = scratch.data();

    // Scores, block by block through the table (no division per position): [pos + 1]
    const std::int32_t bs = L.block_size;
    float max_score = -INFINITY;
    for (std::int32_t start = 0, bi = 0; start <= pos; start += bs, ++bi) {
      const float* krow = k_plane + table[static_cast<std::size_t>(bi)] * L.tile_elems() + kvh * hd;
      const std::int32_t end_p = std::min(pos + 1, start + bs);
      for (std::int32_t p = start; p < end_p; ++p, krow += kv_dim) {
        scores[p] = dot(qh, krow, hd) * scale;
        max_score = std::max(max_score, scores[p]);
      }
    }
    float sum = 0.0f;
    for (std::int32_t p = 0; p <= pos; ++p) sum += scores[p] = std::exp(scores[p] - max_score);
    const float inv = 1.0f / sum;

    std::fill_n(oh, hd, 0.0f);
    for (std::int32_t start = 0, bi = 0; start <= pos; start += bs, ++bi) {
      const float* vrow = v_plane + table[static_cast<std::size_t>(bi)] * L.tile_elems() + kvh * hd;
      const std::int32_t end_p = std::min(pos + 1, start + bs);
      for (std::int32_t p = start; p < end_p; ++p, vrow += kv_dim)
        axpy(scores[p] * inv, vrow, oh, hd);
    }
  }
}

void reference_attention(const float* q, std::span<const std::int32_t> q_pos, const float* k,
                         const float* v, std::int32_t n_heads, std::int32_t n_kv_heads,
                         std::int32_t head_dim, float scale, float* out) {
  const std::int32_t group = n_heads / n_kv_heads;
  for (std::size_t i = 0; i < q_pos.size(); ++i) {
    const std::int32_t pos = q_pos[i];
    for (std::int32_t h = 0; h < n_heads; ++h) {
      const float* qh = q + (i * n_heads + h) * head_dim;  // [head_dim]
      const std::int32_t kvh = h / group;
      std::vector<double> att(static_cast<std::size_t>(pos) + 1);  // [pos + 1]
      double mx = -INFINITY;
      for (std::int32_t p = 0; p <= pos; ++p) {
        const float* kr = k + (static_cast<std::int64_t>(p) * n_kv_heads + kvh) * head_dim;
        double s = 0;
        for (std::int32_t d = 0; d < head_dim; ++d) s += double(qh[d]) * kr[d];
        att[p] = s * scale;
        mx = std::max(mx, att[p]);
      }
      double sum = 0;
      for (auto& a : att) sum += a = std::exp(a - mx);
      float* oh = out + (i * n_heads + h) * head_dim;
      for (std::int32_t d = 0; d < head_dim; ++d) {
        double acc = 0;
        for (std::int32_t p = 0; p <= pos; ++p) {
          acc += att[p] / sum * v[(static_cast<std::int64_t>(p) * n_kv_heads + kvh) * head_dim + d];
        }
        oh[d] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace weir::inference
