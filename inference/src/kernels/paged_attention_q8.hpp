// Q8_0 K/V for paged attention (paged_attention.cpp; the layout in kv_layout.hpp): quantizing on
// write, reading a scale, and the fast path's AVX-512 build. Private to inference/.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "kernels/paged_attention.hpp"
#include "weir/inference/kv_layout.hpp"

namespace weir::inference {

// A Q8_0 scale (bf16: the upper half of an F32) as a float.
inline float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

// n floats (n a multiple of `block`: the head size) as Q8_0: per block, the scale is the largest
// magnitude / 127 rounded to bf16 (to nearest even), and each value the nearest multiple of that
// stored scale (so the scale's rounding adds no error).
void store_q8(const float* x, std::int64_t n, std::int32_t block, std::int8_t* q,
              std::uint16_t* scales);

// paged_attention's fast path (head_dim a multiple of 16, at most 128) over Q8_0 K/V planes of the
// pool whose values start at `values` and scales at `scales` (kv_layout.hpp), on AVX-512 with
// VNNI; false, having done nothing, on a CPU without them. The query is rounded to int8 per head
// for the scores, so this path's results differ from the generic path's by that rounding.
bool attention_q8_avx512_vnni(const std::int8_t* values, const std::uint16_t* scales,
                              const std::int8_t* k_plane, const std::int8_t* v_plane,
                              const KvLayout& layout, const AttentionBatch& batch, const float* q,
                              float* out, float scale, std::int64_t begin, std::int64_t end,
                              std::vector<float>& scratch);

}  // namespace weir::inference
