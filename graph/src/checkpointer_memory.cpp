// The in-memory checkpointer, and new_checkpoint_id (shared by every backend).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <boost/json/storage_ptr.hpp>

#include "checkpointer_common.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph {

std::string new_checkpoint_id(int64_t step) {
  static std::atomic<uint64_t> last_us{0};
  const auto now_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  uint64_t prev = last_us.load(std::memory_order_relaxed);
  uint64_t t;
  do {
    t = std::max(now_us, prev + 1);
  } while (!last_us.compare_exchange_weak(prev, t, std::memory_order_relaxed));
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const auto salt = static_cast<unsigned>(rng() & 0xffff);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%012" PRId64 "-%014" PRIx64 "%04x", step, t, salt);
  return buf;
}

std::string new_claim_token() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64, rng(), rng());
  return buf;
}

ThreadHolder this_process_holder(std::string token, int64_t lease_ms) {
  ThreadHolder h;
  h.token = std::move(token);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  h.host = host[0] ? host : "localhost";
  h.pid = static_cast<int64_t>(::getpid());
  h.lease_ms = lease_ms;
  return h;
}

namespace {

// A deep copy whose JSON lives on the default resource, independent of the caller's storage.
Checkpoint own_copy(const Checkpoint& cp, int64_t created_at_ms) {
  Checkpoint c;
  c.thread_id = cp.thread_id;
  c.checkpoint_id = cp.checkpoint_id;
  c.parent_id = cp.parent_id;
  c.step = cp.step;
  c.writes = boost::json::object(cp.writes, boost::json::storage_ptr());
  c.pending = boost::json::object(cp.pending, boost::json::storage_ptr());
  c.metadata = boost::json::object(cp.metadata, boost::json::storage_ptr());
  c.created_at_ms = created_at_ms;
  return c;
}

// A string of a checkpoint's writes this long (or beginning with NUL, the placeholder's mark)
// is kept once per thread and shared by every checkpoint that holds it: a chat thread's
// checkpoints repeat its message window, so they would otherwise hold each message once per
// step. In the stored writes the string is a placeholder: NUL then the pooled string's number.
constexpr std::size_t kPoolMinBytes = 256;
constexpr std::size_t kPooledOverhead = 64;  // what a pooled string costs besides its bytes

bool pooled_form(const boost::json::string& s) {
  return s.size() >= kPoolMinBytes || (!s.empty() && s[0] == '\0');
}

// What a stored checkpoint costs (MemoryCheckpointerOptions): its JSON text (with the
// placeholders of its pooled strings, which the thread's pool charges once), its artifacts not
// stored yet, and its map nodes.
std::size_t checkpoint_cost(const Checkpoint& cp) {
  return boost::json::serialize(cp.writes).size() + boost::json::serialize(cp.pending).size() +
         boost::json::serialize(cp.metadata).size() + cp.checkpoint_id.size() +
         cp.parent_id.size() + kMemoryCheckpointOverhead;
}

class MemoryCheckpointer final : public Checkpointer {
 public:
  explicit MemoryCheckpointer(const MemoryCheckpointerOptions& o)
      : retention_(o.retention), bounded_(o.max_bytes > 0 || o.budget), o_(o) {}
  ~MemoryCheckpointer() override {
    if (o_.budget && bytes_ > 0) o_.budget->credit(o_.category, bytes_);
  }

