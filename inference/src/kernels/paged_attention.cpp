#include "kernels/paged_attention.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "kernels/paged_attention_f16.hpp"
#include "kernels/paged_attention_q8.hpp"
#include "kernels/simd.hpp"
#include "model/quant.hpp"

namespace weir::inference {

namespace {

// How attention reads the pool's elements: F32 as they are, F16 converted, Q8_0 scaled.
// `row` gives n elements from p (within one row) as floats, in `buf` when it must convert.
struct F32Rows {
  using T = float;
  const float* row(const float* p, std::int32_t, float*) const { return p; }
};
struct F16Rows {
  using T = std::uint16_t;
  const float* row(const T* p, std::int32_t n, float* buf) const {
    for (std::int32_t i = 0; i < n; ++i) buf[i] = fp16_to_fp32(p[i]);
    return buf;
  }
};

// Q8_0: the element at values + e is values[e] * scales[e / head_dim]; a row read here is one
// head's, so it has one scale.
struct Q8Rows {
  using T = std::int8_t;
  const std::int8_t* values;
  const std::uint16_t* scales;
  std::int32_t head_dim;

  const float* row(const T* p, std::int32_t n, float* buf) const {
    const float d = bf16_to_f32(scales[static_cast<std::size_t>(p - values) / head_dim]);
    for (std::int32_t i = 0; i < n; ++i) buf[i] = p[i] * d;
    return buf;
  }
};

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

[[gnu::always_inline]] inline simd::v16 load_kv16(const float* p) {
  return simd::load16(p);
}

}  // namespace
}  // namespace weir::inference

#define WEIR_ATTEND_TARGET
#include "kernels/attend.hpp"

