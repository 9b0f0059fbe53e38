// The Q4_K x16 layout; see repack.hpp.
#include "repack.hpp"

#include <cstring>
#include <vector>

#include "x86.hpp"

#ifdef WEIR_X86
#include "gemm_avx512.hpp"
#endif

namespace weir::inference {

bool cpu_reads_q4k_x16() {
#ifdef WEIR_X86
  return kernels::detail::have_vnni();
#else
  return false;
#endif
}

void repack_q4k_x16(std::byte* data, std::int64_t rows, std::int64_t cols) {
  const std::int64_t sblocks = cols / kQK_K;
  const std::size_t group_bytes = kX16Chunk * static_cast<std::size_t>(sblocks);
  std::vector<BlockQ4_K> rows16(static_cast<std::size_t>(kX16Rows * sblocks));
  for (std::int64_t g = 0; g < rows / kX16Rows; ++g) {
    std::byte* base = data + static_cast<std::size_t>(g) * group_bytes;
    std::memcpy(rows16.data(), base, group_bytes);  // the group's 16 rows, as in the file
    for (std::int64_t i = 0; i < sblocks; ++i) {
      std::byte* c = base + static_cast<std::size_t>(i) * kX16Chunk;
      for (std::int64_t l = 0; l < kX16Rows; ++l) {
        const BlockQ4_K& b = rows16[static_cast<std::size_t>(l * sblocks + i)];
        std::memcpy(c + kX16D + 2 * l, &b.d, 2);
        std::memcpy(c + kX16Dmin + 2 * l, &b.dmin, 2);
        for (int w = 0; w < 3; ++w)
          std::memcpy(c + kX16Scales + 64 * w + 4 * l, b.scales + 4 * w, 4);
        for (int j = 0; j < 32; ++j)
          std::memcpy(c + kX16Qs + 64 * x16_qs_slot(j) + 4 * l, b.qs + 4 * j, 4);
      }
    }
  }
}

const std::byte* row_bytes_of(const Weight& w, std::int64_t r, std::byte* scratch) {
  const std::size_t row_bytes = w.row_bytes();
  if (w.layout == WeightLayout::rows || r >= w.rows / kX16Rows * kX16Rows)
    return w.data + static_cast<std::size_t>(r) * row_bytes;
  const std::int64_t sblocks = w.cols / kQK_K, l = r % kX16Rows;
  const std::byte* group = w.data + static_cast<std::size_t>(r / kX16Rows) * kX16Rows * row_bytes;
  auto* out = reinterpret_cast<BlockQ4_K*>(scratch);
  for (std::int64_t i = 0; i < sblocks; ++i) {
    const std::byte* c = group + static_cast<std::size_t>(i) * kX16Chunk;
    BlockQ4_K& b = out[i];
    std::memcpy(&b.d, c + kX16D + 2 * l, 2);
    std::memcpy(&b.dmin, c + kX16Dmin + 2 * l, 2);
    for (int k = 0; k < 3; ++k) std::memcpy(b.scales + 4 * k, c + kX16Scales + 64 * k + 4 * l, 4);
    for (int j = 0; j < 32; ++j)
      std::memcpy(b.qs + 4 * j, c + kX16Qs + 64 * x16_qs_slot(j) + 4 * l, 4);
  }
  return scratch;
}

}  // namespace weir::inference
