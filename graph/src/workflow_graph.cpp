#include "weir/graph/workflow_graph.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace weir::graph {

namespace json = boost::json;
namespace asio = boost::asio;

// --- expressions ----------------------------------------------------------------------------

namespace {

class Expr {
 public:
  Expr(std::string_view s, const StateView& st) : s_(s), st_(st) {}
  Result<double> parse() {
    auto v = sum();
    if (!v) return v;
    skip();
    if (i_ != s_.size()) return fail("unexpected '" + std::string(1, s_[i_]) + "'");
    return v;
  }

 private:
  Error fail(const std::string& what) const {
    return Error(Errc::invalid_argument, "expression \"" + std::string(s_) + "\": " + what +
                                             " at column " + std::to_string(i_ + 1));
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  Result<double> sum() {
    auto l = product();
    if (!l) return l;
    double v = *l;
    for (skip(); i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-'); skip()) {
      char op = s_[i_++];
      auto r = product();
      if (!r) return r;
      v = op == '+' ? v + *r : v - *r;
    }
    return v;
  }
  Result<double> product() {
    auto l = atom();
    if (!l) return l;
    double v = *l;
    for (skip(); i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '/'); skip()) {
      char op = s_[i_++];
      auto r = atom();
      if (!r) return r;
      if (op == '/' && *r == 0) return fail("division by zero");
      v = op == '*' ? v * *r : v / *r;
    }
    return v;
  }
  Result<double> atom() {
    skip();
    if (i_ >= s_.size()) return fail("expected a number or a channel");
    if (s_[i_] == '(') {
      ++i_;
      auto v = sum();
      if (!v) return v;
      skip();
      if (i_ >= s_.size() || s_[i_] != ')') return fail("expected ')'");
      ++i_;
      return v;
    }
    if (s_[i_] == '-') {
      ++i_;
      auto v = atom();
      if (!v) return v;
      return -*v;
    }
    if (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.') {
      std::size_t start = i_;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.'))
        ++i_;
      return std::stod(std::string(s_.substr(start, i_ - start)));
    }
    if (std::isalpha(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_') {
      std::size_t start = i_;
      while (i_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '-'))
        ++i_;
      std::string name(s_.substr(start, i_ - start));
      skip();
      if (i_ < s_.size() && s_[i_] == '(') {  // len(channel): items in a list or object
        if (name != "len") return fail("unknown function '" + name + "' (known: len)");
        ++i_;
        skip();
        std::size_t a = i_;
        while (i_ < s_.size() &&
               (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '-'))
          ++i_;
        std::string arg(s_.substr(a, i_ - a));
        skip();
        if (arg.empty() || i_ >= s_.size() || s_[i_] != ')') return fail("expected len(CHANNEL)");
        ++i_;
        const json::value& x = st_.get(arg);
        if (x.is_array()) return static_cast<double>(x.as_array().size());
        if (x.is_object()) return static_cast<double>(x.as_object().size());
        if (x.is_string()) return static_cast<double>(x.as_string().size());
        if (x.is_null()) return 0.0;
        return fail("len(" + arg + "): the channel holds no list, object or string");
      }
      const json::value& v = st_.get(name);
      if (v.is_null()) return 0.0;
      if (!v.is_number()) return fail("channel '" + name + "' is not a number");
      return v.to_number<double>();
    }
    return fail("unexpected '" + std::string(1, s_[i_]) + "'");
  }
  std::string_view s_;
  const StateView& st_;
  std::size_t i_ = 0;
};

json::value number_value(double d) {
  if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
  return d;
}

std::string to_text(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : json::serialize(v);
}

}  // namespace

Result<double> eval_expression(std::string_view expr, const StateView& state) {
  return Expr(expr, state).parse();
}

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

// Deterministic filler text of exactly `bytes` bytes (the `lorem` tool: big payloads for demos).
std::string lorem(std::int64_t bytes) {
  static const std::string words =
      "weir holds the level while the water passes: bounded queues, budgets and references keep "
      "agent crews alive under load. ";
  std::string out;
  out.reserve(static_cast<std::size_t>(bytes));
  while (static_cast<std::int64_t>(out.size()) < bytes) out += words;
  out.resize(static_cast<std::size_t>(bytes));
  return out;
}

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

