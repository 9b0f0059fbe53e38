#include "weir/inference/cuda/cuda_runner.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "weir/inference/cuda/cuda_ops.hpp"

namespace weir::inference::cuda {

namespace {

#define WEIR_CUDA_TRY(expr)         \
  do {                              \
    auto weir_st_ = (expr);         \
    if (!weir_st_) return weir_st_; \
  } while (0)

struct DeviceLayer {
  DeviceBuffer attn_norm, ffn_norm, wq, wk, wv, wo, bq, bk, bv, w_gate, w_up, w_down;
};

class CudaRunner final : public StepRunner {
 public:
  CudaRunner(std::shared_ptr<const Model> m, CudaRunnerOptions o) : m_(std::move(m)), opt_(o) {}

  Status init() {
    const Hyperparams& hp = m_->hp();
    auto upload_matrix = [&](const Weight& w, DeviceBuffer& dst) -> Status {
      std::vector<float> host(static_cast<std::size_t>(w.rows * w.cols));
      for (std::int64_t r = 0; r < w.rows; ++r) dequantize_row(w, r, host.data() + r * w.cols);
      return upload(host, dst);
    };
    WEIR_CUDA_TRY(upload_matrix(m_->token_embd(), token_embd_));
    if (hp.tied_output) {
      output_shared_ = true;
    } else {
      WEIR_CUDA_TRY(upload_matrix(m_->output(), output_));
    }
    WEIR_CUDA_TRY(upload(m_->output_norm(), output_norm_));
    for (const auto& l : m_->layers()) {
      DeviceLayer d;
      WEIR_CUDA_TRY(upload(l.attn_norm, d.attn_norm));
      WEIR_CUDA_TRY(upload(l.ffn_norm, d.ffn_norm));
      WEIR_CUDA_TRY(upload_matrix(l.wq, d.wq));
      WEIR_CUDA_TRY(upload_matrix(l.wk, d.wk));
      WEIR_CUDA_TRY(upload_matrix(l.wv, d.wv));
      WEIR_CUDA_TRY(upload_matrix(l.wo, d.wo));
      WEIR_CUDA_TRY(upload_matrix(l.w_gate, d.w_gate));
      WEIR_CUDA_TRY(upload_matrix(l.w_up, d.w_up));
      WEIR_CUDA_TRY(upload_matrix(l.w_down, d.w_down));
      if (!l.bq.empty()) {
        WEIR_CUDA_TRY(upload(l.bq, d.bq));
        WEIR_CUDA_TRY(upload(l.bk, d.bk));
        WEIR_CUDA_TRY(upload(l.bv, d.bv));
      }
      layers_.push_back(std::move(d));
    }
    WEIR_CUDA_TRY(reserve_activations(opt_.max_batch_tokens));
    DeviceInfo info = device_info();
    const double usable = info.free_bytes * static_cast<double>(opt_.memory_fraction);
    kv_hint_ = usable > 0 ? static_cast<std::size_t>(usable) : 0;
    return {};
  }

  std::int32_t vocab_size() const override { return m_->hp().n_vocab; }
  std::int32_t n_layers() const override { return m_->hp().n_layers; }
  std::int32_t n_kv_heads() const override { return m_->hp().n_kv_heads; }
  std::int32_t head_dim() const override { return m_->hp().head_dim; }
  std::int32_t context_length() const override { return m_->hp().context_length; }
  bool owns_kv_pool() const override { return true; }
  std::size_t kv_bytes_hint() const override { return kv_hint_; }

  Status allocate_kv_pool(const KvLayout& layout) override {
    const std::size_t bytes = static_cast<std::size_t>(layout.total_elems()) * sizeof(float);
    auto b = DeviceBuffer::allocate(bytes);
    if (!b) {
      return Error(Errc::memory_budget_exceeded,
                   "the KV pool (" + std::to_string(bytes >> 20) + " MiB, " +
                       std::to_string(layout.num_blocks) +
                       " blocks) does not fit in GPU memory after the weights: " +
                       b.error().message + "; lower the kv_cache budget");
    }
    pool_ = std::move(*b);
    return {};
  }

