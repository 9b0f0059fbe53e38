// Workflow files with tools and agents: graph::build_workflow_graph with the agents layer's
// hooks filled in.
//
// The workflow's models are LocalChatModels opened on first use (one engine per model file):
// llm nodes make one chat turn on theirs, with the model's chat template. The "tools" section
// becomes a ToolRegistry (built-ins calculator, files, artifacts, doc_search, lorem, sleep), so
// tool nodes call them with validated arguments, timeouts and output caps; an output over a
// tool's cap goes whole to the artifact store and the node's channel gets its reference.
// Expressions ({"$expr": ...}) are the tools layer's calculator over the channels. Its "agents" section becomes Agents, each on its model's
// LocalChatModel (opened on first use: one engine per model file), so an agent node runs the
// agent's reason-act loop as a child run on the node's input and writes its answer.
//
// Thread safety: the returned graph may run any number of times at once.
#pragma once

#include <filesystem>
#include <optional>

#include "weir/agents/local_model.hpp"
#include "weir/graph/workflow_graph.hpp"

namespace weir {
class ArtifactStore;
class MemoryBudget;
}  // namespace weir

namespace weir::agents {

struct WorkflowServices {
  ArtifactStore* artifacts = nullptr;  // the artifacts tool, and the agents' loop runs
  MemoryBudget* budget = nullptr;      // the agents' loop runs and the engines' KV pools
  std::optional<std::filesystem::path> model_override;  // every model's path (--model)
  LocalModelOptions model_options;
};

// Errors: invalid_workflow (a tool folder that does not exist, an agent naming an unknown
// model or tool, a bad agent setting), and build_workflow_graph's.
// REQUIRES: `spec` outlives the returned graph.
Result<graph::WorkflowGraph> build_workflow(const graph::WorkflowSpec& spec,
                                            WorkflowServices services);

}  // namespace weir::agents
