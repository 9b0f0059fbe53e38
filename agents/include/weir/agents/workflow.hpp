// Workflow files with tools and agents: graph::build_workflow_graph with the agents layer's
// hooks filled in.
//
// The workflow's models are LocalChatModels opened on first use (one engine per model file):
// llm nodes make one chat turn on theirs, with the model's chat template. The "tools" section
// becomes a ToolRegistry (built-ins calculator, files, artifacts,
// doc_search; `lorem` stays in weir::graph), so tool nodes call them with validated arguments,
// timeouts and output caps. Its "agents" section becomes Agents, each on its model's
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
  MemoryBudget* budget = nullptr;      // the agents' loop runs
  // Where the workflow's local models come from: the program's registry, so that workflows
  // naming the same file share one engine. REQUIRES: it outlives the returned graph. Null: the
  // workflow keeps a registry of its own (its engines go with its graph).
  inference::EngineRegistry* engines = nullptr;
  std::optional<std::filesystem::path> model_override;  // every model's path (--model)
  LocalModelOptions model_options;
};

// Errors: invalid_workflow (a tool folder that does not exist, an agent naming an unknown
// model or tool, a bad agent setting), and build_workflow_graph's.
// REQUIRES: `spec` outlives the returned graph.
Result<graph::WorkflowGraph> build_workflow(const graph::WorkflowSpec& spec,
                                            WorkflowServices services);

}  // namespace weir::agents
