#include "kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WEIR_X86 1
#endif

#include "quant.hpp"
#include "simd.hpp"

namespace weir::inference::kernels {

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

#ifdef WEIR_X86
// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_* "may be used" or "is used
// uninitialized" (a false positive in its headers, GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// ---- F32 GEMM for batches (AVX-512) ----
// Batched steps are compute-bound, so for n >= kGemmMinTokens the tokens are packed once per
// matmul into k-major panels of 16 or 32 (xp[k * width + j] = x[t0 + j, k], zero past n), and a
// register tile of kGemmRows weight rows x the panel's tokens is accumulated in zmm registers:
// per k, one broadcast weight per row and one contiguous panel load per 16 tokens feed
// kGemmRows * width / 16 independent FMAs. Each weight row is read once per panel; the panels
// (32 x cols floats) stay in L2.
constexpr int kGemmRows = 12;
constexpr std::int64_t kGemmMinTokens = 4;

// y[l * ldy + r] = a[r][l] for r < nr, l < count: a 16 x 16 transpose in registers, then one
// masked store per l (a GEMM tile's tokens; in pack_panels, the k of 16 tokens' rows).
[[gnu::always_inline]] inline __attribute__((target("avx512f"))) void store_transposed(
    const __m512 (&a)[16], float* y, std::int64_t ldy, std::int64_t nr, std::int64_t count) {
  __m512 t[16], u[16], v[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(a[i], a[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(a[i], a[i + 1]);
  }
  // u[4g + c]: rows 4g..4g+3 of columns c, c + 4, c + 8, c + 12 (one per 128-bit lane).
  for (int g = 0; g < 4; ++g) {
    const __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]),
                  t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  // v: for column c, [rows 0-3 | rows 4-7] of columns (c, c + 8) and (c + 4, c + 12), then the
  // same for rows 8-15; finally whole columns.
  for (int c = 0; c < 4; ++c) {
    v[4 * c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);           // cols c, c+8 of rows 0-7
    v[4 * c + 1] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);       // cols c+4, c+12
    v[4 * c + 2] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);  // rows 8-15
    v[4 * c + 3] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
  }
  const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1);
  for (int c = 0; c < 4; ++c) {
    const __m512 col[4] = {_mm512_shuffle_f32x4(v[4 * c], v[4 * c + 2], 0x88),       // c
                           _mm512_shuffle_f32x4(v[4 * c + 1], v[4 * c + 3], 0x88),   // c + 4
                           _mm512_shuffle_f32x4(v[4 * c], v[4 * c + 2], 0xdd),       // c + 8
                           _mm512_shuffle_f32x4(v[4 * c + 1], v[4 * c + 3], 0xdd)};  // c + 12
    for (int q = 0; q < 4; ++q) {
      const std::int64_t l = c + 4 * q;
      if (l < count) _mm512_mask_storeu_ps(y + l * ldy, m, col[q]);
    }
  }
}

// A GEMM tile's accumulators (R weight rows x NT * 16 tokens) to y[token * ldy + row], for
// rows < nr and tokens < count.
template <int R, int NT>
[[gnu::always_inline]] inline __attribute__((target("avx512f"))) void store_tile(
    const __m512 (&acc)[R][NT], float* y, std::int64_t ldy, std::int64_t nr, std::int64_t count) {
  static_assert(R <= 16);
#pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) {
    __m512 a[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) a[r] = r < R ? acc[r][j] : _mm512_setzero_ps();
    store_transposed(a, y + 16 * j * ldy, ldy, nr, count - 16 * j);
  }
}

