#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <boost/json.hpp>

#include "channel_defaults.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/text.hpp"
#include "workflow_loader.hpp"

namespace weir::graph {

WorkflowLoad Loader::run() {
  auto parsed = parse_json(text_, file_.string(), kWorkflowJson);
  if (!parsed) return failed(parsed.error());
  return run(std::move(*parsed));
}

WorkflowLoad Loader::failed(const Error& e) const {
  WorkflowLoad out;
  out.diagnostics.push_back({file_.string(), 0, 0, "", e.message});
  return out;
}

WorkflowLoad Loader::run(ParsedJson parsed) {
  WorkflowLoad out;
  // Emplaced, not assigned: assigning a Boost.JSON value to one with another memory resource
  // copies the whole document.
  parsed_.emplace(std::move(parsed));
  if (!parsed_->value.is_object()) {
    error("", "a workflow must be a JSON object with \"name\", \"nodes\" and \"edges\"");
  } else {
    load(parsed_->value.as_object());
  }
  out.diagnostics = fields_.diagnostics();
  if (out.diagnostics.empty()) out.spec = std::move(spec_);
  return out;
}

JsonLocation Loader::locate(std::string_view pointer) {
  if (text_.empty() && !reread_) {  // the caller released the text: read the file again
    auto text = read_json_file(file_);
    reread_.emplace(text ? std::move(*text) : std::string());
    text_ = *reread_;
  }
  return parsed_->locate(text_, pointer);
}

std::string Loader::unknown(std::string_view what, std::string_view name,
                            std::span<const std::string> known, const char* also) {
  if (also) {
    const std::array<std::string, 1> one = {also};
    if (closest_match(name, one)) return unknown_name_message(what, name, one);
    if (known.size() <= 20 && !known.empty()) {
      std::vector<std::string> all(known.begin(), known.end());
      all.emplace_back(also);
      return unknown_name_message(what, name, all);
    }
  }
  return unknown_name_message(what, name, known);
}

std::string Loader::unknown(std::string_view what, std::string_view name, const Names& known,
                            const char* also) {
  return unknown(what, name, known.list, also);
}

bool Loader::check_name(const std::string& name, const std::string& ptr, std::string_view what) {
  if (!is_plain_name(name)) {
    error(ptr, std::string(what) + " name '" + name +
                   "' must start with a letter or '_' and use only letters, digits, '_' and '-'");
    return false;
  }
  if (name == "START" || name == "END") {
    error(ptr, "'" + name + "' is reserved; choose another " + std::string(what) + " name");
    return false;
  }
  return true;
}

std::vector<std::string> Loader::targets_at(const json::value& v, const std::string& ptr) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.emplace_back(v.as_string());
  } else if (v.is_array() && !v.as_array().empty()) {
    std::size_t i = 0;
    for (const auto& t : v.as_array()) {
      if (t.is_string())
        out.emplace_back(t.as_string());
      else
        error(json_pointer_append(ptr, i), "expected a node name, got " + type_name(t));
      ++i;
    }
  } else {
    error(ptr, "expected a node name or a non-empty list of node names, got " + type_name(v));
  }
  return out;
}

SectionContext Loader::context() const {
  return {fs::absolute(file_).parent_path(), model_names_.list, tool_names_.list, mcp_names_.list,
          channel_names_.list};
}

void Loader::check_expr(std::string_view e, const std::string& ptr) {
  if (!checks_.expression) return;
  for (const auto& problem : checks_.expression(e, context()))
    error(ptr, "expression \"" + utf8_abbreviate(e, 60) + "\": " + problem);
}

void Loader::section(const json::object& o, std::string_view key, std::string_view what,
                     const SectionCheck& check, Names& names) {
  for (const auto& [k, v] : o) {
    const std::string ptr = json_pointer_append("/" + std::string(key), k);
    if (!check_name(std::string(k), ptr, what)) continue;
    names.emplace_back(k);
    if (check)
      check(k, v, ptr, context(), fields_);
    else if (!v.is_object())
      error(ptr, "expected an object, got " + type_name(v));
  }
}

