// A run's checkpoints: restoring a thread, saving a step's writes, stopping at an interrupt
// (see runner.hpp, checkpointer.hpp).
#include <boost/json.hpp>

#include "checkpointer_common.hpp"
#include "runner.hpp"
#include "weir/graph/artifact_refs.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/log.hpp"

namespace weir::graph {

void for_each_artifact_id(const json::object& values,
                          const std::function<void(const std::string&)>& f) {
  std::vector<const json::value*> stack;
  for (const auto& kv : values) stack.push_back(&kv.value());
  while (!stack.empty()) {
    const json::value* v = stack.back();
    stack.pop_back();
    if (v->is_array()) {
      for (const auto& e : v->get_array()) stack.push_back(&e);
    } else if (v->is_object()) {
      if (auto ref = ArtifactRef::from_json(*v)) {
        f(ref->id);
        continue;
      }
      for (const auto& kv : v->get_object()) stack.push_back(&kv.value());
    }
  }
}

namespace {

// The counters that bound a run across its invocations, as a checkpoint's pending carries them.
constexpr std::string_view kVisitsKey = "visits";
constexpr std::string_view kTokensKey = "tokens_used";
constexpr std::string_view kOriginKey = "origin";  // Thread::origin

}  // namespace

ThreadHold::ThreadHold(Checkpointer& cp, std::string thread_id, std::string token,
                       std::chrono::milliseconds lease)
    : cp_(cp), thread_(std::move(thread_id)), token_(std::move(token)) {
  const auto every = std::max(std::chrono::milliseconds(1), lease / 3);
  worker_ = std::thread([this, every] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, every, [this] { return stop_; })) {
      lock.unlock();
      if (auto s = cp_.renew_thread(thread_, token_); !s)
        log(LogLevel::warn, "heartbeat of thread '" + thread_ + "': " + s.error().message);
      lock.lock();
    }
  });
}

ThreadHold::~ThreadHold() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  worker_.join();
  if (auto s = cp_.release_thread(thread_, token_); !s)
    log(LogLevel::warn, "releasing thread '" + thread_ + "': " + s.error().message);
}

Status Runner::claim() {
  if (thread->claim_held) return {};  // the caller's claim (RunOptions::claim_token)
  thread->claim_token = new_claim_token();
  auto held = checkpointer()->claim_thread(
      thread->id, this_process_holder(thread->claim_token, thread->lease.count()));
  if (!held) return std::move(held).error();
  thread->hold =
      std::make_unique<ThreadHold>(*checkpointer(), thread->id, thread->claim_token, thread->lease);
  return {};
}

namespace {

// Each task's place in the list a checkpoint's pending gives back (restore(): its "next" nodes,
// then its sends), which a resumed step's tasks keep.
std::vector<std::uint32_t> restored_places(const std::vector<Task>& tasks) {
  std::uint32_t statics = 0, nodes = 0, sends = 0;
  for (const auto& t : tasks) statics += t.from_send ? 0 : 1;
  std::vector<std::uint32_t> place;
  place.reserve(tasks.size());
  for (const auto& t : tasks) place.push_back(t.from_send ? statics + sends++ : nodes++);
  return place;
}

// The archive before a messages window's archive (runner.hpp, kPreviousArchiveKey), from its
// first line; "" when it names none.
std::string previous_archive(const Checkpoint::Artifact& a) {
  if (a.media_type != "application/x-ndjson") return {};
  const std::string_view first = std::string_view(a.bytes).substr(0, a.bytes.find('\n'));
  if (!first.starts_with("{\"" + std::string(kPreviousArchiveKey) + "\"")) return {};
  boost::system::error_code ec;
  const json::value v = json::parse(first, ec);
  const json::value* p =
      ec || !v.is_object() ? nullptr : v.as_object().if_contains(kPreviousArchiveKey);
  auto ref = p ? ArtifactRef::from_json(*p) : std::nullopt;
  return ref ? ref->id : std::string();
}

}  // namespace

Status Runner::restore_artifacts(const json::object& state, const json::object& pending) {
  if (!opt.artifacts) return {};
  Status s;
  auto load = [&](std::string id) {
    // A messages window's archive brings the archives before it (a chain: one blob each).
    while (!id.empty()) {
      if (!s || thread->durable_artifacts.contains(id) || opt.artifacts->contains(id)) return;
      auto blob = checkpointer()->get_artifact(thread->id, id);
      if (!blob) {
        s = std::move(blob).error();
        return;
      }
      if (!*blob) return;  // not stored with the thread: a fetch reports it as not_found
      auto ref = opt.artifacts->put((**blob).bytes, (**blob).media_type, "", run_id);
      if (!ref) {
        s = std::move(ref).error();
        return;
      }
      if (ref->id != id) {
        s = Error(Errc::corrupt_data, "thread '" + thread->id + "': stored artifact " + id +
                                          " does not hash to its id");
        return;
      }
      thread->durable_artifacts.insert(id);
      id = previous_archive(**blob);
    }
  };
  for_each_artifact_id(state, load);
  for_each_artifact_id(pending, load);
  return s;
}

