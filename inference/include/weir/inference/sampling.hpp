// Choosing the next token from logits: greedy (ties: lowest id), or temperature sampling
// filtered by top-k, top-p (nucleus) and min-p, after a repetition penalty over recent tokens.
// A seeded generator makes runs repeatable: the same seed and logits give the same tokens.
//
// Thread safety: a Sampler is used by one thread (the engine's, per request).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace weir::inference {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  std::int32_t top_k = 0;           // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keeps tokens with p >= min_p * p(top)
  float repetition_penalty = 1.0f;  // 1: off; logits of recent tokens: >0 divided, <0 multiplied
  std::int32_t repetition_window = 64;
  std::uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(p), rng_(p.seed) {}
  // `history`: the tokens so far (prompt and generated), for the repetition penalty.
  std::int32_t sample(std::span<const float> logits, std::span<const std::int32_t> history);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, std::int32_t>> cand_;  // reused
};

}  // namespace weir::inference
