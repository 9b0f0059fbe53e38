// The fast CPU forward pass over the paged KV cache: the StepRunner the Engine uses for a
// LLaMA-family Model. A step's batch (tokens of several sequences, prefill chunks and decode
// tokens mixed) goes through each layer together, so every weight row is read once per step;
// attention reads K/V through the block tables (paged_attention.hpp); logits are computed only
// for the rows the engine samples.
//
// Thread safety: forward() is called by the engine thread only; it uses its own ThreadPool.
#pragma once

#include <memory>

#include "weir/inference/engine.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {

// threads: 0 = hardware concurrency.
std::unique_ptr<StepRunner> make_llama_runner(std::shared_ptr<const Model> model, int threads = 1);

}  // namespace weir::inference
