// Graphviz DOT for a workflow: nodes (shaped by kind), static edges, conditional edges dashed
// and labelled with their case, map workers dotted, subgraphs drawn as clusters.
#pragma once

#include <string>

#include "weir/graph/workflow.hpp"

namespace weir::graph {

std::string workflow_to_dot(const WorkflowSpec& spec);

}  // namespace weir::graph
