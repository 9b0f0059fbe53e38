// The tools weir serves over MCP, for `weir mcp` (stdio) and `weir serve --mcp-*` (/mcp):
// built-in tools by name and each workflow file of a folder as a tool whose input schema lists
// the workflow's input channels and whose result is its output channels as JSON.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/tools/mcp_server.hpp"
#include "weir/tools/registry.hpp"

namespace weir::inference {
class EngineRegistry;
}

namespace weir::cli {

struct ServedWorkflow;

struct McpToolsConfig {
  std::string tools = "calculator";  // comma-separated built-ins (tools::builtin_tool_names())
  std::filesystem::path root = ".";  // the files tool's root
  std::optional<std::filesystem::path> workflows;
  // Each tools/call a span, a workflow's run under it (McpServerOptions::tracer); null: off.
  // REQUIRES: outlives the McpTools.
  trace::Tracer* tracer = nullptr;
};

// Owns what the served tools need: a memory budget, an artifact store in a temporary folder
// (removed again by the destructor), the registry, the workflows' graphs, runtimes and engines,
// and the McpServer over them.
class McpTools {
 public:
  ~McpTools();
  tools::ToolRegistry& registry() { return registry_; }
  std::shared_ptr<tools::McpServer> server() { return server_; }
  ArtifactStore* artifacts() { return store_.get(); }

  // `prog` prefixes the messages ("mcp", "serve"). Errors: invalid_argument for an unknown
  // tool or a --workflows that is not a folder; io_error when the store cannot be made.
  // Workflow files that do not load are skipped with a warning naming the file and the report.
  static Result<std::unique_ptr<McpTools>> build(const std::string& prog,
                                                 const McpToolsConfig& config);

 private:
  McpTools() = default;
  std::unique_ptr<MemoryBudget> budget_;
  std::filesystem::path art_dir_;
  std::unique_ptr<ArtifactStore> store_;
  tools::ToolRegistry registry_;
  // The workflows' local models, one engine per model file (declared before the workflows).
  std::unique_ptr<inference::EngineRegistry> engines_;
  std::vector<std::unique_ptr<ServedWorkflow>> workflows_;
  std::shared_ptr<tools::McpServer> server_;
};

}  // namespace weir::cli
