#include "weir/inference/cuda/cuda_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/runtime/log.hpp"

namespace weir::inference::cuda {

namespace {

#define WEIR_CUDA_TRY(expr)         \
  do {                              \
    auto weir_st_ = (expr);         \
    if (!weir_st_) return weir_st_; \
  } while (0)

// A layer's GEMM weight: in the runner's precision (BF16 or FP32), or Q8_0 blocks as in the
// file, dequantised into a scratch matrix right before each GEMM that uses it.
struct GemmWeight {
  DeviceBuffer buf;
  bool q8_0 = false;
};

struct DeviceLayer {
  DeviceBuffer attn_norm, ffn_norm, bq, bk, bv;  // FP32
  GemmWeight wq, wk, wv, wo, w_gate, w_up, w_down;
};

std::size_t matrix_elems(const Weight& w) {
  return static_cast<std::size_t>(w.rows) * static_cast<std::size_t>(w.cols);
}

class CudaRunner final : public StepRunner {
 public:
  CudaRunner(std::shared_ptr<const Model> m, CudaRunnerOptions o) : m_(std::move(m)), opt_(o) {}

  Status init() {
    const Hyperparams& hp = m_->hp();
    opt_.max_batch_tokens = std::max<std::int64_t>(opt_.max_batch_tokens, 1);
    opt_.max_logit_rows = std::max(opt_.max_logit_rows, 1);
    sm_count_ = sm_count();

    // Plan first: a model that does not fit fails here, before anything is uploaded.
    const DeviceInfo info = device_info();
    const std::size_t wbytes = weight_bytes();
    const std::size_t ws = activation_workspace_bytes(shape(opt_.max_batch_tokens)) +
                           dequant_scratch_elems() * elem_bytes();
    const KvLayout one_block{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 1};
    auto plan = plan_memory(info.free_bytes, opt_.memory_fraction, wbytes, ws,
                            static_cast<std::size_t>(one_block.block_bytes(sizeof(float))));
    if (!plan) return std::move(plan).error();
    kv_hint_ = plan->kv_bytes;

    auto stream = Stream::create();
    if (!stream) return std::move(stream).error();
    stream_ = std::move(*stream);
    auto blas = Blas::create(stream_.get());
    if (!blas) return std::move(blas).error();
    blas_ = std::move(*blas);

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
      WEIR_CUDA_TRY(upload_layer_matrix(l.wq, d.wq));
      WEIR_CUDA_TRY(upload_layer_matrix(l.wk, d.wk));
      WEIR_CUDA_TRY(upload_layer_matrix(l.wv, d.wv));
      WEIR_CUDA_TRY(upload_layer_matrix(l.wo, d.wo));
      WEIR_CUDA_TRY(upload_layer_matrix(l.w_gate, d.w_gate));
      WEIR_CUDA_TRY(upload_layer_matrix(l.w_up, d.w_up));
      WEIR_CUDA_TRY(upload_layer_matrix(l.w_down, d.w_down));
      if (!l.bq.empty()) {
        WEIR_CUDA_TRY(upload(l.bq, d.bq));
        WEIR_CUDA_TRY(upload(l.bk, d.bk));
        WEIR_CUDA_TRY(upload(l.bv, d.bv));
      }
      layers_.push_back(std::move(d));
    }
    WEIR_CUDA_TRY(reserve_activations(opt_.max_batch_tokens));
    if (const std::size_t e = dequant_scratch_elems(); e > 0)
      WEIR_CUDA_TRY(alloc(wscratch_, e * elem_bytes()));
    log(LogLevel::info, std::string("cuda runner: weights ") + precision_name(opt_.precision) +
                            " " + std::to_string(wbytes >> 20) + " MiB, workspace " +
                            std::to_string(ws >> 20) + " MiB, KV budget " +
                            std::to_string(kv_hint_ >> 20) + " MiB, CUDA graphs " +
                            (opt_.cuda_graphs ? "on" : "off"));
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
    // Block tables first (small), so the pool is the last and largest allocation.
    const int bs = std::max(layout.block_size, 1);
    const int per_seq = (m_->hp().context_length + bs - 1) / bs + 1;
    stride_cap_ = std::max(1, std::min(layout.num_blocks, per_seq));
    WEIR_CUDA_TRY(reserve_tables(
        static_cast<std::size_t>(std::min<std::int64_t>(opt_.max_batch_tokens, 256)) *
        static_cast<std::size_t>(table_stride_for(stride_cap_, stride_cap_))));
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
    const int n_seqs = static_cast<int>(b.seqs.size());
    const int rows = static_cast<int>(b.logit_rows.size());
    if (n == 0) return {};
    if (n > reserved_tokens_) {
      log(LogLevel::warn, "cuda runner: a batch of " + std::to_string(n) +
                              " tokens exceeds max_batch_tokens; growing the activations");
      WEIR_CUDA_TRY(reserve_activations(n));
    }
    void* s = stream_.get();
    float* pool = pool_.as<float>();

