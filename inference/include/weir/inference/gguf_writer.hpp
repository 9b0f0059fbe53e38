// Writing GGUF v3 files, quantising tensors to ggml's block types, and deterministic
// random-weight LLaMA models of any shape (used by tests, benchmarks and the demo, so they need
// no downloaded model).
//
// Thread safety: a GgufWriter is used by one thread; the free functions share no state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "weir/inference/gguf.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference {

class GgufWriter {
 public:
  void add_string(std::string key, std::string value);
  void add_u32(std::string key, std::uint32_t value);
  void add_f32(std::string key, float value);
  void add_bool(std::string key, bool value);
  void add_strings(std::string key, const std::vector<std::string>& values);
  void add_f32s(std::string key, const std::vector<float>& values);
  void add_i32s(std::string key, const std::vector<std::int32_t>& values);
  // dims: ne0 first. data: the tensor's bytes in `type`'s layout.
  void add_tensor(std::string name, std::vector<std::uint64_t> dims, GgmlType type,
                  std::string data);
  // Errors: io_error. Written to a temporary file, then renamed.
  Status write(const std::filesystem::path& path) const;

 private:
  std::string kv_;
  std::uint64_t n_kv_ = 0;
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    GgmlType type;
    std::string data;
  };
  std::vector<Tensor> tensors_;
};

struct RandomModelShape {
  std::int32_t dim = 288, hidden = 768, n_layers = 6, n_heads = 6, n_kv_heads = 6;
  std::int32_t n_vocab = 32000, context_length = 1024;
  bool qwen2 = false;  // architecture qwen2: Q/K/V biases and NeoX RoPE
  static RandomModelShape tiny() { return {64, 192, 2, 4, 4, 512, 256}; }
  static RandomModelShape stories15m() { return {}; }  // llama2.c's 15M shape
  // TinyLlama-1.1B's shape: 22 layers of dim 2048, 32 heads of 64 over 4 KV heads.
  static RandomModelShape tinyllama1b() { return {2048, 5632, 22, 32, 4, 32000, 2048}; }
};

// `values` encoded in `type`'s block layout (ggml's): F32, F16, or for Q8_0, Q4_0, Q4_K and
// Q6_K quantised the way ggml's reference quantisers (quantize_row_*_ref) do it, without an
// importance matrix. A matrix may be passed whole when its row length is a whole number of
// blocks.
// Errors: invalid_argument for another type, or a length that is not a whole number of blocks
// (32 values for Q8_0/Q4_0, 256 for Q4_K/Q6_K).
Result<std::string> quantize_tensor(std::span<const float> values, GgmlType type);

// A LLaMA model with weights drawn from a seeded generator (the same seed gives the same
// weights in every type, and the same file) and a SentencePiece-style vocabulary (control
// tokens, 256 byte tokens, filler pieces) so that any text tokenises. Norms stay F32.
// Weight type: F32, F16, Q8_0, Q4_0, or Q4_K, which writes a Q4_K_M-style mix: Q4_K
// matrices, attn_v and ffn_down in Q6_K in some layers (llama.cpp's choice), and an untied
// output.weight in Q6_K holding token_embd's values. In that mix, matrices whose rows are not
// a multiple of 256 fall back to Q4_0 (for Q4_K) and Q8_0 (for Q6_K).
// Errors: invalid_argument for another type or an inconsistent shape; io_error.
Status write_random_llama(const std::filesystem::path& path, const RandomModelShape& shape,
                          GgmlType type, std::uint64_t seed = 1);

}  // namespace weir::inference
