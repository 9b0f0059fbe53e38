#include "workflow_checks.hpp"

#include <algorithm>

#include <boost/json.hpp>

#include "weir/agents/config.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/mcp.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace detail {

std::optional<tools::BuiltinToolConfig> parse_tool(JsonFields& f, const json::value& v,
                                                   const std::string& ptr,
                                                   const fs::path& base_dir) {
  const auto* o = v.if_object();
  if (!o) {
    f.error(ptr, std::string("expected a tool object like {\"builtin\": \"calculator\"}, got ") +
                     json_kind_phrase(v));
    return std::nullopt;
  }
  const auto builtin = f.string_at(*o, "builtin", ptr, true);
  if (!builtin) return std::nullopt;
  static constexpr std::string_view kExtra[] = {"builtin"};
  return tools::parse_builtin_tool(f, *builtin, json_pointer_append(ptr, "builtin"), *o, ptr,
                                   base_dir, kExtra);
}

std::optional<WorkflowAgent> parse_workflow_agent(JsonFields& f, std::string_view name,
                                                  const json::value& v, const std::string& ptr,
                                                  const graph::SectionContext& ctx) {
  static constexpr std::string_view kExtra[] = {"model"};
  auto spec = parse_agent(f, v, ptr, kExtra);
  if (!spec) return std::nullopt;
  WorkflowAgent a{std::move(*spec), ""};
  a.spec.name = std::string(name);
  const auto& o = v.as_object();
  if (auto m = f.string_at(o, "model", ptr)) {
    if (std::find(ctx.models.begin(), ctx.models.end(), *m) == ctx.models.end())
      f.error(json_pointer_append(ptr, "model"), unknown_name_message("model", *m, ctx.models));
    a.model = *m;
  }
  const auto has = [](std::span<const std::string> names, std::string_view n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  for (std::size_t i = 0; i < a.spec.tools.size(); ++i) {
    const std::string& t = a.spec.tools[i];
    const auto slash = t.find('/');
    if (slash != std::string::npos && slash + 1 < t.size() &&
        has(ctx.mcp_servers, std::string_view(t).substr(0, slash)))
      continue;  // an MCP server's tool, or "server/*": the server says what it has
    if (!has(ctx.tools, t))
      f.error(json_pointer_append(json_pointer_append(ptr, "tools"), i),
              unknown_name_message("tool", t, ctx.tools) +
                  (ctx.mcp_servers.empty() ? "" : " (an MCP server's tool is \"server/tool\")"));
  }
  return a;
}

bool ChannelNames::has(std::string_view name) const {
  return std::find(channels_.begin(), channels_.end(), name) != channels_.end();
}
std::optional<Result<double>> ChannelNames::value(std::string_view name) const {
  if (!has(name)) return std::nullopt;
  return Result<double>(0.0);
}
std::optional<Result<double>> ChannelNames::length(std::string_view name) const {
  return value(name);
}
std::string ChannelNames::unknown(std::string_view name) const {
  return unknown_name_message("channel", name, channels_);
}

}  // namespace detail

const graph::WorkflowChecks& workflow_checks() {
  static const graph::WorkflowChecks checks = [] {
    graph::WorkflowChecks c;
    c.model = [](std::string_view name, const json::value& v, const std::string& ptr,
                 const graph::SectionContext& ctx,
                 JsonFields& f) { (void)parse_model(f, name, v, ptr, ctx.base_dir); };
    c.tool = [](std::string_view, const json::value& v, const std::string& ptr,
                const graph::SectionContext& ctx,
                JsonFields& f) { (void)detail::parse_tool(f, v, ptr, ctx.base_dir); };
    c.mcp_server = [](std::string_view name, const json::value& v, const std::string& ptr,
                      const graph::SectionContext& ctx, JsonFields& f) {
      (void)tools::parse_mcp_server(f, name, v, ptr, ctx.base_dir);
    };
    c.agent = [](std::string_view name, const json::value& v, const std::string& ptr,
                 const graph::SectionContext& ctx,
                 JsonFields& f) { (void)detail::parse_workflow_agent(f, name, v, ptr, ctx); };
    c.crew = [](std::string_view name, const json::value& v, const std::string& ptr,
                const graph::SectionContext& ctx,
                JsonFields& f) { check_workflow_crew(f, name, v, ptr, ctx.base_dir); };
    c.expression = [](std::string_view expr, const graph::SectionContext& ctx) {
      detail::ChannelNames scope(ctx.channels);
      return tools::check_expression(expr, scope);
    };
    return c;
  }();
  return checks;
}

}  // namespace weir::agents
