// The decode kernels of matmul() on AVX-512 VNNI: Q4_K, Q6_K, Q8_0 and Q4_0 weight rows straight
// from their blocks against Q8_0-quantised activations, T <= 4 tokens at a time (one token per
// sequence in a decode step). matmul() picks them at run time (have_vnni()) below the batch
// sizes that go to the GEMMs. x86-64 only. Private to inference/ (kernels.cpp).
//
// One decode token reads every weight once, so these kernels must keep up with DRAM: up to 9
// bytes of weights a cycle a core on the development machine (2 cores sharing up to ~47 GB/s at
// 2.6 GHz). The AVX2 kernels (dot_avx2.hpp) decode each 32-weight group into its own float
// multiply-add chain and fall well short for the K-quants. Here one vpdpbusd multiplies 64
// weights by 64 activation quants (unsigned x signed bytes, 4 products a lane), and the scales
// of a whole super-block or block group are applied per lane in one float multiply-add per 64
// weights. The activations are rearranged once per matmul (prepare_acts) so that the weights need
// no shuffling: a lane's activation bytes, scale and offset correction sit at the same offset as
// its weights.
//
// Q4_K, Q6_K, Q4_0 and Q8_0 weights rearranged at load (repack.hpp) take dot_q4k_x16_vnni,
// dot_q6k_x16_vnni, dot_q4_0_x16_vnni and dot_q8_0_x16_vnni instead, 16 rows at once.
//
// Results equal the portable kernels' (kernels_portable.hpp) up to float summation order: the
// integer dot of every 4 weights is exact, and only the order of the float products' sum differs.
#pragma once

#include <cstdint>
#include <vector>

#include "model/quant.hpp"

#include "kernels/x86.hpp"

