// The AVX2 integer kernels of matmul() (AVX2, FMA and F16C; picked at run time by have_avx2()):
// Q8_0, Q4_0, Q4_K and Q6_K weight rows straight from their blocks against Q8_0-quantised
// activations, T <= 4 tokens at a time. x86-64 only. Private to inference/ (kernels.cpp).
#pragma once

#include <cstdint>

#include "model/quant.hpp"

#include "kernels/x86.hpp"

namespace weir::inference::kernels::detail {

// Whether the CPU has AVX2, FMA and F16C (checked once; false off x86-64).
bool have_avx2();

#ifdef WEIR_X86
// One weight row against T tokens (T = 1..4): out[k * out_stride] for k < T. qx: [T, cols]
// activation quants; xd: [T, cols / 32] their scales.

// Q8_0 and Q4_0 rows (Block: BlockQ8_0 or BlockQ4_0). w: [blocks].
template <class Block, int T>
__attribute__((target("avx2,fma,f16c"))) void dot_blocks_avx2(const Block* w, std::int64_t blocks,
                                                              const std::int8_t* qx,
                                                              const float* xd, float* out,
                                                              std::int64_t out_stride);

// Q4_K rows. xsum: [T, sblocks * 8], per activation block xd * (sum of its quants).
template <int T>
__attribute__((target("avx2,fma,f16c"))) void dot_q4k_avx2(const BlockQ4_K* w, std::int64_t sblocks,
                                                           const std::int8_t* qx, const float* xd,
                                                           const float* xsum, float* out,
                                                           std::int64_t out_stride);

// Q6_K rows.
template <int T>
__attribute__((target("avx2,fma,f16c"))) void dot_q6k_avx2(const BlockQ6_K* w, std::int64_t sblocks,
                                                           const std::int8_t* qx, const float* xd,
                                                           float* out, std::int64_t out_stride);
#endif

}  // namespace weir::inference::kernels::detail
