#include "weir/graph/workflow_graph.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"

namespace weir::graph {

namespace json = boost::json;
namespace asio = boost::asio;

// --- templates ----------------------------------------------------------------------------

namespace {

json::value number_value(double d) {
  if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
  return d;
}

std::string to_text(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : json::serialize(v);
}

// A message's content as text: a string as it is; OpenAI's content parts ([{"type": "text",
// "text": ...}, ...], what Agent Chat UI sends) as their texts joined; anything else as JSON.
std::string content_text(const json::value& v) {
  const json::array* parts = v.if_array();
  if (!parts) return to_text(v);
  std::string out;
  for (const auto& p : *parts) {
    const json::object* o = p.if_object();
    const json::value* t = o ? o->if_contains("text") : nullptr;
    if (!t || !t->is_string()) return to_text(v);
    out += t->as_string();
  }
  return out;
}

// A message of a messages channel as written: one over the inline limit is held as an artifact
// reference in state, and read back here.
Result<json::value> whole_message(const json::value& m, NodeContext& c) {
  if (!ArtifactRef::from_json(m)) return m;
  auto bytes = c.fetch(m);
  if (!bytes) return std::move(bytes).error();
  boost::system::error_code ec;
  json::value whole = json::parse(*bytes, ec);
  return whole.is_object() ? whole : m;
}

}  // namespace

Result<json::value> render_template(const json::value& v, const StateView& state,
                                    const json::value& item, const json::object& input) {
  if (v.is_object()) {
    json::object o;
    for (const auto& [k, x] : v.as_object()) {
      auto r = render_template(x, state, item, input);
      if (!r) return r;
      o[k] = std::move(*r);
    }
    return json::value(std::move(o));
  }
  if (v.is_array()) {
    json::array a;
    for (const auto& x : v.as_array()) {
      auto r = render_template(x, state, item, input);
      if (!r) return r;
      a.push_back(std::move(*r));
    }
    return json::value(std::move(a));
  }
  if (!v.is_string()) return v;
  const std::string s(v.as_string());
  auto lookup = [&](std::string path) -> Result<json::value> {
    auto trim = [](std::string& x) {
      while (!x.empty() && std::isspace(static_cast<unsigned char>(x.front()))) x.erase(0, 1);
      while (!x.empty() && std::isspace(static_cast<unsigned char>(x.back()))) x.pop_back();
    };
    trim(path);
    std::vector<std::string> parts;
    for (std::size_t p = 0, q; p <= path.size(); p = q + 1) {
      q = path.find('.', p);
      if (q == std::string::npos) q = path.size();
      parts.push_back(path.substr(p, q - p));
    }
    json::value cur;
    std::size_t k = 1;
    if (parts[0] == "item") {
      cur = item;
    } else if (parts[0] == "state" && parts.size() > 1) {
      cur = state.get(parts[1]);
      k = 2;
    } else if (parts[0] == "input" && parts.size() > 1) {
      const auto* x = input.if_contains(parts[1]);
      cur = x ? *x : json::value();
      k = 2;
    } else {
      return Error(Errc::invalid_argument,
                   "template {{" + path + "}}: use state.NAME, input.NAME or item");
    }
    for (; k < parts.size(); ++k) {
      const auto* o = cur.if_object();
      const json::value* x = o ? o->if_contains(parts[k]) : nullptr;
      cur = x ? *x : json::value();
    }
    return cur;
  };
  if (s.rfind("{{", 0) == 0 && s.size() > 4 && s.compare(s.size() - 2, 2, "}}") == 0 &&
      s.find("{{", 2) == std::string::npos) {
    return lookup(s.substr(2, s.size() - 4));  // whole-string template: keeps the JSON type
  }
  std::string out;
  for (std::size_t p = 0;;) {
    std::size_t a = s.find("{{", p);
    if (a == std::string::npos) {
      out += s.substr(p);
      break;
    }
    std::size_t b = s.find("}}", a);
    if (b == std::string::npos)
      return Error(Errc::invalid_argument, "template \"" + s + "\": '{{' without '}}'");
    out += s.substr(p, a - p);
    auto x = lookup(s.substr(a + 2, b - a - 2));
    if (!x) return x;
    out += to_text(*x);
    p = b + 2;
  }
  return json::value(out);
}

// --- building ---------------------------------------------------------------------------------

namespace {

bool compare(const json::value& a, const std::string& op, const json::value& b) {
  if (op == "exists") return !a.is_null();
  if (op == "contains") {
    if (a.is_string() && b.is_string())
      return std::string_view(a.as_string()).find(b.as_string()) != std::string_view::npos;
    if (a.is_array()) {
      for (const auto& x : a.as_array()) {
        if (x == b) return true;
      }
    }
    return false;
  }
  if (a.is_number() && b.is_number()) {
    const double x = a.to_number<double>(), y = b.to_number<double>();
    if (op == "==") return x == y;
    if (op == "!=") return x != y;
    if (op == "<") return x < y;
    if (op == "<=") return x <= y;
    if (op == ">") return x > y;
    if (op == ">=") return x >= y;
  }
  if (op == "==") return a == b;
  if (op == "!=") return a != b;
  return false;
}

}  // namespace

Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, ModelCall model_call) {
  WorkflowHooks hooks;
  hooks.model_call = std::move(model_call);
  return build_workflow_graph(spec, std::move(hooks));
}

