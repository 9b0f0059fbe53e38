// Per-ISA builds of hot loops: GCC compiles a function marked WEIR_CLONES once for AVX-512,
// once for AVX2+FMA and once for baseline x86-64, and picks one at load time by the CPU.
// Sanitizer builds use the baseline only (ifunc resolvers run before ASan is ready).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define WEIR_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define WEIR_CLONES
#endif

#include <cstdint>
#include <cstring>

// 16-float vectors (GCC vector extensions) for loops written once for every clone: inlined
// (always_inline) into a WEIR_CLONES function, they compile to that clone's ISA, one zmm on
// AVX-512, two ymm on AVX2. Vectors never cross a call, so GCC's note that the ABI of 64-byte
// vectors depends on AVX-512 is moot; it is off for every file that includes this one.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace weir::inference::simd {

typedef float v16 __attribute__((vector_size(64), aligned(4)));  // unaligned loads allowed
typedef std::int32_t vi16 __attribute__((vector_size(64), aligned(4)));

[[gnu::always_inline]] inline v16 load16(const float* p) {
  return *reinterpret_cast<const v16*>(p);
}

[[gnu::always_inline]] inline void store16(float* p, const v16& v) {
  *reinterpret_cast<v16*>(p) = v;
}

[[gnu::always_inline]] inline float sum16(const v16& a) {
  float s[16];
  std::memcpy(s, &a, sizeof s);
  float h[8];
  for (int i = 0; i < 8; ++i) h[i] = s[i] + s[i + 8];
  for (int i = 0; i < 4; ++i) h[i] += h[i + 4];
  return (h[0] + h[2]) + (h[1] + h[3]);
}

// The 16 sums of a[0..15]: [sum16(a[0]), ..., sum16(a[15])] by a halving tree (45 vector
// operations instead of 16 scalar reductions).
[[gnu::always_inline]] inline v16 sum16x16(const v16 (&a)[16]) {
  v16 c[8], e[4], g[2];
  for (int i = 0; i < 8; ++i)  // [a0 | a1] halves: 8 lanes each
    c[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26,
                                   27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)  // 4 lanes each
    e[i] = __builtin_shufflevector(c[2 * i], c[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(c[2 * i], c[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)  // 2 lanes each
    g[i] = __builtin_shufflevector(e[2 * i], e[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(e[2 * i], e[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  return __builtin_shufflevector(g[0], g[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                 30) +
         __builtin_shufflevector(g[0], g[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                 31);
}

// exp(x), Cephes' expf polynomial: within 2 ulp of std::exp for x in [-87, 88]; x is clamped
// to that range (below, ~1e-38 where std::exp underflows to 0; above, ~1.7e38 where it
// overflows to infinity).
[[gnu::always_inline]] inline v16 exp16(const v16& in) {
  v16 x = in;
  x = x < -87.0f ? v16{} - 87.0f : x;
  x = x > 88.0f ? v16{} + 88.0f : x;
  v16 fx = x * 1.44269504088896341f + 0.5f;
  vi16 n = __builtin_convertvector(fx, vi16);  // truncated toward zero,
  n += __builtin_convertvector(__builtin_convertvector(n, v16) > fx, vi16);  // then floored
  fx = __builtin_convertvector(n, v16);
  x = x - fx * 0.693359375f - fx * -2.12194440e-4f;
  const v16 z = x * x;
  v16 y = v16{} + 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * z + x + 1.0f;
  const vi16 bits = (n + 127) << 23;
  v16 pow2;
  std::memcpy(&pow2, &bits, sizeof pow2);
  return y * pow2;
}

}  // namespace weir::inference::simd
