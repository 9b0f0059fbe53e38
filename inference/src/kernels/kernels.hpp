// CPU kernels of the fast forward path. Hot loops are compiled once per ISA (AVX-512, AVX2+FMA,
// baseline) and picked at load time by the CPU (GCC target_clones); the batched GEMMs (F32 on
// AVX-512, Q8_0 on AVX-512 VNNI), the decode kernels on AVX-512 VNNI and the AVX2 integer
// kernels are intrinsics, picked at run time by __builtin_cpu_supports, with those loops as the
// fallback. Private to inference/.
// Files: kernels.cpp (matmul's dispatch, force_kernel_isa), gemm_avx512.cpp (the batched GEMMs),
// gemv_vnni.cpp (the AVX-512 VNNI decode kernels), dot_avx2.cpp (the AVX2 integer kernels),
// kernels_portable.cpp (the per-ISA loops, quantize_q8), norm_rope_swiglu.cpp (rmsnorm, RoPE,
// SwiGLU).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/thread_pool.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference::kernels {

// y[t, r] = sum_i W[r, i] * x[t, i] for t < n.  x: [n, w.cols], y: [n, w.rows].
// Rows of W are split across the pool; each weight row is read once for all n tokens (once per
// 32-token panel in the GEMMs, which F32 and Q8_0 batches of 4 tokens or more take).
// `qx`, `qscale`: scratch for the integer kernels of Q8_0, Q4_0, Q4_K and Q6_K weights (the
// activations quantised to Q8_0 blocks of 32: int8 quants and a scale per block).
void matmul(const Weight& w, const float* x, std::int64_t n, float* y, ThreadPool& pool,
            std::vector<std::int8_t>& qx, std::vector<float>& qscale);

// One product of matmul_many: y [n, w.rows] = x W^T.
struct MatmulOut {
  const Weight& w;
  float* y;
};

// matmul for every (w, y) in `outs`, all on the same x [n, cols]. In a decode step (the AVX-512
// VNNI kernels: n below the GEMMs' batch sizes) x is quantised once and one parallel_for covers
// the rows of every matrix in turn, so Q, K and V (or gate and up) cost one fork-join of the pool
// instead of one each; otherwise it calls matmul for each.
void matmul_many(std::span<const MatmulOut> outs, const float* x, std::int64_t n, ThreadPool& pool,
                 std::vector<std::int8_t>& qx, std::vector<float>& qscale);

// Tests and benchmarks: which hand-written kernels matmul may use, so every path is checked on
// one machine. native: the best the CPU has (the AVX-512 F32 and AVX-512 VNNI Q8_0 GEMMs for
// batches, the AVX-512 VNNI decode kernels, the AVX2 integer kernels); avx2: no AVX-512
// kernels; portable: none of them, only the loops GCC compiles per ISA. Call it between matmuls,
// not during one.
enum class KernelIsa { native, avx2, portable };
void force_kernel_isa(KernelIsa isa);

// force_kernel_isa(on ? portable : native).
void use_portable_int8_kernels(bool on);

// out[t] = w * x[t] / sqrt(mean(x[t]^2) + eps) for t < n; rows of `dim`.
void rmsnorm(const float* x, const float* w, float* out, std::int64_t n, std::int64_t dim,
             float eps);

// Rotary embedding, split so a step computes the angles once for all layers, q and k:
// cos, sin [n, head_dim / 2] of token t's pair j: positions[t] * freq_scale * base^(-2j/hd).
void rope_angles(const std::int32_t* positions, std::int64_t n, int head_dim, float base,
                 float freq_scale, float* cos, float* sin);
// In place: x[n, n_heads, head_dim] rotated by the angles above.
void rope_apply(float* x, std::int64_t n, int n_heads, int head_dim, bool neox, const float* cos,
                const float* sin);

// a[i] = silu(a[i]) * b[i]
void swiglu(float* a, const float* b, std::int64_t n);

}  // namespace weir::inference::kernels
