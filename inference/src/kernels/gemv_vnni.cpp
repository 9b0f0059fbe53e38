// The AVX-512 VNNI decode kernels of matmul(); the scheme: gemv_vnni.hpp.
#include "kernels/gemv_vnni.hpp"

#include "model/repack.hpp"

#ifdef WEIR_X86
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace weir::inference::kernels::detail {

WEIR_AVX512_BEGIN

namespace {

// Rows are read front to back, one after the other, so the weights kAhead bytes on are fetched
// into L2 while these are multiplied: the hardware prefetcher alone leaves one core well short of
// the machine's read bandwidth. On the development machine (one core, a 6.5 MB Q4_K matrix
// streamed from DRAM) 8 KiB ahead into L2 gave 21 GB/s against 17 without; 2-4 KiB, or into L1,
// gave less.
constexpr std::int64_t kAhead = 8192;
// The x16 kernels prefetch only in compute-bound calls, the first of several token tiles on a
// group (gemv_vnni.hpp): 32 KiB ahead, one or two groups of the 1B shape.
constexpr std::int64_t kAheadX16 = 32768;

// Prefetches the `lines` cache lines from kAhead bytes past p.
template <int lines, std::int64_t ahead = kAhead>
WEIR_VNNI inline void prefetch_ahead(const void* p) {
  const char* a = static_cast<const char*>(p) + ahead;
#pragma GCC unroll 8
  for (int l = 0; l < lines; ++l) _mm_prefetch(a + 64 * l, _MM_HINT_T1);
}

// corr[g] = -offset * (sum of the `group` quants of group g), g < cols / group (4, 16 or 32).
// 64 quants at a time: their 16 sums of 4 by one vpdpbusd against ones, added within 128-bit
// lanes for groups of 16 and across pairs of them for 32, the first sum of each group kept.
WEIR_VNNI void group_corrections(const std::int8_t* q, std::int64_t cols, int group, int offset,
                                 std::int32_t* corr) {
  const __m512i ones = _mm512_set1_epi8(1), neg = _mm512_set1_epi32(-offset);
  const __mmask16 keep = group == 4 ? 0xFFFF : group == 16 ? 0x1111 : 0x0101;
  const std::int64_t per = 64 / group;  // groups in 64 quants
  std::int64_t i = 0;
  for (; i + 64 <= cols; i += 64, corr += per) {
    __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(q + i));
    if (group >= 16) {
      v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
      v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
    }
    if (group == 32) v = _mm512_add_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_PERM_CDAB));
    // Compressed in a register: the memory form is microcoded on Zen 4, ~30 times slower.
    _mm512_mask_storeu_epi32(corr, static_cast<__mmask16>((1u << per) - 1),
                             _mm512_maskz_compress_epi32(keep, _mm512_mullo_epi32(v, neg)));
  }
  for (; i < cols; i += group) {
    std::int32_t sum = 0;
    for (int j = 0; j < group; ++j) sum += q[i + j];
    *corr++ = -offset * sum;
  }
}

}  // namespace

WEIR_VNNI void quantize_q8_blocks(const float* x, std::int64_t blocks, std::int8_t* q, float* s) {
  const __m512 half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f),
               zero = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    s[b] = fp16_to_fp32(fp32_to_fp16(d));
    const __m512 inv = _mm512_set1_ps(d ? 1.0f / d : 0.0f);
    for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_mul_ps(h ? v1 : v0, inv);  // then half away from zero, truncated
      const __m512 r = _mm512_add_ps(
          v, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ), mhalf, half));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16 * h),
                       _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(r)));
    }
  }
}

WEIR_VNNI void quantize_q8_avx512(const float* x, std::int64_t n, std::int64_t cols,
                                  std::vector<std::int8_t>& q, std::vector<float>& s) {
  q.resize(static_cast<std::size_t>(n * cols));
  s.resize(static_cast<std::size_t>(n * cols / kQK8_0));
  quantize_q8_blocks(x, n * cols / kQK8_0, q.data(), s.data());
}

namespace {

void prepare_q4k(const std::int8_t* qx, const float* xd, std::int64_t s0, std::int64_t s1,
                 bool reorder, VnniActs& a) {
  static constexpr int kOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7}, kSame[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const int* order = reorder ? kOrder : kSame;
  for (std::int64_t s = s0; s < s1; ++s) {  // super-blocks of the whole batch
    for (int p = 0; p < 8; ++p)
      std::memcpy(a.q.data() + s * kQK_K + 32 * p, qx + s * kQK_K + 32 * order[p], 32);
    for (int b = 0; b < 8; ++b) {
      const std::int8_t* q = qx + s * kQK_K + 32 * b;
      std::int32_t sum = 0;
      for (int j = 0; j < kQK8_0; ++j) sum += q[j];
      a.block_d[static_cast<std::size_t>(16 * s + b)] = xd[8 * s + b];
      a.block_d[static_cast<std::size_t>(16 * s + 8 + b)] = xd[8 * s + b] * static_cast<float>(sum);
    }
  }
}

void prepare_q4_0(const std::int8_t* qx, std::int64_t t0, std::int64_t t1, std::int64_t cols,
                  VnniActs& a) {
  const std::int64_t blocks = cols / kQK4_0, grouped = blocks / 8 * 8;
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int8_t* x = qx + t * cols;
    std::int8_t* q = a.q.data() + t * cols;
    // Groups of 4 blocks: the first 16 weights of each, then the last 16 of each.
    for (std::int64_t b = 0; b < grouped; b += 4) {
      for (int k = 0; k < 4; ++k) {
        std::memcpy(q + 32 * b + 16 * k, x + 32 * (b + k), 16);
        std::memcpy(q + 32 * b + 64 + 16 * k, x + 32 * (b + k) + 16, 16);
      }
    }
    std::memcpy(q + 32 * grouped, x + 32 * grouped, static_cast<std::size_t>(cols - 32 * grouped));
  }
}