Result<std::vector<std::string>> Runner::attach_artifacts(Checkpoint& cp) const {
  std::vector<std::string> ids;
  if (!opt.artifacts) return ids;
  Status s;
  auto attach = [&](const std::string& id) {
    if (!s || thread->durable_artifacts.contains(id)) return;
    for (const auto& a : cp.artifacts) {
      if (a.id == id) return;
    }
    auto ref = opt.artifacts->stat(id);
    if (!ref) {
      // A reference this run's store never held (say, given in the input): nothing to copy.
      if (!ref.error().is(Errc::not_found)) s = std::move(ref).error();
      return;
    }
    auto bytes = opt.artifacts->get(id);
    if (!bytes) {
      s = std::move(bytes).error();
      return;
    }
    cp.artifacts.push_back({id, ref->media_type, std::move(*bytes)});
    ids.push_back(id);
  };
  for_each_artifact_id(cp.writes, attach);
  for_each_artifact_id(cp.pending, attach);
  for_each_artifact_id(cp.metadata, attach);  // subgraph steps' values
  if (!s) return std::move(s).error();
  return ids;
}

Status Runner::interrupt_run(const std::vector<Task>& tasks, std::size_t k, std::int32_t step,
                             const char* breakpoint) {
  const std::string& name = g.nodes_[tasks[k].node].name;
  if (breakpoint && !checkpointer()) {
    return Error(Errc::unsupported, std::string("interrupt_") + breakpoint + " (node '" + name +
                                        "') needs a checkpoint to resume from: set "
                                        "RunOptions.checkpointer and RunOptions.thread_id");
  }
  if (nested) {
    return Error(Errc::unsupported, "node '" + name +
                                        "' called interrupt() inside a subgraph; interrupts "
                                        "are supported only in the top-level graph");
  }
  if (!checkpointer()) {
    return Error(Errc::unsupported,
                 "node '" + name +
                     "' called interrupt(), which needs a checkpoint to resume from: set "
                     "RunOptions.checkpointer and RunOptions.thread_id");
  }
  // The interrupted step is re-run on resume, where begin_step counts its visits again.
  for (const auto& t : tasks) {
    if (g.nodes_[t.node].options.max_visits > 0 && st.visits[t.node] > 0) --st.visits[t.node];
  }
  json::object info{{"node", name}, {"payload", *tasks[k].ctx.extra_->interrupt}};
  if (breakpoint) {
    info["breakpoint"] = breakpoint;
    extra().breakpoint = breakpoint;
  } else {
    // The task by its place in the list restore() rebuilds (the "next" nodes, then the sends),
    // and the answers the step's other tasks were given, kept for the re-run.
    const auto place = restored_places(tasks);
    info["task"] = std::int64_t{place[k]};
    json::array answers;
    if (step == 1 && thread->resume_task >= 0)
      for (const auto& [task, value] : thread->answers)
        if (task != k) answers.push_back(json::array{std::int64_t{place[task]}, value});
    if (!answers.empty()) info["answers"] = std::move(answers);
  }
  // Numbered as the step it paused (a number of its own: the step before has its checkpoint);
  // the re-run on resume comes after it.
  if (auto s = save(std::vector<bool>(g.channels_.size()), tasks, step, "interrupted", &info); !s)
    return s;
  interrupted_task = static_cast<std::uint32_t>(k);
  return {};
}