    // Copy-on-write block copies, then the batch's metadata, in stream order.
    for (const auto& c : b.copies) {
      for (int l = 0; l < L.n_layers; ++l) {
        for (int kv = 0; kv < 2; ++kv) {
          WEIR_CUDA_TRY(copy_device(pool + L.row_offset(l, kv, c.dst, 0),
                                    pool + L.row_offset(l, kv, c.src, 0),
                                    static_cast<std::size_t>(L.tile_elems()) * sizeof(float), s));
        }
      }
    }
    int max_blocks = 1;
    for (const auto& q : b.seqs)
      max_blocks = std::max(max_blocks, static_cast<int>(q.block_table.size()));
    const int stride = table_stride_for(max_blocks, stride_cap_);
    const std::size_t table_ints = static_cast<std::size_t>(n_seqs) * stride;
    if (table_ints > table_capacity_) {
      log(LogLevel::warn, "cuda runner: a batch's block tables (" + std::to_string(n_seqs) +
                              " sequences x " + std::to_string(stride) +
                              " blocks) exceed the reserved size; growing them");
      WEIR_CUDA_TRY(reserve_tables(table_ints));
    }
    tables_host_.assign(table_ints, 0);
    for (std::size_t q = 0; q < b.seqs.size(); ++q) {
      std::copy(b.seqs[q].block_table.begin(), b.seqs[q].block_table.end(),
                tables_host_.begin() + static_cast<std::ptrdiff_t>(q * stride));
    }
    WEIR_CUDA_TRY(upload_async(b.tokens, tokens_));
    WEIR_CUDA_TRY(upload_async(b.positions, positions_));
    WEIR_CUDA_TRY(upload_async(b.seq_index, seq_index_));
    WEIR_CUDA_TRY(upload_async(tables_host_, tables_));
    WEIR_CUDA_TRY(upload_async(b.logit_rows, logit_rows_));