// group, offset of each ActsKind's corrections: per lane (4) for the row kernels, per group for
// x16; Q4_K has none.
struct Corrections {
  int group, offset;
};
constexpr Corrections kCorrections[kActsKinds] = {
    {4, 128} /* q8_0 */,  {4, 8} /* q4_0 */,      {0, 0} /* q4_k */,      {4, 32} /* q6_k */,
    {0, 0} /* q4k_x16 */, {16, 32} /* q6k_x16 */, {32, 8} /* q4_0_x16 */, {32, 128} /* q8_0_x16 */};
Corrections corrections_of(ActsKind kind) {
  return kCorrections[static_cast<int>(kind)];
}

}  // namespace

void size_acts(ActsKind kind, std::int64_t n, std::int64_t cols, VnniActs& a) {
  const auto elems = static_cast<std::size_t>(n * cols);
  a.q.resize(elems);
  if (const Corrections c = corrections_of(kind); c.group) a.corr.resize(elems / c.group);
  if (kind == ActsKind::q6_k) a.lane_d.resize(elems / 4);
  if (kind == ActsKind::q4_k || kind == ActsKind::q4k_x16)
    a.block_d.resize(elems / 16);
  else if (kind == ActsKind::q6k_x16 || kind == ActsKind::q4_0_x16 || kind == ActsKind::q8_0_x16)
    a.block_d.resize(elems / kQK8_0);
}

void prepare_acts(ActsKind kind, const std::int8_t* qx, const float* xd, std::int64_t t0,
                  std::int64_t t1, std::int64_t cols, VnniActs& a) {
  const std::int64_t e0 = t0 * cols, e1 = t1 * cols;  // elements of the range
  switch (kind) {
    case ActsKind::q4_k:
    case ActsKind::q4k_x16:
      return prepare_q4k(qx, xd, e0 / kQK_K, e1 / kQK_K, kind == ActsKind::q4_k, a);
    case ActsKind::q4_0:
      prepare_q4_0(qx, t0, t1, cols, a);  // the quants reordered
      break;
    default:
      std::copy(qx + e0, qx + e1, a.q.data() + e0);
  }
  const Corrections c = corrections_of(kind);
  group_corrections(a.q.data() + e0, e1 - e0, c.group, c.offset, a.corr.data() + e0 / c.group);
  if (kind == ActsKind::q6_k) {
    for (std::int64_t l = e0 / 4; l < e1 / 4; ++l)
      a.lane_d[static_cast<std::size_t>(l)] = xd[l / 8];
  } else if (kind != ActsKind::q8_0 && kind != ActsKind::q4_0) {  // the x16 kinds
    std::copy(xd + e0 / kQK8_0, xd + e1 / kQK8_0, a.block_d.data() + e0 / kQK8_0);
  }
}

// Per super-block: the 8 scales and mins decoded (the 6-bit unpacking of ggml's AVX2 kernel,
// four 32-bit words at a time) and converted in one vector, [d * sc | dmin * m], which one
// multiply by the activations' block_d turns into [d * sc * xd | dmin * m * d_x * sum(x)]: the
// blocks' scales in the low lanes and their min terms, summed apart, in the high ones. Then each
// 64 bytes of qs (chunks c and c + 1, c = 0 or 2) give 128 weights: the low nibbles groups 2c and
// 2c + 2, the high nibbles 2c + 1 and 2c + 3, which the reordered activations (prepare_q4k) hold
// at 64-byte offsets 0, 64 (c = 0) and 128, 192 (c = 2). Each vpdpbusd leaves group pair (a, b)
// in lanes 0-7 and 8-15; the lanes take scale a or b by one permute.
template <int T>
WEIR_VNNI void dot_q4k_vnni(const BlockQ4_K* w, std::int64_t sblocks, const VnniActs& a,
                            std::int64_t t0, float* out, std::int64_t out_stride) {
  const std::int64_t cols = sblocks * kQK_K;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i pair[4] = {_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
                           _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1),
                           _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4),
                           _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5)};
  const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const std::int8_t* q = a.q.data() + t0 * cols;
  const float* block_d = a.block_d.data() + t0 * (cols / 16);
  __m512 acc[T][2], mins[T];
  for (int k = 0; k < T; ++k) acc[k][0] = acc[k][1] = mins[k] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const BlockQ4_K& b = w[i];
    prefetch_ahead<3>(&b);  // 144 bytes
    std::uint32_t u[4], dd;
    std::memcpy(u, b.scales, 12);
    std::memcpy(&dd, &b.d, 4);  // d, dmin
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const std::uint32_t mins_lo = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3f;
    // u[0..1]: the 8 scales, u[2..3]: the 8 mins, a byte each.
    const __m512 d = _mm512_permutexvar_ps(
        halves, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)))));
    const __m512 scm = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(u)))),
                                     d);
    const __m512i lo = _mm512_loadu_si512(b.qs), hi = _mm512_loadu_si512(b.qs + 64);
    const __m512i v[4] = {_mm512_and_si512(lo, m4), _mm512_and_si512(_mm512_srli_epi16(lo, 4), m4),
                          _mm512_and_si512(hi, m4), _mm512_and_si512(_mm512_srli_epi16(hi, 4), m4)};
    for (int k = 0; k < T; ++k) {
      const __m512 p = _mm512_mul_ps(scm, _mm512_loadu_ps(block_d + k * (cols / 16) + 16 * i));
      mins[k] = _mm512_add_ps(mins[k], p);  // the high half: the min terms
      const std::int8_t* x = q + k * cols + i * kQK_K;
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512i s =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[j], _mm512_loadu_si512(x + 64 * j));
        acc[k][j & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(pair[j], p),
                                        acc[k][j & 1]);
      }
    }
  }
  for (int k = 0; k < T; ++k) {
    const __m256 m = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(mins[k]), 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    out[k * out_stride] =
        _mm512_reduce_add_ps(_mm512_add_ps(acc[k][0], acc[k][1])) - _mm_cvtss_f32(s);
  }
}

