// A LLaMA-family model loaded from GGUF: hyperparameters and weights (kept in the mapping).
//
// Architectures: `llama` (Llama 2/3, TinyLlama, SmolLM, Mistral) and `qwen2` (QKV bias, NeoX
// RoPE). Every expected tensor is checked for presence, type and shape at load, with an error
// naming the tensor. Matrices may be F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K (so Q4_0 and
// Q4_K_M files run); norms and biases F32, F16 or BF16. A missing output.weight means the
// classifier is tied to token_embd.
//
// Thread safety: a Model is immutable after load(); share it freely (std::shared_ptr).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "weir/inference/gguf.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference {

enum class Arch { llama, qwen2 };

struct Hyperparams {
  Arch arch = Arch::llama;
  std::string arch_name;
  std::int32_t n_vocab = 0;
  std::int32_t dim = 0;     // embedding length
  std::int32_t hidden = 0;  // feed-forward length
  std::int32_t n_layers = 0;
  std::int32_t n_heads = 0;
  std::int32_t n_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t context_length = 0;
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions are multiplied by this
  bool rope_neox = false;        // rotate (x[i], x[i + d/2]) instead of adjacent pairs
  float rms_eps = 1e-5f;
  bool tied_output = false;
};

// How a Weight's bytes are arranged. `rows`: row-major, as stored in the file. `q4k_x16`,
// `q6k_x16`, `q4_0_x16`, `q8_0_x16` (Q4_K, Q6_K, Q4_0, Q8_0 only): the file's bytes rearranged
// at load so that the AVX-512 VNNI kernels read 16 rows a vector (inference/src/model/repack.hpp);
// the same size, and dequantize_row reads them.
enum class WeightLayout : std::uint8_t { rows, q4k_x16, q6k_x16, q4_0_x16, q8_0_x16 };

// A weight matrix [rows = out, cols = in].
struct Weight {
  GgmlType type = GgmlType::f32;
  const std::byte* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  WeightLayout layout = WeightLayout::rows;
  std::size_t row_bytes() const;
};

// Row r of w in the file's layout: in place for WeightLayout::rows and the rows past the last
// group of 16, else gathered into a buffer of the calling thread, valid until its next call.
const std::byte* row_bytes_of(const Weight& w, std::int64_t r);

struct ModelOptions {
  // Rearrange Q4_K, Q6_K, Q4_0 and Q8_0 matrices of 16 rows or more into their x16 layouts at
  // load, in place (the mapping is private: the file is never written), when this CPU's kernels
  // read that layout (x86-64 with AVX-512 VNNI): their kernels then apply each block's scales to 16
  // rows at once. Off, every weight keeps the file's layout (for comparing the two).
  bool cpu_layout = true;
  // The rearranged copy kept on disk so that the next load reads the x16 layouts instead of
  // computing them (docs/inference.md, "Cold start"): off, every load rearranges. Only files of
  // cache_min_bytes or more get one (smaller ones rearrange in milliseconds).
  bool weight_cache = true;
  // Where the copy lives; empty: the environment variable WEIR_MODEL_CACHE decides ("off", a
  // directory, or unset: beside the model as "<model>.weir-x16").
  std::filesystem::path cache_dir;
  std::uint64_t cache_min_bytes = std::uint64_t{64} << 20;
  // Threads that read and rearrange the weights; 0: every hardware thread.
  int load_threads = 0;
};

// How Model::from_gguf placed the weights: for logs, benchmarks and tests.
struct LoadReport {
  bool in_memory = false;       // weights read into anonymous memory, 2 MiB pages
  bool mapped = false;          // weights mapped from the page cache's 2 MiB pages (the copy,
                                // or the file when nothing is rearranged): shared, no copy
  bool rearranged = false;      // some matrices are in x16 layouts
  bool from_cache = false;      // ... read from the rearranged copy, not computed
  bool cache_writing = false;   // this load is writing the copy, in the background: the model
                                // is usable at once; its destructor waits for the write
  std::filesystem::path cache;  // where the copy is or would be; empty when caching is off
  std::string note;             // why a copy was not used or not written; empty otherwise
  double seconds = 0;           // from_gguf's wall time
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;  // [dim]
  Weight wq, wk, wv, wo;                   // [n_heads*hd, dim], [kv_dim, dim] x2, [dim, n_heads*hd]
  std::vector<float> bq, bk, bv;           // qwen2 only
  Weight w_gate, w_up, w_down;             // [hidden, dim] x2, [dim, hidden]
};

class Model {
 public:
  // Errors: everything GgufFile::open reports; model_error for a missing or misshapen tensor or
  // a missing hyperparameter; unsupported for an architecture or tensor type weir cannot run.
  static Result<std::shared_ptr<const Model>> load(const std::filesystem::path& path,
                                                   const ModelOptions& options = {});
  // A from_memory() file's bytes are the caller's: they are never rearranged.
  static Result<std::shared_ptr<const Model>> from_gguf(std::unique_ptr<GgufFile> file,
                                                        const ModelOptions& options = {});

  const Hyperparams& hp() const { return hp_; }
  const GgufFile& gguf() const { return *file_; }
  const Weight& token_embd() const { return token_embd_; }  // [n_vocab, dim]
  const Weight& output() const { return output_; }          // [n_vocab, dim]
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  std::uint64_t weight_bytes() const { return weight_bytes_; }
  const LoadReport& load_report() const { return report_; }

 private:
  Model() = default;
  // ModelOptions::cpu_layout: rearranges the x16 matrices on `threads` threads, or only marks
  // them when the bytes came from the rearranged copy (already_done).
  void rearrange_for_cpu(bool already_done, int threads);
  LoadReport report_;
  std::unique_ptr<GgufFile> file_;
  Hyperparams hp_;
  Weight token_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  std::uint64_t weight_bytes_ = 0;
  // Writes the rearranged copy after load; declared after file_ so that it is joined (by its
  // destructor) before the weights it reads are unmapped.
  std::jthread cache_writer_;
};

// Row `r` of `w` as floats: out[w.cols].
void dequantize_row(const Weight& w, std::int64_t r, float* out);

}  // namespace weir::inference
