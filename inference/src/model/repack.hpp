// Q4_K, Q6_K, Q4_0 and Q8_0 weights rearranged at load for the AVX-512 VNNI kernels (x16).
// Private to inference/.
//
// Decoding one token reads every weight once, so on a CPU a Q4_K matvec must keep pace with
// DRAM. In the file's layout a 512-bit vector holds 128 weights of one row, and every 32 of them
// have their own scale and their own activation scale: per 64 weights the row-major kernel
// spends a convert, a permute and a multiply-add besides the vpdpbusd, and on a 2-core Zen 4
// that made it compute-bound below the memory bandwidth (bench/README.md). Here the 16 rows of
// a group share each vector instead, a 32-bit lane a row: one vpdpbusd multiplies 4 weights of
// 16 rows by the same 4 activation quants (broadcast), the 8 integer dots of a 32-weight block
// accumulate in the lanes, and the block's scales apply to all 16 rows in one multiply-add.
//
// The layouts: rows [0, 16 * (rows / 16)) in groups of 16, group g at g * 16 * row_bytes, as
// `sblocks` chunks of 16 super-blocks (one of each row; row l of the group is lane l, its
// bytes at 4 l in each 64-byte vector). Q4_K (WeightLayout::q4k_x16), chunks of 2304 bytes:
//   [0, 32)       d of each row, fp16            [32, 64)  dmin of each row, fp16
//   [64, 256)     the 12 bytes of scales as 3 vectors: vector w holds scales[4w, 4w + 4)
//   [256, 2304)   qs as 32 vectors: vector x16_qs_slot(j) holds qs[4j, 4j + 4), in the order
//                 the one-token kernel reads them
// Q6_K (WeightLayout::q6k_x16), chunks of 3360 bytes:
//   [0, 32)       d of each row, fp16
//   [32, 288)     the 16 scales as 4 vectors: vector w holds scales[4w, 4w + 4)
//   [288, 3360)   for each half h and k < 8 (p = 8 h + k), 3 vectors at 288 + 192 p: ql[64h + 4k
//                 + 0..3], ql[64h + 32 + 4k + 0..3], qh[32h + 4k + 0..3]: the bits of 16
//                 weights, in the order the kernel reads them
// Q4_0 (WeightLayout::q4_0_x16; cols a multiple of 64), chunks of 576 bytes, two blocks b:
//   [0, 64)       d of each row, fp16: block 0, then block 1
//   [64, 576)     qs as 8 vectors: vector 4 b + j holds block b's qs[4j, 4j + 4)
// Q8_0 (WeightLayout::q8_0_x16), chunks of 544 bytes, one block:
//   [0, 32)       d of each row, fp16
//   [32, 544)     qs + 128 (the top bit flipped: unsigned, so the quants are vpdpbusd's unsigned
//                 operand and the activations, broadcast, its signed one) as 8 vectors: vector v
//                 holds qs[4v, 4v + 4)
// The rows past the last group stay as they are, after the groups. The bytes are the file's,
// moved (Q8_0's quants also flipped): the same size, and row_bytes_of() gives any row back as the
// file had it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weir/inference/model.hpp"

#include "model/quant.hpp"

namespace weir::inference {

constexpr std::int64_t kX16Rows = 16;
constexpr std::size_t kX16Chunk = kX16Rows * sizeof(BlockQ4_K);  // 2304
constexpr std::size_t kX16D = 0, kX16Dmin = 32, kX16Scales = 64, kX16Qs = 256;
constexpr std::size_t kX16ChunkQ6 = kX16Rows * sizeof(BlockQ6_K);  // 3360
constexpr std::size_t kX16ScalesQ6 = 32, kX16BitsQ6 = 288;
constexpr std::size_t kX16ChunkQ4_0 = kX16Rows * 2 * sizeof(BlockQ4_0);  // 576
constexpr std::size_t kX16QsQ4_0 = 64;
constexpr std::size_t kX16ChunkQ8_0 = kX16Rows * sizeof(BlockQ8_0);  // 544
constexpr std::size_t kX16QsQ8_0 = 32;

// Where word j of a row's qs (bytes 4j .. 4j + 3: 4 weights of chunk c = j / 8, at v = j % 8)
// sits among the 32 vectors: v-major, so that the one-token kernel, which takes the 4 chunks
// together, reads the chunk front to back (hardware prefetchers follow a sequential stream).
constexpr int x16_qs_slot(int j) {
  return 4 * (j % 8) + j / 8;
}

// Whether this CPU's kernels read Q4_K, Q6_K, Q4_0 and Q8_0 weights in the x16 layouts (x86-64 with
// AVX-512 VNNI): Model::load rearranges them only then.
bool cpu_reads_x16();

// The x16 layout of `type` (Q4_K, Q6_K, Q4_0 or Q8_0; else WeightLayout::rows: none).
WeightLayout x16_layout(GgmlType type);

// Whether a matrix of `type` [rows, cols] can take its x16 layout: one exists, rows >= 16, and
// for Q4_0 cols is a multiple of 64.
bool x16_fits(GgmlType type, std::int64_t rows, std::int64_t cols);

// Rearranges a matrix [rows, cols] in place into its x16 layout. REQUIRES: x16_fits.
void repack_x16(GgmlType type, std::byte* data, std::int64_t rows, std::int64_t cols);

// The same for the groups [g_begin, g_end) of 16 rows only: groups are independent, so the
// loader spreads one matrix over its threads. Thread-safe for disjoint ranges.
// REQUIRES: x16_fits; 0 <= g_begin <= g_end <= rows / 16.
void repack_x16_groups(GgmlType type, std::byte* data, std::int64_t cols, std::int64_t g_begin,
                       std::int64_t g_end);

// The version of the x16 layouts in a cached rearranged copy (weight_cache.hpp). Bump it with
// any change to a layout above or to which matrices the loader rearranges: older copies are
// then rebuilt.
constexpr std::uint32_t kX16LayoutVersion = 1;

// row_bytes_of (model.hpp) is defined with the layouts, in repack.cpp.

}  // namespace weir::inference