namespace {

GraphLimits graph_limits(const LimitsSpec& l) {
  GraphLimits limits;
  if (l.recursion_limit) limits.recursion_limit = static_cast<std::int32_t>(*l.recursion_limit);
  if (l.max_concurrency) limits.max_concurrency = static_cast<std::int32_t>(*l.max_concurrency);
  if (l.deadline_ms) limits.deadline = std::chrono::milliseconds(*l.deadline_ms);
  if (l.inline_limit) limits.inline_limit = static_cast<std::size_t>(*l.inline_limit);
  if (l.max_state_bytes) limits.max_state_bytes = static_cast<std::size_t>(*l.max_state_bytes);
  if (l.token_budget) limits.token_budget = *l.token_budget;
  if (l.max_thread_steps) limits.max_thread_steps = *l.max_thread_steps;
  return limits;
}

}  // namespace

namespace {

// A route's choice of the next nodes, as the file declares it.
std::vector<std::string> choose(const RouteSpec& r, const StateView& s) {
  switch (r.form) {
    case RouteSpec::Form::cases: {
      const json::value& v = s.get(r.on);
      const std::string key = v.is_string() ? std::string(v.as_string()) : json::serialize(v);
      for (const auto& [k, targets] : r.cases) {
        if (k == key) return targets;
      }
      return r.default_targets;
    }
    case RouteSpec::Form::when:
      return compare(s.get(r.when_channel), r.when_op, r.when_value.value_or(json::value()))
                 ? r.then_targets
                 : r.else_targets;
    case RouteSpec::Form::tool_calls: {
      const json::value& msgs = s.get("messages");
      if (msgs.is_array() && !msgs.as_array().empty()) {
        const auto& last = msgs.as_array().back();
        if (last.is_object() && last.as_object().contains("tool_calls") &&
            last.at("tool_calls").is_array() && !last.at("tool_calls").as_array().empty()) {
          return r.tool_calls_targets;
        }
      }
      return r.default_targets;
    }
  }
  return {};
}

// A node spec's settings, by kind, into a StateGraph's nodes (one method a kind).
struct Builder {
  const WorkflowSpec& spec;
  const WorkflowHooks& hooks;
  StateGraph& b;
  std::vector<std::string> problems;

