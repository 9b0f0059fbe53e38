#include "mcp_tools.hpp"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include <boost/json.hpp>

#include "commands.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/log.hpp"
#include "weir/tools/builtin.hpp"

namespace weir::cli {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

// One workflow served as a tool: its spec (which the graph borrows), graph and runtime.
struct ServedWorkflow {
  graph::WorkflowSpec spec;
  graph::WorkflowGraph built;
  std::unique_ptr<graph::GraphRuntime> runtime;
};

namespace {

// The input schema of a workflow: its input channels (every channel when it names none).
json::object workflow_schema(const graph::WorkflowSpec& spec) {
  json::object props;
  auto add = [&](const std::string& name) {
    json::object p{{"description", "the '" + name + "' channel"}};
    props[name] = std::move(p);
  };
  if (!spec.input.empty())
    for (const auto& n : spec.input) add(n);
  else
    for (const auto& c : spec.channels) add(c.name);
  return json::object{{"type", "object"}, {"properties", std::move(props)}};
}

Error bad(const std::string& prog, std::string msg) {
  return Error(Errc::invalid_argument, "weir " + prog + ": " + std::move(msg));
}

}  // namespace

McpTools::~McpTools() {
  if (server_) server_->drain();
  server_.reset();
  workflows_.clear();
  store_.reset();
  if (!art_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(art_dir_, ec);
  }
}

Result<std::unique_ptr<McpTools>> McpTools::build(const std::string& prog,
                                                  const McpToolsConfig& config) {
  std::unique_ptr<McpTools> t(new McpTools);
  t->budget_ = std::make_unique<MemoryBudget>(BudgetLimits{});
  t->engines_ = std::make_unique<inference::EngineRegistry>();
  remove_stale_artifact_dirs();
  t->art_dir_ = fs::temp_directory_path() / ("weir-" + prog + "-" + std::to_string(::getpid()));
  auto store = ArtifactStore::open(
      {t->art_dir_, std::size_t{64} << 20, std::size_t{4} << 30, 200, t->budget_.get()});
  if (!store) return Error(store.error().code, "weir " + prog + ": " + store.error().message);
  t->store_ = std::move(*store);
  std::stringstream ss(config.tools);
  for (std::string name; std::getline(ss, name, ',');) {
    if (name.empty()) continue;
    tools::BuiltinToolConfig c;
    c.builtin = name;
    c.root = config.root;  // files and doc_search work in --root
    auto tool = tools::make_builtin_tool(c, t->store_.get());
    if (!tool) return bad(prog, "--tools: " + tool.error().message);
    if (auto s = t->registry_.add(std::move(*tool)); !s) return bad(prog, s.error().message);
  }
  if (config.workflows) {
    const fs::path& dir = *config.workflows;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return bad(prog, "--workflows: '" + dir.string() + "' is not a folder");
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      auto load = graph::load_workflow_file(p, agents::workflow_checks());
      if (!load.ok()) {
        weir::log(LogLevel::warn,
                  "weir " + prog + ": skipping " + p.string() + ":\n" + load.report());
        continue;
      }
      auto w = std::make_unique<ServedWorkflow>();
      w->spec = std::move(*load.spec);
      agents::WorkflowServices services;
      services.artifacts = t->store_.get();
      services.budget = t->budget_.get();
      services.engines = t->engines_.get();
      auto built = agents::build_workflow(w->spec, services);
      if (!built) {
        weir::log(LogLevel::warn,
                  "weir " + prog + ": skipping " + p.string() + ": " + built.error().message);
        continue;
      }
      w->built = std::move(*built);
      graph::RuntimeOptions ro = w->built.runtime;
      ro.budget = t->budget_.get();
      ro.artifacts = t->store_.get();
      w->runtime = std::make_unique<graph::GraphRuntime>(ro);
      const std::string name = w->spec.name.empty() ? p.stem().string() : w->spec.name;
      ServedWorkflow* sw = w.get();
      tools::ToolOptions opt;
      if (w->spec.limits.deadline_ms)
        opt.timeout = std::chrono::milliseconds(*w->spec.limits.deadline_ms);
      opt.max_concurrency = 4;
      auto tool = tools::make_async_tool(
          name,
          w->spec.description.empty() ? "runs the workflow " + p.filename().string()
                                      : w->spec.description,
          workflow_schema(w->spec),
          [sw, name](json::object input,
                     const tools::ToolContext& ctx) -> asio::awaitable<Result<std::string>> {
            // Traced: the run's spans go under the tool call's (McpServerOptions::tracer).
            const graph::RunTracing tracing{ctx.trace, name};
            graph::RunOptions ro;
            if (ctx.trace) ro.trace = &tracing;
            auto op = sw->runtime->async_invoke(sw->built.graph, std::move(input), std::move(ro));
            auto r = co_await std::move(op);
            if (!r) co_return std::move(r).error();
            co_return to_json_text(sw->spec.output_of(std::move(r->state)));
          },
          opt);
      if (auto s = t->registry_.add(tool); !s) return bad(prog, s.error().message);
      t->workflows_.push_back(std::move(w));
    }
  }
  tools::McpServerOptions so;
  so.artifacts = t->store_.get();
  so.tracer = config.tracer;
  t->server_ = std::make_shared<tools::McpServer>(t->registry_, so);
  return t;
}

}  // namespace weir::cli
