// The CUDA backend's operations, as host functions over device pointers.
//
// This header includes no CUDA headers, so it can be used from any C++ translation unit; a
// stream is passed as `void*` (a cudaStream_t; null = the default stream). Every kernel has a
// CPU counterpart that is its reference: tests/inference/cuda_ops_test.cpp compares them on a
// GPU on random inputs with poisoned outputs, cuda_emulated_test.cpp on the CPU under an
// emulation of the CUDA execution model (the kernels' device code is src/kernels.cuh).
// Layouts and index math for the paged KV pool come from kv_layout.hpp, compiled for host and
// device alike.
//
// Shapes are written [rows, cols], row-major; all tensors here are FP32 unless named otherwise.
// Launchers check their arguments (supported head sizes, sizes > 0) and return an Error naming
// the unsupported configuration; kernels themselves never fail.
//
// Thread safety: functions are reentrant; a DeviceBuffer is owned by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "weir/inference/cuda/cuda_plan.hpp"
#include "weir/inference/kv_layout.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference::cuda {

struct DeviceInfo {
  int count = 0;     // CUDA devices visible
  std::string name;  // device 0
  int sm_major = 0, sm_minor = 0;
  std::size_t total_bytes = 0, free_bytes = 0;
};

// Never fails: count == 0 when there is no driver or device.
DeviceInfo device_info();
bool available();
// Streaming multiprocessors of device 0; 0 without a device.
int sm_count();

// A plain cudaMalloc'd buffer, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> allocate(std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

Status copy_to_device(void* dst, const void* src, std::size_t bytes);
Status copy_to_host(void* dst, const void* src, std::size_t bytes);
Status fill_bytes(void* dst, int byte, std::size_t bytes);
Status synchronize();

// out[n, dim] = x[n, dim] * w[dim] / sqrt(mean(x^2) + eps)
Status rms_norm(const float* x, const float* w, float* out, int n, int dim, float eps,
                void* stream = nullptr);

// In place on x[n, n_heads, head_dim] with positions[n]. Normal mode rotates adjacent pairs
// (x[2j], x[2j+1]); NeoX mode rotates (x[j], x[j + head_dim/2]).
// theta = pos * freq_scale * base^(-2j/head_dim).
Status rope(float* x, const std::int32_t* positions, int n, int n_heads, int head_dim, float base,
            float freq_scale, bool neox, void* stream = nullptr);

// out[n, hidden] = silu(gate[n, hidden]) * up[n, hidden]
Status swiglu(const float* gate, const float* up, float* out, int n, int hidden,
              void* stream = nullptr);

// out[n, dim] = table[tokens[i], :]
Status embed(const float* table, const std::int32_t* tokens, float* out, int n, int dim,
             void* stream = nullptr);
// The same from a BF16 table (bits as uint16, see cuda_plan.hpp), widened to FP32.
Status embed_bf16(const std::uint16_t* table, const std::int32_t* tokens, float* out, int n,
                  int dim, void* stream = nullptr);
// out[rows, cols] = a Q8_0 matrix (ggml's block layout, rows of cols / 32 blocks of 34 bytes)
// dequantised to FP32, or to BF16 (rounded once, from the FP32 value dequantize_row gives).
// Errors: invalid_argument when cols is not a multiple of 32.
Status dequantize_q8_0(const void* q8, long long rows, int cols, float* out,
                       void* stream = nullptr);
Status dequantize_q8_0(const void* q8, long long rows, int cols, std::uint16_t* out,
                       void* stream = nullptr);
// out[n] = bf16(x[n]), round to nearest even (float_to_bf16 on the host is the reference).
Status f32_to_bf16(const float* x, std::uint16_t* out, long long n, void* stream = nullptr);

// The batch's view of the paged pool, in device memory.
struct PagedBatch {
  const std::int32_t* positions;     // [n_tokens]
  const std::int32_t* seq_index;     // [n_tokens]
  const std::int32_t* block_tables;  // [n_seqs, max_blocks_per_seq]
  int max_blocks_per_seq;
  int n_tokens;
};

// Passed by value to kernels (and baked into captured graphs): plain data only.
static_assert(std::is_trivially_copyable_v<PagedBatch> && std::is_standard_layout_v<PagedBatch>,
              "PagedBatch is a kernel argument: keep it POD");
static_assert(std::is_trivially_copyable_v<KvLayout> && std::is_standard_layout_v<KvLayout>,
              "KvLayout is a kernel argument: keep it POD");

// k, v: [n_tokens, kv_dim] written to their slots in pool ([layout.total_elems()]).
Status write_kv(float* pool, const KvLayout& layout, int layer, const PagedBatch& batch,
                const float* k, const float* v, void* stream = nullptr);

// out[n_tokens, n_heads, head_dim]: each token attends over positions 0..pos of its sequence
// through the block table (one thread block per token and head, online softmax, any context
// length). head_dim: 32, 48, 64, 80, 96, 128, 256, or any multiple of 32 up to 256; and 8 / 16
// for test-sized models.
Status paged_attention(const float* pool, const KvLayout& layout, int layer,
                       const PagedBatch& batch, const float* q, float* out, int n_heads,
                       float scale, void* stream = nullptr);
