#include <cublas_v2.h>
#include <dlfcn.h>

#include <cuda_runtime.h>
#include <string>
#include <type_traits>

#include <string>

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

namespace {

// cuBLAS is opened with dlopen on the first GEMM, not linked: linking it maps cuBLAS and
// cuBLASLt (~200 MB resident, most of it relocated data) into every weir process at startup,
// GPU or not, and a runtime whose point is bounded memory cannot start 200 MB in the hole.
struct Cublas {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
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
    // The _v2 names are what cublas_v2.h's macros call.
    if (!sym(c.create, "cublasCreate_v2") || !sym(c.set_stream, "cublasSetStream_v2") ||
        !sym(c.set_math_mode, "cublasSetMathMode") || !sym(c.sgemm, "cublasSgemm_v2"))
      return Error(Errc::unsupported, "cuBLAS is missing an entry point weir uses");
    return &c;
  }();
  return loaded;
}

}  // namespace

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