  Status forward(const StepBatch& b, const KvLayout& L, std::span<float>,
                 std::span<float> logits) override {
    const Hyperparams& hp = m_->hp();
    const int n = static_cast<int>(b.tokens.size());
    if (n > reserved_tokens_) WEIR_CUDA_TRY(reserve_activations(n));
    const int dim = hp.dim, q_dim = hp.n_heads * hp.head_dim, kv_dim = static_cast<int>(L.kv_dim());
    float* pool = pool_.as<float>();

    // Copy-on-write block copies, then the batch's metadata.
    for (const auto& c : b.copies) {
      for (int l = 0; l < L.n_layers; ++l) {
        for (int kv = 0; kv < 2; ++kv) {
          WEIR_CUDA_TRY(copy_device(pool + L.row_offset(l, kv, c.dst, 0),
                                    pool + L.row_offset(l, kv, c.src, 0),
                                    static_cast<std::size_t>(L.tile_elems()) * sizeof(float)));
        }
      }
    }
    int max_blocks = 1;
    for (const auto& s : b.seqs)
      max_blocks = std::max(max_blocks, static_cast<int>(s.block_table.size()));
    std::vector<std::int32_t> tables(b.seqs.size() * static_cast<std::size_t>(max_blocks), 0);
    for (std::size_t s = 0; s < b.seqs.size(); ++s) {
      std::copy(b.seqs[s].block_table.begin(), b.seqs[s].block_table.end(),
                tables.begin() + static_cast<std::ptrdiff_t>(s * max_blocks));
    }
    WEIR_CUDA_TRY(upload_into(b.tokens, tokens_));
    WEIR_CUDA_TRY(upload_into(b.positions, positions_));
    WEIR_CUDA_TRY(upload_into(b.seq_index, seq_index_));
    WEIR_CUDA_TRY(upload_into(tables, tables_));
    WEIR_CUDA_TRY(upload_into(b.logit_rows, logit_rows_));
    PagedBatch pb{positions_.as<std::int32_t>(), seq_index_.as<std::int32_t>(),
                  tables_.as<std::int32_t>(), max_blocks, n};

    float *x = x_.as<float>(), *xb = xb_.as<float>(), *q = q_.as<float>(), *k = k_.as<float>(),
          *v = v_.as<float>();
    float *att = att_.as<float>(), *proj = proj_.as<float>(), *h1 = h1_.as<float>(),
          *h2 = h2_.as<float>();
    WEIR_CUDA_TRY(embed(token_embd_.as<float>(), tokens_.as<std::int32_t>(), x, n, dim));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    for (int l = 0; l < hp.n_layers; ++l) {
      const DeviceLayer& w = layers_[static_cast<std::size_t>(l)];
      WEIR_CUDA_TRY(rms_norm(x, w.attn_norm.as<float>(), xb, n, dim, hp.rms_eps));
      WEIR_CUDA_TRY(gemm_f32(xb, w.wq.as<float>(), q, n, q_dim, dim));
      WEIR_CUDA_TRY(gemm_f32(xb, w.wk.as<float>(), k, n, kv_dim, dim));
      WEIR_CUDA_TRY(gemm_f32(xb, w.wv.as<float>(), v, n, kv_dim, dim));
      if (w.bq.get()) {
        WEIR_CUDA_TRY(add_bias(q, w.bq.as<float>(), n, q_dim));
        WEIR_CUDA_TRY(add_bias(k, w.bk.as<float>(), n, kv_dim));
        WEIR_CUDA_TRY(add_bias(v, w.bv.as<float>(), n, kv_dim));
      }
      WEIR_CUDA_TRY(rope(q, positions_.as<std::int32_t>(), n, hp.n_heads, hp.head_dim, hp.rope_base,
                         hp.rope_freq_scale, hp.rope_neox));
      WEIR_CUDA_TRY(rope(k, positions_.as<std::int32_t>(), n, hp.n_kv_heads, hp.head_dim,
                         hp.rope_base, hp.rope_freq_scale, hp.rope_neox));
      // The whole batch's K/V first, then attention (prefix blocks shared within a step rely on
      // it).
      WEIR_CUDA_TRY(write_kv(pool, L, l, pb, k, v));
      WEIR_CUDA_TRY(paged_attention(pool, L, l, pb, q, att, hp.n_heads, scale));
      WEIR_CUDA_TRY(gemm_f32(att, w.wo.as<float>(), proj, n, dim, q_dim));
      WEIR_CUDA_TRY(add_inplace(x, proj, static_cast<long long>(n) * dim));
      WEIR_CUDA_TRY(rms_norm(x, w.ffn_norm.as<float>(), xb, n, dim, hp.rms_eps));
      WEIR_CUDA_TRY(gemm_f32(xb, w.w_gate.as<float>(), h1, n, hp.hidden, dim));
      WEIR_CUDA_TRY(gemm_f32(xb, w.w_up.as<float>(), h2, n, hp.hidden, dim));
      WEIR_CUDA_TRY(swiglu(h1, h2, h1, n, hp.hidden));
      WEIR_CUDA_TRY(gemm_f32(h1, w.w_down.as<float>(), proj, n, dim, hp.hidden));
      WEIR_CUDA_TRY(add_inplace(x, proj, static_cast<long long>(n) * dim));
    }
    const int rows = static_cast<int>(b.logit_rows.size());
    if (rows == 0) return synchronize();
    WEIR_CUDA_TRY(gather_rows(x, logit_rows_.as<std::int32_t>(), xb, rows, dim));
    WEIR_CUDA_TRY(rms_norm(xb, output_norm_.as<float>(), xb, rows, dim, hp.rms_eps));
    const float* wout = output_shared_ ? token_embd_.as<float>() : output_.as<float>();
    WEIR_CUDA_TRY(gemm_f32(xb, wout, logits_.as<float>(), rows, hp.n_vocab, dim));
    WEIR_CUDA_TRY(synchronize());
    return copy_to_host(logits.data(), logits_.get(),
                        static_cast<std::size_t>(rows) * hp.n_vocab * sizeof(float));
  }