// y[j * ldy + r] = sum_k w[r * ldw + k] * xp[k * NT * 16 + j] for r < nr, j < count.
// `next`: the next tile's weights (contiguous, 16 * cols floats fetched), prefetched one cache
// line per k: the rows are too short for the hardware prefetcher to ramp up on its own.
template <int NT>
__attribute__((target("avx512f"))) void gemm_tile_avx512(const float* w, std::int64_t ldw,
                                                         std::int64_t cols, const float* xp,
                                                         float* y, std::int64_t ldy,
                                                         std::int64_t nr, std::int64_t count,
                                                         const float* next) {
  constexpr int R = kGemmRows, W = NT * 16;
  static_assert(R <= 16);
  __m512 acc[R][NT];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  const float* w4 = w + 4 * ldw;
  const float* w8 = w + 8 * ldw;
  for (std::int64_t k = 0; k < cols; ++k, xp += W) {
    _mm_prefetch(reinterpret_cast<const char*>(next + 16 * k), _MM_HINT_T0);
    __m512 xv[NT];
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) xv[j] = _mm512_loadu_ps(xp + 16 * j);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float* wr = r < 4 ? w + r * ldw : r < 8 ? w4 + (r - 4) * ldw : w8 + (r - 8) * ldw;
      const __m512 wv = _mm512_set1_ps(wr[k]);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
    }
  }
  store_tile<R, NT>(acc, y, ldy, nr, count);
}

// Token panels of Q8_0 activations for the VNNI GEMM (see gemm_q8_tile_vnni): 32 tokens
// each (16 for the last, when 16 or fewer are left); padding tokens are zero (quants 128,
// scale 0). x [n, cols] is quantised as quantize_q8 does.
struct QPanel {
  std::int64_t start, count, width;
  const std::uint8_t* q;
  const float* d;
};

// ---- Q8_0 GEMM for batches (AVX-512 VNNI) ----
// Same shape as the F32 GEMM, tokens in the lanes: the activation quants of a panel of 16 * NT
// tokens are packed as [blocks][8][16 * NT][4] bytes, offset by +128 to be unsigned, so one
// vpdpbusd against a broadcast dword of a weight row adds 4 products for 16 tokens. A block's
// int32 sums start at -128 * (sum of the row's quants in the block), which cancels the offset
// exactly; then they are scaled (weight scale x token scales) into float accumulators.
constexpr int kQ8Rows = 4;

// y[j * ldy + r] for r < nr, j < count. w: the tile's rows, [kQ8Rows][blocks]; wd, negsum:
// their scales and -128 * sum(quants), [kQ8Rows][blocks]; xq, xd: the panel's quants and
// scales ([blocks][16 * NT]). next: prefetched, the next tile's weights.
template <int NT>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void gemm_q8_tile_vnni(
    const BlockQ8_0* w, std::int64_t blocks, const float* wd, const std::int32_t* negsum,
    const std::uint8_t* xq, const float* xd, float* y, std::int64_t ldy, std::int64_t nr,
    std::int64_t count, const char* next) {
  constexpr int R = kQ8Rows, W = NT * 16;
  __m512 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  for (std::int64_t b = 0; b < blocks; ++b) {
    _mm_prefetch(next + b * R * 34, _MM_HINT_T0);
    _mm_prefetch(next + b * R * 34 + 64, _MM_HINT_T0);
    __m512i ia[R][NT];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) ia[r][j] = _mm512_set1_epi32(negsum[r * blocks + b]);
    }
    const std::uint8_t* xb = xq + b * 8 * W * 4;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i xv[NT];
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j)
        xv[j] = _mm512_loadu_si512(reinterpret_cast<const void*>(xb + (g * W + j * 16) * 4));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        std::int32_t q4;
        std::memcpy(&q4, w[r * blocks + b].qs + 4 * g, 4);
        const __m512i wv = _mm512_set1_epi32(q4);
#pragma GCC unroll 4
        for (int j = 0; j < NT; ++j) ia[r][j] = _mm512_dpbusd_epi32(ia[r][j], xv[j], wv);
      }
    }
    __m512 sx[NT];
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) sx[j] = _mm512_loadu_ps(xd + b * W + 16 * j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 sw = _mm512_set1_ps(wd[r * blocks + b]);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j)
        acc[r][j] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][j]), _mm512_mul_ps(sw, sx[j]), acc[r][j]);
    }
  }
  store_tile<R, NT>(acc, y, ldy, nr, count);
}

// Per tile of the Q8_0 GEMM: the rows' block scales as float and -128 * (sum of each block's
// quants), [kQ8Rows * blocks] each (see gemm_q8_tile_vnni).
__attribute__((target("avx512f,avx512bw,avx512vnni,f16c"))) void q8_tile_sums_vnni(
    const BlockQ8_0* w, std::int64_t count, float* wd, std::int32_t* negsum) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t i = 0; i < count; ++i) {
    wd[i] = _cvtsh_ss(w[i].d);
    // sum(q) = sum(q + 128) - 32 * 128, the biased bytes summed by sad against zero.
    const __m256i q =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs)), bias);
    const __m256i s = _mm256_sad_epu8(q, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const auto sum =
        static_cast<std::int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
    negsum[i] = -128 * sum;
  }
}