#ifdef WEIR_X86
namespace weir::inference::kernels::detail {

#define WEIR_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

// Activations prepared for one weight type from quantize_q8's output (qx [n, cols] quants and
// xd [n, cols / 32] scales). Sizes per token; every array is [n, size].
struct VnniActs {
  std::vector<std::int8_t> q;      // [cols]: quants, Q4_K: groups reordered (see ActsKind)
  std::vector<std::int32_t> corr;  // [cols / 4]: per 4-byte lane (x16: per group), -offset * sum
  std::vector<float> lane_d;       // [cols / 4]: per lane, the scale of its 32-block (Q6_K)
  // [cols / 16], Q4_K: per super-block the 8 blocks' scales d, then their d * (sum of quants).
  std::vector<float> block_d;
};

// quantize_q8 (kernels_portable.hpp) in AVX-512: the same quants and scales, bit for bit (the
// same float operations per element, the scale's fp16 rounding by the same helper). A decode
// step quantises its activations on the calling thread while the others wait, so this is
// serial time: 2 of every 30 decode samples went to the scalar loop. quantize_q8_blocks: the same
// for `blocks` blocks of 32 from x into q and s, sized by the caller (a range of a batch).
WEIR_VNNI void quantize_q8_avx512(const float* x, std::int64_t n, std::int64_t cols,
                                  std::vector<std::int8_t>& q, std::vector<float>& s);
WEIR_VNNI void quantize_q8_blocks(const float* x, std::int64_t blocks, std::int8_t* q, float* s);

// The ways the activations are prepared for the kernels below, a VnniActs each: for the row
// kernels of Q8_0, Q4_0, Q4_K and Q6_K, and for the x16 kernels of Q4_K, Q6_K, Q4_0 and Q8_0.
//   q8_0: quants as they are; corr per lane for the offset 128.
//   q4_0: in each group of 8 blocks, per 4 blocks the first 16 quants of each, then the last 16
//     of each (the low and the high nibbles of 4 blocks' qs); the blocks past the last group as
//     they are. corr per lane for the offset 8.
//   q4_k, q4k_x16: block_d, and the quants with the 32-groups of each super-block in the order
//     0 2 1 3 4 6 5 7, so that the low and high nibbles of 64 bytes of qs meet their activations
//     in one 64-byte load (q4_k, for dot_q4k_vnni), or as they are (q4k_x16).
//   q6_k: quants as they are; corr per lane for the offset 32; lane_d.
//   q6k_x16, q4_0_x16, q8_0_x16: quants as they are; corr [cols / group]: per group, -offset *
//     (sum of its quants) (group, offset: Q6_K 16, 32; Q4_0 32, 8; Q8_0 32, 128); block_d
//     [cols / 32]: the activation scales.
enum class ActsKind { q8_0, q4_0, q4_k, q6_k, q4k_x16, q6k_x16, q4_0_x16, q8_0_x16 };
constexpr int kActsKinds = 8;

// Sizes `a` for n tokens of `cols` as `kind` needs it.
void size_acts(ActsKind kind, std::int64_t n, std::int64_t cols, VnniActs& a);
// Fills tokens [t0, t1) of `a` (sized by size_acts) from qx [n, cols] and xd [n, cols / 32], as
// quantize_q8_avx512 made them. Distinct ranges may be filled on distinct threads: a batch's
// activations are prepared by all of them.
void prepare_acts(ActsKind kind, const std::int8_t* qx, const float* xd, std::int64_t t0,
                  std::int64_t t1, std::int64_t cols, VnniActs& a);

// One weight row against T tokens (T = 1..4): out[k * out_stride] for k < T.

// Q4_K rows, w: [sblocks]. a: ActsKind::q4_k, tokens t0 .. t0 + T of it.
template <int T>
WEIR_VNNI void dot_q4k_vnni(const BlockQ4_K* w, std::int64_t sblocks, const VnniActs& a,
                            std::int64_t t0, float* out, std::int64_t out_stride);

// The software prefetch of one x16 kernel call: `lines` cache lines from p into L2, about
// lines_per_block of them while each block of the call is multiplied (none: lines 0).
struct X16Ahead {
  const std::byte* p = nullptr;
  std::int64_t lines = 0, lines_per_block = 0;
};

// G (1 or 2) consecutive groups of 16 Q4_K rows in the x16 layout (repack.hpp), w: the first's
// sblocks chunks, the second's group_bytes on. a: ActsKind::q4k_x16. Row l of group g for token
// k: out[k * out_stride + 16 g + l]. ahead: what to prefetch meanwhile, as dot_q8_0_x16_vnni's.
// Software prefetch is only worth it when the call is compute-bound (several token tiles on a
// group): a lone tile streams faster on the hardware prefetchers alone (one core, decode of the
// 1B shape: 29-31 GB/s from DRAM without, 22-23 with).
template <int T, int G>
WEIR_VNNI void dot_q4k_x16_vnni(const std::byte* w, std::int64_t sblocks, std::size_t group_bytes,
                                const VnniActs& a, std::int64_t t0, float* out,
                                std::int64_t out_stride, X16Ahead ahead);

// G (1 or 2) consecutive groups of 16 Q6_K rows in the x16 layout, as dot_q4k_x16_vnni.
// a: ActsKind::q6k_x16.
template <int T, int G>
WEIR_VNNI void dot_q6k_x16_vnni(const std::byte* w, std::int64_t sblocks, std::size_t group_bytes,
                                const VnniActs& a, std::int64_t t0, float* out,
                                std::int64_t out_stride, X16Ahead ahead);

// 16 Q4_0 rows in the x16 layout, as dot_q4k_x16_vnni; pairs: cols / 64. a: ActsKind::q4_0_x16.
template <int T>
WEIR_VNNI void dot_q4_0_x16_vnni(const std::byte* w, std::int64_t pairs, const VnniActs& a,
                                 std::int64_t t0, float* out, std::int64_t out_stride,
                                 bool prefetch);

// G (1 or 2) consecutive groups of 16 Q8_0 rows in the x16 layout, w: the first's blocks chunks,
// the second's group_bytes on (blocks: cols / 32). a: ActsKind::q8_0_x16. Row l of group g for
// token k: out[k * out_stride + 16 g + l]. ahead: what to prefetch meanwhile (matmul spreads the
// next groups' bytes over the token tiles of these, when there are several).
template <int T, int G>
WEIR_VNNI void dot_q8_0_x16_vnni(const std::byte* w, std::int64_t blocks, std::size_t group_bytes,
                                 const VnniActs& a, std::int64_t t0, float* out,
                                 std::int64_t out_stride, X16Ahead ahead);

// Q6_K rows, w: [sblocks]. a: ActsKind::q6_k, tokens t0 .. t0 + T of it.
template <int T>
WEIR_VNNI void dot_q6k_vnni(const BlockQ6_K* w, std::int64_t sblocks, const VnniActs& a,
                            std::int64_t t0, float* out, std::int64_t out_stride);

// Q8_0 or Q4_0 rows (Block: BlockQ8_0 or BlockQ4_0), w: [blocks]. a: ActsKind::q8_0 or
// q4_0, tokens t0 .. t0 + T of it. xd: [T, blocks], the activation scales (quantize_q8).
template <class Block, int T>
WEIR_VNNI void dot_blocks_vnni(const Block* w, std::int64_t blocks, const VnniActs& a,
                               std::int64_t t0, const float* xd, float* out,
                               std::int64_t out_stride);

}  // namespace weir::inference::kernels::detail
#endif
