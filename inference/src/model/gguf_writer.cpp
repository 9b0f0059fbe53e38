#include "weir/inference/gguf_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "model/quant.hpp"

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

// ggml's nearest_int: round half to even (valid for |v| < 2^22).
int nearest_int(float v) {
  float f = v + 12582912.0f;
  std::int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// ggml's quantize_row_q4_0_ref: d = (the signed value of largest magnitude) / -8.
void quantize_q4_0(const float* x, BlockQ4_0& y) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK4_0; ++j) {
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  }
  const float d = max / -8, id = d ? 1.0f / d : 0.0f;
  y.d = fp32_to_fp16(d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    const auto q0 = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j] * id + 8.5f)));
    const auto q1 =
        std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j + kQK4_0 / 2] * id + 8.5f)));
    y.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
  }
}

// ggml's make_qkx2_quants: a weighted least-squares fit of scale and min over n values
// quantised to 0..nmax, trying nstep + 1 candidate scales. Returns the scale; *the_min is the
// (non-negative) min subtracted.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, std::uint8_t* L,
                       float* the_min, std::uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]), max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<std::uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best += weights[i] * diff * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<std::uint8_t>(l);
      sum_l += weights[i] * l;
      sum_l2 += weights[i] * l * l;
      sum_xl += weights[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        err += weights[i] * diff * diff;
      }
      if (err < best) {
        std::copy(Laux, Laux + n, L);
        best = err, scale = this_scale, min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's quantize_row_q4_K_ref.
void quantize_q4_k(const float* x, BlockQ4_K& y) {
  std::uint8_t L[kQK_K], Laux[32];
  float weights[32], mins[8], scales[8], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] =
        make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(y.scales, 0, sizeof y.scales);
  for (int j = 0; j < 8; ++j) {
    const auto ls = static_cast<std::uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
    const auto lm = static_cast<std::uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
    if (j < 4) {
      y.scales[j] = ls;
      y.scales[j + 4] = lm;
    } else {
      y.scales[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y.scales[j - 4] |= static_cast<std::uint8_t>((ls >> 4) << 6);
      y.scales[j] |= static_cast<std::uint8_t>((lm >> 4) << 6);
    }
  }
  y.d = fp32_to_fp16(max_scale / 63.0f);
  y.dmin = fp32_to_fp16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {  // requantise with the rounded scales
    std::uint8_t sc, m;
    scale_min_k4(j, y.scales, sc, m);
    const float d = fp16_to_fp32(y.d) * sc;
    if (!d) continue;
    const float dm = fp16_to_fp32(y.dmin) * m;
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] =
          static_cast<std::uint8_t>(std::clamp(nearest_int((x[32 * j + ii] + dm) / d), 0, 15));
  }
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l)
      y.qs[32 * c + l] = static_cast<std::uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

