// CUDA kernels against their CPU references on fresh random inputs, with NaN-poisoned outputs
// so an unwritten element fails. Relative error within 1e-3 for FP32, 1e-2 for BF16 operands.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/paged_attention.hpp"
#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_plan.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {
namespace {

namespace cu = weir::inference::cuda;

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto info = cu::device_info();
    if (info.count == 0) {
      // scripts/gpu-check sets WEIR_REQUIRE_GPU: there a missing device is a failure.
      if (std::getenv("WEIR_REQUIRE_GPU")) FAIL() << "WEIR_REQUIRE_GPU is set but no CUDA device";
      GTEST_SKIP() << "no CUDA device: the CUDA backend's kernels were not run";
    }
  }
  template <class T>
  cu::DeviceBuffer upload(const std::vector<T>& v) {
    auto b = cu::DeviceBuffer::allocate(v.size() * sizeof(T));
    EXPECT_TRUE(b);
    EXPECT_TRUE(cu::copy_to_device(b->get(), v.data(), v.size() * sizeof(T)));
    return std::move(*b);
  }
  cu::DeviceBuffer poisoned(std::size_t floats) {
    auto b = cu::DeviceBuffer::allocate(floats * sizeof(float));
    EXPECT_TRUE(b);
    EXPECT_TRUE(cu::fill_bytes(b->get(), 0xFF, floats * sizeof(float)));  // NaN
    // cudaMemset runs on the legacy stream, which a non-blocking Stream does not wait for.
    EXPECT_TRUE(cu::synchronize());
    return std::move(*b);
  }
  std::vector<float> download(const cu::DeviceBuffer& b, std::size_t floats) {
    std::vector<float> v(floats);
    EXPECT_TRUE(cu::synchronize());
    EXPECT_TRUE(cu::copy_to_host(v.data(), b.get(), floats * sizeof(float)));
    return v;
  }
  std::vector<float> random(std::size_t n, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> U(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = U(rng_);
    return v;
  }
  static void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                           float rel = 1e-3f) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << "element " << i << " was not written";
      ASSERT_NEAR(got[i], want[i], rel * std::max(1.0f, std::fabs(want[i]))) << "element " << i;
    }
  }
  std::mt19937 rng_{1234};
};

TEST_F(CudaOps, RmsNorm) {
  const int n = 7, dim = 288;
  auto x = random(n * dim), w = random(dim);
  std::vector<float> want(x.size());
  for (int r = 0; r < n; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    float inv = 1.0f / std::sqrt(float(ss / dim) + 1e-5f);
    for (int i = 0; i < dim; ++i) want[r * dim + i] = w[i] * (x[r * dim + i] * inv);
  }
  auto dx = upload(x), dw = upload(w);
  auto out = poisoned(x.size());
  ASSERT_TRUE(cu::rms_norm(dx.as<float>(), dw.as<float>(), out.as<float>(), n, dim, 1e-5f));
  expect_close(download(out, x.size()), want);
}

TEST_F(CudaOps, RopeNormalAndNeox) {
  const int n = 5, heads = 3, hd = 16;
  std::vector<std::int32_t> pos = {0, 1, 7, 100, 4095};
  for (bool neox : {false, true}) {
    auto x = random(n * heads * hd);
    std::vector<float> want = x;
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < heads; ++h) {
        float* v = &want[(t * heads + h) * hd];
        for (int j = 0; j < hd / 2; ++j) {
          double theta = pos[t] * std::pow(10000.0, -2.0 * j / hd);
          int i0 = neox ? j : 2 * j, i1 = neox ? j + hd / 2 : 2 * j + 1;
          double a = v[i0], b = v[i1];
          v[i0] = float(a * std::cos(theta) - b * std::sin(theta));
          v[i1] = float(a * std::sin(theta) + b * std::cos(theta));
        }
      }
    }
    auto dx = upload(x);
    auto dp = upload(pos);
    ASSERT_TRUE(
        cu::rope(dx.as<float>(), dp.as<std::int32_t>(), n, heads, hd, 10000.0f, 1.0f, neox));
    expect_close(download(dx, x.size()), want, 2e-3f);
  }
}

