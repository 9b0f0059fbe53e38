#include "weir/agents/crew.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/registry.hpp"
#include "weir/tools/schema.hpp"
#include "weir/tools/tool.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;

std::string render_inputs(std::string_view text, const json::object& inputs) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    auto open = text.find("{{", i);
    if (open == std::string_view::npos) break;
    auto close = text.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    std::string key(text.substr(open + 2, close - open - 2));
    while (!key.empty() && key.front() == ' ') key.erase(key.begin());
    while (!key.empty() && key.back() == ' ') key.pop_back();
    out.append(text.substr(i, open - i));
    if (const auto* v = inputs.if_contains(key)) {
      out += v->is_string() ? std::string(v->as_string()) : json::serialize(*v);
    } else {
      out.append(text.substr(open, close + 2 - open));
    }
    i = close + 2;
  }
  out.append(text.substr(i));
  return out;
}

std::string bounded_summary(std::string_view text, std::size_t max_bytes) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.remove_prefix(1);
  if (text.size() <= max_bytes) return std::string(text);
  const std::size_t room = max_bytes > 4 ? max_bytes - 4 : 0;
  std::size_t n = utf8_cut(text, room);
  std::size_t space = text.substr(0, n).find_last_of(" \n");
  if (space != std::string_view::npos && space > 0) n = space;
  return std::string(text.substr(0, n)) + " ...";
}

namespace {

json::value render_args(const json::value& v, const json::object& inputs) {
  if (v.is_string()) return json::string(render_inputs(v.as_string(), inputs));
  if (v.is_object()) {
    json::object o;
    for (const auto& [k, x] : v.as_object()) o[k] = render_args(x, inputs);
    return o;
  }
  if (v.is_array()) {
    json::array a;
    for (const auto& x : v.as_array()) a.push_back(render_args(x, inputs));
    return a;
  }
  return v;
}

std::int64_t num(const json::object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  return v && v->is_number() ? v->to_number<std::int64_t>() : 0;
}

}  // namespace

struct Crew::Impl {
  CrewSpec spec;
  std::shared_ptr<ChatModel> model;
  std::shared_ptr<tools::ToolRegistry> tools;
  std::map<std::string, std::shared_ptr<const Agent>> agents;
  std::shared_ptr<const Agent> manager;
  std::unique_ptr<graph::GraphRuntime> child;

  // Delegations made by a manager loop run, by the run's id (hierarchical process).
  mutable std::mutex mu;
  mutable std::map<std::string, std::vector<json::object>> delegations;  // GUARDED_BY(mu)

  // Runs `agent` on `prompt` as a child run; stores the output; returns the task's record.
  asio::awaitable<Result<json::object>> run_loop(const Agent& agent, std::string prompt,
                                                 std::vector<Message> preamble, std::string run_id,
                                                 ArtifactStore* artifacts, std::string owner,
                                                 trace::Context trace) const {
    graph::RunOptions opt;
    opt.run_id = run_id;
    const graph::RunTracing tracing{std::move(trace), {}};
    if (tracing.context) opt.trace = &tracing;
    auto r = co_await agent.async_run(*child, std::move(prompt), std::move(preamble), opt);
    if (artifacts) artifacts->release_owner(run_id);  // the loop's own tool outputs, archives
    if (!r) co_return std::move(r).error();
    json::object rec;
    rec["agent"] = agent.spec().name;
    rec["summary"] = bounded_summary(r->output, spec.summary_bytes);
    rec["bytes"] = static_cast<std::uint64_t>(r->output.size());
    if (artifacts) {
      auto ref = artifacts->put(r->output, "text/plain", "", owner);
      if (!ref) co_return std::move(ref).error();
      rec["artifact"] = ref->to_json();
    } else {
      rec["output"] = bounded_summary(r->output, std::size_t{16} << 10);
    }
    rec["iterations"] = r->iterations;
    rec["tool_calls"] = r->tool_calls;
    rec["malformed_tool_calls"] = r->malformed_tool_calls;
    rec["refused_tool_calls"] = r->refused_tool_calls;
    rec["prompt_tokens"] = r->prompt_tokens;
    rec["completion_tokens"] = r->completion_tokens;
    rec["steps"] = r->steps;
    co_return rec;
  }