  Status put(const Checkpoint& cp) override {
    if (auto s = detail::check_put_ids(cp); !s) return s;
    if (auto s = detail::check_put_values(cp); !s) return s;
    // Copy outside the lock; the copy is the only allocation-heavy part.
    Checkpoint copy = own_copy(cp, detail::unix_ms_now());
    std::unique_lock lock(mu_);
    if (!cp.claim_token.empty()) {
      auto h = holders_.find(cp.thread_id);
      if (h == holders_.end() || h->second.token != cp.claim_token)
        return detail::claim_lost(cp.thread_id, h == holders_.end() ? nullptr : &h->second);
    }
    auto it = threads_.find(cp.thread_id);
    if (it != threads_.end()) {
      const Thread& t = it->second;
      if (t.by_id.contains(cp.checkpoint_id)) return detail::duplicate_checkpoint(cp);
      if (!cp.parent_id.empty() && !t.by_id.contains(cp.parent_id))
        return detail::unknown_parent(cp);
    } else if (!cp.parent_id.empty()) {
      return detail::unknown_parent(cp);
    }
    // Validation is done: from here nothing fails but the charge (undone below) and allocation
    // (which leaves a new, empty thread at worst, invisible to readers since it has no
    // checkpoints and no recency entry).
    const bool fresh = it == threads_.end();
    if (fresh) it = threads_.try_emplace(cp.thread_id).first;
    Thread& t = it->second;
    boost::json::value writes(std::move(copy.writes));
    const std::size_t pooled = pool_strings(t, writes);
    copy.writes = std::move(writes.as_object());
    if (bounded_) {
      const std::size_t cost = checkpoint_cost(copy);
      std::size_t more = cost + pooled;
      for (const auto& a : cp.artifacts)
        if (!t.artifacts.contains(a.id)) more += a.bytes.size() + a.id.size();
      if (o_.max_thread_bytes > 0 && t.bytes + more > o_.max_thread_bytes) {
        for (const auto& kv : copy.writes) (void)unpool_strings(t, kv.value());
        const std::size_t held = t.bytes;
        if (fresh) threads_.erase(it);
        return Error(Errc::memory_budget_exceeded,
                     "in-memory checkpoints: thread '" + cp.thread_id + "' holds " +
                         format_bytes(held) + "; " + format_bytes(more) +
                         " more would take it past " + format_bytes(o_.max_thread_bytes) +
                         ", a thread's share of the " + format_bytes(o_.max_bytes) +
                         " limit; prune the thread or keep checkpoints in a database");
      }
      if (auto s = charge(cp.thread_id, more); !s) {
        for (const auto& kv : copy.writes) (void)unpool_strings(t, kv.value());
        if (fresh) threads_.erase(it);
        return s;
      }
      t.bytes += cost + pooled;
    }
    for (const auto& a : cp.artifacts)
      if (t.artifacts.try_emplace(a.id, a).second && bounded_)
        t.bytes += a.bytes.size() + a.id.size();
    if (!cp.claim_token.empty())
      holders_.find(cp.thread_id)->second.heartbeat_ms = copy.created_at_ms;
    const uint64_t seq = next_seq_++;
    auto [pos, inserted] = t.by_id.try_emplace(copy.checkpoint_id, std::move(copy));
    t.by_seq.emplace(seq, &pos->second);
    if (t.updated_seq != 0) recent_.erase(t.updated_seq);
    t.updated_seq = seq;
    recent_.emplace(seq, it->first);
    if (retention_.enabled()) {
      const int64_t now = pos->second.created_at_ms;
      if (detail::prune_due(retention_, t.by_seq.size(), t.by_seq.begin()->second->created_at_ms,
                            now))
        (void)prune_locked(it, retention_, now);  // cannot fail: no storage to refuse
    }
    return {};
  }

  Result<std::size_t> prune(std::string_view thread_id, const Retention& policy) override {
    if (!policy.enabled()) return std::size_t{0};
    std::unique_lock lock(mu_);
    auto it = threads_.find(thread_id);
    if (it == threads_.end()) return std::size_t{0};
    const int64_t now = detail::unix_ms_now();
    auto h = holders_.find(thread_id);
    if (auto s = detail::refuse_prune_in_use(thread_id, policy,
                                             h == holders_.end() ? nullptr : &h->second, now);
        !s)
      return std::move(s).error();
    return prune_locked(it, policy, now);
  }

  Result<std::optional<Checkpoint>> latest(std::string_view thread_id) const override {
    std::shared_lock lock(mu_);
    const Thread* t = find_thread(thread_id);
    if (t == nullptr || t->by_seq.empty()) return std::optional<Checkpoint>();
    return std::optional<Checkpoint>(expanded(*t, *t->by_seq.rbegin()->second));
  }

  Result<std::optional<Checkpoint>> get(std::string_view thread_id,
                                        std::string_view checkpoint_id) const override {
    std::shared_lock lock(mu_);
    const Thread* t = find_thread(thread_id);
    const Checkpoint* cp = find(thread_id, checkpoint_id);
    if (cp == nullptr) return std::optional<Checkpoint>();
    return std::optional<Checkpoint>(expanded(*t, *cp));
  }

  Result<std::vector<Checkpoint>> list(std::string_view thread_id,
                                       std::size_t limit) const override {
    std::vector<Checkpoint> out;
    std::shared_lock lock(mu_);
    const Thread* t = find_thread(thread_id);
    if (t == nullptr) return out;
    out.reserve(std::min(limit, t->by_seq.size()));
    for (auto it = t->by_seq.rbegin(); it != t->by_seq.rend() && out.size() < limit; ++it)
      out.push_back(expanded(*t, *it->second));
    return out;
  }

