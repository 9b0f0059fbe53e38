// KvLayout: where one token's K or V lives in the paged KV pool. Shared by the CPU path and
// the CUDA kernels (WEIR_HD = __host__ __device__ under nvcc), so both index the pool the same
// way; the CPU path is the reference the CUDA kernels are tested against.
//
// Pool layout (elements of the KV type: F32; F16 or Q8_0 on the CPU runner):
//   [n_layers][2: K, V][num_blocks][block_size][n_kv_heads * head_dim]
// Q8_0 keeps int8 values in that layout, then, after all of them, one scale per head of a row
// (bf16: the upper half of an F32), [n_layers][2][num_blocks][block_size][n_kv_heads]: element e
// of the values is value[e] * scale[e / head_dim]. A block is one head of one token: attention
// applies its scale once per position (to the score, and to the probability that weights V),
// and a head's small values never share a scale with another head's large ones.
// A sequence's token at position p is in physical block block_table[p / block_size], slot
// p % block_size. Within a layer, one block's K (or V) is a contiguous
// [block_size, kv_dim] tile, so attention reads whole tiles.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define WEIR_HD __host__ __device__
#else
#define WEIR_HD
#endif

namespace weir::inference {

// A physical block of the pool, as a sequence's block table names it.
using BlockId = std::int32_t;

// A block copy the engine must perform before the next forward pass (copy-on-write).
struct BlockCopy {
  BlockId src;
  BlockId dst;
};

// The element type of the KV pool. F16 (IEEE half) halves the pool's bytes: twice the tokens in
// the same budget, half the memory attention reads; values are rounded to 11 significant bits.
// Q8_0 keeps each head of each token's K and V as int8 values with one 2-byte scale: 66 bytes
// for a head of 64, 0.26 of F32's. Each value is rounded to the nearest of 255 steps of the
// head's largest magnitude (per token and head, as LMDeploy's int8 KV cache).
enum class KvType : std::int32_t { f32 = 0, f16 = 1, q8_0 = 2 };

struct KvLayout {
  std::int32_t n_layers = 0;
  std::int32_t n_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t block_size = 16;
  std::int32_t num_blocks = 0;
  KvType type = KvType::f32;

  // Bytes of one value (Q8_0: without its share of the scales).
  WEIR_HD std::int64_t elem_bytes() const {
    return type == KvType::f16 ? 2 : type == KvType::q8_0 ? 1 : 4;
  }
  WEIR_HD std::int64_t kv_dim() const { return std::int64_t{n_kv_heads} * head_dim; }
  // Elements of one block's K (or V) tile for one layer: [block_size, kv_dim].
  WEIR_HD std::int64_t tile_elems() const { return std::int64_t{block_size} * kv_dim(); }
  // Elements of one layer's K (or V) for the whole pool.
  WEIR_HD std::int64_t plane_elems() const { return tile_elems() * num_blocks; }
  WEIR_HD std::int64_t total_elems() const { return plane_elems() * 2 * n_layers; }
  // Bytes that one block costs across all layers, K and V: the unit of the KV budget.
  WEIR_HD std::int64_t block_bytes(std::int64_t elem_bytes) const {
    return tile_elems() * 2 * n_layers * elem_bytes;
  }
  // The same for this layout's type, scales included.
  WEIR_HD std::int64_t type_block_bytes() const {
    return block_bytes(elem_bytes()) + scale_bytes(tile_elems() * 2 * n_layers);
  }
  // Bytes of the whole pool, scales included; the scales start at values_bytes().
  WEIR_HD std::int64_t values_bytes() const { return total_elems() * elem_bytes(); }
  WEIR_HD std::int64_t total_bytes() const { return values_bytes() + scale_bytes(total_elems()); }
  // Bytes of the scales of `elems` values (whole heads; 0 but for Q8_0).
  WEIR_HD std::int64_t scale_bytes(std::int64_t elems) const {
    return type == KvType::q8_0 ? elems / head_dim * 2 : 0;
  }
  // Offset of the row (kv_dim elements) of `slot` in `block`; kv = 0 for K, 1 for V.
  WEIR_HD std::int64_t row_offset(std::int32_t layer, std::int32_t kv, std::int32_t block,
                                  std::int32_t slot) const {
    return (std::int64_t{layer} * 2 + kv) * plane_elems() + std::int64_t{block} * tile_elems() +
           std::int64_t{slot} * kv_dim();
  }
};

static_assert(sizeof(KvLayout) == 24, "KvLayout is shared with CUDA kernels: keep it POD");

}  // namespace weir::inference