  static std::string describe_result(std::string_view task, const json::object& rec) {
    std::string s = "Result of the earlier task '" + std::string(task) + "' (by " +
                    std::string(rec.at("agent").as_string()) + "), summary:\n" +
                    std::string(rec.at("summary").as_string());
    if (const auto* a = rec.if_contains("artifact")) {
      if (auto ref = ArtifactRef::from_json(*a))
        s += "\nFull text: artifact " + ref->id + " (" + std::to_string(ref->bytes) +
             " bytes); read slices of it with the artifacts tool.";
    }
    return s;
  }

  asio::awaitable<Result<graph::Update>> run_task(std::size_t index, graph::StateView state,
                                                  graph::NodeContext& ctx) const {
    const TaskSpec& task = spec.tasks[index];
    json::object inputs;
    if (const auto& in = state.get("inputs"); in.is_object()) inputs = in.as_object();
    std::string prompt = render_inputs(task.description, inputs);
    if (!task.expected_output.empty())
      prompt += "\n\nExpected output: " + render_inputs(task.expected_output, inputs);
    std::vector<std::string> context = task.context;
    if (context.empty() && !task.context_none && index > 0)
      context.push_back(spec.tasks[index - 1].name);
    for (const auto& c : context) {
      const auto& v = state.get("task:" + c);
      if (v.is_object()) prompt += "\n\n" + describe_result(c, v.as_object());
    }
    // Prefetch: tool calls that always run first; the agent sees them as its own calls.
    std::vector<Message> preamble;
    if (!task.prefetch.empty()) {
      Message call = Message::assistant("");
      call.name = task.agent;
      std::vector<Message> results;
      for (std::size_t k = 0; k < task.prefetch.size(); ++k) {
        ToolCall tc = task.prefetch[k];
        tc.id = "prefetch_" + std::to_string(k + 1);
        tc.arguments = render_args(tc.arguments, inputs).as_object();
        tools::ToolContext tctx;
        tctx.artifacts = ctx.artifacts();
        tctx.owner = std::string(ctx.run_id());
        tctx.trace = ctx.trace();
        tctx.call_id = tc.id;
        auto out = co_await tools->async_call(tc.name, tc.arguments, tctx);
        Message m;
        m.role = Role::tool;
        m.name = tc.name;
        m.tool_call_id = tc.id;
        m.content = out ? std::move(out->content)
                        : "Error (" + std::string(errc_name(out.error().code)) +
                              "): " + out.error().message;
        call.tool_calls.push_back(std::move(tc));
        results.push_back(std::move(m));
      }
      preamble.push_back(std::move(call));
      for (auto& m : results) preamble.push_back(std::move(m));
    }
    // The agent's loop runs next, as the subgraph node "<task>/agent", on these two channels.
    json::array pre;
    for (const auto& m : preamble) pre.push_back(m.to_json());
    graph::Update u;
    u.set("prompt:" + task.name, json::string(prompt));
    u.set("preamble:" + task.name, std::move(pre));
    if (task.output_schema) u.set("schema:" + task.name, *task.output_schema);
    co_return u;
  }

  // After the loop: the output becomes an artifact, the state keeps a bounded record of it,
  // and the loop's channels are cleared.
  Result<graph::Update> finish_task(std::size_t index, const graph::StateView& state,
                                    graph::NodeContext& ctx) const {
    const TaskSpec& task = spec.tasks[index];
    const std::string& n = task.name;
    std::string output;
    const json::value& out = state.get("output:" + n);
    if (ArtifactRef::from_json(out)) {  // a long answer was offloaded on its way out
      auto text = ctx.fetch(out);
      if (!text) return std::move(text).error();
      output = std::move(*text);
    } else if (out.is_string()) {
      output = out.as_string();
    }
    auto count = [&](const char* c) {
      const json::value& v = state.get(std::string(c) + ":" + n);
      return v.is_number() ? v.to_number<std::int64_t>() : 0;
    };
    json::object rec;
    rec["agent"] = task.agent;
    rec["summary"] = bounded_summary(output, spec.summary_bytes);
    rec["bytes"] = static_cast<std::uint64_t>(output.size());
    if (task.output_schema) {  // the full JSON is in the artifact; this says it validates
      boost::system::error_code ec;
      json::value v = json::parse(output, ec);
      rec["output_valid"] = !ec && static_cast<bool>(tools::validate(*task.output_schema, v));
    }
    // The whole output, as the message text of the run (RunOptions::on_message_text): a
    // caller shows each task's result as soon as it is done.
    if (auto sink = ctx.message_text(ctx.new_message_id())) sink(output);
    if (ctx.artifacts()) {
      auto ref = ctx.artifacts()->put(output, "text/plain", "", ctx.run_id());
      if (!ref) return std::move(ref).error();
      rec["artifact"] = ref->to_json();
    } else {
      rec["output"] = bounded_summary(output, std::size_t{16} << 10);
    }
    rec["iterations"] = count("iterations");
    rec["tool_calls"] = count("tool_calls") + static_cast<std::int64_t>(task.prefetch.size());
    rec["malformed_tool_calls"] = count("malformed_tool_calls");
    rec["refused_tool_calls"] = count("refused_tool_calls");
    rec["prompt_tokens"] = count("prompt_tokens");
    rec["completion_tokens"] = count("completion_tokens");
    graph::Update u;
    u.set("task:" + n, std::move(rec));
    for (const char* c : {"prompt", "preamble", "output"}) u.set(std::string(c) + ":" + n, nullptr);
    return u;
  }

