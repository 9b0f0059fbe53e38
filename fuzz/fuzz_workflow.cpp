// The workflow loader, with the agents layer's checks of the sections it owns (models, tools,
// MCP servers, agents, crews, expressions), and the crew-file reader must turn any bytes into
// either a spec or diagnostics, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weir/agents/crew_file.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/workflow.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // Subgraph paths resolve against a folder with no workflow files in it.
  auto r = weir::graph::load_workflow_text(text, "/nonexistent/fuzz/flow.json",
                                           weir::agents::workflow_checks(), 2);
  if (!r.ok() && r.diagnostics.empty()) __builtin_trap();
  (void)r.report();
  auto crew = weir::agents::parse_agents_file(text, "/nonexistent/fuzz/crew.json");
  if (!crew && crew.error().message.empty()) __builtin_trap();
  return 0;
}