void Loader::check_templates(const json::value& v, const std::string& ptr) {
  if (const auto* o = v.if_object()) {
    for (const auto& [k, x] : *o) check_templates(x, json_pointer_append(ptr, k));
  } else if (const auto* a = v.if_array()) {
    for (std::size_t i = 0; i < a->size(); ++i)
      check_templates((*a)[i], json_pointer_append(ptr, i));
  } else if (const auto* s = v.if_string()) {
    std::string_view t = *s;
    for (std::size_t p = t.find("{{"); p != std::string_view::npos; p = t.find("{{", p + 2)) {
      std::size_t q = t.find("}}", p + 2);
      if (q == std::string_view::npos) break;
      std::string_view body = t.substr(p + 2, q - p - 2);
      while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front())))
        body.remove_prefix(1);
      if (!body.starts_with("state.")) continue;
      body.remove_prefix(6);
      std::string name(body.substr(0, std::min(body.find('.'), body.find_first_of(" }"))));
      if (!has(channel_names_, name))
        error(ptr, "template {{" + std::string(t.substr(p + 2, q - p - 2)) +
                       "}}: " + unknown("channel", name, channel_names_));
    }
  }
}

void Loader::load(json::object& root) {
  spec_.file = fs::absolute(file_).lexically_normal();
  check_keys(
      root, "",
      {"$schema", "name", "description", "version", "limits", "state", "input", "output", "models",
       "tools", "mcp_servers", "agents", "tasks", "crews", "group_chats", "nodes", "edges"});
  if (auto n = string_at(root, "name", "", true)) {
    if (is_plain_name(*n))
      spec_.name = *n;
    else
      error("/name", "workflow name '" + *n + "' must use only letters, digits, '_' and '-'");
  }
  if (auto d = string_at(root, "description", "", false)) spec_.description = *d;
  if (const auto* v = root.if_contains("version"); v && !(v->is_int64() && v->as_int64() == 1)) {
    error("/version", "unsupported version: this weir reads version 1");
  }
  if (const auto* l = object_at(root, "limits", "", false)) spec_.limits = limits(*l, "/limits");
  if (const auto* s = object_at(root, "state", "", false)) state(*s);
  // The sections of the layers above, in this order (an agent names models, tools and
  // servers): kept as written, checked by `checks_`.
  struct Section {
    const char* key;
    const char* what;
    const SectionCheck* check;
    Names* names;
    json::object* dst;
  };
  for (const Section& sec :
       {Section{"models", "model", &checks_.model, &model_names_, &spec_.models},
        {"tools", "tool", &checks_.tool, &tool_names_, &spec_.tools},
        {"mcp_servers", "MCP server", &checks_.mcp_server, &mcp_names_, &spec_.mcp_servers},
        {"agents", "agent", &checks_.agent, &agent_names_, &spec_.agents}}) {
    if (const auto* o = object_at(root, sec.key, "", false)) {
      section(*o, sec.key, sec.what, *sec.check, *sec.names);
      *sec.dst = json::object(*o, json::storage_ptr());  // off the document's slabs
    }
  }
  // Crews: names and objects here; their settings are the agents layer's (its check).
  if (const auto* o = object_at(root, "crews", "", false)) {
    section(*o, "crews", "crew", checks_.crew, crew_names_);
    spec_.crews = json::object(*o, json::storage_ptr());
  }
  for (auto [key, dst] : {std::pair{"tasks", &spec_.tasks}, {"group_chats", &spec_.group_chats}}) {
    if (const auto* o = object_at(root, key, "", false))
      *dst = json::object(*o, json::storage_ptr());
  }
  for (auto [key, dst] : {std::pair{"input", &spec_.input}, {"output", &spec_.output}}) {
    if (const auto* v = root.if_contains(key)) channel_list(*v, std::string("/") + key, *dst);
  }
  if (object_at(root, "nodes", "", true)) nodes(root.at("nodes").as_object());
  if (auto* e = root.if_contains("edges")) {
    if (!e->is_array())
      error("/edges", "expected an array of edges, got " + type_name(*e));
    else
      edges(e->as_array());
  } else {
    error("", "missing required key 'edges'");
  }
  if (fields_.ok()) structure();
}