  std::string manager_prompt(const json::object& inputs) const {
    std::string s =
        "Complete these tasks by delegating each to the right coworker with the "
        "delegate_work tool, then give the final answer:\n";
    for (std::size_t i = 0; i < spec.tasks.size(); ++i) {
      const auto& t = spec.tasks[i];
      s += std::to_string(i + 1) + ". " + render_inputs(t.description, inputs);
      if (!t.expected_output.empty())
        s += " (expected: " + render_inputs(t.expected_output, inputs) + ")";
      if (!t.agent.empty()) s += " [suggested coworker: " + t.agent + "]";
      s += "\n";
    }
    s += "Coworkers:";
    for (const auto& a : spec.agents) s += "\n- " + a.name + ": " + a.role;
    return s;
  }

  asio::awaitable<Result<graph::Update>> run_manager(graph::StateView state,
                                                     graph::NodeContext& ctx) const {
    json::object inputs;
    if (const auto& in = state.get("inputs"); in.is_object()) inputs = in.as_object();
    const std::string run_id = std::string(ctx.run_id()) + "/manager";
    std::vector<Message> no_preamble;
    std::string crew_run(ctx.run_id());  // locals: no temporary inside a co_await (GCC 12)
    trace::Context trace = ctx.trace();
    auto rec = co_await run_loop(*manager, manager_prompt(inputs), std::move(no_preamble), run_id,
                                 ctx.artifacts(), std::move(crew_run), trace);
    std::vector<json::object> made;
    {
      std::lock_guard lock(mu);
      if (auto it = delegations.find(run_id); it != delegations.end()) {
        made = std::move(it->second);
        delegations.erase(it);
      }
    }
    if (!rec) co_return Error(rec.error().code, "manager: " + rec.error().message);
    std::int64_t tokens = num(*rec, "prompt_tokens") + num(*rec, "completion_tokens");
    json::array dels;
    for (auto& m : made) {
      tokens += num(m, "prompt_tokens") + num(m, "completion_tokens");
      dels.push_back(std::move(m));
    }
    if (auto s = ctx.charge_tokens(tokens); !s) co_return std::move(s).error();
    graph::Update u;
    u.set("delegations", std::move(dels));
    u.set("manager", std::move(*rec));
    co_return u;
  }

  // The manager's delegate_work tool: runs a coworker's loop, returns its bounded result.
  asio::awaitable<Result<std::string>> delegate(json::object args,
                                                const tools::ToolContext& tctx) const {
    const std::string who(args.at("coworker").as_string());
    auto it = agents.find(who);
    if (it == agents.end()) {
      std::string names;
      for (const auto& [n, a] : agents) names += (names.empty() ? "" : ", ") + n;
      co_return Error(Errc::invalid_argument,
                      "no coworker named '" + who + "' (coworkers: " + names + ")");
    }
    std::string prompt(args.at("task").as_string());
    if (const auto* c = args.if_contains("context"); c && c->is_string() && !c->as_string().empty())
      prompt += "\n\nContext from the manager:\n" + std::string(c->as_string());
    std::size_t n;
    {
      std::lock_guard lock(mu);
      n = delegations[tctx.owner].size();
    }
    // The manager loop's run id is "<crew run>/manager": delegations are owned by the crew run.
    std::string crew_run = tctx.owner.substr(0, tctx.owner.rfind('/'));
    std::vector<Message> no_preamble;
    std::string loop_id = tctx.owner + "/delegation-" + std::to_string(n + 1);
    auto rec = co_await run_loop(*it->second, std::move(prompt), std::move(no_preamble),
                                 std::move(loop_id), tctx.artifacts, crew_run, tctx.trace);
    if (!rec) co_return std::move(rec).error();
    std::string reply = describe_result("delegated to " + who, *rec);
    rec->emplace("task", json::string(std::string(args.at("task").as_string()).substr(0, 200)));
    std::lock_guard lock(mu);
    delegations[tctx.owner].push_back(std::move(*rec));
    co_return reply;
  }
};

