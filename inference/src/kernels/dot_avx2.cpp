// The AVX2 integer kernels of matmul(); see dot_avx2.hpp.
#include "kernels/dot_avx2.hpp"

#include <type_traits>

#ifdef WEIR_X86
#include <immintrin.h>
#endif

namespace weir::inference::kernels::detail {

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

namespace {

// Horizontal sum of 8 floats.
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 a) {
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

}  // namespace

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

// The instances matmul() uses: T = 1..4 (by_tiles).
#define WEIR_DOT_AVX2(T)                                                                          \
  template void dot_blocks_avx2<BlockQ8_0, T>(const BlockQ8_0*, std::int64_t, const std::int8_t*, \
                                              const float*, float*, std::int64_t);                \
  template void dot_blocks_avx2<BlockQ4_0, T>(const BlockQ4_0*, std::int64_t, const std::int8_t*, \
                                              const float*, float*, std::int64_t);                \
  template void dot_q4k_avx2<T>(const BlockQ4_K*, std::int64_t, const std::int8_t*, const float*, \
                                const float*, float*, std::int64_t);                              \
  template void dot_q6k_avx2<T>(const BlockQ6_K*, std::int64_t, const std::int8_t*, const float*, \
                                float*, std::int64_t);
WEIR_DOT_AVX2(1)
WEIR_DOT_AVX2(2)
WEIR_DOT_AVX2(3)
WEIR_DOT_AVX2(4)
#undef WEIR_DOT_AVX2

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

}  // namespace weir::inference::kernels::detail
