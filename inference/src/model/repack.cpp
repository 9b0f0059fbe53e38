// The x16 layouts; see repack.hpp.
#include "model/repack.hpp"

#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/x86.hpp"

#ifdef WEIR_X86
#include "kernels/gemm_avx512.hpp"
#endif

namespace weir::inference {

bool cpu_reads_x16() {
#ifdef WEIR_X86
  return kernels::detail::have_vnni();
#else
  return false;
#endif
}

WeightLayout x16_layout(GgmlType type) {
  return type == GgmlType::q4_k   ? WeightLayout::q4k_x16
         : type == GgmlType::q6_k ? WeightLayout::q6k_x16
         : type == GgmlType::q4_0 ? WeightLayout::q4_0_x16
         : type == GgmlType::q8_0 ? WeightLayout::q8_0_x16
                                  : WeightLayout::rows;
}

bool x16_fits(GgmlType type, std::int64_t rows, std::int64_t cols) {
  return x16_layout(type) != WeightLayout::rows && rows >= kX16Rows &&
         (type != GgmlType::q4_0 || cols % 64 == 0);
}

namespace {

// Copies n bytes between a field of a row's block and offset `at` of a chunk: into the chunk
// (repacking) or out of it (row_bytes_of). flip: each byte's top bit is flipped on the way
// (Q8_0's quants, stored + 128 in the chunk), which undoes itself on the way back.
struct Move {
  std::byte* c;
  bool to_chunk;
  void operator()(std::size_t at, void* field, std::size_t n, bool flip = false) const {
    if (to_chunk)
      std::memcpy(c + at, field, n);
    else
      std::memcpy(field, c + at, n);
    if (flip) {
      std::byte* out = to_chunk ? c + at : static_cast<std::byte*>(field);
      for (std::size_t i = 0; i < n; ++i) out[i] ^= std::byte{0x80};
    }
  }
};

// Row l's block b and its places in the chunk c, by type: the one place that says where each
// part of a block goes.
void move_q4k(std::byte* c, std::int64_t l, BlockQ4_K& b, bool to_chunk) {
  const Move move{c, to_chunk};
  move(kX16D + 2 * l, &b.d, 2);
  move(kX16Dmin + 2 * l, &b.dmin, 2);
  for (int w = 0; w < 3; ++w) move(kX16Scales + 64 * w + 4 * l, b.scales + 4 * w, 4);
  for (int j = 0; j < 32; ++j) move(kX16Qs + 64 * x16_qs_slot(j) + 4 * l, b.qs + 4 * j, 4);
}

void move_q6k(std::byte* c, std::int64_t l, BlockQ6_K& b, bool to_chunk) {
  const Move move{c, to_chunk};
  move(kX16D + 2 * l, &b.d, 2);
  for (int w = 0; w < 4; ++w) move(kX16ScalesQ6 + 64 * w + 4 * l, b.scales + 4 * w, 4);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 8; ++k) {
      const std::size_t at = kX16BitsQ6 + 192 * static_cast<std::size_t>(8 * h + k) + 4 * l;
      move(at, b.ql + 64 * h + 4 * k, 4);
      move(at + 64, b.ql + 64 * h + 32 + 4 * k, 4);
      move(at + 128, b.qh + 32 * h + 4 * k, 4);
    }
  }
}

// Q4_0's unit: two blocks, 64 weights.
struct PairQ4_0 {
  BlockQ4_0 b[2];
};
static_assert(sizeof(PairQ4_0) == 36);

void move_q4_0(std::byte* c, std::int64_t l, PairQ4_0& p, bool to_chunk) {
  const Move move{c, to_chunk};
  for (int b = 0; b < 2; ++b) {
    move(32 * b + 2 * l, &p.b[b].d, 2);
    for (int j = 0; j < 4; ++j) move(kX16QsQ4_0 + 64 * (4 * b + j) + 4 * l, p.b[b].qs + 4 * j, 4);
  }
}

void move_q8_0(std::byte* c, std::int64_t l, BlockQ8_0& b, bool to_chunk) {
  const Move move{c, to_chunk};
  move(2 * l, &b.d, 2);
  for (int v = 0; v < 8; ++v) move(kX16QsQ8_0 + 64 * v + 4 * l, b.qs + 4 * v, 4, true);
}