Crew::~Crew() = default;

Result<std::shared_ptr<const Crew>> Crew::create(CrewSpec spec, std::shared_ptr<ChatModel> model,
                                                 std::shared_ptr<tools::ToolRegistry> tools,
                                                 graph::RuntimeOptions child) {
  std::vector<std::string> problems;
  for (auto& p : crew_problems(spec)) problems.push_back(std::move(p.message));
  if (!tools) tools = std::make_shared<tools::ToolRegistry>();
  auto impl = std::make_shared<Impl>();
  for (const auto& a : spec.agents) {
    auto agent = Agent::create(a, model, tools);
    if (!agent) {
      problems.push_back(agent.error().message);
      continue;
    }
    impl->agents[a.name] = std::move(*agent);
  }
  if (!problems.empty()) {
    std::string msg = "crew '" + spec.name + "' is invalid:";
    for (const auto& p : problems) msg += "\n  - " + p;
    return Error(Errc::invalid_workflow, msg);
  }

  auto crew = std::shared_ptr<Crew>(new Crew());
  impl->spec = spec;
  impl->model = model;
  impl->tools = tools;
  child.max_queued_runs = std::max<std::size_t>(child.max_queued_runs, 100000);
  impl->child = std::make_unique<graph::GraphRuntime>(child);
  Impl* ip = impl.get();

  graph::StateGraph g;
  g.add_channel("inputs", {.default_value = json::object()});
  std::string prev(graph::kStart);
  if (spec.process == Process::sequential) {
    for (std::size_t i = 0; i < spec.tasks.size(); ++i) {
      const std::string& name = spec.tasks[i].name;
      // <task> (context, prefetch) -> <task>/agent (the loop, a subgraph) -> <task>/done
      g.add_channel("task:" + name);
      for (const char* c :
           {"prompt", "preamble", "schema", "output", "iterations", "tool_calls",
            "malformed_tool_calls", "refused_tool_calls", "prompt_tokens", "completion_tokens"})
        g.add_channel(std::string(c) + ":" + name);
      g.add_async_node(name, [ip, i](graph::StateView s, graph::NodeContext& ctx) {
        return ip->run_task(i, s, ctx);
      });
      graph::SubgraphOptions so;
      so.input = {{"prompt:" + name, "task"},
                  {"preamble:" + name, "preamble"},
                  {"schema:" + name, "output_schema"}};
      for (const char* c : {"output", "iterations", "tool_calls", "malformed_tool_calls",
                            "refused_tool_calls", "prompt_tokens", "completion_tokens"})
        so.output.emplace_back(c, std::string(c) + ":" + name);
      g.add_subgraph(name + "/agent", impl->agents.at(spec.tasks[i].agent)->graph(), so);
      g.add_node(name + "/done", [ip, i](const graph::StateView& s, graph::NodeContext& ctx) {
        return ip->finish_task(i, s, ctx);
      });
      g.add_edge(prev, name);
      g.add_edge(name, name + "/agent");
      g.add_edge(name + "/agent", name + "/done");
      prev = name + "/done";
    }
  } else {
    // The manager's registry: the crew's tools plus delegate_work.
    auto reg = std::make_shared<tools::ToolRegistry>();
    for (const auto& n : tools->names()) (void)reg->add(tools->find(n));
    json::array names;
    for (const auto& a : spec.agents) names.push_back(json::string(a.name));
    json::object schema = {{"type", "object"},
                           {"properties",
                            {{"coworker", {{"type", "string"}, {"enum", names}}},
                             {"task", {{"type", "string"}, {"minLength", 1}}},
                             {"context", {{"type", "string"}}}}},
                           {"required", json::array{"coworker", "task"}},
                           {"additionalProperties", false}};
    tools::ToolOptions topt;
    topt.timeout = std::chrono::minutes(30);  // a coworker's whole loop; its own caps end it
    topt.max_concurrency = 1 << 20;
    topt.max_output_bytes = spec.summary_bytes + 512;
    auto st = reg->add(tools::make_async_tool(
        "delegate_work", "Give a task to a coworker and get back their result.", schema,
        [ip](json::object args, const tools::ToolContext& tctx) {
          return ip->delegate(std::move(args), tctx);
        },
        topt));
    if (!st) return std::move(st).error();
    AgentSpec m = spec.manager.value_or(AgentSpec{});
    if (m.name.empty()) m.name = "manager";
    if (m.role.empty()) m.role = "the crew's manager";
    if (m.goal.empty())
      m.goal =
          "Get every task done by the right coworker, then combine their results into the "
          "final answer.";
    if (!spec.manager) m.max_iter = static_cast<std::int32_t>(2 * spec.tasks.size() + 2);
    if (std::find(m.tools.begin(), m.tools.end(), "delegate_work") == m.tools.end())
      m.tools.push_back("delegate_work");
    auto mgr = Agent::create(std::move(m), model, reg);
    if (!mgr)
      return Error(Errc::invalid_workflow, "crew '" + spec.name + "': " + mgr.error().message);
    impl->manager = std::move(*mgr);
    g.add_channel("delegations");
    g.add_channel("manager");
    g.add_async_node("manager", [ip](graph::StateView s, graph::NodeContext& ctx) {
      return ip->run_manager(s, ctx);
    });
    g.add_edge(prev, "manager");
    prev = "manager";
  }
  g.add_edge(prev, std::string(graph::kEnd));
  auto compiled = g.compile(spec.limits);
  if (!compiled) return std::move(compiled).error();
  crew->spec_ = std::move(spec);
  crew->impl_ = std::move(impl);
  crew->graph_ = std::move(*compiled);
  return std::shared_ptr<const Crew>(std::move(crew));
}

