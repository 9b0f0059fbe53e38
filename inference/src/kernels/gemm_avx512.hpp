// The batched GEMMs of matmul() on AVX-512: F32 weights (AVX-512F) and Q8_0 / Q4_0 weights
// (AVX-512 VNNI), for batches of kGemmMinTokens tokens or more. matmul() picks them at run time
// (have_avx512(), have_vnni()); x86-64 only. Private to inference/ (kernels.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kernels.hpp"

#include "kernels/thread_pool.hpp"
#include "weir/inference/model.hpp"

#include "kernels/x86.hpp"

#ifdef WEIR_X86
namespace weir::inference::kernels::detail {

// ---- F32 GEMM for batches (AVX-512) ----
// Batched steps are compute-bound, so for n >= kGemmMinTokens the tokens are packed once per
// matmul into k-major panels of 16 or 32 (xp[k * width + j] = x[t0 + j, k], zero past n), and a
// register tile of kGemmRows weight rows x the panel's tokens is accumulated in zmm registers:
// per k, one broadcast weight per row and one contiguous panel load per 16 tokens feed
// kGemmRows * width / 16 independent FMAs. Each weight row is read once per panel; the panels
// (32 x cols floats) stay in L2.
constexpr int kGemmRows = 12;
constexpr std::int64_t kGemmMinTokens = 4;

// Token panels of a batch: [start, start + width) tokens each, width 32 or 16 (the last).
struct Panel {
  std::int64_t start, count, width;
  const float* data;
};

// Packs x [n, cols] into panels of 32 tokens (16 for the last, when 16 or fewer are left),
// zero past n: buf holds them, the panels point into it.
__attribute__((target("avx512f"))) std::vector<Panel> pack_panels(const float* x, std::int64_t n,
                                                                  std::int64_t cols,
                                                                  std::vector<float>& buf);

// One register tile: y[j * ldy + r] = sum_k w[r * ldw + k] * xp[k * NT * 16 + j] for r < nr,
// j < count; w: kGemmRows rows (zero-padded past nr), xp: a panel of NT * 16 tokens (NT 1 or 2).
// `next`: the next tile's weights, prefetched.
template <int NT>
__attribute__((target("avx512f"))) void gemm_tile_avx512(const float* w, std::int64_t ldw,
                                                         std::int64_t cols, const float* xp,
                                                         float* y, std::int64_t ldy,
                                                         std::int64_t nr, std::int64_t count,
                                                         const float* next);

// dequantize_row for rows [r0, r0 + nr) of `w` into out[nr][cols], K-quants vectorised.
void dequantize_rows_avx512(const Weight& w, std::int64_t r0, std::int64_t nr, float* out);

// The VNNI GEMM for a batch (n >= kGemmMinTokens) of Q8_0 weights, or Q4_0 ones widened to
// Q8_0 blocks a row tile at a time (the same scale, quants - 8), so both share the kernel.
// Several weights of the same cols on the same x (Q, K and V; gate and up) are one GEMM: x is
// quantised once and all their row tiles are shared out in one fork-join.
void gemm_q8_vnni(std::span<const MatmulOut> outs, const float* x, std::int64_t n,
                  ThreadPool& pool);

// Calls f(out index, tile within that out) for the tiles [b, e) of `outs` counted one after the
// other, `rows_per_tile` rows a tile.
template <class F>
void for_tiles(std::span<const MatmulOut> outs, std::int64_t rows_per_tile, std::int64_t b,
               std::int64_t e, F&& f) {
  std::size_t k = 0;
  std::int64_t first = 0;  // the first tile of outs[k]
  for (std::int64_t tile = b; tile < e; ++tile) {
    while (tile - first >= (outs[k].w.rows + rows_per_tile - 1) / rows_per_tile)
      first += (outs[k].w.rows + rows_per_tile - 1) / rows_per_tile, ++k;
    f(k, tile - first);
  }
}

// The tiles of all `outs`, rows_per_tile rows a tile.
inline std::int64_t count_tiles(std::span<const MatmulOut> outs, std::int64_t rows_per_tile) {
  std::int64_t tiles = 0;
  for (const auto& o : outs) tiles += (o.w.rows + rows_per_tile - 1) / rows_per_tile;
  return tiles;
}

// Whether the CPU has AVX-512F; AVX-512F, BW, VNNI and F16C (checked once).
bool have_avx512();
bool have_vnni();

}  // namespace weir::inference::kernels::detail
#endif