template <class Unit>
void move_block(std::byte* c, std::int64_t l, Unit& b, bool to_chunk) {
  if constexpr (std::is_same_v<Unit, BlockQ4_K>)
    move_q4k(c, l, b, to_chunk);
  else if constexpr (std::is_same_v<Unit, BlockQ6_K>)
    move_q6k(c, l, b, to_chunk);
  else if constexpr (std::is_same_v<Unit, BlockQ8_0>)
    move_q8_0(c, l, b, to_chunk);
  else
    move_q4_0(c, l, b, to_chunk);
}

// Weights per unit: a super-block, Q4_0's pair of blocks, or a Q8_0 block.
template <class Unit>
constexpr std::int64_t kUnitWeights = std::is_same_v<Unit, PairQ4_0>    ? 64
                                      : std::is_same_v<Unit, BlockQ8_0> ? kQK8_0
                                                                        : kQK_K;

template <class Block>
void repack(std::byte* data, std::int64_t cols, std::int64_t g_begin, std::int64_t g_end) {
  constexpr std::size_t chunk = kX16Rows * sizeof(Block);
  const std::int64_t sblocks = cols / kUnitWeights<Block>;
  const std::size_t group_bytes = chunk * static_cast<std::size_t>(sblocks);
  thread_local std::vector<Block> rows16;  // one group: the loader calls this from many threads
  rows16.resize(static_cast<std::size_t>(kX16Rows * sblocks));
  for (std::int64_t g = g_begin; g < g_end; ++g) {
    std::byte* base = data + static_cast<std::size_t>(g) * group_bytes;
    std::memcpy(rows16.data(), base, group_bytes);  // the group's 16 rows, as in the file
    for (std::int64_t i = 0; i < sblocks; ++i)
      for (std::int64_t l = 0; l < kX16Rows; ++l)
        move_block(base + static_cast<std::size_t>(i) * chunk, l,
                   rows16[static_cast<std::size_t>(l * sblocks + i)], true);
  }
}

template <class Block>
void gather(const std::byte* group, std::int64_t sblocks, std::int64_t l, Block* out) {
  constexpr std::size_t chunk = kX16Rows * sizeof(Block);
  for (std::int64_t i = 0; i < sblocks; ++i)  // move_block only reads the chunk when !to_chunk
    move_block(const_cast<std::byte*>(group) + static_cast<std::size_t>(i) * chunk, l, out[i],
               false);
}

}  // namespace

void repack_x16(GgmlType type, std::byte* data, std::int64_t rows, std::int64_t cols) {
  repack_x16_groups(type, data, cols, 0, rows / kX16Rows);
}

void repack_x16_groups(GgmlType type, std::byte* data, std::int64_t cols, std::int64_t g_begin,
                       std::int64_t g_end) {
  if (type == GgmlType::q4_k)
    repack<BlockQ4_K>(data, cols, g_begin, g_end);
  else if (type == GgmlType::q6_k)
    repack<BlockQ6_K>(data, cols, g_begin, g_end);
  else if (type == GgmlType::q8_0)
    repack<BlockQ8_0>(data, cols, g_begin, g_end);
  else
    repack<PairQ4_0>(data, cols, g_begin, g_end);
}

const std::byte* row_bytes_of(const Weight& w, std::int64_t r) {
  const std::size_t row_bytes = w.row_bytes();
  if (w.layout == WeightLayout::rows || r >= w.rows / kX16Rows * kX16Rows)
    return w.data + static_cast<std::size_t>(r) * row_bytes;
  thread_local std::vector<std::byte> row;
  row.resize(row_bytes);
  std::byte* scratch = row.data();
  const std::int64_t l = r % kX16Rows;
  const std::byte* group = w.data + static_cast<std::size_t>(r / kX16Rows) * kX16Rows * row_bytes;
  if (w.layout == WeightLayout::q4k_x16)
    gather(group, w.cols / kQK_K, l, reinterpret_cast<BlockQ4_K*>(scratch));
  else if (w.layout == WeightLayout::q6k_x16)
    gather(group, w.cols / kQK_K, l, reinterpret_cast<BlockQ6_K*>(scratch));
  else if (w.layout == WeightLayout::q8_0_x16)
    gather(group, w.cols / kQK8_0, l, reinterpret_cast<BlockQ8_0*>(scratch));
  else
    gather(group, w.cols / 64, l, reinterpret_cast<PairQ4_0*>(scratch));
  return scratch;
}

}  // namespace weir::inference