// ggml's make_qx_quants with rmse_type 1 (weights x^2): symmetric quants in -nmax..nmax-1,
// stored offset by nmax; the best of 19 candidate scales.
float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  }
  if (amax < 1e-15f) {  // GROUP_MAX_EPS
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  float iscale = -nmax / max, sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<std::int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<std::int8_t>(nmax +
                                        std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml's quantize_row_q6_K_ref.
void quantize_q6_k(const float* x, BlockQ6_K& y) {
  std::int8_t L[kQK_K];
  float scales[16], max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
    if (std::fabs(scales[ib]) > max_abs_scale)
      max_abs_scale = std::fabs(scales[ib]), max_scale = scales[ib];
  }
  std::memset(&y, 0, sizeof y);
  if (max_abs_scale < 1e-15f) return;  // all zero
  const float iscale = -128.0f / max_scale;
  y.d = fp32_to_fp16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib)
    y.scales[ib] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = fp16_to_fp32(y.d) * y.scales[j];
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii)
      L[16 * j + ii] =
          static_cast<std::int8_t>(std::clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
  }
  for (int h = 0; h < 2; ++h) {
    const std::int8_t* l8 = L + 128 * h;
    std::uint8_t* ql = y.ql + 64 * h;
    std::uint8_t* qh = y.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<std::uint8_t>((l8[l] & 0xF) | ((l8[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<std::uint8_t>((l8[l + 32] & 0xF) | ((l8[l + 96] & 0xF) << 4));
      qh[l] = static_cast<std::uint8_t>((l8[l] >> 4) | ((l8[l + 32] >> 4) << 2) |
                                        ((l8[l + 64] >> 4) << 4) | ((l8[l + 96] >> 4) << 6));
    }
  }
}

template <class Block, int QK>
void encode_blocks(std::span<const float> v, void (*quantize)(const float*, Block&),
                   std::string& s) {
  for (std::size_t b = 0; b < v.size() / QK; ++b) {
    Block blk{};
    quantize(v.data() + b * QK, blk);
    s.append(reinterpret_cast<const char*>(&blk), sizeof blk);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0& blk) {
  float amax = 0;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
  blk.d = fp32_to_fp16(d);
  for (int j = 0; j < kQK8_0; ++j) blk.qs[j] = static_cast<std::int8_t>(std::lround(x[j] * id));
}

std::string encode(const std::vector<float>& v, GgmlType type) {
  auto r = quantize_tensor(v, type);
  return r ? std::move(*r) : std::string();  // callers pass valid types and lengths
}

// The type a tensor with rows of `cols` gets in a file of `type`: Q4_K_M-style mixes fall
// back to Q4_0 (for Q4_K) and Q8_0 (for Q6_K) where rows are not a multiple of 256, as
// llama.cpp's quantiser falls back to a 32-block type.
GgmlType fit(GgmlType type, std::int64_t cols) {
  if (cols % kQK_K == 0) return type;
  if (type == GgmlType::q4_k) return GgmlType::q4_0;
  if (type == GgmlType::q6_k) return GgmlType::q8_0;
  return type;
}

}  // namespace

Result<std::string> quantize_tensor(std::span<const float> values, GgmlType type) {
  auto blk = ggml_type_block(type);
  const bool known = type == GgmlType::f32 || type == GgmlType::f16 || type == GgmlType::q8_0 ||
                     type == GgmlType::q4_0 || type == GgmlType::q4_k || type == GgmlType::q6_k;
  if (!known || !blk) {
    return Error(Errc::invalid_argument, std::string("cannot quantise to ") + ggml_type_name(type) +
                                             " (weir writes F32, F16, Q8_0, Q4_0, Q4_K and Q6_K)");
  }
  if (values.size() % blk->first != 0) {
    return Error(Errc::invalid_argument,
                 std::to_string(values.size()) + " values are not a whole number of " +
                     ggml_type_name(type) + " blocks of " + std::to_string(blk->first));
  }
  std::string s;
  s.reserve(values.size() / blk->first * blk->second);
  switch (type) {
    case GgmlType::f16:
      for (float f : values) put<std::uint16_t>(s, fp32_to_fp16(f));
      break;
    case GgmlType::q8_0:
      encode_blocks<BlockQ8_0, kQK8_0>(values, quantize_q8_0, s);
      break;
    case GgmlType::q4_0:
      encode_blocks<BlockQ4_0, kQK4_0>(values, quantize_q4_0, s);
      break;
    case GgmlType::q4_k:
      encode_blocks<BlockQ4_K, kQK_K>(values, quantize_q4_k, s);
      break;
    case GgmlType::q6_k:
      encode_blocks<BlockQ6_K, kQK_K>(values, quantize_q6_k, s);
      break;
    default:
      s.assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  }
  return s;
}

Status write_random_llama(const std::filesystem::path& path, const RandomModelShape& sh,
                          GgmlType type, std::uint64_t seed) {
  if (type != GgmlType::f32 && type != GgmlType::f16 && type != GgmlType::q8_0 &&
      type != GgmlType::q4_0 && type != GgmlType::q4_k) {
    return Error(Errc::invalid_argument,
                 "random models are written as F32, F16, Q8_0, Q4_0 or Q4_K (Q4_K_M mix)");
  }
  const bool blocks32 = type != GgmlType::f32 && type != GgmlType::f16;
  if (sh.dim % sh.n_heads || sh.n_heads % sh.n_kv_heads ||
      (blocks32 && (sh.dim % 32 || sh.hidden % 32))) {
    return Error(Errc::invalid_argument,
                 "inconsistent model shape (dim divisible by heads, heads by KV heads, quantised "
                 "rows by 32)");
  }
  if (sh.n_vocab < 259 + 16)
    return Error(Errc::invalid_argument, "n_vocab must be at least 275 (control and byte tokens)");
  GgufWriter w;
  const std::string arch = sh.qwen2 ? "qwen2" : "llama";
  w.add_string("general.architecture", arch);
  w.add_string("general.name",
               "weir-random-" + std::to_string(sh.dim) + "x" + std::to_string(sh.n_layers));
  // llama.cpp's LLAMA_FTYPE: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7, Q4_K_M 15.
  const std::uint32_t ftype = type == GgmlType::f32    ? 0
                              : type == GgmlType::f16  ? 1
                              : type == GgmlType::q4_0 ? 2
                              : type == GgmlType::q8_0 ? 7
                                                       : 15;
  w.add_u32("general.file_type", ftype);
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
    // Bijective base 26 (a..z, aa..zz, ...): every piece is distinct, as llama.cpp requires
    // of a vocabulary (it refuses a file with two equal token strings).
    for (std::uint64_t k = i + 1; k > 0; k = (k - 1) / letters.size())
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
  const bool q4_k_m = type == GgmlType::q4_k;
  // A [rows, cols] matrix in `t` (after the 256-block fallback), drawn from the generator.
  auto add = [&](const std::string& name, std::int64_t rows, std::int64_t cols, GgmlType t) {
    const GgmlType ft = fit(t, cols);
    w.add_tensor(name, {u(cols), u(rows)}, ft, encode(matrix(rows, cols), ft));
  };
  {
    auto embd = matrix(sh.n_vocab, sh.dim);
    const GgmlType et = fit(type, sh.dim);
    w.add_tensor("token_embd.weight", {u(sh.dim), u(sh.n_vocab)}, et, encode(embd, et));
    if (q4_k_m) {  // Q4_K_M keeps the classifier in Q6_K: the same (tied) values, untied
      const GgmlType ot = fit(GgmlType::q6_k, sh.dim);
      w.add_tensor("output.weight", {u(sh.dim), u(sh.n_vocab)}, ot, encode(embd, ot));
    }
  }
  std::vector<float> ones(static_cast<std::size_t>(sh.dim), 1.0f);
  w.add_tensor("output_norm.weight", {u(sh.dim)}, GgmlType::f32, encode(ones, GgmlType::f32));
  for (int l = 0; l < sh.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    // Q4_K_M gives attn_v and ffn_down Q6_K in the first and last eighth of the layers and
    // every third layer between (llama.cpp's use_more_bits).
    const int nl = sh.n_layers;
    const bool more_bits = l < nl / 8 || l >= 7 * nl / 8 || (l - nl / 8) % 3 == 2;
    const GgmlType vt = q4_k_m && more_bits ? GgmlType::q6_k : type;
    w.add_tensor(p + "attn_norm.weight", {u(sh.dim)}, GgmlType::f32, encode(ones, GgmlType::f32));
    w.add_tensor(p + "ffn_norm.weight", {u(sh.dim)}, GgmlType::f32, encode(ones, GgmlType::f32));
    add(p + "attn_q.weight", sh.dim, sh.dim, type);
    add(p + "attn_k.weight", kv, sh.dim, type);
    add(p + "attn_v.weight", kv, sh.dim, vt);
    add(p + "attn_output.weight", sh.dim, sh.dim, type);
    add(p + "ffn_gate.weight", sh.hidden, sh.dim, type);
    add(p + "ffn_up.weight", sh.hidden, sh.dim, type);
    add(p + "ffn_down.weight", sh.dim, sh.hidden, vt);
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
