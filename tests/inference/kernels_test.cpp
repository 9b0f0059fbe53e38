// The matmul kernels against naive references, on every path this machine has: the AVX-512
// GEMMs for batches and the AVX-512 VNNI decode kernels (native; F32, and Q8_0 / Q4_0 / Q4_K /
// Q6_K with VNNI), the AVX2 and per-ISA loops they fall back to (avx2), and the portable loops
// (portable). Shapes are odd on purpose: token counts
// around the 16- and 32-token panels, rows that are not a multiple of the row tiles, columns a
// multiple of 32.
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <span>
#include <string>

#include <gtest/gtest.h>

#include "kernels/gemm_avx512.hpp"  // private: inference/src
#include "kernels/gemv_vnni.hpp"
#include "kernels/kernels.hpp"
#include "kernels/kernels_portable.hpp"
#include "model/quant.hpp"
#include "model/repack.hpp"
#include "random_util.hpp"
#include "weir/inference/gguf_writer.hpp"

namespace weir::inference {
namespace {

using kernels::KernelIsa;

using weir::inference::testing::randn;

const char* isa_name(KernelIsa isa) {
  return isa == KernelIsa::native ? "native" : isa == KernelIsa::avx2 ? "avx2" : "portable";
}

struct Shape {
  std::int64_t rows, cols;
};

constexpr Shape kShapes[] = {{13, 32}, {29, 96}, {24, 288}, {7, 64}, {5, 800}};
constexpr std::int64_t kTokens[] = {1, 3, 4, 5, 17, 33, 64};
constexpr std::int64_t kSmallBatches[] = {1, 2, 3, 4, 5, 7, 9, 15};  // under the K-quant GEMM
constexpr KernelIsa kIsas[] = {KernelIsa::native, KernelIsa::avx2, KernelIsa::portable};

// The activations' Q8_0 blocks, as ggml's reference quantiser makes them: xq [x.size()] quants,
// xd [x.size() / 32] scales.
void quantise_activations(const std::vector<float>& x, std::vector<std::int8_t>& xq,
                          std::vector<float>& xd) {
  xq.resize(x.size());
  xd.resize(x.size() / 32);
  for (std::size_t b = 0; b < xd.size(); ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f, inv = d ? 1.0f / d : 0.0f;
    xd[b] = fp16_to_fp32(fp32_to_fp16(d));
    for (int j = 0; j < 32; ++j) {
      const float v = x[b * 32 + j] * inv;
      xq[b * 32 + j] = static_cast<std::int8_t>(static_cast<int>(v + (v >= 0 ? 0.5f : -0.5f)));
    }
  }
}

class Kernels : public ::testing::Test {
 protected:
  void TearDown() override { kernels::force_kernel_isa(KernelIsa::native); }
};

TEST_F(Kernels, F32MatmulMatchesNaive) {
  for (const Shape s : kShapes) {
    const auto w = randn(static_cast<std::size_t>(s.rows * s.cols), 1 + s.rows);
    const Weight wt{GgmlType::f32, reinterpret_cast<const std::byte*>(w.data()), s.rows, s.cols};
    for (std::int64_t n : kTokens) {
      const auto x = randn(static_cast<std::size_t>(n * s.cols), 100 + n);
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        for (KernelIsa isa : kIsas) {
          kernels::force_kernel_isa(isa);
          SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                       " n=" + std::to_string(n) + " threads=" + std::to_string(threads) + " " +
                       isa_name(isa));
          std::vector<float> y(static_cast<std::size_t>(n * s.rows), NAN);
          std::vector<std::int8_t> qx;
          std::vector<float> qs;
          kernels::matmul(wt, x.data(), n, y.data(), pool, qx, qs);
          for (std::int64_t t = 0; t < n; ++t) {
            for (std::int64_t r = 0; r < s.rows; ++r) {
              double want = 0, mag = 0;
              for (std::int64_t i = 0; i < s.cols; ++i) {
                want += double(w[r * s.cols + i]) * x[t * s.cols + i];
                mag += std::fabs(double(w[r * s.cols + i]) * x[t * s.cols + i]);
              }
              ASSERT_NEAR(y[t * s.rows + r], want, 1e-6 * mag + 1e-6)
                  << "token " << t << " row " << r;
            }
          }
        }
      }
    }
  }
}

