// The nodes section of a workflow file: each node's common keys, then its kind's checker; and
// the files that subgraph nodes load (each by a Loader of its own).
#include <algorithm>
#include <memory>

#include <boost/json.hpp>

#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/text.hpp"
#include "workflow_loader.hpp"

namespace weir::graph {

void Loader::set_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                      std::vector<std::string_view>& allowed) {
  allow(allowed, {"values"});
  if (const auto* vals = object_at(no, "values", ptr, true)) {
    for (const auto& [ck, cv] : *vals) {
      std::string vp = json_pointer_append(ptr + "/values", ck);
      if (!has(channel_names_, ck)) error(vp, unknown("channel", ck, channel_names_));
      if (const auto* eo = cv.if_object(); eo && eo->contains("$expr")) {
        if (!eo->at("$expr").is_string())
          error(vp + "/$expr", "an expression must be a string like \"counter + 1\"");
        else
          check_expr(eo->at("$expr").as_string(), vp + "/$expr");
      }
    }
  }
}

void Loader::tool_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                       std::vector<std::string_view>& allowed) {
  allow(allowed, {"tool", "args", "output"});
  if (auto t = string_at(no, "tool", ptr, true); t && !has(tool_names_, *t) && !mcp_tool(*t)) {
    error(ptr + "/tool",
          unknown("tool", *t, tool_names_) +
              (mcp_names_.list.empty() ? "" : " (an MCP server's tool is \"server/tool\")"));
  }
  if (const auto* args = object_at(no, "args", ptr, false)) check_templates(*args, ptr + "/args");
  channel_ref(no, "output", ptr, false);
}

void Loader::llm_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                      std::vector<std::string_view>& allowed) {
  allow(allowed,
        {"model", "prompt", "system", "messages", "output", "max_tokens", "output_schema"});
  if (const auto* os = no.if_contains("output_schema"); os && !os->is_object())
    error(ptr + "/output_schema", "expected a JSON Schema object");
  if (auto m = string_at(no, "model", ptr, true); m && !has(model_names_, *m)) {
    error(ptr + "/model", unknown("model", *m, model_names_));
  }
  for (const char* key : {"prompt", "system"})
    if (string_at(no, key, ptr, false)) check_templates(no.at(key), ptr + "/" + key);
  channel_ref(no, "messages", ptr, false);
  channel_ref(no, "output", ptr, false);
  (void)int_at(no, "max_tokens", ptr, 1, kMaxTokens);
  if (!no.contains("prompt") && !no.contains("messages")) {
    error(ptr, "an llm node needs a \"prompt\" or a \"messages\" channel");
  }
}

void Loader::agent_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                        std::vector<std::string_view>& allowed) {
  allow(allowed, {"agent", "input", "output"});
  if (auto a = string_at(no, "agent", ptr, true); a && !has(agent_names_, *a)) {
    error(ptr + "/agent", unknown("agent", *a, agent_names_));
  }
  channel_ref(no, "input", ptr, false);
  channel_ref(no, "output", ptr, false);
}