Result<WorkflowGraph> build_workflow_graph(const WorkflowSpec& spec, WorkflowHooks hooks) {
  const ModelCall& model_call = hooks.model_call;
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
  auto tool_of = [&](const std::string& name) -> const ToolSpecEntry* {
    for (const auto& t : spec.tools) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  std::vector<std::string> problems;
  for (const auto& n : spec.nodes) {
    NodeOptions opts;
    opts.max_visits = n.max_visits.value_or(0);
    if (n.retry) {
      opts.max_attempts = static_cast<std::int32_t>(n.retry->max_attempts);
      opts.backoff = std::chrono::milliseconds(n.retry->backoff_ms);
    }
    const json::object& p = n.params;
    auto str = [&](const char* k) {
      return p.contains(k) && p.at(k).is_string() ? std::string(p.at(k).as_string())
                                                  : std::string();
    };
    switch (n.kind) {
      case NodeKind::router:
        b.add_node(
            n.name, [](const StateView&, NodeContext&) -> Result<Update> { return Update(); },
            opts);
        break;
      case NodeKind::set:
        b.add_node(
            n.name,
            [values = p.at("values").as_object()](const StateView& s,
                                                  NodeContext& c) -> Result<Update> {
              Update u;
              for (const auto& [ch, v] : values) {
                if (const auto* o = v.if_object(); o && o->contains("$expr")) {
                  auto r = eval_expression(o->at("$expr").as_string(), s);
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
            opts);
        break;
      case NodeKind::map: {
        const std::string over = str("over"), worker = str("node");
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
            opts);
        b.add_sends(n.name, {worker});
        break;
      }
      case NodeKind::tool: {
        const ToolSpecEntry* t = tool_of(str("tool"));
        const std::string output = str("output");
        const json::value args = p.contains("args") ? p.at("args") : json::value(json::object());
        if (t && t->builtin == "lorem") {
          b.add_node(
              n.name,
              [args, output](const StateView& s, NodeContext& c) -> Result<Update> {
                auto a = render_template(args, s, c.input(), {});
                if (!a) return a.error();
                const auto* bytes = a->is_object() ? a->as_object().if_contains("bytes") : nullptr;
                if (!bytes || !bytes->is_number())
                  return Error(Errc::tool_failed, "lorem: argument 'bytes' must be a number");
                Update u;
                if (!output.empty())
                  u.set(output, json::string(lorem(bytes->to_number<std::int64_t>())));
                return u;
              },
              opts);
        } else if (t && t->builtin == "sleep") {
          // Waits args.ms milliseconds without holding a thread (a stand-in for a slow model or
          // API in demos, benchmarks and tests), then writes the milliseconds waited. It looks
          // at NodeContext::cancelled() every 50 ms, so a cancelled run does not wait it out.
          b.add_async_node(
              n.name,
              [args, output](StateView s, NodeContext& c) -> asio::awaitable<Result<Update>> {
                auto a = render_template(args, s, c.input(), {});
                if (!a) co_return a.error();
                const auto* ms = a->is_object() ? a->as_object().if_contains("ms") : nullptr;
                if (!ms || !ms->is_number() || ms->to_number<double>() < 0)
                  co_return Error(Errc::tool_failed,
                                  "sleep: argument 'ms' must be a number of milliseconds >= 0");
                const auto total = std::chrono::milliseconds(ms->to_number<std::int64_t>());
                const auto until = std::chrono::steady_clock::now() + total;
                asio::steady_timer timer(co_await asio::this_coro::executor);
                while (!c.cancelled() && std::chrono::steady_clock::now() < until) {
                  timer.expires_at(std::min(
                      until, std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
                  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
                }
                Update u;
                if (!output.empty()) u.set(output, total.count());
                co_return u;
              },
              opts);
        } else if (t && t->builtin == "calculator") {
          b.add_node(
              n.name,
              [args, output](const StateView& s, NodeContext& c) -> Result<Update> {
                auto a = render_template(args, s, c.input(), {});
                if (!a) return a.error();
                const auto* e = a->is_object() ? a->as_object().if_contains("expression") : nullptr;
                if (!e)
                  return Error(Errc::tool_failed, "calculator: argument 'expression' is required");
                const std::string expr =
                    e->is_string() ? std::string(e->as_string()) : json::serialize(*e);
                auto r = eval_expression(expr, s);
                if (!r) return Error(Errc::tool_failed, "calculator: " + r.error().message);
                Update u;
                if (!output.empty()) u.set(output, number_value(*r));
                return u;
              },
              opts);
        } else if (hooks.tool_call && (t || str("tool").find('/') != std::string::npos)) {
          // A declared tool, or an MCP server's ("server/tool"; the loader checked the server).
          const std::string tool = t ? t->name : str("tool");
          ToolCall call = hooks.tool_call;
          b.add_async_node(
              n.name,
              [args, output, tool, call](StateView s,
                                         NodeContext& c) -> asio::awaitable<Result<Update>> {
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
              opts);
        } else {
          problems.push_back("node '" + n.name + "': the " + (t ? t->builtin : std::string("?")) +
                             " tool needs the tools layer (weir run provides it; in C++ use "
                             "agents::build_workflow)");
        }
        break;
      }
      case NodeKind::agent: {
        if (!hooks.agent_call) {
          problems.push_back("node '" + n.name +
                             "': agent nodes need the agents layer (weir run provides it; in C++ "
                             "use agents::build_workflow)");
          break;
        }
        const std::string agent = str("agent"), input = str("input"), output = str("output");
        AgentCall call = hooks.agent_call;
        b.add_async_node(
            n.name,
            [agent, input, output, call](StateView s,
                                         NodeContext& c) -> asio::awaitable<Result<Update>> {
              json::value in = input.empty() ? json::value(s.to_object()) : s.get(input);
              if (!c.input().is_null()) in = c.input();  // a map worker: the item
              auto op = call(agent, std::move(in), c);
              auto r = co_await std::move(op);
              if (!r) co_return r.error();
              Update u;
              if (!output.empty()) u.set(output, std::move(*r));
              co_return u;
            },
            opts);
        break;
      }
      case NodeKind::interrupt: {
        const json::value payload = p.contains("payload") ? p.at("payload") : json::value();
        const std::string output = str("output");
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
            opts);
        break;
      }
      case NodeKind::subgraph: {
        auto it = spec.subgraphs.find(n.name);
        if (it == spec.subgraphs.end() || !it->second) {
          problems.push_back("node '" + n.name + "': its subgraph file was not loaded");
          break;
        }
        auto child = build_workflow_graph(*it->second, hooks);
        if (!child) {
          problems.push_back("node '" + n.name + "': " + child.error().message);
          break;
        }
        SubgraphOptions so;
        for (const char* key : {"input", "output"}) {
          if (const auto* m = p.if_contains(key); m && m->is_object())
            for (const auto& [from, to] : m->as_object())
              (std::string(key) == "input" ? so.input : so.output)
                  .emplace_back(std::string(from), std::string(to.as_string()));
        }
        if (const auto* l = p.if_contains("limits"); l && l->is_object()) {
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
        break;
      }
      case NodeKind::llm: {
        if (!model_call) {
          problems.push_back(
              "node '" + n.name +
              "': llm nodes need a model (run with weir run, which loads the workflow's models)");
          break;
        }
        const std::string model = str("model"), prompt = str("prompt"), system = str("system"),
                          output = str("output"), messages = str("messages");
        const std::int32_t max_tokens =
            p.contains("max_tokens") ? static_cast<std::int32_t>(p.at("max_tokens").as_int64())
                                     : 128;
        // With an output_schema the reply is JSON valid against it: the output channel gets
        // the parsed value, not its text.
        std::optional<json::object> schema;
        if (const auto* os = p.if_contains("output_schema"); os && os->is_object())
          schema = os->as_object();
        b.add_async_node(
            n.name,
            [=](StateView s, NodeContext& c) -> asio::awaitable<Result<Update>> {
              auto pr = render_template(json::value(prompt), s, c.input(), {});
              if (!pr) co_return pr.error();
              std::string text =
                  pr->is_string() ? std::string(pr->as_string()) : json::serialize(*pr);
              if (!messages.empty()) {
                for (const auto& m :
                     s.get(messages).is_array() ? s.get(messages).as_array() : json::array()) {
                  if (m.is_object() && m.as_object().contains("content"))
                    text += "\n" + to_text(m.at("content"));
                }
              }
              auto r = co_await model_call(model, system, text, max_tokens, schema, c);
              if (!r) co_return r.error();
              if (auto st = c.charge_tokens(static_cast<std::int64_t>(r->size() / 4 + 1)); !st)
                co_return st.error();
              Update u;
              if (!output.empty() && schema) {
                boost::system::error_code ec;
                json::value v = json::parse(*r, ec);
                if (ec)
                  co_return Error(Errc::model_error,
                                  "the reply is not JSON although the node has an output_schema "
                                  "(it was cut at max_tokens " +
                                      std::to_string(max_tokens) + "?): " + *r);
                u.set(output, std::move(v));
              } else if (!output.empty()) {
                u.set(output, json::string(*r));
              }
              if (!messages.empty())
                u.set(messages, json::object{{"role", "assistant"}, {"content", *r}});
              co_return u;
            },
            opts);
        break;
      }
      default:
        problems.push_back("node '" + n.name + "': kind '" + node_kind_name(n.kind) +
                           "' is not runnable");
    }
  }
  for (const auto& e : spec.edges) {
    for (const auto& t : e.to) b.add_edge(e.from, t);
    if (!e.route) continue;
    RouteSpec r = *e.route;
    b.add_conditional_edges(
        e.from,
        [r](const StateView& s) -> std::vector<std::string> {
          switch (r.form) {
            case RouteSpec::Form::cases: {
              const json::value& v = s.get(r.on);
              const std::string key =
                  v.is_string() ? std::string(v.as_string()) : json::serialize(v);
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
              for (const auto& ch : {std::string("messages")}) {
                const json::value& msgs = s.get(ch);
                if (msgs.is_array() && !msgs.as_array().empty()) {
                  const auto& last = msgs.as_array().back();
                  if (last.is_object() && last.as_object().contains("tool_calls") &&
                      last.at("tool_calls").is_array() &&
                      !last.at("tool_calls").as_array().empty()) {
                    return r.tool_calls_targets;
                  }
                }
              }
              return r.default_targets;
            }
          }
          return {};
        },
        r.all_targets());
  }
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + spec.file.string() + ": " + p;
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
