// Launchers of weir's CUDA kernels (the kernels: kernels.cuh). Each has a CPU reference (see
// cuda_ops.hpp).
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "kernels.cuh"
#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_plan.hpp"

namespace weir::inference::cuda {

namespace {

Status check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return {};
  return Error(Errc::model_error, std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

cudaStream_t S(void* s) {
  return static_cast<cudaStream_t>(s);
}

unsigned blocks_for(long long n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace

Status rms_norm(const float* x, const float* w, float* out, int n, int dim, float eps,
                void* stream) {
  if (n <= 0 || dim <= 0)
    return Error(Errc::invalid_argument, "rms_norm: n and dim must be positive");
  rms_norm_kernel<<<n, 256, 0, S(stream)>>>(x, w, out, dim, eps);
  return check_launch("rms_norm");
}

Status rope(float* x, const std::int32_t* positions, int n, int n_heads, int head_dim, float base,
            float freq_scale, bool neox, void* stream) {
  if (head_dim % 2)
    return Error(Errc::invalid_argument,
                 "rope: head_dim must be even, got " + std::to_string(head_dim));
  const long long pairs = static_cast<long long>(n) * n_heads * (head_dim / 2);
  if (pairs == 0) return {};
  rope_kernel<<<blocks_for(pairs, 256), 256, 0, S(stream)>>>(x, positions, n, n_heads, head_dim,
                                                             base, freq_scale, neox ? 1 : 0);
  return check_launch("rope");
}

Status swiglu(const float* gate, const float* up, float* out, int n, int hidden, void* stream) {
  const long long total = static_cast<long long>(n) * hidden;
  if (total == 0) return {};
  swiglu_kernel<<<blocks_for(total, 256), 256, 0, S(stream)>>>(gate, up, out, total);
  return check_launch("swiglu");
}

Status embed(const float* table, const std::int32_t* tokens, float* out, int n, int dim,
             void* stream) {
  if (n == 0) return {};
  embed_kernel<<<n, 128, 0, S(stream)>>>(table, tokens, out, dim);
  return check_launch("embed");
}

Status write_kv(float* pool, const KvLayout& layout, int layer, const PagedBatch& batch,
                const float* k, const float* v, void* stream) {
  if (batch.n_tokens == 0) return {};
  write_kv_kernel<<<batch.n_tokens, 128, 0, S(stream)>>>(pool, layout, layer, batch, k, v);
  return check_launch("write_kv");
}

namespace {
using AttnKernel = void (*)(const float*, KvLayout, int, PagedBatch, const float*, float*, int,
                            float, int, float*, float*);
struct AttnEntry {
  int head_dim;
  AttnKernel kernel;
};
// The head sizes compiled in; one table instead of a macro switch.
constexpr AttnEntry kAttnKernels[] = {
    {8, paged_attention_kernel<8>},     {16, paged_attention_kernel<16>},
    {32, paged_attention_kernel<32>},   {48, paged_attention_kernel<48>},
    {64, paged_attention_kernel<64>},   {80, paged_attention_kernel<80>},
    {96, paged_attention_kernel<96>},   {128, paged_attention_kernel<128>},
    {160, paged_attention_kernel<160>}, {192, paged_attention_kernel<192>},
    {256, paged_attention_kernel<256>},
};
}  // namespace

bool paged_attention_supported(int head_dim) {
  for (const auto& entry : kAttnKernels)
    if (entry.head_dim == head_dim) return true;
  return false;
}

Status paged_attention(const float* pool, const KvLayout& layout, int layer,
                       const PagedBatch& batch, const float* q, float* out, int n_heads,
                       float scale, void* stream) {
  return paged_attention(pool, layout, layer, batch, q, out, n_heads, scale, AttentionSplit{},
                         nullptr, stream);
}

Status paged_attention(const float* pool, const KvLayout& layout, int layer,
                       const PagedBatch& batch, const float* q, float* out, int n_heads,
                       float scale, const AttentionSplit& split, float* partials, void* stream) {
  if (layout.n_kv_heads <= 0 || n_heads <= 0 || n_heads % layout.n_kv_heads != 0) {
    return Error(Errc::invalid_argument,
                 "paged_attention: n_heads=" + std::to_string(n_heads) +
                     " is not a multiple of n_kv_heads=" + std::to_string(layout.n_kv_heads));
  }
  if (split.splits < 1 || split.splits > kSplitMaxSplits ||
      (split.splits > 1 && (split.chunk <= 0 || partials == nullptr))) {
    return Error(Errc::invalid_argument, "paged_attention: bad split (" +
                                             std::to_string(split.splits) + " splits of " +
                                             std::to_string(split.chunk) + " positions, partials " +
                                             (partials ? "given" : "missing") + ")");
  }
  for (const auto& entry : kAttnKernels) {
    if (entry.head_dim != layout.head_dim) continue;
    if (batch.n_tokens == 0) return {};
    const long long th = static_cast<long long>(batch.n_tokens) * n_heads;
    if (th > 0x7fffffffLL)
      return Error(Errc::invalid_argument, "paged_attention: too many tokens x heads");
    const dim3 grid(static_cast<unsigned>(th), static_cast<unsigned>(split.splits));
    float* part_o = split.splits > 1 ? partials : nullptr;
    float* part_ml = split.splits > 1 ? partials + th * split.splits * layout.head_dim : nullptr;
    entry.kernel<<<grid, kAttnWarps * 32, 0, S(stream)>>>(
        pool, layout, layer, batch, q, out, n_heads, scale, split.chunk, part_o, part_ml);
    if (auto st = check_launch("paged_attention"); !st) return st;
    if (split.splits == 1) return {};
    attention_reduce_kernel<<<static_cast<unsigned>(th), 128, 0, S(stream)>>>(
        part_o, part_ml, batch.positions, out, n_heads, layout.head_dim, split.splits, split.chunk);
    return check_launch("attention_reduce");
  }
  std::string sizes;
  for (const auto& entry : kAttnKernels)
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(entry.head_dim);
  return Error(Errc::unsupported, "paged_attention: head size " + std::to_string(layout.head_dim) +
                                      " has no CUDA kernel (compiled: " + sizes +
                                      "); use --device cpu");
}

namespace {
using PrefillKernel = void (*)(const float*, KvLayout, int, PagedBatch, const std::int32_t*,
                               const float*, float*, int, float);
struct PrefillEntry {
  int head_dim;
  PrefillKernel kernel;
};
// Head sizes up to 128 keep the tile's Q, K and V within 48 KB of static shared memory.
constexpr PrefillEntry kPrefillKernels[] = {
    {8, paged_prefill_kernel<8>},   {16, paged_prefill_kernel<16>},
    {32, paged_prefill_kernel<32>}, {48, paged_prefill_kernel<48>},
    {64, paged_prefill_kernel<64>}, {80, paged_prefill_kernel<80>},
    {96, paged_prefill_kernel<96>}, {128, paged_prefill_kernel<128>},
};
static_assert(kPrefillTile % kAttnWarps == 0, "every warp serves the same number of queries");
static_assert(sizeof(float) * (kPrefillTile * 128 + kPrefillKeys * 129 + kPrefillKeys * 128) <=
                  48 * 1024,
              "the prefill tile must fit in static shared memory");
}  // namespace

bool prefill_attention_supported(int head_dim) {
  for (const auto& entry : kPrefillKernels)
    if (entry.head_dim == head_dim) return true;
  return false;
}

Status paged_prefill_attention(const float* pool, const KvLayout& layout, int layer,
                               const PagedBatch& batch, const std::int32_t* tiles, int n_tiles,
                               const float* q, float* out, int n_heads, float scale, void* stream) {
  if (layout.n_kv_heads <= 0 || n_heads <= 0 || n_heads % layout.n_kv_heads != 0) {
    return Error(Errc::invalid_argument,
                 "paged_prefill_attention: n_heads=" + std::to_string(n_heads) +
                     " is not a multiple of n_kv_heads=" + std::to_string(layout.n_kv_heads));
  }
  for (const auto& entry : kPrefillKernels) {
    if (entry.head_dim != layout.head_dim) continue;
    if (n_tiles <= 0) return {};
    const long long blocks = static_cast<long long>(n_tiles) * n_heads;
    if (blocks > 0x7fffffffLL)
      return Error(Errc::invalid_argument, "paged_prefill_attention: too many tiles x heads");
    entry.kernel<<<static_cast<unsigned>(blocks), kAttnWarps * 32, 0, S(stream)>>>(
        pool, layout, layer, batch, tiles, q, out, n_heads, scale);
    return check_launch("paged_prefill_attention");
  }
  return Error(Errc::unsupported, "paged_prefill_attention: head size " +
                                      std::to_string(layout.head_dim) +
                                      " has no tiled kernel (up to 128); use paged_attention");
}

namespace {
Status dequantize_q8_0(const void* q8, long long rows, int cols, void* out, bool bf16,
                       void* stream) {
  if (rows <= 0 || cols <= 0 || cols % 32 != 0) {
    return Error(Errc::invalid_argument, "dequantize_q8_0: a [" + std::to_string(rows) + ", " +
                                             std::to_string(cols) +
                                             "] matrix is not whole Q8_0 blocks of 32");
  }
  const long long n = rows * cols;
  const auto* q = static_cast<const std::uint8_t*>(q8);
  if (bf16) {
    dequant_q8_0_kernel<true><<<blocks_for(n, 256), 256, 0, S(stream)>>>(q, out, n, cols);
  } else {
    dequant_q8_0_kernel<false><<<blocks_for(n, 256), 256, 0, S(stream)>>>(q, out, n, cols);
  }
  return check_launch("dequantize_q8_0");
}
}  // namespace

Status dequantize_q8_0(const void* q8, long long rows, int cols, float* out, void* stream) {
  return dequantize_q8_0(q8, rows, cols, static_cast<void*>(out), false, stream);
}
Status dequantize_q8_0(const void* q8, long long rows, int cols, std::uint16_t* out, void* stream) {
  return dequantize_q8_0(q8, rows, cols, static_cast<void*>(out), true, stream);
}

Status f32_to_bf16(const float* x, std::uint16_t* out, long long n, void* stream) {
  if (n <= 0) return {};
  f32_to_bf16_kernel<<<blocks_for(n, 256), 256, 0, S(stream)>>>(x, out, n);
  return check_launch("f32_to_bf16");
}

Status embed_bf16(const std::uint16_t* table, const std::int32_t* tokens, float* out, int n,
                  int dim, void* stream) {
  if (n == 0) return {};
  embed_bf16_kernel<<<n, 128, 0, S(stream)>>>(table, tokens, out, dim);
  return check_launch("embed_bf16");
}

Status add_inplace(float* x, const float* y, long long n, void* stream) {
  if (n == 0) return {};
  add_kernel<<<blocks_for(n, 256), 256, 0, S(stream)>>>(x, y, n);
  return check_launch("add");
}

Status add_bias(float* x, const float* bias, int rows, int cols, void* stream) {
  const long long n = static_cast<long long>(rows) * cols;
  if (n == 0) return {};
  add_bias_kernel<<<blocks_for(n, 256), 256, 0, S(stream)>>>(x, bias, n, cols);
  return check_launch("add_bias");
}

Status gather_rows(const float* x, const std::int32_t* rows, float* out, int n, int cols,
                   void* stream) {
  if (n == 0) return {};
  gather_kernel<<<n, 128, 0, S(stream)>>>(x, rows, out, cols);
  return check_launch("gather_rows");
}

Status copy_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S(stream)) != cudaSuccess) {
    return Error(Errc::model_error,
                 std::string("CUDA copy: ") + cudaGetErrorString(cudaGetLastError()));
  }
  return {};
}

Status argmax_rows(const float* logits, std::int32_t* out, int rows, int cols, void* stream) {
  if (rows == 0) return {};
  argmax_kernel<<<rows, 256, 0, S(stream)>>>(logits, out, cols);
  return check_launch("argmax");
}

}  // namespace weir::inference::cuda
