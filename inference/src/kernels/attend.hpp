// The fast path of paged_attention (paged_attention.cpp): one token's query heads at once, over
// K/V tiles of element type T. Internal to inference/, included by paged_attention.cpp (F32,
// compiled per ISA) and paged_attention_f16.cpp (F16, AVX-512 + F16C). Before including, a
// translation unit defines WEIR_ATTEND_TARGET (attributes for attend: empty, or a target). The
// K/V elements are read through a `Kv`: its type T (the element type), `v16 load16(const T* p)`
// (16 elements from p as floats; p is 16-element aligned within a row) and kScaled. A scaled Kv
// (Q8_0) also has a scale per (block, slot, KV head) for K and for V, `float scale(int kv,
// BlockId, std::int32_t slot, std::int32_t kv_head)` (kv: 0 for K, 1 for V), which attention
// applies once per position, and `void prefetch_scales(int kv, BlockId)`. With kDotScores, K
// scores are integer dot products: `float quantize_query(const float* q, std::int32_t hd,
// std::int8_t* out)` (a head of q as int8, returning its scale) and `void dot_scores(const
// std::int8_t* q, std::int32_t hd, float scale, const T* krow, std::int64_t kv_dim,
// std::int32_t rows, float* out)` (out[r] = scale * q . K row r, unscaled by K's scale).
// PlainKv<T> reads with
// the unit's `v16 load_kv16(const T* p)`, which it declares before including. Everything here
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

// K/V elements read as they are (F32), or converted by the includer's load_kv16 (F16).
template <class Elem>
struct PlainKv {
  using T = Elem;
  static constexpr bool kScaled = false, kDotScores = false;
  [[gnu::always_inline]] WEIR_ATTEND_TARGET v16 load16(const T* p) const { return load_kv16(p); }
  float scale(int, BlockId, std::int32_t, std::int32_t) const { return 1.0f; }
  void prefetch_scales(int, BlockId) const {}
};

