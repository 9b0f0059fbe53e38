#include "weir/agents/workflow.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include <boost/json.hpp>

#include "chat_trace.hpp"
#include "mcp_config.hpp"
#include "weir/agents/agent.hpp"
#include "weir/agents/config.hpp"
#include "weir/agents/crew.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/openai_model.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/calculator.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"
#include "workflow_checks.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// A workflow's channels with their values in a run, for evaluating an expression.
class ChannelValues final : public detail::ChannelNames {
 public:
  ChannelValues(std::span<const std::string> channels, const graph::StateView& state)
      : ChannelNames(channels), state_(state) {}

  std::optional<Result<double>> value(std::string_view name) const override {
    if (!has(name)) return std::nullopt;
    const json::value& v = state_.get(name);
    if (v.is_null()) return Result<double>(0.0);  // nothing written yet
    if (!v.is_number())
      return Result<double>(
          Error(Errc::invalid_argument, "channel '" + std::string(name) + "' is not a number"));
    return Result<double>(v.to_number<double>());
  }
  std::optional<Result<double>> length(std::string_view name) const override {
    if (!has(name)) return std::nullopt;
    const json::value& x = state_.get(name);
    if (x.is_array()) return Result<double>(static_cast<double>(x.as_array().size()));
    if (x.is_object()) return Result<double>(static_cast<double>(x.as_object().size()));
    if (x.is_string()) return Result<double>(static_cast<double>(x.as_string().size()));
    if (x.is_null()) return Result<double>(0.0);
    return Result<double>(
        Error(Errc::invalid_argument,
              "len(" + std::string(name) + "): the channel holds no list, object or string"));
  }

 private:
  const graph::StateView& state_;
};

// What the hooks share; kept alive by the hooks themselves.
struct Wiring {
  WorkflowServices services;
  std::shared_ptr<tools::ToolRegistry> tools = std::make_shared<tools::ToolRegistry>();
  std::map<std::string, ModelConfig> model_configs;
  std::map<std::string, detail::WorkflowAgent> agent_specs;
  // The "crews" section: each crew's file form and its tools (started at wiring, as the file's).
  struct CrewEntry {
    AgentsFile file;
    std::shared_ptr<tools::ToolRegistry> tools;
  };
  std::map<std::string, CrewEntry, std::less<>> crew_specs;
  std::unique_ptr<graph::GraphRuntime> child;
  // The engines' registry when the caller gave none (WorkflowServices::engines): shared with
  // the wirings of the file's subgraphs, which use it too and may outlive this one.
  std::shared_ptr<inference::EngineRegistry> own_engines;

  std::mutex mu;
  std::map<std::string, std::shared_ptr<ChatModel>> models;    // GUARDED_BY(mu), opened on use
  std::map<std::string, std::shared_ptr<const Agent>> agents;  // GUARDED_BY(mu), built on use
  // Keyed by "crew\nmodel". GUARDED_BY(mu), built on use.
  std::map<std::string, std::shared_ptr<const Crew>> crews;

  // The workflow's model `name` (one engine per file, through the engine registry).
  // REQUIRES: mu held.
  Result<std::shared_ptr<ChatModel>> model_locked(const std::string& name) {
    if (auto it = models.find(name); it != models.end()) return it->second;
    auto cfg = model_configs.find(name);
    const ModelConfig* c = cfg == model_configs.end() ? nullptr : &cfg->second;
    if (!c && !services.model_override)
      return Error(Errc::not_found, "model '" + name + "' is not defined");
    // --model openai:URL/MODEL (every model), or an entry with "provider": "openai".
    const bool remote_override =
        services.model_override && services.model_override->native().starts_with("openai:");
    if (remote_override || (!services.model_override && c->remote)) {
      auto o = remote_override ? parse_openai_model_ref(services.model_override->native())
                               : Result<OpenAIModelOptions>(c->openai);
      if (!o) return Error(o.error().code, "model '" + name + "': " + o.error().message);
      if (services.model_options.max_model_len > 0)  // --max-model-len wins, as for local models
        o->context_length = services.model_options.max_model_len;
      auto m = OpenAIChatModel::open(std::move(*o));
      if (!m) return Error(m.error().code, "model '" + name + "': " + m.error().message);
      models[name] = *m;
      return std::shared_ptr<ChatModel>(*m);
    }
    LocalModelOptions o = services.model_options;
    if (c) {
      if (c->chat_template) o.chat_template = *c->chat_template;
      c->engine.apply(o);  // --max-model-len wins over the file's
    }
    auto m = LocalChatModel::open(*services.engines,
                                  services.model_override.value_or(c ? c->path : fs::path()), o);
    if (!m) return std::move(m).error();
    models[name] = *m;
    return std::shared_ptr<ChatModel>(*m);
  }