// 16 rows a vector, a 32-bit lane a row (the layout: repack.hpp). Per super-block, the 16 rows'
// 6-bit scales and mins are unpacked in their lanes (the scalar unpacking of dot_q4k_vnni, 16
// rows at once) and each block's byte moved to the bottom of its lane by one vpshufb. Each
// 64-byte vector of qs holds 4 bytes of every row: its low nibbles are 4 weights of block 2c,
// its high nibbles the same 4 of block 2c + 1, so one vpdpbusd against the 4 activation quants
// broadcast adds 4 products to each row's dot. The high nibbles are masked, not shifted: their
// dot comes out 16 times larger, which the block's scale takes back exactly (d / 16). After 8
// vectors a block's 16 integer dots are whole, and one multiply-add per token applies
// d * scale * d_x. Passes of C chunks of 64 weights keep 2 C T G integer dots in flight.
// G groups at once (2 but for a range's odd last group and for batches of 8 tokens or fewer:
// kernels.cpp), so that each activation broadcast (a 512-bit load slot) feeds G vpdpbusd, as in
// dot_q8_0_x16_vnni. The min terms (one multiply-add per block and token, d_min * min * the
// block's activation sum) take a pass of their own after the dots, in the same block order, so
// that the dots' pass has the registers for two groups: every row's and token's float operations
// are those of G = 1, in the same order, and the results do not depend on G. Every result is one
// 16-row store per token.
// What bounds it (Zen 5, one core, a hot pair of groups, T = 4): the two pipes that vpdpbusd
// shares with float multiplies and FMAs. Per block of 32 weights, 16 rows and 4 tokens: 32
// vpdpbusd, and 14 float operations (d * scale and d_min * min, then per token a multiply by d_x
// and two multiply-adds), so at most 32 / 46 = 0.70 of the int8 peak for any kernel that does
// these float operations; measured 0.60 (G = 1: 0.50; the dots alone 0.86).
template <int T, int G>
WEIR_VNNI void dot_q4k_x16_vnni(const std::byte* w, std::int64_t sblocks, std::size_t group_bytes,
                                const VnniActs& a, std::int64_t t0, float* out,
                                std::int64_t out_stride, X16Ahead ahead) {
  static_assert(G == 1 || G == 2);
  constexpr int C = T == 1 ? 4 : T == 2 ? 2 : 1;
  const std::int64_t cols = sblocks * kQK_K;
  const std::int8_t* q = a.q.data() + t0 * cols;
  const float* block_d = a.block_d.data() + t0 * (cols / 16);
  const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8(static_cast<char>(0xF0));
  const __m512i m3f = _mm512_set1_epi32(0x3f3f3f3f), m0f = _mm512_set1_epi32(0x0f0f0f0f),
                m03 = _mm512_set1_epi32(0x03030303);
  __m512i byte_k[4];  // vpshufb: byte k of each 32-bit lane to its bottom, the rest zero
  for (int k = 0; k < 4; ++k) {
    const auto at = [k](int lane) { return static_cast<int>(0x80808000u | (4 * lane + k)); };
    byte_k[k] = _mm512_set4_epi32(at(3), at(2), at(1), at(0));  // per 128-bit lane
  }
  __m512 acc[G][T];
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < T; ++k) acc[g][k] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const std::byte* c = w + static_cast<std::size_t>(i) * kX16Chunk;
    for (std::int64_t l = i * ahead.lines_per_block;
         l < std::min(ahead.lines, (i + 1) * ahead.lines_per_block); ++l)
      _mm_prefetch(reinterpret_cast<const char*>(ahead.p) + 64 * l, _MM_HINT_T1);
    __m512 d[G], d16[G];
    __m512i sc[G][2];  // a byte each: the scales of blocks 0-3, 4-7 (scale_min_k4)
    for (int g = 0; g < G; ++g) {
      const std::byte* cg = c + g * group_bytes;
      d[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cg + kX16D)));
      d16[g] = _mm512_mul_ps(d[g], _mm512_set1_ps(1.0f / 16));
      const __m512i w0 = _mm512_loadu_si512(cg + kX16Scales),
                    w2 = _mm512_loadu_si512(cg + kX16Scales + 128);
      sc[g][0] = _mm512_and_si512(w0, m3f);
      sc[g][1] =
          _mm512_or_si512(_mm512_and_si512(w2, m0f),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), m03), 4));
    }
    const std::int8_t* x = q + i * kQK_K;
    const float* bd = block_d + 16 * i;