  Result<boost::json::object> state_at(std::string_view thread_id,
                                       std::string_view checkpoint_id) const override {
    std::shared_lock lock(mu_);
    const Thread* t = find_thread(thread_id);
    if (t == nullptr)
      return detail::unknown_checkpoint("state_at", thread_id, checkpoint_id, false);
    auto it = t->by_id.find(checkpoint_id);
    if (it == t->by_id.end())
      return detail::unknown_checkpoint("state_at", thread_id, checkpoint_id, true);
    boost::json::object state;
    // put() guarantees the chain is finite and every parent exists (invariant 2).
    for (const Checkpoint* cp = &it->second; cp != nullptr;) {
      detail::fold_older_writes(state, cp->writes);
      if (cp->parent_id.empty() || detail::is_snapshot(cp->writes)) break;
      auto parent = t->by_id.find(cp->parent_id);
      assert(parent != t->by_id.end());
      cp = &parent->second;
    }
    expand_strings(*t, state);
    return state;
  }

  Status delete_thread(std::string_view thread_id) override {
    std::unique_lock lock(mu_);
    if (auto h = holders_.find(thread_id); h != holders_.end()) holders_.erase(h);
    auto it = threads_.find(thread_id);
    if (it == threads_.end()) return {};
    if (it->second.updated_seq != 0) recent_.erase(it->second.updated_seq);
    credit(it->second.bytes);
    threads_.erase(it);
    return {};
  }

  Result<std::optional<Checkpoint::Artifact>> get_artifact(
      std::string_view thread_id, std::string_view artifact_id) const override {
    std::shared_lock lock(mu_);
    const Thread* t = find_thread(thread_id);
    if (t == nullptr) return std::optional<Checkpoint::Artifact>();
    auto it = t->artifacts.find(artifact_id);
    if (it == t->artifacts.end()) return std::optional<Checkpoint::Artifact>();
    return std::optional<Checkpoint::Artifact>(it->second);
  }

  Result<ThreadHolder> claim_thread(std::string_view thread_id,
                                    const ThreadHolder& holder) override {
    if (auto s = detail::check_claim(thread_id, holder); !s) return std::move(s).error();
    const int64_t now = detail::unix_ms_now();
    std::unique_lock lock(mu_);
    auto it = holders_.find(thread_id);
    if (it != holders_.end() && it->second.token != holder.token &&
        detail::claim_live(it->second, holder, now))
      return detail::thread_busy(thread_id, it->second, now);
    ThreadHolder stored = holder;
    stored.since_ms =
        it != holders_.end() && it->second.token == holder.token ? it->second.since_ms : now;
    stored.heartbeat_ms = now;
    if (it == holders_.end())
      holders_.emplace(std::string(thread_id), stored);
    else
      it->second = stored;
    return stored;
  }

  Status renew_thread(std::string_view thread_id, std::string_view token) override {
    std::unique_lock lock(mu_);
    auto it = holders_.find(thread_id);
    if (it == holders_.end() || it->second.token != token)
      return detail::claim_lost(thread_id, it == holders_.end() ? nullptr : &it->second);
    it->second.heartbeat_ms = detail::unix_ms_now();
    return {};
  }

  Status release_thread(std::string_view thread_id, std::string_view token) override {
    std::unique_lock lock(mu_);
    auto it = holders_.find(thread_id);
    if (it != holders_.end() && it->second.token == token) holders_.erase(it);
    return {};
  }

  Result<std::optional<ThreadHolder>> thread_holder(std::string_view thread_id) const override {
    std::shared_lock lock(mu_);
    auto it = holders_.find(thread_id);
    if (it == holders_.end()) return std::optional<ThreadHolder>();
    return std::optional<ThreadHolder>(it->second);
  }

  Result<std::vector<std::string>> threads(std::size_t limit) const override {
    std::vector<std::string> out;
    std::shared_lock lock(mu_);
    out.reserve(std::min(limit, recent_.size()));
    for (auto it = recent_.rbegin(); it != recent_.rend() && out.size() < limit; ++it)
      out.push_back(it->second);
    return out;
  }

 private:
  struct Pooled {
    std::string text;
    std::size_t refs = 0;  // placeholders naming it in the thread's stored writes
  };