 private:
  static Status upload(const std::vector<float>& host, DeviceBuffer& dst) {
    auto b = DeviceBuffer::allocate(host.size() * sizeof(float));
    if (!b) return std::move(b).error();
    dst = std::move(*b);
    return copy_to_device(dst.get(), host.data(), host.size() * sizeof(float));
  }
  template <class T>
  static Status upload_into(const std::vector<T>& host, DeviceBuffer& dst) {
    const std::size_t bytes = std::max<std::size_t>(host.size(), 1) * sizeof(T);
    if (dst.bytes() < bytes) {
      auto b = DeviceBuffer::allocate(bytes * 2);
      if (!b) return std::move(b).error();
      dst = std::move(*b);
    }
    return host.empty() ? Status{}
                        : copy_to_device(dst.get(), host.data(), host.size() * sizeof(T));
  }
  Status reserve_activations(std::int64_t tokens) {
    const Hyperparams& hp = m_->hp();
    const std::size_t t = static_cast<std::size_t>(tokens), f = sizeof(float);
    const std::size_t q_dim = static_cast<std::size_t>(hp.n_heads) * hp.head_dim,
                      kv_dim = static_cast<std::size_t>(hp.n_kv_heads) * hp.head_dim;
    for (auto [buf, elems] : {std::pair{&x_, t * hp.dim},
                              {&xb_, t * hp.dim},
                              {&q_, t * q_dim},
                              {&k_, t * kv_dim},
                              {&v_, t * kv_dim},
                              {&att_, t * q_dim},
                              {&proj_, t * hp.dim},
                              {&h1_, t * hp.hidden},
                              {&h2_, t * hp.hidden},
                              {&logits_, t * static_cast<std::size_t>(hp.n_vocab)}}) {
      auto b = DeviceBuffer::allocate(elems * f);
      if (!b) return std::move(b).error();
      *buf = std::move(*b);
    }
    reserved_tokens_ = static_cast<int>(tokens);
    return {};
  }

  std::shared_ptr<const Model> m_;
  CudaRunnerOptions opt_;
  DeviceBuffer token_embd_, output_, output_norm_, pool_;
  bool output_shared_ = false;
  std::vector<DeviceLayer> layers_;
  DeviceBuffer x_, xb_, q_, k_, v_, att_, proj_, h1_, h2_, logits_;    // activations
  DeviceBuffer tokens_, positions_, seq_index_, tables_, logit_rows_;  // batch metadata
  int reserved_tokens_ = 0;
  std::size_t kv_hint_ = 0;
};

}  // namespace

Result<std::unique_ptr<StepRunner>> make_cuda_runner(std::shared_ptr<const Model> model,
                                                     CudaRunnerOptions options) {
  if (!available()) {
    return Error(Errc::unsupported,
                 "no CUDA device is available (the build has CUDA, the machine has no GPU); use "
                 "--device cpu");
  }
  auto r = std::make_unique<CudaRunner>(std::move(model), options);
  if (auto st = r->init(); !st) {
    if (st.error().is(Errc::memory_budget_exceeded)) {
      return Error(Errc::memory_budget_exceeded,
                   "the model does not fit in GPU memory: " + st.error().message);
    }
    return std::move(st).error();
  }
  return std::unique_ptr<StepRunner>(std::move(r));
}

}  // namespace weir::inference::cuda