TEST_F(CudaOps, SwigluAndEmbed) {
  const int n = 9, hidden = 172;
  auto g = random(n * hidden, -6, 6), u = random(n * hidden);
  std::vector<float> want(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  auto dg = upload(g), du = upload(u);
  auto out = poisoned(g.size());
  ASSERT_TRUE(cu::swiglu(dg.as<float>(), du.as<float>(), out.as<float>(), n, hidden));
  expect_close(download(out, g.size()), want);

  const int vocab = 50, dim = 64;
  auto table = random(vocab * dim);
  std::vector<std::int32_t> toks = {3, 0, 49, 3};
  std::vector<float> ewant;
  for (auto t : toks)
    ewant.insert(ewant.end(), table.begin() + t * dim, table.begin() + (t + 1) * dim);
  auto dt = upload(table);
  auto dtok = upload(toks);
  auto eout = poisoned(ewant.size());
  ASSERT_TRUE(cu::embed(dt.as<float>(), dtok.as<std::int32_t>(), eout.as<float>(), 4, dim));
  expect_close(download(eout, ewant.size()), ewant, 0);
}

// The CUDA paged attention against the CPU paged attention (itself tested against contiguous
// reference attention), on a mixed batch: two decodes with long contexts and a prefill chunk.
TEST_F(CudaOps, PagedAttentionMatchesCpu) {
  for (int hd : {8, 16, 48, 64, 128}) {
    const int n_kv = 2, n_heads = 4, bs = 16;
    KvLayout L{2, n_kv, hd, bs, 64};
    std::vector<float> pool = random(static_cast<std::size_t>(L.total_elems()));
    const int max_blocks = 20;
    std::vector<std::int32_t> tables(3 * max_blocks);
    for (int i = 0; i < 3 * max_blocks; ++i)
      tables[i] = (i * 37) % 64;  // scattered, distinct per seq
    std::vector<std::int32_t> positions = {300, 17, 0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<std::int32_t> seq = {0, 1, 2, 2, 2, 2, 2, 2, 2, 2};
    const int n = static_cast<int>(positions.size());
    auto q = random(static_cast<std::size_t>(n) * n_heads * hd);
    auto k = random(static_cast<std::size_t>(n) * L.kv_dim()), v = random(k.size());

    // CPU path.
    std::vector<std::span<const BlockId>> spans;
    for (int s = 0; s < 3; ++s) spans.emplace_back(tables.data() + s * max_blocks, max_blocks);
    AttentionBatch cb{positions, seq, spans, n_heads};
    std::vector<float> cpu_pool = pool;
    write_kv(cpu_pool, L, 1, cb, k.data(), v.data());
    std::vector<float> want(q.size()), scratch;
    paged_attention(cpu_pool, L, 1, cb, q.data(), want.data(), 1.0f / std::sqrt(float(hd)), 0,
                    static_cast<std::int64_t>(n) * n_heads, scratch);

    // CUDA path.
    auto dpool = upload(pool);
    auto dpos = upload(positions), dseq = upload(seq), dtab = upload(tables);
    auto dq = upload(q), dk = upload(k), dv = upload(v);
    auto dout = poisoned(q.size());
    cu::PagedBatch gb{dpos.as<std::int32_t>(), dseq.as<std::int32_t>(), dtab.as<std::int32_t>(),
                      max_blocks, n};
    ASSERT_TRUE(cu::write_kv(dpool.as<float>(), L, 1, gb, dk.as<float>(), dv.as<float>()));
    ASSERT_TRUE(cu::paged_attention(dpool.as<float>(), L, 1, gb, dq.as<float>(), dout.as<float>(),
                                    n_heads, 1.0f / std::sqrt(float(hd))));
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    expect_close(download(dout, q.size()), want);
    expect_close(download(dpool, pool.size()), cpu_pool, 0);
  }
}

TEST_F(CudaOps, GemmAndArgmax) {
  const int m = 5, n = 300, k = 288;
  auto a = random(m * k), b = random(n * k);
  std::vector<float> want(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int t = 0; t < k; ++t) s += double(a[i * k + t]) * b[j * k + t];
      want[i * n + j] = float(s);
    }
  auto da = upload(a), db = upload(b);
  auto dc = poisoned(want.size());
  ASSERT_TRUE(cu::gemm_f32(da.as<float>(), db.as<float>(), dc.as<float>(), m, n, k));
  auto got = download(dc, want.size());
  expect_close(got, want);

  std::vector<float> logits = random(3 * 1000);
  logits[1000 + 10] = 5.0f;
  logits[1000 + 700] = 5.0f;  // a tie: the lowest index wins
  auto dl = upload(logits);
  auto didx = cu::DeviceBuffer::allocate(3 * sizeof(std::int32_t));
  ASSERT_TRUE(didx);
  ASSERT_TRUE(cu::argmax_rows(dl.as<float>(), didx->as<std::int32_t>(), 3, 1000));
  std::vector<std::int32_t> idx(3);
  ASSERT_TRUE(cu::synchronize());
  ASSERT_TRUE(cu::copy_to_host(idx.data(), didx->get(), 3 * sizeof(std::int32_t)));
  EXPECT_EQ(idx[1], 10);
  for (int r : {0, 2}) {
    EXPECT_EQ(idx[r], std::max_element(logits.begin() + r * 1000, logits.begin() + (r + 1) * 1000) -
                          (logits.begin() + r * 1000));
  }
}

// Split-K decode attention (partials + reduce) against the CPU paged attention: one token
// per sequence, contexts from 1 to 3001 positions, splits that start past a token's position
// (they must write nothing the reduce reads) and a last split that runs past splits x chunk.
// Partials are poisoned too.
TEST_F(CudaOps, SplitPagedAttentionMatchesCpu) {
  for (int hd : {64, 128}) {
    const int n_kv = 2, n_heads = 8, bs = 16;
    std::vector<std::int32_t> positions = {3000, 1200, 600, 100, 0, 255, 256};
    const int n = static_cast<int>(positions.size());
    int max_blocks = 0, total_blocks = 0;
    for (int p : positions) {
      max_blocks = std::max(max_blocks, p / bs + 1);
      total_blocks += p / bs + 1;
    }
    KvLayout L{1, n_kv, hd, bs, total_blocks + 3};
    std::vector<std::int32_t> perm(static_cast<std::size_t>(L.num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    std::vector<std::int32_t> tables(static_cast<std::size_t>(n) * max_blocks, 0);
    for (int s = 0, next = 0; s < n; ++s)
      for (int b = 0; b <= positions[s] / bs; ++b) tables[s * max_blocks + b] = perm[next++];
    std::vector<std::int32_t> seq(static_cast<std::size_t>(n));
    std::iota(seq.begin(), seq.end(), 0);
    std::vector<float> pool = random(static_cast<std::size_t>(L.total_elems()));
    auto q = random(static_cast<std::size_t>(n) * n_heads * hd);
    auto k = random(static_cast<std::size_t>(n) * L.kv_dim()), v = random(k.size());
    const float scale = 1.0f / std::sqrt(float(hd));

    std::vector<std::span<const BlockId>> spans;
    for (int s = 0; s < n; ++s) spans.emplace_back(tables.data() + s * max_blocks, max_blocks);
    AttentionBatch cb{positions, seq, spans, n_heads};
    std::vector<float> cpu_pool = pool;
    write_kv(cpu_pool, L, 0, cb, k.data(), v.data());
    std::vector<float> want(q.size()), scratch;
    paged_attention(cpu_pool, L, 0, cb, q.data(), want.data(), scale, 0,
                    static_cast<std::int64_t>(n) * n_heads, scratch);

    auto dpool = upload(pool);
    auto dpos = upload(positions), dseq = upload(seq), dtab = upload(tables);
    auto dq = upload(q), dk = upload(k), dv = upload(v);
    cu::PagedBatch gb{dpos.as<std::int32_t>(), dseq.as<std::int32_t>(), dtab.as<std::int32_t>(),
                      max_blocks, n};
    ASSERT_TRUE(cu::write_kv(dpool.as<float>(), L, 0, gb, dk.as<float>(), dv.as<float>()));
    const long long th = static_cast<long long>(n) * n_heads;
    for (cu::AttentionSplit split :
         {cu::AttentionSplit{3, 400}, cu::AttentionSplit{cu::kSplitMaxSplits, 256},
          cu::AttentionSplit{2, 1501}, cu::plan_attention_split(th, 3001, cu::sm_count())}) {
      SCOPED_TRACE("head_dim " + std::to_string(hd) + ", " + std::to_string(split.splits) +
                   " splits of " + std::to_string(split.chunk));
      auto partials = poisoned(static_cast<std::size_t>(th) * split.splits * (hd + 2));
      auto dout = poisoned(q.size());
      ASSERT_TRUE(cu::paged_attention(dpool.as<float>(), L, 0, gb, dq.as<float>(), dout.as<float>(),
                                      n_heads, scale, split, partials.as<float>()));
      expect_close(download(dout, q.size()), want);
    }
  }
}

// The tiled prefill attention against the CPU paged attention: prompt chunks that start at 0
// and mid-sequence (a cached prefix), a chunk longer than a tile, a decode token, and a gap in
// positions (tiles break there).
TEST_F(CudaOps, TiledPrefillAttentionMatchesCpu) {
  for (int hd : {8, 48, 64, 128}) {
    ASSERT_TRUE(cu::prefill_attention_supported(hd));
    const int n_kv = 2, n_heads = 6, bs = 16, max_blocks = 24, n_seqs = 4;
    KvLayout L{2, n_kv, hd, bs, n_seqs * max_blocks};
    std::vector<std::int32_t> positions, seq;
    for (int p = 5; p < 42; ++p) positions.push_back(p), seq.push_back(0);  // 37, prefix 0..4
    for (int p = 0; p < 20; ++p) positions.push_back(p), seq.push_back(1);
    positions.push_back(300), seq.push_back(2);
    for (int p : {0, 1, 2, 7, 8}) positions.push_back(p), seq.push_back(3);
    const int n = static_cast<int>(positions.size());
    std::vector<std::int32_t> tables(static_cast<std::size_t>(n_seqs) * max_blocks);
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng_);
    std::vector<float> pool = random(static_cast<std::size_t>(L.total_elems()));
    auto q = random(static_cast<std::size_t>(n) * n_heads * hd);
    auto k = random(static_cast<std::size_t>(n) * L.kv_dim()), v = random(k.size());
    const float scale = 1.0f / std::sqrt(float(hd));

    std::vector<std::span<const BlockId>> spans;
    for (int s = 0; s < n_seqs; ++s) spans.emplace_back(tables.data() + s * max_blocks, max_blocks);
    AttentionBatch cb{positions, seq, spans, n_heads};
    std::vector<float> cpu_pool = pool;
    write_kv(cpu_pool, L, 1, cb, k.data(), v.data());
    std::vector<float> want(q.size()), scratch;
    paged_attention(cpu_pool, L, 1, cb, q.data(), want.data(), scale, 0,
                    static_cast<std::int64_t>(n) * n_heads, scratch);

    std::vector<std::int32_t> tiles;
    const int n_tiles = cu::build_prefill_tiles(positions.data(), seq.data(), n, tiles);
    auto dpool = upload(pool);
    auto dpos = upload(positions), dseq = upload(seq), dtab = upload(tables),
         dtiles = upload(tiles);
    auto dq = upload(q), dk = upload(k), dv = upload(v);
    auto dout = poisoned(q.size());
    cu::PagedBatch gb{dpos.as<std::int32_t>(), dseq.as<std::int32_t>(), dtab.as<std::int32_t>(),
                      max_blocks, n};
    ASSERT_TRUE(cu::write_kv(dpool.as<float>(), L, 1, gb, dk.as<float>(), dv.as<float>()));
    ASSERT_TRUE(cu::paged_prefill_attention(dpool.as<float>(), L, 1, gb, dtiles.as<std::int32_t>(),
                                            n_tiles, dq.as<float>(), dout.as<float>(), n_heads,
                                            scale));
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    expect_close(download(dout, q.size()), want);
  }
}

TEST_F(CudaOps, Q8_0DequantisationMatchesTheCpuPath) {
  const int rows = 5, cols = 160;
  auto values = random(rows * cols, -3, 3);
  auto q8 = quantize_tensor(values, GgmlType::q8_0);
  ASSERT_TRUE(q8) << q8.error().message;
  Weight w{GgmlType::q8_0, reinterpret_cast<const std::byte*>(q8->data()), rows, cols};
  std::vector<float> want(rows * cols);
  for (int r = 0; r < rows; ++r) dequantize_row(w, r, want.data() + r * cols);
  std::vector<char> bytes(q8->begin(), q8->end());
  auto dq = upload(bytes);
  auto f32 = poisoned(want.size());
  ASSERT_TRUE(cu::dequantize_q8_0(dq.get(), rows, cols, f32.as<float>()));
  expect_close(download(f32, want.size()), want, 0);
  auto b16 = cu::DeviceBuffer::allocate(want.size() * 2);
  ASSERT_TRUE(b16);
  ASSERT_TRUE(cu::dequantize_q8_0(dq.get(), rows, cols, b16->as<std::uint16_t>()));
  std::vector<std::uint16_t> got(want.size());
  ASSERT_TRUE(cu::synchronize());
  ASSERT_TRUE(cu::copy_to_host(got.data(), b16->get(), got.size() * 2));
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], cu::float_to_bf16(want[i])) << i;
}