  struct Thread {
    std::size_t bytes = 0;  // what its checkpoints, pool and artifacts cost (bounded_ only)
    std::map<std::string, Checkpoint, std::less<>> by_id;
    std::map<uint64_t, const Checkpoint*> by_seq;  // put order; points into by_id (stable nodes)
    uint64_t updated_seq = 0;                      // seq of the last put; 0 before the first
    std::map<std::string, Checkpoint::Artifact, std::less<>> artifacts;  // by id
    std::unordered_map<uint64_t, Pooled> pool;  // long strings of by_id's writes, by number
    std::unordered_map<std::string_view, uint64_t> pool_by_text;  // views into pool (stable nodes)
    uint64_t next_pooled = 1;
  };

  // Replaces the long strings of `v` by placeholders into t's pool; returns the bytes the pool
  // grew by. REQUIRES: mu_ held exclusively.
  static std::size_t pool_strings(Thread& t, boost::json::value& v) {
    std::size_t added = 0;
    if (v.is_object()) {
      for (auto& kv : v.as_object()) added += pool_strings(t, kv.value());
    } else if (v.is_array()) {
      for (auto& e : v.as_array()) added += pool_strings(t, e);
    } else if (v.is_string() && pooled_form(v.as_string())) {
      const std::string_view text = v.as_string();
      uint64_t id;
      if (auto f = t.pool_by_text.find(text); f != t.pool_by_text.end()) {
        id = f->second;
      } else {
        id = t.next_pooled++;
        Pooled& p = t.pool[id];
        p.text.assign(text);
        t.pool_by_text.emplace(p.text, id);
        added += p.text.size() + kPooledOverhead;
      }
      ++t.pool.at(id).refs;
      v = boost::json::string(std::string(1, '\0') + std::to_string(id));
    }
    return added;
  }

  // Drops the references `v`'s placeholders hold; returns the bytes the pool shrank by.
  // REQUIRES: mu_ held exclusively.
  static std::size_t unpool_strings(Thread& t, const boost::json::value& v) {
    std::size_t freed = 0;
    if (v.is_object()) {
      for (const auto& kv : v.as_object()) freed += unpool_strings(t, kv.value());
    } else if (v.is_array()) {
      for (const auto& e : v.as_array()) freed += unpool_strings(t, e);
    } else if (v.is_string()) {
      auto p = t.pool.find(pooled_id(v.as_string()));
      if (p != t.pool.end() && --p->second.refs == 0) {
        freed += p->second.text.size() + kPooledOverhead;
        t.pool_by_text.erase(p->second.text);
        t.pool.erase(p);
      }
    }
    return freed;
  }

  // The pool number a stored string names; 0 for an ordinary string.
  static uint64_t pooled_id(const boost::json::string& s) {
    if (s.empty() || s[0] != '\0') return 0;
    uint64_t id = 0;
    for (std::size_t i = 1; i < s.size(); ++i) id = id * 10 + static_cast<uint64_t>(s[i] - '0');
    return id;
  }

  // Puts the pooled strings back in place of their placeholders. REQUIRES: mu_ held.
  static void expand_strings(const Thread& t, boost::json::value& v) {
    if (v.is_object()) {
      for (auto& kv : v.as_object()) expand_strings(t, kv.value());
    } else if (v.is_array()) {
      for (auto& e : v.as_array()) expand_strings(t, e);
    } else if (v.is_string()) {
      if (const uint64_t id = pooled_id(v.as_string()); id != 0)
        v = boost::json::string(t.pool.at(id).text);
    }
  }
  static void expand_strings(const Thread& t, boost::json::object& o) {
    for (auto& kv : o) expand_strings(t, kv.value());
  }
  static Checkpoint expanded(const Thread& t, const Checkpoint& stored) {
    Checkpoint out = stored;
    expand_strings(t, out.writes);
    return out;
  }

  using ThreadIt = std::map<std::string, Thread, std::less<>>::iterator;

  static detail::PruneRow prune_row(uint64_t seq, const Checkpoint& cp) {
    return {cp.checkpoint_id, cp.parent_id, static_cast<int64_t>(seq),
            detail::is_snapshot(cp.writes)};
  }

