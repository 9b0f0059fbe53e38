#include "runner/llama_runner.hpp"

#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/kernels.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/thread_pool.hpp"

namespace weir::inference {

namespace {

class LlamaRunner final : public StepRunner {
 public:
  LlamaRunner(std::shared_ptr<const Model> model, int threads)
      : m_(std::move(model)), pool_(threads) {
    scratch_.resize(static_cast<std::size_t>(pool_.size()));
  }

  std::int32_t vocab_size() const override { return m_->hp().n_vocab; }
  std::int32_t n_layers() const override { return m_->hp().n_layers; }
  std::int32_t n_kv_heads() const override { return m_->hp().n_kv_heads; }
  std::int32_t head_dim() const override { return m_->hp().head_dim; }
  std::int32_t context_length() const override { return m_->hp().context_length; }
  bool supports_kv_type(KvType) const override { return true; }  // F32, F16, Q8_0

  bool set_step_profiling(bool on) override {
    if (on) profile_ = {};
    profiling_ = on;
    return true;
  }
  StepProfile step_profile() const override { return profile_; }

  Status forward(const StepBatch& b, const KvLayout& L, std::span<float> pool,
                 std::span<float> logits) override {
    const Hyperparams& hp = m_->hp();
    const std::int64_t n = static_cast<std::int64_t>(b.tokens.size());
    // Profiling: a decode step (one token per sequence, each sampled) or a prompt step.
    const bool decode =
        static_cast<std::size_t>(n) == b.seqs.size() && b.logit_rows.size() == b.seqs.size();
    Lap lap(profiling_ && n > 0 ? (decode ? &profile_.decode : &profile_.prompt) : nullptr);
    const std::int64_t dim = hp.dim, q_dim = std::int64_t{hp.n_heads} * hp.head_dim,
                       kv_dim = L.kv_dim();
    // Activations are written before they are read: a buffer only grows (resizing a shrunk
    // one would zero-fill megabytes in the first step of every prefill after decode steps).
    auto fit = [](std::vector<float>& v, std::int64_t size) {
      if (v.size() < static_cast<std::size_t>(size)) v.resize(static_cast<std::size_t>(size));
    };
    fit(x_, n * dim), fit(xb_, n * dim), fit(q_, n * q_dim), fit(k_, n * kv_dim),
        fit(v_, n * kv_dim);
    fit(att_, n * q_dim), fit(proj_, n * dim), fit(h1_, n * hp.hidden), fit(h2_, n * hp.hidden);

    // Copy-on-write first: the shared partial blocks the scheduler split.
    auto* kv_bytes = reinterpret_cast<std::byte*>(pool.data());  // elements of L.type
    auto* scales = kv_bytes + L.values_bytes();                  // Q8_0's, after the values
    const std::int64_t eb = L.elem_bytes();
    for (const auto& c : b.copies) {
      for (std::int32_t l = 0; l < L.n_layers; ++l) {
        for (int kv = 0; kv < 2; ++kv) {
          const std::int64_t dst = L.row_offset(l, kv, c.dst, 0),
                             src = L.row_offset(l, kv, c.src, 0);
          std::memcpy(kv_bytes + dst * eb, kv_bytes + src * eb,
                      static_cast<std::size_t>(L.tile_elems() * eb));
          if (L.type == KvType::q8_0)
            std::memcpy(scales + L.scale_bytes(dst), scales + L.scale_bytes(src),
                        static_cast<std::size_t>(L.scale_bytes(L.tile_elems())));
        }
      }
    }
    for (std::int64_t t = 0; t < n; ++t) {  // x: [n, dim]
      const std::int32_t tok = b.tokens[static_cast<std::size_t>(t)];
      if (tok < 0 || tok >= hp.n_vocab)
        return Error(Errc::model_error, "token id " + std::to_string(tok) + " is out of range");
      dequantize_row(m_->token_embd(), tok, x_.data() + t * dim);
    }
    tables_.clear();
    for (const auto& s : b.seqs) tables_.push_back(s.block_table);
    AttentionBatch ab{b.positions, b.seq_index, tables_, hp.n_heads};
    // The rotary angles of every token, once for all layers (the threads take token ranges).
    const std::int64_t half = hp.head_dim / 2;
    fit(cos_, n * half), fit(sin_, n * half);
    pool_.parallel_for(n, [&](int, std::int64_t begin, std::int64_t end) {
      kernels::rope_angles(b.positions.data() + begin, end - begin, hp.head_dim, hp.rope_base,
                           hp.rope_freq_scale, cos_.data() + begin * half,
                           sin_.data() + begin * half);
    });
    const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));

