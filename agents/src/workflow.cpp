#include "weir/agents/workflow.hpp"

#include <map>
#include <mutex>

#include <boost/json.hpp>

#include "chat_trace.hpp"
#include "mcp_config.hpp"
#include "weir/agents/agent.hpp"
#include "weir/agents/openai_model.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/doc_index.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// A model entry with "provider": "openai" (its shape checked by the workflow loader).
Result<OpenAIModelOptions> openai_options(const graph::ModelSpec& m) {
  OpenAIModelOptions o;
  const auto& r = m.remote;
  auto str = [&](const char* k) {
    const auto* v = r.if_contains(k);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  auto num = [&](const char* k, std::int64_t fallback) {
    const auto* v = r.if_contains(k);
    return v && (v->is_int64() || v->is_uint64()) ? v->to_number<std::int64_t>() : fallback;
  };
  auto ms = [&](const char* k, std::chrono::milliseconds fallback) {
    return std::chrono::milliseconds(num(k, fallback.count()));
  };
  if (const auto* bu = r.if_contains("base_url"); bu && bu->is_array()) {
    for (const auto& u : bu->as_array())
      if (u.is_string())
        (o.base_url.empty() ? o.base_url : o.more_base_urls.emplace_back()) =
            std::string(u.as_string());
  } else {
    o.base_url = str("base_url");
  }
  o.model = str("model");
  o.api_key_env = str("api_key_env");
  o.max_concurrency = static_cast<std::size_t>(num("max_concurrency", 32));
  o.max_queued = static_cast<std::size_t>(num("max_queued", 1024));
  o.requests_per_minute = static_cast<double>(num("requests_per_minute", 0));
  o.max_retries = static_cast<std::int32_t>(std::min<std::int64_t>(num("max_retries", 3), 100));
  o.timeout = ms("timeout_ms", o.timeout);
  o.attempt_timeout = ms("attempt_timeout_ms", o.attempt_timeout);
  o.connect_timeout = ms("connect_timeout_ms", o.connect_timeout);
  o.max_response_bytes = static_cast<std::size_t>(num("max_response_bytes", 16 << 20));
  o.context_length = num("context_length", 0);
  o.breaker_failures =
      static_cast<std::int32_t>(std::min<std::int64_t>(num("breaker_failures", 3), 1000));
  o.breaker_cooldown = ms("breaker_cooldown_ms", o.breaker_cooldown);
  o.affinity_slack = static_cast<std::size_t>(num("affinity_slack", 4));
  if (const auto* st = r.if_contains("stream"); st && st->is_bool()) o.stream = st->as_bool();
  return o;
}

// What the hooks share; kept alive by the hooks themselves.
struct Wiring {
  WorkflowServices services;
  std::shared_ptr<tools::ToolRegistry> tools = std::make_shared<tools::ToolRegistry>();
  std::map<std::string, std::string> tool_names;  // workflow tool name -> registry name
  std::map<std::string, const graph::ModelSpec*> model_specs;  // the spec outlives the graph
  std::map<std::string, AgentSpec> agent_specs;
  std::map<std::string, std::string> agent_models;
  std::unique_ptr<graph::GraphRuntime> child;
  // The engines' registry when the caller gave none (WorkflowServices::engines).
  std::unique_ptr<inference::EngineRegistry> own_engines;

  std::mutex mu;
  std::map<std::string, std::shared_ptr<ChatModel>> models;    // GUARDED_BY(mu), opened on use
  std::map<std::string, std::shared_ptr<const Agent>> agents;  // GUARDED_BY(mu), built on use

  // The workflow's model `name` (one engine per file, through the engine registry).
  // REQUIRES: mu held.
  Result<std::shared_ptr<ChatModel>> model_locked(const std::string& name) {
    if (auto it = models.find(name); it != models.end()) return it->second;
    auto spec = model_specs.find(name);
    if (spec == model_specs.end() && !services.model_override)
      return Error(Errc::not_found, "model '" + name + "' is not defined");
    // --model openai:URL/MODEL (every model), or an entry with "provider": "openai".
    const bool remote_override =
        services.model_override && services.model_override->native().starts_with("openai:");
    if (remote_override || (!services.model_override && spec->second->provider == "openai")) {
      auto o = remote_override ? parse_openai_model_ref(services.model_override->native())
                               : openai_options(*spec->second);
      if (!o) return Error(o.error().code, "model '" + name + "': " + o.error().message);
      if (services.model_options.max_model_len > 0)  // --max-model-len wins, as for local models
        o->context_length = services.model_options.max_model_len;
      auto m = OpenAIChatModel::open(std::move(*o));
      if (!m) return Error(m.error().code, "model '" + name + "': " + m.error().message);
      models[name] = *m;
      return std::shared_ptr<ChatModel>(*m);
    }
    LocalModelOptions o = services.model_options;
    if (spec != model_specs.end()) {
      if (!spec->second->chat_template.empty()) o.chat_template = spec->second->chat_template;
      // The model's "engine" settings (validated by the loader: positive integers, and
      // kv_cache_type "f32" or "f16").
      for (const auto& [k, v] : spec->second->engine) {
        if (k == "kv_cache_type" && v.is_string()) o.kv_cache_type = std::string(v.as_string());
        if (!v.is_int64() && !v.is_uint64()) continue;
        const auto n = v.to_number<std::int64_t>();
        if (k == "max_model_len" && o.max_model_len == 0)
          o.max_model_len = n;  // --max-model-len wins
        if (k == "max_num_seqs") o.max_num_seqs = static_cast<std::int32_t>(n);
        if (k == "max_num_batched_tokens") o.max_num_batched_tokens = n;
        if (k == "block_size") o.block_size = static_cast<std::int32_t>(n);
        if (k == "threads") o.threads = static_cast<std::int32_t>(n);
      }
    }
    auto m = LocalChatModel::open(*services.engines,
                                  services.model_override.value_or(
                                      spec != model_specs.end() ? spec->second->path : fs::path()),
                                  o);
    if (!m) return std::move(m).error();
    models[name] = *m;
    return std::shared_ptr<ChatModel>(*m);
  }

  Result<std::shared_ptr<const Agent>> agent(const std::string& name) {
    std::lock_guard lock(mu);
    if (auto it = agents.find(name); it != agents.end()) return it->second;
    auto spec = agent_specs.find(name);
    if (spec == agent_specs.end()) return Error(Errc::not_found, "no agent named '" + name + "'");
    auto model = model_locked(agent_models.at(name));
    if (!model) return std::move(model).error();
    auto a = Agent::create(spec->second, *model, tools);
    if (!a) return std::move(a).error();
    agents[name] = *a;
    return *a;
  }

  // An llm node: one chat turn (system + prompt) on the node's model.
  asio::awaitable<Result<std::string>> call_model(std::string name, std::string system,
                                                  std::string prompt, std::int32_t max_tokens,
                                                  std::optional<json::object> output_schema,
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
    tctx.trace = ctx.trace();
    auto op = tools->async_call(tool_names.at(tool), std::move(args), tctx);
    auto r = co_await std::move(op);
    if (!r)
      co_return Error(r.error().code,
                      "node '" + std::string(ctx.node()) + "': " + r.error().message);
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
};

std::optional<std::int64_t> int_of(const json::object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  if (v && (v->is_int64() || v->is_uint64())) return v->to_number<std::int64_t>();
  return std::nullopt;
}

std::string str_of(const json::object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

}  // namespace

Result<graph::WorkflowGraph> build_workflow(const graph::WorkflowSpec& spec,
                                            WorkflowServices services) {
  auto w = std::make_shared<Wiring>();
  w->services = services;
  if (!w->services.engines) {
    w->own_engines = std::make_unique<inference::EngineRegistry>();
    w->services.engines = w->own_engines.get();
  }
  std::vector<std::string> problems;
  for (const auto& t : spec.tools) {
    std::shared_ptr<tools::Tool> tool;
    auto root = [&]() -> std::optional<fs::path> {
      std::error_code ec;
      if (t.root.empty() || !fs::is_directory(t.root, ec)) {
        problems.push_back("tool '" + t.name + "': " +
                           (t.root.empty() ? std::string("needs a \"root\" folder")
                                           : "folder '" + t.root.string() + "' does not exist"));
        return std::nullopt;
      }
      return t.root;
    };
    if (t.builtin == "lorem" || t.builtin == "sleep") continue;  // run by weir::graph itself
    if (t.builtin == "calculator") {
      tool = tools::make_calculator();
    } else if (t.builtin == "files") {
      if (auto r = root()) tool = tools::make_files_tool(*r);
    } else if (t.builtin == "artifacts") {
      if (!services.artifacts)
        problems.push_back("tool '" + t.name + "': the artifacts tool needs an artifact store");
      else
        tool = tools::make_artifacts_tool(*services.artifacts);
    } else if (t.builtin == "doc_search") {
      if (auto r = root()) {
        auto index = tools::DocumentIndex::build(*r);
        if (!index)
          problems.push_back("tool '" + t.name + "': " + index.error().message);
        else
          tool = tools::make_doc_search_tool(std::move(*index));
      }
    } else {
      problems.push_back("tool '" + t.name + "': unknown built-in '" + t.builtin +
                         "' (calculator, files, artifacts, doc_search, lorem, sleep)");
    }
    if (!tool) continue;
    w->tool_names[t.name] = tool->name();
    if (!w->tools->find(tool->name())) (void)w->tools->add(std::move(tool));
  }
  // MCP servers, started here: the tools that nodes and agents name ("fs/read_file"; all of a
  // server's for "fs/*", or when nothing names one) join the registry as "server/tool".
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
  for (const auto& [name, v] : spec.mcp_servers) {
    if (!v.is_object()) continue;
    const std::string server(name);
    auto cfg = detail::mcp_server_config(server, v.as_object(), spec.file.parent_path(), problems);
    auto client = tools::McpClient::connect(std::move(cfg));
    if (!client) {
      problems.push_back(client.error().message);
      continue;
    }
    const auto only = detail::wanted_tools(server, wanted);
    if (auto s = tools::add_mcp_tools(*w->tools, *client, only); !s) {
      problems.push_back(s.error().message);
      continue;
    }
    for (const auto& info : (*client)->tools())
      if (const std::string full = server + "/" + info.name; w->tools->find(full))
        w->tool_names[full] = full;
  }
  for (const auto& m : spec.models) w->model_specs[m.name] = &m;
  for (const auto& [name, v] : spec.agents) {
    const std::string who = "agent '" + std::string(name) + "'";
    if (!v.is_object()) {
      problems.push_back(who + ": expected an object");
      continue;
    }
    const auto& o = v.as_object();
    AgentSpec a;
    a.name = name;
    a.role = str_of(o, "role");
    a.goal = str_of(o, "goal");
    a.backstory = str_of(o, "backstory");
    if (auto n = int_of(o, "max_iter")) a.max_iter = static_cast<std::int32_t>(*n);
    if (auto n = int_of(o, "max_tokens_per_turn"))
      a.max_tokens_per_turn = static_cast<std::int32_t>(*n);
    if (const auto* h = o.if_contains("history"); h && h->is_object()) {
      if (auto n = int_of(h->as_object(), "max_messages")) a.history.max_messages = *n;
      if (auto n = int_of(h->as_object(), "max_tokens")) a.history.max_tokens = *n;
    }
    if (const auto* ts = o.if_contains("tools"); ts && ts->is_array()) {
      for (const auto& t : ts->as_array()) {
        const std::string tn = t.is_string() ? std::string(t.as_string()) : std::string();
        if (tn.size() > 2 && tn.ends_with("/*") &&
            spec.mcp_servers.contains(tn.substr(0, tn.size() - 2))) {
          for (const auto& [k, full] : w->tool_names)  // every tool of that server
            if (k.starts_with(tn.substr(0, tn.size() - 1))) a.tools.push_back(full);
          continue;
        }
        auto it = w->tool_names.find(tn);
        if (it == w->tool_names.end())
          problems.push_back(who + ": unknown tool '" + tn + "'");
        else
          a.tools.push_back(it->second);
      }
    }
    std::string model = str_of(o, "model");
    if (model.empty() && spec.models.size() == 1) model = spec.models.front().name;
    if (!w->model_specs.count(model) && !services.model_override)
      problems.push_back(
          who + (model.empty() ? ": needs a \"model\"" : ": unknown model '" + model + "'"));
    if (a.max_iter < 1) problems.push_back(who + ": max_iter must be at least 1");
    w->agent_models[a.name] = model;
    w->agent_specs[a.name] = std::move(a);
  }
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

  graph::WorkflowHooks hooks;
  hooks.model_call = [w](std::string model, std::string system, std::string prompt,
                         std::int32_t max_tokens, std::optional<json::object> output_schema,
                         graph::NodeContext& ctx) {
    return w->call_model(std::move(model), std::move(system), std::move(prompt), max_tokens,
                         std::move(output_schema), ctx.trace());
  };
  hooks.tool_call = [w](std::string tool, json::object args, graph::NodeContext& ctx) {
    return w->call_tool(std::move(tool), std::move(args), ctx);
  };
  hooks.agent_call = [w](std::string agent, json::value input, graph::NodeContext& ctx) {
    return w->call_agent(std::move(agent), std::move(input), ctx);
  };
  return graph::build_workflow_graph(spec, std::move(hooks));
}

}  // namespace weir::agents
