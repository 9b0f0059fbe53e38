// Q4_K weights rearranged at load for the AVX-512 VNNI decode kernel (WeightLayout::q4k_x16).
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
// The layout: rows [0, 16 * (rows / 16)) in groups of 16, group g at g * 16 * row_bytes, as
// `sblocks` chunks of 2304 bytes (one super-block of each of the 16 rows; row l of the group is
// lane l):
//   [0, 32)       d of each row, fp16            [32, 64)  dmin of each row, fp16
//   [64, 256)     the 12 bytes of scales as 3 vectors: bytes 64 + 64 w + 4 l: scales[4w, 4w + 4)
//   [256, 2304)   qs as 32 vectors: bytes 256 + 64 x16_qs_slot(j) + 4 l: row l's qs[4j, 4j + 4),
//                 in the order the one-token kernel reads them (x16_qs_slot)
// The rows past the last group stay as they are, after the groups. The bytes are the file's,
// moved: the same size, and row_bytes_of() gives any row back as the file had it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weir/inference/model.hpp"

#include "quant.hpp"

namespace weir::inference {

constexpr std::int64_t kX16Rows = 16;
constexpr std::size_t kX16Chunk = kX16Rows * sizeof(BlockQ4_K);  // 2304
constexpr std::size_t kX16D = 0, kX16Dmin = 32, kX16Scales = 64, kX16Qs = 256;

// Where word j of a row's qs (bytes 4j .. 4j + 3: 4 weights of chunk c = j / 8, at v = j % 8)
// sits among the 32 vectors: v-major, so that the one-token kernel, which takes the 4 chunks
// together, reads the chunk front to back (hardware prefetchers follow a sequential stream).
constexpr int x16_qs_slot(int j) {
  return 4 * (j % 8) + j / 8;
}

// Whether this CPU's kernels read Q4_K weights in the x16 layout (x86-64 with AVX-512 VNNI):
// Model::load rearranges them only then.
bool cpu_reads_q4k_x16();

// Rearranges a Q4_K matrix [rows, cols] in place into the x16 layout. REQUIRES: rows >= 16.
void repack_q4k_x16(std::byte* data, std::int64_t rows, std::int64_t cols);

// Row r of w in the file's layout: in place for WeightLayout::rows and the rows past the last
// group, else gathered into scratch (w.row_bytes() bytes).
const std::byte* row_bytes_of(const Weight& w, std::int64_t r, std::byte* scratch);

}  // namespace weir::inference