LimitsSpec Loader::limits(const json::object& o, const std::string& ptr) {
  LimitsSpec l;
  check_keys(
      o, ptr,
      {"recursion_limit", "max_concurrency", "deadline_ms", "inline_limit", "max_state_bytes",
       "token_budget", "max_concurrent_runs", "max_queued_runs", "max_thread_steps", "memory"});
  l.recursion_limit = int_at(o, "recursion_limit", ptr, 1, kMaxRecursionLimit);
  l.max_concurrency = int_at(o, "max_concurrency", ptr, 1, kMaxConcurrency);
  l.deadline_ms = ms_at(o, "deadline_ms", ptr, 1);
  l.inline_limit = int_at(o, "inline_limit", ptr, 64);
  l.max_state_bytes = bytes_at(o, "max_state_bytes", ptr);
  l.token_budget = int_at(o, "token_budget", ptr, 1);
  l.max_concurrent_runs = int_at(o, "max_concurrent_runs", ptr, 1, kMaxConcurrentRuns);
  l.max_queued_runs = int_at(o, "max_queued_runs", ptr, 0, kMaxQueuedRuns);
  l.max_thread_steps = int_at(o, "max_thread_steps", ptr, 0);
  if (const auto* m = object_at(o, "memory", ptr, false)) {
    std::string mp = ptr + "/memory";
    check_keys(*m, mp, {"total", "run_state", "artifacts", "history", "kv_cache", "activations"});
    l.memory.total = bytes_at(*m, "total", mp);
    l.memory.run_state = bytes_at(*m, "run_state", mp);
    l.memory.artifacts = bytes_at(*m, "artifacts", mp);
    l.memory.history = bytes_at(*m, "history", mp);
    l.memory.kv_cache = bytes_at(*m, "kv_cache", mp);
    l.memory.activations = bytes_at(*m, "activations", mp);
  }
  return l;
}

void Loader::state(const json::object& o) {
  const auto reducers = reducer_names();
  for (const auto& [k, v] : o) {
    std::string ptr = json_pointer_append("/state", k);
    ChannelSpec c;
    c.name = k;
    if (!check_name(c.name, ptr, "channel")) continue;
    if (!v.is_object()) {
      error(ptr, "expected a channel object like {\"reducer\": \"append\"}, got " + type_name(v));
      continue;
    }
    const auto& co = v.as_object();
    check_keys(co, ptr, {"reducer", "default", "max_items", "max_bytes", "window", "keep_system"});
    if (auto r = string_at(co, "reducer", ptr, false)) {
      auto it = std::find(reducers.begin(), reducers.end(), *r);
      if (it == reducers.end())
        error(ptr + "/reducer", unknown("reducer", *r, reducers));
      else
        c.reducer = static_cast<ReducerKind>(it - reducers.begin());
    }
    if (const auto* d = co.if_contains("default")) {
      c.default_value.emplace(*d, json::storage_ptr());  // off the document's slabs
      if (auto why = default_problem(c.reducer, *d)) error(ptr + "/default", "the channel " + *why);
    }
    c.max_items = int_at(co, "max_items", ptr, 1);
    c.max_bytes = bytes_at(co, "max_bytes", ptr);
    if (const auto* w = object_at(co, "window", ptr, false)) {
      check_keys(*w, ptr + "/window", {"max_messages", "max_tokens"});
      c.window_max_messages = int_at(*w, "max_messages", ptr + "/window", 1);
      c.window_max_tokens = int_at(*w, "max_tokens", ptr + "/window", 1);
    }
    if (auto ks = bool_at(co, "keep_system", ptr)) c.keep_system = *ks;
    if (c.max_items && c.reducer != ReducerKind::append)
      error(ptr + "/max_items", "max_items applies to the append reducer only");
    if ((co.contains("window") || co.contains("keep_system")) &&
        c.reducer != ReducerKind::messages) {
      error(ptr, "window and keep_system apply to the messages reducer only");
    }
    channel_names_.push_back(c.name);
    spec_.channels.push_back(std::move(c));
  }
}

