#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <iterator>
#include <string>
#include <type_traits>

#include "weir/inference/cuda/cuda_ops.hpp"

namespace weir::inference::cuda {

namespace {
Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return Error(Errc::model_error, std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
}  // namespace

DeviceInfo device_info() {
  DeviceInfo info;
  if (cudaGetDeviceCount(&info.count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    info.count = 0;
    return info;
  }
  if (info.count == 0) return info;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    info.name = prop.name;
    info.sm_major = prop.major;
    info.sm_minor = prop.minor;
  }
  cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  return info;
}

bool available() {
  return device_info().count > 0;
}

int sm_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return 0;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms;
}

Result<DeviceBuffer> DeviceBuffer::allocate(std::size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  if (cudaMalloc(&b.ptr_, bytes) != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return Error(Errc::memory_budget_exceeded, "cudaMalloc of " + std::to_string(bytes >> 20) +
                                                   " MiB failed with " +
                                                   std::to_string(free_b >> 20) + " MiB free of " +
                                                   std::to_string(total >> 20) + " MiB");
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

Status copy_to_device(void* dst, const void* src, std::size_t bytes) {
  return check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
}
Status copy_to_host(void* dst, const void* src, std::size_t bytes) {
  return check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host");
}
Status fill_bytes(void* dst, int byte, std::size_t bytes) {
  return check(cudaMemset(dst, byte, bytes), "memset");
}
Status synchronize() {
  return check(cudaDeviceSynchronize(), "synchronize");
}
Status copy_to_device_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0) return {};
  return check(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
      "async copy to device");
}
Status copy_to_host_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0) return {};
  return check(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
      "async copy to host");
}

Result<Stream> Stream::create() {
  Stream s;
  cudaStream_t raw = nullptr;
  if (auto st = check(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), "stream create"); !st)
    return std::move(st).error();
  s.s_ = raw;
  return s;
}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(static_cast<cudaStream_t>(s_));
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
Stream::~Stream() {
  if (s_) cudaStreamDestroy(static_cast<cudaStream_t>(s_));
}
Status Stream::synchronize() const {
  return check(cudaStreamSynchronize(static_cast<cudaStream_t>(s_)), "stream synchronize");
}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}
Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}
Status Graph::begin_capture(void* stream) {
  return check(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
      "begin graph capture");
}
Result<Graph> Graph::end_capture(void* stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return Error(Errc::model_error,
                 std::string("CUDA end graph capture: ") + cudaGetErrorString(e));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ie != cudaSuccess) {
    cudaGetLastError();
    return Error(Errc::model_error,
                 std::string("CUDA graph instantiate: ") + cudaGetErrorString(ie));
  }
  Graph g;
  g.exec_ = exec;
  return g;
}
Status Graph::launch(void* stream) const {
  return check(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream)),
      "graph launch");
}

namespace {

// cuBLAS is opened with dlopen on the first GEMM, not linked: linking it maps cuBLAS and
// cuBLASLt (~200 MB resident, most of it relocated data) into every weir process at startup,
// GPU or not, and a runtime whose point is bounded memory cannot start 200 MB in the hole.
struct Cublas {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  // cublas_api.h overloads cublasGemmEx for the legacy compute-type enum; this is the C symbol.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
};

// The _v2 names are what cublas_v2.h's macros call; same order as the members above.
constexpr const char* kCublasSymbols[] = {
    "cublasCreate_v2",       "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
    "cublasSetWorkspace_v2", "cublasSgemm_v2",   "cublasGemmEx",
};

Result<const Cublas*> load_cublas() {
  static const Result<const Cublas*> loaded = []() -> Result<const Cublas*> {
    static Cublas c;
    const char* names[] = {"libcublas.so." WEIR_CUBLAS_SOVERSION, "libcublas.so"};
    void* lib = nullptr;
    std::string tried;
    for (const char* n : names) {
      lib = ::dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      tried += std::string(tried.empty() ? "" : ", ") + n + " (" + ::dlerror() + ")";
    }
    if (!lib) return Error(Errc::unsupported, "cuBLAS could not be loaded: " + tried);
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      return fn != nullptr;
    };
    const char* const* n = kCublasSymbols;
    if (!sym(c.create, n[0]) || !sym(c.destroy, n[1]) || !sym(c.set_stream, n[2]) ||
        !sym(c.set_math_mode, n[3]) || !sym(c.set_workspace, n[4]) || !sym(c.sgemm, n[5]) ||
        !sym(c.gemm_ex, n[6])) {
      std::string missing;
      for (const char* name : kCublasSymbols)
        if (!::dlsym(lib, name)) missing += std::string(missing.empty() ? "" : ", ") + name;
      return Error(Errc::unsupported, "cuBLAS is missing entry points weir uses: " + missing);
    }
    return &c;
  }();
  return loaded;
}

}  // namespace