// Quantises x [n, cols] to Q8_0 exactly as quantize_q8 does and writes the quants (+128) and
// scales straight into the panels of pack_q8_panels, whose layout (start, count, width) is set.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void quantize_pack_q8_avx512(
    const float* x, std::int64_t cols, std::uint8_t* q, float* d, std::int64_t start,
    std::int64_t count, std::int64_t width) {
  const std::int64_t blocks = cols / kQK8_0;
  const __m512 half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f),
               zero = _mm512_setzero_ps();
  const __m512i bias = _mm512_set1_epi32(128);
  for (std::int64_t j = 0; j < count; ++j) {
    const float* xt = x + (start + j) * cols;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const __m512 v0 = _mm512_loadu_ps(xt + b * 32), v1 = _mm512_loadu_ps(xt + b * 32 + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float dd = amax / 127.0f;
      d[b * width + j] = fp16_to_fp32(fp32_to_fp16(dd));
      const __m512 inv = _mm512_set1_ps(dd ? 1.0f / dd : 0.0f);
      alignas(64) std::uint32_t out[8];
      for (int h = 0; h < 2; ++h) {
        const __m512 v = _mm512_mul_ps(h ? v1 : v0, inv);
        const __m512 r = _mm512_add_ps(
            v, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ), mhalf, half));
        const __m128i qb = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvttps_epi32(r), bias));
        _mm_store_si128(reinterpret_cast<__m128i*>(out + 4 * h), qb);
      }
      std::uint32_t* dst = reinterpret_cast<std::uint32_t*>(q) + (b * 8) * width + j;
      for (int g = 0; g < 8; ++g) dst[g * width] = out[g];
    }
  }
}

std::vector<QPanel> quantize_q8_panels(const float* x, std::int64_t n, std::int64_t cols,
                                       std::vector<std::uint8_t>& qbuf, std::vector<float>& dbuf) {
  const std::int64_t blocks = cols / kQK8_0;
  std::vector<QPanel> panels;
  std::int64_t width_sum = 0;
  for (std::int64_t t = 0; t < n;) {
    const std::int64_t width = n - t > 16 ? 32 : 16, count = std::min(width, n - t);
    panels.push_back({t, count, width, nullptr, nullptr});
    width_sum += width;
    t += count;
  }
  qbuf.assign(static_cast<std::size_t>(width_sum * cols), 128);
  dbuf.assign(static_cast<std::size_t>(width_sum * blocks), 0.0f);
  std::uint8_t* q = qbuf.data();
  float* d = dbuf.data();
  for (auto& p : panels) {
    p.q = q, p.d = d;
    quantize_pack_q8_avx512(x, cols, q, d, p.start, p.count, p.width);
    q += p.width * cols, d += p.width * blocks;
  }
  return panels;
}

bool have_vnni() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}

bool have_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
  }();
  return yes;
}
#pragma GCC diagnostic pop
#endif

// Token panels of a batch: [start, start + width) tokens each, width 32 or 16 (the last).
struct Panel {
  std::int64_t start, count, width;
  const float* data;
};

#ifdef WEIR_X86
// Packs x [n, cols] into the panels above (zero past n) by 16 x 16 transposes.
__attribute__((target("avx512f"))) std::vector<Panel> pack_panels(const float* x, std::int64_t n,
                                                                  std::int64_t cols,
                                                                  std::vector<float>& buf) {
  std::vector<Panel> panels;
  std::int64_t size = 0;
  for (std::int64_t t = 0; t < n;) {
    const std::int64_t width = n - t > 16 ? 32 : 16, count = std::min(width, n - t);
    panels.push_back({t, count, width, nullptr});
    size += width * cols;
    t += count;
  }
  buf.assign(static_cast<std::size_t>(size), 0.0f);
  float* p = buf.data();
  for (auto& pn : panels) {
    pn.data = p;
    for (std::int64_t j0 = 0; j0 < pn.count; j0 += 16) {  // 16 tokens: rows of the transpose
      const std::int64_t nt = std::min<std::int64_t>(16, pn.count - j0);
      for (std::int64_t k0 = 0; k0 < cols; k0 += 16) {
        const std::int64_t nk = std::min<std::int64_t>(16, cols - k0);
        const __mmask16 m = static_cast<__mmask16>((1u << nk) - 1);
        __m512 a[16];
        for (int r = 0; r < 16; ++r)
          a[r] = r < nt ? _mm512_maskz_loadu_ps(m, x + (pn.start + j0 + r) * cols + k0)
                        : _mm512_setzero_ps();
        store_transposed(a, p + k0 * pn.width + j0, pn.width, nt, nk);
      }
    }
    p += pn.width * cols;
  }
  return panels;
}
#endif

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

