#include "weir/inference/gguf_writer.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "quant.hpp"

namespace weir::inference {

namespace {
template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& s, const std::string& v) {
  put<std::uint64_t>(s, v.size());
  s += v;
}
}  // namespace

void GgufWriter::add_string(std::string key, std::string value) {
  put_str(kv_, key), put<std::uint32_t>(kv_, 8), put_str(kv_, value), ++n_kv_;
}
void GgufWriter::add_u32(std::string key, std::uint32_t value) {
  put_str(kv_, key), put<std::uint32_t>(kv_, 4), put(kv_, value), ++n_kv_;
}
void GgufWriter::add_f32(std::string key, float value) {
  put_str(kv_, key), put<std::uint32_t>(kv_, 6), put(kv_, value), ++n_kv_;
}
void GgufWriter::add_bool(std::string key, bool value) {
  put_str(kv_, key), put<std::uint32_t>(kv_, 7), put<std::uint8_t>(kv_, value ? 1 : 0), ++n_kv_;
}
void GgufWriter::add_strings(std::string key, const std::vector<std::string>& values) {
  put_str(kv_, key), put<std::uint32_t>(kv_, 9), put<std::uint32_t>(kv_, 8),
      put<std::uint64_t>(kv_, values.size());
  for (const auto& v : values) put_str(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_f32s(std::string key, const std::vector<float>& values) {
  put_str(kv_, key), put<std::uint32_t>(kv_, 9), put<std::uint32_t>(kv_, 6),
      put<std::uint64_t>(kv_, values.size());
  for (float v : values) put(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_i32s(std::string key, const std::vector<std::int32_t>& values) {
  put_str(kv_, key), put<std::uint32_t>(kv_, 9), put<std::uint32_t>(kv_, 5),
      put<std::uint64_t>(kv_, values.size());
  for (auto v : values) put(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_tensor(std::string name, std::vector<std::uint64_t> dims, GgmlType type,
                            std::string data) {
  tensors_.push_back({std::move(name), std::move(dims), type, std::move(data)});
}

Status GgufWriter::write(const std::filesystem::path& path) const {
  constexpr std::uint64_t kAlign = 32;
  std::string head = "GGUF";
  put<std::uint32_t>(head, 3);
  put<std::uint64_t>(head, tensors_.size());
  put<std::uint64_t>(head, n_kv_);
  head += kv_;
  std::uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_str(head, t.name);
    put<std::uint32_t>(head, static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims) put<std::uint64_t>(head, d);
    put<std::uint32_t>(head, static_cast<std::uint32_t>(t.type));
    put<std::uint64_t>(head, offset);
    offset += (t.data.size() + kAlign - 1) / kAlign * kAlign;
  }
  head.resize((head.size() + kAlign - 1) / kAlign * kAlign, '\0');
  auto tmp = path;
  tmp += ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  for (const auto& t : tensors_) {
    out.write(t.data.data(), static_cast<std::streamsize>(t.data.size()));
    std::string pad((kAlign - t.data.size() % kAlign) % kAlign, '\0');
    out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
  }
  out.close();
  if (!out) return Error(Errc::io_error, "cannot write " + tmp.string());
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return Error(Errc::io_error,
                 "cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  return {};
}

namespace {

std::string encode(const std::vector<float>& v, GgmlType type) {
  std::string s;
  switch (type) {
    case GgmlType::f16:
      for (float f : v) put<std::uint16_t>(s, fp32_to_fp16(f));
      break;
    case GgmlType::q8_0:
      for (std::size_t b = 0; b < v.size() / kQK8_0; ++b) {
        BlockQ8_0 blk{};
        float amax = 0;
        for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(v[b * kQK8_0 + j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        blk.d = fp32_to_fp16(d);
        for (int j = 0; j < kQK8_0; ++j)
          blk.qs[j] = static_cast<std::int8_t>(std::lround(v[b * kQK8_0 + j] * id));
        s.append(reinterpret_cast<const char*>(&blk), sizeof blk);
      }
      break;
    default:
      s.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }
  return s;
}

}  // namespace

Status write_random_llama(const std::filesystem::path& path, const RandomModelShape& sh,
                          GgmlType type, std::uint64_t seed) {
  if (type != GgmlType::f32 && type != GgmlType::f16 && type != GgmlType::q8_0) {
    return Error(Errc::invalid_argument, "random models are written as F32, F16 or Q8_0");
  }
  if (sh.dim % sh.n_heads || sh.n_heads % sh.n_kv_heads ||
      (type == GgmlType::q8_0 && (sh.dim % 32 || sh.hidden % 32))) {
    return Error(
        Errc::invalid_argument,
        "inconsistent model shape (dim divisible by heads, heads by KV heads, Q8_0 rows by 32)");
  }
  if (sh.n_vocab < 259 + 16)
    return Error(Errc::invalid_argument, "n_vocab must be at least 275 (control and byte tokens)");
  GgufWriter w;
  const std::string arch = sh.qwen2 ? "qwen2" : "llama";
  w.add_string("general.architecture", arch);
  w.add_string("general.name",
               "weir-random-" + std::to_string(sh.dim) + "x" + std::to_string(sh.n_layers));
  w.add_u32("general.file_type", type == GgmlType::f32 ? 0 : type == GgmlType::f16 ? 1 : 7);
  w.add_u32(arch + ".context_length", static_cast<std::uint32_t>(sh.context_length));
  w.add_u32(arch + ".embedding_length", static_cast<std::uint32_t>(sh.dim));
  w.add_u32(arch + ".feed_forward_length", static_cast<std::uint32_t>(sh.hidden));
  w.add_u32(arch + ".block_count", static_cast<std::uint32_t>(sh.n_layers));
  w.add_u32(arch + ".attention.head_count", static_cast<std::uint32_t>(sh.n_heads));
  w.add_u32(arch + ".attention.head_count_kv", static_cast<std::uint32_t>(sh.n_kv_heads));
  w.add_u32(arch + ".rope.dimension_count", static_cast<std::uint32_t>(sh.dim / sh.n_heads));
  w.add_f32(arch + ".rope.freq_base", 10000.0f);
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_u32(arch + ".vocab_size", static_cast<std::uint32_t>(sh.n_vocab));

  // Vocabulary: <unk> <s> </s>, bytes <0x00>..<0xFF>, then filler pieces "▁a", "▁b", ... "▁ab" ...
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<std::int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf), scores.push_back(0), types.push_back(6);
  }
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (std::uint64_t i = 0; static_cast<std::int32_t>(tokens.size()) < sh.n_vocab; ++i) {
    std::string piece = "\xe2\x96\x81";  // ▁
    for (std::uint64_t k = i + 1; k > 0; k /= letters.size() + 1)
      piece += letters[(k - 1) % letters.size()];
    tokens.push_back(piece), scores.push_back(-static_cast<float>(i)), types.push_back(1);
  }
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_f32s("tokenizer.ggml.scores", scores);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", true);

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> N(0.0f, 1.0f);
  auto matrix = [&](std::int64_t rows, std::int64_t cols) {
    std::vector<float> m(static_cast<std::size_t>(rows * cols));
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    for (auto& x : m) x = N(rng) * scale;
    return m;
  };
  const std::int64_t hd = sh.dim / sh.n_heads, kv = std::int64_t{sh.n_kv_heads} * hd;
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  w.add_tensor("token_embd.weight", {u(sh.dim), u(sh.n_vocab)}, type,
               encode(matrix(sh.n_vocab, sh.dim), type));
  std::vector<float> ones(static_cast<std::size_t>(sh.dim), 1.0f);
  w.add_tensor("output_norm.weight", {u(sh.dim)}, GgmlType::f32, encode(ones, GgmlType::f32));
  for (int l = 0; l < sh.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", {u(sh.dim)}, GgmlType::f32, encode(ones, GgmlType::f32));
    w.add_tensor(p + "ffn_norm.weight", {u(sh.dim)}, GgmlType::f32, encode(ones, GgmlType::f32));
    w.add_tensor(p + "attn_q.weight", {u(sh.dim), u(sh.dim)}, type,
                 encode(matrix(sh.dim, sh.dim), type));
    w.add_tensor(p + "attn_k.weight", {u(sh.dim), u(kv)}, type, encode(matrix(kv, sh.dim), type));
    w.add_tensor(p + "attn_v.weight", {u(sh.dim), u(kv)}, type, encode(matrix(kv, sh.dim), type));
    w.add_tensor(p + "attn_output.weight", {u(sh.dim), u(sh.dim)}, type,
                 encode(matrix(sh.dim, sh.dim), type));
    w.add_tensor(p + "ffn_gate.weight", {u(sh.dim), u(sh.hidden)}, type,
                 encode(matrix(sh.hidden, sh.dim), type));
    w.add_tensor(p + "ffn_up.weight", {u(sh.dim), u(sh.hidden)}, type,
                 encode(matrix(sh.hidden, sh.dim), type));
    w.add_tensor(p + "ffn_down.weight", {u(sh.hidden), u(sh.dim)}, type,
                 encode(matrix(sh.dim, sh.hidden), type));
    if (sh.qwen2) {
      for (auto [name, n] : {std::pair{"attn_q.bias", std::int64_t{sh.dim}},
                             {"attn_k.bias", kv},
                             {"attn_v.bias", kv}}) {
        w.add_tensor(p + name, {u(n)}, GgmlType::f32, encode(matrix(1, n), GgmlType::f32));
      }
    }
  }
  return w.write(path);
}

}  // namespace weir::inference
