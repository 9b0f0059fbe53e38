// The CUDA backend's decisions that need no GPU: weight precision, memory sizing, the
// split of decode attention over the context, and which steps are replayed as CUDA graphs.
// Pure functions of their arguments, so the CPU tests check them on any machine
// (tests/inference/cuda_plan_test.cpp); the runner and the launchers only apply them.
//
// Thread safety: everything here is a pure function or a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "weir/inference/kv_layout.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference::cuda {

// How GEMM weights are held on the device. bf16: F32 tensors are rounded to BF16 once at
// upload (Q8_0 is dequantised, then rounded) and GEMMs run in BF16 with FP32 accumulation.
// fp32: weights stay FP32 and GEMMs are exact FP32 (no TF32): the mode of the golden tests.
enum class Precision { bf16, fp32 };
const char* precision_name(Precision p);

// BF16 as its 16 bits: round to nearest even; NaN stays a (quiet) NaN. Same rounding as
// CUDA's __float2bfloat16_rn, so host-rounded weights equal device-rounded activations.
WEIR_HD inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  std::memcpy(&u, &f, sizeof u);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
WEIR_HD inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t{h} << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// IEEE half (bits) to float, exact for every value (GGUF's F16 and Q8_0 block scales).
WEIR_HD inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (std::uint32_t{h} & 0x8000u) << 16;
  const std::uint32_t exp = (std::uint32_t{h} >> 10) & 0x1fu, man = std::uint32_t{h} & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man x 2^-24, exact in float
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  const std::uint32_t bits =
      sign | (exp == 31 ? 0x7f800000u | (man << 13) : ((exp + 112u) << 23) | (man << 13));
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// ---- Memory -----------------------------------------------------------------------------

// The shapes that size the activation workspace (one step of up to max_batch_tokens tokens).
struct ActivationShape {
  std::int64_t max_batch_tokens = 0;
  std::int64_t max_logit_rows = 0;  // logits are computed in chunks of this many rows
  std::int32_t dim = 0, hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_vocab = 0;
  Precision precision = Precision::bf16;
  int sm_count = 0;  // for the split-K attention partials (see attention_partial_floats)
};
// Bytes of every activation buffer the forward pass uses for a batch of max_batch_tokens:
// FP32 residual stream, q/k/v, attention output, FFN, one chunk of logits rows, the BF16
// copy of GEMM inputs (bf16 mode), split-K attention partials, the batch metadata, and the
// cuBLAS workspace.
std::size_t activation_workspace_bytes(const ActivationShape& s);

inline constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;  // Hopper's advice

struct MemoryPlan {
  std::size_t usable_bytes = 0;  // free x fraction
  std::size_t weight_bytes = 0, workspace_bytes = 0;
  std::size_t kv_bytes = 0;  // what is left for the KV block pool
};
// usable = free_bytes x fraction; kv = usable - weights - workspace. Errors:
// memory_budget_exceeded when kv < min_kv_bytes, the message carrying every number (MiB).
Result<MemoryPlan> plan_memory(std::size_t free_bytes, double fraction, std::size_t weight_bytes,
                               std::size_t workspace_bytes, std::size_t min_kv_bytes);

// ---- Split-K decode attention -----------------------------------------------------------

// Long contexts are split over `splits` chunks of `chunk` positions; each chunk is one thread
// block writing a partial (max, sum, unnormalised output) and a reduce kernel merges them.
struct AttentionSplit {
  int splits = 1;  // 1: one block per (token, head), no reduce
  int chunk = 0;   // positions per split (> 0 when splits > 1)
};
// (Written out: this header is also compiled as CUDA C++17.)
inline bool operator==(const AttentionSplit& a, const AttentionSplit& b) {
  return a.splits == b.splits && a.chunk == b.chunk;
}
inline constexpr int kSplitMinContext = 512;  // below this one block per (token, head) is best
inline constexpr int kSplitMinChunk = 256;    // never split finer than this many positions
inline constexpr int kSplitMaxSplits = 32;
inline constexpr int kSplitBlocksPerSm = 4;  // aim for this many blocks per SM in total
// max_context: the longest context any token of the batch may attend to (positions 0..n-1).
// Depends only on its arguments, so a graph keyed on them always launches the same grid.
AttentionSplit plan_attention_split(long long token_heads, long long max_context, int sm_count);
// Floats of partials the split can need for any batch: splits > 1 only while
// token_heads x splits stays under about 2 x target blocks (sm_count x kSplitBlocksPerSm).
std::size_t attention_partial_floats(int sm_count, int head_dim);

// ---- Tiled prefill attention -------------------------------------------------------------

// A prefill tile: up to kPrefillTile tokens of one sequence at consecutive positions, which
// share every K/V tile they read (the tiled prefill kernel reads K/V once per tile, not once
// per token).
inline constexpr int kPrefillTile = 16;
// Splits a batch's tokens (in batch order) into tiles: a tile ends at kPrefillTile tokens,
// at a change of sequence, or where positions stop being consecutive. out: pairs
// [first token, count], replaced. Returns the number of tiles.
int build_prefill_tiles(const std::int32_t* positions, const std::int32_t* seq_index, int n,
                        std::vector<std::int32_t>& out);

// ---- CUDA graphs of decode steps -------------------------------------------------------

// A step's launch shape: every kernel's grid and every by-value argument depends on these
// only (device pointers are fixed at creation), so one captured graph replays any step with
// the same key.
struct GraphKey {
  int n_tokens = 0, n_seqs = 0, table_stride = 0, logit_rows = 0;
};
inline bool operator<(const GraphKey& a, const GraphKey& b) {
  if (a.n_tokens != b.n_tokens) return a.n_tokens < b.n_tokens;
  if (a.n_seqs != b.n_seqs) return a.n_seqs < b.n_seqs;
  if (a.table_stride != b.table_stride) return a.table_stride < b.table_stride;
  return a.logit_rows < b.logit_rows;
}
inline bool operator==(const GraphKey& a, const GraphKey& b) {
  return !(a < b) && !(b < a);
}
// The block-table row length used for a batch whose longest table has max_blocks entries:
// the next power of two (at least 4), so decode steps of a growing context reuse one graph
// for many steps. Never more than cap (the pool's longest possible table), never less than
// max_blocks.
int table_stride_for(int max_blocks, int cap);
// A step is captured when it is pure decode (one token per sequence), has at most
// max_graph_tokens tokens, and returns logits only for its own tokens. nullopt: run eagerly.
std::optional<GraphKey> decode_graph_key(int n_tokens, int n_seqs, int logit_rows, int table_stride,
                                         int max_graph_tokens);

}  // namespace weir::inference::cuda
