// The CUDA forward pass: a StepRunner that keeps the weights (uploaded once: BF16 by default,
// FP32 on request; Q8_0 layer matrices as Q8_0, dequantised in the GEMM path) and the paged
// KV pool (FP32) in GPU memory and runs each step on its own
// stream with cuBLAS GEMMs and weir's kernels.
//
// Memory: before anything is uploaded, the KV pool's share is planned (cuda_plan.hpp):
// cudaMemGetInfo's free bytes x `memory_fraction`, minus the weights and the activation
// workspace for the largest batch (`max_batch_tokens`); a model that does not fit fails at
// creation with the numbers. Weights, activations, the cuBLAS workspace, attention partials
// and batch metadata are plain cudaMallocs made at creation and in allocate_kv_pool; a step
// allocates nothing unless its batch exceeds max_batch_tokens (or its block tables exceed the
// reserved size), and then the buffers grow once and the captured graphs are dropped.
//
// CUDA graphs: a pure decode step (one token per sequence, at most max_graph_tokens) is
// captured the first time its shape (cuda_plan.hpp's GraphKey) is seen and replayed after;
// at most max_graphs are kept, the least recently used dropped first. Other steps, and every
// step after a failed capture, run eagerly.
//
// Thread safety: forward() runs on the engine thread only.
#pragma once

#include <memory>

#include "weir/inference/cuda/cuda_plan.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference::cuda {

struct CudaRunnerOptions {
  float memory_fraction = 0.90f;
  std::int64_t max_batch_tokens = 2048;
  Precision precision = Precision::bf16;  // fp32: exact FP32 GEMMs (the goldens)
  bool cuda_graphs = true;
  int max_graph_tokens = 256;  // decode batches up to this many sequences are captured
  int max_graphs = 64;         // captured shapes kept (least recently used dropped first)
  int max_logit_rows = 256;    // logits are computed in chunks of this many rows
  // Layer matrices stored as Q8_0 stay Q8_0 in GPU memory (1.06 bytes a weight instead of 2)
  // and are dequantised into a scratch matrix before each GEMM; false: converted at load.
  bool q8_0_on_device = true;
};

// Errors: unsupported (no CUDA device, one older than sm_80, a head size without a kernel,
// cuBLAS not loadable: make_runner's auto mode then uses the CPU), memory_budget_exceeded
// (the model does not fit; the message has the numbers).
Result<std::unique_ptr<StepRunner>> make_cuda_runner(std::shared_ptr<const Model> model,
                                                     CudaRunnerOptions options = {});

}  // namespace weir::inference::cuda