// Query heads [h0, h1) of one token of paged_attention, for head_dim == 16 * NV. Block-major:
// a KV block's tile (block_size rows of kv_dim floats, contiguous) is read for all these heads
// before the next, so the memory streams whole tiles (a head's slice alone is a few cache
// lines every kv_dim floats, which leaves the loads waiting on memory); the next tile is
// prefetched meanwhile. q, o: the token's rows, [n_heads * head_dim]. scratch: attend_scratch():
// scores, then probabilities, per head; 1 / sum per head; the heads' q as int8 (kDotScores).
template <int NV, class Kv, class T = typename Kv::T>
[[gnu::always_inline]] inline WEIR_ATTEND_TARGET void attend(
    const float* q, float* o, std::int32_t h0, std::int32_t h1, std::int32_t group, const Kv& kv,
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
      for (std::int64_t c = c0; c < c1; c += 64 / sizeof(T)) __builtin_prefetch(row + c);
      __builtin_prefetch(row + c1 - 1);  // the range need not start a cache line
    }
    if constexpr (Kv::kScaled)
      kv.prefetch_scales(plane == v_plane, table[static_cast<std::size_t>(bi)]);
  };

  // kDotScores: the heads' q as int8, and each one's scale times `scale`.
  auto* q8 = reinterpret_cast<std::int8_t*>(scratch + nh * stride + nh);  // [nh][hd]
  float* q8_scale = scratch + nh * stride + nh + nh * hd / 4;             // [nh]
  if constexpr (Kv::kDotScores) {
    for (std::int32_t hh = 0; hh < nh; ++hh)
      q8_scale[hh] = scale * kv.quantize_query(q + std::int64_t{h0 + hh} * hd, hd, q8 + hh * hd);
  }

  // Scores: [nh][n16], q pre-scaled.
  prefetch_block(k_plane, 0);
  for (std::int32_t start = 0, bi = 0; start <= pos; start += bs, ++bi) {
    prefetch_block(k_plane, bi + 1);
    const std::int32_t end_p = std::min(pos + 1, start + bs);
    for (std::int32_t hh = 0; hh < nh; ++hh) {
      const std::int32_t h = h0 + hh;
      const T* krow = tile(k_plane, bi) + std::int64_t{h / group} * hd;
      float* scores = scratch + hh * stride;
      if constexpr (Kv::kDotScores) {
        kv.dot_scores(q8 + hh * hd, hd, q8_scale[hh], krow, kv_dim, end_p - start, scores + start);
      } else {
        v16 qv[NV];
        for (int j = 0; j < NV; ++j) qv[j] = load16(q + std::int64_t{h} * hd + 16 * j) * scale;
        std::int32_t p = start;
        for (; p + 16 <= end_p; p += 16, krow += 16 * kv_dim) {  // 16 chains, summed as a tree
          v16 a[16];
          for (int c = 0; c < 16; ++c) a[c] = qv[0] * kv.load16(krow + c * kv_dim);
          for (int j = 1; j < NV; ++j) {
            for (int c = 0; c < 16; ++c) a[c] += qv[j] * kv.load16(krow + c * kv_dim + 16 * j);
          }
          store16(scores + p, simd::sum16x16(a));
        }
        for (; p + 4 <= end_p; p += 4, krow += 4 * kv_dim) {  // four independent chains
          v16 a[4];
          for (int c = 0; c < 4; ++c) a[c] = qv[0] * kv.load16(krow + c * kv_dim);
          for (int j = 1; j < NV; ++j) {
            for (int c = 0; c < 4; ++c) a[c] += qv[j] * kv.load16(krow + c * kv_dim + 16 * j);
          }
          for (int c = 0; c < 4; ++c) scores[p + c] = sum16(a[c]);
        }
        for (; p < end_p; ++p, krow += kv_dim) {
          v16 a = qv[0] * kv.load16(krow);
          for (int j = 1; j < NV; ++j) a += qv[j] * kv.load16(krow + 16 * j);
          scores[p] = sum16(a);
        }
      }
      if constexpr (Kv::kScaled) {  // each position's K scale, once
        const BlockId blk = table[static_cast<std::size_t>(bi)];
        for (std::int32_t r = start; r < end_p; ++r)
          scores[r] *= kv.scale(0, blk, r - start, h / group);
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
      const BlockId blk = table[static_cast<std::size_t>(bi)];
      // A position's weight: its probability, times its V scale.
      auto weight = [&](std::int32_t r) {
        if constexpr (Kv::kScaled) return pr[r] * kv.scale(1, blk, r - start, h / group);
        return pr[r];
      };
      v16 acc[2][NV] = {};  // even and odd positions: two chains per vector
      std::int32_t p = start;
      for (; p + 2 <= end_p; p += 2, vrow += 2 * kv_dim) {
        const float w0 = weight(p), w1 = weight(p + 1);
        for (int j = 0; j < NV; ++j) {
          acc[0][j] += w0 * kv.load16(vrow + 16 * j);
          acc[1][j] += w1 * kv.load16(vrow + kv_dim + 16 * j);
        }
      }
      if (p < end_p) {
        const float w0 = weight(p);
        for (int j = 0; j < NV; ++j) acc[0][j] += w0 * kv.load16(vrow + 16 * j);
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

// Floats of scratch attend() takes for `heads` heads of a token at `pos`.
inline std::size_t attend_scratch(std::int32_t heads, std::int32_t pos, std::int32_t hd) {
  return static_cast<std::size_t>(heads) * ((pos + 16) / 16 * 16 + 2 + hd / 4);
}

// paged_attention's fast path (head_dim == 16 * NV, NV <= 8) for the work items [begin, end):
// a token's heads in the range at once.
template <class Kv, class T = typename Kv::T>
[[gnu::always_inline]] inline WEIR_ATTEND_TARGET void attend_items(
    const Kv& kv, const T* k_plane, const T* v_plane, const KvLayout& L,
    const AttentionBatch& batch, const float* q, float* out, float scale, std::int64_t begin,
    std::int64_t end, std::vector<float>& scratch) {
  const std::int32_t hd = L.head_dim, n_heads = batch.n_heads, group = n_heads / L.n_kv_heads;
  std::int64_t item = begin;
  while (item < end) {
    const auto i = static_cast<std::size_t>(item / n_heads);
    const auto h0 = static_cast<std::int32_t>(item % n_heads);
    const auto h1 = static_cast<std::int32_t>(
        std::min<std::int64_t>(n_heads, end - static_cast<std::int64_t>(i) * n_heads));
    const std::int32_t pos = batch.positions[i];
    const auto& table = batch.block_tables[static_cast<std::size_t>(batch.seq_index[i])];
    const std::size_t need = attend_scratch(h1 - h0, pos, hd);
    if (scratch.size() < need) scratch.resize(need);
    const float* qi = q + static_cast<std::int64_t>(i) * n_heads * hd;
    float* oi = out + static_cast<std::int64_t>(i) * n_heads * hd;
    switch (hd / 16) {
#define WEIR_ATTEND(NV)                                                                            \
  case NV:                                                                                         \
    attend<NV>(qi, oi, h0, h1, group, kv, k_plane, v_plane, table, pos, L, scale, scratch.data()); \
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