void Loader::channel_list(const json::value& v, const std::string& ptr,
                          std::vector<std::string>& dst) {
  if (!v.is_array()) {
    error(ptr, "expected a list of channel names, got " + type_name(v));
    return;
  }
  std::size_t i = 0;
  for (const auto& x : v.as_array()) {
    std::string p = json_pointer_append(ptr, i++);
    if (!x.is_string()) {
      error(p, "expected a channel name, got " + type_name(x));
    } else if (!has(channel_names_, x.as_string())) {
      error(p, unknown("channel", x.as_string(), channel_names_));
    } else {
      dst.emplace_back(x.as_string());
    }
  }
}

void Loader::channel_ref(const json::object& o, std::string_view key, const std::string& ptr,
                         bool required) {
  if (auto c = string_at(o, key, ptr, required); c && !has(channel_names_, *c)) {
    error(json_pointer_append(ptr, key), unknown("channel", *c, channel_names_));
  }
}

void Loader::edges(json::array& a) {
  if (a.empty()) error("/edges", "a workflow needs at least one edge (from START)");
  spec_.edges.reserve(a.size());
  auto check_target = [&](const std::string& t, const std::string& ptr) {
    if (t == "START")
      error(ptr, "an edge cannot lead to START");
    else if (t != "END" && !has(node_names_, t))
      error(ptr, unknown("node", t, node_names_, "END"));
  };
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::string ptr = json_pointer_append("/edges", i);
    if (!a[i].is_object()) {
      error(ptr, "expected an edge object like {\"from\": \"a\", \"to\": \"b\"}, got " +
                     type_name(a[i]));
      continue;
    }
    const auto& eo = a[i].as_object();
    check_keys(eo, ptr, {"from", "to", "route"});
    EdgeSpec e;
    if (auto f = string_at(eo, "from", ptr, true)) {
      e.from = *f;
      if (*f == "END")
        error(ptr + "/from", "an edge cannot start at END");
      else if (*f != "START" && !has(node_names_, *f))
        error(ptr + "/from", unknown("node", *f, node_names_, "START"));
    }
    const bool has_to = eo.contains("to"), has_route = eo.contains("route");
    if (has_to == has_route) {
      error(ptr, "an edge needs exactly one of \"to\" (static) or \"route\" (conditional)");
      continue;
    }
    if (has_to) {
      e.to = targets_at(eo.at("to"), ptr + "/to");
      for (std::size_t j = 0; j < e.to.size(); ++j) {
        check_target(e.to[j],
                     eo.at("to").is_array() ? json_pointer_append(ptr + "/to", j) : ptr + "/to");
      }
    } else if (const auto* r = object_at(eo, "route", ptr, true)) {
      e.route = std::make_shared<const RouteSpec>(route(*r, ptr + "/route", check_target));
    }
    spec_.edges.push_back(std::move(e));
    a[i].emplace_null();
  }
  a = json::array(a.storage());
}

