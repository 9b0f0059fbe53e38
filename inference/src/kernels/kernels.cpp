// matmul()'s dispatch by weight type, batch size and the CPU (force_kernel_isa() narrows it).
// The kernels it picks from: gemm_avx512.cpp (batched GEMMs, AVX-512), gemv_vnni.cpp (decode,
// AVX-512 VNNI), dot_avx2.cpp (integer dots, AVX2), kernels_portable.cpp (the loops compiled per
// ISA). rmsnorm, RoPE and SwiGLU: norm_rope_swiglu.cpp.
#include "kernels/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "kernels/x86.hpp"

#include "kernels/dot_avx2.hpp"
#include "kernels/gemm_avx512.hpp"
#include "kernels/gemv_vnni.hpp"
#include "kernels/kernels_portable.hpp"
#include "model/quant.hpp"
#include "model/repack.hpp"

namespace weir::inference::kernels {

using namespace detail;

namespace {

std::atomic<KernelIsa> g_isa{KernelIsa::native};  // force_kernel_isa()

bool avx2() {
  return have_avx2() && g_isa.load(std::memory_order_relaxed) != KernelIsa::portable;
}

#ifdef WEIR_X86
bool avx512() {
  return have_avx512() && g_isa.load(std::memory_order_relaxed) == KernelIsa::native;
}
bool vnni() {
  return have_vnni() && g_isa.load(std::memory_order_relaxed) == KernelIsa::native;
}
#endif

// K-quants: the batch sizes from which matmul dequantises row tiles for the F32 GEMM (see there).
constexpr std::int64_t kGemmMinTokensQ4K = 16, kGemmMinTokensQ6K = 32;

// Calls f(std::integral_constant<int, T>, t) for token tiles [t, t + T) covering [0, n),
// T = 4 but for the last.
template <class F>
void by_tiles(std::int64_t n, F&& f) {
  std::int64_t t = 0;
  for (; t + 4 <= n; t += 4) f(std::integral_constant<int, 4>{}, t);
  switch (n - t) {
    case 3:
      f(std::integral_constant<int, 3>{}, t);
      break;
    case 2:
      f(std::integral_constant<int, 2>{}, t);
      break;
    case 1:
      f(std::integral_constant<int, 1>{}, t);
      break;
    default:
      break;
  }
}

#ifdef WEIR_X86
// The AVX-512 F32 GEMM over tiles of kGemmRows weight rows: F32 weights are read in place (the
// last tile zero-padded); other types are dequantised a tile at a time (dequantize_row), once
// for all the tokens. Several weights of the same cols on the same x share the packed x and
// one fork-join over all their tiles.
void gemm_f32_tiles(std::span<const MatmulOut> outs, const float* x, std::int64_t n,
                    ThreadPool& pool) {
  const std::int64_t cols = outs[0].w.cols;
  thread_local std::vector<float> xp;
  const std::vector<Panel> panels = pack_panels(x, n, cols, xp);
  pool.parallel_for(count_tiles(outs, kGemmRows), [&](int, std::int64_t b, std::int64_t e) {
    thread_local std::vector<float> pad;  // a dequantised tile, or the last tile zero-padded
    for_tiles(outs, kGemmRows, b, e, [&](std::size_t k, std::int64_t tile) {
      const Weight& w = outs[k].w;
      const std::int64_t rows = w.rows;
      const bool f32 = w.type == GgmlType::f32;
      const auto* wf = reinterpret_cast<const float*>(w.data);
      const std::int64_t r0 = tile * kGemmRows, nr = std::min<std::int64_t>(kGemmRows, rows - r0);
      const float* wt = f32 ? wf + r0 * cols : nullptr;
      if (!f32 || nr < kGemmRows) {
        pad.resize(static_cast<std::size_t>(kGemmRows * cols));
        if (f32)
          std::copy_n(wt, nr * cols, pad.data());
        else
          dequantize_rows_avx512(w, r0, nr, pad.data());
        std::fill(pad.begin() + nr * cols, pad.end(), 0.0f);  // rows past the last
        wt = pad.data();
      }
      // F32: the next tile's weights are prefetched during the first panel.
      for (const Panel& p : panels) {
        const float* pf =
            f32 && &p == &panels.front() ? wf + std::min(r0 + kGemmRows, rows - 1) * cols : wt;
        float* yt = outs[k].y + p.start * rows + r0;
        if (p.width == 32)
          gemm_tile_avx512<2>(wt, cols, cols, p.data, yt, rows, nr, p.count, pf);
        else
          gemm_tile_avx512<1>(wt, cols, cols, p.data, yt, rows, nr, p.count, pf);
      }
    });
  });
}

// The batched GEMM matmul takes for `w` and n tokens, if any: the F32 one (F32 weights, and
// K-quants dequantised a tile at a time) or the VNNI one (Q8_0, Q4_0). K-quants: a large batch
// is compute-bound, so each row tile is dequantised to F32 once and multiplied by every token.
// Dequantising costs about as much as the per-token integer dots at 8-16 tokens (Q4_K) and
// 16-24 (Q6_K): from twice that the GEMM wins (1.8x at 16 / 32 tokens, about 3x at 128;
// bench/README.md).
enum class Gemm { none, f32, q8 };
Gemm batched_gemm(const Weight& w, std::int64_t n) {
  switch (w.type) {
    case GgmlType::f32:
      return n >= kGemmMinTokens && avx512() ? Gemm::f32 : Gemm::none;
    case GgmlType::q8_0:
    case GgmlType::q4_0:  // the x16 layouts never come here (vnni_decode), gemm_q8_vnni reads rows
      return n >= kGemmMinTokens && vnni() && w.layout == WeightLayout::rows ? Gemm::q8
                                                                             : Gemm::none;
    case GgmlType::q4_k:
      return n >= kGemmMinTokensQ4K && avx512() ? Gemm::f32 : Gemm::none;
    case GgmlType::q6_k:
      return n >= kGemmMinTokensQ6K && avx512() ? Gemm::f32 : Gemm::none;
    default:
      return Gemm::none;
  }
}

// outs on the GEMM `g` (not none).
void run_gemm(Gemm g, std::span<const MatmulOut> outs, const float* x, std::int64_t n,
              ThreadPool& pool) {
  if (g == Gemm::f32) return gemm_f32_tiles(outs, x, n, pool);
  gemm_q8_vnni(outs, x, n, pool);
}
#endif

#ifdef WEIR_X86
// Whether matmul takes the VNNI decode kernels (gemv_vnni.hpp) for `w` and n tokens: below the
// batch sizes that go to the GEMMs, and always for the x16 layouts. The Q4_K kernel reads a
// group of 16 rows (18-50 KB for the 1B shape) once from memory and again from L1/L2 for each 4
// tokens, so it is a GEMM blocked on the weights; and int8 products run at 4 times the F32
// GEMM's rate: one core, a 5632 x 2048 matrix, 16 tokens 1.4 ms against 6.3 ms dequantised to
// the F32 GEMM, and about 86 against 230 us a further token. The Q4_0 one beats the int8 GEMM
// too: 16 tokens 1.1 against 2.4 ms, 512 tokens 37 against 38 ms.
bool vnni_decode(const Weight& w, std::int64_t n) {
  if (!vnni()) return false;
  switch (w.type) {
    case GgmlType::q8_0:
    case GgmlType::q4_0:
      return w.layout != WeightLayout::rows || n < kGemmMinTokens;
    case GgmlType::q4_k:
      return w.layout != WeightLayout::rows || n < kGemmMinTokensQ4K;
    case GgmlType::q6_k:
      return w.layout != WeightLayout::rows || n < kGemmMinTokensQ6K;
    default:
      return false;
  }
}

// The activations each weight is read with (gemv_vnni.hpp): its type's rows in the file's layout,
// or its x16 layout (whose rows past the last group take the type's rows).
ActsKind rows_acts(GgmlType t) {
  return t == GgmlType::q8_0   ? ActsKind::q8_0
         : t == GgmlType::q4_0 ? ActsKind::q4_0
         : t == GgmlType::q4_k ? ActsKind::q4_k
                               : ActsKind::q6_k;
}
ActsKind x16_acts(GgmlType t) {
  return t == GgmlType::q4_k   ? ActsKind::q4k_x16
         : t == GgmlType::q6_k ? ActsKind::q6k_x16
         : t == GgmlType::q4_0 ? ActsKind::q4_0_x16
                               : ActsKind::q8_0_x16;
}
bool x16(const Weight& w) {
  return w.layout != WeightLayout::rows;
}

// What matmul_vnni shares among the threads: rows, or 16 rows of every matrix when a call has
// an x16 one (a unit is then a group of the x16 matrix, whose kernel computes the 16 together,
// and its rows past the last group are one unit), so that the units cost about the same.
std::int64_t vnni_units(const Weight& w, std::int64_t unit) {
  return (w.rows + unit - 1) / unit;
}

// A K-quant prompt's prefetch in its first token tile on a group (vnni_rows): each super-block's
// bytes of 16 rows (Q4_K 2,304, Q6_K 3,360), 32 KiB ahead.
constexpr std::int64_t kAheadPrompt = 32768, kLinesQ4K = 36, kLinesQ6K = 53;

// Units [u0, u1) of `w` (vnni_units) for n tokens: y [n, w.rows]. acts: by ActsKind.
void vnni_rows(const Weight& w, const VnniActs* acts, const float* qscale, std::int64_t n,
               std::int64_t unit, std::int64_t u0, std::int64_t u1, float* y) {
  const std::int64_t rows = w.rows, xblocks = w.cols / kQK8_0, sblocks = w.cols / kQK_K;
  std::int64_t r0 = u0 * unit;
  const std::int64_t r1 = std::min(u1 * unit, rows);
  if (x16(w) &&
      (w.type == GgmlType::q8_0 || w.type == GgmlType::q4_k || w.type == GgmlType::q6_k)) {
    // Then unit == kX16Rows: unit u is group u.
    const std::int64_t groups = rows / kX16Rows, g1 = std::min(u1, groups), tiles = (n + 3) / 4;
    const std::size_t group_bytes = static_cast<std::size_t>(kX16Rows) * w.row_bytes();
    const bool q8 = w.type == GgmlType::q8_0;
    const std::int64_t blocks = q8 ? xblocks : sblocks;  // the kernel's chunks a group
    // Two groups a call above 8 tokens (dot_q8_0_x16_vnni, dot_q4k_x16_vnni, dot_q6k_x16_vnni);
    // at 8 or fewer the weights' read from DRAM is most of the time, and one group a call streams
    // faster (one core, the 1B shape's Q8_0 matrices: 4 tokens 37 against 42 ms a step, 5 tokens
    // 38 against 51; 8 the same).
    // Q4_K and Q6_K only up to 64 tokens: on prompts of 512 they made Q4_K's gate and up
    // matrices 7% slower (one core, the 1B file), and so did the prefetch over the tiles on
    // ffn_down: prompts keep one group a call and the first tile's prefetch 32 KiB ahead, as
    // before the pairs (Q6_K's too, by analogy: its prompts were not measured with pairs).
    const bool prompt_kq = !q8 && n > 64;
    const std::int64_t prompt_lines = w.type == GgmlType::q4_k ? kLinesQ4K : kLinesQ6K;
    const bool pairs = n > 8 && !prompt_kq;
    // With several token tiles, tile j fetches the j-th of `tiles` slices of the next groups'
    // bytes into L2 meanwhile, so that their first tile, which read them from DRAM at a fraction
    // of the kernel's pace, finds them there (one core, 32 tokens: 545 Gop/s without, 680 with).
    const std::int64_t lines = static_cast<std::int64_t>(2 * group_bytes / 64);
    for (std::int64_t g = u0; g < g1;) {
      const int count = pairs && g + 1 < g1 ? 2 : 1;
      const std::byte* group = w.data + static_cast<std::size_t>(g) * group_bytes;
      by_tiles(n, [&](auto T, std::int64_t t) {
        X16Ahead ahead;
        if (prompt_kq) {
          if (t == 0) ahead = {group + kAheadPrompt, blocks * prompt_lines, prompt_lines};
        } else if (tiles > 1) {
          const std::int64_t j = t / 4, first = j * lines / tiles;
          ahead.p = group + count * group_bytes + 64 * first;
          ahead.lines = (j + 1) * lines / tiles - first;
          ahead.lines_per_block = (ahead.lines + blocks - 1) / blocks;
        }
        const VnniActs& a = acts[int(x16_acts(w.type))];
        float* out = y + t * rows + g * kX16Rows;
        if (q8 && count == 2)
          dot_q8_0_x16_vnni<T, 2>(group, blocks, group_bytes, a, t, out, rows, ahead);
        else if (q8)
          dot_q8_0_x16_vnni<T, 1>(group, blocks, group_bytes, a, t, out, rows, ahead);
        else if (w.type == GgmlType::q4_k && count == 2)
          dot_q4k_x16_vnni<T, 2>(group, blocks, group_bytes, a, t, out, rows, ahead);
        else if (w.type == GgmlType::q4_k)
          dot_q4k_x16_vnni<T, 1>(group, blocks, group_bytes, a, t, out, rows, ahead);
        else if (count == 2)
          dot_q6k_x16_vnni<T, 2>(group, blocks, group_bytes, a, t, out, rows, ahead);
        else
          dot_q6k_x16_vnni<T, 1>(group, blocks, group_bytes, a, t, out, rows, ahead);
      });
      g += count;
    }
    r0 = std::max(r0, groups * kX16Rows);  // then the rows past the groups, as in the file
  } else if (x16(w)) {                     // Q4_0, a group at a time
    const std::int64_t groups = rows / kX16Rows;
    for (std::int64_t g = u0; g < std::min(u1, groups); ++g) {
      const std::byte* group = w.data + static_cast<std::size_t>(g) * kX16Rows * w.row_bytes();
      by_tiles(n, [&](auto T, std::int64_t t) {
        float* out = y + t * rows + g * kX16Rows;
        const bool prefetch = n > 4 && t == 0;  // see dot_q4k_x16_vnni
        dot_q4_0_x16_vnni<T>(group, w.cols / 64, acts[int(ActsKind::q4_0_x16)], t, out, rows,
                             prefetch);
      });
    }
    r0 = std::max(r0, groups * kX16Rows);  // then the rows past the groups, as in the file
  }
  const VnniActs& a = acts[int(rows_acts(w.type))];
  for (std::int64_t r = r0; r < r1; ++r) {
    by_tiles(n, [&](auto T, std::int64_t t) {
      float* out = y + t * rows + r;
      const float* xd = qscale + t * xblocks;
      switch (w.type) {
        case GgmlType::q8_0:
          return dot_blocks_vnni<BlockQ8_0, T>(
              reinterpret_cast<const BlockQ8_0*>(w.data) + r * xblocks, xblocks, a, t, xd, out,
              rows);
        case GgmlType::q4_0:
          return dot_blocks_vnni<BlockQ4_0, T>(
              reinterpret_cast<const BlockQ4_0*>(w.data) + r * xblocks, xblocks, a, t, xd, out,
              rows);
        case GgmlType::q4_k:
          return dot_q4k_vnni<T>(reinterpret_cast<const BlockQ4_K*>(w.data) + r * sblocks, sblocks,
                                 a, t, out, rows);
        default:
          return dot_q6k_vnni<T>(reinterpret_cast<const BlockQ6_K*>(w.data) + r * sblocks, sblocks,
                                 a, t, out, rows);
      }
    });
  }
}

// matmul_many on the VNNI decode kernels. REQUIRES: vnni_decode(o.w, n) for every o, one cols.
void matmul_vnni(std::span<const MatmulOut> outs, const float* x, std::int64_t n, ThreadPool& pool,
                 std::vector<std::int8_t>& qx, std::vector<float>& qscale) {
  const std::int64_t cols = outs[0].w.cols, blocks = cols / kQK8_0;
  thread_local VnniActs prepared[kActsKinds];
  VnniActs* const acts = prepared;  // this thread's: the workers must not see their own
  bool need[kActsKinds] = {};
  for (const MatmulOut& o : outs) {
    need[int(rows_acts(o.w.type))] |= !x16(o.w) || o.w.rows % kX16Rows != 0;
    if (x16(o.w)) need[int(x16_acts(o.w.type))] = true;
  }
  qx.resize(static_cast<std::size_t>(n * cols));
  qscale.resize(static_cast<std::size_t>(n * blocks));
  for (int k = 0; k < kActsKinds; ++k)
    if (need[k]) size_acts(ActsKind(k), n, cols, acts[k]);
  // Quantised and prepared by token ranges: a prompt's hundreds of tokens on every thread (a
  // 516 x 768 batch took 0.26 ms on one, about 0.6 ns an element), a decode step's few here (a
  // fork-join costs a few microseconds).
  auto prepare = [&](std::int64_t t0, std::int64_t t1) {
    quantize_q8_blocks(x + t0 * cols, (t1 - t0) * blocks, qx.data() + t0 * cols,
                       qscale.data() + t0 * blocks);
    for (int k = 0; k < kActsKinds; ++k)
      if (need[k]) prepare_acts(ActsKind(k), qx.data(), qscale.data(), t0, t1, cols, acts[k]);
  };
  if (n * cols < 32768)
    prepare(0, n);
  else
    pool.parallel_for(n, [&](int, std::int64_t t0, std::int64_t t1) { prepare(t0, t1); });
  const bool any_x16 = std::any_of(outs.begin(), outs.end(), [](auto& o) { return x16(o.w); });
  const std::int64_t unit = any_x16 ? kX16Rows : 1;
  std::int64_t total = 0;
  for (const MatmulOut& o : outs) total += vnni_units(o.w, unit);
  // The units of all the matrices in turn; a chunk may end one matrix and start the next.
  pool.parallel_for(total, [&](int, std::int64_t b, std::int64_t e) {
    std::int64_t start = 0;
    for (const MatmulOut& o : outs) {
      const std::int64_t units = vnni_units(o.w, unit);
      const std::int64_t u0 = std::max(b, start), u1 = std::min(e, start + units);
      if (u0 < u1) vnni_rows(o.w, acts, qscale.data(), n, unit, u0 - start, u1 - start, o.y);
      start += units;
    }
  });
}
#endif

}  // namespace

void matmul_many(std::span<const MatmulOut> outs, const float* x, std::int64_t n, ThreadPool& pool,
                 std::vector<std::int8_t>& qx, std::vector<float>& qscale) {
#ifdef WEIR_X86
  const bool fused =
      !outs.empty() && std::all_of(outs.begin(), outs.end(), [&](const MatmulOut& o) {
        return vnni_decode(o.w, n) && o.w.cols == outs[0].w.cols;
      });
  if (fused) return matmul_vnni(outs, x, n, pool, qx, qscale);
  // A batch: weights of one type and cols on the same x are one GEMM (x packed once).
  if (const Gemm g = outs.empty() ? Gemm::none : batched_gemm(outs[0].w, n);
      g != Gemm::none && std::all_of(outs.begin(), outs.end(), [&](const MatmulOut& o) {
        return o.w.type == outs[0].w.type && o.w.cols == outs[0].w.cols;
      })) {
    return run_gemm(g, outs, x, n, pool);
  }
#endif
  for (const MatmulOut& o : outs) matmul(o.w, x, n, o.y, pool, qx, qscale);
}

void matmul(const Weight& w, const float* x, std::int64_t n, float* y, ThreadPool& pool,
            std::vector<std::int8_t>& qx, std::vector<float>& qscale) {
#ifdef WEIR_X86
  const MatmulOut one[] = {{w, y}};
  if (vnni_decode(w, n)) return matmul_vnni(one, x, n, pool, qx, qscale);
  if (const Gemm g = batched_gemm(w, n); g != Gemm::none) return run_gemm(g, one, x, n, pool);
#endif
  const std::int64_t rows = w.rows, cols = w.cols;
  switch (w.type) {
    case GgmlType::f32: {
      const auto* wf = reinterpret_cast<const float*>(w.data);
      // Split rows across threads in multiples of 4, so tiles stay whole.
      pool.parallel_for((rows + 3) / 4, [&](int, std::int64_t b, std::int64_t e) {
        gemm_f32_rows(wf, b * 4, std::min(rows, e * 4), cols, x, n, y, rows);
      });
      return;
    }
    case GgmlType::q8_0: {
      const std::int64_t blocks = cols / kQK8_0;
      quantize_q8(x, n, cols, qx, qscale);
#ifdef WEIR_X86
      if (avx2()) {
        pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
          for (std::int64_t r = b; r < e; ++r) {
            by_tiles(n, [&](auto T, std::int64_t t) {
              dot_blocks_avx2<BlockQ8_0, T>(reinterpret_cast<const BlockQ8_0*>(row_bytes_of(w, r)),
                                            blocks, qx.data() + t * cols,
                                            qscale.data() + t * blocks, y + t * rows + r, rows);
            });
          }
        });
        return;
      }
#endif
      pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
          dot_rows_q8(reinterpret_cast<const BlockQ8_0*>(row_bytes_of(w, r)), qx.data(),
                      qscale.data(), blocks, n, y + r, rows);
        }
      });
      return;
    }
    case GgmlType::q4_0:
    case GgmlType::q4_k:
    case GgmlType::q6_k: {
      quantize_q8(x, n, cols, qx, qscale);
      const std::int64_t xblocks = cols / kQK8_0;
      thread_local std::vector<float> xsum;  // Q4_K's min term: per block, d * sum(q)
      if (w.type == GgmlType::q4_k) {
        xsum.resize(static_cast<std::size_t>(n * xblocks));
        for (std::int64_t b = 0; b < n * xblocks; ++b) {
          std::int32_t sum = 0;
          for (int j = 0; j < kQK8_0; ++j) sum += qx[static_cast<std::size_t>(b * kQK8_0 + j)];
          xsum[static_cast<std::size_t>(b)] = qscale[static_cast<std::size_t>(b)] * sum;
        }
      }
      const GgmlType type = w.type;
      const float* xs = xsum.data();
#ifdef WEIR_X86
      if (avx2()) {  // straight from the blocks
        const std::int64_t sblocks = cols / kQK_K;
        pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
          for (std::int64_t r = b; r < e; ++r) {
            by_tiles(n, [&](auto T, std::int64_t t) {
              const std::int8_t* q = qx.data() + t * cols;
              const float* d = qscale.data() + t * xblocks;
              float* out = y + t * rows + r;
              if (type == GgmlType::q4_0) {
                dot_blocks_avx2<BlockQ4_0, T>(
                    reinterpret_cast<const BlockQ4_0*>(row_bytes_of(w, r)), xblocks, q, d, out,
                    rows);
              } else if (type == GgmlType::q4_k) {
                dot_q4k_avx2<T>(reinterpret_cast<const BlockQ4_K*>(row_bytes_of(w, r)), sblocks, q,
                                d, xs + t * xblocks, out, rows);
              } else {
                dot_q6k_avx2<T>(reinterpret_cast<const BlockQ6_K*>(row_bytes_of(w, r)), sblocks, q,
                                d, out, rows);
              }
            });
          }
        });
        return;
      }