    Shape sh{n, stride, rows, 0};
    std::optional<GraphKey> key;
    if (opt_.cuda_graphs && !graphs_broken_ && rows <= opt_.max_logit_rows)
      key = decode_graph_key(n, n_seqs, rows, stride, opt_.max_graph_tokens);
    // Steps with prompt tokens (more tokens than sequences) use the tiled prefill attention.
    if (!key && n > n_seqs && prefill_attention_supported(hp.head_dim)) {
      sh.tiles = build_prefill_tiles(b.positions.data(), b.seq_index.data(), n, tiles_host_);
      WEIR_CUDA_TRY(upload_async(tiles_host_, tiles_));
    }
    if (key) {
      auto it = graphs_.find(*key);
      if (it == graphs_.end() && opt_.max_graphs > 0) {
        if (static_cast<int>(graphs_.size()) >= opt_.max_graphs) {  // drop the least recent
          auto lru = std::min_element(graphs_.begin(), graphs_.end(), [](auto& a, auto& b) {
            return a.second.last_use < b.second.last_use;
          });
          graphs_.erase(lru);
        }
        if (auto g = capture(L, sh); g) {
          it = graphs_.emplace(*key, CachedGraph{std::move(*g), 0}).first;
        } else {
          graphs_broken_ = true;
          log(LogLevel::warn,
              "cuda runner: CUDA graph capture failed, running eagerly from now on: " +
                  g.error().message);
        }
      }
      if (it != graphs_.end()) {
        it->second.last_use = ++step_;
        WEIR_CUDA_TRY(it->second.graph.launch(s));
        WEIR_CUDA_TRY(
            copy_to_host_async(logits.data(), logits_.get(),
                               static_cast<std::size_t>(rows) * hp.n_vocab * sizeof(float), s));
        return stream_.synchronize();
      }
    }
    WEIR_CUDA_TRY(enqueue_body(L, sh));
    for (int r0 = 0; r0 < rows; r0 += opt_.max_logit_rows) {
      const int r = std::min(opt_.max_logit_rows, rows - r0);
      WEIR_CUDA_TRY(enqueue_logits(r0, r));
      WEIR_CUDA_TRY(copy_to_host_async(
          logits.data() + static_cast<std::size_t>(r0) * hp.n_vocab, logits_.get(),
          static_cast<std::size_t>(r) * hp.n_vocab * sizeof(float), s));
    }
    return stream_.synchronize();
  }

 private:
  // What every launch of a step depends on besides fixed pointers (cf. GraphKey).
  struct Shape {
    int n, stride, rows;
    int tiles;  // prefill tiles in tiles_; 0: attention per token (paged_attention)
  };

  ActivationShape shape(std::int64_t tokens) const {
    const Hyperparams& hp = m_->hp();
    return {tokens,        opt_.max_logit_rows, hp.dim,     hp.hidden,      hp.n_heads,
            hp.n_kv_heads, hp.head_dim,         hp.n_vocab, opt_.precision, sm_count_};
  }

  std::size_t elem_bytes() const { return opt_.precision == Precision::bf16 ? 2 : 4; }
  // Layer matrices kept as Q8_0 on the device (token_embd and output are always converted:
  // the embedding gather and the logits GEMM read them directly).
  bool keep_q8_0(const Weight& w) const {
    return opt_.q8_0_on_device && w.type == GgmlType::q8_0 && w.cols % 32 == 0;
  }
  std::size_t dequant_scratch_elems() const {
    std::size_t most = 0;
    for (const auto& l : m_->layers())
      for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        if (keep_q8_0(*w)) most = std::max(most, matrix_elems(*w));
    return most;
  }

  std::size_t weight_bytes() const {
    std::size_t elems = matrix_elems(m_->token_embd()), raw = 0;
    if (!m_->hp().tied_output) elems += matrix_elems(m_->output());
    std::size_t f32 = m_->output_norm().size();
    for (const auto& l : m_->layers()) {
      for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        if (keep_q8_0(*w)) {
          raw += static_cast<std::size_t>(w->rows) * w->row_bytes();
        } else {
          elems += matrix_elems(*w);
        }
      }
      f32 += l.attn_norm.size() + l.ffn_norm.size() + l.bq.size() + l.bk.size() + l.bv.size();
    }
    return elems * elem_bytes() + raw + f32 * sizeof(float);
  }

  Result<Graph> capture(const KvLayout& L, const Shape& sh) {
    void* s = stream_.get();
    if (auto st = Graph::begin_capture(s); !st) return std::move(st).error();
    Status body = enqueue_body(L, sh);
    if (body && sh.rows > 0) body = enqueue_logits(0, sh.rows);
    auto g = Graph::end_capture(s);  // always, so the stream leaves capture mode
    if (!body) return std::move(body).error();
    return g;
  }

