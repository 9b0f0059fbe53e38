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

// The pieces byte-level BPE's pre-tokenizer `pre` (tokenizer.ggml.pre) splits `text` into,
// before merges. Errors: unsupported for an unknown name. Exposed for tests.
Result<std::vector<std::string>> bpe_pre_split(const std::string& pre, std::string_view text);

}  // namespace weir::inference
