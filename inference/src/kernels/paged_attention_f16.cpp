// F16 K/V: conversion on write, and attention's fast path built for AVX-512 + F16C (the F32
// path is built per ISA instead, in paged_attention.cpp; both share attend.hpp).
#include "kernels/paged_attention_f16.hpp"

#include <cstring>

#include "kernels/simd.hpp"
#include "kernels/x86.hpp"
#include "model/quant.hpp"

#ifdef WEIR_X86
#include <immintrin.h>

#define WEIR_F16_TARGET __attribute__((target("avx512f,f16c,fma")))

WEIR_AVX512_BEGIN

namespace weir::inference {
namespace {

bool have_avx512_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c") &&
           __builtin_cpu_supports("fma");
  }();
  return yes;
}

[[gnu::always_inline]] WEIR_F16_TARGET inline simd::v16 load_kv16(const std::uint16_t* p) {
  return reinterpret_cast<simd::v16>(
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}

WEIR_F16_TARGET void store_f16_avx512(const float* x, std::int64_t n, std::uint16_t* out) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}

}  // namespace
}  // namespace weir::inference

#define WEIR_ATTEND_TARGET WEIR_F16_TARGET
#include "kernels/attend.hpp"

namespace weir::inference {

void store_f16(const float* x, std::int64_t n, std::uint16_t* out) {
  if (have_avx512_f16c()) return store_f16_avx512(x, n, out);
  for (std::int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}

namespace {
WEIR_F16_TARGET void attention_f16_fast(const std::uint16_t* k_plane, const std::uint16_t* v_plane,
                                        const KvLayout& L, const AttentionBatch& batch,
                                        const float* q, float* out, float scale, std::int64_t begin,
                                        std::int64_t end, std::vector<float>& scratch) {
  attend_items(PlainKv<std::uint16_t>{}, k_plane, v_plane, L, batch, q, out, scale, begin, end,
               scratch);
}
}  // namespace

bool attention_f16_avx512(const std::uint16_t* k_plane, const std::uint16_t* v_plane,
                          const KvLayout& L, const AttentionBatch& batch, const float* q,
                          float* out, float scale, std::int64_t begin, std::int64_t end,
                          std::vector<float>& scratch) {
  if (!have_avx512_f16c()) return false;
  attention_f16_fast(k_plane, v_plane, L, batch, q, out, scale, begin, end, scratch);
  return true;
}

}  // namespace weir::inference
WEIR_AVX512_END

#else  // not x86-64: the portable paths

namespace weir::inference {

void store_f16(const float* x, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}

bool attention_f16_avx512(const std::uint16_t*, const std::uint16_t*, const KvLayout&,
                          const AttentionBatch&, const float*, float*, float, std::int64_t,
                          std::int64_t, std::vector<float>&) {
  return false;
}

}  // namespace weir::inference
#endif
