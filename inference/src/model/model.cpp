#include "weir/inference/model.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>
#include <thread>

#include "model/quant.hpp"
#include "model/repack.hpp"
#include "model/weight_cache.hpp"
#include "weir/runtime/log.hpp"

namespace weir::inference {

std::size_t Weight::row_bytes() const {
  auto blk = ggml_type_block(type);
  return static_cast<std::size_t>(cols / static_cast<std::int64_t>(blk->first) *
                                  static_cast<std::int64_t>(blk->second));
}

void dequantize_row(const Weight& w, std::int64_t r, float* out) {
  const std::byte* row = row_bytes_of(w, r);
  switch (w.type) {
    case GgmlType::f32:
      std::memcpy(out, row, static_cast<std::size_t>(w.cols) * 4);
      return;
    case GgmlType::f16:
      for (std::int64_t i = 0; i < w.cols; ++i) {
        std::uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
      }
      return;
    case GgmlType::bf16:
      for (std::int64_t i = 0; i < w.cols; ++i) {
        std::uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
      }
      return;
    case GgmlType::q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
      for (std::int64_t i = 0; i < w.cols / kQK8_0; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < kQK8_0; ++j) out[i * kQK8_0 + j] = d * b[i].qs[j];
      }
      return;
    }
    case GgmlType::q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(row);
      std::int8_t q[kQK4_0];
      float d;
      for (std::int64_t i = 0; i < w.cols / kQK4_0; ++i) {
        unpack_q4_0(b[i], q, &d);
        for (int j = 0; j < kQK4_0; ++j) out[i * kQK4_0 + j] = d * q[j];
      }
      return;
    }
    case GgmlType::q4_k: {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(row);
      std::int8_t q[kQK_K];
      float sc[8], mn[8];
      for (std::int64_t i = 0; i < w.cols / kQK_K; ++i) {
        unpack_q4_k(b[i], q, sc, mn);
        float* o = out + i * kQK_K;  // group by group: the loops vectorise
        for (int g = 0; g < 8; ++g)
          for (int j = 0; j < 32; ++j) o[g * 32 + j] = sc[g] * q[g * 32 + j] - mn[g];
      }
      return;
    }
    case GgmlType::q6_k: {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row);
      std::int8_t q[kQK_K];
      float sc[16];
      for (std::int64_t i = 0; i < w.cols / kQK_K; ++i) {
        unpack_q6_k(b[i], q, sc);
        float* o = out + i * kQK_K;
        for (int g = 0; g < 16; ++g)
          for (int j = 0; j < 16; ++j) o[g * 16 + j] = sc[g] * q[g * 16 + j];
      }
      return;
    }
    default:
      std::fill(out, out + w.cols, NAN);  // load() refuses other types
  }
}

namespace {

bool runnable(GgmlType t) {
  switch (t) {
    case GgmlType::f32:
    case GgmlType::f16:
    case GgmlType::bf16:
    case GgmlType::q8_0:
    case GgmlType::q4_0:
    case GgmlType::q4_k:
    case GgmlType::q6_k:
      return true;
    default:
      return false;
  }
}

// Norms and biases: plain float types only.
bool vector_type(GgmlType t) {
  return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16;
}

class Loader {
 public:
  explicit Loader(const GgufFile& f) : f_(f) {}

  // A hyperparameter the model needs, within [lo, hi]: a value outside (0 layers, a context of
  // 2^32 - 1) is a broken file, not a model to size an engine for.
  Result<std::int64_t> need_int(const std::string& key, std::int64_t lo, std::int64_t hi) {
    auto v = f_.get_int(key);
    if (!v) return std::move(v).error();
    if (!*v) return Error(Errc::model_error, f_.name() + ": missing hyperparameter '" + key + "'");
    if (**v < lo || **v > hi)
      return Error(Errc::model_error, f_.name() + ": hyperparameter '" + key + "' is " +
                                          std::to_string(**v) + "; it must be " +
                                          std::to_string(lo) + " to " + std::to_string(hi));
    return **v;
  }