void Loader::crew_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                       std::vector<std::string_view>& allowed) {
  (void)n;
  allow(allowed, {"crew", "model", "inputs", "messages", "output", "chat_input"});
  if (auto c = string_at(no, "crew", ptr, true); c && !has(crew_names_, *c))
    error(ptr + "/crew", unknown("crew", *c, crew_names_));
  if (auto m = string_at(no, "model", ptr, false); m && !has(model_names_, *m))
    error(ptr + "/model", unknown("model", *m, model_names_));
  if (!no.contains("model") && model_names_.list.size() > 1) {  // (the build found it, unplaced)
    std::string list;
    for (const auto& m : model_names_.list) list += (list.empty() ? "" : ", ") + m;
    error(ptr, "a crew node needs a \"model\" when the file declares " +
                   std::to_string(model_names_.list.size()) + " models (" + list + ")");
  }
  if (const auto* in = object_at(no, "inputs", ptr, false)) check_templates(*in, ptr + "/inputs");
  channel_ref(no, "messages", ptr, false);
  channel_ref(no, "output", ptr, false);
  // The crew appends its agents' messages there: a messages channel, not its output's.
  if (auto m = string_at(no, "messages", ptr, false)) {
    const auto ch = std::find_if(spec_.channels.begin(), spec_.channels.end(),
                                 [&](const ChannelSpec& c) { return c.name == *m; });
    if (ch != spec_.channels.end() && ch->reducer != ReducerKind::messages)
      error(ptr + "/messages", "channel '" + *m +
                                   "' is not a messages channel (\"reducer\": \"messages\"), "
                                   "which the crew appends its agents' messages to");
  }
  if (auto ci = string_at(no, "chat_input", ptr, false); ci && !no.contains("messages"))
    error(ptr + "/chat_input", "\"chat_input\" needs a \"messages\" channel to read from");
  // The crew's inputs that the node fills are inputs the crew has: a default in its "inputs",
  // or a {{name}} its tasks' texts use (a name it lacks would fill nothing, silently).
  const auto crew = string_at(no, "crew", ptr, true);
  const auto* entry = crew ? spec_.crews.if_contains(*crew) : nullptr;
  if (!entry || !entry->is_object()) return;
  const std::vector<std::string> inputs = crew_inputs(entry->as_object());
  auto check_input = [&](const std::string& name, const std::string& at) {
    if (has(inputs, name)) return;
    std::string list;
    for (const auto& i : inputs) list += (list.empty() ? "" : ", ") + i;
    error(at, "crew '" + *crew + "' has no input '" + name +
                  "' (its inputs: " + (list.empty() ? std::string("none") : list) + ")");
  };
  if (const auto* in = no.if_contains("inputs"); in && in->is_object())
    for (const auto& kv : in->as_object())
      check_input(std::string(kv.key()), json_pointer_append(ptr + "/inputs", kv.key()));
  // ("request", the default, is taken as written too: a crew that names it nowhere gets it
  // as an input its tasks do not read, with or without the key.)
  if (const auto* ci = no.if_contains("chat_input"); ci && ci->is_string() && *ci != "request")
    check_input(std::string(ci->as_string()), ptr + "/chat_input");
}

std::vector<std::string> Loader::crew_inputs(const json::object& crew) {
  std::vector<std::string> out;
  auto add = [&](std::string n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(std::move(n));
  };
  if (const auto* in = crew.if_contains("inputs"); in && in->is_object())
    for (const auto& kv : in->as_object()) add(std::string(kv.key()));
  const auto* tasks = crew.if_contains("tasks");
  for (const auto& t : tasks && tasks->is_array() ? tasks->as_array() : json::array()) {
    for (const char* key : {"description", "expected_output"}) {
      const auto* v = t.is_object() ? t.as_object().if_contains(key) : nullptr;
      if (!v || !v->is_string()) continue;
      const std::string_view text = v->as_string();
      for (auto at = text.find("{{"); at != std::string_view::npos; at = text.find("{{", at + 2)) {
        const auto end = text.find("}}", at + 2);
        if (end == std::string_view::npos) break;
        std::string_view name = text.substr(at + 2, end - at - 2);
        while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
        while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
        if (!name.empty() && name.find_first_of(".{} ") == std::string_view::npos)
          add(std::string(name));
      }
    }
  }
  return out;
}