  Result<std::shared_ptr<const Agent>> agent(const std::string& name) {
    std::lock_guard lock(mu);
    if (auto it = agents.find(name); it != agents.end()) return it->second;
    auto spec = agent_specs.find(name);
    if (spec == agent_specs.end()) return Error(Errc::not_found, "no agent named '" + name + "'");
    auto model = model_locked(spec->second.model);
    if (!model) return std::move(model).error();
    auto a = Agent::create(spec->second.spec, *model, tools);
    if (!a) return std::move(a).error();
    agents[name] = *a;
    return *a;
  }

  // An llm node: one chat turn (system + prompt) on the node's model.
  asio::awaitable<Result<std::string>> call_model(std::string name, std::string system,
                                                  std::string prompt, std::int32_t max_tokens,
                                                  std::optional<json::object> output_schema,
                                                  std::function<void(std::string_view)> on_text,
                                                  trace::Context trace) {
    Result<std::shared_ptr<ChatModel>> m = Error(Errc::cancelled, "");
    {
      std::lock_guard lock(mu);
      m = model_locked(name);
    }
    if (!m) co_return std::move(m).error();
    std::vector<Message> msgs;
    if (!system.empty()) msgs.push_back(Message::system(std::move(system)));
    msgs.push_back(Message::user(std::move(prompt)));
    ChatParams params;
    params.max_tokens = max_tokens;
    params.response_schema = std::move(output_schema);
    params.on_text = std::move(on_text);
    auto op =
        async_traced_chat(**m, std::move(msgs), std::vector<ToolSpec>{}, params, std::move(trace));
    auto r = co_await std::move(op);
    if (!r) co_return std::move(r).error();
    co_return std::move(r->message.content);
  }

  asio::awaitable<Result<json::value>> call_tool(std::string tool, json::object args,
                                                 graph::NodeContext& ctx) {
    tools::ToolContext tctx;
    tctx.artifacts = ctx.artifacts() ? ctx.artifacts() : services.artifacts;
    tctx.owner = std::string(ctx.run_id());
    tctx.cancel = ctx.cancel_flag();
    tctx.whole_output = true;  // the channel's payload fence bounds it, not the model's cap
    tctx.trace = ctx.trace();
    auto op = tools->async_call(tool, std::move(args), tctx);
    auto r = co_await std::move(op);
    if (!r)
      co_return Error(r.error().code,
                      "node '" + std::string(ctx.node()) + "': " + r.error().message);
    if (r->value) co_return std::move(*r->value);  // a number from the calculator or sleep
    co_return json::value(json::string(r->content));
  }

  asio::awaitable<Result<json::value>> call_agent(std::string name, json::value input,
                                                  graph::NodeContext& ctx) {
    auto a = agent(name);
    if (!a) co_return std::move(a).error();
    std::string task = input.is_string() ? std::string(input.as_string()) : json::serialize(input);
    graph::RunOptions opt;
    opt.run_id = std::string(ctx.run_id()) + "/" + std::string(ctx.node());
    const graph::RunTracing tracing{ctx.trace(), {}};
    if (tracing.context) opt.trace = &tracing;
    std::vector<Message> none;
    auto op = (*a)->async_run(*child, std::move(task), std::move(none), opt);
    auto r = co_await std::move(op);
    if (services.artifacts) services.artifacts->release_owner(opt.run_id);
    if (!r) co_return std::move(r).error();
    if (auto s = ctx.charge_tokens(r->prompt_tokens + r->completion_tokens); !s)
      co_return std::move(s).error();
    co_return json::value(json::string(r->output));
  }