    for (std::int32_t l = 0; l < hp.n_layers; ++l) {
      const LayerWeights& w = m_->layers()[static_cast<std::size_t>(l)];
      by_tokens(n, [&](std::int64_t t0, std::int64_t t1) {
        kernels::rmsnorm(x_.data() + t0 * dim, w.attn_norm.data(), xb_.data() + t0 * dim, t1 - t0,
                         dim, hp.rms_eps);
      });
      {
        const kernels::MatmulOut qkv[] = {{w.wq, q_.data()}, {w.wk, k_.data()}, {w.wv, v_.data()}};
        lap.to();
        kernels::matmul_many(qkv, xb_.data(), n, pool_, qx_, qs_);
        lap.to(&StepPhases::matmul_ms);
      }
      if (!w.bq.empty()) {
        for (std::int64_t t = 0; t < n; ++t) {
          for (std::int64_t i = 0; i < q_dim; ++i) q_[t * q_dim + i] += w.bq[i];
          for (std::int64_t i = 0; i < kv_dim; ++i)
            k_[t * kv_dim + i] += w.bk[i], v_[t * kv_dim + i] += w.bv[i];
        }
      }
      by_tokens(n, [&](std::int64_t t0, std::int64_t t1) {
        kernels::rope_apply(q_.data() + t0 * q_dim, t1 - t0, hp.n_heads, hp.head_dim, hp.rope_neox,
                            cos_.data() + t0 * half, sin_.data() + t0 * half);
        kernels::rope_apply(k_.data() + t0 * kv_dim, t1 - t0, hp.n_kv_heads, hp.head_dim,
                            hp.rope_neox, cos_.data() + t0 * half, sin_.data() + t0 * half);
      });
      lap.to();
      // K/V rows into their slots: a prompt step's hundreds of tokens by ranges on every thread.
      by_tokens(n, [&](std::int64_t t0, std::int64_t t1) {
        const auto len = static_cast<std::size_t>(t1 - t0);
        const AttentionBatch part{ab.positions.subspan(static_cast<std::size_t>(t0), len),
                                  ab.seq_index.subspan(static_cast<std::size_t>(t0), len),
                                  ab.block_tables, ab.n_heads};
        write_kv(pool, L, l, part, k_.data() + t0 * kv_dim, v_.data() + t0 * kv_dim);
      });
      pool_.parallel_for(n * hp.n_heads, [&](int th, std::int64_t begin, std::int64_t end) {
        paged_attention(pool, L, l, ab, q_.data(), att_.data(), scale, begin, end,
                        scratch_[static_cast<std::size_t>(th)]);
      });
      lap.to(&StepPhases::attention_ms);
      matmul(w.wo, att_.data(), n, proj_.data());
      lap.to(&StepPhases::matmul_ms);
      by_tokens(n, [&](std::int64_t t0, std::int64_t t1) {
        for (std::int64_t i = t0 * dim; i < t1 * dim; ++i) x_[i] += proj_[i];
        kernels::rmsnorm(x_.data() + t0 * dim, w.ffn_norm.data(), xb_.data() + t0 * dim, t1 - t0,
                         dim, hp.rms_eps);
      });
      {
        const kernels::MatmulOut gate_up[] = {{w.w_gate, h1_.data()}, {w.w_up, h2_.data()}};
        lap.to();
        kernels::matmul_many(gate_up, xb_.data(), n, pool_, qx_, qs_);
        lap.to(&StepPhases::matmul_ms);
      }
      by_tokens(n, [&](std::int64_t t0, std::int64_t t1) {
        kernels::swiglu(h1_.data() + t0 * hp.hidden, h2_.data() + t0 * hp.hidden,
                        (t1 - t0) * hp.hidden);
      });
      lap.to();
      matmul(w.w_down, h1_.data(), n, proj_.data());
      lap.to(&StepPhases::matmul_ms);
      by_tokens(n, [&](std::int64_t t0, std::int64_t t1) {
        for (std::int64_t i = t0 * dim; i < t1 * dim; ++i) x_[i] += proj_[i];
      });
    }

