// The portable kernels of matmul(); see kernels_portable.hpp.
#include "kernels/kernels_portable.hpp"

#include <algorithm>
#include <cmath>

#include "model/repack.hpp"
#include "kernels/simd.hpp"

namespace weir::inference::kernels::detail {

namespace {

typedef float v16 __attribute__((vector_size(64), aligned(4)));  // unaligned loads allowed
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

// Sum of 16 lanes by halving (three vector adds and a short tail), not 15 dependent adds.
inline float reduce(const v16& a) {
  v8 b = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
  v4 c = __builtin_shufflevector(b, b, 0, 1, 2, 3) + __builtin_shufflevector(b, b, 4, 5, 6, 7);
  return (c[0] + c[2]) + (c[1] + c[3]);
}

}  // namespace

// out[t * out_stride] = dot(w[0..cols), x[t * x_stride ..]) for t < n. `stream`: the weights
// are read once per step and are too big to stay cached, so they are prefetched with the
// non-temporal hint and leave the cache to the other weights.
WEIR_CLONES void dot_rows_f32(const float* w, const float* x, std::int64_t cols, std::int64_t n,
                              std::int64_t x_stride, float* out, std::int64_t out_stride,
                              bool stream) {
  if (stream) {
    for (std::int64_t i = 0; i < cols; i += 16) __builtin_prefetch(w + cols * 4 + i, 0, 0);
  }
  for (std::int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * x_stride;
    v16 acc0 = {}, acc1 = {};
    std::int64_t i = 0;
    for (; i + 32 <= cols; i += 32) {
      acc0 += *reinterpret_cast<const v16*>(w + i) * *reinterpret_cast<const v16*>(xt + i);
      acc1 +=
          *reinterpret_cast<const v16*>(w + i + 16) * *reinterpret_cast<const v16*>(xt + i + 16);
    }
    for (; i + 16 <= cols; i += 16)
      acc0 += *reinterpret_cast<const v16*>(w + i) * *reinterpret_cast<const v16*>(xt + i);
    float s = reduce(acc0 + acc1);
    for (; i < cols; ++i) s += w[i] * xt[i];
    out[t * out_stride] = s;
  }
}

namespace {

// A 4-row x T-token tile: 4*T independent accumulator chains (the FMA unit stays busy instead
// of waiting on one chain's latency), each weight vector loaded once for T tokens.
// out[t * out_stride + r] for r < 4, t < T.
template <int T>
WEIR_CLONES void tile_f32(const float* w, std::int64_t cols, const float* x, std::int64_t x_stride,
                          float* out, std::int64_t out_stride) {
  v16 acc[4][T] = {};
  std::int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    v16 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = *reinterpret_cast<const v16*>(x + t * x_stride + i);
    for (int r = 0; r < 4; ++r) {
      const v16 wv = *reinterpret_cast<const v16*>(w + r * cols + i);
      for (int t = 0; t < T; ++t) acc[r][t] += wv * xv[t];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = reduce(acc[r][t]);
      for (std::int64_t j = i; j < cols; ++j) s += w[r * cols + j] * x[t * x_stride + j];
      out[t * out_stride + r] = s;
    }
  }
}

}  // namespace

// y[t, r0..r1) for every t < n, rows in tiles of 4 and tokens in tiles of 4.
void gemm_f32_rows(const float* w, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                   const float* x, std::int64_t n, float* y, std::int64_t rows) {
  std::int64_t r = r0;
  if (n == 1) {  // decode: one streaming dot per row is faster than 4-row tiles
    for (; r < r1; ++r) dot_rows_f32(w + r * cols, x, cols, 1, cols, y + r, rows, false);
    return;
  }
  for (; r + 4 <= r1; r += 4) {
    std::int64_t t = 0;
    for (; t + 4 <= n; t += 4)
      tile_f32<4>(w + r * cols, cols, x + t * cols, cols, y + t * rows + r, rows);
    switch (n - t) {
      case 3:
        tile_f32<3>(w + r * cols, cols, x + t * cols, cols, y + t * rows + r, rows);
        break;
      case 2:
        tile_f32<2>(w + r * cols, cols, x + t * cols, cols, y + t * rows + r, rows);
        break;
      case 1:
        tile_f32<1>(w + r * cols, cols, x + t * cols, cols, y + t * rows + r, rows);
        break;
      default:
        break;
    }
  }
  for (; r < r1; ++r) dot_rows_f32(w + r * cols, x, cols, n, cols, y + r, rows, false);
}

