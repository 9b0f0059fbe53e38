// A small host emulation of the CUDA execution model, enough to run weir's kernels
// (inference/cuda/src/kernels.cuh) on the CPU in tests: a launch runs every block of the grid
// in turn on blockDim.x std::threads; __syncthreads is a barrier of the block's threads; warp
// shuffles exchange through a per-warp buffer between two barriers of the warp's 32 threads;
// __shared__ variables are function statics (one block runs at a time).
//
// What it checks: index math, bounds, masking, the order of barriers and shuffles (a kernel
// whose threads disagree on them deadlocks here), and the arithmetic, in FP32 as on a GPU.
// What it cannot: memory-model races between threads that a GPU would expose, timing, and
// anything of the CUDA runtime. Include after every other header and before kernels.cuh.
#pragma once

#include <barrier>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3() = default;
  constexpr dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace weir_emu {
inline thread_local dim3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline float warp_buffer[32][32];  // [warp][lane], up to 1024 threads

inline float exchange(float v, unsigned src_lane) {
  const unsigned w = thread_idx.x / 32, lane = thread_idx.x % 32;
  warp_buffer[w][lane] = v;
  warp_barriers[w]->arrive_and_wait();
  const float r = warp_buffer[w][src_lane % 32];
  warp_barriers[w]->arrive_and_wait();
  return r;
}

// Runs kernel(args...) over grid x threads; threads must be a multiple of 32, at most 1024.
template <class Kernel, class... Args>
void launch(dim3 grid, unsigned threads, Kernel kernel, Args... args) {
  block_dim = dim3(threads);
  grid_dim = grid;
  std::barrier<> block(static_cast<std::ptrdiff_t>(threads));
  block_barrier = &block;
  warp_barriers.clear();
  for (unsigned w = 0; w < threads / 32; ++w)
    warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      thread_idx = dim3(t);
      for (unsigned by = 0; by < grid.y; ++by) {
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          block_idx = dim3(bx, by);
          kernel(args...);
          block.arrive_and_wait();  // the next block reuses the __shared__ statics
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  block_barrier = nullptr;
}
}  // namespace weir_emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define threadIdx weir_emu::thread_idx
#define blockIdx weir_emu::block_idx
#define blockDim weir_emu::block_dim
#define gridDim weir_emu::grid_dim

inline void __syncthreads() {
  weir_emu::block_barrier->arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return weir_emu::exchange(v, (weir_emu::thread_idx.x % 32) ^ static_cast<unsigned>(mask));
}
inline float __shfl_sync(unsigned, float v, int src) {
  return weir_emu::exchange(v, static_cast<unsigned>(src));
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