void Loader::map_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                      std::vector<std::string_view>& allowed) {
  allow(allowed, {"over", "node", "item_key", "output", "max_concurrency"});  // refused below
  channel_ref(no, "over", ptr, true);
  if (auto w = string_at(no, "node", ptr, true)) {
    if (!has(node_names_, *w))
      error(ptr + "/node", unknown("node", *w, node_names_));
    else if (*w == n.name)
      error(ptr + "/node", "a map node cannot run itself per item");
    else
      map_workers_[*w] = n.name;
  }
  // Once accepted and ignored; refused now so that nobody relies on them.
  if (no.contains("item_key"))
    error(ptr + "/item_key",
          "a map node has no \"item_key\": the worker sees each item as {{item}} (and "
          "{{item.field}})");
  if (no.contains("output"))
    error(ptr + "/output",
          "a map node has no \"output\": the worker's own \"output\" channel collects "
          "each item's result, merged by that channel's reducer");
  if (no.contains("max_concurrency"))
    error(ptr + "/max_concurrency",
          "a map node has no \"max_concurrency\": items run at most "
          "limits.max_concurrency at once");
}

void Loader::subgraph_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                           std::vector<std::string_view>& allowed) {
  allow(allowed, {"path", "input", "output", "limits"});
  if (auto p = string_at(no, "path", ptr, true)) subgraph(n.name, *p, ptr + "/path");
  // input: this workflow's channel -> the subgraph's; output: the subgraph's -> this one's.
  const auto sub = spec_.subgraphs.find(n.name);
  std::vector<std::string> child;
  if (sub != spec_.subgraphs.end())
    for (const auto& c : sub->second->channels) child.push_back(c.name);
  for (const char* key : {"input", "output"}) {
    const auto* m = object_at(no, key, ptr, false);
    if (!m) continue;
    const bool in = std::string_view(key) == "input";
    for (const auto& [mk, mv] : *m) {
      const std::string at = json_pointer_append(ptr + "/" + key, mk);
      if (!mv.is_string()) {
        error(at, "expected a channel name, got " + type_name(mv));
        continue;
      }
      const std::string ours(in ? std::string_view(mk) : std::string_view(mv.as_string()));
      const std::string theirs(in ? std::string_view(mv.as_string()) : std::string_view(mk));
      if (!has(channel_names_, ours)) error(at, "maps " + unknown("channel", ours, channel_names_));
      if (sub != spec_.subgraphs.end() && !has(child, theirs))
        error(at, "maps the subgraph's " + unknown("channel", theirs, child));
    }
  }
  if (const auto* l = object_at(no, "limits", ptr, false)) (void)limits(*l, ptr + "/limits");
}

void Loader::interrupt_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                            std::vector<std::string_view>& allowed) {
  allow(allowed, {"payload", "output"});
  if (const auto* p = no.if_contains("payload")) check_templates(*p, ptr + "/payload");
  channel_ref(no, "output", ptr, false);
}

