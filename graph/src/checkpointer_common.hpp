// Helpers shared by the checkpointer implementations: argument checks and error texts (so every
// backend reports the same words), and the fold that rebuilds state from deltas.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

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
inline void fold_older_writes(boost::json::object& state, const boost::json::object& writes) {
  for (const auto& kv : writes) {
    if (!state.contains(kv.key())) state.emplace(kv.key(), kv.value());
  }
}

inline int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace weir::graph::detail
