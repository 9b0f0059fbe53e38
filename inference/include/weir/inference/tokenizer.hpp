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

// A byte range [begin, end) of a text.
struct TextRange {
  std::size_t begin = 0, end = 0;
};

class Tokenizer {
 public:
  // Errors: model_error when the file has no tokenizer or it is inconsistent; unsupported for
  // an unknown tokenizer.ggml.model or tokenizer.ggml.pre (the message lists the known ones).
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& f);
  virtual ~Tokenizer() = default;

  // add_special: BOS (and EOS) as the vocabulary asks. parse_special: control token texts in
  // `text` (e.g. "<|im_start|>") become their ids. Without it the text is text: control and
  // end-of-generation token texts stay characters ("</s>" is four of them); user-defined
  // tokens, which are ordinary pieces of some vocabularies (deepseek-coder's "ü"), still match,
  // as in llama.cpp (its conformance vectors expect them).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special = true,
                                   bool parse_special = false) const;
  // For text that mixes markup with content a user, a tool or a document supplied (a chat
  // prompt): inside the `markup` ranges (ascending, not overlapping: the chat template's
  // markers) special-token texts become their ids, as with parse_special; everywhere else the
  // text is text, as without it, so a message cannot end the sequence or open a turn. A special
  // token counts only when it lies wholly inside one range. Between special tokens the text is
  // tokenised in one piece, so content next to markup tokenises as encode() would. With no
  // ranges this is encode(text, add_special, false).
  std::vector<std::int32_t> encode_marked(std::string_view text, std::span<const TextRange> markup,
                                          bool add_special = true) const;
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
  // Appends the ids of `fragment`, a run of text with no special token in it (a new fragment
  // starts the text and follows each special token: SentencePiece adds its space prefix there).
  virtual void encode_fragment(std::string_view fragment, std::vector<std::int32_t>& out) const = 0;

  // The earliest (then longest) special token whose text lies wholly inside text[from, to):
  // control tokens only when `control`; {npos, 0, -1} when none.
  struct SpecialMatch {
    std::size_t at = std::string_view::npos, len = 0;
    std::int32_t id = -1;
  };
  SpecialMatch find_special(std::string_view text, std::size_t from, std::size_t to,
                            bool control) const;
  // BOS, the fragments between the special tokens `next(from)` finds, EOS (per add_special).
  template <class Next>
  std::vector<std::int32_t> encode_split(std::string_view text, bool add_special,
                                         Next&& next) const;

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
