// Q8_0 K/V: quantizing on write, and attention's fast path built for AVX-512 (GCC 12 turns a
// portable int8-to-float vector conversion into 16 scalar ones, so the per-ISA build of
// paged_attention.cpp cannot be the fast path here, as it is for F32). The fast path applies each
// (position, head)'s scale once: to the score (K, an integer dot product with the query rounded
// to int8), and to the probability that weights the V row.
#include "kernels/paged_attention_q8.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/gemm_avx512.hpp"
#include "kernels/simd.hpp"
#include "kernels/x86.hpp"

namespace weir::inference {

void store_q8(const float* x, std::int64_t n, std::int32_t block, std::int8_t* q,
              std::uint16_t* scales) {
  for (std::int64_t b = 0; b < n / block; ++b, x += block, q += block) {
    float amax = 0;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const std::uint32_t u = std::bit_cast<std::uint32_t>(amax / 127.0f);  // finite, >= 0
    const auto s = static_cast<std::uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    scales[b] = s;
    const float d = bf16_to_f32(s);
    for (int i = 0; i < block; ++i) {
      q[i] = d > 0 ? static_cast<std::int8_t>(std::clamp(std::nearbyint(x[i] / d), -127.0f, 127.0f))
                   : 0;
    }
  }
}

}  // namespace weir::inference

#ifdef WEIR_X86
#include <immintrin.h>

#define WEIR_Q8_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,fma")))

WEIR_AVX512_BEGIN

namespace weir::inference {
namespace {

// One layer's Q8_0 K and V: the value at (block, slot, column) of a plane times the scale of
// its (block, slot, column / head_dim) in the scale planes ([num_blocks][block_size][n_kv_heads]).
// Scores are integer dot products (vpdpbusd) of K with the query head rounded to int8 (as
// llama.cpp rounds activations for its Q8_0 dot products); V is read as floats.
struct Q8Kv {
  using T = std::int8_t;
  static constexpr bool kScaled = true, kDotScores = true;
  const std::uint16_t* scale_planes[2];  // K, V
  std::int32_t block_size, n_kv_heads;