#pragma GCC unroll 4
    for (int c0 = 0; c0 < 4; c0 += C) {
      __m512i dot[G][T][2 * C];
      for (int g = 0; g < G; ++g)
        for (int k = 0; k < T; ++k)
          for (int j = 0; j < 2 * C; ++j) dot[g][k][j] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
#pragma GCC unroll 4
        for (int cc = 0; cc < C; ++cc) {
          const int ch = c0 + cc;
          __m512i lo[G], hi[G];
          for (int g = 0; g < G; ++g) {
            const __m512i qs =
                _mm512_loadu_si512(c + g * group_bytes + kX16Qs + 64 * x16_qs_slot(8 * ch + v));
            lo[g] = _mm512_and_si512(qs, lo4);
            hi[g] = _mm512_and_si512(qs, hi4);
          }
          for (int k = 0; k < T; ++k) {
            std::int32_t xl, xh;
            std::memcpy(&xl, x + k * cols + 64 * ch + 4 * v, 4);
            std::memcpy(&xh, x + k * cols + 64 * ch + 32 + 4 * v, 4);
            const __m512i bl = _mm512_set1_epi32(xl), bh = _mm512_set1_epi32(xh);
            for (int g = 0; g < G; ++g) {
              dot[g][k][2 * cc] = _mm512_dpbusd_epi32(dot[g][k][2 * cc], lo[g], bl);
              dot[g][k][2 * cc + 1] = _mm512_dpbusd_epi32(dot[g][k][2 * cc + 1], hi[g], bh);
            }
          }
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < 2 * C; ++j) {
        const int b = 2 * c0 + j;  // the block
        for (int g = 0; g < G; ++g) {
          const __m512 s =
              _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_shuffle_epi8(sc[g][b / 4], byte_k[b % 4])),
                            b % 2 ? d16[g] : d[g]);
          for (int k = 0; k < T; ++k) {
            acc[g][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][k][j]),
                                        _mm512_mul_ps(s, _mm512_set1_ps(bd[k * (cols / 16) + b])),
                                        acc[g][k]);
          }
        }
      }
    }
  }
  // The min terms, block by block as the dots were.
  __m512 mins[G][T];
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < T; ++k) mins[g][k] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const float* bd = block_d + 16 * i;
    for (int g = 0; g < G; ++g) {
      const std::byte* c = w + g * group_bytes + static_cast<std::size_t>(i) * kX16Chunk;
      const __m512 dmin =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + kX16Dmin)));
      const __m512i w1 = _mm512_loadu_si512(c + kX16Scales + 64),
                    w2 = _mm512_loadu_si512(c + kX16Scales + 128);
      // A byte each: the mins of blocks 0-3, 4-7 (scale_min_k4).
      const __m512i mn[2] = {
          _mm512_and_si512(w1, m3f),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), m0f),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), m03), 4))};
#pragma GCC unroll 8
      for (int b = 0; b < 8; ++b) {
        const __m512 m =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_shuffle_epi8(mn[b / 4], byte_k[b % 4])), dmin);
        for (int k = 0; k < T; ++k)
          mins[g][k] = _mm512_fmadd_ps(m, _mm512_set1_ps(bd[k * (cols / 16) + 8 + b]), mins[g][k]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < T; ++k)
      _mm512_storeu_ps(out + k * out_stride + kX16Rows * g, _mm512_sub_ps(acc[g][k], mins[g][k]));
}

// Tokens t0 on of an x16 kernel's activations (ActsKind::q6k_x16, q4_0_x16, q8_0_x16): the
// quants, the corrections of each `group` quants, and the scales of each block of 32.
struct X16Tokens {
  const std::int8_t* q;
  const std::int32_t* corr;
  const float* xd;
};
inline X16Tokens x16_tokens(const VnniActs& a, std::int64_t t0, std::int64_t cols,
                            std::int64_t group) {
  return {a.q.data() + t0 * cols, a.corr.data() + t0 * (cols / group),
          a.block_d.data() + t0 * (cols / kQK8_0)};
}

