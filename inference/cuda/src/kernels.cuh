// The device code of weir's CUDA kernels (launchers: kernels.cu). Kept apart so that
// tests/inference/cuda_emulated_test.cpp can also compile it for the host under a small
// emulation of the CUDA execution model (blocks of std::threads, barriers for __syncthreads
// and warp shuffles): the kernels' index math, masking and merging are checked there on any
// machine, before a GPU ever runs them.
//
// Device code only; no host API calls. Include once per translation unit.
#pragma once

#include <cfloat>
#include <cstdint>

#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_plan.hpp"

namespace weir::inference::cuda {
namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block; every thread gets the result. REQUIRES: blockDim.x a multiple of 32.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float x = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : 0.0f;
    x = warp_sum(x);
    if (lane == 0) total = x;
  }
  __syncthreads();
  return total;
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* out, int dim, float eps) {
  const float* row = x + static_cast<long long>(blockIdx.x) * dim;  // [dim]
  float* orow = out + static_cast<long long>(blockIdx.x) * dim;     // [dim]
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = w[i] * (row[i] * inv);
}

__global__ void rope_kernel(float* x, const std::int32_t* positions, int n, int n_heads,
                            int head_dim, float base, float freq_scale, int neox) {
  const int half = head_dim / 2;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(n) * n_heads * half) return;
  const int j = static_cast<int>(idx % half);
  const long long th = idx / half;  // token * n_heads + head
  const int tok = static_cast<int>(th / n_heads);
  float* v = x + th * head_dim;  // [head_dim]
  const float theta = positions[tok] * freq_scale * powf(base, -2.0f * j / head_dim);
  float c, s;
  sincosf(theta, &s, &c);
  const int i0 = neox ? j : 2 * j;
  const int i1 = neox ? j + half : 2 * j + 1;
  const float a = v[i0], b = v[i1];
  v[i0] = a * c - b * s;
  v[i1] = a * s + b * c;
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, long long total) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void embed_kernel(const float* table, const std::int32_t* tokens, float* out, int dim) {
  const float* src = table + static_cast<long long>(tokens[blockIdx.x]) * dim;
  float* dst = out + static_cast<long long>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

__global__ void write_kv_kernel(float* pool, KvLayout L, int layer, PagedBatch b, const float* k,
                                const float* v) {
  const int tok = blockIdx.x;
  const int pos = b.positions[tok];
  const std::int32_t* table =
      b.block_tables + static_cast<long long>(b.seq_index[tok]) * b.max_blocks_per_seq;
  const int block = table[pos / L.block_size];
  const int slot = pos % L.block_size;
  const long long kv_dim = L.kv_dim();
  float* kd = pool + L.row_offset(layer, 0, block, slot);
  float* vd = pool + L.row_offset(layer, 1, block, slot);
  for (long long i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    kd[i] = k[tok * kv_dim + i];
    vd[i] = v[tok * kv_dim + i];
  }
}

__global__ void add_kernel(float* x, const float* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* bias, long long n, int cols) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += bias[i % cols];
}

__global__ void gather_kernel(const float* x, const std::int32_t* rows, float* out, int cols) {
  const float* src = x + static_cast<long long>(rows[blockIdx.x]) * cols;
  float* dst = out + static_cast<long long>(blockIdx.x) * cols;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = src[i];
}

constexpr int kAttnWarps = 4;