  static std::string str(const json::object& p, const char* k) {
    return p.contains(k) && p.at(k).is_string() ? std::string(p.at(k).as_string()) : std::string();
  }
  static NodeOptions options_of(const NodeSpec& n) {
    NodeOptions opts;
    opts.max_visits = n.max_visits.value_or(0);
    opts.timeout = std::chrono::milliseconds(n.timeout_ms.value_or(0));
    if (n.retry) {
      opts.max_attempts = static_cast<std::int32_t>(n.retry->max_attempts);
      opts.backoff = std::chrono::milliseconds(n.retry->backoff_ms);
    }
    return opts;
  }
  void missing(const NodeSpec& n, const char* what) {
    problems.push_back("node '" + n.name + "': " + what);
  }

  void add(const NodeSpec& n) {
    switch (n.kind) {
      case NodeKind::router:
        b.add_node(
            n.name, [](const StateView&, NodeContext&) -> Result<Update> { return Update(); },
            options_of(n));
        return;
      case NodeKind::set:
        return add_set(n);
      case NodeKind::map:
        return add_map(n);
      case NodeKind::tool:
        return add_tool(n);
      case NodeKind::agent:
        return add_agent(n);
      case NodeKind::interrupt:
        return add_interrupt(n);
      case NodeKind::subgraph:
        return add_subgraph(n);
      case NodeKind::llm:
        return add_llm(n);
      case NodeKind::crew:
        return add_crew(n);
      case NodeKind::code:  // a C++ graph's (CompiledGraph::describe): it runs its own nodes
        break;
    }
    problems.push_back("node '" + n.name + "': kind '" + node_kind_name(n.kind) +
                       "' is not runnable");
  }

  void add_set(const NodeSpec& n) {
    const json::object& values = n.params.at("values").as_object();
    const bool expressions = std::any_of(values.begin(), values.end(), [](const auto& kv) {
      const auto* o = kv.value().if_object();
      return o && o->contains("$expr");
    });
    if (expressions && !hooks.evaluate)
      return missing(n,
                     "expressions need the tools layer's calculator (weir run provides it; in "
                     "C++ use agents::build_workflow)");
    b.add_node(
        n.name,
        [values, evaluate = hooks.evaluate](const StateView& s, NodeContext& c) -> Result<Update> {
          Update u;
          for (const auto& [ch, v] : values) {
            if (const auto* o = v.if_object(); o && o->contains("$expr")) {
              auto r = evaluate(o->at("$expr").as_string(), s);
              if (!r) return r.error();
              u.set(std::string(ch), number_value(*r));
            } else {
              auto r = render_template(v, s, c.input(), {});
              if (!r) return r.error();
              u.set(std::string(ch), std::move(*r));
            }
          }
          return u;
        },
        options_of(n));
  }

  void add_map(const NodeSpec& n) {
    const std::string over = str(n.params, "over"), worker = str(n.params, "node");
    b.add_node(
        n.name,
        [over, worker](const StateView& s, NodeContext&) -> Result<Update> {
          Update u;
          const json::value& list = s.get(over);
          if (!list.is_array())
            return Error(Errc::invalid_argument,
                         "map over '" + over + "': the channel does not hold a list");
          for (const auto& item : list.as_array()) u.sends.push_back({worker, item});
          return u;
        },
        options_of(n));
    b.add_sends(n.name, {worker});
  }

  void add_tool(const NodeSpec& n) {
    if (!hooks.tool_call)
      return missing(n,
                     "tool nodes need the tools layer (weir run provides it; in C++ use "
                     "agents::build_workflow)");
    // A declared tool, or an MCP server's ("server/tool"); the loader checked the name.
    const std::string tool = str(n.params, "tool"), output = str(n.params, "output");
    const json::value args =
        n.params.contains("args") ? n.params.at("args") : json::value(json::object());
    b.add_async_node(
        n.name,
        [args, output, tool, call = hooks.tool_call](
            StateView s, NodeContext& c) -> asio::awaitable<Result<Update>> {
          auto a = render_template(args, s, c.input(), {});
          if (!a) co_return a.error();
          if (!a->is_object())
            co_return Error(Errc::invalid_argument,
                            "tool '" + tool + "': args must render to an object");
          auto op = call(tool, a->as_object(), c);
          auto r = co_await std::move(op);
          if (!r) co_return r.error();
          Update u;
          if (!output.empty()) u.set(output, std::move(*r));
          co_return u;
        },
        options_of(n));
  }