// matmul_many (one quantisation and one fork-join for Q, K and V in a decode step; one packed x
// and one fork-join over all row tiles in a batch) gives what matmul gives for each weight alone,
// bit for bit: the same kernels on the same rows. Row counts that do not divide the tiles or the
// thread shares. Mixed types: n = 20 sends Q4_K to the GEMM and Q6_K to the decode kernels, so
// matmul_many falls back to one matmul each; one type: every batch size takes the fused GEMM
// once it is past the type's threshold (16 tokens Q4_K, 32 Q6_K; 33 is a 32 and a 16 panel).
using WeightSpecs = std::vector<std::pair<GgmlType, std::int64_t>>;
class MatmulMany : public Kernels, public ::testing::WithParamInterface<WeightSpecs> {};

INSTANTIATE_TEST_SUITE_P(
    Kernels, MatmulMany,
    ::testing::Values(WeightSpecs{{GgmlType::q4_k, 37},
                                  {GgmlType::q6_k, 5},
                                  {GgmlType::q4_k, 16},
                                  {GgmlType::q8_0, 9}},
                      WeightSpecs{{GgmlType::f32, 37}, {GgmlType::f32, 5}, {GgmlType::f32, 24}},
                      WeightSpecs{{GgmlType::q8_0, 37}, {GgmlType::q8_0, 5}, {GgmlType::q8_0, 24}},
                      WeightSpecs{{GgmlType::q4_0, 37}, {GgmlType::q4_0, 5}},
                      WeightSpecs{{GgmlType::q4_k, 37}, {GgmlType::q4_k, 5}},
                      WeightSpecs{{GgmlType::q6_k, 37}, {GgmlType::q6_k, 5}}));

TEST_P(MatmulMany, EqualsOneMatmulEach) {
  const std::int64_t cols = 512;
  const WeightSpecs& specs = GetParam();
  std::vector<std::string> bytes;
  std::vector<Weight> ws;
  for (const auto& [type, rows] : specs) {
    auto q = quantize_tensor(randn(static_cast<std::size_t>(rows * cols), 50 + rows, 0.05f), type);
    ASSERT_TRUE(q);
    bytes.push_back(std::move(*q));
  }
  for (std::size_t i = 0; i < bytes.size(); ++i)
    ws.push_back({specs[i].first, reinterpret_cast<const std::byte*>(bytes[i].data()),
                  specs[i].second, cols});
  for (std::int64_t n : {1, 2, 3, 5, 20, 33}) {
    const auto x = randn(static_cast<std::size_t>(n * cols), 400 + n);
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      for (KernelIsa isa : kIsas) {
        kernels::force_kernel_isa(isa);
        SCOPED_TRACE("n=" + std::to_string(n) + " threads=" + std::to_string(threads) + " " +
                     isa_name(isa));
        std::vector<std::int8_t> qx;
        std::vector<float> qs;
        std::vector<std::vector<float>> one(ws.size()), many(ws.size());
        std::vector<kernels::MatmulOut> outs;
        for (std::size_t i = 0; i < ws.size(); ++i) {
          one[i].assign(static_cast<std::size_t>(n * ws[i].rows), NAN);
          many[i].assign(static_cast<std::size_t>(n * ws[i].rows), NAN);
          kernels::matmul(ws[i], x.data(), n, one[i].data(), pool, qx, qs);
          outs.push_back({ws[i], many[i].data()});
        }
        kernels::matmul_many(outs, x.data(), n, pool, qx, qs);
        for (std::size_t i = 0; i < ws.size(); ++i) {
          for (std::size_t j = 0; j < one[i].size(); ++j)
            ASSERT_EQ(many[i][j], one[i][j]) << "matrix " << i << " element " << j;
        }
      }
    }
  }
}

