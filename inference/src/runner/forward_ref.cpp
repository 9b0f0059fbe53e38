#include "runner/forward_ref.hpp"

#include <cmath>

namespace weir::inference {

namespace {

void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

// out[w.rows] = W x, one dequantised row at a time.
void matvec(float* out, const Weight& w, const float* x) {
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  for (std::int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    double s = 0;
    for (std::int64_t i = 0; i < w.cols; ++i) s += double(row[i]) * x[i];
    out[r] = static_cast<float>(s);
  }
}

void rope(float* v, int n_heads, int hd, int pos, const Hyperparams& hp) {
  for (int h = 0; h < n_heads; ++h) {
    float* x = v + h * hd;
    for (int j = 0; j < hd / 2; ++j) {
      const float theta = pos * hp.rope_freq_scale * std::pow(hp.rope_base, -2.0f * j / hd);
      const float c = std::cos(theta), s = std::sin(theta);
      const int i0 = hp.rope_neox ? j : 2 * j, i1 = hp.rope_neox ? j + hd / 2 : 2 * j + 1;
      const float a = x[i0], b = x[i1];
      x[i0] = a * c - b * s;
      x[i1] = a * s + b * c;
    }
  }
}

}  // namespace

ReferenceSession::ReferenceSession(const Model& model) : m_(model) {
  const auto& hp = m_.hp();
  const std::size_t n = std::size_t(hp.n_layers) * hp.context_length * hp.n_kv_heads * hp.head_dim;
  key_cache_.assign(n, 0.0f);
  value_cache_.assign(n, 0.0f);
}

std::vector<float> ReferenceSession::step(std::int32_t token, std::int32_t pos) {
  const Hyperparams& hp = m_.hp();
  const int dim = hp.dim, hd = hp.head_dim, kv_dim = hp.n_kv_heads * hd, q_dim = hp.n_heads * hd;
  const int group = hp.n_heads / hp.n_kv_heads;

  std::vector<float> x(dim), xb(dim), q(q_dim), att_out(q_dim), proj(dim);  // activations
  std::vector<float> hb(hp.hidden), hb2(hp.hidden), att(static_cast<std::size_t>(pos) + 1);
  dequantize_row(m_.token_embd(), token, x.data());  // x: [dim]

  for (int l = 0; l < hp.n_layers; ++l) {
    const LayerWeights& w = m_.layers()[l];
    float* kc =
        key_cache_.data() + (std::size_t(l) * hp.context_length + pos) * kv_dim;  // [kv_dim]
    float* vc =
        value_cache_.data() + (std::size_t(l) * hp.context_length + pos) * kv_dim;  // [kv_dim]

    // Attention: q, k, v projections, RoPE, then causal attention over positions 0..pos.
    rmsnorm(xb.data(), x.data(), w.attn_norm.data(), dim, hp.rms_eps);
    matvec(q.data(), w.wq, xb.data());
    matvec(kc, w.wk, xb.data());
    matvec(vc, w.wv, xb.data());
    if (!w.bq.empty()) {
      for (int i = 0; i < q_dim; ++i) q[i] += w.bq[i];
      for (int i = 0; i < kv_dim; ++i) kc[i] += w.bk[i], vc[i] += w.bv[i];
    }
    rope(q.data(), hp.n_heads, hd, pos, hp);
    rope(kc, hp.n_kv_heads, hd, pos, hp);
    for (int h = 0; h < hp.n_heads; ++h) {
      const float* qh = q.data() + h * hd;  // [hd]
      const int kvh = h / group;
      float mx = -INFINITY;
      for (int t = 0; t <= pos; ++t) {
        const float* kt =
            key_cache_.data() + (std::size_t(l) * hp.context_length + t) * kv_dim + kvh * hd;
        float s = 0;
        for (int i = 0; i < hd; ++i) s += qh[i] * kt[i];
        att[t] = s / std::sqrt(static_cast<float>(hd));
        mx = std::max(mx, att[t]);
      }
      float sum = 0;
      for (int t = 0; t <= pos; ++t) sum += att[t] = std::exp(att[t] - mx);
      float* oh = att_out.data() + h * hd;  // [hd]
      std::fill(oh, oh + hd, 0.0f);
      for (int t = 0; t <= pos; ++t) {
        const float* vt =
            value_cache_.data() + (std::size_t(l) * hp.context_length + t) * kv_dim + kvh * hd;
        for (int i = 0; i < hd; ++i) oh[i] += att[t] / sum * vt[i];
      }
    }
    matvec(proj.data(), w.wo, att_out.data());
    for (int i = 0; i < dim; ++i) x[i] += proj[i];

    // Feed-forward: down(silu(gate(x)) * up(x)).
    rmsnorm(xb.data(), x.data(), w.ffn_norm.data(), dim, hp.rms_eps);
    matvec(hb.data(), w.w_gate, xb.data());
    matvec(hb2.data(), w.w_up, xb.data());
    for (int i = 0; i < hp.hidden; ++i) hb[i] = hb[i] / (1.0f + std::exp(-hb[i])) * hb2[i];
    matvec(proj.data(), w.w_down, hb.data());
    for (int i = 0; i < dim; ++i) x[i] += proj[i];
  }

  rmsnorm(xb.data(), x.data(), m_.output_norm().data(), dim, hp.rms_eps);
  std::vector<float> logits(static_cast<std::size_t>(hp.n_vocab));  // [n_vocab]
  matvec(logits.data(), m_.output(), xb.data());
  return logits;
}

}  // namespace weir::inference