Status Runner::restore(std::vector<Task>& tasks, bool has_input) {
  auto latest = checkpointer()->latest(thread->id);
  if (!latest) return std::move(latest).error();
  if (!*latest) {
    if (resume_value())
      return Error(Errc::not_found, "thread '" + thread->id + "' has no checkpoint to resume");
    return {};
  }
  const Checkpoint& cp = **latest;
  const auto* status = cp.pending.if_contains("status");
  const bool interrupted = status && *status == "interrupted";
  const bool done = status && *status == "done";
  // The continuation rule (Thread::origin): an unfinished run given again what started it, or
  // no input, goes on where it stopped; its input is in the restored state already.
  if (!done && !interrupted) {
    const auto* o = cp.pending.if_contains(kOriginKey);
    const bool same = o && o->is_string() && o->as_string() == thread->origin;
    if (same || (!has_input && !resume_value())) {
      thread->continues = true;
      if (o && o->is_string()) thread->origin = std::string(o->as_string());
      thread->resume_value = nullptr;  // a repeated resume: its step ran already
    }
  }
  if (resume_value() && !interrupted) {
    return Error(Errc::invalid_argument,
                 "thread '" + thread->id + "' is not interrupted (" +
                     (status && *status == "done"
                          ? "its last run finished)"
                          : "its last run stopped unfinished; async_invoke continues it)"));
  }
  if (!resume_value() && interrupted) {
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
    const bool breakpoint = info && info->is_object() && info->as_object().contains("breakpoint");
    // A breakpoint's step runs as it would have: no node takes the resume value.
    if (node && node->is_string() && !breakpoint)
      thread->resume_node = std::string(node->as_string());
    if (const auto* task = info && info->is_object() && !breakpoint
                               ? info->as_object().if_contains("task")
                               : nullptr;
        task && task->is_int64() && task->as_int64() >= 0) {
      thread->resume_task = task->as_int64();
      thread->answers.emplace_back(static_cast<std::uint32_t>(thread->resume_task),
                                   json::value(*resume_value()));
      if (const auto* a = info->as_object().if_contains("answers"); a && a->is_array())
        for (const auto& pair : a->as_array()) {
          const auto* p = pair.is_array() ? &pair.as_array() : nullptr;
          if (!p || p->size() != 2 || !(*p)[0].is_int64() || (*p)[0].as_int64() < 0)
            return Error(Errc::corrupt_data, "checkpoint " + cp.checkpoint_id + " of thread '" +
                                                 thread->id + "' has a malformed answer " +
                                                 json::serialize(pair));
          thread->answers.emplace_back(static_cast<std::uint32_t>((*p)[0].as_int64()), (*p)[1]);
        }
    }
    skip_breaks = true;
  }
  auto state = checkpointer()->state_at(thread->id, cp.checkpoint_id);
  if (!state) return std::move(state).error();
  if (auto s = restore_artifacts(*state, cp.pending); !s) return s;
  for (const auto& [k, v] : *state) {
    if (auto ch = g.channel_index(k)) st.values[*ch] = json::value(v, st.sp());
  }
  thread->parent_checkpoint = cp.checkpoint_id;
  thread->step_base = cp.step;
  if (status && *status == "done") return {};
  resumed = true;
  // The run goes on: its visit counts and tokens carry over (the caps bound the whole run).
  if (const auto* v = cp.pending.if_contains(kVisitsKey); v && v->is_object()) {
    for (const auto& kv : v->get_object()) {
      auto i = g.node_index(kv.key());
      if (i && kv.value().is_int64()) st.visits[*i] = kv.value().get_int64();
    }
  }
  if (const auto* t = cp.pending.if_contains(kTokensKey); t && t->is_int64())
    tokens_used() = t->get_int64();
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
  for (const auto& [task, value] : thread->answers)
    if (task >= tasks.size())
      return Error(Errc::corrupt_data, "checkpoint " + cp.checkpoint_id + " of thread '" +
                                           thread->id + "' answers task " + std::to_string(task) +
                                           " of a step of " + std::to_string(tasks.size()));
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
  if (!thread->origin.empty()) cp.pending[kOriginKey] = thread->origin;
  json::object visits;
  for (std::size_t n = 0; st.visits && n < g.nodes_.size(); ++n) {
    if (st.visits[n] > 0) visits[g.nodes_[n].name] = st.visits[n];
  }
  if (!visits.empty()) cp.pending[kVisitsKey] = std::move(visits);
  if (tokens_used() > 0) cp.pending[kTokensKey] = tokens_used();
  cp.metadata = thread->checkpoint_metadata;
  cp.metadata["run_id"] = run_id;
  if (extras && !extras->fences.empty()) {
    cp.metadata["fences"] = std::move(extras->fences);
    extras->fences = json::array();
  }
  if (extras && !extras->subgraph_steps.empty()) {
    cp.metadata["subgraph_steps"] = std::move(extras->subgraph_steps);
    extras->subgraph_steps = json::array();
  }
  if (extras && extras->subgraph_dropped > 0)
    cp.metadata["subgraph_steps_dropped"] = extras->subgraph_dropped;
  if (extras) extras->subgraph_bytes = 0, extras->subgraph_dropped = 0;
  cp.claim_token = thread->claim_token;
  auto copied = attach_artifacts(cp);
  if (!copied) return std::move(copied).error();
  if (auto s = checkpointer()->put(cp); !s) return s;
  for (auto& id : *copied) thread->durable_artifacts.insert(std::move(id));
  thread->parent_checkpoint = cp.checkpoint_id;
  return {};
}

}  // namespace weir::graph