  // REQUIRES: mu_ held exclusively.
  std::size_t prune_locked(ThreadIt it, const Retention& policy, int64_t now) {
    Thread& t = it->second;
    const int64_t cutoff = detail::prune_age_cutoff(policy, now);
    std::vector<detail::PruneRow> kept;
    for (auto s = t.by_seq.rbegin(); s != t.by_seq.rend(); ++s) {
      if (policy.keep_last > 0 && kept.size() >= policy.keep_last) break;
      if (s->second->created_at_ms < cutoff) continue;
      kept.push_back(prune_row(s->first, *s->second));
    }
    std::unordered_map<std::string, uint64_t> seq_of;
    auto floor = detail::prune_floor(
        kept, [&](const std::string& id) -> Result<std::optional<detail::PruneRow>> {
          auto c = t.by_id.find(id);
          if (c == t.by_id.end()) return std::optional<detail::PruneRow>();
          if (seq_of.empty())
            for (const auto& [seq, cp] : t.by_seq) seq_of.emplace(cp->checkpoint_id, seq);
          return std::optional<detail::PruneRow>(prune_row(seq_of.at(id), c->second));
        });
    const std::size_t before = t.by_id.size();
    if (!*floor) {
      credit(t.bytes);
      recent_.erase(t.updated_seq);
      threads_.erase(it);
      return before;
    }
    for (auto s = t.by_seq.begin();
         s != t.by_seq.end() && static_cast<int64_t>(s->first) < **floor;) {
      // Its artifacts stay (a later checkpoint may name them); its pooled strings go with
      // their last checkpoint.
      const std::size_t c = bounded_ ? checkpoint_cost(*s->second) : 0;
      std::size_t freed = 0;
      for (const auto& kv : s->second->writes) freed += unpool_strings(t, kv.value());
      if (bounded_) {
        t.bytes -= std::min(t.bytes, c + freed);
        credit(c + freed);
      }
      t.by_id.erase(s->second->checkpoint_id);
      s = t.by_seq.erase(s);
    }
    return before - t.by_id.size();
  }

  // REQUIRES: mu_ held exclusively. Takes `more` bytes for a put on `thread`, or says why not.
  Status charge(std::string_view thread, std::size_t more) {
    if (o_.max_bytes > 0 && bytes_ + more > o_.max_bytes)
      return Error(Errc::memory_budget_exceeded,
                   "in-memory checkpoints: thread '" + std::string(thread) + "' needs " +
                       format_bytes(more) + " more but " + format_bytes(bytes_) + " of their " +
                       format_bytes(o_.max_bytes) +
                       " limit is in use; delete or prune threads, or keep checkpoints in a "
                       "database");
    if (o_.budget && !o_.budget->charge(o_.category, more))
      return Error(Errc::memory_budget_exceeded,
                   "in-memory checkpoints: thread '" + std::string(thread) +
                       "': " + o_.budget->exceeded_message(o_.category, more));
    bytes_ += more;
    return {};
  }
  // REQUIRES: mu_ held exclusively.
  void credit(std::size_t n) {
    if (!bounded_ || n == 0) return;
    n = std::min(n, bytes_);
    bytes_ -= n;
    if (o_.budget) o_.budget->credit(o_.category, n);
  }

  const Thread* find_thread(std::string_view thread_id) const {
    auto it = threads_.find(thread_id);
    return it == threads_.end() ? nullptr : &it->second;
  }
  const Checkpoint* find(std::string_view thread_id, std::string_view checkpoint_id) const {
    const Thread* t = find_thread(thread_id);
    if (t == nullptr) return nullptr;
    auto it = t->by_id.find(checkpoint_id);
    return it == t->by_id.end() ? nullptr : &it->second;
  }

  // put(), delete_thread() and the claim methods are the only mutators; they hold mu_
  // exclusively.
  mutable std::shared_mutex mu_;
  std::map<std::string, Thread, std::less<>> threads_;  // GUARDED_BY(mu_)
  std::map<uint64_t, std::string> recent_;              // updated_seq -> thread id; GUARDED_BY(mu_)
  uint64_t next_seq_ = 1;                               // GUARDED_BY(mu_)
  std::map<std::string, ThreadHolder, std::less<>> holders_;  // GUARDED_BY(mu_)
  const Retention retention_;
  const bool bounded_;  // a bound or a budget: checkpoints are costed
  const MemoryCheckpointerOptions o_;
  std::size_t bytes_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace

std::unique_ptr<Checkpointer> make_memory_checkpointer(Retention retention) {
  MemoryCheckpointerOptions o;
  o.retention = retention;
  return std::make_unique<MemoryCheckpointer>(o);
}

std::unique_ptr<Checkpointer> make_memory_checkpointer(const MemoryCheckpointerOptions& options) {
  return std::make_unique<MemoryCheckpointer>(options);
}

}  // namespace weir::graph