// Q6_K, 16 rows a vector (the layout: repack.hpp), like dot_q4k_x16_vnni. Per half h of a
// super-block and k < 8, three vectors hold 4 bytes of ql (weights 4k .. 4k + 3 low, + 64 high),
// 4 of ql 32 on (+ 32, + 96) and 4 of qh (their top 2 bits, 2 a weight), from which 4 vectors of
// 6-bit quants are made: weights 128 h + 32 m + 4 k + 0..3 for m < 4, that is group
// 8 h + 2 m + k / 4. So a group's integer dot is 4 vpdpbusd (k in a quartet), started from the
// group's correction -32 * (sum of its activation quants) so the offset 32 cancels; then one
// multiply-add per token applies d * scale * d_x. The signed 8-bit scales come to the top byte
// of each lane by one vpshufb and down, sign-extended, by a shift.
// G groups at once (2 but for a range's odd last group, for batches of 8 tokens or fewer and for
// prompts: kernels.cpp), so that each activation broadcast feeds G vpdpbusd, as in
// dot_q8_0_x16_vnni. The 4 G T integer dots of a half and quartet do not fit in the 32 registers
// beside the accumulators when G T > 4: then each m takes a pass of its own, which reads its two
// of the three vectors again. The chunk's address is hidden from the compiler in each pass
// (an empty asm), or it keeps the first pass's vectors for the others and spills them (one core,
// 32 tokens, the 1B file's ffn_down: 308 Gop/s with two passes of two m, 316-364 with four of
// one). Every row's and token's float operations are those of G = 1, in the same order, and the
// results do not depend on G.
template <int T, int G>
WEIR_VNNI void dot_q6k_x16_vnni(const std::byte* w, std::int64_t sblocks, std::size_t group_bytes,
                                const VnniActs& a, std::int64_t t0, float* out,
                                std::int64_t out_stride, X16Ahead ahead) {
  static_assert(G == 1 || G == 2);
  constexpr int M = G * T > 4 ? 1 : 4;  // the m of a pass
  const std::int64_t cols = sblocks * kQK_K;
  const auto [q, corr, xd] = x16_tokens(a, t0, cols, 16);
  const __m512i lo4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  __m512i top_k[4];  // vpshufb: byte k of each 32-bit lane to its top, the rest zero
  for (int k = 0; k < 4; ++k) {
    const auto at = [k](int lane) {
      return static_cast<int>((static_cast<unsigned>(4 * lane + k) << 24) | 0x808080u);
    };
    top_k[k] = _mm512_set4_epi32(at(3), at(2), at(1), at(0));  // per 128-bit lane
  }
  __m512 acc[G][T];
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < T; ++k) acc[g][k] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const std::byte* c = w + static_cast<std::size_t>(i) * kX16ChunkQ6;
    for (std::int64_t l = i * ahead.lines_per_block;
         l < std::min(ahead.lines, (i + 1) * ahead.lines_per_block); ++l)
      _mm_prefetch(reinterpret_cast<const char*>(ahead.p) + 64 * l, _MM_HINT_T1);
    __m512 d[G];
    for (int g = 0; g < G; ++g)
      d[g] = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + g * group_bytes)));
    const std::int8_t* x = q + i * kQK_K;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int kq = 0; kq < 2; ++kq) {
#pragma GCC unroll 2
        for (int m0 = 0; m0 < 4; m0 += M) {
          __m512i dot[G][T][M];  // groups 8h + 2m + kq, m0 <= m < m0 + M
          const std::byte* cp = c;
          if constexpr (M < 4) asm("" : "+r"(cp));
          for (int k = 0; k < T; ++k)
            for (int mm = 0; mm < M; ++mm) {
              const __m512i c0 =
                  _mm512_set1_epi32(corr[k * (cols / 16) + i * 16 + 8 * h + 2 * (m0 + mm) + kq]);
              for (int g = 0; g < G; ++g) dot[g][k][mm] = c0;
            }
#pragma GCC unroll 4
          for (int kk = 0; kk < 4; ++kk) {
            const int kw = 4 * kq + kk;
            __m512i quants[G][M];
            for (int g = 0; g < G; ++g) {
              const std::byte* v = cp + g * group_bytes + kX16BitsQ6 + 192 * (8 * h + kw);
              const __m512i l0 = _mm512_loadu_si512(v), l1 = _mm512_loadu_si512(v + 64),
                            hb = _mm512_loadu_si512(v + 128);
              // (low nibble) | (2 bits of qh at bits 4-5): ternary logic 0xEA is (a & b) | c.
              for (int mm = 0; mm < M; ++mm) {
                switch (m0 + mm) {
                  case 0:
                    quants[g][mm] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(hb, 4), m30,
                                                              _mm512_and_si512(l0, lo4), 0xEA);
                    break;
                  case 1:
                    quants[g][mm] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(hb, 2), m30,
                                                              _mm512_and_si512(l1, lo4), 0xEA);
                    break;
                  case 2:
                    quants[g][mm] = _mm512_ternarylogic_epi32(
                        hb, m30, _mm512_and_si512(_mm512_srli_epi16(l0, 4), lo4), 0xEA);
                    break;
                  default:
                    quants[g][mm] = _mm512_ternarylogic_epi32(
                        _mm512_srli_epi16(hb, 2), m30,
                        _mm512_and_si512(_mm512_srli_epi16(l1, 4), lo4), 0xEA);
                    break;
                }
              }
            }
            for (int k = 0; k < T; ++k) {
              const std::int8_t* xk = x + k * cols + 128 * h + 4 * kw;
              for (int mm = 0; mm < M; ++mm) {
                std::int32_t xm;
                std::memcpy(&xm, xk + 32 * (m0 + mm), 4);
                const __m512i xb = _mm512_set1_epi32(xm);
                for (int g = 0; g < G; ++g)
                  dot[g][k][mm] = _mm512_dpbusd_epi32(dot[g][k][mm], quants[g][mm], xb);
              }
            }
          }
#pragma GCC unroll 4
          for (int mm = 0; mm < M; ++mm) {
            const int b = 8 * h + 2 * (m0 + mm) + kq;  // the group of 16, and its scale's place
            for (int g = 0; g < G; ++g) {
              const __m512i sc = _mm512_srai_epi32(
                  _mm512_shuffle_epi8(
                      _mm512_loadu_si512(c + g * group_bytes + kX16ScalesQ6 + 64 * (b / 4)),
                      top_k[b % 4]),
                  24);
              const __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), d[g]);
              for (int k = 0; k < T; ++k) {
                acc[g][k] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(dot[g][k][mm]),
                    _mm512_mul_ps(s, _mm512_set1_ps(xd[k * (cols / 32) + 8 * i + b / 2])),
                    acc[g][k]);
              }
            }
          }
        }
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < T; ++k) _mm512_storeu_ps(out + k * out_stride + kX16Rows * g, acc[g][k]);
}