#endif
      pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
        thread_local std::vector<std::int8_t> q;
        thread_local std::vector<float> sc, mn;
        q.resize(static_cast<std::size_t>(cols));
        sc.resize(static_cast<std::size_t>(cols / 16));
        mn.resize(static_cast<std::size_t>(cols / 16));
        for (std::int64_t r = b; r < e; ++r) {
          unpack_row(w, r, q.data(), sc.data(), mn.data());
          if (type == GgmlType::q4_0) {
            dot_rows_i8<32, false>(q.data(), sc.data(), nullptr, cols, qx.data(), qscale.data(),
                                   nullptr, n, y + r, rows);
          } else if (type == GgmlType::q4_k) {
            dot_rows_i8<32, true>(q.data(), sc.data(), mn.data(), cols, qx.data(), qscale.data(),
                                  xs, n, y + r, rows);
          } else {
            dot_rows_i8<16, false>(q.data(), sc.data(), nullptr, cols, qx.data(), qscale.data(),
                                   nullptr, n, y + r, rows);
          }
        }
      });
      return;
    }
    default:  // F16 / BF16: dequantise each row once, then the F32 dot for every token
      pool.parallel_for(rows, [&](int, std::int64_t b, std::int64_t e) {
        thread_local std::vector<float> row;
        row.resize(static_cast<std::size_t>(cols));
        for (std::int64_t r = b; r < e; ++r) {
          dequantize_row(w, r, row.data());
          dot_rows_f32(row.data(), x, cols, n, cols, y + r, rows, false);
        }
      });
  }
}

void use_portable_int8_kernels(bool on) {
  force_kernel_isa(on ? KernelIsa::portable : KernelIsa::native);
}

void force_kernel_isa(KernelIsa isa) {
  g_isa.store(isa, std::memory_order_relaxed);
}

}  // namespace weir::inference::kernels
