// From a validated WorkflowSpec to a runnable graph: node kinds set, router, map, tool (the
// built-ins `lorem`, `sleep` and `calculator` here, the others through WorkflowHooks::tool_call),
// llm (WorkflowHooks::model_call), agent (WorkflowHooks::agent_call), subgraph (the file built the
// same way, run as a child with its own limits) and interrupt (suspends the run; the resume
// value is written to its output channel), declarative routes.
//
// Expressions (`{"$expr": "n + 1"}` in set nodes) are arithmetic over numeric channels:
// numbers, channel names, + - * / and parentheses; nothing else runs.
// Templates in strings: "{{state.x}}", "{{state.x.field}}", "{{input.k}}", "{{item}}"; a string
// that is exactly one template keeps the value's JSON type.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "weir/graph/state_graph.hpp"
#include "weir/graph/workflow.hpp"

namespace weir::graph {

// A model call for llm nodes: (model name, system, prompt, max_tokens, the node's
// output_schema or nullopt, node context) -> text (with a schema: one JSON value valid against
// it).
using ModelCall = std::function<boost::asio::awaitable<Result<std::string>>(
    std::string model, std::string system, std::string prompt, std::int32_t max_tokens,
    std::optional<boost::json::object> output_schema, NodeContext& ctx)>;

// A tool call for tool nodes whose built-in weir::graph does not run itself (everything but
// `lorem`, `sleep` and `calculator`): (tool name, rendered args, node context) -> the value written
// to the node's output channel. The agents layer supplies it (agents::build_workflow).
using ToolCall = std::function<boost::asio::awaitable<Result<boost::json::value>>(
    std::string tool, boost::json::object args, NodeContext& ctx)>;
// An agent node: (agent name, the input channel's value, node context) -> the output value.
using AgentCall = std::function<boost::asio::awaitable<Result<boost::json::value>>(
    std::string agent, boost::json::value input, NodeContext& ctx)>;

struct WorkflowHooks {
  ModelCall model_call;
  ToolCall tool_call;
  AgentCall agent_call;
};

struct WorkflowGraph {
  std::shared_ptr<const CompiledGraph> graph;
  RuntimeOptions runtime;  // limits from the file (admission); budget/artifacts set by the caller
};

// Errors: invalid_workflow naming the node when a kind or tool has no implementation (an llm,
// agent or non-built-in tool node without its hook).
Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, WorkflowHooks hooks);
Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, ModelCall model_call = {});

// Arithmetic over numeric channels; errors name the position. Exposed for tests.
Result<double> eval_expression(std::string_view expr, const StateView& state);
// Template substitution as described above.
Result<boost::json::value> render_template(const boost::json::value& v, const StateView& state,
                                           const boost::json::value& item,
                                           const boost::json::object& input);

}  // namespace weir::graph