// Q4_0, 16 rows a vector (the layout: repack.hpp), like dot_q4k_x16_vnni. A chunk is two blocks
// of 16 rows: per block, 4 vectors of 4 qs bytes a row, whose low nibbles are weights 4j .. 4j + 3
// and high nibbles 16 + 4j ..; the low nibbles' dots start from the block's correction
// -8 * (sum of its activation quants), the high ones' from zero (two chains, not one of 8), and
// one multiply-add per token applies d * d_x.
template <int T>
WEIR_VNNI void dot_q4_0_x16_vnni(const std::byte* w, std::int64_t pairs, const VnniActs& a,
                                 std::int64_t t0, float* out, std::int64_t out_stride,
                                 bool prefetch) {
  const std::int64_t cols = pairs * 64, blocks = cols / kQK4_0;
  const auto [q, corr, xd] = x16_tokens(a, t0, cols, kQK4_0);
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T];
  for (int k = 0; k < T; ++k) acc[k] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < pairs; ++i) {
    const std::byte* c = w + static_cast<std::size_t>(i) * kX16ChunkQ4_0;
    if (prefetch) prefetch_ahead<kX16ChunkQ4_0 / 64, kAheadX16>(c);
    __m512i dot[T][2][2];  // token, block, low / high nibbles
    for (int k = 0; k < T; ++k) {
      for (int b = 0; b < 2; ++b) {
        dot[k][b][0] = _mm512_set1_epi32(corr[k * blocks + 2 * i + b]);
        dot[k][b][1] = _mm512_setzero_si512();
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const int b = v / 4, j = v % 4;
      const __m512i qs = _mm512_loadu_si512(c + kX16QsQ4_0 + 64 * v);
      const __m512i lo = _mm512_and_si512(qs, lo4),
                    hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), lo4);
      for (int k = 0; k < T; ++k) {
        const std::int8_t* x = q + k * cols + 64 * i + 32 * b + 4 * j;
        std::int32_t xl, xh;
        std::memcpy(&xl, x, 4);
        std::memcpy(&xh, x + 16, 4);
        dot[k][b][0] = _mm512_dpbusd_epi32(dot[k][b][0], lo, _mm512_set1_epi32(xl));
        dot[k][b][1] = _mm512_dpbusd_epi32(dot[k][b][1], hi, _mm512_set1_epi32(xh));
      }
    }
    for (int b = 0; b < 2; ++b) {
      const __m512 d =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * b)));
      for (int k = 0; k < T; ++k) {
        acc[k] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot[k][b][0], dot[k][b][1])),
                            _mm512_mul_ps(d, _mm512_set1_ps(xd[k * blocks + 2 * i + b])), acc[k]);
      }
    }
  }
  for (int k = 0; k < T; ++k) _mm512_storeu_ps(out + k * out_stride, acc[k]);
}

// Q8_0, 16 rows a vector (the layout: repack.hpp), like dot_q4k_x16_vnni. A chunk is one block of
// 16 rows: 8 vectors of 4 quants a row, stored + 128 (unsigned), so vpdpbusd takes them as they
// are against the token's 4 activation quants (broadcast, signed); each (group, token) dot starts
// from the block's correction -128 * (sum of its activation quants), one chain of 8, and one
// multiply-add applies d * d_x. G groups at once (2 but for a range's odd last group, and for
// batches of 8 tokens or fewer: kernels.cpp) so that each broadcast feeds G vpdpbusd. On Zen 5 a
// broadcast from memory takes one of the two 512-bit load slots a cycle: with one group the 8 T
// broadcasts, 8 weight loads and 2 T scales of a block were the bound (T = 4: 27 cycles a block
// against 16 of vpdpbusd at 2 a cycle, 0.59 of the peak). With two, the bound is the two pipes
// that vpdpbusd shares with the float multiplies: 8 G T vpdpbusd and 2 G T multiplies a block,
// at most 0.8 of the peak (T = 4: 41-43 cycles against 40; 0.75-0.78). The float operations of
// each row and token are the same as with G = 1, in the same order: results do not depend on G.
// A block of 16 rows is 544 bytes, against 16 separate rows' worth of scale work in the row
// kernel (dot_blocks_vnni) or the GEMM's per-tile sums and transposes (gemm_q8_vnni).
template <int T, int G>
WEIR_VNNI void dot_q8_0_x16_vnni(const std::byte* w, std::int64_t blocks, std::size_t group_bytes,
                                 const VnniActs& a, std::int64_t t0, float* out,
                                 std::int64_t out_stride, X16Ahead ahead) {
  static_assert(G == 1 || G == 2);
  const std::int64_t cols = blocks * kQK8_0;
  const auto [q, corr, xd] = x16_tokens(a, t0, cols, kQK8_0);
  __m512 acc[G][T];
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < T; ++k) acc[g][k] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::byte* c = w + static_cast<std::size_t>(i) * kX16ChunkQ8_0;
    for (std::int64_t l = i * ahead.lines_per_block;
         l < std::min(ahead.lines, (i + 1) * ahead.lines_per_block); ++l)
      _mm_prefetch(reinterpret_cast<const char*>(ahead.p) + 64 * l, _MM_HINT_T1);
    __m512i dot[G][T];
    for (int k = 0; k < T; ++k) {
      const __m512i c0 = _mm512_set1_epi32(corr[k * blocks + i]);
      for (int g = 0; g < G; ++g) dot[g][k] = c0;
    }
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      __m512i qs[G];
      for (int g = 0; g < G; ++g)
        qs[g] = _mm512_loadu_si512(c + g * group_bytes + kX16QsQ8_0 + 64 * v);
#pragma GCC unroll 4
      for (int k = 0; k < T; ++k) {
        std::int32_t x4;
        std::memcpy(&x4, q + k * cols + kQK8_0 * i + 4 * v, 4);
        const __m512i xb = _mm512_set1_epi32(x4);
        for (int g = 0; g < G; ++g) dot[g][k] = _mm512_dpbusd_epi32(dot[g][k], qs[g], xb);
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m512 d = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + g * group_bytes)));
#pragma GCC unroll 4
      for (int k = 0; k < T; ++k) {
        acc[g][k] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][k]),
                            _mm512_mul_ps(d, _mm512_set1_ps(xd[k * blocks + i])), acc[g][k]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < T; ++k) _mm512_storeu_ps(out + k * out_stride + kX16Rows * g, acc[g][k]);
}