  Result<Weight> matrix(const std::string& name, std::int64_t rows, std::int64_t cols,
                        bool optional = false) {
    const TensorInfo* t = f_.tensor(name);
    if (!t) {
      if (optional) return Weight{};
      return Error(Errc::model_error, f_.name() + ": tensor '" + name + "' is missing");
    }
    if (t->dims.size() != 2 || static_cast<std::int64_t>(t->dims[0]) != cols ||
        static_cast<std::int64_t>(t->dims[1]) != rows) {
      std::string got;
      for (auto d : t->dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return Error(Errc::model_error, f_.name() + ": tensor '" + name + "' has shape [" + got +
                                          "], expected [" + std::to_string(cols) + ", " +
                                          std::to_string(rows) + "]");
    }
    if (!runnable(t->type)) {
      return Error(Errc::unsupported,
                   f_.name() + ": tensor '" + name + "' is " + ggml_type_name(t->type) +
                       "; weir runs F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K weights");
    }
    bytes_ += t->n_bytes;
    return Weight{t->type, t->data, rows, cols};
  }

  Result<std::vector<float>> vec(const std::string& name, std::int64_t n, bool optional = false) {
    const TensorInfo* t = f_.tensor(name);
    if (!t) {
      if (optional) return std::vector<float>();
      return Error(Errc::model_error, f_.name() + ": tensor '" + name + "' is missing");
    }
    if (static_cast<std::int64_t>(t->n_elements) != n || !vector_type(t->type)) {
      return Error(Errc::model_error, f_.name() + ": tensor '" + name + "' should be " +
                                          std::to_string(n) + " F32/F16/BF16 values, found " +
                                          std::to_string(t->n_elements) + " of " +
                                          ggml_type_name(t->type));
    }
    std::vector<float> out(static_cast<std::size_t>(n));
    dequantize_row(Weight{t->type, t->data, 1, n}, 0, out.data());
    bytes_ += t->n_bytes;
    return out;
  }

  std::uint64_t bytes() const { return bytes_; }

 private:
  const GgufFile& f_;
  std::uint64_t bytes_ = 0;
};

int thread_count(const ModelOptions& o) {
  return o.load_threads > 0 ? o.load_threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// What a copy records of the file it was made of, and a load checks (weight_cache.hpp).
CacheSource cache_source(const GgufFile& f) {
  return {f.file_bytes(), f.mtime_ns(), f.header_bytes(), f.inode(), f.ctime_ns()};
}

// Moves an open()ed file's bytes into memory: from its rearranged copy when a valid one exists
// (true), else from the file (false).
Result<bool> place_weights(GgufFile& f, bool want_x16, const ModelOptions& o, LoadReport& rep) {
  const int threads = thread_count(o);
  const CacheSource src = cache_source(f);
  if (want_x16 && o.weight_cache && f.file_bytes() >= o.cache_min_bytes) {
    if (auto where = cache_location(f.name(), o.cache_dir)) {
      rep.cache = *where;
      auto fd = open_cache(*where, src);
      if (fd && f.map_huge(*fd, kCacheHeaderBytes)) {
        ::close(*fd);
        return true;
      }
      if (fd) {
        auto st = f.to_memory([&](std::byte* dst) {
          return read_in_parallel(*fd, kCacheHeaderBytes, dst, src.size, threads, where->string());
        });
        ::close(*fd);
        if (st) return true;
        rep.note = st.error().message;
      } else if (fd.error().code != Errc::not_found) {
        rep.note = "the rearranged copy " + fd.error().message + "; rebuilding it";
        log(LogLevel::warn, f.name() + ": " + rep.note);
      }
    }
  }
  int fd = ::open(f.name().c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0)
    return Error(Errc::io_error,
                 "cannot read model file " + f.name() + ": " + std::strerror(errno));
  auto ns = [](const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; };
  if (static_cast<std::uint64_t>(st.st_size) != src.size || ns(st.st_mtim) != src.mtime_ns ||
      static_cast<std::uint64_t>(st.st_ino) != src.inode || ns(st.st_ctim) != src.ctime_ns) {
    ::close(fd);
    return Error(Errc::io_error, f.name() + " changed while it was being loaded; load it again");
  }
  // Nothing to rearrange: the file's own pages serve, where the kernel maps them 2 MiB at a time.
  if (!want_x16 && f.map_huge(fd, 0)) {
    ::close(fd);
    return false;
  }
  auto placed = f.to_memory(
      [&](std::byte* dst) { return read_in_parallel(fd, 0, dst, src.size, threads, f.name()); });
  ::close(fd);
  if (!placed) return std::move(placed).error();
  return false;
}

#define WEIR_TRY(var, expr)                        \
  auto var##_r = (expr);                           \
  if (!var##_r) return std::move(var##_r).error(); \
  auto var = std::move(*var##_r)

}  // namespace

Result<std::shared_ptr<const Model>> Model::load(const std::filesystem::path& path,
                                                 const ModelOptions& options) {
  // Weights the machine has no room for are an error, not a terminate (a process that loads
  // models on demand keeps serving the others).
  try {
    auto f = GgufFile::open(path);
    if (!f) return std::move(f).error();
    return from_gguf(std::move(*f), options);
  } catch (const std::bad_alloc&) {
    return Error(Errc::memory_budget_exceeded,
                 path.string() + ": the machine does not have the free memory to load this model");
  }
}

void Model::rearrange_for_cpu(bool already_done, int threads) {
  std::vector<Weight*> all = {&token_embd_, &output_};
  for (LayerWeights& l : layers_)
    for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) all.push_back(w);
  // Work items of up to 64 groups of 16 rows, claimed by the threads in turn.
  struct Item {
    GgmlType type;
    std::byte* data;
    std::int64_t cols, g_begin, g_end;
  };
  std::vector<Item> items;
  for (Weight* w : all) {
    const WeightLayout x16 = x16_layout(w->type);
    if (!x16_fits(w->type, w->rows, w->cols) || w->layout != WeightLayout::rows) continue;
    if (!already_done) {
      const TensorInfo* t = nullptr;
      for (const TensorInfo& ti : file_->tensors())
        if (ti.data == w->data) t = &ti;
      std::byte* p = t ? file_->writable_data(*t) : nullptr;
      if (!p) break;  // bytes the caller owns (from_memory)
      for (std::int64_t g = 0; g < w->rows / kX16Rows; g += 64)
        items.push_back({w->type, p, w->cols, g, std::min(g + 64, w->rows / kX16Rows)});
    }
    // A tied classifier is the embedding's tensor: rearranged once, read the new way by both.
    for (Weight* same : all)
      if (same->data == w->data) same->layout = x16;
    report_.rearranged = true;
  }
  if (!already_done) {
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < items.size();)
        repack_x16_groups(items[i].type, items[i].data, items[i].cols, items[i].g_begin,
                          items[i].g_end);
    };
    std::vector<std::thread> pool;
    const int n = std::min<int>(threads, static_cast<int>(items.size()));
    for (int t = 1; t < n; ++t) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
  }
  file_->seal();
}

Result<std::shared_ptr<const Model>> Model::from_gguf(std::unique_ptr<GgufFile> file,
                                                      const ModelOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto m = std::shared_ptr<Model>(new Model());
  m->file_ = std::move(file);
  const GgufFile& f = *m->file_;
  LoadReport& rep = m->report_;
  Hyperparams& hp = m->hp_;
  auto arch = f.get_string("general.architecture");
  if (!arch) return std::move(arch).error();
  if (!*arch) return Error(Errc::model_error, f.name() + ": missing 'general.architecture'");
  hp.arch_name = **arch;
  if (hp.arch_name == "llama") {
    hp.arch = Arch::llama;
  } else if (hp.arch_name == "qwen2") {
    hp.arch = Arch::qwen2;
    hp.rope_neox = true;
  } else {
    return Error(
        Errc::unsupported,
        f.name() + ": architecture '" + hp.arch_name +
            "' is not supported; weir runs: llama (Llama 2/3, TinyLlama, SmolLM, Mistral), qwen2. "
            "(`weir tokenize` and `weir inspect` still work on this file.)");
  }
  Loader L(f);
  const std::string a = hp.arch_name + ".";
  // Bounds well past every published model's, within what the int32 sizes below hold.
  WEIR_TRY(dim, L.need_int(a + "embedding_length", 1, 1 << 20));
  WEIR_TRY(hidden, L.need_int(a + "feed_forward_length", 1, 1 << 22));
  WEIR_TRY(layers, L.need_int(a + "block_count", 1, 4096));
  WEIR_TRY(heads, L.need_int(a + "attention.head_count", 1, 4096));
  WEIR_TRY(ctx, L.need_int(a + "context_length", 1, 1 << 24));
  hp.dim = static_cast<std::int32_t>(dim);
  hp.hidden = static_cast<std::int32_t>(hidden);
  hp.n_layers = static_cast<std::int32_t>(layers);
  hp.n_heads = static_cast<std::int32_t>(heads);
  hp.context_length = static_cast<std::int32_t>(ctx);
  auto kvh = f.get_int(a + "attention.head_count_kv");
  hp.n_kv_heads = kvh && *kvh ? static_cast<std::int32_t>(**kvh) : hp.n_heads;
  if (hp.n_heads <= 0 || hp.dim % hp.n_heads || hp.n_kv_heads <= 0 || hp.n_heads % hp.n_kv_heads) {
    return Error(Errc::model_error, f.name() + ": inconsistent heads: dim " +
                                        std::to_string(hp.dim) + ", " + std::to_string(hp.n_heads) +
                                        " heads, " + std::to_string(hp.n_kv_heads) + " KV heads");
  }
  hp.head_dim = hp.dim / hp.n_heads;
  if (auto rd = f.get_int(a + "rope.dimension_count"); rd && *rd && **rd != hp.head_dim) {
    return Error(Errc::unsupported, f.name() + ": partial RoPE (rope.dimension_count " +
                                        std::to_string(**rd) + " != head size " +
                                        std::to_string(hp.head_dim) + ") is not supported");
  }
  if (auto b = f.get_float(a + "rope.freq_base"); b && *b) hp.rope_base = static_cast<float>(**b);
  if (auto eps = f.get_float(a + "attention.layer_norm_rms_epsilon"); eps && *eps)
    hp.rms_eps = static_cast<float>(**eps);
  if (auto st = f.get_string(a + "rope.scaling.type"); st && *st && **st != "none") {
    if (**st != "linear") {
      return Error(Errc::unsupported, f.name() + ": RoPE scaling '" + **st +
                                          "' is not supported (weir handles none and linear)");
    }
    if (auto fac = f.get_float(a + "rope.scaling.factor"); fac && *fac && **fac > 0)
      hp.rope_freq_scale = static_cast<float>(1.0 / **fac);
  }

  // The weights move into memory (2 MiB pages) before the Weights point at them: an open()ed
  // file is a mapping until here.
  const bool want_x16 = options.cpu_layout && cpu_reads_x16();
  bool from_cache = false;
  if (f.owns_bytes() && !f.in_memory() && !f.huge_mapped()) {
    auto placed = place_weights(*m->file_, want_x16, options, rep);
    if (!placed) return std::move(placed).error();
    from_cache = *placed;
    rep.mapped = f.huge_mapped();
    rep.in_memory = f.in_memory();
  }

  const TensorInfo* embd = f.tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2)
    return Error(Errc::model_error, f.name() + ": tensor 'token_embd.weight' is missing");
  hp.n_vocab = static_cast<std::int32_t>(embd->dims[1]);
  WEIR_TRY(tok, L.matrix("token_embd.weight", hp.n_vocab, hp.dim));
  m->token_embd_ = tok;
  WEIR_TRY(onorm, L.vec("output_norm.weight", hp.dim));
  m->output_norm_ = std::move(onorm);
  WEIR_TRY(out, L.matrix("output.weight", hp.n_vocab, hp.dim, true));
  hp.tied_output = out.data == nullptr;
  m->output_ = hp.tied_output ? m->token_embd_ : out;