  [[gnu::always_inline]] WEIR_Q8_TARGET simd::v16 load16(const T* p) const {
    return reinterpret_cast<simd::v16>(_mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
  }
  // q[0..hd) as int8 steps of its largest magnitude / 127; returns that step (0: q is zero).
  [[gnu::always_inline]] WEIR_Q8_TARGET float quantize_query(const float* q, std::int32_t hd,
                                                             std::int8_t* out) const {
    __m512 m = _mm512_setzero_ps();
    for (std::int32_t j = 0; j < hd; j += 16)
      m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(q + j)));
    const float amax = _mm512_reduce_max_ps(m);
    const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    for (std::int32_t j = 0; j < hd; j += 16) {
      const __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(q + j), inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm512_cvtsepi32_epi8(i));
    }
    return amax / 127.0f;
  }
  // A query head ready for vpdpbusd: per 64-byte chunk, the bytes to load, q's negative lanes,
  // and |q|.
  struct Query {
    int chunks;
    __mmask64 load[2], neg[2];
    __m512i qabs[2];
  };
  [[gnu::always_inline]] WEIR_Q8_TARGET static __m512i dot(const Query& q, const T* k) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i acc = zero;
    for (int m = 0; m < q.chunks; ++m) {
      __m512i kb = _mm512_maskz_loadu_epi8(q.load[m], k + 64 * m);
      kb = _mm512_mask_sub_epi8(kb, q.neg[m], zero, kb);  // K with q's signs
      acc = _mm512_dpbusd_epi32(acc, q.qabs[m], kb);
    }
    return acc;
  }
  // out[r] = scale * (q . K row r) for r < rows: K rows kv_dim apart from krow, hd values each
  // (a multiple of 16, at most 128: one or two 64-byte chunks). vpdpbusd multiplies unsigned by
  // signed bytes, so it takes |q| and K with q's signs.
  [[gnu::always_inline]] WEIR_Q8_TARGET void dot_scores(const std::int8_t* q, std::int32_t hd,
                                                        float scale, const T* krow,
                                                        std::int64_t kv_dim, std::int32_t rows,
                                                        float* out) const {
    const int chunks = (hd + 63) / 64;
    __mmask64 load[2] = {}, neg[2] = {};
    __m512i qabs[2] = {};
    for (int m = 0; m < chunks; ++m) {
      const int n = std::min(64, hd - 64 * m);
      load[m] = n == 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
      const __m512i qm = _mm512_maskz_loadu_epi8(load[m], q + 64 * m);
      qabs[m] = _mm512_abs_epi8(qm);
      neg[m] = _mm512_movepi8_mask(qm);
    }
    const Query qr{chunks, {load[0], load[1]}, {neg[0], neg[1]}, {qabs[0], qabs[1]}};
    std::int32_t r = 0;
    for (; r + 16 <= rows; r += 16) {  // 16 rows' sums at once, by a tree
      simd::v16 a[16];
      for (int c = 0; c < 16; ++c)
        a[c] = reinterpret_cast<simd::v16>(_mm512_cvtepi32_ps(dot(qr, krow + (r + c) * kv_dim)));
      simd::store16(out + r, simd::sum16x16(a) * scale);
    }
    for (; r < rows; ++r)
      out[r] = static_cast<float>(_mm512_reduce_add_epi32(dot(qr, krow + r * kv_dim))) * scale;
  }
  std::size_t at(BlockId blk, std::int32_t slot, std::int32_t kv_head) const {
    return (static_cast<std::size_t>(blk) * block_size + slot) * n_kv_heads + kv_head;
  }
  float scale(int kv, BlockId blk, std::int32_t slot, std::int32_t kv_head) const {
    return bf16_to_f32(scale_planes[kv][at(blk, slot, kv_head)]);
  }
  void prefetch_scales(int kv, BlockId blk) const {
    const std::uint16_t* s = scale_planes[kv] + at(blk, 0, 0);
    const std::int32_t n = block_size * n_kv_heads;
    for (std::int32_t i = 0; i < n; i += 32) __builtin_prefetch(s + i);
    __builtin_prefetch(s + n - 1);
  }
};

}  // namespace
}  // namespace weir::inference

#define WEIR_ATTEND_TARGET WEIR_Q8_TARGET
#include "kernels/attend.hpp"

namespace weir::inference {

namespace {
WEIR_Q8_TARGET void attention_q8_fast(const Q8Kv& kv, const std::int8_t* k_plane,
                                      const std::int8_t* v_plane, const KvLayout& L,
                                      const AttentionBatch& batch, const float* q, float* out,
                                      float scale, std::int64_t begin, std::int64_t end,
                                      std::vector<float>& scratch) {
  attend_items(kv, k_plane, v_plane, L, batch, q, out, scale, begin, end, scratch);
}
}  // namespace

bool attention_q8_avx512_vnni(const std::int8_t* values, const std::uint16_t* scales,
                              const std::int8_t* k_plane, const std::int8_t* v_plane,
                              const KvLayout& L, const AttentionBatch& batch, const float* q,
                              float* out, float scale, std::int64_t begin, std::int64_t end,
                              std::vector<float>& scratch) {
  if (!kernels::detail::have_vnni()) return false;  // AVX-512 F, BW, VNNI (the GEMMs' check)
  const Q8Kv kv{
      {scales + (k_plane - values) / L.head_dim, scales + (v_plane - values) / L.head_dim},
      L.block_size,
      L.n_kv_heads};
  attention_q8_fast(kv, k_plane, v_plane, L, batch, q, out, scale, begin, end, scratch);
  return true;
}

}  // namespace weir::inference
WEIR_AVX512_END

#else  // not x86-64: the portable paths

namespace weir::inference {

bool attention_q8_avx512_vnni(const std::int8_t*, const std::uint16_t*, const std::int8_t*,
                              const std::int8_t*, const KvLayout&, const AttentionBatch&,
                              const float*, float*, float, std::int64_t, std::int64_t,
                              std::vector<float>&) {
  return false;
}

}  // namespace weir::inference
#endif
