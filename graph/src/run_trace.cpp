// The run loop's spans (runner.hpp, RunTrace): a run, its supersteps and their nodes, and the
// fences that acted as events. Called from run.cpp only for a traced run; an untraced run
// never reaches this file.
#include "runner.hpp"

namespace weir::graph {

namespace {

// The cap an error names, for the loop-cap event ("" when the error is not a cap).
std::string_view cap_of(const Error& e) {
  if (e.is(Errc::step_limit_exceeded))
    return e.message.find("max_thread_steps") != std::string::npos ? "max_thread_steps"
                                                                   : "recursion_limit";
  if (e.is(Errc::visit_limit_exceeded)) return "max_visits";
  if (e.is(Errc::deadline_exceeded)) return "deadline";
  if (e.is(Errc::token_budget_exceeded)) return "token_budget";
  if (e.is(Errc::memory_budget_exceeded)) return "memory_budget";
  return {};
}

}  // namespace

trace::Context NodeContext::trace() const {
  if (!run_ || !run_->traced) return {};
  const RunTrace& t = *run_->extras->trace;
  if (task_ < t.nodes.size()) return t.for_steps().child(t.nodes[task_]);
  return t.for_steps();
}

void NodeContext::trace_event(std::string_view name, std::vector<trace::Attribute> attributes) {
  if (!run_ || !run_->traced) return;
  RunTrace& t = *run_->extras->trace;
  if (task_ < t.nodes.size()) t.nodes[task_].add_event(name, std::move(attributes));
}

void Runner::trace_begin(const trace::Context& ctx, std::string_view name) {
  auto t = std::make_unique<RunTrace>();
  t->ctx = ctx;
  const bool labelled = !g.trace_operation_.empty();
  if (labelled || !nested) {
    const std::string op = labelled ? g.trace_operation_ : "invoke_workflow";
    const std::string label =
        labelled ? g.trace_name_ : (name.empty() ? std::string("graph") : std::string(name));
    t->run = ctx.start(op + " " + label);
    t->run.set(trace::attr::kOperation, op);
    if (op == "invoke_agent") t->run.set(trace::attr::kAgentName, label);
    if (!labelled) t->run.set("weir.workflow.name", label);
    t->run.set(trace::attr::kRunId, run_id);
    if (thread) t->run.set(trace::attr::kThreadId, thread->id);
  }
  extra().trace = std::move(t);
  traced = true;
}

void Runner::trace_step_begin() {
  RunTrace& t = *extras->trace;
  t.step.end();
  t.step = t.for_steps().start("superstep " + std::to_string(superstep));
  t.step.set("weir.superstep", superstep);
  if (thread) t.step.set("weir.thread.step", thread->step_base + superstep);
  t.step.set("weir.superstep.tasks", tasks.size());
  const trace::Context in_step = t.for_steps().child(t.step);
  t.nodes.clear();
  t.nodes.reserve(tasks.size());
  for (const auto& task : tasks) {
    const auto& name = g.nodes_[task.node].name;
    trace::Span s = in_step.start("node " + name);
    s.set("weir.node.name", name);
    if (task.from_send) s.set("weir.node.send", true);
    t.nodes.push_back(std::move(s));
  }
}

void Runner::trace_node_end(std::size_t task, const Result<Update>& r) {
  RunTrace& t = *extras->trace;
  if (task >= t.nodes.size() || !t.nodes[task].recording()) return;
  trace::Span& s = t.nodes[task];
  if (!r) {
    // An interrupt is a pause, not a failure.
    if (r.error().is(Errc::interrupted))
      s.add_event("weir.interrupt");
    else
      s.set_error(r.error());
  } else {
    s.set("weir.node.writes", r->writes.size());
    s.set_ok();
  }
  s.end();
}

void Runner::trace_step_end() {
  RunTrace& t = *extras->trace;
  t.nodes.clear();  // ends what a failure left open
  t.step.end();
}

void Runner::trace_fence(std::string_view name, std::vector<trace::Attribute> attributes) {
  RunTrace& t = *extras->trace;
  if (t.step.recording())
    t.step.add_event(name, std::move(attributes));
  else if (t.run.recording())
    t.run.add_event(name, std::move(attributes));
}

void Runner::trace_run_end() {
  RunTrace& t = *extras->trace;
  if (!ok) {
    const Error& e = extras->error;
    if (auto cap = cap_of(e); !cap.empty())
      trace_fence("weir.fence.loop_cap",
                  {{"weir.fence.cap", std::string(cap)}, {"weir.fence.message", e.message}});
  }
  trace_step_end();
  trace::Span& s = t.run;
  if (!s.recording()) return;
  s.set("weir.run.steps", superstep);
  if (!nested) {
    s.set("weir.run.tokens", tokens_used());
    s.set("weir.run.peak_state_bytes", st.resource.peak_bytes());
    s.set("weir.run.offloaded", offloaded);
  }
  if (resumed) s.set("weir.run.resumed", true);
  if (interrupted) s.set("weir.run.interrupted", true);
  if (ok)
    s.set_ok();
  else
    s.set_error(extras->error);
  s.end();
}

}  // namespace weir::graph
