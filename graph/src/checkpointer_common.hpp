// Helpers shared by the checkpointer implementations: argument checks and error texts (so every
// backend reports the same words), and the fold that rebuilds state from deltas.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "weir/graph/checkpointer.hpp"

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

}  // namespace weir::graph::detail
