#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <boost/json.hpp>

#include "weir/graph/workflow.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/text.hpp"

namespace weir::graph {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// Names in file order, with a set for lookups (a file may define hundreds of thousands).
struct Names {
  std::vector<std::string> list;
  std::unordered_set<std::string> set;
  void push_back(std::string s) {
    set.insert(s);
    list.push_back(std::move(s));
  }
  void emplace_back(std::string_view s) { push_back(std::string(s)); }
  bool contains(std::string_view s) const { return set.count(std::string(s)) != 0; }
};

// Diagnostics past this many are counted, not located: a broken generated file must not cost
// time in proportion to its errors times its size.
constexpr std::size_t kMaxDiagnostics = 100;

// Upper bounds of the counts a file sets: the runtime holds several in 32 bits, and a bound met
// here is a diagnostic instead of a value cut to something else.
constexpr std::int64_t kMaxRecursionLimit = 1'000'000;
constexpr std::int64_t kMaxConcurrency = 10'000;
constexpr std::int64_t kMaxConcurrentRuns = 100'000;
constexpr std::int64_t kMaxQueuedRuns = 10'000'000;
constexpr std::int64_t kMaxAttempts = 1'000;
constexpr std::int64_t kMaxTokens = 1'000'000;

class Loader {
 public:
  Loader(std::string_view text, fs::path file, const WorkflowChecks& checks, int depth,
         std::vector<fs::path> stack)
      : text_(text),
        file_(std::move(file)),
        checks_(checks),
        depth_(depth),
        stack_(std::move(stack)),
        fields_(
            file_.string(), [this](std::string_view ptr) { return locate(ptr); }, kMaxDiagnostics) {
  }

  WorkflowLoad run() {
    auto parsed = parse_json(text_, file_.string(), {.slabs = true});
    if (!parsed) return failed(parsed.error());
    return run(std::move(*parsed));
  }

  // The file could not be read or parsed; the message already carries file:line:column.
  WorkflowLoad failed(const Error& e) const {
    WorkflowLoad out;
    out.diagnostics.push_back({file_.string(), 0, 0, "", e.message});
    return out;
  }

