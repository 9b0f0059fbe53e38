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
// The categories whose every byte `set` holds.
std::uint64_t categories_held(const std::bitset<256>& set);
constexpr unsigned kMaxRun = 255;  // plain runs are counted up to this many bytes

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
  std::vector<Node> nodes;               // [0] is the root
  std::vector<std::uint64_t> cats;       // [nodes] the categories of the bytes in each subtree
  std::vector<std::uint32_t> tok_begin;  // [nodes + 1] CSR into toks
  std::vector<std::int32_t> toks;        // token ids ending at each node
  // toks, but each kPlainRoot subtree's range sorted by token length (shortest first).
  std::vector<std::int32_t> by_len;
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
  static constexpr std::uint32_t kWide = 24;
  std::unordered_map<std::uint32_t, std::array<std::uint32_t, 256>> wide;
  std::vector<bool> is_wide;  // [nodes] the node has a table in `wide`
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
  if (v.is_wide[node]) return v.wide.find(node)->second[c];
  for (std::uint32_t k = node + 1; k < v.nodes[node].end; k = v.nodes[k].end) {
    if (v.nodes[k].byte == c) return k;
    if (v.nodes[k].byte > c) break;
  }
  return 0;
}

}  // namespace weir::inference::constraint