    // Logits only for the sampled rows: [n_logits, n_vocab].
    const std::int64_t rows = static_cast<std::int64_t>(b.logit_rows.size());
    if (rows == 0) {
      lap.end(n);
      return {};
    }
    fit(last_, rows * dim);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::memcpy(last_.data() + r * dim,
                  x_.data() + std::int64_t{b.logit_rows[static_cast<std::size_t>(r)]} * dim,
                  static_cast<std::size_t>(dim) * sizeof(float));
    }
    kernels::rmsnorm(last_.data(), m_->output_norm().data(), last_.data(), rows, dim, hp.rms_eps);
    lap.to();
    matmul(m_->output(), last_.data(), rows, logits.data());
    lap.to(&StepPhases::logits_ms);
    lap.end(n);
    return {};
  }

 private:
  // f(t0, t1) over token ranges covering [0, n): split across the pool for batches (the
  // per-token work of a batch step would otherwise leave the other threads waiting).
  template <class F>
  void by_tokens(std::int64_t n, F&& f) {
    if (n < 16) return f(0, n);
    pool_.parallel_for(n, [&](int, std::int64_t b, std::int64_t e) { f(b, e); });
  }

  // Phase timing for StepProfile: to(phase) adds the time since the last mark to that phase of
  // the step's kind (none: to the rest) and marks now; end(n) counts the step and its n tokens.
  // Without a kind (profiling off) it reads no clock.
  struct Lap {
    using Clock = std::chrono::steady_clock;
    explicit Lap(StepPhases* kind) : kind(kind) {
      if (kind) last = Clock::now();
    }
    void to(double StepPhases::*phase = nullptr) {
      if (!kind) return;
      const auto now = Clock::now();
      if (phase)
        kind->*phase += std::chrono::duration<double, std::milli>(now - last).count();
      else
        kind->rest_ms += std::chrono::duration<double, std::milli>(now - last).count();
      last = now;
    }
    void end(std::int64_t n) {
      if (!kind) return;
      to();
      kind->steps += 1;
      kind->tokens += n;
    }
    StepPhases* kind;
    Clock::time_point last{};
  };

  void matmul(const Weight& w, const float* x, std::int64_t n, float* y) {
    kernels::matmul(w, x, n, y, pool_, qx_, qs_);
  }

  std::shared_ptr<const Model> m_;
  ThreadPool pool_;
  std::vector<std::vector<float>> scratch_;  // per thread, attention scores
  std::vector<std::span<const BlockId>> tables_;
  std::vector<float> x_, xb_, q_, k_, v_, att_, proj_, h1_, h2_, last_;  // activations, reused
  std::vector<float> cos_, sin_;                                         // rotary angles
  std::vector<std::int8_t> qx_;
  std::vector<float> qs_;
  bool profiling_ = false;
  StepProfile profile_;
};

}  // namespace

std::unique_ptr<StepRunner> make_llama_runner(std::shared_ptr<const Model> model, int threads) {
  return std::make_unique<LlamaRunner>(std::move(model), threads);
}

}  // namespace weir::inference