  // The model a crew node names, or the file's only one ("" when the file has none: --model).
  std::string crew_model(const std::string& model) const {
    if (!model.empty()) return model;
    return model_configs.size() == 1 ? model_configs.begin()->first : std::string();
  }

  Result<std::shared_ptr<const Crew>> crew(const std::string& name, const std::string& model) {
    std::lock_guard lock(mu);
    const std::string key = name + "\n" + model;
    if (auto it = crews.find(key); it != crews.end()) return it->second;
    auto e = crew_specs.find(name);
    if (e == crew_specs.end()) return Error(Errc::not_found, "no crew named '" + name + "'");
    auto m = model_locked(model);
    if (!m) return std::move(m).error();
    graph::RuntimeOptions child_options;
    child_options.artifacts = services.artifacts;
    child_options.budget = services.budget;
    auto c = Crew::create(e->second.file.crew, *m, e->second.tools, child_options);
    if (!c) return Error(c.error().code, "crew '" + name + "': " + c.error().message);
    crews[key] = *c;
    return *c;
  }

  // A crew node: the crew's kickoff as a child run of the node (its cancel, its trace), on the
  // file's inputs with the node's laid over them. Each task's whole output (read back from the
  // artifact store) becomes its agent's message.
  asio::awaitable<Result<graph::CrewReply>> call_crew(
      std::string name, std::string model, json::object inputs,
      std::function<void(const std::string&, std::string_view)> on_task_text,
      graph::NodeContext& ctx) {
    model = crew_model(model);
    auto c = crew(name, model);
    if (!c) co_return std::move(c).error();
    json::object in = crew_specs.find(name)->second.file.inputs;
    for (auto& [k, v] : inputs) in[k] = std::move(v);
    graph::RunOptions opt;
    opt.run_id = std::string(ctx.run_id()) + "/" + std::string(ctx.node());
    opt.cancel = ctx.cancel_flag();
    const graph::RunTracing tracing{ctx.trace(), name};
    if (tracing.context) opt.trace = &tracing;
    // The crew's "<task>/done" nodes send each task's whole output as message text (Crew).
    const std::function<void(const graph::MessageText&)> task_text =
        [&on_task_text](const graph::MessageText& t) {
          if (t.offset != 0 || !t.node.ends_with("/done")) return;
          on_task_text(t.node.substr(0, t.node.size() - 5), t.text);
        };
    if (on_task_text) opt.on_message_text = &task_text;
    auto op = (*c)->async_kickoff(*child, std::move(in), opt);
    auto r = co_await std::move(op);
    graph::CrewReply reply;
    if (r) {
      for (const auto& t : r->tasks) {
        std::string text = t.summary;
        if (services.artifacts && !t.artifact_id.empty())
          if (auto full = services.artifacts->get(t.artifact_id)) text = std::move(*full);
        reply.messages.push_back({t.task, t.agent, std::move(text)});
      }
      reply.output = reply.messages.empty() ? r->final_output : reply.messages.back().text;
    }
    if (services.artifacts) services.artifacts->release_owner(opt.run_id);
    if (!r) co_return std::move(r).error();  // it names the crew
    if (auto s = ctx.charge_tokens(r->prompt_tokens + r->completion_tokens); !s)
      co_return std::move(s).error();
    co_return reply;
  }

  // The "crews" section: each entry is a crew file's document (its "weir" and "kind" may be
  // left out; its "name" is the entry's), read by the crew file's reader with paths relative to
  // this file; its tools and MCP servers are started here.
  void add_crews(const graph::WorkflowSpec& spec, std::vector<std::string>& problems) {
    for (const auto& [name, v] : spec.crews) {
      auto file = parse_workflow_crew(name, v, spec.file);
      if (!file) {
        problems.push_back(file.error().message);
        continue;
      }
      auto reg = build_tools(*file, services.artifacts);
      if (!reg) {
        problems.push_back("crew '" + std::string(name) + "': " + reg.error().message);
        continue;
      }
      expand_tool_patterns(*file, **reg);
      crew_specs[std::string(name)] = CrewEntry{std::move(*file), std::move(*reg)};
    }
    for (const auto& n : spec.nodes)
      if (n.kind == graph::NodeKind::crew && !n.params.contains("model") &&
          model_configs.size() != 1 && !services.model_override)
        problems.push_back("node '" + n.name + "': a crew node needs a \"model\" (the file has " +
                           std::to_string(model_configs.size()) + " models)");
  }