// Q8_0 weights against Q8_0-quantised activations: blocks of 32, one int dot per block. The
// row's scales are decoded once for all tokens; tokens go four at a time so each weight block
// is loaded once per four dots.
WEIR_CLONES void dot_rows_q8(const BlockQ8_0* w, const std::int8_t* qx, const float* qs,
                             std::int64_t blocks, std::int64_t n, float* out,
                             std::int64_t out_stride) {
  float wd[512];  // row scales; rows longer than 16384 take the per-block path below
  const bool cached = blocks <= 512;
  if (cached) {
    for (std::int64_t b = 0; b < blocks; ++b) wd[b] = fp16_to_fp32(w[b].d);
  }
  std::int64_t t = 0;
  for (; cached && t + 4 <= n; t += 4) {
    float s[4] = {};
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (int k = 0; k < 4; ++k) {
        const std::int8_t* xq = qx + ((t + k) * blocks + b) * kQK8_0;
        std::int32_t acc = 0;
        for (int j = 0; j < kQK8_0; ++j) acc += std::int32_t(w[b].qs[j]) * std::int32_t(xq[j]);
        s[k] += wd[b] * qs[(t + k) * blocks + b] * static_cast<float>(acc);
      }
    }
    for (int k = 0; k < 4; ++k) out[(t + k) * out_stride] = s[k];
  }
  for (; t < n; ++t) {
    const std::int8_t* xq = qx + t * blocks * kQK8_0;
    const float* xs = qs + t * blocks;
    float s = 0;
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::int32_t acc = 0;
      for (int j = 0; j < kQK8_0; ++j)
        acc += std::int32_t(w[b].qs[j]) * std::int32_t(xq[b * kQK8_0 + j]);
      s += (cached ? wd[b] : fp16_to_fp32(w[b].d)) * xs[b] * static_cast<float>(acc);
    }
    out[t * out_stride] = s;
  }
}

// Unpacked 4/6-bit weights (a row's int8 quants, `G` per group with a float scale, and for
// kMin a float min subtracted) against Q8_0-quantised activations: an int dot per group.
// Groups never straddle an activation block (G is 16 or 32, blocks are 32).
// wq: [cols]; ws, wm: [cols / G]; qx: [n, cols]; xd, xsum: [n, cols / 32], xsum[b] being
// xd[b] * (sum of the block's quants), so the min term costs one multiply per group.
template <int G, bool kMin>
WEIR_CLONES void dot_rows_i8(const std::int8_t* wq, const float* ws, const float* wm,
                             std::int64_t cols, const std::int8_t* qx, const float* xd,
                             const float* xsum, std::int64_t n, float* out,
                             std::int64_t out_stride) {
  const std::int64_t groups = cols / G, xblocks = cols / kQK8_0;
  std::int64_t t = 0;
  for (; t + 4 <= n; t += 4) {  // four tokens per pass: each weight group is loaded once
    float s[4] = {};
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int8_t* w = wq + g * G;
      const std::int64_t xb = g * G / kQK8_0;
      for (int k = 0; k < 4; ++k) {
        const std::int8_t* xq = qx + (t + k) * cols + g * G;
        std::int32_t acc = 0;
        for (int j = 0; j < G; ++j) acc += std::int32_t(w[j]) * std::int32_t(xq[j]);
        s[k] += ws[g] * xd[(t + k) * xblocks + xb] * static_cast<float>(acc);
        if constexpr (kMin) s[k] -= wm[g] * xsum[(t + k) * xblocks + xb];
      }
    }
    for (int k = 0; k < 4; ++k) out[(t + k) * out_stride] = s[k];
  }
  for (; t < n; ++t) {
    const std::int8_t* xq = qx + t * cols;
    const float* d = xd + t * xblocks;
    float s = 0;
    for (std::int64_t g = 0; g < groups; ++g) {
      std::int32_t acc = 0;
      for (int j = 0; j < G; ++j) acc += std::int32_t(wq[g * G + j]) * std::int32_t(xq[g * G + j]);
      s += ws[g] * d[g * G / kQK8_0] * static_cast<float>(acc);
      if constexpr (kMin) s -= wm[g] * xsum[t * xblocks + g * G / kQK8_0];
    }
    out[t * out_stride] = s;
  }
}

