// A run's checkpoints: restoring a thread, saving a step's writes, stopping at an interrupt
// (see runner.hpp, checkpointer.hpp).
#include <boost/json.hpp>

#include "checkpointer_common.hpp"
#include "runner.hpp"

namespace weir::graph {

Status Runner::interrupt_run(const std::vector<Task>& tasks, std::size_t k, std::int32_t step) {
  const std::string& name = g.nodes_[tasks[k].node].name;
  if (nested) {
    return Error(Errc::unsupported, "node '" + name +
                                        "' called interrupt() inside a subgraph; interrupts "
                                        "are supported only in the top-level graph");
  }
  if (!checkpointer) {
    return Error(Errc::unsupported,
                 "node '" + name +
                     "' called interrupt(), which needs a checkpoint to resume from: set "
                     "RunOptions.checkpointer and RunOptions.thread_id");
  }
  json::object info{{"node", name}, {"payload", *ctxs[k].interrupt_}};
  if (auto s = save(std::vector<bool>(g.channels_.size()), tasks, step - 1, "interrupted", &info);
      !s)
    return s;
  interrupted_task = k;
  return {};
}

Status Runner::restore(std::vector<Task>& tasks) {
  auto latest = checkpointer->latest(thread->id);
  if (!latest) return std::move(latest).error();
  if (!*latest) {
    if (resume_value)
      return Error(Errc::not_found, "thread '" + thread->id + "' has no checkpoint to resume");
    return {};
  }
  const Checkpoint& cp = **latest;
  const auto* status = cp.pending.if_contains("status");
  const bool interrupted = status && *status == "interrupted";
  if (resume_value && !interrupted) {
    return Error(Errc::invalid_argument,
                 "thread '" + thread->id + "' is not interrupted (" +
                     (status && *status == "done"
                          ? "its last run finished)"
                          : "its last run stopped unfinished; async_invoke continues it)"));
  }
  if (!resume_value && interrupted) {
    const auto* info = cp.pending.if_contains("interrupt");
    const auto* node = info && info->is_object() ? info->as_object().if_contains("node") : nullptr;
    return Error(Errc::invalid_argument,
                 "thread '" + thread->id + "' is interrupted at node '" +
                     (node && node->is_string() ? std::string(node->as_string()) : "?") +
                     "'; call async_resume with a value to continue it");
  }
  if (interrupted) {
    const auto* info = cp.pending.if_contains("interrupt");
    const auto* node = info && info->is_object() ? info->as_object().if_contains("node") : nullptr;
    if (node && node->is_string()) thread->resume_node = std::string(node->as_string());
  }
  auto state = checkpointer->state_at(thread->id, cp.checkpoint_id);
  if (!state) return std::move(state).error();
  for (const auto& [k, v] : *state) {
    if (auto ch = g.channel_index(k)) st.values[*ch] = json::value(v, st.sp);
  }
  thread->parent_checkpoint = cp.checkpoint_id;
  thread->step_base = cp.step;
  if (status && *status == "done") return {};
  resumed = true;
  if (const auto* next = cp.pending.if_contains("next"); next && next->is_array()) {
    for (const auto& n : next->as_array()) {
      auto i = n.is_string() ? g.node_index(n.as_string()) : std::nullopt;
      if (!i) {
        return Error(Errc::corrupt_data, "checkpoint " + cp.checkpoint_id + " of thread '" +
                                             thread->id + "' names node " + json::serialize(n) +
                                             ", which this graph does not have");
      }
      tasks.push_back({*i, nullptr});
    }
  }
  if (const auto* sends = cp.pending.if_contains("sends"); sends && sends->is_array()) {
    for (const auto& sd : sends->as_array()) {
      const auto* node = sd.is_object() ? sd.as_object().if_contains("node") : nullptr;
      auto i = node && node->is_string() ? g.node_index(node->as_string()) : std::nullopt;
      if (!i)
        return Error(Errc::corrupt_data,
                     "checkpoint " + cp.checkpoint_id + " sends to an unknown node");
      tasks.push_back(
          {*i, sd.as_object().contains("input") ? sd.at("input") : json::value(), true});
    }
  }
  return {};
}

Status Runner::save(const std::vector<bool>& written, const std::vector<Task>& next_tasks,
                    std::int32_t step, const char* status, const json::object* interrupt) {
  Checkpoint cp;
  cp.thread_id = thread->id;
  cp.step = thread->step_base + step;
  cp.checkpoint_id = new_checkpoint_id(cp.step);
  cp.parent_id = thread->parent_checkpoint;
  // Every kSnapshotEvery steps of the thread the checkpoint holds every channel, so that
  // restoring a long thread folds at most that many checkpoints (Checkpointer::state_at stops
  // at a snapshot); the others hold only what the step wrote.
  constexpr std::int64_t kSnapshotEvery = 32;
  const bool snapshot = cp.step > 0 && cp.step % kSnapshotEvery == 0;
  for (std::size_t ch = 0; ch < written.size(); ++ch) {
    if (written[ch] || snapshot) cp.writes[g.channels_[ch].first] = json::value(st.values[ch]);
  }
  if (snapshot) cp.writes[detail::kSnapshotKey] = true;
  json::array nodes, sends;
  for (const auto& t : next_tasks) {
    if (t.from_send)
      sends.push_back(json::object{{"node", g.nodes_[t.node].name}, {"input", t.input}});
    else
      nodes.push_back(json::value(g.nodes_[t.node].name));
  }
  cp.pending = json::object{{"status", status               ? status
                                       : next_tasks.empty() ? "done"
                                                            : "running"},
                            {"next", std::move(nodes)},
                            {"sends", std::move(sends)}};
  if (interrupt) cp.pending["interrupt"] = *interrupt;
  cp.metadata = thread->checkpoint_metadata;
  cp.metadata["run_id"] = run_id;
  if (auto s = checkpointer->put(cp); !s) return s;
  thread->parent_checkpoint = cp.checkpoint_id;
  return {};
}

}  // namespace weir::graph
