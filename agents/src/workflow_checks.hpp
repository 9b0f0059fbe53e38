// A workflow file's sections as the agents layer reads them, shared by workflow_checks() (when
// the file is loaded) and build_workflow (when it is built). Private to weir::agents; compiled
// on its own by fuzz/fuzz_workflow.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <boost/json/value.hpp>

#include "weir/agents/agent.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/calculator.hpp"

namespace weir::agents::detail {

// A "tools" entry: {"builtin": "doc_search", "root": "../data", "timeout_ms": ...}.
std::optional<tools::BuiltinToolConfig> parse_tool(JsonFields& fields, const boost::json::value& v,
                                                   const std::string& ptr,
                                                   const std::filesystem::path& base_dir);

struct WorkflowAgent {
  AgentSpec spec;
  std::string model;  // empty: the file's only model, or --model
};

// An "agents" entry: the agent's settings (parse_agent), the model it names and its tools,
// which the file must declare ("server/tool" or "server/*" for an MCP server's).
std::optional<WorkflowAgent> parse_workflow_agent(JsonFields& fields, std::string_view name,
                                                  const boost::json::value& v,
                                                  const std::string& ptr,
                                                  const graph::SectionContext& ctx);

// A workflow's channels as the names of an expression ({"$expr": "total / len(items)"}). This
// one only says which names exist (checking a file); ChannelValues (workflow.cpp) reads them.
class ChannelNames : public tools::ExpressionScope {
 public:
  explicit ChannelNames(std::span<const std::string> channels) : channels_(channels) {}
  std::optional<Result<double>> value(std::string_view name) const override;
  std::optional<Result<double>> length(std::string_view name) const override;
  std::string unknown(std::string_view name) const override;

 protected:
  bool has(std::string_view name) const;

 private:
  std::span<const std::string> channels_;
};

}  // namespace weir::agents::detail