#ifdef WEIR_X86
// The decode path's AVX-512 activation quantiser gives quantize_q8's quants and scales exactly:
// random rows, an all-zero block, values on rounding ties, one large outlier per row.
TEST_F(Kernels, AvxQuantiserEqualsPortable) {
  if (!kernels::detail::have_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (std::int64_t cols : {32, 96, 2048, 5632}) {
    for (std::int64_t n : {1, 3, 5}) {
      auto x = randn(static_cast<std::size_t>(n * cols), 600 + cols + n);
      for (std::int64_t i = 0; i < 32; ++i) x[static_cast<std::size_t>(i)] = 0.0f;
      for (std::int64_t t = 0; t < n; ++t) x[static_cast<std::size_t>(t * cols + cols / 2)] = 50.0f;
      if (cols >= 64) {  // a block whose max is 127: every integer value is a tie at +-0.5
        for (int j = 0; j < 32; ++j)
          x[static_cast<std::size_t>(32 + j)] = j == 0 ? 127.0f : j - 16.5f;
      }
      std::vector<std::int8_t> q0, q1;
      std::vector<float> s0, s1;
      kernels::detail::quantize_q8(x.data(), n, cols, q0, s0);
      kernels::detail::quantize_q8_avx512(x.data(), n, cols, q1, s1);
      ASSERT_EQ(q0, q1) << cols << " x " << n;
      ASSERT_EQ(s0, s1) << cols << " x " << n;
    }
  }
}
#endif

// Runs kernels::matmul on inputs of each token count in `tokens` (random, seeded by `seed` + n,
// the first block all zeros) with 1 and 3 threads and every ISA, and checks each output against
// reference(t, r, xq, xd) = {value, magnitude} within `rel` * magnitude + 1e-7, where xq and xd
// are the activations quantised to Q8_0 blocks as every path quantises them.
template <class Reference>
void check_matmul(GgmlType type, const Weight& wt, const Shape& s,
                  std::span<const std::int64_t> tokens, unsigned seed, double rel,
                  Reference reference) {
  for (std::int64_t n : tokens) {
    auto x = randn(static_cast<std::size_t>(n * s.cols), seed + n);
    for (std::int64_t i = 0; i < 32 && i < n * s.cols; ++i) x[i] = 0.0f;  // an all-zero block
    std::vector<std::int8_t> xq;
    std::vector<float> xd;
    quantise_activations(x, xq, xd);
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      for (KernelIsa isa : kIsas) {
        kernels::force_kernel_isa(isa);
        SCOPED_TRACE(std::string(ggml_type_name(type)) + " " + std::to_string(s.rows) + "x" +
                     std::to_string(s.cols) + " n=" + std::to_string(n) +
                     " threads=" + std::to_string(threads) + " " + isa_name(isa));
        std::vector<float> y(static_cast<std::size_t>(n * s.rows), NAN);
        std::vector<std::int8_t> qx;
        std::vector<float> qs;
        kernels::matmul(wt, x.data(), n, y.data(), pool, qx, qs);
        for (std::int64_t t = 0; t < n; ++t) {
          for (std::int64_t r = 0; r < s.rows; ++r) {
            const auto [want, mag] = reference(t, r, xq, xd);
            ASSERT_NEAR(y[t * s.rows + r], want, rel * mag + 1e-7) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

// Q8_0 and Q4_0 weights: every path quantises the activations to Q8_0 blocks (ggml's rounding,
// the scale rounded to fp16) and sums d_w * d_x * (integer dot) per block, so the reference
// does exactly that in double; only the float summation order may differ.
class BlockKernels : public Kernels, public ::testing::WithParamInterface<GgmlType> {};

TEST_P(BlockKernels, MatmulMatchesQuantisedReference) {
  const GgmlType type = GetParam();
  for (const Shape s : kShapes) {
    const auto wf = randn(static_cast<std::size_t>(s.rows * s.cols), 7 + s.rows, 0.05f);
    auto bytes = quantize_tensor(wf, type);
    ASSERT_TRUE(bytes);
    const Weight wt{type, reinterpret_cast<const std::byte*>(bytes->data()), s.rows, s.cols};
    const std::int64_t blocks = s.cols / 32;
    // Each weight block's scale and integer quants, as the kernels see them.
    std::vector<float> wd(static_cast<std::size_t>(s.rows * blocks));
    std::vector<std::int8_t> wq(static_cast<std::size_t>(s.rows * s.cols));
    for (std::int64_t b = 0; b < s.rows * blocks; ++b) {
      if (type == GgmlType::q8_0) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(bytes->data())[b];
        wd[b] = fp16_to_fp32(blk.d);
        std::copy_n(blk.qs, 32, wq.data() + b * 32);
      } else {
        unpack_q4_0(reinterpret_cast<const BlockQ4_0*>(bytes->data())[b], wq.data() + b * 32,
                    &wd[b]);
      }
    }
    check_matmul(type, wt, s, kTokens, 200, 1e-6,
                 [&](std::int64_t t, std::int64_t r, const std::vector<std::int8_t>& xq,
                     const std::vector<float>& xd) {
                   double want = 0, mag = 0;
                   for (std::int64_t b = 0; b < blocks; ++b) {
                     std::int64_t dot = 0;
                     for (int j = 0; j < 32; ++j)
                       dot += wq[(r * blocks + b) * 32 + j] * xq[(t * blocks + b) * 32 + j];
                     const double term = double(wd[r * blocks + b]) * xd[t * blocks + b] * dot;
                     want += term, mag += std::fabs(term);
                   }
                   return std::pair{want, mag};
                 });
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BlockKernels, ::testing::Values(GgmlType::q8_0, GgmlType::q4_0),
                         [](const auto& info) { return ggml_type_name(info.param); });

// Q4_K and Q6_K weights below the GEMM thresholds (decode, small batches): every path quantises
// the activations to Q8_0 blocks and sums, per weight group, scale * d_x * (integer dot), less
// the Q4_K min * d_x * (sum of the activation quants); the reference does that in double from
// the scalar unpackers (quant.hpp). Rows are ragged against the row split and the 4-token tiles;
// columns run from one super-block to nine.
// A K-quant (or Q4_0) matrix unpacked (quant.hpp's scalar unpackers), and the quantised reference
// for it: per weight group scale * d_x * (integer dot), less the Q4_K min * d_x * (sum of the
// activation quants), in double.
struct UnpackedKQuant {
  UnpackedKQuant(GgmlType type, const std::string& bytes, Shape s)
      : q4k(type == GgmlType::q4_k),
        group(type == GgmlType::q6_k ? 16 : 32),
        s(s),
        groups(s.cols / group) {
    const std::int64_t sblocks = s.cols / kQK_K;
    wq.resize(static_cast<std::size_t>(s.rows * s.cols));
    wsc.resize(static_cast<std::size_t>(s.rows * groups));
    wmn.resize(static_cast<std::size_t>(s.rows * groups));
    if (type == GgmlType::q4_0) {  // also Q4_0: its blocks are groups of 32 with a scale
      for (std::int64_t i = 0; i < s.rows * groups; ++i)
        unpack_q4_0(reinterpret_cast<const BlockQ4_0*>(bytes.data())[i], wq.data() + i * 32,
                    wsc.data() + i);
      return;
    }
    if (type == GgmlType::q8_0) {  // and Q8_0: the quants as they are
      for (std::int64_t i = 0; i < s.rows * groups; ++i) {
        const auto& b = reinterpret_cast<const BlockQ8_0*>(bytes.data())[i];
        std::copy_n(b.qs, 32, wq.data() + i * 32);
        wsc[static_cast<std::size_t>(i)] = fp16_to_fp32(b.d);
      }
      return;
    }
    for (std::int64_t i = 0; i < s.rows * sblocks; ++i) {
      if (q4k)
        unpack_q4_k(reinterpret_cast<const BlockQ4_K*>(bytes.data())[i], wq.data() + i * kQK_K,
                    wsc.data() + i * 8, wmn.data() + i * 8);
      else
        unpack_q6_k(reinterpret_cast<const BlockQ6_K*>(bytes.data())[i], wq.data() + i * kQK_K,
                    wsc.data() + i * 16);
    }
  }
  std::pair<double, double> operator()(std::int64_t t, std::int64_t r,
                                       const std::vector<std::int8_t>& xq,
                                       const std::vector<float>& xd) const {
    double want = 0, mag = 0;
    for (std::int64_t g = 0; g < groups; ++g) {
      std::int64_t dot = 0, xsum = 0;
      for (int j = 0; j < group; ++j) {
        const std::int64_t i = g * group + j;
        dot += wq[r * s.cols + i] * xq[t * s.cols + i];
        xsum += xq[t * s.cols + i];
      }
      const double d_x = xd[(t * s.cols + g * group) / 32];
      const double term = double(wsc[r * groups + g]) * d_x * dot;
      const double min = q4k ? double(wmn[r * groups + g]) * d_x * xsum : 0.0;
      want += term - min, mag += std::fabs(term) + std::fabs(min);
    }
    return {want, mag};
  }
  bool q4k;
  int group;
  Shape s;
  std::int64_t groups;
  std::vector<std::int8_t> wq;
  std::vector<float> wsc, wmn;
};

// Q4_K and Q6_K weights below the GEMM thresholds (decode, small batches): every path quantises
// the activations to Q8_0 blocks, so the reference is UnpackedKQuant's. Rows are ragged against
// the row split and the 4-token tiles; columns run from one super-block to nine.
class KQuantKernels : public Kernels, public ::testing::WithParamInterface<GgmlType> {};

TEST_P(KQuantKernels, DecodeMatchesQuantisedReference) {
  const GgmlType type = GetParam();
  for (const Shape s : {Shape{1, 256}, Shape{13, 768}, Shape{37, 2304}, Shape{6, 512}}) {
    const auto wf = randn(static_cast<std::size_t>(s.rows * s.cols), 11 + s.rows, 0.05f);
    auto bytes = quantize_tensor(wf, type);
    ASSERT_TRUE(bytes);
    const Weight wt{type, reinterpret_cast<const std::byte*>(bytes->data()), s.rows, s.cols};
    check_matmul(type, wt, s, kSmallBatches, 300, 1e-5, UnpackedKQuant(type, *bytes, s));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantKernels, ::testing::Values(GgmlType::q4_k, GgmlType::q6_k),
                         [](const auto& info) { return ggml_type_name(info.param); });

// Q4_K, Q6_K, Q4_0 and Q8_0 weights rearranged at load for the VNNI kernels (repack.hpp): every row
// reads back as the file had it, and matmul matches the quantised reference on every path and batch
// size (the x16 kernels take every batch on VNNI: groups of 16 rows, the rows past the last
// group on the row kernels; the other paths read rows through row_bytes_of).
class X16Layouts : public Kernels, public ::testing::WithParamInterface<GgmlType> {};

TEST_P(X16Layouts, MatchTheFileLayout) {
  const GgmlType type = GetParam();
  constexpr std::int64_t kX16Tokens[] = {1, 2, 3, 4, 5, 9, 16, 20, 33};
  std::vector<Shape> shapes = {{16, 256}, {37, 768}, {64, 2304}, {33, 512}};
  if (type == GgmlType::q8_0) shapes.push_back({48, 288});  // an odd number of blocks a row
  for (const Shape s : shapes) {
    const auto wf = randn(static_cast<std::size_t>(s.rows * s.cols), 5 + s.rows, 0.05f);
    auto bytes = quantize_tensor(wf, type);
    ASSERT_TRUE(bytes);
    std::string packed = *bytes;
    repack_x16(type, reinterpret_cast<std::byte*>(packed.data()), s.rows, s.cols);
    EXPECT_NE(packed, *bytes);
    const Weight x16{type, reinterpret_cast<const std::byte*>(packed.data()), s.rows, s.cols,
                     x16_layout(type)};
    const std::size_t row_bytes = x16.row_bytes();
    for (std::int64_t r = 0; r < s.rows; ++r) {
      ASSERT_EQ(std::memcmp(row_bytes_of(x16, r),
                            bytes->data() + static_cast<std::size_t>(r) * row_bytes, row_bytes),
                0)
          << "row " << r;
    }
    check_matmul(type, x16, s, kX16Tokens, 400, 1e-5, UnpackedKQuant(type, *bytes, s));
  }
}

// The Q8_0, Q4_K and Q6_K x16 kernels take one group of 16 rows a call or two (above 8 tokens),
// in token tiles of 1 to 4, prefetching differently by batch size: a token's outputs must not
// depend on any of it, bit for bit, or a sequence's text would change with the batch it is in.
void expect_outputs_independent_of_the_batch(GgmlType type, std::initializer_list<Shape> shapes) {
  for (const Shape s : shapes) {
    const auto wf = randn(static_cast<std::size_t>(s.rows * s.cols), 3 + s.rows, 0.05f);
    auto bytes = quantize_tensor(wf, type);
    ASSERT_TRUE(bytes);
    repack_x16(type, reinterpret_cast<std::byte*>(bytes->data()), s.rows, s.cols);
    const Weight w{type, reinterpret_cast<const std::byte*>(bytes->data()), s.rows, s.cols,
                   x16_layout(type)};
    // 33 tokens: a decode batch (two groups a call); 70: a prompt (Q4_K, Q6_K: one group a call).
    for (const std::int64_t n : {33, 70})
      for (int threads : {1, 3}) {
        const auto x = randn(static_cast<std::size_t>(n * s.cols), 17 + s.rows);
        std::vector<std::int8_t> qx;
        std::vector<float> qs;
        ThreadPool pool(threads);
        std::vector<float> batch(static_cast<std::size_t>(n * s.rows)),
            one(static_cast<std::size_t>(s.rows));
        kernels::matmul(w, x.data(), n, batch.data(), pool, qx, qs);
        for (std::int64_t t = 0; t < n; ++t) {
          kernels::matmul(w, x.data() + t * s.cols, 1, one.data(), pool, qx, qs);
          for (std::int64_t r = 0; r < s.rows; ++r) {
            ASSERT_EQ(batch[static_cast<std::size_t>(t * s.rows + r)],
                      one[static_cast<std::size_t>(r)])
                << s.rows << "x" << s.cols << " batch " << n << " threads " << threads << " token "
                << t << " row " << r;
          }
        }
      }
  }
}

TEST_F(Kernels, Q8X16OutputsDoNotDependOnTheBatch) {
  expect_outputs_independent_of_the_batch(GgmlType::q8_0,
                                          {Shape{48, 288}, Shape{64, 2304}, Shape{37, 768}});
}

TEST_F(Kernels, Q4KX16OutputsDoNotDependOnTheBatch) {
  expect_outputs_independent_of_the_batch(GgmlType::q4_k,
                                          {Shape{48, 256}, Shape{64, 2304}, Shape{37, 768}});
}

TEST_F(Kernels, Q6KX16OutputsDoNotDependOnTheBatch) {
  expect_outputs_independent_of_the_batch(GgmlType::q6_k,
                                          {Shape{48, 256}, Shape{64, 2304}, Shape{37, 768}});
}

INSTANTIATE_TEST_SUITE_P(Types, X16Layouts,
                         ::testing::Values(GgmlType::q4_k, GgmlType::q6_k, GgmlType::q4_0,
                                           GgmlType::q8_0),
                         [](const auto& info) { return ggml_type_name(info.param); });

}  // namespace
}  // namespace weir::inference