  void add_agent(const NodeSpec& n) {
    if (!hooks.agent_call)
      return missing(n,
                     "agent nodes need the agents layer (weir run provides it; in C++ use "
                     "agents::build_workflow)");
    const std::string agent = str(n.params, "agent"), input = str(n.params, "input"),
                      output = str(n.params, "output");
    b.add_async_node(
        n.name,
        [agent, input, output, call = hooks.agent_call](
            StateView s, NodeContext& c) -> asio::awaitable<Result<Update>> {
          json::value in = input.empty() ? json::value(s.to_object()) : s.get(input);
          if (!c.input().is_null()) in = c.input();  // a map worker: the item
          auto op = call(agent, std::move(in), c);
          auto r = co_await std::move(op);
          if (!r) co_return r.error();
          Update u;
          if (!output.empty()) u.set(output, std::move(*r));
          co_return u;
        },
        options_of(n));
  }

  void add_interrupt(const NodeSpec& n) {
    const json::value payload =
        n.params.contains("payload") ? n.params.at("payload") : json::value();
    const std::string output = str(n.params, "output");
    b.add_node(
        n.name,
        [payload, output](const StateView& s, NodeContext& c) -> Result<Update> {
          if (const json::value* v = c.resume_value()) {
            Update u;
            if (!output.empty()) u.set(output, *v);
            return u;
          }
          auto shown = render_template(payload, s, c.input(), {});
          if (!shown) return shown.error();
          return c.interrupt(std::move(*shown));
        },
        options_of(n));
  }

  // The file built the same way (the same hooks), run as a child with its own limits.
  void add_subgraph(const NodeSpec& n) {
    auto it = spec.subgraphs.find(n.name);
    if (it == spec.subgraphs.end() || !it->second)
      return missing(n, "its subgraph file was not loaded");
    auto child_hooks = hooks.subgraph ? hooks.subgraph(*it->second) : hooks;
    if (!child_hooks)
      return problems.push_back("node '" + n.name + "': " + child_hooks.error().message);
    auto child = build_workflow_graph(*it->second, std::move(*child_hooks));
    if (!child) return problems.push_back("node '" + n.name + "': " + child.error().message);
    SubgraphOptions so;
    for (const char* key : {"input", "output"}) {
      if (const auto* m = n.params.if_contains(key); m && m->is_object())
        for (const auto& [from, to] : m->as_object())
          (std::string(key) == "input" ? so.input : so.output)
              .emplace_back(std::string(from), std::string(to.as_string()));
    }
    if (const auto* l = n.params.if_contains("limits"); l && l->is_object()) {
      GraphLimits gl = child->graph->limits();
      const auto& lo = l->as_object();
      auto get = [&](const char* k) -> std::optional<std::int64_t> {
        const auto* v = lo.if_contains(k);
        if (v && v->is_number()) return v->to_number<std::int64_t>();
        return std::nullopt;
      };
      if (auto v = get("recursion_limit")) gl.recursion_limit = static_cast<std::int32_t>(*v);
      if (auto v = get("max_concurrency")) gl.max_concurrency = static_cast<std::int32_t>(*v);
      if (auto v = get("deadline_ms")) gl.deadline = std::chrono::milliseconds(*v);
      if (auto v = get("token_budget")) gl.token_budget = *v;
      so.limits = gl;
    }
    b.add_subgraph(n.name, child->graph, std::move(so));
  }