  // The "tools" and "mcp_servers" sections into the registry: a tool is registered under its
  // workflow name; an MCP server's as "server/tool" (those that nodes and agents name; all of
  // a server's for "server/*" or when nothing names one).
  void add_tools(const graph::WorkflowSpec& spec, const std::vector<std::string>& wanted,
                 JsonFields& f, std::vector<std::string>& problems) {
    const fs::path base = spec.file.parent_path();
    for (const auto& [name, v] : spec.tools) {
      const std::string ptr = json_pointer_append("/tools", name);
      auto cfg = detail::parse_tool(f, v, ptr, base);
      if (!cfg) continue;
      auto tool = tools::make_builtin_tool(*cfg, services.artifacts, std::string(name));
      if (!tool) {
        problems.push_back(tool.error().message);
        continue;
      }
      if (auto s = tools->add(std::move(*tool)); !s) problems.push_back(s.error().message);
    }
    for (const auto& [name, v] : spec.mcp_servers) {
      const std::string server(name);
      auto cfg =
          tools::parse_mcp_server(f, server, v, json_pointer_append("/mcp_servers", server), base);
      if (!cfg) continue;
      auto client = tools::McpClient::connect(std::move(*cfg));
      if (!client) {
        problems.push_back(client.error().message);
        continue;
      }
      const auto only = detail::wanted_tools(server, wanted);
      if (auto s = tools::add_mcp_tools(*tools, *client, only); !s)
        problems.push_back(s.error().message);
    }
  }

  // The "agents" section; each agent's "server/*" becomes that server's registered tools.
  void add_agents(const graph::WorkflowSpec& spec, const graph::SectionContext& ctx, JsonFields& f,
                  std::vector<std::string>& problems) {
    const auto registered = tools->names();
    for (const auto& [name, v] : spec.agents) {
      auto a = detail::parse_workflow_agent(f, name, v, json_pointer_append("/agents", name), ctx);
      if (!a) continue;
      std::vector<std::string> expanded;
      for (const auto& t : a->spec.tools) {
        if (t.size() > 2 && t.ends_with("/*")) {
          const std::string prefix = t.substr(0, t.size() - 1);
          for (const auto& r : registered)
            if (r.starts_with(prefix)) expanded.push_back(r);
        } else {
          expanded.push_back(t);
        }
      }
      a->spec.tools = std::move(expanded);
      if (a->model.empty() && spec.models.size() == 1) a->model = spec.models.begin()->key();
      if (a->model.empty() && !services.model_override)
        problems.push_back("agent '" + std::string(name) + "': needs a \"model\"");
      agent_specs[std::string(name)] = std::move(*a);
    }
  }
};

// The names a section's reader checks references against (SectionContext), from a spec.
struct SpecNames {
  std::vector<std::string> models, tools, mcp_servers, channels;
  explicit SpecNames(const graph::WorkflowSpec& spec) {
    for (const auto& [k, v] : spec.models) models.emplace_back(k);
    for (const auto& [k, v] : spec.tools) tools.emplace_back(k);
    for (const auto& [k, v] : spec.mcp_servers) mcp_servers.emplace_back(k);
    for (const auto& c : spec.channels) channels.push_back(c.name);
  }
  graph::SectionContext context(const graph::WorkflowSpec& spec) const {
    return {spec.file.parent_path(), models, tools, mcp_servers, channels};
  }
};

// The MCP tools a file's tool nodes and agents name ("server/tool", "server/*").
std::vector<std::string> wanted_tool_names(const graph::WorkflowSpec& spec) {
  std::vector<std::string> wanted;
  for (const auto& n : spec.nodes)
    if (const auto* t = n.params.if_contains("tool");
        n.kind == graph::NodeKind::tool && t && t->is_string())
      wanted.emplace_back(t->as_string());
  for (const auto& [name, v] : spec.agents)
    if (const auto* ts = v.is_object() ? v.as_object().if_contains("tools") : nullptr;
        ts && ts->is_array())
      for (const auto& t : ts->as_array())
        if (t.is_string()) wanted.emplace_back(t.as_string());
  return wanted;
}