// Calls f(std::integral_constant<int, T>, t) for token tiles [t, t + T) covering [0, n),
// T = 4 but for the last.
template <class F>
void by_tiles(std::int64_t n, F&& f) {
  std::int64_t t = 0;
  for (; t + 4 <= n; t += 4) f(std::integral_constant<int, 4>{}, t);
  switch (n - t) {
    case 3:
      f(std::integral_constant<int, 3>{}, t);
      break;
    case 2:
      f(std::integral_constant<int, 2>{}, t);
      break;
    case 1:
      f(std::integral_constant<int, 1>{}, t);
      break;
    default:
      break;
  }
}

#ifdef WEIR_X86
// AVX2 kernels (picked at run time where the CPU has AVX2, FMA and F16C; see avx2()): weight
// rows straight from their blocks, no unpacking pass, T <= 4 tokens at a time so each weight
// block is decoded once per T dots. Per 32 weights: |w| * (x signed by w) summed in pairs
// (maddubs: |w| <= 128 and |x| <= 127, so no pair saturates), the pairs summed to 8 int32
// lanes, then scaled in float into one accumulator per token, reduced once per row.
// qx: [T, cols] activation quants; xd: [T, cols / 32] their scales; out[k * out_stride].

// Q8_0 and Q4_0 (its nibbles widen to 32 bytes in registers). w: [blocks].
template <class Block, int T>
__attribute__((target("avx2,fma,f16c"))) void dot_blocks_avx2(const Block* w, std::int64_t blocks,
                                                              const std::int8_t* qx,
                                                              const float* xd, float* out,
                                                              std::int64_t out_stride) {
  const std::int64_t cols = blocks * kQK8_0;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int k = 0; k < T; ++k) acc[k] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    __m256i q;
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    } else {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
      const __m128i m = _mm_set1_epi8(0xF);
      q = _mm256_sub_epi8(
          _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m)),
          _mm256_set1_epi8(8));
    }
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(w[b].d));
    const __m256i aq = _mm256_sign_epi8(q, q);
    for (int k = 0; k < T; ++k) {
      const __m256i x =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + k * cols + b * 32));
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(x, q)), ones);
      acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(xd[k * blocks + b])),
                               _mm256_cvtepi32_ps(p), acc[k]);
    }
  }
  for (int k = 0; k < T; ++k) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[k]), _mm256_extractf128_ps(acc[k], 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    out[k * out_stride] = _mm_cvtss_f32(v);
  }
}

