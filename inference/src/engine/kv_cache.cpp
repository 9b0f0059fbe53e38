#include "engine/kv_cache.hpp"

#include <algorithm>
#include <cassert>

namespace weir::inference {

namespace {
constexpr std::uint64_t kRootHash = 0x9e3779b97f4a7c15ull;

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}
}  // namespace

KvCacheManager::KvCacheManager(KvCacheConfig config) : config_(config) {
  assert(config_.num_blocks >= 0 && config_.block_size > 0);
  blocks_.resize(static_cast<std::size_t>(config_.num_blocks));
  for (BlockId b = 0; b < config_.num_blocks; ++b) push_free_back(b);
}

std::uint64_t KvCacheManager::block_hash(std::uint64_t parent,
                                         std::span<const std::int32_t> tokens) const {
  std::uint64_t h = mix(parent + 0x632be59bd9b4e019ull);
  for (std::int32_t t : tokens) h = mix(h ^ static_cast<std::uint32_t>(t)) + 0x2545f4914f6cdd1dull;
  return h;
}

// --- free list (LRU: allocation takes the head) -------------------------------------------

void KvCacheManager::unlink_free(BlockId b) {
  Block& blk = blocks_[b];
  assert(blk.on_free_list);
  if (blk.prev_free >= 0)
    blocks_[blk.prev_free].next_free = blk.next_free;
  else
    free_head_ = blk.next_free;
  if (blk.next_free >= 0)
    blocks_[blk.next_free].prev_free = blk.prev_free;
  else
    free_tail_ = blk.prev_free;
  blk.prev_free = blk.next_free = -1;
  blk.on_free_list = false;
  --num_free_;
  if (blk.cached) --num_cached_free_;
}

void KvCacheManager::push_free_back(BlockId b) {
  Block& blk = blocks_[b];
  assert(!blk.on_free_list && blk.ref_count == 0);
  if (!blk.cached) {
    // Nothing reusable in it: put it first in line so cached prefixes live longer.
    blk.prev_free = -1;
    blk.next_free = free_head_;
    if (free_head_ >= 0)
      blocks_[free_head_].prev_free = b;
    else
      free_tail_ = b;
    free_head_ = b;
  } else {
    blk.next_free = -1;
    blk.prev_free = free_tail_;
    if (free_tail_ >= 0)
      blocks_[free_tail_].next_free = b;
    else
      free_head_ = b;
    free_tail_ = b;
    ++num_cached_free_;
  }
  blk.on_free_list = true;
  ++num_free_;
}

void KvCacheManager::uncache(BlockId b) {
  Block& blk = blocks_[b];
  if (!blk.cached) return;
  auto it = prefix_map_.find(blk.hash);
  if (it != prefix_map_.end() && it->second == b) prefix_map_.erase(it);
  if (blk.on_free_list) --num_cached_free_;
  blk.cached = false;
  blk.tokens.clear();
}

std::optional<BlockId> KvCacheManager::pop_free() {
  if (free_head_ < 0) return std::nullopt;
  BlockId b = free_head_;
  unlink_free(b);
  uncache(b);  // its old prefix is evicted now
  blocks_[b].ref_count = 1;
  return b;
}

void KvCacheManager::ref(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.ref_count == 0) unlink_free(b);
  ++blk.ref_count;
}

void KvCacheManager::unref(BlockId b) {
  Block& blk = blocks_[b];
  assert(blk.ref_count > 0);
  if (--blk.ref_count == 0) push_free_back(b);
}

// --- sequences --------------------------------------------------------------------------

std::int64_t KvCacheManager::add_sequence(SeqId seq, std::span<const std::int32_t> tokens) {
  assert(!contains(seq));
  Seq& s = seqs_[seq];
  s.last_hash = kRootHash;
  if (!config_.enable_prefix_caching) return 0;
  const std::int64_t bs = config_.block_size;
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  // Only blocks that end before the last token: at least one token must be computed.
  for (std::int64_t start = 0; start + bs < n; start += bs) {
    auto block_tokens =
        tokens.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(bs));
    std::uint64_t h = block_hash(s.last_hash, block_tokens);
    ++prefix_queries_;
    auto it = prefix_map_.find(h);
    if (it == prefix_map_.end()) break;
    const Block& blk = blocks_[it->second];
    if (!std::equal(blk.tokens.begin(), blk.tokens.end(), block_tokens.begin(),
                    block_tokens.end())) {
      break;  // a hash collision: treat as a miss
    }
    ++prefix_hits_;
    ref(it->second);
    s.blocks.push_back(it->second);
    s.last_hash = h;
    s.filled += bs;
    s.committed += bs;
  }
  return s.filled;
}

