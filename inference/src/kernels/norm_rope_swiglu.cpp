// rmsnorm, RoPE and SwiGLU of the forward path (kernels.hpp).
#include "kernels/kernels.hpp"

#include <cmath>
#include <vector>

#include "kernels/simd.hpp"

namespace weir::inference::kernels {

// The sum of squares runs in 16 lanes (one chain per lane, summed as a tree at the end): a
// single serial sum took 4 cycles an element, most of a prompt step's element-wise time.
WEIR_CLONES void rmsnorm(const float* x, const float* w, float* out, std::int64_t n,
                         std::int64_t dim, float eps) {
  for (std::int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * dim;
    simd::v16 acc = {};
    std::int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
      const simd::v16 v = simd::load16(xt + i);
      acc += v * v;
    }
    float ss = simd::sum16(acc);
    for (; i < dim; ++i) ss += xt[i] * xt[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (std::int64_t i = 0; i < dim; ++i) out[t * dim + i] = w[i] * (xt[i] * inv);
  }
}

void rope_angles(const std::int32_t* positions, std::int64_t n, int head_dim, float base,
                 float freq_scale, float* cos, float* sin) {
  thread_local std::vector<float> inv_freq;
  inv_freq.resize(static_cast<std::size_t>(head_dim / 2));
  for (int j = 0; j < head_dim / 2; ++j) inv_freq[j] = std::pow(base, -2.0f * j / head_dim);
  for (std::int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < head_dim / 2; ++j) {
      const float theta = positions[t] * freq_scale * inv_freq[j];
      cos[t * (head_dim / 2) + j] = std::cos(theta);
      sin[t * (head_dim / 2) + j] = std::sin(theta);
    }
  }
}

void rope_apply(float* x, std::int64_t n, int n_heads, int head_dim, bool neox, const float* cos,
                const float* sin) {
  const int half = head_dim / 2;
  for (std::int64_t t = 0; t < n; ++t) {
    const float* ct = cos + t * half;
    const float* st = sin + t * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int j = 0; j < half; ++j) {
        const int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = a * ct[j] - b * st[j];
        v[i1] = a * st[j] + b * ct[j];
      }
    }
  }
}

WEIR_CLONES void swiglu(float* a, const float* b, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // exp16: within 2 ulp of std::exp
    const simd::v16 x = simd::load16(a + i);
    simd::store16(a + i, x / (1.0f + simd::exp16(-x)) * simd::load16(b + i));
  }
  for (; i < n; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

}  // namespace weir::inference::kernels
