// From a validated WorkflowSpec to a runnable graph: node kinds set, router, map, tool (the
// built-in `lorem` text generator for now), llm (through a caller-supplied model call) and
// subgraph/interrupt/agent (refused with a clear error until they exist), declarative routes.
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

// A model call for llm nodes: (model name, system, prompt, max_tokens) -> text.
using ModelCall = std::function<boost::asio::awaitable<Result<std::string>>(
    std::string model, std::string system, std::string prompt, std::int32_t max_tokens)>;

struct WorkflowGraph {
  std::shared_ptr<const CompiledGraph> graph;
  RuntimeOptions runtime;  // limits from the file (admission); budget/artifacts set by the caller
};

// Errors: invalid_workflow naming the node when a kind or tool is not available yet.
Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, ModelCall model_call = {});

// Arithmetic over numeric channels; errors name the position. Exposed for tests.
Result<double> eval_expression(std::string_view expr, const StateView& state);
// Template substitution as described above.
Result<boost::json::value> render_template(const boost::json::value& v, const StateView& state,
                                           const boost::json::value& item,
                                           const boost::json::object& input);

}  // namespace weir::graph
