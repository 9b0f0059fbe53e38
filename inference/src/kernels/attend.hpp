// The fast path of paged_attention (paged_attention.cpp): one token's query heads at once, over
// K/V tiles of element type T. Internal to inference/, included by paged_attention.cpp (F32,
// compiled per ISA) and paged_attention_f16.cpp (F16, AVX-512 + F16C). Before including, a
// translation unit defines WEIR_ATTEND_TARGET (attributes for attend: empty, or a target) and,
// for each T it uses, `v16 load_kv16(const T* p)`: 16 elements from p as floats. Everything here
// is in an anonymous namespace on purpose: each includer gets its own copy, built for its own
// target, so the two builds never merge at link time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_cache.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/simd.hpp"
#include "weir/inference/kv_layout.hpp"

namespace weir::inference {
namespace {

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
template <int NV, class T>
[[gnu::always_inline]] inline WEIR_ATTEND_TARGET void attend(
    const float* q, float* o, std::int32_t h0, std::int32_t h1, std::int32_t group,
    const T* k_plane, const T* v_plane, std::span<const BlockId> table, std::int32_t pos,
    const KvLayout& L, float scale, float* scratch) {
  constexpr std::int32_t hd = 16 * NV;
  const std::int32_t bs = L.block_size, nh = h1 - h0, n = pos + 1, n16 = (n + 15) / 16 * 16;
  const auto kv_dim = L.kv_dim();
  const std::int64_t stride = n16;
  // The KV columns these heads read: [c0, c1).
  const std::int64_t c0 = std::int64_t{h0 / group} * hd,
                     c1 = std::int64_t{(h1 - 1) / group + 1} * hd;
  auto tile = [&](const T* plane, std::int32_t bi) {
    return plane + table[static_cast<std::size_t>(bi)] * L.tile_elems();
  };
  auto prefetch_block = [&](const T* plane, std::int32_t bi) {
    const std::int32_t start = bi * bs;
    if (start > pos) return;
    const T* row = tile(plane, bi);
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
      const T* krow = tile(k_plane, bi) + std::int64_t{h / group} * hd;
      float* scores = scratch + hh * stride;
      std::int32_t p = start;
      for (; p + 16 <= end_p; p += 16, krow += 16 * kv_dim) {  // 16 chains, summed as a tree
        v16 a[16];
        for (int c = 0; c < 16; ++c) a[c] = qv[0] * load_kv16(krow + c * kv_dim);
        for (int j = 1; j < NV; ++j) {
          for (int c = 0; c < 16; ++c) a[c] += qv[j] * load_kv16(krow + c * kv_dim + 16 * j);
        }
        store16(scores + p, simd::sum16x16(a));
      }
      for (; p + 4 <= end_p; p += 4, krow += 4 * kv_dim) {  // four independent chains
        v16 a[4];
        for (int c = 0; c < 4; ++c) a[c] = qv[0] * load_kv16(krow + c * kv_dim);
        for (int j = 1; j < NV; ++j) {
          for (int c = 0; c < 4; ++c) a[c] += qv[j] * load_kv16(krow + c * kv_dim + 16 * j);
        }
        for (int c = 0; c < 4; ++c) scores[p + c] = sum16(a[c]);
      }
      for (; p < end_p; ++p, krow += kv_dim) {
        v16 a = qv[0] * load_kv16(krow);
        for (int j = 1; j < NV; ++j) a += qv[j] * load_kv16(krow + 16 * j);
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
      const T* vrow = tile(v_plane, bi) + std::int64_t{h / group} * hd;
      const float* pr = scratch + hh * stride;
      v16 acc[2][NV] = {};  // even and odd positions: two chains per vector
      std::int32_t p = start;
      for (; p + 2 <= end_p; p += 2, vrow += 2 * kv_dim) {
        for (int j = 0; j < NV; ++j) {
          acc[0][j] += pr[p] * load_kv16(vrow + 16 * j);
          acc[1][j] += pr[p + 1] * load_kv16(vrow + kv_dim + 16 * j);
        }
      }
      if (p < end_p) {
        for (int j = 0; j < NV; ++j) acc[0][j] += pr[p] * load_kv16(vrow + 16 * j);
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

// paged_attention's fast path (head_dim == 16 * NV, NV <= 8) for the work items [begin, end):
// a token's heads in the range at once.
template <class T>
[[gnu::always_inline]] inline WEIR_ATTEND_TARGET void attend_items(
    const T* k_plane, const T* v_plane, const KvLayout& L, const AttentionBatch& batch,
    const float* q, float* out, float scale, std::int64_t begin, std::int64_t end,
    std::vector<float>& scratch) {
  const std::int32_t hd = L.head_dim, n_heads = batch.n_heads, group = n_heads / L.n_kv_heads;
  std::int64_t item = begin;
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
#define WEIR_ATTEND(NV)                                                                           \
  case NV:                                                                                        \
    attend<NV, T>(qi, oi, h0, h1, group, k_plane, v_plane, table, pos, L, scale, scratch.data()); \
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
}

}  // namespace
}  // namespace weir::inference