TEST_F(CudaOps, Bf16ConversionAndEmbedMatchTheHost) {
  auto x = random(10000, -1000, 1000);
  x[0] = 1.00390625f;  // a tie: to even
  auto dx = upload(x);
  auto dh = cu::DeviceBuffer::allocate(x.size() * 2);
  ASSERT_TRUE(dh);
  ASSERT_TRUE(cu::fill_bytes(dh->get(), 0xFF, x.size() * 2));
  ASSERT_TRUE(
      cu::f32_to_bf16(dx.as<float>(), dh->as<std::uint16_t>(), static_cast<long long>(x.size())));
  std::vector<std::uint16_t> got(x.size());
  ASSERT_TRUE(cu::synchronize());
  ASSERT_TRUE(cu::copy_to_host(got.data(), dh->get(), got.size() * 2));
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], cu::float_to_bf16(x[i])) << i;

  const int vocab = 50, dim = 72;
  auto table = random(vocab * dim);
  std::vector<std::uint16_t> table16(table.size());
  for (std::size_t i = 0; i < table.size(); ++i) table16[i] = cu::float_to_bf16(table[i]);
  std::vector<std::int32_t> toks = {3, 0, 49, 3, 17};
  std::vector<float> want;
  for (auto t : toks)
    for (int i = 0; i < dim; ++i) want.push_back(cu::bf16_to_float(table16[t * dim + i]));
  auto dt = upload(table16);
  auto dtok = upload(toks);
  auto out = poisoned(want.size());
  ASSERT_TRUE(cu::embed_bf16(dt.as<std::uint16_t>(), dtok.as<std::int32_t>(), out.as<float>(),
                             static_cast<int>(toks.size()), dim));
  expect_close(download(out, want.size()), want, 0);
}