// One thread block per (token, head, split). Each warp walks every kAttnWarps-th position of
// the block's range with an online softmax; lane l holds elements l, l+32, ... of the head;
// warps merge at the end. Unsplit (gridDim.y == 1): the range is 0..pos and the block writes
// the normalised output. Split: the range is split*chunk .. (split+1)*chunk-1 (the last split
// runs to pos), and the block writes its partial: the unnormalised output for its max M and
// (M, sum) for attention_reduce_kernel. Splits past pos exit without writing.
template <int HD>
__global__ void __launch_bounds__(kAttnWarps * 32)
    paged_attention_kernel(const float* pool, KvLayout L, int layer, PagedBatch b, const float* q,
                           float* out, int n_heads, float scale, int chunk, float* part_o,
                           float* part_ml) {
  constexpr int E = (HD + 31) / 32;
  const int tok = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const int split = blockIdx.y, splits = gridDim.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kvh = h / (n_heads / L.n_kv_heads);
  const int pos = b.positions[tok];
  const int p_begin = splits == 1 ? 0 : split * chunk;
  if (p_begin > pos) return;  // block-uniform: no __syncthreads is skipped by part of a block
  const int p_end = (splits == 1 || split == splits - 1) ? pos + 1 : min(pos + 1, p_begin + chunk);
  const std::int32_t* table =
      b.block_tables + static_cast<long long>(b.seq_index[tok]) * b.max_blocks_per_seq;
  const float* qh = q + (static_cast<long long>(tok) * n_heads + h) * HD;  // [HD]
  const float* k_plane = pool + L.row_offset(layer, 0, 0, 0);
  const float* v_plane = pool + L.row_offset(layer, 1, 0, 0);
  const long long kv_dim = L.kv_dim();

  float qr[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    qr[e] = d < HD ? qh[d] : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int p = p_begin + warp; p < p_end; p += kAttnWarps) {
    const long long row =
        table[p / L.block_size] * L.tile_elems() + (p % L.block_size) * kv_dim + kvh * HD;
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < HD) s += qr[e] * k_plane[row + d];
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float c = expf(m - m_new), w = expf(s - m_new);
    l = l * c + w;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < HD) acc[e] = acc[e] * c + w * v_plane[row + d];
    }
    m = m_new;
  }

  __shared__ float sm_m[kAttnWarps], sm_l[kAttnWarps];
  __shared__ float sm_acc[kAttnWarps][HD];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    if (d < HD) sm_acc[warp][d] = acc[e];
  }
  __syncthreads();
  if (warp != 0) return;
  float M = -FLT_MAX;
  for (int w = 0; w < kAttnWarps; ++w)
    if (sm_l[w] > 0.0f) M = fmaxf(M, sm_m[w]);
  float denom = 0.0f, f[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w)
    denom += sm_l[w] * (f[w] = sm_l[w] > 0.0f ? expf(sm_m[w] - M) : 0.0f);
  const long long th = static_cast<long long>(tok) * n_heads + h;
  if (splits == 1) {
    float* oh = out + th * HD;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d >= HD) continue;
      float o = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) o += sm_acc[w][d] * f[w];
      oh[d] = o / denom;
    }
    return;
  }
  const long long ps = th * splits + split;
  float* po = part_o + ps * HD;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + 32 * e;
    if (d >= HD) continue;
    float o = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) o += sm_acc[w][d] * f[w];
    po[d] = o;
  }
  if (lane == 0) {
    part_ml[2 * ps] = M;
    part_ml[2 * ps + 1] = denom;
  }
}

// Merges the splits of one (token, head): out = sum_s o_s e^(M_s - M) / sum_s l_s e^(M_s - M)
// over the splits that hold positions (split * chunk <= pos).
__global__ void attention_reduce_kernel(const float* part_o, const float* part_ml,
                                        const std::int32_t* positions, float* out, int n_heads,
                                        int head_dim, int splits, int chunk) {
  const long long th = blockIdx.x;
  const int pos = positions[th / n_heads];
  const int nv = min(pos / chunk + 1, splits);
  const float* ml = part_ml + th * splits * 2;
  float M = -FLT_MAX;
  for (int s = 0; s < nv; ++s)
    if (ml[2 * s + 1] > 0.0f) M = fmaxf(M, ml[2 * s]);
  float denom = 0.0f;
  for (int s = 0; s < nv; ++s)
    if (ml[2 * s + 1] > 0.0f) denom += ml[2 * s + 1] * expf(ml[2 * s] - M);
  const float inv = 1.0f / denom;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < nv; ++s)
      if (ml[2 * s + 1] > 0.0f) o += part_o[(th * splits + s) * head_dim + d] * expf(ml[2 * s] - M);
    out[th * head_dim + d] = o * inv;
  }
}

// Prefill attention, one thread block per (tile, head): a tile is up to kPrefillTile tokens
// of one sequence at consecutive positions (build_prefill_tiles). The tile's queries sit in
// shared memory; K/V are read through the block table kPrefillKeys positions at a time into
// shared memory, once for the whole tile; warp w serves queries w, w + 4, ...; lane j scores
// key j of the chunk, and each query keeps an online softmax (running max m, sum l) with lane
// l accumulating output elements l, l + 32, ... Causal: query at position p sees keys 0..p.
constexpr int kPrefillKeys = 32;  // = warp size: one key per lane
constexpr int kPrefillQueriesPerWarp = kPrefillTile / kAttnWarps;

