// Block layouts and scalar conversions for the weight types weir reads (after ggml-common.h
// and ggml-quants.c). Private to inference/; the layouts are pinned with static_assert.
//
// The 4- and 6-bit types are decoded by "unpacking" a block into int8 quants plus a float
// scale (and, for Q4_K, a float min) per group of weights: weight = scale * q - min. The
// dequantisation (model.cpp) and the portable integer kernels share these unpackers; the AVX2
// kernels (kernels.cpp) decode the same layouts in registers, and tests hold both to these.
#pragma once

#include <cstdint>
#include <cstring>

namespace weir::inference {

inline float fp16_to_fp32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) mant <<= 1, --exp;
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t fp32_to_fp16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000;
  const int exp = int((x >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff)
    return static_cast<std::uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    std::uint32_t half = mant >> shift;
    if ((mant >> (shift - 1)) & 1) ++half;  // round half up
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t h = sign | (std::uint32_t(exp) << 10) | (mant >> 13);
  if ((mant & 0x1fff) > 0x1000 || ((mant & 0x1fff) == 0x1000 && (h & 1))) ++h;  // nearest even
  return static_cast<std::uint16_t>(h);
}

inline float bf16_to_fp32(std::uint16_t h) {
  std::uint32_t bits = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  std::uint16_t d;         // fp16 scale
  std::int8_t qs[kQK8_0];  // quants
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block layout must match ggml");

// Q4_0: 32 weights, d * (nibble - 8). Byte j holds weight j (low nibble) and j + 16 (high).
constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  std::uint16_t d;              // fp16 scale
  std::uint8_t qs[kQK4_0 / 2];  // nibbles
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block layout must match ggml");

// K-quants: super-blocks of 256 weights.
constexpr int kQK_K = 256;

// Q4_K: 8 groups of 32; group g has a 6-bit scale sc and 6-bit min m (packed in `scales`,
// see scale_min_k4); weight = d * sc * nibble - dmin * m. Each 64-weight chunk c uses
// qs[32c .. 32c+32): low nibbles are group 2c, high nibbles group 2c + 1.
struct BlockQ4_K {
  std::uint16_t d;             // fp16 super-block scale of the scales
  std::uint16_t dmin;          // fp16 super-block scale of the mins
  std::uint8_t scales[12];     // 8 scales and 8 mins, 6 bits each
  std::uint8_t qs[kQK_K / 2];  // nibbles
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block layout must match ggml");

// Q6_K: 16 groups of 16; weight = d * scales[g] * (q - 32), q 6 bits: the low 4 in ql, the
// high 2 in qh. Per 128-weight half h (ql += 64h, qh += 32h), for l < 32:
// q[l] = ql[l] lo | qh[l] bits 0-1, q[l+32] = ql[l+32] lo | bits 2-3,
// q[l+64] = ql[l] hi | bits 4-5, q[l+96] = ql[l+32] hi | bits 6-7.
struct BlockQ6_K {
  std::uint8_t ql[kQK_K / 2];      // low 4 bits
  std::uint8_t qh[kQK_K / 4];      // high 2 bits
  std::int8_t scales[kQK_K / 16];  // 8-bit group scales
  std::uint16_t d;                 // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block layout must match ggml");

// Group j's 6-bit scale and min in a Q4_K `scales` array (ggml's get_scale_min_k4): groups
// 0-3 in the low 6 bits of bytes j and j + 4; groups 4-7 in byte j + 4's nibbles, with their
// top 2 bits in the high bits of bytes j - 4 and j.
inline void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& sc, std::uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Unpackers. q: the block's quants in weight order; scale/min: one per group. Written with
// 16-byte vectors (SSE2 and up) so they compile to a few shuffles per 32 weights in every
// build; `U8` loads and stores need no alignment.
typedef std::uint8_t U8 __attribute__((vector_size(16), aligned(1)));

inline U8 load16(const std::uint8_t* p) {
  U8 v;
  std::memcpy(&v, p, 16);
  return v;
}
inline void store16(std::int8_t* p, U8 v) {
  std::memcpy(p, &v, 16);
}

inline void unpack_q4_0(const BlockQ4_0& b, std::int8_t* q, float* scale) {  // q[32], scale[1]
  const U8 v = load16(b.qs);
  store16(q, (v & 0xF) - 8);  // two's complement: -8..7 as bytes
  store16(q + 16, (v >> 4) - 8);
  scale[0] = fp16_to_fp32(b.d);
}

// q[256] in 0..15, scale[8], min[8] (subtracted).
inline void unpack_q4_k(const BlockQ4_K& b, std::int8_t* q, float* scale, float* min) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int g = 0; g < 8; ++g) {
    std::uint8_t sc, m;
    scale_min_k4(g, b.scales, sc, m);
    scale[g] = d * sc;
    min[g] = dmin * m;
  }
  for (int c = 0; c < 4; ++c) {
    for (int h = 0; h < 32; h += 16) {
      const U8 v = load16(b.qs + 32 * c + h);
      store16(q + 64 * c + h, v & 0xF);
      store16(q + 64 * c + 32 + h, v >> 4);
    }
  }
}

// q[256] in -32..31, scale[16].
inline void unpack_q6_k(const BlockQ6_K& b, std::int8_t* q, float* scale) {
  const float d = fp16_to_fp32(b.d);
  for (int g = 0; g < 16; ++g) scale[g] = d * b.scales[g];
  for (int h = 0; h < 2; ++h) {
    std::int8_t* y = q + 128 * h;
    for (int l = 0; l < 32; l += 16) {
      const U8 lo = load16(b.ql + 64 * h + l), hi = load16(b.ql + 64 * h + 32 + l),
               qh = load16(b.qh + 32 * h + l);
      store16(y + l, ((lo & 0xF) | ((qh & 3) << 4)) - 32);
      store16(y + 32 + l, ((hi & 0xF) | (((qh >> 2) & 3) << 4)) - 32);
      store16(y + 64 + l, ((lo >> 4) | (((qh >> 4) & 3) << 4)) - 32);
      store16(y + 96 + l, ((hi >> 4) | (((qh >> 6) & 3) << 4)) - 32);
    }
  }
}

}  // namespace weir::inference
