// The vocabulary of a constraint as a trie of its tokens' bytes, in preorder, with the marks
// and lists the mask walk's shortcuts read (constraint/mask.cpp). Built once per vocabulary
// (compile_constraint keeps one per tokenizer while constraints use it); immutable after.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "weir/inference/constraint.hpp"
#include "weir/inference/tokenizer.hpp"

namespace weir::inference::constraint {

// Printable ASCII but for '"' and '\\': the bytes that continue a JSON string (and most
// free-text rules) all the same way: "plain runs" at the top of mask.cpp.
extern const std::bitset<256> kPlain;

// Plain bytes by category (lowercase, uppercase, digits, space, and each punctuation mark
// alone; every other byte is kNotPlainCategory): a byte class "holds" a category when it holds
// every byte of it. A trie subtree's categories tell whether a class (a pattern's
// [a-z0-9_/.-], say) holds all its bytes without looking at them (mask.cpp, class runs).
inline constexpr int kNotPlainCategory = 63;
int plain_category(unsigned char c);
// UTF-8 lead bytes by the shape of the character they start (C2-DF, E0, E1-EC, ED, EE-EF, F0,
// F1-F3, F4: the groups well-formed UTF-8 tells apart), as categories kLeadCategory + group
// in VocabTrie::cats (a text subtree's characters, mask.cpp); -1 for other bytes.
inline constexpr int kLeadCategory = 40, kLeadGroups = 8;
int utf8_lead_group(unsigned char c);
// The categories whose every byte `set` holds.
std::uint64_t categories_held(const std::bitset<256>& set);
constexpr unsigned kMaxRun = 255;  // plain runs are counted up to this many bytes

// Text: kPlain and well-formed UTF-8 multi-byte characters (no overlong forms, surrogates or
// code points past U+10FFFF). Where a decoder of text stands before a byte: at a character
// boundary, or inside a character with 1, 2 or 3 continuation bytes to come (the first of
// which the lead bytes E0, ED, F0 and F4 restrict).
enum Utf8At : std::uint8_t { kAtBoundary, kNeed1, kNeed2, kNeed3, kE0, kED, kF0, kF4, kUtf8At };
constexpr std::uint8_t kUtf8Invalid = 0xFF;
constexpr std::uint8_t kUtf8Remaining[kUtf8At] = {0, 1, 2, 3, 2, 2, 3, 3};  // bytes to come
// The decoder after byte c from `at`, or kUtf8Invalid when c does not continue text there.
std::uint8_t utf8_next(std::uint8_t at, unsigned char c);

// The vocabulary as a trie in preorder: node i's subtree is [i, end).
struct VocabTrie {
  static constexpr std::uint8_t kPlainHeight = 0x7F, kPlainRoot = 0x80;
  struct Node {
    std::uint32_t end;
    std::uint16_t depth;
    std::uint8_t byte;
    // & kPlainHeight: the height of this node's subtree (1 for a leaf) when every byte in it,
    // this node's included, is in kPlain and the height is at most 127; otherwise 0.
    // & kPlainRoot: such a subtree whose parent's is not (its tokens are sorted in by_len).
    std::uint8_t plain;
  };
  static_assert(sizeof(Node) == 8);
  std::vector<Node> nodes;  // [0] is the root
  // [nodes] the categories of the bytes in each subtree (plain ones, UTF-8 lead groups, and
  // kNotPlainCategory for every other byte)
  std::vector<std::uint64_t> cats;
  // [nodes] Text subtrees (mask.cpp, text runs): read as starting at a character boundary,
  // every path in the subtree, this node's byte included, spells plain bytes and well-formed
  // UTF-8 multi-byte characters, the last of which may be cut short. & kTextHeight: the most
  // characters a path starts (a cut one counts), 1 to 63, or 0 when the subtree is not text
  // (or taller); >> kTextTailShift: the most bytes a token below this node's own leaves its
  // last character short (0 to 3). Only nodes whose `plain` is 0 are marked.
  static constexpr std::uint8_t kTextHeight = 0x3F;
  static constexpr unsigned kTextTailShift = 6;
  std::vector<std::uint8_t> text;
  // [nodes] When every token below the node spells text from its first byte: the most
  // characters one has (1 to kTextHeight), and kHasCut when one ends inside a character; else
  // 0. Such a subtree is in the text masks of that many characters (mask.cpp, text masks).
  static constexpr std::uint8_t kHasCut = 0x80;
  std::vector<std::uint8_t> text_total;
  // The tokens that spell text of at most `chars` characters, as a mask ([mask_words]), with
  // the categories of their bytes (plain ones and lead groups) and the most bytes one leaves
  // its last character short. Nested: each bucket holds the ones before it.
  // cut: how many of text_cut (the tokens that end inside a character, fewest characters
  // first) the mask holds.
  struct TextMask {
    std::uint32_t chars;
    std::vector<std::uint64_t> words;
    std::uint64_t cats = 0;
    std::uint32_t tail = 0;
    std::uint32_t cut = 0;
  };
  std::vector<std::int32_t> text_cut;
  // Every length up to 16 characters, then fewer (gpt-2: 23 masks, 141 KiB; 151936 tokens:
  // 427 KiB): a bounded string's every position gets the mask of its room, or nearly.
  std::vector<TextMask> text_masks;
  std::vector<std::uint32_t> tok_begin;  // [nodes + 1] CSR into toks
  std::vector<std::int32_t> toks;        // token ids ending at each node
  // toks, but each kPlainRoot subtree's range sorted by token length (shortest first).
  std::vector<std::int32_t> by_len;
  std::vector<std::uint16_t> by_len_bytes;  // [toks] the bytes of each token of by_len
  // The tokens of the kPlainRoot subtrees holding at least kMaskedRoot of them, as masks
  // ([mask_words(n_vocab)], keyed by node): one OR of words instead of a bit per token. The
  // largest subtrees first, up to kRootMaskBytes in all (gpt-2: 21 masks, 130 KiB).
  static constexpr std::uint32_t kMaskedRoot = 512;
  static constexpr std::size_t kRootMaskBytes = 1u << 20;
  std::unordered_map<std::uint32_t, std::vector<std::uint64_t>> root_masks;
  std::vector<std::string> pieces;  // [n_vocab] bytes of each token ("" = never allowed)
  // Control tokens' text (not end-of-generation ones): free text may hold them, a value never.
  std::unordered_map<std::int32_t, std::string> control_pieces;
  std::vector<std::int32_t> eog;                // end-of-generation ids
  std::array<std::uint32_t, 256> root_child{};  // the root's child for each byte (0: none)
  // The same for every other node with at least kWide children (" " in a byte-level BPE
  // vocabulary has tens of thousands): a lookup instead of a scan.
  // (With the children's text_total, as root_total has the root's.)
  static constexpr std::uint32_t kWide = 24;
  struct Wide {
    std::array<std::uint32_t, 256> child;
    std::array<std::uint8_t, 256> total;
  };
  std::unordered_map<std::uint32_t, Wide> wide;
  std::array<std::uint8_t, 256> root_total{};  // text_total of the root's child for each byte
  std::vector<bool> is_wide;                   // [nodes] the node has a table in `wide`
  // Every byte value is a token of its own: a completion of n bytes takes at most n tokens.
  bool every_byte_a_token = false;
  std::int32_t n_vocab = 0;
  std::size_t max_depth = 0;
};

// Builds the trie of `t`'s tokens (control and end-of-generation tokens left out).
std::shared_ptr<const VocabTrie> build_trie(const Tokenizer& t);

// The child of trie node `node` for byte c (children are in byte order), or 0 when none.
inline std::uint32_t trie_child(const VocabTrie& v, std::uint32_t node, unsigned char c) {
  if (node == 0) return v.root_child[c];
  if (v.is_wide[node]) return v.wide.find(node)->second.child[c];
  for (std::uint32_t k = node + 1; k < v.nodes[node].end; k = v.nodes[k].end) {
    if (v.nodes[k].byte == c) return k;
    if (v.nodes[k].byte > c) break;
  }
  return 0;
}

}  // namespace weir::inference::constraint