  // C[m, n] = in[m, k] * W^T, W [n, k]. In bf16 mode `in` must have been converted by
  // to_bf16() first. A Q8_0 weight is dequantised into wscratch_ first (stream-ordered).
  Status mm(const float* in, const DeviceBuffer& w, float* c, int m, int n, int k) const {
    if (opt_.precision == Precision::fp32) return blas_.gemm_f32(in, w.as<float>(), c, m, n, k);
    return blas_.gemm_bf16(a16_.as<std::uint16_t>(), w.as<std::uint16_t>(), c, m, n, k);
  }
  Status mm(const float* in, const GemmWeight& w, float* c, int m, int n, int k) const {
    if (!w.q8_0) return mm(in, w.buf, c, m, n, k);
    if (opt_.precision == Precision::fp32) {
      WEIR_CUDA_TRY(dequantize_q8_0(w.buf.get(), n, k, wscratch_.as<float>(), stream_.get()));
      return blas_.gemm_f32(in, wscratch_.as<float>(), c, m, n, k);
    }
    WEIR_CUDA_TRY(dequantize_q8_0(w.buf.get(), n, k, wscratch_.as<std::uint16_t>(), stream_.get()));
    return blas_.gemm_bf16(a16_.as<std::uint16_t>(), wscratch_.as<std::uint16_t>(), c, m, n, k);
  }
  Status to_bf16(const float* in, int m, int k) const {
    if (opt_.precision == Precision::fp32) return {};
    return f32_to_bf16(in, a16_.as<std::uint16_t>(), static_cast<long long>(m) * k, stream_.get());
  }

