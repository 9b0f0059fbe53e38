// The AVX-512 batched GEMMs of matmul(): F32 (AVX-512F) and Q8_0 / Q4_0 (AVX-512 VNNI). The
// F32 GEMM's scheme, its tile sizes and the Panel type: gemm_avx512.hpp.
#include "kernels/gemm_avx512.hpp"

#include <algorithm>
#include <cstring>

#include "model/repack.hpp"

#ifdef WEIR_X86
#include <immintrin.h>

#include "model/quant.hpp"

namespace weir::inference::kernels::detail {

WEIR_AVX512_BEGIN

namespace {

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

}  // namespace

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

template void gemm_tile_avx512<1>(const float*, std::int64_t, std::int64_t, const float*, float*,
                                  std::int64_t, std::int64_t, std::int64_t, const float*);
template void gemm_tile_avx512<2>(const float*, std::int64_t, std::int64_t, const float*, float*,
                                  std::int64_t, std::int64_t, std::int64_t, const float*);

namespace {

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
constexpr int kQ8Rows = 6;

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
// scales straight into the panels of quantize_q8_panels, whose layout (start, count, width) is set.
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
  // Grown, never shrunk: a full panel is written whole, only a partial one is padded first.
  if (qbuf.size() < static_cast<std::size_t>(width_sum * cols))
    qbuf.resize(static_cast<std::size_t>(width_sum * cols));
  if (dbuf.size() < static_cast<std::size_t>(width_sum * blocks))
    dbuf.resize(static_cast<std::size_t>(width_sum * blocks));
  std::uint8_t* q = qbuf.data();
  float* d = dbuf.data();
  for (auto& p : panels) {
    p.q = q, p.d = d;
    if (p.count < p.width) {  // padding tokens: quants 128 (zero), scale 0
      std::fill_n(q, p.width * cols, std::uint8_t{128});
      std::fill_n(d, p.width * blocks, 0.0f);
    }
    quantize_pack_q8_avx512(x, cols, q, d, p.start, p.count, p.width);
    q += p.width * cols, d += p.width * blocks;
  }
  return panels;
}

}  // namespace

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
WEIR_AVX512_END

// Packs x [n, cols] into Panels (gemm_avx512.hpp; zero past n) by 16 x 16 transposes.
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
  // Grown, never shrunk: a full panel is written whole, only a partial one is zeroed first.
  if (buf.size() < static_cast<std::size_t>(size)) buf.resize(static_cast<std::size_t>(size));
  float* p = buf.data();
  for (auto& pn : panels) {
    pn.data = p;
    if (pn.count < pn.width) std::fill_n(p, pn.width * cols, 0.0f);
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

// dequantize_row for K-quant rows, compiled for AVX-512 (the conversion loops vectorise 16
// lanes wide); the same arithmetic, so the same floats.
__attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma"))) void dequantize_rows_avx512(
    const Weight& w, std::int64_t r0, std::int64_t nr, float* out) {
  const std::int64_t sblocks = w.cols / kQK_K;
  for (std::int64_t r = 0; r < nr; ++r) {
    const std::byte* row = row_bytes_of(w, r0 + r);
    float* o = out + r * w.cols;
    alignas(64) std::int8_t q[kQK_K];
    if (w.type == GgmlType::q4_k) {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(row);
      float sc[8], mn[8];
      for (std::int64_t i = 0; i < sblocks; ++i, o += kQK_K) {
        unpack_q4_k(b[i], q, sc, mn);
        for (int g = 0; g < 8; ++g)
          for (int j = 0; j < 32; ++j) o[g * 32 + j] = sc[g] * q[g * 32 + j] - mn[g];
      }
    } else if (w.type == GgmlType::q6_k) {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row);
      float sc[16];
      for (std::int64_t i = 0; i < sblocks; ++i, o += kQK_K) {
        unpack_q6_k(b[i], q, sc);
        for (int g = 0; g < 16; ++g)
          for (int j = 0; j < 16; ++j) o[g * 16 + j] = sc[g] * q[g * 16 + j];
      }
    } else {
      dequantize_row(w, r0 + r, o);
    }
  }
}

// The VNNI GEMM for a batch (n >= kGemmMinTokens) of Q8_0 weights, or Q4_0 ones widened to
// Q8_0 blocks a row tile at a time (the same scale, quants - 8), so both share the kernel.
void gemm_q8_vnni(std::span<const MatmulOut> outs, const float* x, std::int64_t n,
                  ThreadPool& pool) {
  const std::int64_t cols = outs[0].w.cols, blocks = cols / kQK8_0;
  thread_local std::vector<std::uint8_t> xq;
  thread_local std::vector<float> xd;
  const auto panels = quantize_q8_panels(x, n, cols, xq, xd);
  pool.parallel_for(count_tiles(outs, kQ8Rows), [&](int, std::int64_t b, std::int64_t e) {
    thread_local std::vector<BlockQ8_0> tile_rows;  // a padded last tile, or widened Q4_0
    thread_local std::vector<float> wd;
    thread_local std::vector<std::int32_t> negsum;
    wd.resize(static_cast<std::size_t>(kQ8Rows * blocks));
    negsum.resize(static_cast<std::size_t>(kQ8Rows * blocks));
    for_tiles(outs, kQ8Rows, b, e, [&](std::size_t k, std::int64_t tile) {
      const Weight& w = outs[k].w;
      const std::int64_t rows = w.rows;
      const std::size_t row_bytes = w.row_bytes();
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
        float* yt = outs[k].y + p.start * rows + r0;
        if (p.width == 32)
          gemm_q8_tile_vnni<2>(wt, blocks, wd.data(), negsum.data(), p.q, p.d, yt, rows, nr,
                               p.count, pf);
        else
          gemm_q8_tile_vnni<1>(wt, blocks, wd.data(), negsum.data(), p.q, p.d, yt, rows, nr,
                               p.count, pf);
      }
    });
  });
}

}  // namespace weir::inference::kernels::detail
#endif