  WorkflowLoad run(ParsedJson parsed) {
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

 private:
  // --- diagnostics and typed access (runtime's JsonFields) ------------------------------
  JsonLocation locate(std::string_view pointer) {
    if (text_.empty() && !reread_) {  // the caller released the text: read the file again
      auto text = read_json_file(file_);
      reread_.emplace(text ? std::move(*text) : std::string());
      text_ = *reread_;
    }
    return parsed_->locate(text_, pointer);
  }
  void error(std::string_view pointer, std::string msg) { fields_.error(pointer, std::move(msg)); }
  static std::string type_name(const json::value& v) { return json_kind_phrase(v); }
  // "unknown node 'x'; did you mean 'y'?" or the names known; `also` (START, END) is a name
  // the list does not hold.
  std::string unknown(std::string_view what, std::string_view name,
                      std::span<const std::string> known, const char* also = nullptr) {
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
  std::string unknown(std::string_view what, std::string_view name, const Names& known,
                      const char* also = nullptr) {
    return unknown(what, name, known.list, also);
  }
  void check_keys(const json::object& o, std::string_view ptr,
                  std::initializer_list<std::string_view> allowed) {
    fields_.check_keys(o, ptr, allowed);
  }
  void check_keys(const json::object& o, std::string_view ptr,
                  const std::vector<std::string_view>& allowed) {
    fields_.check_keys(o, ptr, allowed);
  }
  const json::object* object_at(const json::object& o, std::string_view key, std::string_view ptr,
                                bool required) {
    return fields_.object_at(o, key, ptr, required);
  }
  std::optional<std::string> string_at(const json::object& o, std::string_view key,
                                       std::string_view ptr, bool required) {
    return fields_.string_at(o, key, ptr, required);
  }
  std::optional<std::int64_t> int_at(const json::object& o, std::string_view key,
                                     std::string_view ptr, std::int64_t min,
                                     std::int64_t max = INT64_MAX) {
    return fields_.int_at(o, key, ptr, min, max);
  }
  std::optional<std::int64_t> ms_at(const json::object& o, std::string_view key,
                                    std::string_view ptr, std::int64_t min) {
    return fields_.ms_at(o, key, ptr, min);
  }
  std::optional<std::int64_t> bytes_at(const json::object& o, std::string_view key,
                                       std::string_view ptr) {
    return fields_.bytes_at(o, key, ptr);
  }
  std::optional<bool> bool_at(const json::object& o, std::string_view key, std::string_view ptr) {
    return fields_.bool_at(o, key, ptr);
  }
  bool check_name(const std::string& name, const std::string& ptr, std::string_view what) {
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
  // "a" or ["a", "b"]
  std::vector<std::string> targets_at(const json::value& v, const std::string& ptr) {
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

  // What a section's checker may need besides its entry: the names declared so far.
  SectionContext context() const {
    return {fs::absolute(file_).parent_path(), model_names_.list, tool_names_.list, mcp_names_.list,
            channel_names_.list};
  }
  // An expression ({"$expr": "..."}): the layer above checks it (syntax, channel names).
  void check_expr(std::string_view e, const std::string& ptr) {
    if (!checks_.expression) return;
    for (const auto& problem : checks_.expression(e, context()))
      error(ptr, "expression \"" + utf8_abbreviate(e, 60) + "\": " + problem);
  }
  // The entries of a section another layer owns: their names here, their settings its.
  void section(const json::object& o, std::string_view key, std::string_view what,
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

  // Channels named in templates ({{state.NAME}} or {{state.NAME.field}}) must exist.
  void check_templates(const json::value& v, const std::string& ptr) {
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

  // --- sections ------------------------------------------------------------------------
  void load(json::object& root) {
    spec_.file = fs::absolute(file_).lexically_normal();
    check_keys(root, "",
               {"$schema", "name", "description", "version", "limits", "state", "input", "output",
                "models", "tools", "mcp_servers", "agents", "tasks", "crews", "group_chats",
                "nodes", "edges"});
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
    for (auto [key, dst] :
         {std::pair{"tasks", &spec_.tasks}, {"group_chats", &spec_.group_chats}}) {
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

  LimitsSpec limits(const json::object& o, const std::string& ptr) {
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

  void state(const json::object& o) {
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
      check_keys(co, ptr,
                 {"reducer", "default", "max_items", "max_bytes", "window", "keep_system"});
      if (auto r = string_at(co, "reducer", ptr, false)) {
        auto it = std::find(reducers.begin(), reducers.end(), *r);
        if (it == reducers.end())
          error(ptr + "/reducer", unknown("reducer", *r, reducers));
        else
          c.reducer = static_cast<ReducerKind>(it - reducers.begin());
      }
      if (const auto* d = co.if_contains("default"))
        c.default_value.emplace(*d, json::storage_ptr());  // off the document's slabs
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

  void channel_list(const json::value& v, const std::string& ptr, std::vector<std::string>& dst) {
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

  static bool has(const std::vector<std::string>& v, std::string_view s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  }
  static bool has(const Names& v, std::string_view s) { return v.contains(s); }
  void channel_ref(const json::object& o, std::string_view key, const std::string& ptr,
                   bool required) {
    if (auto c = string_at(o, key, ptr, required); c && !has(channel_names_, *c)) {
      error(json_pointer_append(ptr, key), unknown("channel", *c, channel_names_));
    }
  }

  // --- nodes, by kind: each adds its keys to `allowed` ------------------------------------
  static void allow(std::vector<std::string_view>& allowed,
                    std::initializer_list<std::string_view> keys) {
    allowed.insert(allowed.end(), keys.begin(), keys.end());
  }
  // values: channels, and expressions the layer above checks.
  void set_node(NodeSpec& n, const json::object& no, const std::string& ptr,
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
  // tool: a declared tool or an MCP server's "server/tool"; args are templates.
  void tool_node(NodeSpec& n, const json::object& no, const std::string& ptr,
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
  // model: a declared model; prompt or messages.
  void llm_node(NodeSpec& n, const json::object& no, const std::string& ptr,
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
  // agent: a declared agent.
  void agent_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                  std::vector<std::string_view>& allowed) {
    allow(allowed, {"agent", "input", "output"});
    if (auto a = string_at(no, "agent", ptr, true); a && !has(agent_names_, *a)) {
      error(ptr + "/agent", unknown("agent", *a, agent_names_));
    }
    channel_ref(no, "input", ptr, false);
    channel_ref(no, "output", ptr, false);
  }
  // crew: an entry of "crews"; model: one of the file's (optional when it has one); inputs:
  // the crew's inputs as templates; messages, output: channels; chat_input: the crew input the
  // last user message of `messages` fills.
  void crew_node(NodeSpec& n, const json::object& no, const std::string& ptr,
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
  // A crew entry's inputs: its "inputs" keys, then each {{name}} of its tasks' descriptions and
  // expected outputs (agents' crews fill those), each once, in that order.
  static std::vector<std::string> crew_inputs(const json::object& crew) {
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
        for (auto at = text.find("{{"); at != std::string_view::npos;
             at = text.find("{{", at + 2)) {
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
  // over: a channel; node: the worker, which is not the map itself.
  void map_node(NodeSpec& n, const json::object& no, const std::string& ptr,
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
  // path: the file (loaded now); input/output: channel maps; limits of its own.
  void subgraph_node(NodeSpec& n, const json::object& no, const std::string& ptr,
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
        if (!has(channel_names_, ours))
          error(at, "maps " + unknown("channel", ours, channel_names_));
        if (sub != spec_.subgraphs.end() && !has(child, theirs))
          error(at, "maps the subgraph's " + unknown("channel", theirs, child));
      }
    }
    if (const auto* l = object_at(no, "limits", ptr, false)) (void)limits(*l, ptr + "/limits");
  }
  // payload: a template; output: the channel for the resume value.
  void interrupt_node(NodeSpec& n, const json::object& no, const std::string& ptr,
                      std::vector<std::string_view>& allowed) {
    allow(allowed, {"payload", "output"});
    if (const auto* p = no.if_contains("payload")) check_templates(*p, ptr + "/payload");
    channel_ref(no, "output", ptr, false);
  }

  // Takes `o` to move each node's settings out of the document (no second copy).
  void nodes(json::object& o) {
    const auto kinds = node_kind_names();
    static const std::vector<std::string_view> common = {"kind", "description", "max_visits",
                                                         "retry", "timeout_ms"};
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

  // "server/tool" of a declared MCP server (its tools are known once it is started).
  bool mcp_tool(std::string_view name) const {
    const auto slash = name.find('/');
    return slash != std::string_view::npos && slash + 1 < name.size() &&
           has(mcp_names_, name.substr(0, slash));
  }

  void subgraph(const std::string& node, const std::string& rel, const std::string& ptr) {
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
    auto file = parse_json_file(p, {.slabs = true});
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

  // Frees each edge's part of the document once it is read: a file's edges may hold more
  // memory in the document than in the spec.
  void edges(json::array& a) {
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
  RouteSpec route(const json::object& r, const std::string& ptr, Check check_target) {
    static const std::vector<std::string> ops = {
        "==", "!=", "<", "<=", ">", ">=", "contains", "exists"};
    RouteSpec rs;
    check_keys(r, ptr, {"on", "cases", "default", "when", "then", "else", "tool_calls"});
    const int forms =
        int(r.contains("on")) + int(r.contains("when")) + int(r.contains("tool_calls"));
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

  // Reachability from START, and a way to END for every node. A map reaches its worker; a
  // worker with edges continues through them (fan-in), one without returns to the barrier.
  void structure() {
    // Nodes by index (START 0, END 1, then the nodes in file order) and the arcs as compressed
    // adjacency lists both ways: a file may hold hundreds of thousands of nodes, so no map of
    // strings per node.
    const std::uint32_t count = static_cast<std::uint32_t>(spec_.nodes.size()) + 2;
    std::unordered_map<std::string_view, std::uint32_t> index;
    index.reserve(count);
    index.emplace("START", 0);
    index.emplace("END", 1);
    for (std::uint32_t i = 0; i < spec_.nodes.size(); ++i)
      index.emplace(spec_.nodes[i].name, i + 2);
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

  fs::path resolve(const std::string& p) const {
    fs::path path(p);
    return path.is_absolute() ? path
                              : (fs::absolute(file_).parent_path() / path).lexically_normal();
  }

  std::string_view text_;
  std::optional<std::string> reread_;  // the file, read again for positions when text_ is empty
  fs::path file_;
  const WorkflowChecks& checks_;
  int depth_;
  std::vector<fs::path> stack_;
  JsonFields fields_;  // every diagnostic, located through parsed_
  std::optional<ParsedJson> parsed_;
  WorkflowSpec spec_;
  Names channel_names_, model_names_, tool_names_, node_names_, mcp_names_, agent_names_,
      crew_names_;
  std::map<std::string, std::string> map_workers_;  // worker -> map node
};

}  // namespace

WorkflowLoad load_workflow_text(std::string_view text, const fs::path& file,
                                const WorkflowChecks& checks, int max_depth) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(file, ec);
  return Loader(text, file, checks, max_depth, {canon}).run();
}

WorkflowLoad load_workflow_file(const fs::path& file, const WorkflowChecks& checks, int max_depth) {
  auto parsed = parse_json_file(file, {.slabs = true});
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
