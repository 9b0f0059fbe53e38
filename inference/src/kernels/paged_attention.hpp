// Attention over the paged KV pool (CPU), and the contiguous reference it is tested against.
//
// A step's batch mixes sequences: token i belongs to sequence seq_index[i] at position
// positions[i]. write_kv() stores each token's K and V rows in its slot
// (block_table[pos / block_size], pos % block_size); paged_attention() then lets each token
// attend causally over positions 0..pos of its own sequence, reading K/V through the block
// table. Writing the whole batch first makes chunked prefill causal within the chunk.
// Grouped-query attention: query head h reads KV head h / (n_heads / n_kv_heads).
//
// Thread safety: paged_attention() only reads the pool; distinct work ranges may run on
// distinct threads at once (each with its own scratch).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_cache.hpp"
#include "weir/inference/kv_layout.hpp"

namespace weir::inference {

struct AttentionBatch {
  std::span<const std::int32_t> positions;                 // [n_tokens]
  std::span<const std::int32_t> seq_index;                 // [n_tokens]
  std::span<const std::span<const BlockId>> block_tables;  // [n_seqs]
  std::int32_t n_heads = 0;                                // query heads
};

// pool: layout.total_bytes() bytes: elements of layout.type (F16: read through std::uint16_t, two
// to a float; Q8_0: int8, then the scales); k, v: [n_tokens, kv_dim] floats, rounded to half
// (F16) or quantized in blocks of 32 (Q8_0) as they are stored.
void write_kv(std::span<float> pool, const KvLayout& layout, std::int32_t layer,
              const AttentionBatch& batch, const float* k, const float* v);

// Work items are (token, head) pairs, item = token * n_heads + head; computes items
// [begin, end). q, out: [n_tokens, n_heads * head_dim]. scratch: at least max position + 1
// floats. scale: usually 1/sqrt(head_dim).
void paged_attention(std::span<const float> pool, const KvLayout& layout, std::int32_t layer,
                     const AttentionBatch& batch, const float* q, float* out, float scale,
                     std::int64_t begin, std::int64_t end, std::vector<float>& scratch);

// The reference: one sequence, contiguous K/V. q, out: [n_q, n_heads, head_dim] for
// positions q_pos[0..n_q); k, v: [n_ctx, n_kv_heads, head_dim].
void reference_attention(const float* q, std::span<const std::int32_t> q_pos, const float* k,
                         const float* v, std::int32_t n_heads, std::int32_t n_kv_heads,
                         std::int32_t head_dim, float scale, float* out);

}  // namespace weir::inference