  void add_llm(const NodeSpec& n) {
    if (!hooks.model_call)
      return missing(n,
                     "llm nodes need a model (run with weir run, which loads the workflow's "
                     "models)");
    const json::object& p = n.params;
    const std::string model = str(p, "model"), prompt = str(p, "prompt"), system = str(p, "system"),
                      output = str(p, "output"), messages = str(p, "messages");
    const std::int32_t max_tokens =
        p.contains("max_tokens") ? static_cast<std::int32_t>(p.at("max_tokens").as_int64()) : 128;
    // With an output_schema the reply is JSON valid against it: the output channel gets the
    // parsed value, not its text.
    std::optional<json::object> schema;
    if (const auto* os = p.if_contains("output_schema"); os && os->is_object())
      schema = os->as_object();
    b.add_async_node(
        n.name,
        [=, model_call = hooks.model_call](StateView s,
                                           NodeContext& c) -> asio::awaitable<Result<Update>> {
          auto pr = render_template(json::value(prompt), s, c.input(), {});
          if (!pr) co_return pr.error();
          std::string text = pr->is_string() ? std::string(pr->as_string()) : json::serialize(*pr);
          if (!messages.empty()) {
            for (const auto& m :
                 s.get(messages).is_array() ? s.get(messages).as_array() : json::array()) {
              auto msg = whole_message(m, c);
              if (!msg) co_return msg.error();
              if (msg->is_object() && msg->as_object().contains("content"))
                text += "\n" + content_text(msg->at("content"));
            }
          }
          // A reply that becomes a message is named first, so that its text can stream as
          // it is generated (RunOptions::on_message_text) under the id it is stored with.
          std::string message_id;
          std::function<void(std::string_view)> on_text;
          if (!messages.empty()) {
            message_id = c.new_message_id();
            on_text = c.message_text(message_id);
          }
          auto op = model_call(model, system, text, max_tokens, schema, std::move(on_text), c);
          auto r = co_await std::move(op);
          if (!r) co_return r.error();
          if (auto st = c.charge_tokens(static_cast<std::int64_t>(r->size() / 4 + 1)); !st)
            co_return st.error();
          Update u;
          if (!output.empty() && schema) {
            boost::system::error_code ec;
            json::value v = json::parse(*r, ec);
            if (ec)
              co_return Error(Errc::model_error,
                              "the reply is not JSON although the node has an output_schema (it "
                              "was cut at max_tokens " +
                                  std::to_string(max_tokens) + "?): " + *r);
            u.set(output, std::move(v));
          } else if (!output.empty()) {
            u.set(output, json::string(*r));
          }
          if (!messages.empty())
            u.set(messages,
                  json::object{{"role", "assistant"}, {"content", *r}, {"id", message_id}});
          co_return u;
        },
        options_of(n));
  }

