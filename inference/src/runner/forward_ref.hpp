// The reference forward pass: plain scalar code, one sequence, contiguous KV cache, read top to
// bottom like llama2.c's forward(). It is the oracle the fast paged path and the CUDA backend
// are tested against; it is not meant to be fast.
//
// Thread safety: a ReferenceSession is used by one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "weir/inference/model.hpp"

namespace weir::inference {

class ReferenceSession {
 public:
  explicit ReferenceSession(const Model& model);
  // Feeds `token` at position `pos` (0, 1, 2, ... in order) and returns the logits [n_vocab].
  // REQUIRES: pos < context_length, and every earlier position was fed.
  std::vector<float> step(std::int32_t token, std::int32_t pos);

 private:
  const Model& m_;
  std::vector<float> key_cache_, value_cache_;  // [n_layers, context_length, kv_dim] each
};

}  // namespace weir::inference