// Horizontal sum of 8 floats.
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 a) {
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// Q4_K rows straight from their super-blocks, T tokens at a time. The nibbles are unsigned,
// so they go into maddubs as they are (15 * 127 * 2 fits int16); each 32-weight group's
// min costs one multiply-add per token (xsum: [T, sblocks * 8], see dot_rows_i8).
template <int T>
__attribute__((target("avx2,fma,f16c"))) void dot_q4k_avx2(const BlockQ4_K* w, std::int64_t sblocks,
                                                           const std::int8_t* qx, const float* xd,
                                                           const float* xsum, float* out,
                                                           std::int64_t out_stride) {
  const std::int64_t cols = sblocks * kQK_K, xblocks = sblocks * 8;
  const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0xF);
  __m256 acc[T];
  float mins[T] = {};
  for (int k = 0; k < T; ++k) acc[k] = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const float d = _cvtsh_ss(w[i].d), dmin = _cvtsh_ss(w[i].dmin);
    float sc[8], mn[8];
    for (int g = 0; g < 8; ++g) {
      std::uint8_t a, m;
      scale_min_k4(g, w[i].scales, a, m);
      sc[g] = d * a, mn[g] = dmin * m;
    }
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs + 32 * c));
      const __m256i q[2] = {_mm256_and_si256(raw, m4),
                            _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4)};
      for (int h = 0; h < 2; ++h) {
        const std::int64_t xb = i * 8 + 2 * c + h;
        for (int k = 0; k < T; ++k) {
          const __m256i x =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + k * cols + xb * 32));
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[h], x), ones);
          acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(sc[2 * c + h] * xd[k * xblocks + xb]),
                                   _mm256_cvtepi32_ps(p), acc[k]);
          mins[k] += mn[2 * c + h] * xsum[k * xblocks + xb];
        }
      }
    }
  }
  for (int k = 0; k < T; ++k) out[k * out_stride] = hsum8(acc[k]) - mins[k];
}

// Q6_K rows straight from their super-blocks, T tokens at a time: 6-bit quants assembled in
// registers from ql and qh, offset to -32..31, then the signed product above with one scale
// per 16 weights (lanes 0-3 hold the first 16 of a 32-block, 4-7 the next).
template <int T>
__attribute__((target("avx2,fma,f16c"))) void dot_q6k_avx2(const BlockQ6_K* w, std::int64_t sblocks,
                                                           const std::int8_t* qx, const float* xd,
                                                           float* out, std::int64_t out_stride) {
  const std::int64_t cols = sblocks * kQK_K, xblocks = sblocks * 8;
  const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0xF),
                m3 = _mm256_set1_epi8(0x03), m30 = _mm256_set1_epi8(0x30),
                off = _mm256_set1_epi8(32);
  __m256 acc[T];
  for (int k = 0; k < T; ++k) acc[k] = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const float d = _cvtsh_ss(w[i].d);
    for (int h = 0; h < 2; ++h) {
      const auto* ql = w[i].ql + 64 * h;
      const __m256i la = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i lb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh + 32 * h));
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(la, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)),
          _mm256_or_si256(_mm256_and_si256(lb, m4),
                          _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), m4),
                          _mm256_and_si256(hb, m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
      for (int j = 0; j < 4; ++j) {
        const __m256i qs = _mm256_sub_epi8(q[j], off);
        const __m256i aq = _mm256_sign_epi8(qs, qs);
        const int g = 8 * h + 2 * j;  // the group of the first 16 weights
        const __m256 sc =
            _mm256_set_m128(_mm_set1_ps(d * w[i].scales[g + 1]), _mm_set1_ps(d * w[i].scales[g]));
        const std::int64_t xb = i * 8 + 4 * h + j;
        for (int k = 0; k < T; ++k) {
          const __m256i x =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + k * cols + xb * 32));
          const __m256i p =
              _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(x, qs)), ones);
          acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(sc, _mm256_set1_ps(xd[k * xblocks + xb])),
                                   _mm256_cvtepi32_ps(p), acc[k]);
        }
      }
    }
  }
  for (int k = 0; k < T; ++k) out[k * out_stride] = hsum8(acc[k]);
}

bool have_avx2() {  // cpu_init: correct however early the first call comes
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return yes;
}
#else
bool have_avx2() {
  return false;
}
#endif
std::atomic<KernelIsa> g_isa{KernelIsa::native};  // force_kernel_isa()

bool avx2() {
  return have_avx2() && g_isa.load(std::memory_order_relaxed) != KernelIsa::portable;
}

#ifdef WEIR_X86
bool avx512() {
  return have_avx512() && g_isa.load(std::memory_order_relaxed) == KernelIsa::native;
}
bool vnni() {
  return have_vnni() && g_isa.load(std::memory_order_relaxed) == KernelIsa::native;
}
#endif

