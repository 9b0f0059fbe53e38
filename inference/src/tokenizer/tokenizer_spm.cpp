// SentencePiece-style BPE (tokenizer.ggml.model = "llama"), as llama.cpp's llm_tokenizer_spm:
// spaces become U+2581, a dummy-prefix space starts each fragment, then the adjacent pair
// whose concatenation is a token with the highest score is merged until none is left (ties:
// leftmost); characters that are not tokens become their UTF-8 byte tokens <0xXX>.
#include <queue>

#include "tokenizer/tokenizer_impl.hpp"

namespace weir::inference {

namespace {

class SpmTokenizer final : public Tokenizer {
 public:
  Status init(const GgufFile& f) {
    if (auto st = TokenizerLoader::load_common(*this, f); !st) return st;
    model_ = "llama";
    add_space_prefix_ = true;
    if (auto p = f.get_bool("tokenizer.ggml.add_space_prefix"); p && *p) add_space_prefix_ = **p;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids_[b] = TokenizerLoader::find(*this, name);
    }
    return {};
  }

  void encode_fragment(std::string_view frag, std::vector<std::int32_t>& out) const override {
    encode_spm(frag, add_space_prefix_, out);
  }

 private:
  struct Symbol {
    int prev, next;
    std::size_t start, len;  // bytes in `text`
  };
  struct Bigram {
    int left, right;
    float score;
    std::size_t len;
    bool operator<(const Bigram& o) const {  // max-heap: higher score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };

  void encode_spm(std::string_view frag, bool prefix, std::vector<std::int32_t>& out) const {
    std::string text;
    if (prefix) text += "\xe2\x96\x81";
    for (char c : frag) {
      if (c == ' ')
        text += "\xe2\x96\x81";
      else
        text += c;
    }
    std::vector<Symbol> sym;
    for (std::size_t i = 0; i < text.size();) {
      std::size_t len = std::min(utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
      sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, len});
      i += len;
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    std::priority_queue<Bigram> q;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      std::string_view s(text.data() + sym[l].start, sym[l].len + sym[r].len);
      auto id = TokenizerLoader::find(*this, s);
      if (id >= 0)
        q.push({l, r, scores_.empty() ? 0.0f : scores_[static_cast<std::size_t>(id)], s.size()});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!q.empty()) {
      Bigram b = q.top();
      q.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int i = 0; i != -1 && i < static_cast<int>(sym.size()); i = sym[i].next) {
      if (sym[i].len == 0) continue;
      std::string_view s(text.data() + sym[i].start, sym[i].len);
      std::int32_t id = TokenizerLoader::find(*this, s);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (unsigned char c : s) {  // byte fallback
        std::int32_t bid = byte_ids_[c];
        out.push_back(bid >= 0 ? bid : (unk_ >= 0 ? unk_ : 0));
      }
    }
  }

  bool add_space_prefix_ = true;
  std::int32_t byte_ids_[256] = {};
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const GgufFile& f) {
  auto t = std::make_unique<SpmTokenizer>();
  if (auto st = t->init(f); !st) return std::move(st).error();
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace weir::inference
