// What a node sees of its run: StateView (the state, read-only) and NodeContext (the run's id,
// step, artifacts, cancel flag, token budget, events, interrupts), and thrown_error(), which
// turns what a node threw into its Error. The run loop is in run.cpp.
#include <algorithm>

#include <boost/json.hpp>
#include <boost/system/system_error.hpp>

#include "runner.hpp"
#include "weir/runtime/artifact_store.hpp"

namespace weir::graph {

const json::value& StateView::get(std::string_view channel) const {
  static const json::value null;
  auto i = g_.channel_index(channel);
  return i ? s_.values[*i] : null;
}

json::object StateView::to_object() const {
  json::object o;
  o.reserve(g_.channel_count());
  for (std::size_t i = 0; i < g_.channel_count(); ++i) o.emplace(g_.channel_name(i), s_.values[i]);
  return o;
}

NodeContext::NodeContext() = default;
NodeContext::~NodeContext() = default;
NodeContext::NodeContext(NodeContext&&) noexcept = default;
NodeContext& NodeContext::operator=(NodeContext&&) noexcept = default;

std::string_view NodeContext::run_id() const {
  return run_ ? std::string_view(run_->run_id) : std::string_view();
}

std::string_view NodeContext::node() const {
  return run_ ? std::string_view(run_->task_name(task_)) : std::string_view();
}

const json::value& NodeContext::input() const {
  static const json::value null;
  return run_ ? run_->tasks[task_].input : null;
}

// The step and the resume value follow from the run's superstep, which holds still while the
// step's nodes run.
std::int64_t NodeContext::step() const {
  return run_ ? (run_->thread ? run_->thread->step_base : 0) + run_->superstep : 0;
}

const json::value* NodeContext::resume_value() const {
  if (!run_ || run_->superstep != 1 || !run_->resume_value()) return nullptr;
  const auto& th = *run_->thread;
  if (th.resume_task >= 0) {  // each task its own answer: a Send task's, one of two askers'
    for (const auto& [task, value] : th.answers)
      if (task == task_) return &value;
    return nullptr;
  }
  return node() == th.resume_node ? run_->resume_value() : nullptr;
}

ArtifactStore* NodeContext::artifacts() const {
  return run_ ? run_->opt.artifacts : nullptr;
}

bool NodeContext::cancelled() const {
  return run_ && run_->cancel && run_->cancel->load(std::memory_order_relaxed);
}

std::shared_ptr<const std::atomic<bool>> NodeContext::cancel_flag() const {
  return run_ ? run_->cancel : nullptr;
}

Result<std::string> NodeContext::fetch(const json::value& ref, std::uint64_t offset,
                                       std::uint64_t length) const {
  auto r = ArtifactRef::from_json(ref);
  if (!r) {
    if (ref.is_string())
      return std::string(ref.as_string())
          .substr(std::min<std::size_t>(offset, ref.as_string().size()), length);
    return Error(Errc::invalid_argument,
                 "node '" + std::string(node()) +
                     "': the value is neither an artifact reference nor a string");
  }
  ArtifactStore* store = artifacts();
  if (!store)
    return Error(Errc::not_found,
                 "node '" + std::string(node()) + "': this run has no artifact store");
  return store->get_range(r->id, offset, length);
}

Status NodeContext::charge_tokens(std::int64_t n) {
  if (!run_) return {};
  std::int64_t& used = run_->tokens_used();
  const std::int64_t budget = run_->token_budget();
  used += n;
  if (budget > 0 && used > budget) {
    return Error(Errc::token_budget_exceeded,
                 "run stopped in node '" + std::string(node()) + "': " + std::to_string(used) +
                     " tokens used, over the token budget of " + std::to_string(budget) +
                     " (limits.token_budget)");
  }
  return {};
}

void NodeContext::emit(std::string name, json::value data) {
  if (!run_ || !run_->streaming()) return;
  if (!extra_) extra_ = std::make_unique<Extra>();
  extra_->emitted.emplace_back(std::move(name), json::value(std::move(data), json::storage_ptr()));
}

std::string NodeContext::new_message_id() {
  if (!run_) return {};
  if (!extra_) extra_ = std::make_unique<Extra>();
  const std::int32_t n = extra_->messages_named++;
  // "n:<node>#<task>#<n>": each Send task of a node names its own (they had one id, and the
  // messages reducer kept one of their replies); name_messages' keys start "c:".
  return run_->message_id(run_->superstep, "n:" + run_->event_prefix() + std::string(node()) + "#" +
                                               std::to_string(task_) + "#" + std::to_string(n));
}

std::function<void(std::string_view)> NodeContext::message_text(std::string message_id) const {
  if (!run_ || !run_->extras || !run_->extras->on_text) return {};
  MessageText base;
  base.run_id = run_->run_id;
  base.node = run_->event_prefix() + std::string(node());
  base.step = run_->thread_step();  // a subgraph's node: the step of its top-level run
  base.message_id = std::move(message_id);
  auto offset = std::make_shared<std::uint64_t>(0);  // shared by the function's copies
  return [sink = run_->extras->on_text, base = std::move(base), offset](std::string_view text) {
    if (text.empty()) return;
    MessageText t = base;
    t.offset = *offset;
    t.text = text;
    *offset += text.size();
    (*sink)(t);
  };
}

Error NodeContext::interrupt(json::value payload) {
  if (!extra_) extra_ = std::make_unique<Extra>();
  extra_->interrupt = json::value(std::move(payload), json::storage_ptr());
  return Error(Errc::interrupted, "node '" + std::string(node()) + "' interrupted the run");
}

Error thrown_error() {
  try {
    throw;
  } catch (const Exception& e) {
    return e.error();
  } catch (const boost::system::system_error& e) {  // boost::json's: what() ends in its source
    return Error(Errc::tool_failed, "threw: " + e.code().message());
  } catch (const std::exception& e) {
    return Error(Errc::tool_failed, std::string("threw: ") + e.what());
  } catch (...) {
    return Error(Errc::tool_failed, "threw an exception that is not a std::exception");
  }
}

}  // namespace weir::graph