// Whether paged_attention has a kernel for this head size (the list above).
bool paged_attention_supported(int head_dim);
// The same with the context split (split-K over positions, see cuda_plan.hpp): split.splits
// blocks per (token, head) write partials, then a reduce kernel merges them into out.
// partials: device floats, at least n_tokens * n_heads * split.splits * (head_dim + 2);
// unused when split.splits == 1. The result equals the unsplit kernel's up to rounding.
Status paged_attention(const float* pool, const KvLayout& layout, int layer,
                       const PagedBatch& batch, const float* q, float* out, int n_heads,
                       float scale, const AttentionSplit& split, float* partials,
                       void* stream = nullptr);

// Prefill attention over the paged pool, tiled (cuda_plan.hpp's build_prefill_tiles): one
// thread block per (tile, head) reads each K/V position once for the tile's up to
// kPrefillTile queries, online softmax, causal within the tile. tiles: device int pairs
// [first token, count], n_tiles of them, covering every token whose output is wanted. Same
// result as paged_attention up to rounding. Head sizes: prefill_attention_supported (8, 16,
// 32, 48, 64, 80, 96, 128); others are an `unsupported` error (use paged_attention).
bool prefill_attention_supported(int head_dim);
Status paged_prefill_attention(const float* pool, const KvLayout& layout, int layer,
                               const PagedBatch& batch, const std::int32_t* tiles, int n_tiles,
                               const float* q, float* out, int n_heads, float scale,
                               void* stream = nullptr);

// x[n] += y[n]
Status add_inplace(float* x, const float* y, long long n, void* stream = nullptr);
// x[rows, cols] += bias[cols] on every row
Status add_bias(float* x, const float* bias, int rows, int cols, void* stream = nullptr);
// out[i, :] = x[rows[i], :] for i < n; rows of `cols` floats. rows: device [n].
Status gather_rows(const float* x, const std::int32_t* rows, float* out, int n, int cols,
                   void* stream = nullptr);
// dst[...] = src[...], device to device
Status copy_device(void* dst, const void* src, std::size_t bytes, void* stream = nullptr);

// out[rows] = argmax over logits[rows, cols] (ties: lowest index).
Status argmax_rows(const float* logits, std::int32_t* out, int rows, int cols,
                   void* stream = nullptr);

// C[m, n] = A[m, k] * B[n, k]^T  (B holds weights row-major as [out, in], like GGUF), FP32 with
// cuBLAS (TF32 off). A cuBLAS handle is created once per thread. cuBLAS is opened with dlopen
// on first use, not linked (it would cost every weir process ~200 MB resident at startup).
Status gemm_f32(const float* a, const float* b, float* c, int m, int n, int k,
                void* stream = nullptr);

// A cuBLAS handle bound to one stream, with its own workspace (kCublasWorkspaceBytes, set
// with cublasSetWorkspace) so its GEMMs can be captured into CUDA graphs without cuBLAS
// allocating. Created once (by a runner, at load); used by one thread at a time.
class Blas {
 public:
  Blas() = default;
  // Errors: unsupported (cuBLAS cannot be loaded), model_error, memory_budget_exceeded.
  static Result<Blas> create(void* stream);
  Blas(Blas&& o) noexcept
      : handle_(std::exchange(o.handle_, nullptr)), workspace_(std::move(o.workspace_)) {}
  Blas& operator=(Blas&& o) noexcept;
  ~Blas();
  // C[m, n] = A[m, k] * B[n, k]^T in exact FP32 (no TF32).
  Status gemm_f32(const float* a, const float* b, float* c, int m, int n, int k) const;
  // C[m, n] (FP32) = A[m, k] * B[n, k]^T with A and B in BF16, FP32 accumulation
  // (cublasGemmEx, CUBLAS_COMPUTE_32F).
  Status gemm_bf16(const std::uint16_t* a, const std::uint16_t* b, float* c, int m, int n,
                   int k) const;

 private:
  void* handle_ = nullptr;  // cublasHandle_t
  DeviceBuffer workspace_;
};

// A non-blocking CUDA stream (the legacy default stream cannot be captured into a graph).
class Stream {
 public:
  Stream() = default;
  static Result<Stream> create();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  ~Stream();
  void* get() const { return s_; }
  Status synchronize() const;

 private:
  void* s_ = nullptr;
};

// Host-to-device / device-to-host copies ordered on a stream (host memory must stay valid
// until the stream is synchronised).
Status copy_to_device_async(void* dst, const void* src, std::size_t bytes, void* stream);
Status copy_to_host_async(void* dst, const void* src, std::size_t bytes, void* stream);

// An instantiated CUDA graph: what was launched on a stream between begin_capture and
// end_capture (thread-local capture mode), replayed by launch().
class Graph {
 public:
  Graph() = default;
  Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  Graph& operator=(Graph&& o) noexcept;
  ~Graph();
  static Status begin_capture(void* stream);
  // Ends the capture (also after a failed launch, so the stream is usable again) and
  // instantiates the graph. Errors: model_error naming the CUDA error.
  static Result<Graph> end_capture(void* stream);
  Status launch(void* stream) const;

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// The cuBLAS symbols weir resolves with dlsym (cublas_loadable checks every one).
const char* const* cublas_entry_points(std::size_t* count);

// Whether cuBLAS can be opened (and has the entry points weir uses); needs no GPU.
// Errors: unsupported naming the libraries tried.
Status cublas_loadable();

}  // namespace weir::inference::cuda