const char* const* cublas_entry_points(std::size_t* count) {
  *count = std::size(kCublasSymbols);
  return kCublasSymbols;
}

Result<Blas> Blas::create(void* stream) {
  auto lib = load_cublas();
  if (!lib) return std::move(lib).error();
  const Cublas& cb = **lib;
  Blas b;
  auto ws = DeviceBuffer::allocate(kCublasWorkspaceBytes);
  if (!ws) return std::move(ws).error();
  b.workspace_ = std::move(*ws);
  cublasHandle_t h = nullptr;
  if (cb.create(&h) != CUBLAS_STATUS_SUCCESS)
    return Error(Errc::model_error, "cuBLAS: cannot create a handle");
  b.handle_ = h;
  if (cb.set_stream(h, static_cast<cudaStream_t>(stream)) != CUBLAS_STATUS_SUCCESS ||
      cb.set_workspace(h, b.workspace_.get(), b.workspace_.bytes()) != CUBLAS_STATUS_SUCCESS)
    return Error(Errc::model_error, "cuBLAS: cannot bind the handle to its stream and workspace");
  return b;
}

Blas& Blas::operator=(Blas&& o) noexcept {
  if (this != &o) {
    if (handle_) (*load_cublas())->destroy(static_cast<cublasHandle_t>(handle_));
    handle_ = std::exchange(o.handle_, nullptr);
    workspace_ = std::move(o.workspace_);
  }
  return *this;
}

Blas::~Blas() {
  // A handle exists only if cuBLAS loaded.
  if (handle_) (*load_cublas())->destroy(static_cast<cublasHandle_t>(handle_));
}

Status Blas::gemm_f32(const float* a, const float* b, float* c, int m, int n, int k) const {
  if (!handle_) return Error(Errc::model_error, "cuBLAS: gemm on an empty handle");
  if (m <= 0 || n <= 0 || k <= 0) return {};
  const Cublas& cb = **load_cublas();
  auto h = static_cast<cublasHandle_t>(handle_);
  cb.set_math_mode(h, CUBLAS_PEDANTIC_MATH);  // FP32 exactly, no TF32
  const float one = 1.0f, zero = 0.0f;
  // Row-major C[m,n] = A[m,k] B[n,k]^T is column-major C^T[n,m] = B^T' * A' (see header).
  cublasStatus_t st = cb.sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b, k, a, k, &zero, c, n);
  if (st != CUBLAS_STATUS_SUCCESS)
    return Error(Errc::model_error, "cuBLAS sgemm failed with status " + std::to_string(st));
  return {};
}

Status Blas::gemm_bf16(const std::uint16_t* a, const std::uint16_t* b, float* c, int m, int n,
                       int k) const {
  if (!handle_) return Error(Errc::model_error, "cuBLAS: gemm on an empty handle");
  if (m <= 0 || n <= 0 || k <= 0) return {};
  const Cublas& cb = **load_cublas();
  auto h = static_cast<cublasHandle_t>(handle_);
  cb.set_math_mode(h, CUBLAS_DEFAULT_MATH);
  const float one = 1.0f, zero = 0.0f;
  // As gemm_f32: column-major C^T[n,m] = B (k x n, transposed) * A^T (k x m); FP32 C.
  cublasStatus_t st =
      cb.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16BF, k, a, CUDA_R_16BF, k,
                 &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return Error(Errc::model_error,
                 "cuBLAS GemmEx (BF16, FP32 accumulate) failed with status " + std::to_string(st));
  return {};
}

Status cublas_loadable() {
  auto c = load_cublas();
  if (!c) return std::move(c).error();
  return {};
}

Status gemm_f32(const float* a, const float* b, float* c, int m, int n, int k, void* stream) {
  auto lib = load_cublas();
  if (!lib) return lib.error();
  const Cublas& cb = **lib;
  thread_local cublasHandle_t handle = nullptr;
  if (!handle && cb.create(&handle) != CUBLAS_STATUS_SUCCESS) {
    handle = nullptr;
    return Error(Errc::model_error, "cuBLAS: cannot create a handle");
  }
  cb.set_stream(handle, static_cast<cudaStream_t>(stream));
  cb.set_math_mode(handle, CUBLAS_PEDANTIC_MATH);  // FP32 exactly, no TF32
  const float one = 1.0f, zero = 0.0f;
  // Row-major C[m,n] = A[m,k] B[n,k]^T is column-major C^T[n,m] = B^T' * A' (see header).
  cublasStatus_t st =
      cb.sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b, k, a, k, &zero, c, n);
  if (st != CUBLAS_STATUS_SUCCESS)
    return Error(Errc::model_error, "cuBLAS sgemm failed with status " + std::to_string(st));
  return {};
}

}  // namespace weir::inference::cuda