// Per 128-weight half of a super-block: 64 bytes of ql and the 32 of qh (twice, in both 256-bit
// halves) give two vectors of 64 unsigned 6-bit quants in weight order (see BlockQ6_K): the low
// or high nibbles of ql, and qh's bits 2s, 2s + 1 moved to bits 4-5 by a per-16-bit-lane shift
// (s = 0 for the first 32 bytes, 1 for the next, then 2 and 3). vpdpbusd starts from the lanes'
// corrections (-32 * the activations' sum) so the offset 32 cancels; 4 lanes make a 16-group,
// whose scale comes by a permute of the super-block's 16 scales, times the lanes' activation scale.
template <int T>
WEIR_VNNI void dot_q6k_vnni(const BlockQ6_K* w, std::int64_t sblocks, const VnniActs& a,
                            std::int64_t t0, float* out, std::int64_t out_stride) {
  const std::int64_t cols = sblocks * kQK_K, lanes = cols / 4;
  const std::int8_t* q = a.q.data() + t0 * cols;
  const std::int32_t* corr = a.corr.data() + t0 * lanes;
  const float* lane_d = a.lane_d.data() + t0 * lanes;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  // 16-bit lanes 0-15 (bytes 0-31) and 16-31.
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  __m512i group[4];  // lane l of vector j: scale 4j + l / 4
  for (int j = 0; j < 4; ++j)
    group[j] = _mm512_set_epi32(4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 2, 4 * j + 2,
                                4 * j + 2, 4 * j + 2, 4 * j + 1, 4 * j + 1, 4 * j + 1, 4 * j + 1,
                                4 * j, 4 * j, 4 * j, 4 * j);
  __m512 acc[T][2];
  for (int k = 0; k < T; ++k) acc[k][0] = acc[k][1] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const BlockQ6_K& b = w[i];
    prefetch_ahead<4>(&b);  // 210 bytes
    const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                        reinterpret_cast<const __m128i*>(b.scales)))),
                                    _mm512_set1_ps(_cvtsh_ss(b.d)));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(b.ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h)));
      const __m512i v[2] = {
          _mm512_ternarylogic_epi32(m4, l, _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30), 0xEA),
          _mm512_ternarylogic_epi32(m4, _mm512_srli_epi16(l, 4),
                                    _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30), 0xEA)};
#pragma GCC unroll 2
      for (int jj = 0; jj < 2; ++jj) {
        const int j = 2 * h + jj;
        const __m512 s = _mm512_permutexvar_ps(group[j], sc);
        const std::int64_t lane = i * (kQK_K / 4) + 16 * j;
        for (int k = 0; k < T; ++k) {
          const __m512i d = _mm512_dpbusd_epi32(_mm512_loadu_si512(corr + k * lanes + lane), v[jj],
                                                _mm512_loadu_si512(q + k * cols + 4 * lane));
          acc[k][jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                       _mm512_mul_ps(s, _mm512_loadu_ps(lane_d + k * lanes + lane)),
                                       acc[k][jj]);
        }
      }
    }
  }
  for (int k = 0; k < T; ++k)
    out[k * out_stride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[k][0], acc[k][1]));
}