template void dot_rows_i8<32, false>(const std::int8_t*, const float*, const float*, std::int64_t,
                                     const std::int8_t*, const float*, const float*, std::int64_t,
                                     float*, std::int64_t);
template void dot_rows_i8<32, true>(const std::int8_t*, const float*, const float*, std::int64_t,
                                    const std::int8_t*, const float*, const float*, std::int64_t,
                                    float*, std::int64_t);
template void dot_rows_i8<16, false>(const std::int8_t*, const float*, const float*, std::int64_t,
                                     const std::int8_t*, const float*, const float*, std::int64_t,
                                     float*, std::int64_t);

// Row r of a Q4_0 / Q4_K / Q6_K weight: q[cols]; scale and min per group (32 weights for
// Q4_0 and Q4_K, 16 for Q6_K; min for Q4_K only).
WEIR_CLONES void unpack_row(const Weight& w, std::int64_t r, std::int8_t* q, float* scale,
                            float* min) {
  const std::byte* row = row_bytes_of(w, r);
  switch (w.type) {
    case GgmlType::q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(row);
      for (std::int64_t i = 0; i < w.cols / kQK4_0; ++i)
        unpack_q4_0(b[i], q + i * kQK4_0, scale + i);
      return;
    }
    case GgmlType::q4_k: {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(row);
      for (std::int64_t i = 0; i < w.cols / kQK_K; ++i)
        unpack_q4_k(b[i], q + i * kQK_K, scale + i * 8, min + i * 8);
      return;
    }
    default: {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row);
      for (std::int64_t i = 0; i < w.cols / kQK_K; ++i)
        unpack_q6_k(b[i], q + i * kQK_K, scale + i * 16);
    }
  }
}

namespace {

// roundf without the library call (half away from zero, as ggml's reference quantiser).
inline int round_half_away(float v) {
  return static_cast<int>(v + (v >= 0.0f ? 0.5f : -0.5f));
}

}  // namespace

// Activations to Q8_0 (per 32-block scale max|x|/127, round to nearest), as ggml does.
void quantize_q8(const float* x, std::int64_t n, std::int64_t cols, std::vector<std::int8_t>& q,
                 std::vector<float>& s) {
  const std::int64_t blocks = cols / kQK8_0;
  q.resize(static_cast<std::size_t>(n * cols));
  s.resize(static_cast<std::size_t>(n * blocks));
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + t * cols + b * kQK8_0;
      float amax = 0;
      for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float d = amax / 127.0f;
      // ggml stores the scale as fp16: use the rounded value so results match its kernels.
      const float dq = fp16_to_fp32(fp32_to_fp16(d));
      const float inv = d ? 1.0f / d : 0.0f;
      s[static_cast<std::size_t>(t * blocks + b)] = dq;
      for (int j = 0; j < kQK8_0; ++j)
        q[static_cast<std::size_t>(t * cols + b * kQK8_0 + j)] =
            static_cast<std::int8_t>(round_half_away(xb[j] * inv));
    }
  }
}

}  // namespace weir::inference::kernels::detail