asio::awaitable<Result<CrewResult>> Crew::async_kickoff(graph::GraphRuntime& runtime,
                                                        json::object inputs,
                                                        graph::RunOptions options) const {
  json::object in;
  in["inputs"] = std::move(inputs);
  auto r = co_await runtime.async_invoke(graph_, std::move(in), std::move(options));
  if (!r) co_return Error(r.error().code, "crew '" + spec_.name + "': " + r.error().message);
  CrewResult out;
  auto add = [&](std::string task, const json::object& rec) {
    TaskResult t;
    t.task = std::move(task);
    t.agent = rec.at("agent").as_string();
    t.summary = rec.at("summary").as_string();
    t.output_bytes = static_cast<std::uint64_t>(num(rec, "bytes"));
    if (const auto* ov = rec.if_contains("output_valid"); ov && ov->is_bool())
      t.output_valid = ov->as_bool();
    if (const auto* a = rec.if_contains("artifact"))
      if (auto ref = ArtifactRef::from_json(*a)) t.artifact_id = ref->id;
    t.loop.iterations = static_cast<std::int32_t>(num(rec, "iterations"));
    t.loop.tool_calls = static_cast<std::int32_t>(num(rec, "tool_calls"));
    t.loop.malformed_tool_calls = static_cast<std::int32_t>(num(rec, "malformed_tool_calls"));
    t.loop.refused_tool_calls = static_cast<std::int32_t>(num(rec, "refused_tool_calls"));
    t.loop.prompt_tokens = num(rec, "prompt_tokens");
    t.loop.completion_tokens = num(rec, "completion_tokens");
    t.loop.steps = static_cast<std::int32_t>(num(rec, "steps"));
    t.loop.output = t.summary;
    out.steps += t.loop.steps;
    out.iterations += t.loop.iterations;
    out.tool_calls += t.loop.tool_calls;
    out.malformed_tool_calls += t.loop.malformed_tool_calls;
    out.refused_tool_calls += t.loop.refused_tool_calls;
    out.prompt_tokens += t.loop.prompt_tokens;
    out.completion_tokens += t.loop.completion_tokens;
    out.final_output = t.summary;
    out.tasks.push_back(std::move(t));
  };
  const auto& st = r->state;
  if (spec_.process == Process::sequential) {
    for (const auto& t : spec_.tasks)
      if (const auto* v = st.if_contains("task:" + t.name); v && v->is_object())
        add(t.name, v->as_object());
  } else {
    if (const auto* d = st.if_contains("delegations"); d && d->is_array())
      for (const auto& x : d->as_array())
        if (x.is_object())
          add(x.as_object().contains("task") ? std::string(x.at("task").as_string()) : "delegation",
              x.as_object());
    if (const auto* m = st.if_contains("manager"); m && m->is_object())
      add("manager", m->as_object());
  }
  out.steps += r->steps;
  out.run = std::move(*r);
  co_return out;
}

}  // namespace weir::agents