// The runner's GEMMs: a Blas on its own stream, BF16 operands with FP32 accumulation against
// a double-precision reference on the same BF16-rounded operands, and exact FP32.
TEST_F(CudaOps, BlasGemmBf16AndFp32OnAStream) {
  auto stream = cu::Stream::create();
  ASSERT_TRUE(stream);
  auto blas = cu::Blas::create(stream->get());
  ASSERT_TRUE(blas) << blas.error().message;
  for (auto [m, n, k] : {std::tuple{1, 300, 288}, std::tuple{7, 512, 768}, {33, 100, 64}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
    auto a = random(static_cast<std::size_t>(m) * k), b = random(static_cast<std::size_t>(n) * k);
    std::vector<std::uint16_t> a16(a.size()), b16(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) a16[i] = cu::float_to_bf16(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) b16[i] = cu::float_to_bf16(b[i]);
    std::vector<float> want16(static_cast<std::size_t>(m) * n), want32(want16.size());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double s16 = 0, s32 = 0;
        for (int t = 0; t < k; ++t) {
          s16 += double(cu::bf16_to_float(a16[i * k + t])) * cu::bf16_to_float(b16[j * k + t]);
          s32 += double(a[i * k + t]) * b[j * k + t];
        }
        want16[i * n + j] = float(s16);
        want32[i * n + j] = float(s32);
      }
    auto da = upload(a), db = upload(b), db16 = upload(b16);
    auto da16 = cu::DeviceBuffer::allocate(a.size() * 2);
    ASSERT_TRUE(da16);
    ASSERT_TRUE(cu::f32_to_bf16(da.as<float>(), da16->as<std::uint16_t>(),
                                static_cast<long long>(a.size()), stream->get()));
    auto c16 = poisoned(want16.size()), c32 = poisoned(want32.size());
    ASSERT_TRUE(blas->gemm_bf16(da16->as<std::uint16_t>(), db16.as<std::uint16_t>(),
                                c16.as<float>(), m, n, k));
    ASSERT_TRUE(blas->gemm_f32(da.as<float>(), db.as<float>(), c32.as<float>(), m, n, k));
    ASSERT_TRUE(stream->synchronize());
    expect_close(download(c16, want16.size()), want16, 1e-2f);
    expect_close(download(c32, want32.size()), want32);
  }
}

