// Paged KV cache bookkeeping: a fixed pool of blocks, per-sequence block tables, reference
// counts, copy-on-write and prefix caching (the memory half of PagedAttention, after vLLM).
//
// The pool holds `num_blocks` blocks of `block_size` token slots each; the bytes behind them
// (K and V for every layer and KV head) live in the engine's storage and are addressed with
// the index math in kv_layout.hpp. Nothing here allocates per request at its worst case: a
// sequence holds ceil(tokens / block_size) blocks, so waste is confined to its last block.
//
// Prefix caching: when a block fills, it gets a hash of (its parent block's hash, its tokens).
// A new sequence whose prompt starts with the same tokens reuses those blocks (ref count + 1)
// instead of computing them again. Freed blocks that carry a hash stay in the cache, at the
// back of an LRU free list, until their space is needed: allocation takes the front (least
// recently freed) and forgets its hash. Hits are verified token by token, so a hash collision
// can never serve another prompt's KV.
//
// Thread safety: none. One engine thread owns a KvCacheManager (the only mutator).
//
// Invariants:
//   1. Every block is either referenced (ref_count > 0) by >= 1 block tables, or on the free
//      list; never both.
//   2. A block in the prefix-cache map is full and its tokens match its hash's chain.
//   3. num_free_blocks() + used blocks == num_blocks.
//   4. A sequence never writes into a block whose ref_count > 1: such a block is copied first
//      (copy-on-write), and the copy is reported to the engine through take_copies().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "weir/inference/engine_stats.hpp"
#include "weir/inference/kv_layout.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference {

using SeqId = std::int64_t;

struct KvCacheConfig {
  std::int32_t num_blocks = 0;
  std::int32_t block_size = 16;  // token slots per block
  bool enable_prefix_caching = true;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(KvCacheConfig config);

  const KvCacheConfig& config() const noexcept { return config_; }
  std::int32_t block_size() const noexcept { return config_.block_size; }
  std::int32_t num_free_blocks() const noexcept { return num_free_; }
  // Blocks needed to hold `tokens` token slots.
  std::int32_t blocks_for(std::int64_t tokens) const noexcept {
    return static_cast<std::int32_t>((tokens + config_.block_size - 1) / config_.block_size);
  }

  // Starts tracking `seq` with its known tokens (prompt, plus generated tokens when a
  // preempted sequence is readmitted) and attaches every cached block of its prefix. Returns
  // the number of tokens whose KV is already present (a multiple of block_size, always less
  // than tokens.size(), so at least one token is computed and yields logits).
  // REQUIRES: seq is not tracked.
  std::int64_t add_sequence(SeqId seq, std::span<const std::int32_t> tokens);

  // Makes room for `num_new_tokens` more slots after the sequence's filled ones and counts
  // them as filled (their KV is computed in the coming step). Returns false, changing nothing, when
  // the free blocks do not suffice (the scheduler then preempts or waits). A write into a shared
  // last block copies it first. REQUIRES: seq is tracked.
  bool allocate(SeqId seq, std::int64_t num_new_tokens);

  // Registers the sequence's newly filled full blocks in the prefix cache, once their KV has
  // been computed. `tokens` is the sequence's token list (at least as long as its filled slots
  // for the blocks to be registered). Call after each forward pass.
  void commit(SeqId seq, std::span<const std::int32_t> tokens);

  // Drops the sequence: its blocks' ref counts fall; blocks reaching 0 go to the free list
  // (last block first, so a shared prefix outlives its tails in the LRU). Safe on unknown ids.
  void free(SeqId seq);

  // Shares every block of `parent` with a new sequence `child` (parallel sampling, beam
  // search); the first write into the shared partial block copies it.
  // REQUIRES: parent tracked, child not tracked.
  void fork(SeqId parent, SeqId child);

  bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  // [num_blocks_of_seq]: physical block ids, in order.
  std::span<const BlockId> block_table(SeqId seq) const;
  // Slots holding KV (computed or being computed this step).
  std::int64_t filled(SeqId seq) const;
  std::int64_t capacity(SeqId seq) const;  // allocated slots

  // Copies accumulated since the last call; the engine performs them before the next step.
  std::vector<BlockCopy> take_copies();

  KvCacheStats stats() const;
  std::int32_t ref_count(BlockId b) const { return blocks_[b].ref_count; }

 private:
  struct Block {
    std::int32_t ref_count = 0;
    std::uint64_t hash = 0;
    bool cached = false;  // in prefix_map_ under `hash`
    BlockId prev_free = -1, next_free = -1;
    bool on_free_list = false;
    std::vector<std::int32_t> tokens;  // for hit verification; only for cached blocks
  };
  struct Seq {
    std::vector<BlockId> blocks;
    std::int64_t filled = 0;      // slots holding KV
    std::int64_t committed = 0;   // slots registered (hashed) so far, multiple of block_size
    std::uint64_t last_hash = 0;  // hash of the last committed full block (chain parent)
  };

  std::uint64_t block_hash(std::uint64_t parent, std::span<const std::int32_t> tokens) const;
  std::optional<BlockId> pop_free();
  void push_free_back(BlockId b);
  void unlink_free(BlockId b);
  void uncache(BlockId b);
  void ref(BlockId b);
  void unref(BlockId b);

  KvCacheConfig config_;
  std::vector<Block> blocks_;
  BlockId free_head_ = -1, free_tail_ = -1;  // LRU: head = least recently freed
  std::int32_t num_free_ = 0;
  std::int32_t num_cached_free_ = 0;
  std::unordered_map<std::uint64_t, BlockId> prefix_map_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<BlockCopy> copies_;
  std::uint64_t prefix_queries_ = 0, prefix_hits_ = 0, copies_total_ = 0;
};

}  // namespace weir::inference