template <class Check>
RouteSpec Loader::route(const json::object& r, const std::string& ptr, Check check_target) {
  static const std::vector<std::string> ops = {
      "==", "!=", "<", "<=", ">", ">=", "contains", "exists"};
  RouteSpec rs;
  check_keys(r, ptr, {"on", "cases", "default", "when", "then", "else", "tool_calls"});
  const int forms = int(r.contains("on")) + int(r.contains("when")) + int(r.contains("tool_calls"));
  if (forms != 1) {
    error(ptr,
          "a route needs exactly one of \"on\" (with \"cases\"), \"when\" (with "
          "\"then\"/\"else\") or \"tool_calls\"");
    return rs;
  }
  auto targets = [&](std::string_view key, std::vector<std::string>& dst, bool required) {
    const json::value* v = r.if_contains(key);
    if (!v) {
      if (required) error(ptr, "missing required key '" + std::string(key) + "'");
      return;
    }
    std::string p = json_pointer_append(ptr, key);
    dst = targets_at(*v, p);
    for (const auto& t : dst) check_target(t, p);
  };
  if (r.contains("on")) {
    rs.form = RouteSpec::Form::cases;
    if (auto on = string_at(r, "on", ptr, true)) {
      rs.on = *on;
      if (!has(channel_names_, *on)) error(ptr + "/on", unknown("channel", *on, channel_names_));
    }
    if (const auto* cases = object_at(r, "cases", ptr, true)) {
      for (const auto& [ck, cv] : *cases) {
        std::string p = json_pointer_append(ptr + "/cases", ck);
        auto t = targets_at(cv, p);
        for (const auto& x : t) check_target(x, p);
        rs.cases.emplace_back(std::string(ck), std::move(t));
      }
    }
    targets("default", rs.default_targets, true);
    for (const char* k : {"then", "else"})
      if (r.contains(k))
        error(json_pointer_append(ptr, k), "\"then\"/\"else\" belong to a \"when\" route");
  } else if (r.contains("when")) {
    rs.form = RouteSpec::Form::when;
    if (const auto* w = object_at(r, "when", ptr, true)) {
      std::string wp = ptr + "/when";
      check_keys(*w, wp, {"channel", "op", "value"});
      if (auto c = string_at(*w, "channel", wp, true)) {
        rs.when_channel = *c;
        if (!has(channel_names_, *c))
          error(wp + "/channel", unknown("channel", *c, channel_names_));
      }
      if (auto op = string_at(*w, "op", wp, true)) {
        if (!has(ops, *op)) error(wp + "/op", unknown("operator", *op, ops));
        rs.when_op = *op;
        if (*op != "exists" && !w->contains("value"))
          error(wp, "the operator '" + *op + "' needs a \"value\"");
      }
      if (const auto* v = w->if_contains("value"))
        rs.when_value.emplace(*v, json::storage_ptr());  // off the document's slabs
    }
    targets("then", rs.then_targets, true);
    targets("else", rs.else_targets, true);
  } else {
    rs.form = RouteSpec::Form::tool_calls;
    targets("tool_calls", rs.tool_calls_targets, true);
    targets("default", rs.default_targets, true);
  }
  return rs;
}

