// Helpers shared by the checkpointer implementations: argument checks and error texts (so every
// backend reports the same words), and the fold that rebuilds state from deltas.
#pragma once

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include "weir/graph/checkpointer.hpp"
#include "weir/graph/ids.hpp"

namespace weir::graph::detail {

inline std::string single_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

// The checks put() makes before touching storage.
inline Status check_put_ids(const Checkpoint& cp) {
  if (cp.thread_id.empty())
    return Error(Errc::invalid_argument,
                 "checkpoint put: thread_id is empty; every checkpoint belongs to a thread");
  if (cp.checkpoint_id.empty())
    return Error(Errc::invalid_argument,
                 "checkpoint put to thread " + single_quoted(cp.thread_id) +
                     ": checkpoint_id is empty; use new_checkpoint_id(step)");
  // The one id rule (ids.hpp), in every backend: what PostgreSQL text could not hold is refused
  // by SQLite and memory too, so a thread moves between stores unchanged.
  const std::pair<const char*, const std::string*> ids[] = {{"thread_id", &cp.thread_id},
                                                            {"checkpoint_id", &cp.checkpoint_id},
                                                            {"parent_id", &cp.parent_id}};
  for (const auto& [what, id] : ids) {
    if (id->empty()) continue;  // a root's parent_id
    if (auto s = check_id(what, *id); !s)
      return Error(Errc::invalid_argument, "checkpoint put: " + s.error().message);
  }
  return {};
}

// Values a JSON text cannot carry would be stored by one backend and lost or refused by another;
// put() refuses them in every backend so a checkpoint reads back exactly as it was put.
inline Status check_put_values(const Checkpoint& cp) {
  struct Item {
    const boost::json::value* value;
    std::size_t depth;     // nesting level of `value` when it is an array or object
    std::string_view top;  // the top-level key it sits under, for the message
  };
  const std::pair<const char*, const boost::json::object*> fields[] = {
      {"writes", &cp.writes}, {"pending", &cp.pending}, {"metadata", &cp.metadata}};
  std::vector<Item> stack;
  for (const auto& [field, object] : fields) {
    for (const auto& kv : *object) stack.push_back({&kv.value(), 2, kv.key()});
    while (!stack.empty()) {
      const Item item = stack.back();
      stack.pop_back();
      const boost::json::value& v = *item.value;
      auto where = [&] {
        return "checkpoint put " + single_quoted(cp.checkpoint_id) + " to thread " +
               single_quoted(cp.thread_id) + ": " + field + "[" + single_quoted(item.top) + "]";
      };
      if (v.is_double() && !std::isfinite(v.get_double()))
        return Error(Errc::invalid_argument,
                     where() +
                         " holds a non-finite number (NaN or Infinity), which JSON cannot "
                         "store; use null or a string");
      if ((v.is_array() || v.is_object()) && item.depth > kMaxJsonDepth)
        return Error(Errc::invalid_argument, where() + " is nested deeper than " +
                                                 std::to_string(kMaxJsonDepth) +
                                                 " levels of arrays and objects");
      if (v.is_array()) {
        for (const auto& e : v.get_array()) stack.push_back({&e, item.depth + 1, item.top});
      } else if (v.is_object()) {
        for (const auto& kv : v.get_object())
          stack.push_back({&kv.value(), item.depth + 1, item.top});
      }
    }
  }
  return {};
}

inline Error unknown_parent(const Checkpoint& cp) {
  return Error(Errc::invalid_argument, "checkpoint put " + single_quoted(cp.checkpoint_id) +
                                           " to thread " + single_quoted(cp.thread_id) +
                                           ": parent " + single_quoted(cp.parent_id) +
                                           " is not stored in that thread; put the parent first");
}

inline Error duplicate_checkpoint(const Checkpoint& cp) {
  return Error(Errc::invalid_argument,
               "checkpoint put: " + single_quoted(cp.checkpoint_id) +
                   " is already stored in thread " + single_quoted(cp.thread_id) +
                   "; checkpoints are immutable, use new_checkpoint_id(step) for a new one");
}

inline Error unknown_checkpoint(std::string_view what, std::string_view thread_id,
                                std::string_view checkpoint_id, bool thread_known) {
  std::string msg(what);
  msg += ": ";
  if (thread_known)
    msg +=
        "thread " + single_quoted(thread_id) + " has no checkpoint " + single_quoted(checkpoint_id);
  else
    msg += "unknown thread " + single_quoted(thread_id) + " (looking for checkpoint " +
           single_quoted(checkpoint_id) + ")";
  return Error(Errc::not_found, std::move(msg));
}

// state_at folds newest first: a channel already in `state` was written by a later checkpoint,
// so the older value is skipped. Same result as the oldest-first fold, but it can stream rows
// from the tip and never holds more than the state plus one row.
// A checkpoint whose writes hold this key (true) holds every channel: a walk from a newer
// checkpoint stops there. The executor writes one every kSnapshotEvery steps of a thread, so
// restoring a long conversation reads a bounded number of checkpoints.
inline constexpr std::string_view kSnapshotKey = "$snapshot";

inline bool is_snapshot(const boost::json::object& writes) {
  const auto* v = writes.if_contains(kSnapshotKey);
  return v && v->is_bool() && v->as_bool();
}

inline void fold_older_writes(boost::json::object& state, const boost::json::object& writes) {
  for (const auto& kv : writes) {
    if (kv.key() == kSnapshotKey) continue;
    if (!state.contains(kv.key())) state.emplace(kv.key(), kv.value());
  }
}

inline int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --- thread claims (one runner per thread) ---

// True when no process `pid` runs on this host (kill(pid, 0) reports ESRCH). EPERM: it runs.
inline bool process_gone(int64_t pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH;
}

inline std::string utc_time(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// Whether a stored claim still holds the thread against `claimant` at `now_ms`: its heartbeat
// is within its lease, and (on the claimant's host) its process runs.
inline bool claim_live(const ThreadHolder& held, const ThreadHolder& claimant, int64_t now_ms) {
  if (now_ms > held.heartbeat_ms + held.lease_ms) return false;
  if (held.host == claimant.host && process_gone(held.pid)) return false;
  return true;
}

inline Error thread_busy(std::string_view thread_id, const ThreadHolder& held, int64_t now_ms);

// What prune() answers for a thread a live claim holds when the policy has a max_age:
// thread_busy naming the holder (and nothing is removed). Age-based retention never deletes a
// thread in use: its run's next checkpoint needs its parent. keep_last alone always keeps the
// newest checkpoint, so it is not refused. `held`: the thread's claim, null when none.
inline Status refuse_prune_in_use(std::string_view thread_id, const Retention& policy,
                                  const ThreadHolder* held, int64_t now_ms) {
  if (policy.max_age.count() <= 0 || !held) return {};
  static const ThreadHolder me = this_process_holder("prune", 1);  // claim_live needs our host
  if (!claim_live(*held, me, now_ms)) return {};
  return thread_busy(thread_id, *held, now_ms);
}

inline std::string describe_holder(const ThreadHolder& h) {
  return "pid " + std::to_string(h.pid) + " on host " + h.host;
}

inline Error thread_busy(std::string_view thread_id, const ThreadHolder& held, int64_t now_ms) {
  const int64_t ago = std::max<int64_t>(0, now_ms - held.heartbeat_ms);
  const int64_t left = std::max<int64_t>(0, held.heartbeat_ms + held.lease_ms - now_ms);
  return Error(Errc::thread_busy, "thread " + single_quoted(thread_id) + " is being run by " +
                                      describe_holder(held) + " since " + utc_time(held.since_ms) +
                                      " (last heartbeat " + std::to_string(ago / 1000) +
                                      " s ago); wait for it or, if that process is gone, it "
                                      "will be taken over after " +
                                      std::to_string((left + 999) / 1000) + " s");
}

// renew_thread / put with a token that no longer holds the thread.
inline Error claim_lost(std::string_view thread_id, const ThreadHolder* now_held) {
  std::string msg = "thread " + single_quoted(thread_id) + " is no longer held by this runner: ";
  if (now_held)
    msg += "it was taken over by " + describe_holder(*now_held) + " at " +
           utc_time(now_held->since_ms) + " (this runner's heartbeat had lapsed)";
  else
    msg += "its claim was released";
  return Error(Errc::thread_busy, msg + "; this run stops without writing");
}

inline Status check_claim(std::string_view thread_id, const ThreadHolder& h) {
  if (auto s = check_id("thread_id", thread_id); !s)
    return Error(Errc::invalid_argument, "claim_thread: " + s.error().message);
  if (h.token.empty())
    return Error(Errc::invalid_argument, "claim_thread: the token is empty; use new_claim_token()");
  if (h.lease_ms <= 0)
    return Error(Errc::invalid_argument, "claim_thread: lease_ms must be positive");
  return {};
}

// A stored JSON column read back: an object, parsed with the limits put() enforced. `where` names
// the store (e.g. "postgres 'u@h:5432/db'").
inline Result<boost::json::object> parse_stored_object(std::string_view text,
                                                       std::string_view where,
                                                       std::string_view thread_id,
                                                       std::string_view checkpoint_id,
                                                       const char* column) {
  boost::json::parse_options options;
  options.max_depth = kMaxJsonDepth;  // put() refuses deeper values
  options.allow_invalid_utf8 = true;  // strings round-trip as the bytes that were put
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec, {}, options);
  if (ec || !v.is_object())
    return Error(Errc::corrupt_data,
                 std::string(where) + ": checkpoint " + single_quoted(checkpoint_id) +
                     " of thread " + single_quoted(thread_id) + ": column " + column + " is " +
                     (ec ? "not valid JSON (" + ec.message() + ")" : "not a JSON object"));
  return std::move(v.as_object());
}

// ---- Retention: one algorithm, each backend supplies the rows -------------------------------

// What prune needs to know of a checkpoint (no values).
struct PruneRow {
  std::string id;
  std::string parent;
  int64_t seq = 0;  // put order within the store
  bool snapshot = false;
};

// The oldest seq a pruned thread must keep: every row the policy keeps (`kept`) plus, for each,
// its ancestors back to the nearest snapshot or root, which state_at reads. `lookup(id)` returns
// Result<std::optional<PruneRow>> for a row of the thread. Every row with a smaller seq may go
// (a row at or above the floor that nothing needs stays: safe, and rare outside branches).
// nullopt when `kept` is empty: the whole thread may go. A missing parent ends that walk (the
// chain is already broken; state_at reports it).
template <class Lookup>
Result<std::optional<int64_t>> prune_floor(const std::vector<PruneRow>& kept, Lookup&& lookup) {
  if (kept.empty()) return std::optional<int64_t>();
  std::unordered_set<std::string> have;
  int64_t floor = kept.front().seq;
  for (const auto& r : kept) {
    have.insert(r.id);
    floor = std::min(floor, r.seq);
  }
  for (const auto& start : kept) {
    PruneRow cur = start;
    while (!cur.snapshot && !cur.parent.empty() && !have.contains(cur.parent)) {
      auto parent = lookup(cur.parent);
      if (!parent) return std::move(parent).error();
      if (!*parent) break;
      have.insert((*parent)->id);
      floor = std::min(floor, (*parent)->seq);
      cur = std::move(**parent);
    }
  }
  return std::optional<int64_t>(floor);
}

// The created_at (unix ms) below which `policy` drops a checkpoint; INT64_MIN when it has no age.
inline int64_t prune_age_cutoff(const Retention& policy, int64_t now_ms) {
  if (policy.max_age.count() <= 0) return INT64_MIN;
  return now_ms - static_cast<int64_t>(policy.max_age.count());
}

// Whether a put that left the thread with `rows` checkpoints, the oldest put at
// `oldest_created_ms`, should prune it now.
inline bool prune_due(const Retention& policy, std::size_t rows, int64_t oldest_created_ms,
                      int64_t now_ms) {
  if (policy.keep_last > 0 && rows > policy.keep_last + kPruneSlack) return true;
  return policy.max_age.count() > 0 && rows > kPruneSlack &&
         oldest_created_ms < prune_age_cutoff(policy, now_ms);
}

}  // namespace weir::graph::detail