Result<std::shared_ptr<Wiring>> wire(const graph::WorkflowSpec& spec, WorkflowServices services);

graph::WorkflowHooks hooks_of(const std::shared_ptr<Wiring>& w, const graph::WorkflowSpec& spec) {
  graph::WorkflowHooks hooks;
  // A subgraph file has its own sections: wired the same way, with the same services.
  hooks.subgraph = [services = w->services, engines = w->own_engines](
                       const graph::WorkflowSpec& child) -> Result<graph::WorkflowHooks> {
    auto cw = wire(child, services);
    if (!cw) return std::move(cw).error();
    (*cw)->own_engines = engines;  // services.engines may be this registry: it lives as long
    return hooks_of(*cw, child);
  };
  hooks.model_call = [w](std::string model, std::string system, std::string prompt,
                         std::int32_t max_tokens, std::optional<json::object> output_schema,
                         std::function<void(std::string_view)> on_text, graph::NodeContext& ctx) {
    return w->call_model(std::move(model), std::move(system), std::move(prompt), max_tokens,
                         std::move(output_schema), std::move(on_text), ctx.trace());
  };
  hooks.tool_call = [w](std::string tool, json::object args, graph::NodeContext& ctx) {
    return w->call_tool(std::move(tool), std::move(args), ctx);
  };
  hooks.agent_call = [w](std::string agent, json::value input, graph::NodeContext& ctx) {
    return w->call_agent(std::move(agent), std::move(input), ctx);
  };
  hooks.crew_call = [w](std::string crew, std::string model, json::object inputs,
                        std::function<void(const std::string&, std::string_view)> on_task_text,
                        graph::NodeContext& ctx) {
    return w->call_crew(std::move(crew), std::move(model), std::move(inputs),
                        std::move(on_task_text), ctx);
  };
  std::vector<std::string> channels;
  for (const auto& c : spec.channels) channels.push_back(c.name);
  hooks.evaluate = [channels = std::move(channels)](std::string_view expr,
                                                    const graph::StateView& state) {
    ChannelValues scope(channels, state);
    auto r = tools::evaluate_expression(expr, {}, &scope);
    if (!r)
      return Result<double>(Error(r.error().code, "expression \"" + utf8_abbreviate(expr, 60) +
                                                      "\": " + r.error().message));
    return r;
  };
  return hooks;
}

// The file's sections into a Wiring: its tools (and MCP servers' tools), models and agents.
Result<std::shared_ptr<Wiring>> wire(const graph::WorkflowSpec& spec, WorkflowServices services) {
  auto w = std::make_shared<Wiring>();
  w->services = services;
  if (!w->services.engines) {
    w->own_engines = std::make_shared<inference::EngineRegistry>();
    w->services.engines = w->own_engines.get();
  }
  // The sections are read by the readers workflow_checks() gives the loader: a file loaded
  // with them has no problem left here; one loaded without gets them now, with pointers.
  JsonFields f(spec.file.string());
  std::vector<std::string> problems;  // what only building finds: folders, servers, models
  const SpecNames names(spec);
  const graph::SectionContext ctx = names.context(spec);
  w->add_tools(spec, wanted_tool_names(spec), f, problems);
  for (const auto& [name, v] : spec.models)
    if (auto m = parse_model(f, name, v, json_pointer_append("/models", name), ctx.base_dir))
      w->model_configs[std::string(name)] = std::move(*m);
  w->add_agents(spec, ctx, f, problems);
  w->add_crews(spec, problems);
  if (!f.ok()) return Error(Errc::invalid_workflow, f.report());
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + spec.file.string() + ": " + p;
    return Error(Errc::invalid_workflow, msg);
  }
  graph::RuntimeOptions child;
  child.artifacts = services.artifacts;
  child.budget = services.budget;
  child.max_queued_runs = 100000;
  w->child = std::make_unique<graph::GraphRuntime>(child);
  return w;
}

}  // namespace

Result<graph::WorkflowGraph> build_workflow(const graph::WorkflowSpec& spec,
                                            WorkflowServices services) {
  auto w = wire(spec, std::move(services));
  if (!w) return std::move(w).error();
  return graph::build_workflow_graph(spec, hooks_of(*w, spec));
}

}  // namespace weir::agents