// Q8_0 and Q4_0 rows, 8 blocks (256 weights) at a time: the 8 fp16 scales gathered and converted
// together, times the 8 activation scales; then per 64 weights one vpdpbusd from the lanes'
// corrections and a permute of those 8 products for the lanes. Q8_0: the signed quants made
// unsigned (+128 by flipping the top bit; the correction is -128 * the activations' sum), two
// blocks a vector. Q4_0: the nibbles of 4 blocks in one vector (a block per 128-bit lane), the
// low nibbles for the first 16 weights of each block and the high ones for the last 16, as
// prepare_q4_0 orders the activations; the offset 8 is the correction's. The blocks past the
// last multiple of 8 go one at a time in 256-bit vectors, in plain order.
template <class Block, int T>
WEIR_VNNI void dot_blocks_vnni(const Block* w, std::int64_t blocks, const VnniActs& a,
                               std::int64_t t0, const float* xd, float* out,
                               std::int64_t out_stride) {
  constexpr bool q8 = std::is_same_v<Block, BlockQ8_0>;
  const std::int64_t cols = blocks * 32, lanes = cols / 4, grouped = blocks / 8 * 8;
  const std::int8_t* q = a.q.data() + t0 * cols;
  const std::int32_t* corr = a.corr.data() + t0 * lanes;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80)), m4 = _mm512_set1_epi8(0x0F);
  // Lane l of vector j takes the scale of block: Q8_0 2j + l / 8; Q4_0 4 * (j / 2) + (l % 16) / 4.
  __m512i block_of[4];
  for (int j = 0; j < 4; ++j) {
    alignas(64) std::int32_t idx[16];
    for (int l = 0; l < 16; ++l) idx[l] = q8 ? 2 * j + l / 8 : 4 * (j / 2) + l / 4;
    block_of[j] = _mm512_load_si512(idx);
  }
  __m512 acc[T][2];
  for (int k = 0; k < T; ++k) acc[k][0] = acc[k][1] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < grouped; b += 8) {
    const Block* g = w + b;
    prefetch_ahead<q8 ? 5 : 3>(g);  // 272 or 144 bytes
    const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(
        static_cast<short>(g[0].d), static_cast<short>(g[1].d), static_cast<short>(g[2].d),
        static_cast<short>(g[3].d), static_cast<short>(g[4].d), static_cast<short>(g[5].d),
        static_cast<short>(g[6].d), static_cast<short>(g[7].d)));
    __m512i v[4];
    if constexpr (q8) {
      for (int j = 0; j < 4; ++j) {
        const __m512i both = _mm512_inserti64x4(
            _mm512_castsi256_si512(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g[2 * j].qs))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g[2 * j + 1].qs)), 1);
        v[j] = _mm512_xor_si512(both, bias);
      }
    } else {
      for (int h = 0; h < 2; ++h) {
        const Block* f = g + 4 * h;
        __m512i raw =
            _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f[0].qs)));
        raw =
            _mm512_inserti32x4(raw, _mm_loadu_si128(reinterpret_cast<const __m128i*>(f[1].qs)), 1);
        raw =
            _mm512_inserti32x4(raw, _mm_loadu_si128(reinterpret_cast<const __m128i*>(f[2].qs)), 2);
        raw =
            _mm512_inserti32x4(raw, _mm_loadu_si128(reinterpret_cast<const __m128i*>(f[3].qs)), 3);
        v[2 * h] = _mm512_and_si512(raw, m4);
        v[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      }
    }
    for (int k = 0; k < T; ++k) {
      const __m512 p =
          _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_loadu_ps(xd + k * blocks + b)));
      const std::int8_t* x = q + k * cols + 32 * b;
      const std::int32_t* c = corr + k * lanes + 8 * b;
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_loadu_si512(c + 16 * j), v[j],
                                              _mm512_loadu_si512(x + 64 * j));
        acc[k][j & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                        _mm512_permutexvar_ps(block_of[j], p), acc[k][j & 1]);
      }
    }
  }
  __m256 tail[T];
  for (int k = 0; k < T; ++k) tail[k] = _mm256_setzero_ps();
  for (std::int64_t b = grouped; b < blocks; ++b) {
    __m256i v;
    if constexpr (q8) {
      v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs)),
                           _mm512_castsi512_si256(bias));
    } else {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
      const __m128i m = _mm512_castsi512_si128(m4);
      v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
    }
    const float dw = _cvtsh_ss(w[b].d);
    for (int k = 0; k < T; ++k) {
      const __m256i d = _mm256_dpbusd_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + k * lanes + 8 * b)), v,
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + k * cols + 32 * b)));
      tail[k] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(dw * xd[k * blocks + b]), tail[k]);
    }
  }
  for (int k = 0; k < T; ++k) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(acc[k][0], acc[k][1]), _mm512_castps256_ps512(tail[k]));
    out[k * out_stride] = _mm512_reduce_add_ps(sum);
  }
}

#define WEIR_DOT_VNNI(T)                                                                         \
  template void dot_q4k_vnni<T>(const BlockQ4_K*, std::int64_t, const VnniActs&, std::int64_t,   \
                                float*, std::int64_t);                                           \
  template void dot_q4k_x16_vnni<T, 1>(const std::byte*, std::int64_t, std::size_t,              \
                                       const VnniActs&, std::int64_t, float*, std::int64_t,      \
                                       X16Ahead);                                                \
  template void dot_q4k_x16_vnni<T, 2>(const std::byte*, std::int64_t, std::size_t,              \
                                       const VnniActs&, std::int64_t, float*, std::int64_t,      \
                                       X16Ahead);                                                \
  template void dot_q6k_x16_vnni<T, 1>(const std::byte*, std::int64_t, std::size_t,              \
                                       const VnniActs&, std::int64_t, float*, std::int64_t,      \
                                       X16Ahead);                                                \
  template void dot_q6k_x16_vnni<T, 2>(const std::byte*, std::int64_t, std::size_t,              \
                                       const VnniActs&, std::int64_t, float*, std::int64_t,      \
                                       X16Ahead);                                                \
  template void dot_q4_0_x16_vnni<T>(const std::byte*, std::int64_t, const VnniActs&,            \
                                     std::int64_t, float*, std::int64_t, bool);                  \
  template void dot_q8_0_x16_vnni<T, 1>(const std::byte*, std::int64_t, std::size_t,             \
                                        const VnniActs&, std::int64_t, float*, std::int64_t,     \
                                        X16Ahead);                                               \
  template void dot_q8_0_x16_vnni<T, 2>(const std::byte*, std::int64_t, std::size_t,             \
                                        const VnniActs&, std::int64_t, float*, std::int64_t,     \
                                        X16Ahead);                                               \
  template void dot_q6k_vnni<T>(const BlockQ6_K*, std::int64_t, const VnniActs&, std::int64_t,   \
                                float*, std::int64_t);                                           \
  template void dot_blocks_vnni<BlockQ8_0, T>(const BlockQ8_0*, std::int64_t, const VnniActs&,   \
                                              std::int64_t, const float*, float*, std::int64_t); \
  template void dot_blocks_vnni<BlockQ4_0, T>(const BlockQ4_0*, std::int64_t, const VnniActs&,   \
                                              std::int64_t, const float*, float*, std::int64_t);
WEIR_DOT_VNNI(1)
WEIR_DOT_VNNI(2)
WEIR_DOT_VNNI(3)
WEIR_DOT_VNNI(4)
#undef WEIR_DOT_VNNI

WEIR_AVX512_END

}  // namespace weir::inference::kernels::detail
#endif
