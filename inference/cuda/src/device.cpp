#include <cublas_v2.h>
#include <cuda_runtime.h>

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

Status gemm_f32(const float* a, const float* b, float* c, int m, int n, int k, void* stream) {
  thread_local cublasHandle_t handle = nullptr;
  if (!handle && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    handle = nullptr;
    return Error(Errc::model_error, "cuBLAS: cannot create a handle");
  }
  cublasSetStream(handle, static_cast<cudaStream_t>(stream));
  cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);  // FP32 exactly, no TF32
  const float one = 1.0f, zero = 0.0f;
  // Row-major C[m,n] = A[m,k] B[n,k]^T is column-major C^T[n,m] = B^T' * A' (see header).
  cublasStatus_t st =
      cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b, k, a, k, &zero, c, n);
  if (st != CUBLAS_STATUS_SUCCESS)
    return Error(Errc::model_error, "cuBLAS sgemm failed with status " + std::to_string(st));
  return {};
}

}  // namespace weir::inference::cuda
