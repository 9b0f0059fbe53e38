// Tokenizers read from GGUF metadata (tokenizer.ggml.*):
//   `llama`: SentencePiece-style BPE with scores, byte fallback and the dummy-prefix space
//            (llama.cpp's SPM algorithm).
//   `gpt2`:  byte-level BPE with ranked merges, after a pre-tokenizer chosen by
//            tokenizer.ggml.pre (default/gpt-2, llama3/llama-bpe, qwen2, deepseek-coder,
//            deepseek-llm, starcoder, refact, smollm, falcon, mpt, olmo); the pre-tokenizer
//            regexes are llama.cpp's, run with PCRE2 (Unicode properties).
// Conformance: ../shared/testdata/vocab vectors (tests/inference/tokenizer_test.cpp).
//
// Thread safety: a Tokenizer is immutable after from_gguf(); encode/decode from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weir/inference/gguf.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference {

class Tokenizer {
 public:
  // Errors: model_error when the file has no tokenizer or it is inconsistent; unsupported for
  // an unknown tokenizer.ggml.model or tokenizer.ggml.pre (the message lists the known ones).
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& f);
  virtual ~Tokenizer() = default;

  // add_special: BOS (and EOS) as the vocabulary asks. parse_special: control and
  // user-defined token texts in `text` (e.g. "<|im_start|>") become their ids.
  virtual std::vector<std::int32_t> encode(std::string_view text, bool add_special = true,
                                           bool parse_special = false) const = 0;
  // The bytes of the ids' pieces; control tokens are skipped when skip_special.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = true) const;
  std::string token_to_piece(std::int32_t id) const;  // raw bytes of one token

  std::int32_t n_vocab() const { return static_cast<std::int32_t>(tokens_.size()); }
  std::int32_t bos() const { return bos_; }
  std::int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool is_eog(std::int32_t id) const;  // eos, eot, <|im_end|>, <|eot_id|>, <end_of_turn>, ...
  std::vector<std::int32_t> eog_tokens() const { return eog_; }
  bool is_control(std::int32_t id) const;
  std::string_view model() const { return model_; }
  std::string_view pre() const { return pre_; }
  std::optional<std::int32_t> token_id(std::string_view text) const;
  const std::string& token_text(std::int32_t id) const {
    return tokens_[static_cast<std::size_t>(id)];
  }

 protected:
  Tokenizer() = default;
  // Splits `text` around special-token texts (when parse_special), tokenising the fragments
  // with `plain` and adding BOS/EOS per `add_special`.
  template <class Plain>
  std::vector<std::int32_t> encode_with_specials(std::string_view text, bool add_special,
                                                 bool parse_special, Plain&& plain) const;

  std::string model_, pre_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<std::int32_t>
      types_;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::pair<std::string, std::int32_t>> specials_;  // longest first
  std::vector<std::int32_t> eog_;
  std::int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  struct Index;
  std::shared_ptr<const Index> index_;  // text -> id
  friend struct TokenizerLoader;
};

// Streaming detokenization: push ids as they are generated; returns only complete UTF-8
// characters (bytes of a split character wait for the rest), never a broken sequence.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t) : t_(t) {}
  std::string push(std::int32_t id);
  // The rest; an incomplete trailing sequence becomes U+FFFD.
  std::string flush();

 private:
  const Tokenizer& t_;
  std::string pending_;
};

}  // namespace weir::inference
