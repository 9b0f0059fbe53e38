#include <algorithm>

#include "tokenizer/tokenizer_impl.hpp"

namespace weir::inference {

Status TokenizerLoader::load_common(Tokenizer& t, const GgufFile& f) {
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return std::move(tokens).error();
  if (!*tokens || (*tokens)->empty())
    return Error(Errc::model_error, f.name() + ": no tokenizer (tokenizer.ggml.tokens is missing)");
  t.tokens_ = std::move(**tokens);
  const std::size_t n = t.tokens_.size();
  if (auto s = f.get_float_array("tokenizer.ggml.scores"); s && *s) t.scores_ = std::move(**s);
  if (auto ty = f.get_int_array("tokenizer.ggml.token_type"); ty && *ty) t.types_ = std::move(**ty);
  if ((!t.scores_.empty() && t.scores_.size() != n) ||
      (!t.types_.empty() && t.types_.size() != n)) {
    return Error(Errc::model_error,
                 f.name() + ": tokenizer arrays disagree on the vocabulary size");
  }
  if (t.types_.empty()) t.types_.assign(n, 1);
  auto index = std::make_shared<Tokenizer::Index>();
  index->ids.reserve(n * 2);
  for (std::size_t i = 0; i < n; ++i)
    index->ids.emplace(t.tokens_[i], static_cast<std::int32_t>(i));
  t.index_ = std::move(index);
  auto id_of = [&](const char* key, std::int32_t& dst) -> Status {
    auto v = f.get_int(key);
    if (!v) return std::move(v).error();
    if (*v) {
      if (**v < 0 || static_cast<std::size_t>(**v) >= n) {
        return Error(Errc::model_error, f.name() + ": " + key + " = " + std::to_string(**v) +
                                            " is outside the vocabulary");
      }
      dst = static_cast<std::int32_t>(**v);
    }
    return {};
  };
  if (auto st = id_of("tokenizer.ggml.bos_token_id", t.bos_); !st) return st;
  if (auto st = id_of("tokenizer.ggml.eos_token_id", t.eos_); !st) return st;
  if (auto st = id_of("tokenizer.ggml.unknown_token_id", t.unk_); !st) return st;
  std::int32_t eot = -1;
  if (auto st = id_of("tokenizer.ggml.eot_token_id", eot); !st) return st;
  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token"); b && *b) t.add_bos_ = **b;
  if (auto e = f.get_bool("tokenizer.ggml.add_eos_token"); e && *e) t.add_eos_ = **e;
  for (std::size_t i = 0; i < n; ++i) {
    if ((t.types_[i] == 3 || t.types_[i] == 4) && !t.tokens_[i].empty())
      t.specials_.emplace_back(t.tokens_[i], static_cast<std::int32_t>(i));
  }
  std::sort(t.specials_.begin(), t.specials_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  if (t.eos_ >= 0) t.eog_.push_back(t.eos_);
  if (eot >= 0) t.eog_.push_back(eot);
  for (const char* s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                        "<|end_of_text|>"}) {
    std::int32_t id = find(t, s);
    if (id >= 0 && std::find(t.eog_.begin(), t.eog_.end(), id) == t.eog_.end())
      t.eog_.push_back(id);
  }
  return {};
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return std::move(model).error();
  if (!*model)
    return Error(Errc::model_error, f.name() + ": no tokenizer (tokenizer.ggml.model is missing)");
  if (**model == "llama") return make_spm_tokenizer(f);
  if (**model == "gpt2") return make_bpe_tokenizer(f);
  return Error(Errc::unsupported, f.name() + ": tokenizer model '" + **model +
                                      "' is not supported (weir reads: llama, gpt2)");
}

Tokenizer::SpecialMatch Tokenizer::find_special(std::string_view text, std::size_t from,
                                                std::size_t to, bool control) const {
  SpecialMatch m;
  const std::string_view window = text.substr(from, to - from);
  // Longest first: of two matches at one position the longer wins.
  for (const auto& [s, id] : specials_) {
    // Outside markup, control tokens and end-of-generation tokens are text; user-defined
    // tokens (vocabulary pieces such as deepseek-coder's "ü") match, as in llama.cpp.
    if (!control && (types_[static_cast<std::size_t>(id)] == 3 || is_eog(id))) continue;
    const std::size_t p = window.find(s);
    if (p != std::string_view::npos && (m.at == std::string_view::npos || from + p < m.at))
      m = {from + p, s.size(), id};
  }
  return m;
}

template <class Next>
std::vector<std::int32_t> Tokenizer::encode_split(std::string_view text, bool add_special,
                                                  Next&& next) const {
  std::vector<std::int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  std::size_t pos = 0;
  while (pos < text.size()) {
    const SpecialMatch m = next(pos);
    const std::size_t end = m.at == std::string_view::npos ? text.size() : m.at;
    if (end > pos) encode_fragment(text.substr(pos, end - pos), out);
    if (m.at == std::string_view::npos) break;
    out.push_back(m.id);
    pos = m.at + m.len;
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                            bool parse_special) const {
  return encode_split(text, add_special, [&](std::size_t from) {
    return find_special(text, from, text.size(), parse_special);
  });
}

std::vector<std::int32_t> Tokenizer::encode_marked(std::string_view text,
                                                   std::span<const TextRange> markup,
                                                   bool add_special) const {
  std::size_t r = 0;  // markup ranges before `r` end at or before the position searched from
  return encode_split(text, add_special, [&](std::size_t from) {
    // What any text may hold (user-defined tokens), or the first special token in markup.
    SpecialMatch m = find_special(text, from, text.size(), false);
    for (; r < markup.size(); ++r) {
      const std::size_t end = std::min(markup[r].end, text.size());
      if (end <= from) continue;
      const std::size_t begin = std::max(markup[r].begin, from);
      if (begin >= end) continue;
      if (begin > m.at) break;  // the text's match comes first
      if (SpecialMatch k = find_special(text, begin, end, true);
          k.id >= 0 && (k.at < m.at || (k.at == m.at && k.len > m.len)))
        return k;
      if (m.at < end) break;  // the text's match is in or before this range
    }
    return m;
  });
}

bool Tokenizer::is_eog(std::int32_t id) const {
  return std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

bool Tokenizer::is_control(std::int32_t id) const {
  return id >= 0 && id < n_vocab() &&
         (types_[static_cast<std::size_t>(id)] == 3 || types_[static_cast<std::size_t>(id)] == 2);
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view text) const {
  std::int32_t id = TokenizerLoader::find(*this, text);
  return id < 0 ? std::nullopt : std::optional<std::int32_t>(id);
}

namespace {

// GPT-2's byte-level mapping, inverted: code point of a vocab character -> byte.
int unicode_to_byte(std::uint32_t cp) {
  static const auto table = [] {
    std::vector<int> t(512, -1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[direct ? b : 256 + extra++] = b;
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace

std::string Tokenizer::token_to_piece(std::int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  const std::string& text = tokens_[static_cast<std::size_t>(id)];
  const std::int32_t type = types_[static_cast<std::size_t>(id)];
  if (model_ == "llama") {
    if (type == 6 && text.size() == 6 && text.rfind("<0x", 0) == 0) {  // <0xXX>
      return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    }
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
      if (text.compare(i, 3, "\xe2\x96\x81") == 0)
        out += ' ', i += 3;
      else
        out += text[i++];
    }
    return out;
  }
  if (type == 3 || type == 4) return text;  // special tokens are their text
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t len = utf8_len(c);
    std::uint32_t cp = len == 1 ? c : c & (0xFF >> (len + 1));
    for (std::size_t k = 1; k < len && i + k < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    int b = unicode_to_byte(cp);
    if (b >= 0)
      out += static_cast<char>(b);
    else
      out.append(text, i, len);
    i += len;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::string out;
  for (std::int32_t id : ids) {
    if (skip_special && is_control(id)) continue;
    out += token_to_piece(id);
  }
  return out;
}

std::string StreamDecoder::push(std::int32_t id) {
  if (t_.is_control(id)) return {};
  pending_ += t_.token_to_piece(id);
  // Emit every complete character; keep an incomplete tail (at most 3 bytes) for later. A lead
  // byte followed by a byte that continues no character is a character of its own (invalid:
  // U+FFFD to a reader), so that the byte after it starts the next one, as a reader of the
  // whole text takes them: a split here must never fall inside a valid character.
  std::size_t i = 0, emit = 0;
  while (i < pending_.size()) {
    const std::size_t len = utf8_len(static_cast<unsigned char>(pending_[i]));
    std::size_t k = 1;
    while (k < len && i + k < pending_.size() &&
           (static_cast<unsigned char>(pending_[i + k]) & 0xC0) == 0x80)
      ++k;
    if (k < len && i + k >= pending_.size()) break;  // may still be completed
    i += k;  // the character, or its lead alone when a byte broke it
    emit = i;
  }
  std::string out = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? "" : "\xef\xbf\xbd";
  pending_.clear();
  return out;
}

}  // namespace weir::inference
