// Private to inference/: the two tokenizer algorithms and what they share.
#pragma once

#include <string>
#include <unordered_map>

#include "weir/inference/tokenizer.hpp"

namespace weir::inference {

struct Tokenizer::Index {
  std::unordered_map<std::string, std::int32_t> ids;
};

// Fills the parts every tokenizer has (tokens, types, special ids). Used by both factories.
struct TokenizerLoader {
  static Status load_common(Tokenizer& t, const GgufFile& f);
  static std::int32_t find(const Tokenizer& t, std::string_view text) {
    auto it = t.index_->ids.find(std::string(text));
    return it == t.index_->ids.end() ? -1 : it->second;
  }
};

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const GgufFile& f);
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const GgufFile& f);

// Length of the UTF-8 sequence starting with byte c (1 for invalid lead bytes).
inline std::size_t utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

template <class Plain>
std::vector<std::int32_t> Tokenizer::encode_with_specials(std::string_view text, bool add_special,
                                                          bool parse_special, Plain&& plain) const {
  std::vector<std::int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  bool first = true;
  while (!text.empty()) {
    std::size_t at = std::string_view::npos, len = 0;
    std::int32_t id = -1;
    // User-defined tokens are always matched (as llama.cpp does); control tokens only when
    // parse_special. Longest first, so the earliest, longest match wins.
    for (const auto& [s, sid] : specials_) {
      if (!parse_special && types_[static_cast<std::size_t>(sid)] == 3) continue;
      std::size_t p = text.find(s);
      if (p != std::string_view::npos && (p < at || (p == at && s.size() > len)))
        at = p, len = s.size(), id = sid;
    }
    std::string_view fragment = text.substr(0, at);
    if (!fragment.empty()) plain(fragment, first, out);
    if (at == std::string_view::npos) break;
    out.push_back(id);
    first = false;
    text.remove_prefix(at + len);
    if (text.empty()) break;
    first = true;  // after a special token a new fragment starts (SentencePiece adds its prefix)
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

// The pieces byte-level BPE's pre-tokenizer `pre` (tokenizer.ggml.pre) splits `text` into,
// before merges. Errors: unsupported for an unknown name. Exposed for tests.
Result<std::vector<std::string>> bpe_pre_split(const std::string& pre, std::string_view text);

}  // namespace weir::inference