// Row r of a Q4_0 / Q4_K / Q6_K weight: q[cols]; scale and min per group (32 weights for
// Q4_0 and Q4_K, 16 for Q6_K; min for Q4_K only).
WEIR_CLONES void unpack_row(const Weight& w, std::int64_t r, std::int8_t* q, float* scale,
                            float* min) {
  const std::byte* row = w.data + static_cast<std::size_t>(r) * w.row_bytes();
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

// roundf without the library call (half away from zero, as ggml's reference quantiser).
inline int round_half_away(float v) {
  return static_cast<int>(v + (v >= 0.0f ? 0.5f : -0.5f));
}

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

#ifdef WEIR_X86
// The VNNI GEMM for a batch (n >= kGemmMinTokens) of Q8_0 weights, or Q4_0 ones widened to
// Q8_0 blocks a row tile at a time (the same scale, quants - 8), so both share the kernel.
void gemm_q8_vnni(const Weight& w, const float* x, std::int64_t n, float* y, ThreadPool& pool) {
  const std::int64_t rows = w.rows, cols = w.cols, blocks = cols / kQK8_0;
  const std::size_t row_bytes = w.row_bytes();
  thread_local std::vector<std::uint8_t> xq;
  thread_local std::vector<float> xd;
  const auto panels = quantize_q8_panels(x, n, cols, xq, xd);
  const std::int64_t tiles = (rows + kQ8Rows - 1) / kQ8Rows;
  pool.parallel_for(tiles, [&](int, std::int64_t b, std::int64_t e) {
    thread_local std::vector<BlockQ8_0> tile_rows;  // a padded last tile, or widened Q4_0
    thread_local std::vector<float> wd;
    thread_local std::vector<std::int32_t> negsum;
    wd.resize(static_cast<std::size_t>(kQ8Rows * blocks));
    negsum.resize(static_cast<std::size_t>(kQ8Rows * blocks));
    for (std::int64_t tile = b; tile < e; ++tile) {
      const std::int64_t r0 = tile * kQ8Rows, nr = std::min<std::int64_t>(kQ8Rows, rows - r0);
      const std::byte* raw = w.data + static_cast<std::size_t>(r0) * row_bytes;
      const auto* wt = reinterpret_cast<const BlockQ8_0*>(raw);
      if (w.type == GgmlType::q4_0) {
        tile_rows.assign(static_cast<std::size_t>(kQ8Rows * blocks), BlockQ8_0{});
        const auto* q4 = reinterpret_cast<const BlockQ4_0*>(raw);
        for (std::int64_t i = 0; i < nr * blocks; ++i) {
          float unused;
          tile_rows[static_cast<std::size_t>(i)].d = q4[i].d;
          unpack_q4_0(q4[i], tile_rows[static_cast<std::size_t>(i)].qs, &unused);
        }
        wt = tile_rows.data();
      } else if (nr < kQ8Rows) {
        tile_rows.assign(static_cast<std::size_t>(kQ8Rows * blocks), BlockQ8_0{});
        std::copy_n(wt, nr * blocks, tile_rows.data());
        wt = tile_rows.data();
      }
      q8_tile_sums_vnni(wt, kQ8Rows * blocks, wd.data(), negsum.data());
      const char* next = reinterpret_cast<const char*>(
          w.data + static_cast<std::size_t>(std::min(r0 + kQ8Rows, rows - 1)) * row_bytes);
      for (const QPanel& p : panels) {
        const char* pf = &p == &panels.front() ? next : reinterpret_cast<const char*>(raw);
        float* yt = y + p.start * rows + r0;
        if (p.width == 32)
          gemm_q8_tile_vnni<2>(wt, blocks, wd.data(), negsum.data(), p.q, p.d, yt, rows, nr,
                               p.count, pf);
        else
          gemm_q8_tile_vnni<1>(wt, blocks, wd.data(), negsum.data(), p.q, p.d, yt, rows, nr,
                               p.count, pf);
      }
    }
  });
}
#endif

}  // namespace

