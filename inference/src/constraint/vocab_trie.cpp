#include "constraint/vocab_trie.hpp"

#include <algorithm>
#include <cctype>

namespace weir::inference::constraint {

const std::bitset<256> kPlain = [] {
  std::bitset<256> s;
  for (int c = 0x20; c < 0x7F; ++c) s.set(static_cast<std::size_t>(c));
  s.reset('"');
  s.reset('\\');
  return s;
}();

int plain_category(unsigned char c) {
  if (!kPlain.test(c)) return kNotPlainCategory;
  if (c >= 'a' && c <= 'z') return 0;
  if (c >= 'A' && c <= 'Z') return 1;
  if (c >= '0' && c <= '9') return 2;
  if (c == ' ') return 3;
  static const auto punct = [] {  // the other plain bytes, one category each
    std::array<int, 256> k{};
    int next = 4;
    for (int b = 0x21; b < 0x7F; ++b)
      if (kPlain.test(static_cast<std::size_t>(b)) && !std::isalnum(b))
        k[static_cast<std::size_t>(b)] = next++;
    return k;
  }();
  return punct[c];
}

int utf8_lead_group(unsigned char c) {
  if (c >= 0xC2 && c <= 0xDF) return 0;
  if (c == 0xE0) return 1;
  if (c >= 0xE1 && c <= 0xEC) return 2;
  if (c == 0xED) return 3;
  if (c == 0xEE || c == 0xEF) return 4;
  if (c == 0xF0) return 5;
  if (c >= 0xF1 && c <= 0xF3) return 6;
  if (c == 0xF4) return 7;
  return -1;
}

std::uint8_t utf8_next(std::uint8_t at, unsigned char c) {
  switch (at) {
    case kAtBoundary:
      if (kPlain.test(c)) return kAtBoundary;
      if (c >= 0xC2 && c <= 0xDF) return kNeed1;
      if (c == 0xE0) return kE0;
      if (c == 0xED) return kED;
      if (c >= 0xE1 && c <= 0xEF) return kNeed2;
      if (c == 0xF0) return kF0;
      if (c >= 0xF1 && c <= 0xF3) return kNeed3;
      if (c == 0xF4) return kF4;
      return kUtf8Invalid;
    case kE0:
      return c >= 0xA0 && c <= 0xBF ? std::uint8_t{kNeed1} : kUtf8Invalid;
    case kED:
      return c >= 0x80 && c <= 0x9F ? std::uint8_t{kNeed1} : kUtf8Invalid;
    case kF0:
      return c >= 0x90 && c <= 0xBF ? std::uint8_t{kNeed2} : kUtf8Invalid;
    case kF4:
      return c >= 0x80 && c <= 0x8F ? std::uint8_t{kNeed2} : kUtf8Invalid;
    default:  // kNeed1..3
      return c >= 0x80 && c <= 0xBF ? static_cast<std::uint8_t>(at - 1) : kUtf8Invalid;
  }
}

std::uint64_t categories_held(const std::bitset<256>& set) {
  static const auto bytes = [] {
    std::array<std::bitset<256>, 64> b{};
    for (int c = 0; c < 256; ++c)
      b[static_cast<std::size_t>(plain_category(static_cast<unsigned char>(c)))].set(
          static_cast<std::size_t>(c));
    return b;
  }();
  std::uint64_t held = 0;
  for (int k = 0; k < kNotPlainCategory; ++k)
    if (bytes[static_cast<std::size_t>(k)].any() &&
        (bytes[static_cast<std::size_t>(k)] & ~set).none())
      held |= std::uint64_t{1} << k;
  return held;
}

namespace {

// VocabTrie::text, children before parents (reverse preorder), for each place a decoder may
// stand before the node's byte; kept for the nodes read from a boundary whose `plain` is 0.
void mark_text(VocabTrie& v) {
  // Per node and decoder place: kNotText, or the most characters a path below starts (at most
  // kTextHeight) | the most bytes a token below leaves its last character short << 6.
  constexpr std::uint8_t kNotText = 0xFF;
  auto height = [](std::uint8_t x) { return static_cast<unsigned>(x & VocabTrie::kTextHeight); };
  auto tail = [](std::uint8_t x) { return static_cast<unsigned>(x >> 6); };
  std::array<std::array<std::uint8_t, 256>, kUtf8At> next{};
  for (std::uint8_t at = 0; at < kUtf8At; ++at)
    for (unsigned c = 0; c < 256; ++c) next[at][c] = utf8_next(at, static_cast<unsigned char>(c));
  std::vector<std::array<std::uint8_t, kUtf8At>> t(v.nodes.size());
  v.text.assign(v.nodes.size(), 0);
  for (std::size_t i = v.nodes.size(); i-- > 1;) {
    const auto& node = v.nodes[i];
    const bool token = v.tok_begin[i] < v.tok_begin[i + 1];
    for (std::uint8_t at = 0; at < kUtf8At; ++at) {
      const std::uint8_t after = next[at][node.byte];
      std::uint8_t r = kNotText;
      if (after != kUtf8Invalid) {
        unsigned h = 0, most_tail = token ? kUtf8Remaining[after] : 0;
        bool ok = true;
        for (std::uint32_t k = static_cast<std::uint32_t>(i) + 1; k < node.end && ok;
             k = v.nodes[k].end) {
          const std::uint8_t c = t[k][after];
          ok = c != kNotText;
          h = std::max(h, height(c));
          most_tail = std::max(most_tail, tail(c));
        }
        h += at == kAtBoundary ? 1 : 0;
        if (ok && h <= VocabTrie::kTextHeight) r = static_cast<std::uint8_t>(h | most_tail << 6);
      }
      t[i][at] = r;
    }
    if (const std::uint8_t b = t[i][kAtBoundary]; node.plain == 0 && b != kNotText) {
      unsigned below = 0;  // the tail of the tokens below this node's own
      const std::uint8_t after = next[kAtBoundary][node.byte];
      for (std::uint32_t k = static_cast<std::uint32_t>(i) + 1; k < node.end; k = v.nodes[k].end)
        below = std::max(below, tail(t[k][after]));
      v.text[i] = static_cast<std::uint8_t>(height(b) | below << VocabTrie::kTextTailShift);
    }
  }
  // text_total, in preorder: where the decoder stands after each depth's node on the path
  // (kUtf8Invalid once the path is not text) and how many characters the path has started.
  v.text_total.assign(v.nodes.size(), 0);
  std::vector<std::uint8_t> at_depth(v.max_depth + 1, kAtBoundary);
  std::vector<std::uint8_t> chars_depth(v.max_depth + 1, 0);
  for (std::uint32_t i = 1; i < v.nodes.size(); ++i) {
    const auto& node = v.nodes[i];
    const std::uint8_t at = at_depth[node.depth - 1u];
    const unsigned chars = chars_depth[node.depth - 1u];
    at_depth[node.depth] = at == kUtf8Invalid ? kUtf8Invalid : next[at][node.byte];
    chars_depth[node.depth] =
        static_cast<std::uint8_t>(std::min<unsigned>(chars + (at == kAtBoundary ? 1 : 0), 0xFF));
    if (at == kUtf8Invalid || t[i][at] == kNotText) continue;
    if (const unsigned total = chars + height(t[i][at]); total <= VocabTrie::kTextHeight)
      v.text_total[i] =
          static_cast<std::uint8_t>(total | (tail(t[i][at]) != 0 ? VocabTrie::kHasCut : 0));
  }
}

// VocabTrie::text_masks: each token that spells text, by its characters (a cut last one
// counts) in every bucket that long or longer.
void mask_text(VocabTrie& v) {
  const std::size_t words = mask_words(v.n_vocab);
  for (std::uint32_t chars :
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 28, 32, 40, 48, 63})
    v.text_masks.push_back({chars, std::vector<std::uint64_t>(words, 0)});
  std::vector<std::pair<unsigned, std::int32_t>> cut;  // (characters, token)
  for (std::int32_t id = 0; id < v.n_vocab; ++id) {
    const std::string& p = v.pieces[static_cast<std::size_t>(id)];
    if (p.empty()) continue;
    std::uint8_t at = kAtBoundary;
    unsigned chars = 0;
    std::uint64_t cats = 0;
    for (unsigned char c : p) {
      if (at == kAtBoundary) ++chars;
      at = utf8_next(at, c);
      if (at == kUtf8Invalid) break;
      const int lead = utf8_lead_group(c);
      if (lead >= 0) cats |= std::uint64_t{1} << (kLeadCategory + lead);
      if (kPlain.test(c)) cats |= std::uint64_t{1} << plain_category(c);
    }
    if (at == kUtf8Invalid) continue;
    if (at != kAtBoundary) cut.emplace_back(chars, id);
    for (auto& b : v.text_masks) {
      if (chars > b.chars) continue;
      b.words[static_cast<std::uint32_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
      b.cats |= cats;
      b.tail = std::max<std::uint32_t>(b.tail, kUtf8Remaining[at]);
      if (at != kAtBoundary) ++b.cut;
    }
  }
  std::sort(cut.begin(), cut.end());
  for (auto [chars, id] : cut) v.text_cut.push_back(id);
}

}  // namespace

std::shared_ptr<const VocabTrie> build_trie(const Tokenizer& t) {
  auto v = std::make_shared<VocabTrie>();
  v->n_vocab = t.n_vocab();
  v->eog = t.eog_tokens();
  v->pieces.resize(static_cast<std::size_t>(v->n_vocab));
  std::vector<std::int32_t> ids;
  for (std::int32_t id = 0; id < v->n_vocab; ++id) {
    if (t.is_eog(id)) continue;
    if (t.is_control(id)) {
      if (std::string p = t.token_to_piece(id); !p.empty()) v->control_pieces.emplace(id, p);
      continue;
    }
    std::string p = t.token_to_piece(id);
    if (p.empty() || p.size() > 0xFFFF) continue;
    v->pieces[static_cast<std::size_t>(id)] = std::move(p);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](std::int32_t a, std::int32_t b) {
    return v->pieces[static_cast<std::size_t>(a)] < v->pieces[static_cast<std::size_t>(b)];
  });
  v->nodes.push_back({0, 0, 0, 0});
  std::vector<std::uint32_t> path = {0};                   // node index at each depth
  std::vector<std::pair<std::uint32_t, std::int32_t>> at;  // (node, token)
  std::string_view prev;
  for (std::int32_t id : ids) {
    std::string_view p = v->pieces[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    while (common < prev.size() && common < p.size() && prev[common] == p[common]) ++common;
    while (path.size() > common + 1) {
      v->nodes[path.back()].end = static_cast<std::uint32_t>(v->nodes.size());
      path.pop_back();
    }
    for (std::size_t k = common; k < p.size(); ++k) {
      path.push_back(static_cast<std::uint32_t>(v->nodes.size()));
      v->nodes.push_back(
          {0, static_cast<std::uint16_t>(k + 1), static_cast<std::uint8_t>(p[k]), 0});
    }
    v->max_depth = std::max(v->max_depth, p.size());
    at.emplace_back(path.back(), id);
    prev = p;
  }
  while (!path.empty()) {
    v->nodes[path.back()].end = static_cast<std::uint32_t>(v->nodes.size());
    path.pop_back();
  }
  // Categories of each subtree, children before parents (reverse preorder).
  v->cats.assign(v->nodes.size(), 0);
  for (std::size_t i = v->nodes.size(); i-- > 1;) {
    const int lead = utf8_lead_group(v->nodes[i].byte);
    std::uint64_t c = std::uint64_t{1}
                      << (lead >= 0 ? kLeadCategory + lead : plain_category(v->nodes[i].byte));
    for (std::uint32_t k = static_cast<std::uint32_t>(i) + 1; k < v->nodes[i].end;
         k = v->nodes[k].end)
      c |= v->cats[k];
    v->cats[i] = c;
  }
  // Plain heights, children before parents (reverse preorder).
  for (std::size_t i = v->nodes.size(); i-- > 1;) {
    auto& node = v->nodes[i];
    if (!kPlain.test(node.byte)) continue;
    unsigned h = 1;
    for (std::uint32_t c = static_cast<std::uint32_t>(i) + 1; c < node.end && h != 0;
         c = v->nodes[c].end) {
      const unsigned ch = v->nodes[c].plain;
      h = ch == 0 || ch + 1 > VocabTrie::kPlainHeight ? 0 : std::max(h, ch + 1);
    }
    node.plain = static_cast<std::uint8_t>(h);
  }
  v->tok_begin.assign(v->nodes.size() + 1, 0);
  for (auto [n, id] : at) ++v->tok_begin[n + 1];
  for (std::size_t i = 1; i < v->tok_begin.size(); ++i) v->tok_begin[i] += v->tok_begin[i - 1];
  v->toks.resize(at.size());
  std::vector<std::uint32_t> fill(v->tok_begin.begin(), v->tok_begin.end() - 1);
  for (auto [n, id] : at) v->toks[fill[n]++] = id;
  mark_text(*v);
  mask_text(*v);
  std::bitset<256> single;  // bytes that are a token of their own
  for (std::uint32_t c = 1; c < v->nodes.size(); c = v->nodes[c].end) {
    v->root_child[v->nodes[c].byte] = c;
    v->root_total[v->nodes[c].byte] = v->text_total[c];
    if (v->tok_begin[c] < v->tok_begin[c + 1]) single.set(v->nodes[c].byte);
  }
  v->every_byte_a_token = single.all();
  v->is_wide.assign(v->nodes.size(), false);
  for (std::uint32_t i = 1; i < v->nodes.size(); ++i) {
    std::uint32_t n = 0;
    for (std::uint32_t c = i + 1; c < v->nodes[i].end; c = v->nodes[c].end) ++n;
    if (n < VocabTrie::kWide) continue;
    v->is_wide[i] = true;
    auto& table = v->wide[i];
    table.child.fill(0);
    table.total.fill(0);
    for (std::uint32_t c = i + 1; c < v->nodes[i].end; c = v->nodes[c].end) {
      table.child[v->nodes[c].byte] = c;
      table.total[v->nodes[c].byte] = v->text_total[c];
    }
  }
  v->by_len = v->toks;
  std::vector<std::uint32_t> at_depth(v->max_depth + 1, 0);  // the last node seen per depth
  std::vector<std::pair<std::uint32_t, std::uint32_t>> big;  // (tokens, node) to mask
  for (std::uint32_t i = 1; i < v->nodes.size(); ++i) {
    auto& node = v->nodes[i];
    at_depth[node.depth] = i;
    if (node.plain == 0 || (node.depth > 1 && v->nodes[at_depth[node.depth - 1]].plain != 0))
      continue;
    node.plain |= VocabTrie::kPlainRoot;
    std::stable_sort(v->by_len.begin() + v->tok_begin[i],
                     v->by_len.begin() + v->tok_begin[node.end],
                     [&](std::int32_t a, std::int32_t b) {
                       return v->pieces[static_cast<std::size_t>(a)].size() <
                              v->pieces[static_cast<std::size_t>(b)].size();
                     });
    const std::uint32_t count = v->tok_begin[node.end] - v->tok_begin[i];
    if (count >= VocabTrie::kMaskedRoot) big.emplace_back(count, i);
  }
  v->by_len_bytes.resize(v->by_len.size());
  for (std::size_t k = 0; k < v->by_len.size(); ++k)
    v->by_len_bytes[k] =
        static_cast<std::uint16_t>(v->pieces[static_cast<std::size_t>(v->by_len[k])].size());
  std::sort(big.rbegin(), big.rend());
  const std::size_t words = mask_words(v->n_vocab);
  for (std::size_t k = 0; k < big.size() && (k + 1) * words * 8 <= VocabTrie::kRootMaskBytes; ++k) {
    const std::uint32_t i = big[k].second;
    auto& m = v->root_masks[i];
    m.assign(words, 0);
    for (std::uint32_t t = v->tok_begin[i]; t < v->tok_begin[v->nodes[i].end]; ++t) {
      const auto id = static_cast<std::uint32_t>(v->toks[t]);
      m[id >> 6] |= std::uint64_t{1} << (id & 63);
    }
  }
  return v;
}

}  // namespace weir::inference::constraint