  // Embedding through the last layer; x_ holds the final residual stream.
  Status enqueue_body(const KvLayout& L, const Shape& sh) {
    const Hyperparams& hp = m_->hp();
    const int n = sh.n, dim = hp.dim, q_dim = hp.n_heads * hp.head_dim;
    const int kv_dim = static_cast<int>(L.kv_dim());
    void* s = stream_.get();
    const PagedBatch pb{positions_.as<std::int32_t>(), seq_index_.as<std::int32_t>(),
                        tables_.as<std::int32_t>(), sh.stride, n};
    AttentionSplit split =
        plan_attention_split(static_cast<long long>(n) * hp.n_heads,
                             static_cast<long long>(sh.stride) * L.block_size, sm_count_);
    if (static_cast<std::size_t>(n) * hp.n_heads * split.splits * (hp.head_dim + 2) >
        partials_.bytes() / sizeof(float))
      split = {};  // cannot happen by attention_partial_floats' bound; never overrun

    float *x = x_.as<float>(), *xb = xb_.as<float>(), *q = q_.as<float>(), *k = k_.as<float>(),
          *v = v_.as<float>();
    float *att = att_.as<float>(), *proj = proj_.as<float>(), *h1 = h1_.as<float>(),
          *h2 = h2_.as<float>();
    const std::int32_t* tokens = tokens_.as<std::int32_t>();
    if (opt_.precision == Precision::bf16) {
      WEIR_CUDA_TRY(embed_bf16(token_embd_.as<std::uint16_t>(), tokens, x, n, dim, s));
    } else {
      WEIR_CUDA_TRY(embed(token_embd_.as<float>(), tokens, x, n, dim, s));
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    for (int l = 0; l < hp.n_layers; ++l) {
      const DeviceLayer& w = layers_[static_cast<std::size_t>(l)];
      WEIR_CUDA_TRY(rms_norm(x, w.attn_norm.as<float>(), xb, n, dim, hp.rms_eps, s));
      WEIR_CUDA_TRY(to_bf16(xb, n, dim));
      WEIR_CUDA_TRY(mm(xb, w.wq, q, n, q_dim, dim));
      WEIR_CUDA_TRY(mm(xb, w.wk, k, n, kv_dim, dim));
      WEIR_CUDA_TRY(mm(xb, w.wv, v, n, kv_dim, dim));
      if (w.bq.get()) {
        WEIR_CUDA_TRY(add_bias(q, w.bq.as<float>(), n, q_dim, s));
        WEIR_CUDA_TRY(add_bias(k, w.bk.as<float>(), n, kv_dim, s));
        WEIR_CUDA_TRY(add_bias(v, w.bv.as<float>(), n, kv_dim, s));
      }
      WEIR_CUDA_TRY(rope(q, positions_.as<std::int32_t>(), n, hp.n_heads, hp.head_dim, hp.rope_base,
                         hp.rope_freq_scale, hp.rope_neox, s));
      WEIR_CUDA_TRY(rope(k, positions_.as<std::int32_t>(), n, hp.n_kv_heads, hp.head_dim,
                         hp.rope_base, hp.rope_freq_scale, hp.rope_neox, s));
      // The whole batch's K/V first, then attention (prefix blocks shared within a step rely on
      // it).
      WEIR_CUDA_TRY(write_kv(pool_.as<float>(), L, l, pb, k, v, s));
      if (sh.tiles > 0) {
        WEIR_CUDA_TRY(paged_prefill_attention(pool_.as<float>(), L, l, pb,
                                              tiles_.as<std::int32_t>(), sh.tiles, q, att,
                                              hp.n_heads, scale, s));
      } else {
        WEIR_CUDA_TRY(paged_attention(pool_.as<float>(), L, l, pb, q, att, hp.n_heads, scale, split,
                                      partials_.as<float>(), s));
      }
      WEIR_CUDA_TRY(to_bf16(att, n, q_dim));
      WEIR_CUDA_TRY(mm(att, w.wo, proj, n, dim, q_dim));
      WEIR_CUDA_TRY(add_inplace(x, proj, static_cast<long long>(n) * dim, s));
      WEIR_CUDA_TRY(rms_norm(x, w.ffn_norm.as<float>(), xb, n, dim, hp.rms_eps, s));
      WEIR_CUDA_TRY(to_bf16(xb, n, dim));
      WEIR_CUDA_TRY(mm(xb, w.w_gate, h1, n, hp.hidden, dim));
      WEIR_CUDA_TRY(mm(xb, w.w_up, h2, n, hp.hidden, dim));
      WEIR_CUDA_TRY(swiglu(h1, h2, h1, n, hp.hidden, s));
      WEIR_CUDA_TRY(to_bf16(h1, n, hp.hidden));
      WEIR_CUDA_TRY(mm(h1, w.w_down, proj, n, dim, hp.hidden));
      WEIR_CUDA_TRY(add_inplace(x, proj, static_cast<long long>(n) * dim, s));
    }
    return {};
  }

  // Logits of rows [r0, r0 + r) of logit_rows_ into logits_[0, r).
  Status enqueue_logits(int r0, int r) {
    const Hyperparams& hp = m_->hp();
    void* s = stream_.get();
    float* xb = xb_.as<float>();
    WEIR_CUDA_TRY(
        gather_rows(x_.as<float>(), logit_rows_.as<std::int32_t>() + r0, xb, r, hp.dim, s));
    WEIR_CUDA_TRY(rms_norm(xb, output_norm_.as<float>(), xb, r, hp.dim, hp.rms_eps, s));
    WEIR_CUDA_TRY(to_bf16(xb, r, hp.dim));
    return mm(xb, output_shared_ ? token_embd_ : output_, logits_.as<float>(), r, hp.n_vocab,
              hp.dim);
  }

  static Status upload(const std::vector<float>& host, DeviceBuffer& dst) {
    auto b = DeviceBuffer::allocate(host.size() * sizeof(float));
    if (!b) return std::move(b).error();
    dst = std::move(*b);
    return copy_to_device(dst.get(), host.data(), host.size() * sizeof(float));
  }
  // A layer's GEMM weight: Q8_0 bytes as they are (keep_q8_0), else as upload_matrix.
  Status upload_layer_matrix(const Weight& w, GemmWeight& dst) {
    if (!keep_q8_0(w)) return upload_matrix(w, dst.buf);
    const std::size_t bytes = static_cast<std::size_t>(w.rows) * w.row_bytes();
    auto b = DeviceBuffer::allocate(bytes);
    if (!b) return std::move(b).error();
    dst.buf = std::move(*b);
    dst.q8_0 = true;
    if (w.layout == WeightLayout::rows) return copy_to_device(dst.buf.get(), w.data, bytes);
    // Rearranged for the CPU at load (the x16 layout): the device kernels read the file's rows.
    std::vector<std::byte> host(bytes);
    const std::size_t row_bytes = w.row_bytes();
    for (std::int64_t r = 0; r < w.rows; ++r)
      std::memcpy(host.data() + static_cast<std::size_t>(r) * row_bytes, row_bytes_of(w, r),
                  row_bytes);
    return copy_to_device(dst.buf.get(), host.data(), bytes);
  }
  // A GEMM weight: dequantised to FP32 row by row, then rounded to BF16 in bf16 mode.
  Status upload_matrix(const Weight& w, DeviceBuffer& dst) const {
    const std::size_t cols = static_cast<std::size_t>(w.cols);
    std::vector<float> row(cols);
    if (opt_.precision == Precision::fp32) {
      std::vector<float> host(matrix_elems(w));
      for (std::int64_t r = 0; r < w.rows; ++r)
        dequantize_row(w, r, host.data() + static_cast<std::size_t>(r) * cols);
      return upload(host, dst);
    }
    std::vector<std::uint16_t> host(matrix_elems(w));
    for (std::int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w, r, row.data());
      std::uint16_t* out = host.data() + static_cast<std::size_t>(r) * cols;
      for (std::size_t c = 0; c < cols; ++c) out[c] = float_to_bf16(row[c]);
    }
    auto b = DeviceBuffer::allocate(host.size() * sizeof(std::uint16_t));
    if (!b) return std::move(b).error();
    dst = std::move(*b);
    return copy_to_device(dst.get(), host.data(), host.size() * sizeof(std::uint16_t));
  }
  template <class T>
  Status upload_async(const std::vector<T>& host, const DeviceBuffer& dst) const {
    if (host.size() * sizeof(T) > dst.bytes())
      return Error(Errc::model_error, "cuda runner: batch metadata exceeds its buffer");
    return copy_to_device_async(dst.get(), host.data(), host.size() * sizeof(T), stream_.get());
  }
  static Status alloc(DeviceBuffer& dst, std::size_t bytes) {
    auto b = DeviceBuffer::allocate(std::max<std::size_t>(bytes, 4));
    if (!b) return std::move(b).error();
    dst = std::move(*b);
    return {};
  }
  Status reserve_tables(std::size_t ints) {
    if (stream_.get()) WEIR_CUDA_TRY(stream_.synchronize());
    graphs_.clear();  // they hold the old pointer
    WEIR_CUDA_TRY(alloc(tables_, ints * sizeof(std::int32_t)));
    table_capacity_ = ints;
    return {};
  }
  Status reserve_activations(std::int64_t tokens) {
    const Hyperparams& hp = m_->hp();
    const std::size_t t = static_cast<std::size_t>(tokens), f = sizeof(float);
    const std::size_t q_dim = static_cast<std::size_t>(hp.n_heads) * hp.head_dim,
                      kv_dim = static_cast<std::size_t>(hp.n_kv_heads) * hp.head_dim;
    const std::size_t logit_rows =
        std::min(t, static_cast<std::size_t>(opt_.max_logit_rows)) * hp.n_vocab;
    WEIR_CUDA_TRY(stream_.synchronize());
    graphs_.clear();  // they hold the old pointers
    for (auto [buf, bytes] : {std::pair{&x_, t * hp.dim * f},
                              {&xb_, t * hp.dim * f},
                              {&q_, t * q_dim * f},
                              {&k_, t * kv_dim * f},
                              {&v_, t * kv_dim * f},
                              {&att_, t * q_dim * f},
                              {&proj_, t * hp.dim * f},
                              {&h1_, t * hp.hidden * f},
                              {&h2_, t * hp.hidden * f},
                              {&logits_, logit_rows * f},
                              {&tokens_, t * sizeof(std::int32_t)},
                              {&positions_, t * sizeof(std::int32_t)},
                              {&seq_index_, t * sizeof(std::int32_t)},
                              {&logit_rows_, t * sizeof(std::int32_t)},
                              {&tiles_, 2 * t * sizeof(std::int32_t)}}) {
      WEIR_CUDA_TRY(alloc(*buf, bytes));
    }
    if (opt_.precision == Precision::bf16) {
      const std::size_t widest =
          std::max({static_cast<std::size_t>(hp.dim), q_dim, static_cast<std::size_t>(hp.hidden)});
      WEIR_CUDA_TRY(alloc(a16_, t * widest * sizeof(std::uint16_t)));
    }
    if (!partials_.get())
      WEIR_CUDA_TRY(alloc(partials_, attention_partial_floats(sm_count_, hp.head_dim) * f));
    reserved_tokens_ = static_cast<int>(tokens);
    return {};
  }