// A graph captured on a stream replays its kernels on whatever the buffers hold at launch.
TEST_F(CudaOps, GraphReplaysWhatWasCaptured) {
  auto stream = cu::Stream::create();
  ASSERT_TRUE(stream);
  const int n = 3, hidden = 500;
  const std::size_t total = static_cast<std::size_t>(n) * hidden;
  auto dg = poisoned(total), du = poisoned(total), dy = poisoned(total), dout = poisoned(total);
  ASSERT_TRUE(cu::Graph::begin_capture(stream->get()));
  ASSERT_TRUE(
      cu::swiglu(dg.as<float>(), du.as<float>(), dout.as<float>(), n, hidden, stream->get()));
  ASSERT_TRUE(cu::add_inplace(dout.as<float>(), dy.as<float>(), static_cast<long long>(total),
                              stream->get()));
  auto graph = cu::Graph::end_capture(stream->get());
  ASSERT_TRUE(graph) << graph.error().message;
  for (int round = 0; round < 3; ++round) {
    auto g = random(total, -6, 6), u = random(total), y = random(total);
    ASSERT_TRUE(cu::copy_to_device(dg.get(), g.data(), total * 4));
    ASSERT_TRUE(cu::copy_to_device(du.get(), u.data(), total * 4));
    ASSERT_TRUE(cu::copy_to_device(dy.get(), y.data(), total * 4));
    std::vector<float> want(total);
    for (std::size_t i = 0; i < total; ++i) want[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i] + y[i];
    ASSERT_TRUE(graph->launch(stream->get()));
    ASSERT_TRUE(stream->synchronize());
    expect_close(download(dout, total), want);
  }
}

}  // namespace
}  // namespace weir::inference
