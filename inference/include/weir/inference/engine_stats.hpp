// What an engine reports (Engine::stats(), and the gauges EngineConfig::metrics_name turns
// on): its paged KV cache, its scheduler, and its counters. Values: copied out, no references.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weir::inference {

struct KvCacheStats {
  std::int32_t num_blocks = 0;
  std::int32_t used_blocks = 0;      // ref_count > 0
  std::int32_t free_blocks = 0;      // on the free list (cached or not)
  std::int32_t cached_blocks = 0;    // free blocks still holding a reusable prefix
  std::int64_t allocated_slots = 0;  // used_blocks * block_size
  std::int64_t filled_slots = 0;     // token slots holding computed or scheduled KV
  std::uint64_t prefix_queries = 0;  // full prompt blocks looked up
  std::uint64_t prefix_hits = 0;     // ... of which were found
  std::uint64_t copies = 0;          // copy-on-write block copies
  // Allocated but unfilled slots over allocated slots (0 when nothing is allocated).
  double waste() const {
    return allocated_slots ? double(allocated_slots - filled_slots) / double(allocated_slots) : 0.0;
  }
  double prefix_hit_rate() const {
    return prefix_queries ? double(prefix_hits) / double(prefix_queries) : 0.0;
  }
};

struct SchedulerStats {
  std::size_t waiting = 0, running = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t admitted = 0;
};

struct EngineStats {
  KvCacheStats kv;
  SchedulerStats sched;
  std::uint64_t steps = 0;
  std::uint64_t tokens_generated = 0;
  std::uint64_t prompt_tokens_computed = 0;
  std::uint64_t requests_completed = 0;
  std::int64_t kv_pool_bytes = 0;
  double busy_seconds = 0;  // time spent in steps
};

}  // namespace weir::inference