  // A crew node: the crew's inputs rendered from the state, the last user message of `messages`
  // (when the last message is the user's: a chat's new turn) as the input `chat_input`; the
  // crew's final output to `output`, each task's output to `messages` as its agent's message.
  void add_crew(const NodeSpec& n) {
    if (!hooks.crew_call)
      return missing(n,
                     "crew nodes need the agents layer (weir run provides it; in C++ use "
                     "agents::build_workflow)");
    const json::object& p = n.params;
    const std::string crew = str(p, "crew"), model = str(p, "model"), output = str(p, "output"),
                      messages = str(p, "messages");
    const std::string chat_input = p.contains("chat_input") ? str(p, "chat_input") : "request";
    const json::value inputs = p.contains("inputs") ? p.at("inputs") : json::value(json::object());
    b.add_async_node(
        n.name,
        [=, call = hooks.crew_call](StateView s,
                                    NodeContext& c) -> asio::awaitable<Result<Update>> {
          auto in = render_template(inputs, s, c.input(), {});
          if (!in) co_return in.error();
          json::object args = in->is_object() ? std::move(in->as_object()) : json::object();
          if (!messages.empty()) {
            const json::value& list = s.get(messages);
            if (list.is_array() && !list.as_array().empty()) {
              auto last = whole_message(list.as_array().back(), c);
              if (!last) co_return last.error();
              const json::object* o = last->if_object();
              const json::value* role = o ? o->if_contains("role") : nullptr;
              if (role && *role == "user" && o->contains("content"))
                args[chat_input] = content_text(o->at("content"));
            }
          }
          // A task's output streams as its message once the task is done (a run that takes
          // message text), under the id the message is then stored with.
          struct Named {
            std::mutex mu;
            std::map<std::string, std::string> ids;  // task -> message id; GUARDED_BY(mu)
          };
          auto named = std::make_shared<Named>();
          std::function<void(const std::string&, std::string_view)> on_task_text;
          if (!messages.empty() && c.message_text("probe"))
            on_task_text = [&c, named](const std::string& task, std::string_view text) {
              std::string id;
              {
                std::lock_guard lock(named->mu);
                if (named->ids.contains(task)) return;  // one message a task
                id = named->ids[task] = c.new_message_id();
              }
              if (auto sink = c.message_text(id)) sink(text);
            };
          auto op = call(crew, model, std::move(args), std::move(on_task_text), c);
          auto r = co_await std::move(op);
          if (!r) co_return r.error();
          Update u;
          if (!output.empty()) u.set(output, json::string(r->output));
          if (!messages.empty()) {
            json::array turns;
            std::lock_guard lock(named->mu);  // the crew ended: nothing streams now
            for (auto& m : r->messages) {
              auto it = named->ids.find(m.task);
              std::string id = it != named->ids.end() ? std::move(it->second) : c.new_message_id();
              if (it != named->ids.end()) named->ids.erase(it);
              turns.push_back(json::object{{"role", "assistant"},
                                           {"name", m.agent},
                                           {"content", std::move(m.text)},
                                           {"id", std::move(id)}});
            }
            u.set(messages, std::move(turns));
          }
          co_return u;
        },
        options_of(n));
  }

  void add_edges() {
    for (const auto& e : spec.edges) {
      for (const auto& t : e.to) b.add_edge(e.from, t);
      if (!e.route) continue;
      b.add_conditional_edges(
          e.from, [r = *e.route](const StateView& s) { return choose(r, s); },
          e.route->all_targets());
    }
  }
};

}  // namespace

Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, WorkflowHooks hooks) {
  StateGraph b;
  b.reserve(spec.nodes.size(), spec.edges.size());
  for (const auto& c : spec.channels) {
    ChannelOptions o;
    o.reducer = c.reducer;
    o.default_value = c.default_value;
    o.max_items = c.max_items;
    o.max_messages = c.window_max_messages;
    o.max_tokens = c.window_max_tokens;
    b.add_channel(c.name, std::move(o));
  }
  Builder builder{spec, hooks, b, {}};
  for (const auto& n : spec.nodes) builder.add(n);
  builder.add_edges();
  if (!builder.problems.empty()) {
    std::string msg;
    for (const auto& p : builder.problems)
      msg += (msg.empty() ? "" : "\n") + spec.file.string() + ": " + p;
    return Error(Errc::invalid_workflow, msg);
  }
  const auto& l = spec.limits;
  b.set_input_channels(spec.input, spec.name.empty() ? spec.file.stem().string() : spec.name);
  auto g = std::move(b).compile(graph_limits(l));
  if (!g) return Error(Errc::invalid_workflow, spec.file.string() + ": " + g.error().message);
  WorkflowGraph out;
  out.graph = *g;
  if (l.max_concurrent_runs)
    out.runtime.max_concurrent_runs = static_cast<std::size_t>(*l.max_concurrent_runs);
  if (l.max_queued_runs) out.runtime.max_queued_runs = static_cast<std::size_t>(*l.max_queued_runs);
  return out;
}

}  // namespace weir::graph