void Loader::nodes(json::object& o) {
  const auto kinds = node_kind_names();
  static const std::vector<std::string_view> common = {"kind", "description", "max_visits", "retry",
                                                       "timeout_ms"};
  if (o.empty()) error("/nodes", "a workflow needs at least one node");
  spec_.nodes.reserve(o.size());
  // The nodes' keys lie among their settings in the document's slabs (the parser allocates
  // a key when it reads it): move the settings out (no copy) and free the keys first, so that
  // each slab is freed as soon as the nodes in it are read.
  std::vector<json::value> bodies;
  bodies.reserve(o.size());
  for (auto& [k, v] : o) {
    node_names_.emplace_back(k);
    bodies.push_back(std::move(v));
  }
  o = json::object(o.storage());
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    const std::string& k = node_names_.list[i];
    json::value& v = bodies[i];
    std::string ptr = json_pointer_append("/nodes", k);
    if (!check_name(k, ptr, "node")) continue;
    if (!v.is_object()) {
      error(ptr, "expected a node object with a \"kind\", got " + type_name(v));
      continue;
    }
    NodeSpec n;
    n.name = k;
    const auto& no = v.as_object();
    auto kind = string_at(no, "kind", ptr, true);
    if (!kind) continue;
    auto it = std::find(kinds.begin(), kinds.end(), *kind);
    if (it == kinds.end()) {
      error(ptr + "/kind", unknown("node kind", *kind, kinds));
      continue;
    }
    n.kind = static_cast<NodeKind>(it - kinds.begin());
    if (auto d = string_at(no, "description", ptr, false)) n.description = *d;
    n.max_visits = int_at(no, "max_visits", ptr, 1);
    n.timeout_ms = ms_at(no, "timeout_ms", ptr, 1);
    if (const auto* r = object_at(no, "retry", ptr, false)) {
      check_keys(*r, ptr + "/retry", {"max_attempts", "backoff_ms", "max_backoff_ms"});
      RetrySpec rs;
      if (auto a = int_at(*r, "max_attempts", ptr + "/retry", 1, kMaxAttempts))
        rs.max_attempts = *a;
      if (auto b = ms_at(*r, "backoff_ms", ptr + "/retry", 0)) rs.backoff_ms = *b;
      if (auto m = ms_at(*r, "max_backoff_ms", ptr + "/retry", 0)) rs.max_backoff_ms = *m;
      n.retry = rs;
    }
    std::vector<std::string_view> allowed = common;
    switch (n.kind) {
      case NodeKind::set:
        set_node(n, no, ptr, allowed);
        break;
      case NodeKind::tool:
        tool_node(n, no, ptr, allowed);
        break;
      case NodeKind::llm:
        llm_node(n, no, ptr, allowed);
        break;
      case NodeKind::agent:
        agent_node(n, no, ptr, allowed);
        break;
      case NodeKind::router:
        break;
      case NodeKind::map:
        map_node(n, no, ptr, allowed);
        break;
      case NodeKind::subgraph:
        subgraph_node(n, no, ptr, allowed);
        break;
      case NodeKind::interrupt:
        interrupt_node(n, no, ptr, allowed);
        break;
      case NodeKind::crew:
        crew_node(n, no, ptr, allowed);
        break;
      case NodeKind::code:  // not a file's kind (node_kind_names has none)
        break;
    }
    check_keys(no, ptr, allowed);
    // The settings, less those read into `n`, in a table of their own size; then the node's
    // part of the document is freed (a file may hold hundreds of thousands of nodes).
    n.params.reserve(no.size() - 1 - no.contains("description"));
    for (const auto& [pk, pv] : no)
      if (pk != "kind" && pk != "description") n.params.emplace(pk, pv);
    v.emplace_null();
    spec_.nodes.push_back(std::move(n));
  }
}

bool Loader::mcp_tool(std::string_view name) const {
  const auto slash = name.find('/');
  return slash != std::string_view::npos && slash + 1 < name.size() &&
         has(mcp_names_, name.substr(0, slash));
}

void Loader::subgraph(const std::string& node, const std::string& rel, const std::string& ptr) {
  fs::path p = resolve(rel);
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(p, ec);
  if (std::find(stack_.begin(), stack_.end(), canon) != stack_.end()) {
    error(ptr, "subgraph '" + rel + "' includes itself (directly or through other subgraphs)");
    return;
  }
  if (depth_ <= 0) {
    error(ptr, "subgraphs nest too deeply (more than 8 files)");
    return;
  }
  auto file = parse_json_file(p, kWorkflowJson);
  if (!file && !file.error().is(Errc::corrupt_data)) {
    error(ptr, "cannot read subgraph file: " + file.error().message);
    return;
  }
  auto stack = stack_;
  stack.push_back(canon);
  Loader child(file ? std::string_view(file->text) : std::string_view(), p, checks_, depth_ - 1,
               std::move(stack));
  WorkflowLoad sub = file ? child.run(std::move(file->parsed)) : child.failed(file.error());
  if (!sub.ok()) {
    for (auto& d : sub.diagnostics) fields_.add(std::move(d));
    error(ptr, "subgraph '" + rel + "' has errors (listed above)");
    return;
  }
  spec_.subgraphs[node] = std::make_shared<const WorkflowSpec>(std::move(*sub.spec));
}

}  // namespace weir::graph