bool KvCacheManager::allocate(SeqId seq, std::int64_t num_new_tokens) {
  Seq& s = seqs_.at(seq);
  const std::int64_t bs = config_.block_size;
  const std::int64_t have = static_cast<std::int64_t>(s.blocks.size());
  const std::int64_t need = blocks_for(s.filled + num_new_tokens) - have;
  // Writing into a partial last block that another sequence shares needs a private copy.
  const bool cow = num_new_tokens > 0 && s.filled % bs != 0 && have > 0 &&
                   blocks_[s.blocks.back()].ref_count > 1;
  if (need + (cow ? 1 : 0) > num_free_) return false;
  if (cow) {
    BlockId src = s.blocks.back();
    BlockId dst = *pop_free();
    copies_.push_back({src, dst});
    ++copies_total_;
    unref(src);
    s.blocks.back() = dst;
  }
  for (std::int64_t i = 0; i < need; ++i) s.blocks.push_back(*pop_free());
  s.filled += num_new_tokens;
  return true;
}

void KvCacheManager::commit(SeqId seq, std::span<const std::int32_t> tokens) {
  Seq& s = seqs_.at(seq);
  if (!config_.enable_prefix_caching) return;
  const std::int64_t bs = config_.block_size;
  const std::int64_t known =
      std::min<std::int64_t>(s.filled, static_cast<std::int64_t>(tokens.size()));
  while (s.committed + bs <= known) {
    auto block_tokens =
        tokens.subspan(static_cast<std::size_t>(s.committed), static_cast<std::size_t>(bs));
    std::uint64_t h = block_hash(s.last_hash, block_tokens);
    BlockId b = s.blocks[static_cast<std::size_t>(s.committed / bs)];
    Block& blk = blocks_[b];
    if (!blk.cached && !prefix_map_.count(h)) {
      prefix_map_.emplace(h, b);
      blk.cached = true;
      blk.hash = h;
      blk.tokens.assign(block_tokens.begin(), block_tokens.end());
    }
    s.last_hash = h;
    s.committed += bs;
  }
}

void KvCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) unref(*b);
  seqs_.erase(it);
}

void KvCacheManager::fork(SeqId parent, SeqId child) {
  assert(!contains(child));
  Seq copy = seqs_.at(parent);
  for (BlockId b : copy.blocks) ref(b);
  seqs_.emplace(child, std::move(copy));
}

std::span<const BlockId> KvCacheManager::block_table(SeqId seq) const {
  return seqs_.at(seq).blocks;
}
std::int64_t KvCacheManager::filled(SeqId seq) const {
  return seqs_.at(seq).filled;
}
std::int64_t KvCacheManager::capacity(SeqId seq) const {
  return static_cast<std::int64_t>(seqs_.at(seq).blocks.size()) * config_.block_size;
}

std::vector<BlockCopy> KvCacheManager::take_copies() {
  return std::exchange(copies_, {});
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats st;
  st.num_blocks = config_.num_blocks;
  st.free_blocks = num_free_;
  st.used_blocks = config_.num_blocks - num_free_;
  st.cached_blocks = num_cached_free_;
  st.allocated_slots = std::int64_t{st.used_blocks} * config_.block_size;
  std::int64_t unfilled = 0;
  for (const auto& [id, s] : seqs_) {
    unfilled += static_cast<std::int64_t>(s.blocks.size()) * config_.block_size - s.filled;
  }
  st.filled_slots = st.allocated_slots - unfilled;
  st.prefix_queries = prefix_queries_;
  st.prefix_hits = prefix_hits_;
  st.copies = copies_total_;
  return st;
}

}  // namespace weir::inference
