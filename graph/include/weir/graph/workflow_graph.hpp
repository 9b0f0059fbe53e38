// From a validated WorkflowSpec to a runnable graph: node kinds set, router, map, tool
// (WorkflowHooks::tool_call: every tool, the built-ins included, is the tools layer's), llm
// (WorkflowHooks::model_call), agent (WorkflowHooks::agent_call), crew (WorkflowHooks::crew_call),
// subgraph (the file built the
// same way, run as a child with its own limits) and interrupt (suspends the run; the resume
// value is written to its output channel), declarative routes.
//
// Expressions (`{"$expr": "n + 1"}` in set nodes) are the tools layer's calculator over the
// numeric channels (WorkflowHooks::evaluate); weir::graph has no evaluator of its own.
// agents::build_workflow fills every hook; without it, a file that needs one is refused by
// name. Templates in strings: "{{state.x}}", "{{state.x.field}}", "{{input.k}}", "{{item}}"; a
// string that is exactly one template keeps the value's JSON type.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "weir/graph/state_graph.hpp"
#include "weir/graph/workflow.hpp"

namespace weir::graph {

// A model call for llm nodes: (model name, system, prompt, max_tokens, the node's
// output_schema or nullopt, where the reply's text goes as it is generated (empty: nowhere;
// NodeContext::message_text), node context) -> text (with a schema: one JSON value valid
// against it).
using ModelCall = std::function<boost::asio::awaitable<Result<std::string>>(
    std::string model, std::string system, std::string prompt, std::int32_t max_tokens,
    std::optional<boost::json::object> output_schema, std::function<void(std::string_view)> on_text,
    NodeContext& ctx)>;

// A tool call for tool nodes: (tool name, rendered args, node context) -> the value written to
// the node's output channel. The agents layer supplies it (agents::build_workflow).
using ToolCall = std::function<boost::asio::awaitable<Result<boost::json::value>>(
    std::string tool, boost::json::object args, NodeContext& ctx)>;
// An agent node: (agent name, the input channel's value, node context) -> the output value.
using AgentCall = std::function<boost::asio::awaitable<Result<boost::json::value>>(
    std::string agent, boost::json::value input, NodeContext& ctx)>;

// A crew's task output as its agent's message.
struct CrewMessage {
  std::string task, agent, text;
};
// What a crew node's crew returned: its final output, and each task's output, in order.
struct CrewReply {
  std::string output;
  std::vector<CrewMessage> messages;
};
// A crew node: (the entry of "crews", the node's model ("" : the file's only one), the crew's
// inputs as the node rendered them, where a task's output goes as soon as the task is done
// (task name, text; from any thread; its message in the reply must carry the same text),
// node context) -> its reply.
using CrewCall = std::function<boost::asio::awaitable<Result<CrewReply>>(
    std::string crew, std::string model, boost::json::object inputs,
    std::function<void(const std::string& task, std::string_view text)> on_task_text,
    NodeContext& ctx)>;

// An expression over a run's state: a channel's name stands for its number, len(CHANNEL) for
// the items it holds. Errors name what is wrong (the node is added by the run).
using ExpressionEval = std::function<Result<double>(std::string_view expr, const StateView& state)>;

struct WorkflowHooks {
  ModelCall model_call;
  ToolCall tool_call;
  AgentCall agent_call;
  CrewCall crew_call;
  ExpressionEval evaluate;
  // The hooks for a subgraph file, which has its own tools, models and agents; unset: the
  // parent's hooks serve it.
  std::function<Result<WorkflowHooks>(const WorkflowSpec& subgraph)> subgraph;
};

struct WorkflowGraph {
  std::shared_ptr<const CompiledGraph> graph;
  RuntimeOptions runtime;  // limits from the file (admission); budget/artifacts set by the caller
};

// Errors: invalid_workflow naming the node when a kind has no implementation (an llm, agent or
// tool node, or a set node with an expression, without its hook).
Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, WorkflowHooks hooks);
Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, ModelCall model_call = {});

// Template substitution as described above.
Result<boost::json::value> render_template(const boost::json::value& v, const StateView& state,
                                           const boost::json::value& item,
                                           const boost::json::object& input);

}  // namespace weir::graph