void matmul(const Weight& w, const float* x, std::int64_t n, float* y, ThreadPool& pool,
            std::vector<std::int8_t>& qx, std::vector<float>& qscale) {
  const std::int64_t rows = w.rows, cols = w.cols;
  switch (w.type) {
    case GgmlType::f32: {
      const auto* wf = reinterpret_cast<const float*>(w.data);
#ifdef WEIR_X86
      if (n >= kGemmMinTokens && avx512()) {
        thread_local std::vector<float> xp;
        const std::vector<Panel> panels = pack_panels(x, n, cols, xp);
        const std::int64_t tiles = (rows + kGemmRows - 1) / kGemmRows;
        pool.parallel_for(tiles, [&](int, std::int64_t b, std::int64_t e) {
          thread_local std::vector<float> pad;  // the last tile's rows, zero-padded
          for (std::int64_t tile = b; tile < e; ++tile) {
            const std::int64_t r0 = tile * kGemmRows,
                               nr = std::min<std::int64_t>(kGemmRows, rows - r0);
            const float* wt = wf + r0 * cols;
            if (nr < kGemmRows) {
              pad.assign(static_cast<std::size_t>(kGemmRows * cols), 0.0f);
              std::copy_n(wt, nr * cols, pad.data());
              wt = pad.data();
            }
            // The next tile's weights are prefetched during the first panel.
            for (const Panel& p : panels) {
              const float* pf =
                  &p == &panels.front() ? wf + std::min(r0 + kGemmRows, rows - 1) * cols : wt;
              float* yt = y + p.start * rows + r0;
              if (p.width == 32)
                gemm_tile_avx512<2>(wt, cols, cols, p.data, yt, rows, nr, p.count, pf);
              else
                gemm_tile_avx512<1>(wt, cols, cols, p.data, yt, rows, nr, p.count, pf);
            }
          }
        });
        return;
      }
#endif
      // Split rows across threads in multiples of 4, so tiles stay whole.
      pool.parallel_for((rows + 3) / 4, [&](int, std::int64_t b, std::int64_t e) {
        gemm_f32_rows(wf, b * 4, std::min(rows, e * 4), cols, x, n, y, rows);
      });
      return;
    }
    case GgmlType::q8_0: {
      const std::int64_t blocks = cols / kQK8_0;
#ifdef WEIR_X86
      if (n >= kGemmMinTokens && vnni()) return gemm_q8_vnni(w, x, n, y, pool);
#endif
      quantize_q8(x, n, cols, qx, qscale);
#ifdef WEIR_X86
      if (avx2()) {
        pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
          for (std::int64_t r = b; r < e; ++r) {
            by_tiles(n, [&](auto T, std::int64_t t) {
              dot_blocks_avx2<BlockQ8_0, T>(reinterpret_cast<const BlockQ8_0*>(w.data) + r * blocks,
                                            blocks, qx.data() + t * cols,
                                            qscale.data() + t * blocks, y + t * rows + r, rows);
            });
          }
        });
        return;
      }
#endif
      pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          dot_rows_q8(reinterpret_cast<const BlockQ8_0*>(w.data) + r * blocks, qx.data(),
                      qscale.data(), blocks, n, y + r, rows);
        }
      });
      return;
    }
    case GgmlType::q4_0:
    case GgmlType::q4_k:
    case GgmlType::q6_k: {
#ifdef WEIR_X86
      if (w.type == GgmlType::q4_0 && n >= kGemmMinTokens && vnni())
        return gemm_q8_vnni(w, x, n, y, pool);
#endif
      quantize_q8(x, n, cols, qx, qscale);
      const std::int64_t xblocks = cols / kQK8_0;
      thread_local std::vector<float> xsum;  // Q4_K's min term: per block, d * sum(q)
      if (w.type == GgmlType::q4_k) {
        xsum.resize(static_cast<std::size_t>(n * xblocks));
        for (std::int64_t b = 0; b < n * xblocks; ++b) {
          std::int32_t sum = 0;
          for (int j = 0; j < kQK8_0; ++j) sum += qx[static_cast<std::size_t>(b * kQK8_0 + j)];
          xsum[static_cast<std::size_t>(b)] = qscale[static_cast<std::size_t>(b)] * sum;
        }
      }
      const GgmlType type = w.type;
      const float* xs = xsum.data();
#ifdef WEIR_X86
      if (avx2()) {  // straight from the blocks
        const std::int64_t sblocks = cols / kQK_K;
        pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
          for (std::int64_t r = b; r < e; ++r) {
            by_tiles(n, [&](auto T, std::int64_t t) {
              const std::int8_t* q = qx.data() + t * cols;
              const float* d = qscale.data() + t * xblocks;
              float* out = y + t * rows + r;
              if (type == GgmlType::q4_0) {
                dot_blocks_avx2<BlockQ4_0, T>(
                    reinterpret_cast<const BlockQ4_0*>(w.data) + r * xblocks, xblocks, q, d, out,
                    rows);
              } else if (type == GgmlType::q4_k) {
                dot_q4k_avx2<T>(reinterpret_cast<const BlockQ4_K*>(w.data) + r * sblocks, sblocks,
                                q, d, xs + t * xblocks, out, rows);
              } else {
                dot_q6k_avx2<T>(reinterpret_cast<const BlockQ6_K*>(w.data) + r * sblocks, sblocks,
                                q, d, out, rows);
              }
            });
          }
        });
        return;
      }
