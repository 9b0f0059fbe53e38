// The portable kernels of matmul(): loops written once and compiled per ISA (WEIR_CLONES: AVX-512,
// AVX2+FMA, baseline, picked at load time), the fallback where the intrinsics kernels
// (gemm_avx512.hpp, dot_avx2.hpp) are not taken, plus the activations' Q8_0 quantiser and the
// row unpacking they share. Private to inference/ (kernels.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "model/quant.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference::kernels::detail {

// dot_rows_f32, dot_rows_q8, dot_rows_i8 and unpack_row are defined WEIR_CLONES; the attribute
// goes on the definitions only (declared with it, a caller's file would get a resolver of its
// own, which cannot see the clones).

// out[t * out_stride] = dot(w[0..cols), x[t * x_stride ..]) for t < n; `stream`: prefetch the
// weights with the non-temporal hint.
void dot_rows_f32(const float* w, const float* x, std::int64_t cols, std::int64_t n,
                  std::int64_t x_stride, float* out, std::int64_t out_stride, bool stream);

// y[t, r0..r1) for every t < n, rows in tiles of 4 and tokens in tiles of 4.
void gemm_f32_rows(const float* w, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                   const float* x, std::int64_t n, float* y, std::int64_t rows);

// Q8_0 weights (a row, [blocks]) against Q8_0-quantised activations (quantize_q8).
void dot_rows_q8(const BlockQ8_0* w, const std::int8_t* qx, const float* qs, std::int64_t blocks,
                 std::int64_t n, float* out, std::int64_t out_stride);

// Unpacked 4/6-bit weights (unpack_row) against Q8_0-quantised activations; G = 32 (Q4_0;
// Q4_K with kMin) or 16 (Q6_K).
template <int G, bool kMin>
void dot_rows_i8(const std::int8_t* wq, const float* ws, const float* wm, std::int64_t cols,
                 const std::int8_t* qx, const float* xd, const float* xsum, std::int64_t n,
                 float* out, std::int64_t out_stride);

// Row r of a Q4_0 / Q4_K / Q6_K weight: q[cols]; scale and min per group (32 weights for
// Q4_0 and Q4_K, 16 for Q6_K; min for Q4_K only).
void unpack_row(const Weight& w, std::int64_t r, std::int8_t* q, float* scale, float* min);

// Activations x [n, cols] to Q8_0: q [n, cols], s [n, cols / 32] (resized).
void quantize_q8(const float* x, std::int64_t n, std::int64_t cols, std::vector<std::int8_t>& q,
                 std::vector<float>& s);

}  // namespace weir::inference::kernels::detail