template <int HD>
__global__ void __launch_bounds__(kAttnWarps * 32)
    paged_prefill_kernel(const float* pool, KvLayout L, int layer, PagedBatch b,
                         const std::int32_t* tiles, const float* q, float* out, int n_heads,
                         float scale) {
  constexpr int E = (HD + 31) / 32;
  constexpr int QPW = kPrefillQueriesPerWarp;
  __shared__ float qs[kPrefillTile][HD];
  __shared__ float ks[kPrefillKeys][HD + 1];  // +1: lanes read different rows, same column
  __shared__ float vs[kPrefillKeys][HD];
  const int tile = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first = tiles[2 * tile], count = tiles[2 * tile + 1];
  const int kvh = h / (n_heads / L.n_kv_heads);
  const int pos0 = b.positions[first];
  const int last_pos = pos0 + count - 1;  // the tile's positions are consecutive
  const std::int32_t* table =
      b.block_tables + static_cast<long long>(b.seq_index[first]) * b.max_blocks_per_seq;
  const float* k_plane = pool + L.row_offset(layer, 0, 0, 0);
  const float* v_plane = pool + L.row_offset(layer, 1, 0, 0);
  const long long kv_dim = L.kv_dim();

  for (int i = threadIdx.x; i < kPrefillTile * HD; i += blockDim.x) {
    const int t = i / HD, d = i % HD;
    qs[t][d] = t < count ? q[(static_cast<long long>(first + t) * n_heads + h) * HD + d] : 0.0f;
  }
  float m[QPW], l[QPW], acc[QPW][E];
#pragma unroll
  for (int j = 0; j < QPW; ++j) {
    m[j] = -FLT_MAX;
    l[j] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[j][e] = 0.0f;
  }
  for (int k0 = 0; k0 <= last_pos; k0 += kPrefillKeys) {
    __syncthreads();  // the previous chunk is consumed (and, first time, qs is written)
    for (int i = threadIdx.x; i < kPrefillKeys * HD; i += blockDim.x) {
      const int j = i / HD, d = i % HD, kp = k0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (kp <= last_pos) {
        const long long row =
            table[kp / L.block_size] * L.tile_elems() + (kp % L.block_size) * kv_dim + kvh * HD;
        kv = k_plane[row + d];
        vv = v_plane[row + d];
      }
      ks[j][d] = kv;
      vs[j][d] = vv;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < QPW; ++j) {
      const int t = warp + kAttnWarps * j;  // warp-uniform
      if (t >= count || k0 > pos0 + t) continue;
      const int kp = k0 + lane;
      float sc = 0.0f;
#pragma unroll 8
      for (int d = 0; d < HD; ++d) sc += qs[t][d] * ks[lane][d];
      sc = kp <= pos0 + t ? sc * scale : -FLT_MAX;
      float cmax = sc;
      for (int o = 16; o > 0; o >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
      const float m_new = fmaxf(m[j], cmax);  // key k0 <= pos0 + t is unmasked: finite
      const float c = expf(m[j] - m_new);
      const float p = kp <= pos0 + t ? expf(sc - m_new) : 0.0f;
      l[j] = l[j] * c + warp_sum(p);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[j][e] *= c;
      for (int key = 0; key < kPrefillKeys; ++key) {
        const float pk = __shfl_sync(0xffffffffu, p, key);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int d = lane + 32 * e;
          if (d < HD) acc[j][e] += pk * vs[key][d];
        }
      }
      m[j] = m_new;
    }
  }
#pragma unroll
  for (int j = 0; j < QPW; ++j) {
    const int t = warp + kAttnWarps * j;
    if (t >= count) continue;
    float* oh = out + (static_cast<long long>(first + t) * n_heads + h) * HD;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane + 32 * e;
      if (d < HD) oh[d] = acc[j][e] / l[j];
    }
  }
}

__global__ void f32_to_bf16_kernel(const float* x, std::uint16_t* out, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float_to_bf16(x[i]);
}

__global__ void embed_bf16_kernel(const std::uint16_t* table, const std::int32_t* tokens,
                                  float* out, int dim) {
  const std::uint16_t* src = table + static_cast<long long>(tokens[blockIdx.x]) * dim;
  float* dst = out + static_cast<long long>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = bf16_to_float(src[i]);
}

// Q8_0 (ggml's blocks of 32: an FP16 scale, then 32 int8) to FP32 or BF16, one thread per
// element of a row-major [rows, cols] matrix; cols is a multiple of 32.
template <bool kBf16>
__global__ void dequant_q8_0_kernel(const std::uint8_t* q, void* out, long long n, int cols) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const long long r = i / cols;
  const int c = static_cast<int>(i % cols);
  const std::uint8_t* blk = q + (r * (cols / 32) + c / 32) * 34;
  const float d = fp16_to_float(static_cast<std::uint16_t>(blk[0] | (blk[1] << 8)));
  const float v = d * static_cast<float>(static_cast<std::int8_t>(blk[2 + c % 32]));
  if constexpr (kBf16) {
    static_cast<std::uint16_t*>(out)[i] = float_to_bf16(v);
  } else {
    static_cast<float*>(out)[i] = v;
  }
}

__global__ void argmax_kernel(const float* logits, std::int32_t* out, int cols) {
  const float* row = logits + static_cast<long long>(blockIdx.x) * cols;
  float best = -FLT_MAX;
  int best_i = cols;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    if (row[i] > best) best = row[i], best_i = i;  // strided: lowest index per thread wins ties
  }
  __shared__ float sv[256];
  __shared__ int si[256];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float v2 = sv[threadIdx.x + stride];
      const int i2 = si[threadIdx.x + stride];
      if (v2 > sv[threadIdx.x] || (v2 == sv[threadIdx.x] && i2 < si[threadIdx.x])) {
        sv[threadIdx.x] = v2;
        si[threadIdx.x] = i2;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0];
}

}  // namespace
}  // namespace weir::inference::cuda
