// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe: the text is
// split by the pre-tokenizer's regexes (each regex splits every fragment into its matches and
// the gaps between them), each piece's bytes are mapped to GPT-2's printable characters, and
// the pair with the lowest merge rank is merged until none is left.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>
#include <memory>
#include <queue>

#include "tokenizer/tokenizer_impl.hpp"

namespace weir::inference {

namespace {

// llama.cpp's pre-tokenizer regexes, by tokenizer.ggml.pre.
const std::vector<std::string>& regexes_for(const std::string& pre, bool& known) {
  static const std::string kGpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
  static const std::map<std::string, std::vector<std::string>> table = {
      {"default", {kGpt2}},
      {"gpt-2", {kGpt2}},
      {"mpt", {kGpt2}},
      {"olmo", {kGpt2}},
      {"starcoder", {R"(\p{N})", kGpt2}},
      {"refact", {R"(\p{N})", kGpt2}},
      {"smollm", {R"(\p{N})", kGpt2}},
      {"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      {"deepseek-coder",
       {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
        "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
        R"(\p{N})"}},
      {"deepseek-llm",
       {"[\r\n]",
        R"(\s?[A-Za-z\x{00B5}\x{00C0}-\x{00D6}\x{00D8}-\x{00F6}\x{00F8}-\x{01BA}\x{01BC}-\x{01BF}\x{01C4}-\x{0293}\x{0295}-\x{02AF}\x{0370}-\x{0373}\x{0376}\x{0377}\x{037B}-\x{037D}\x{037F}\x{0386}\x{0388}-\x{03FF}\x{0400}-\x{052F}\x{0531}-\x{0556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{1E00}-\x{1FFF}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
        R"(\p{N}+)"}},
      {"llama3",
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"llama-bpe",
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"qwen2",
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
  };
  auto it = table.find(pre);
  known = it != table.end();
  return known ? it->second : table.at("default");
}

std::string known_pre_names() {
  return "default, gpt-2, mpt, olmo, starcoder, refact, smollm, falcon, deepseek-coder, "
         "deepseek-llm, llama3, "
         "llama-bpe, qwen2";
}

struct Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

using Regexes = std::vector<std::shared_ptr<Code>>;

// The compiled regexes of a known pre-tokenizer. Errors: unsupported (unknown name),
// model_error (a regex does not compile).
Result<Regexes> compile_pre(const std::string& pre, const std::string& where) {
  bool known = false;
  const auto& exprs = regexes_for(pre, known);
  if (!known) {
    return Error(Errc::unsupported, where + ": pre-tokenizer '" + pre +
                                        "' is not supported (weir knows: " + known_pre_names() +
                                        ")");
  }
  Regexes out;
  for (const auto& e : exprs) {
    int err = 0;
    PCRE2_SIZE off = 0;
    auto c = std::make_shared<Code>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(e.data()), e.size(), PCRE2_UTF | PCRE2_UCP,
                            &err, &off, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return Error(Errc::model_error, "pre-tokenizer regex for '" + pre +
                                          "' does not compile: " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // best effort: interpreted without JIT
    out.push_back(std::move(c));
  }
  return out;
}

// Each regex splits every current fragment into its matches and the gaps between them.
std::vector<std::string_view> split_with(const Regexes& regexes, std::string_view text) {
  std::vector<std::string_view> parts = {text};
  pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
  for (const auto& re : regexes) {
    std::vector<std::string_view> next;
    for (auto part : parts) {
      std::size_t start = 0, last = 0;
      while (start <= part.size()) {
        int rc = pcre2_match(re->code, reinterpret_cast<PCRE2_SPTR>(part.data()), part.size(),
                             start, 0, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) {  // empty match: step one character
          start =
              ov[0] + (ov[0] < part.size() ? utf8_len(static_cast<unsigned char>(part[ov[0]])) : 1);
          continue;
        }
        if (ov[0] > last) next.push_back(part.substr(last, ov[0] - last));
        next.push_back(part.substr(ov[0], ov[1] - ov[0]));
        last = start = ov[1];
      }
      if (last < part.size()) next.push_back(part.substr(last));
    }
    parts = std::move(next);
  }
  pcre2_match_data_free(md);
  return parts;
}

class BpeTokenizer final : public Tokenizer {
 public:
  Status init(const GgufFile& f) {
    if (auto st = TokenizerLoader::load_common(*this, f); !st) return st;
    model_ = "gpt2";
    auto pre = f.get_string("tokenizer.ggml.pre");
    pre_ = pre && *pre ? **pre : "default";
    auto compiled = compile_pre(pre_, f.name());
    if (!compiled) return std::move(compiled).error();
    regexes_ = std::move(*compiled);
    auto merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges) return std::move(merges).error();
    if (!*merges)
      return Error(Errc::model_error, f.name() + ": a gpt2 tokenizer needs tokenizer.ggml.merges");
    for (std::size_t i = 0; i < (*merges)->size(); ++i) {
      const std::string& m = (**merges)[i];
      std::size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      ranks_.emplace(m.substr(0, sp) + '\x01' + m.substr(sp + 1), static_cast<int>(i));
    }
    for (int b = 0, extra = 0; b < 256; ++b) {
      const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const std::uint32_t cp =
          direct ? static_cast<std::uint32_t>(b) : 256u + static_cast<std::uint32_t>(extra++);
      std::string s;
      if (cp < 0x80)
        s += static_cast<char>(cp);
      else
        s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
      byte_chars_[b] = s;
    }
    return {};
  }

  void encode_fragment(std::string_view frag, std::vector<std::int32_t>& out) const override {
    for (const auto& piece : pre_split(frag)) bpe(piece, out);
  }

 private:
  std::vector<std::string_view> pre_split(std::string_view text) const {
    return split_with(regexes_, text);
  }

  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
    std::vector<std::string> sym;
    for (unsigned char c : piece) sym.push_back(byte_chars_[c]);
    if (sym.size() > 1) {
      // Repeatedly merge the lowest-ranked adjacent pair (ties: leftmost). Pieces are short
      // (a word), so a linear scan per merge is cheaper than a heap.
      while (true) {
        int best = -1, best_rank = INT32_MAX;
        for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
          auto it = ranks_.find(sym[i] + '\x01' + sym[i + 1]);
          if (it != ranks_.end() && it->second < best_rank)
            best_rank = it->second, best = static_cast<int>(i);
        }
        if (best < 0) break;
        sym[static_cast<std::size_t>(best)] += sym[static_cast<std::size_t>(best) + 1];
        sym.erase(sym.begin() + best + 1);
      }
    }
    for (const auto& s : sym) {
      std::int32_t id = TokenizerLoader::find(*this, s);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (std::size_t i = 0; i < s.size();) {  // not a token: its characters one by one
        std::size_t len = utf8_len(static_cast<unsigned char>(s[i]));
        std::int32_t cid = TokenizerLoader::find(*this, s.substr(i, len));
        if (cid >= 0) out.push_back(cid);
        i += len;
      }
    }
  }

  Regexes regexes_;
  std::unordered_map<std::string, int> ranks_;
  std::string byte_chars_[256];
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const GgufFile& f) {
  auto t = std::make_unique<BpeTokenizer>();
  if (auto st = t->init(f); !st) return std::move(st).error();
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::vector<std::string>> bpe_pre_split(const std::string& pre, std::string_view text) {
  auto regexes = compile_pre(pre, "bpe_pre_split");
  if (!regexes) return std::move(regexes).error();
  std::vector<std::string> out;
  for (auto piece : split_with(*regexes, text)) out.emplace_back(piece);
  return out;
}

}  // namespace weir::inference