  std::shared_ptr<const Model> m_;
  CudaRunnerOptions opt_;
  Stream stream_;  // declared before every buffer and graph: destroyed after them
  Blas blas_;
  DeviceBuffer token_embd_, output_, output_norm_, pool_;
  bool output_shared_ = false;
  std::vector<DeviceLayer> layers_;
  DeviceBuffer x_, xb_, q_, k_, v_, att_, proj_, h1_, h2_, logits_, a16_, partials_;
  DeviceBuffer wscratch_;  // one dequantised Q8_0 layer matrix
  DeviceBuffer tokens_, positions_, seq_index_, tables_, logit_rows_, tiles_;  // batch metadata
  std::vector<std::int32_t> tables_host_, tiles_host_;
  std::size_t table_capacity_ = 0;
  int stride_cap_ = 1;
  int reserved_tokens_ = 0;
  int sm_count_ = 0;
  std::size_t kv_hint_ = 0;
  struct CachedGraph {
    Graph graph;
    std::uint64_t last_use = 0;
  };
  std::map<GraphKey, CachedGraph> graphs_;
  std::uint64_t step_ = 0;
  bool graphs_broken_ = false;
};

}  // namespace

Result<std::unique_ptr<StepRunner>> make_cuda_runner(std::shared_ptr<const Model> model,
                                                     CudaRunnerOptions options) {
  if (!available()) {
    return Error(Errc::unsupported,
                 "no CUDA device is available (the build has CUDA, the machine has no GPU); use "
                 "--device cpu");
  }
  if (const DeviceInfo info = device_info(); info.sm_major < 8) {
    return Error(Errc::unsupported,
                 "the CUDA device (" + info.name + ") has compute capability " +
                     std::to_string(info.sm_major) + "." + std::to_string(info.sm_minor) +
                     "; weir's CUDA kernels are built for sm_80 and sm_90 (Ampere and newer); "
                     "use --device cpu");
  }
  if (!paged_attention_supported(model->hp().head_dim)) {
    return Error(Errc::unsupported, "the model's head size " +
                                        std::to_string(model->hp().head_dim) +
                                        " has no CUDA attention kernel; use --device cpu");
  }
  auto r = std::make_unique<CudaRunner>(std::move(model), options);
  if (auto st = r->init(); !st) {
    if (st.error().is(Errc::memory_budget_exceeded) &&
        st.error().message.rfind("the model does not fit", 0) != 0) {
      return Error(Errc::memory_budget_exceeded,
                   "the model does not fit in GPU memory: " + st.error().message);
    }
    return std::move(st).error();
  }
  return std::unique_ptr<StepRunner>(std::move(r));
}

}  // namespace weir::inference::cuda
