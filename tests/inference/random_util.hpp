// Random inputs shared by the inference kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace weir::inference::testing {

// n floats from N(0, scale^2), the same for the same seed.
inline std::vector<float> randn(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> N(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = N(rng);
  return v;
}

}  // namespace weir::inference::testing
