// F16 (IEEE half) K/V for paged attention (paged_attention.cpp): the conversion on write and
// the fast path's AVX-512 + F16C build. Private to inference/.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/paged_attention.hpp"
#include "weir/inference/kv_layout.hpp"

namespace weir::inference {

// out[i] = x[i] as IEEE half, rounded to nearest (ties to even), for i < n.
void store_f16(const float* x, std::int64_t n, std::uint16_t* out);

// paged_attention's fast path (head_dim a multiple of 16, at most 128) over F16 K/V planes, on
// AVX-512 with F16C; false, having done nothing, on a CPU without them.
bool attention_f16_avx512(const std::uint16_t* k_plane, const std::uint16_t* v_plane,
                          const KvLayout& layout, const AttentionBatch& batch, const float* q,
                          float* out, float scale, std::int64_t begin, std::int64_t end,
                          std::vector<float>& scratch);

}  // namespace weir::inference