  const std::int64_t q_dim = std::int64_t{hp.n_heads} * hp.head_dim,
                     kv_dim = std::int64_t{hp.n_kv_heads} * hp.head_dim;
  for (std::int32_t l = 0; l < hp.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights lw;
    WEIR_TRY(an, L.vec(p + "attn_norm.weight", hp.dim));
    WEIR_TRY(fn, L.vec(p + "ffn_norm.weight", hp.dim));
    WEIR_TRY(wq, L.matrix(p + "attn_q.weight", q_dim, hp.dim));
    WEIR_TRY(wk, L.matrix(p + "attn_k.weight", kv_dim, hp.dim));
    WEIR_TRY(wv, L.matrix(p + "attn_v.weight", kv_dim, hp.dim));
    WEIR_TRY(wo, L.matrix(p + "attn_output.weight", hp.dim, q_dim));
    WEIR_TRY(wg, L.matrix(p + "ffn_gate.weight", hp.hidden, hp.dim));
    WEIR_TRY(wu, L.matrix(p + "ffn_up.weight", hp.hidden, hp.dim));
    WEIR_TRY(wd, L.matrix(p + "ffn_down.weight", hp.dim, hp.hidden));
    const bool bias = hp.arch == Arch::qwen2;
    WEIR_TRY(bq, L.vec(p + "attn_q.bias", q_dim, !bias));
    WEIR_TRY(bk, L.vec(p + "attn_k.bias", kv_dim, !bias));
    WEIR_TRY(bv, L.vec(p + "attn_v.bias", kv_dim, !bias));
    lw.attn_norm = std::move(an);
    lw.ffn_norm = std::move(fn);
    lw.wq = wq, lw.wk = wk, lw.wv = wv, lw.wo = wo, lw.w_gate = wg, lw.w_up = wu, lw.w_down = wd;
    lw.bq = std::move(bq), lw.bk = std::move(bk), lw.bv = std::move(bv);
    m->layers_.push_back(std::move(lw));
  }
  m->weight_bytes_ = L.bytes();
  if (want_x16) m->rearrange_for_cpu(from_cache, thread_count(options));
  m->file_->seal();
  rep.from_cache = from_cache && rep.rearranged;
  if (rep.rearranged && !from_cache && !rep.cache.empty()) {
    // The next load reads this. The file is created here, so that a directory that cannot be
    // written is a note now, not a failure; the bytes are written and flushed (seconds for a
    // 1B model) in the background while the model serves.
    if (auto w = begin_cache(rep.cache)) {
      rep.cache_writing = true;
      const GgufFile* g = m->file_.get();
      m->cache_writer_ = std::jthread([g, w = std::move(*w)]() mutable {
        const CacheSource src = cache_source(*g);
        if (auto st = finish_cache(w, src, {g->header_bytes().data(), g->file_bytes()}))
          log(LogLevel::info, g->name() + ": wrote its rearranged copy " + w.path.string() +
                                  " (the next load reads it)");
        else
          log(LogLevel::warn, g->name() + ": " + st.error().message);
      });
    } else {
      rep.note = w.error().message +
                 " (each load rearranges the weights; WEIR_MODEL_CACHE=DIR puts the copy "
                 "elsewhere, =off turns it off)";
      // A folder the user named (cache_dir, WEIR_MODEL_CACHE) that fails is worth a warning; a
      // model's own read-only folder is not.
      const bool named = !options.cache_dir.empty() || std::getenv("WEIR_MODEL_CACHE") != nullptr;
      log(named ? LogLevel::warn : LogLevel::info, f.name() + ": " + rep.note);
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rep.in_memory || rep.mapped) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.0f ms", rep.seconds * 1e3);
    log(LogLevel::debug,
        f.name() + ": loaded in " + ms + ", " +
            (rep.mapped ? "mapped in 2 MiB page-cache pages" : "read into anonymous memory") +
            (rep.from_cache   ? " from " + rep.cache.string()
             : rep.rearranged ? ", rearranged"
                              : ""));
  }
  return std::shared_ptr<const Model>(std::move(m));
}

}  // namespace weir::inference