#endif
      pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
        thread_local std::vector<std::int8_t> q;
        thread_local std::vector<float> sc, mn;
        q.resize(static_cast<std::size_t>(cols));
        sc.resize(static_cast<std::size_t>(cols / 16));
        mn.resize(static_cast<std::size_t>(cols / 16));
        for (std::int64_t r = b; r < e; ++r) {
          unpack_row(w, r, q.data(), sc.data(), mn.data());
          if (type == GgmlType::q4_0) {
            dot_rows_i8<32, false>(q.data(), sc.data(), nullptr, cols, qx.data(), qscale.data(),
                                   nullptr, n, y + r, rows);
          } else if (type == GgmlType::q4_k) {
            dot_rows_i8<32, true>(q.data(), sc.data(), mn.data(), cols, qx.data(), qscale.data(),
                                  xs, n, y + r, rows);
          } else {
            dot_rows_i8<16, false>(q.data(), sc.data(), nullptr, cols, qx.data(), qscale.data(),
                                   nullptr, n, y + r, rows);
          }
        }
      });
      return;
    }
    default:  // F16 / BF16: dequantise each row once, then the F32 dot for every token
      pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
        thread_local std::vector<float> row;
        row.resize(static_cast<std::size_t>(cols));
        for (std::int64_t r = b; r < e; ++r) {
          dequantize_row(w, r, row.data());
          dot_rows_f32(row.data(), x, cols, n, cols, y + r, rows, false);
        }
      });
  }
}

void use_portable_int8_kernels(bool on) {
  force_kernel_isa(on ? KernelIsa::portable : KernelIsa::native);
}

void force_kernel_isa(KernelIsa isa) {
  g_isa.store(isa, std::memory_order_relaxed);
}

void rmsnorm(const float* x, const float* w, float* out, std::int64_t n, std::int64_t dim,
             float eps) {
  for (std::int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * dim;
    float ss = 0;
    for (std::int64_t i = 0; i < dim; ++i) ss += xt[i] * xt[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (std::int64_t i = 0; i < dim; ++i) out[t * dim + i] = w[i] * (xt[i] * inv);
  }
}

void rope_angles(const std::int32_t* positions, std::int64_t n, int head_dim, float base,
                 float freq_scale, float* cos, float* sin) {
  thread_local std::vector<float> inv_freq;
  inv_freq.resize(static_cast<std::size_t>(head_dim / 2));
  for (int j = 0; j < head_dim / 2; ++j) inv_freq[j] = std::pow(base, -2.0f * j / head_dim);
  for (std::int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < head_dim / 2; ++j) {
      const float theta = positions[t] * freq_scale * inv_freq[j];
      cos[t * (head_dim / 2) + j] = std::cos(theta);
      sin[t * (head_dim / 2) + j] = std::sin(theta);
    }
  }
}

void rope_apply(float* x, std::int64_t n, int n_heads, int head_dim, bool neox, const float* cos,
                const float* sin) {
  const int half = head_dim / 2;
  for (std::int64_t t = 0; t < n; ++t) {
    const float* ct = cos + t * half;
    const float* st = sin + t * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int j = 0; j < half; ++j) {
        const int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = a * ct[j] - b * st[j];
        v[i1] = a * st[j] + b * ct[j];
      }
    }
  }
}

WEIR_CLONES void swiglu(float* a, const float* b, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // exp16: within 2 ulp of std::exp
    const simd::v16 x = simd::load16(a + i);
    simd::store16(a + i, x / (1.0f + simd::exp16(-x)) * simd::load16(b + i));
  }
  for (; i < n; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

}  // namespace weir::inference::kernels
