// Block layouts and scalar conversions for the weight types weir reads (after ggml-common.h).
// Private to inference/; the layouts are pinned with static_assert.
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

}  // namespace weir::inference
