// The CUDA forward pass: a StepRunner that keeps the weights (uploaded once, FP32) and the paged
// KV pool in GPU memory and runs each step with cuBLAS GEMMs and weir's kernels. The KV pool is
// sized from cudaMemGetInfo times `memory_fraction`, minus the weights and the activation
// workspace for the largest batch (`max_batch_tokens`); a model that does not fit fails at
// creation with the numbers. All device memory is allocated at creation (activations grow only
// if a batch exceeds max_batch_tokens), none in the step loop.
//
// Thread safety: forward() runs on the engine thread only.
#pragma once

#include <memory>

#include "weir/inference/engine.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference::cuda {

struct CudaRunnerOptions {
  float memory_fraction = 0.90f;
  std::int64_t max_batch_tokens = 2048;
};

// Errors: unsupported (no CUDA device), memory_budget_exceeded (the model does not fit).
Result<std::unique_ptr<StepRunner>> make_cuda_runner(std::shared_ptr<const Model> model,
                                                     CudaRunnerOptions options = {});

}  // namespace weir::inference::cuda