namespace weir::inference {
namespace {

// Any head_dim, one (token, head) at a time: the path for head sizes the fast path does not
// take, and for F16 and Q8_0 K/V without AVX-512. Rows: F32Rows, F16Rows or Q8Rows.
template <class Rows, class T = typename Rows::T>
[[gnu::always_inline]] inline void attend_generic(const Rows& rows, const T* k_plane,
                                                  const T* v_plane, const KvLayout& L,
                                                  const AttentionBatch& batch, const float* q,
                                                  float* out, float scale, std::int64_t begin,
                                                  std::int64_t end, std::vector<float>& scratch) {
  const std::int32_t hd = L.head_dim;
  const std::int32_t n_heads = batch.n_heads;
  const std::int32_t group = n_heads / L.n_kv_heads;
  const auto kv_dim = L.kv_dim();
  for (std::int64_t item = begin; item < end; ++item) {
    const auto i = static_cast<std::size_t>(item / n_heads);
    const std::int32_t h = static_cast<std::int32_t>(item % n_heads);
    const std::int32_t kvh = h / group;
    const std::int32_t pos = batch.positions[i];
    const auto& table = batch.block_tables[static_cast<std::size_t>(batch.seq_index[i])];
    const float* qh = q + (static_cast<std::int64_t>(i) * n_heads + h) * hd;
    float* oh = out + (static_cast<std::int64_t>(i) * n_heads + h) * hd;
    const auto need = static_cast<std::size_t>(pos) + 1 + static_cast<std::size_t>(hd);
    if (scratch.size() < need) scratch.resize(need);
    float* scores = scratch.data();
    float* buf = scores + pos + 1;  // [hd]: a converted row

    // Scores, block by block through the table (no division per position): [pos + 1]
    const std::int32_t bs = L.block_size;
    float max_score = -INFINITY;
    for (std::int32_t start = 0, bi = 0; start <= pos; start += bs, ++bi) {
      const T* krow = k_plane + table[static_cast<std::size_t>(bi)] * L.tile_elems() + kvh * hd;
      const std::int32_t end_p = std::min(pos + 1, start + bs);
      for (std::int32_t p = start; p < end_p; ++p, krow += kv_dim) {
        scores[p] = dot(qh, rows.row(krow, hd, buf), hd) * scale;
        max_score = std::max(max_score, scores[p]);
      }
    }
    float sum = 0.0f;
    for (std::int32_t p = 0; p <= pos; ++p) sum += scores[p] = std::exp(scores[p] - max_score);
    const float inv = 1.0f / sum;

    std::fill_n(oh, hd, 0.0f);
    for (std::int32_t start = 0, bi = 0; start <= pos; start += bs, ++bi) {
      const T* vrow = v_plane + table[static_cast<std::size_t>(bi)] * L.tile_elems() + kvh * hd;
      const std::int32_t end_p = std::min(pos + 1, start + bs);
      for (std::int32_t p = start; p < end_p; ++p, vrow += kv_dim)
        axpy(scores[p] * inv, rows.row(vrow, hd, buf), oh, hd);
    }
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
    if (L.type == KvType::f16) {  // rounded to nearest, ties to even
      auto* base = reinterpret_cast<std::uint16_t*>(pool.data());
      store_f16(k + i * kv_dim, kv_dim, base + L.row_offset(layer, 0, block, slot));
      store_f16(v + i * kv_dim, kv_dim, base + L.row_offset(layer, 1, block, slot));
      continue;
    }
    if (L.type == KvType::q8_0) {
      auto* values = reinterpret_cast<std::int8_t*>(pool.data());
      auto* scales = reinterpret_cast<std::uint16_t*>(values + L.values_bytes());
      for (int kv = 0; kv < 2; ++kv) {
        const std::int64_t at = L.row_offset(layer, kv, block, slot);
        store_q8((kv ? v : k) + i * kv_dim, kv_dim, L.head_dim, values + at,
                 scales + at / L.head_dim);
      }
      continue;
    }
    std::copy_n(k + i * kv_dim, kv_dim, pool.data() + L.row_offset(layer, 0, block, slot));
    std::copy_n(v + i * kv_dim, kv_dim, pool.data() + L.row_offset(layer, 1, block, slot));
  }
}

WEIR_CLONES void paged_attention(std::span<const float> pool, const KvLayout& L, std::int32_t layer,
                                 const AttentionBatch& batch, const float* q, float* out,
                                 float scale, std::int64_t begin, std::int64_t end,
                                 std::vector<float>& scratch) {
  assert(batch.n_heads / L.n_kv_heads * L.n_kv_heads == batch.n_heads);
  const bool fast = L.head_dim % 16 == 0 && L.head_dim <= 128;
  if (L.type == KvType::f16) {
    const auto* base = reinterpret_cast<const std::uint16_t*>(pool.data());
    const std::uint16_t* k_plane = base + L.row_offset(layer, 0, 0, 0);
    const std::uint16_t* v_plane = base + L.row_offset(layer, 1, 0, 0);
    if (fast &&
        attention_f16_avx512(k_plane, v_plane, L, batch, q, out, scale, begin, end, scratch))
      return;
    return attend_generic(F16Rows{}, k_plane, v_plane, L, batch, q, out, scale, begin, end,
                          scratch);
  }
  if (L.type == KvType::q8_0) {
    const auto* values = reinterpret_cast<const std::int8_t*>(pool.data());
    const auto* scales = reinterpret_cast<const std::uint16_t*>(values + L.values_bytes());
    const std::int8_t* k_plane = values + L.row_offset(layer, 0, 0, 0);
    const std::int8_t* v_plane = values + L.row_offset(layer, 1, 0, 0);
    if (fast && attention_q8_avx512_vnni(values, scales, k_plane, v_plane, L, batch, q, out, scale,
                                         begin, end, scratch))
      return;
    const Q8Rows rows{values, scales, L.head_dim};
    return attend_generic(rows, k_plane, v_plane, L, batch, q, out, scale, begin, end, scratch);
  }
  const float* k_plane = pool.data() + L.row_offset(layer, 0, 0, 0);
  const float* v_plane = pool.data() + L.row_offset(layer, 1, 0, 0);
  if (fast)
    return attend_items(PlainKv<float>{}, k_plane, v_plane, L, batch, q, out, scale, begin, end,
                        scratch);
  attend_generic(F32Rows{}, k_plane, v_plane, L, batch, q, out, scale, begin, end, scratch);
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