void Loader::structure() {
  // Nodes by index (START 0, END 1, then the nodes in file order) and the arcs as compressed
  // adjacency lists both ways: a file may hold hundreds of thousands of nodes, so no map of
  // strings per node.
  const std::uint32_t count = static_cast<std::uint32_t>(spec_.nodes.size()) + 2;
  std::unordered_map<std::string_view, std::uint32_t> index;
  index.reserve(count);
  index.emplace("START", 0);
  index.emplace("END", 1);
  for (std::uint32_t i = 0; i < spec_.nodes.size(); ++i) index.emplace(spec_.nodes[i].name, i + 2);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> arcs;
  arcs.reserve(spec_.edges.size());
  auto arc = [&](std::string_view from, std::string_view to) {
    auto f = index.find(from), t = index.find(to);
    if (f != index.end() && t != index.end()) arcs.emplace_back(f->second, t->second);
  };
  for (const auto& e : spec_.edges) {
    if (e.route)
      for (const auto& t : e.route->all_targets()) arc(e.from, t);
    else
      for (const auto& t : e.to) arc(e.from, t);
  }
  for (const auto& [worker, map] : map_workers_) arc(map, worker);
  // adjacency[begin[n] .. begin[n + 1]): the far ends of n's arcs.
  struct Adjacency {
    std::vector<std::uint32_t> begin, far;
  };
  auto build = [&](bool forward) {
    Adjacency a;
    a.begin.assign(count + 1, 0);
    for (auto [f, t] : arcs) ++a.begin[(forward ? f : t) + 1];
    for (std::uint32_t n = 0; n < count; ++n) a.begin[n + 1] += a.begin[n];
    a.far.resize(arcs.size());
    std::vector<std::uint32_t> fill(a.begin.begin(), a.begin.end() - 1);
    for (auto [f, t] : arcs) a.far[fill[forward ? f : t]++] = forward ? t : f;
    return a;
  };
  const Adjacency out = build(true);
  if (out.begin[1] == out.begin[0]) {
    error("/edges", "no edge leaves START: add {\"from\": \"START\", \"to\": \"<first node>\"}");
    return;
  }
  auto reach = [&](const Adjacency& adj, std::vector<std::uint32_t> stack) {
    std::vector<char> seen(count, 0);
    while (!stack.empty()) {
      auto n = stack.back();
      stack.pop_back();
      if (seen[n]) continue;
      seen[n] = 1;
      for (auto i = adj.begin[n]; i < adj.begin[n + 1]; ++i) stack.push_back(adj.far[i]);
    }
    return seen;
  };
  const auto from_start = reach(out, {0});
  // Reverse reachability from END; map workers count as reaching END through their map.
  std::vector<std::uint32_t> ends = {1};
  for (const auto& [worker, map] : map_workers_)
    if (auto w = index.find(worker); w != index.end()) ends.push_back(w->second);
  const auto to_end = reach(build(false), std::move(ends));
  for (std::uint32_t i = 0; i < spec_.nodes.size(); ++i) {
    const auto& n = spec_.nodes[i];
    if (!from_start[i + 2])
      error(json_pointer_append("/nodes", n.name),
            "node '" + n.name + "' is not reachable from START");
    else if (!to_end[i + 2]) {
      error(json_pointer_append("/nodes", n.name),
            "node '" + n.name + "' cannot reach END" +
                (out.begin[i + 3] == out.begin[i + 2] ? " (it has no outgoing edge)" : ""));
    }
  }
}

fs::path Loader::resolve(const std::string& p) const {
  fs::path path(p);
  return path.is_absolute() ? path : (fs::absolute(file_).parent_path() / path).lexically_normal();
}

WorkflowLoad load_workflow_text(std::string_view text, const fs::path& file,
                                const WorkflowChecks& checks, int max_depth) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(file, ec);
  return Loader(text, file, checks, max_depth, {canon}).run();
}

WorkflowLoad load_workflow_file(const fs::path& file, const WorkflowChecks& checks, int max_depth) {
  auto parsed = parse_json_file(file, kWorkflowJson);
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(file, ec);
  Loader loader(parsed ? std::string_view(parsed->text) : std::string_view(), file, checks,
                max_depth, {canon});
  if (parsed) return loader.run(std::move(parsed->parsed));
  Error e = std::move(parsed).error();
  if (auto at = e.message.find(": cannot read: "); at != std::string::npos)
    e.message.replace(at, 15, ": cannot read the workflow file: ");
  return loader.failed(e);
}

WorkflowLoad load_workflow_json(ParsedJson parsed, std::string_view text, const fs::path& file,
                                const WorkflowChecks& checks, int max_depth) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(file, ec);
  return Loader(text, file, checks, max_depth, {canon}).run(std::move(parsed));
}

Result<WorkflowSpec> load_workflow(const fs::path& file, const WorkflowChecks& checks) {
  auto r = load_workflow_file(file, checks);
  if (!r.ok()) return Error(Errc::invalid_workflow, r.report());
  return std::move(*r.spec);
}

}  // namespace weir::graph
