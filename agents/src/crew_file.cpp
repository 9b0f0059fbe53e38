#include "weir/agents/crew_file.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include <boost/json.hpp>

#include "weir/runtime/json_parse.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/doc_index.hpp"
#include "weir/tools/registry.hpp"
#include "weir/tools/schema.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t prev = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
      prev = cur;
    }
  }
  return row[b.size()];
}

// Collects every problem of a document with its position.
class Checker {
 public:
  Checker(std::string_view text, const ParsedJson& doc, std::string source)
      : text_(text), doc_(doc), source_(std::move(source)) {}

  void fail(const std::string& ptr, const std::string& msg) {
    auto loc = doc_.locate(text_, ptr);
    problems_.push_back(source_ + ":" + std::to_string(loc.line) + ":" +
                        std::to_string(loc.column) + ": " + (ptr.empty() ? "/" : ptr) + ": " + msg);
  }
  bool ok() const { return problems_.empty(); }
  std::string report() const {
    std::string s;
    for (const auto& p : problems_) s += (s.empty() ? "" : "\n") + p;
    return s;
  }

  // The object at `ptr`, its unknown keys reported (with a suggestion).
  const json::object* object(const json::value& v, const std::string& ptr,
                             std::initializer_list<std::string_view> keys) {
    const auto* o = v.if_object();
    if (!o) {
      fail(ptr, "expected an object");
      return nullptr;
    }
    for (const auto& [k, x] : *o) {
      bool known = false;
      std::string_view best;
      std::size_t best_d = 3;
      for (auto key : keys) {
        if (key == k) known = true;
        if (auto d = edit_distance(k, key); d < best_d) best_d = d, best = key;
      }
      if (!known)
        fail(json_pointer_append(ptr, k),
             "unknown key '" + std::string(k) + "'" +
                 (best.empty() ? "" : " (did you mean '" + std::string(best) + "'?)"));
    }
    return o;
  }

  std::optional<std::string> str(const json::object& o, std::string_view key,
                                 const std::string& ptr, bool required) {
    const auto* v = o.if_contains(key);
    if (!v) {
      if (required) fail(ptr, "missing required key '" + std::string(key) + "'");
      return std::nullopt;
    }
    if (!v->is_string()) {
      fail(json_pointer_append(ptr, key), "expected a string");
      return std::nullopt;
    }
    return std::string(v->as_string());
  }

  std::optional<std::int64_t> integer(const json::object& o, std::string_view key,
                                      const std::string& ptr, std::int64_t min) {
    const auto* v = o.if_contains(key);
    if (!v) return std::nullopt;
    if (!v->is_int64() && !v->is_uint64()) {
      fail(json_pointer_append(ptr, key), "expected an integer");
      return std::nullopt;
    }
    auto n = v->to_number<std::int64_t>();
    if (n < min) {
      fail(json_pointer_append(ptr, key),
           "must be at least " + std::to_string(min) + ", got " + std::to_string(n));
      return std::nullopt;
    }
    return n;
  }

  std::vector<std::string> strings(const json::object& o, std::string_view key,
                                   const std::string& ptr) {
    std::vector<std::string> out;
    const auto* v = o.if_contains(key);
    if (!v) return out;
    if (!v->is_array()) {
      fail(json_pointer_append(ptr, key), "expected an array of strings");
      return out;
    }
    for (std::size_t i = 0; i < v->as_array().size(); ++i) {
      const auto& x = v->as_array()[i];
      if (x.is_string())
        out.emplace_back(x.as_string());
      else
        fail(json_pointer_append(json_pointer_append(ptr, key), i), "expected a string");
    }
    return out;
  }

  std::optional<AgentSpec> agent(const json::value& v, const std::string& ptr) {
    const auto* o = object(v, ptr,
                           {"name", "role", "goal", "backstory", "tools", "max_iter", "history",
                            "max_tokens_per_turn", "temperature", "seed"});
    if (!o) return std::nullopt;
    AgentSpec a;
    a.name = str(*o, "name", ptr, true).value_or("");
    a.role = str(*o, "role", ptr, true).value_or("");
    a.goal = str(*o, "goal", ptr, false).value_or("");
    a.backstory = str(*o, "backstory", ptr, false).value_or("");
    a.tools = strings(*o, "tools", ptr);
    if (auto n = integer(*o, "max_iter", ptr, 1)) a.max_iter = static_cast<std::int32_t>(*n);
    if (auto n = integer(*o, "max_tokens_per_turn", ptr, 1))
      a.max_tokens_per_turn = static_cast<std::int32_t>(*n);
    if (auto n = integer(*o, "seed", ptr, 0)) a.seed = static_cast<std::uint64_t>(*n);
    if (const auto* t = o->if_contains("temperature")) {
      if (t->is_number())
        a.temperature = static_cast<float>(t->to_number<double>());
      else
        fail(json_pointer_append(ptr, "temperature"), "expected a number");
    }
    if (const auto* h = o->if_contains("history"))
      window(*h, json_pointer_append(ptr, "history"), a.history);
    return a;
  }

  std::optional<tools::McpServerConfig> mcp_server(std::string_view name, const json::value& v,
                                                   const std::string& ptr, const fs::path& base) {
    const auto* o = object(v, ptr,
                           {"command", "url", "headers", "headers_env", "env", "cwd", "timeout_ms",
                            "max_concurrency", "rate_per_minute", "max_message_bytes"});
    if (!o) return std::nullopt;
    tools::McpServerConfig s;
    s.name = name;
    if (name.empty() || name.find('/') != std::string_view::npos)
      fail(ptr, "a server name must be non-empty and without '/'");
    const auto* cmd = o->if_contains("command");
    if (o->contains("url")) {  // Streamable HTTP
      if (cmd) fail(ptr, "give either \"command\" (stdio) or \"url\" (Streamable HTTP), not both");
      if (auto url = str(*o, "url", ptr, true)) {
        if (!url->starts_with("http://") && !url->starts_with("https://"))
          fail(json_pointer_append(ptr, "url"),
               "expected an http:// or https:// URL (the server's MCP endpoint)");
        s.url = *url;
      }
      auto header_map = [&](const char* key, bool from_env) {
        const auto* h = o->if_contains(key);
        if (!h) return;
        const std::string hp = json_pointer_append(ptr, key);
        if (!h->is_object()) return fail(hp, "expected an object of strings");
        for (const auto& [k, x] : h->as_object()) {
          if (!x.is_string()) {
            fail(json_pointer_append(hp, k), "expected a string");
            continue;
          }
          std::string value(x.as_string());
          if (from_env) {  // the value is a secret: read from the environment, never the file
            const char* e = std::getenv(value.c_str());
            if (!e || !*e) {
              fail(json_pointer_append(hp, k),
                   "the environment variable '" + value + "' is unset or empty");
              continue;
            }
            value = e;
          }
          s.headers.emplace_back(std::string(k), std::move(value));
        }
      };
      header_map("headers", false);
      header_map("headers_env", true);
    } else if (!cmd || !cmd->is_array() || cmd->as_array().empty()) {
      fail(cmd ? json_pointer_append(ptr, "command") : ptr,
           cmd ? "expected a non-empty array of strings (the program and its arguments)"
               : "missing required key 'command'");
    } else {
      s.command = strings(*o, "command", ptr);
    }
    if (const auto* env = o->if_contains("env")) {
      if (!env->is_object()) fail(json_pointer_append(ptr, "env"), "expected an object of strings");
      for (const auto& [k, x] : env->is_object() ? env->as_object() : json::object{}) {
        if (x.is_string())
          s.env[std::string(k)] = std::string(x.as_string());
        else
          fail(json_pointer_append(json_pointer_append(ptr, "env"), k), "expected a string");
      }
    }
    if (auto cwd = str(*o, "cwd", ptr, false)) {
      s.cwd = fs::path(*cwd);
      if (s.cwd.is_relative()) s.cwd = base / s.cwd;
    }
    if (auto n = integer(*o, "timeout_ms", ptr, 1))
      s.options.timeout = std::chrono::milliseconds(*n);
    if (auto n = integer(*o, "max_concurrency", ptr, 1))
      s.options.max_concurrency = static_cast<std::int32_t>(std::min<std::int64_t>(*n, 4096));
    if (auto n = integer(*o, "rate_per_minute", ptr, 0))
      s.options.rate_per_minute = static_cast<std::int32_t>(std::min<std::int64_t>(*n, 1 << 30));
    if (auto n = integer(*o, "max_message_bytes", ptr, 1024))
      s.max_message_bytes = static_cast<std::size_t>(*n);
    return s;
  }

  void window(const json::value& v, const std::string& ptr, HistoryWindow& w) {
    const auto* o = object(v, ptr, {"max_messages", "max_tokens", "max_summary_bytes"});
    if (!o) return;
    if (auto n = integer(*o, "max_messages", ptr, 1)) w.max_messages = *n;
    if (auto n = integer(*o, "max_tokens", ptr, 16)) w.max_tokens = *n;
    if (auto n = integer(*o, "max_summary_bytes", ptr, 64))
      w.max_summary_bytes = static_cast<std::size_t>(*n);
  }

 private:
  std::string_view text_;
  const ParsedJson& doc_;
  std::string source_;
  std::vector<std::string> problems_;
};

}  // namespace

bool is_agents_document(const json::value& v) {
  const auto* o = v.if_object();
  if (!o) return false;
  const auto* k = o->if_contains("kind");
  return k && k->is_string() && (k->as_string() == "crew" || k->as_string() == "group_chat");
}

Result<AgentsFile> parse_agents_file(std::string_view text, const fs::path& path) {
  JsonParseOptions po;
  po.record_locations = true;
  auto doc = parse_json(text, path.string(), po);
  if (!doc) return Error(Errc::invalid_workflow, doc.error().message);
  Checker c(text, *doc, path.string());
  AgentsFile f;
  f.base_dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const auto* root =
      c.object(doc->value, "",
               {"weir", "kind", "name", "description", "tools", "agents", "tasks", "process",
                "manager", "inputs", "limits", "engine", "task", "speaker_selection", "termination",
                "window", "max_rounds", "mcp_servers"});
  if (!root) return Error(Errc::invalid_workflow, c.report());
  if (const auto* w = root->if_contains("weir");
      !w || !(w->is_int64() || w->is_uint64()) || w->to_number<std::int64_t>() != 1)
    c.fail(w ? "/weir" : "", "\"weir\": 1 is required (the format version)");
  const auto kind = c.str(*root, "kind", "", true);
  if (kind == "group_chat")
    f.kind = AgentsFileKind::group_chat;
  else if (kind && *kind != "crew")
    c.fail("/kind", "unknown kind '" + *kind + "' (crew, group_chat)");
  // Keys of the other kind are mistakes, not silently ignored.
  const bool chat = f.kind == AgentsFileKind::group_chat;
  static const std::vector<const char*> kCrewOnly = {"tasks", "process", "manager"};
  static const std::vector<const char*> kChatOnly = {"task", "speaker_selection", "termination",
                                                     "window", "max_rounds"};
  for (const char* k : chat ? kCrewOnly : kChatOnly) {
    if (root->contains(k))
      c.fail(json_pointer_append("", k), "'" + std::string(k) + "' belongs to " +
                                             (chat ? "crew files" : "group-chat files") +
                                             ", not to a " + (chat ? "group chat" : "crew"));
  }
  if (const auto* d = root->if_contains("description"); d && !d->is_string())
    c.fail("/description", "expected a string");
  f.name = c.str(*root, "name", "", true).value_or("");
  if (const auto* t = root->if_contains("tools")) {
    if (const auto* o = c.object(*t, "/tools", {"calculator", "files", "artifacts", "doc_search"}))
      f.tools = *o;
  }
  if (const auto* m = root->if_contains("mcp_servers")) {
    if (const auto* o = m->if_object()) {
      for (const auto& [name, v] : *o) {
        const std::string ptr = json_pointer_append("/mcp_servers", name);
        if (auto s = c.mcp_server(name, v, ptr, f.base_dir)) f.mcp_servers.push_back(std::move(*s));
      }
    } else {
      c.fail("/mcp_servers", "expected an object (server name -> {\"command\": [...]})");
    }
  }
  if (const auto* e = root->if_contains("engine")) {
    if (const auto* o =
            c.object(*e, "/engine", {"max_model_len", "max_num_seqs", "kv_cache_type"})) {
      if (auto t = c.str(*o, "kv_cache_type", "/engine", false)) {
        if (*t == "f32" || *t == "f16")
          f.kv_cache_type = *t;
        else
          c.fail("/engine/kv_cache_type", "expected \"f32\" or \"f16\", got \"" + *t + "\"");
      }
      if (auto n = c.integer(*o, "max_model_len", "/engine", 16)) f.max_model_len = *n;
      if (auto n = c.integer(*o, "max_num_seqs", "/engine", 1))
        f.max_num_seqs = static_cast<std::int32_t>(std::min<std::int64_t>(*n, 4096));
    }
  }
  if (const auto* in = root->if_contains("inputs")) {
    if (in->is_object())
      f.inputs = in->as_object();
    else
      c.fail("/inputs", "expected an object");
  }
  std::vector<AgentSpec> agents;
  if (const auto* a = root->if_contains("agents"); a && a->is_array()) {
    for (std::size_t i = 0; i < a->as_array().size(); ++i)
      if (auto s = c.agent(a->as_array()[i], "/agents/" + std::to_string(i)))
        agents.push_back(std::move(*s));
  } else {
    c.fail("", a ? "\"agents\" must be an array" : "missing required key 'agents'");
  }
  if (f.kind == AgentsFileKind::crew) {
    f.crew.name = f.name;
    f.crew.agents = agents;
    if (auto p = c.str(*root, "process", "", false)) {
      if (*p == "hierarchical")
        f.crew.process = Process::hierarchical;
      else if (*p != "sequential")
        c.fail("/process", "unknown process '" + *p + "' (sequential, hierarchical)");
    }
    if (const auto* m = root->if_contains("manager")) f.crew.manager = c.agent(*m, "/manager");
    if (const auto* l = root->if_contains("limits")) {
      if (const auto* o = c.object(
              *l, "/limits", {"token_budget", "summary_bytes", "recursion_limit", "deadline_ms"})) {
        if (auto n = c.integer(*o, "token_budget", "/limits", 1)) f.token_budget = *n;
        if (auto n = c.integer(*o, "summary_bytes", "/limits", 64))
          f.crew.summary_bytes = static_cast<std::size_t>(*n);
        if (auto n = c.integer(*o, "recursion_limit", "/limits", 1))
          f.crew.limits.recursion_limit = static_cast<std::int32_t>(*n);
        if (auto n = c.integer(*o, "deadline_ms", "/limits", 1))
          f.crew.limits.deadline = std::chrono::milliseconds(*n);
      }
    }
    f.crew.limits.token_budget = f.token_budget;
    const auto* tasks = root->if_contains("tasks");
    if (!tasks || !tasks->is_array()) {
      c.fail("", tasks ? "\"tasks\" must be an array" : "missing required key 'tasks'");
    } else {
      for (std::size_t i = 0; i < tasks->as_array().size(); ++i) {
        const std::string ptr = "/tasks/" + std::to_string(i);
        const auto* o = c.object(tasks->as_array()[i], ptr,
                                 {"name", "agent", "description", "expected_output", "context",
                                  "prefetch", "output_schema"});
        if (!o) continue;
        TaskSpec t;
        t.name = c.str(*o, "name", ptr, true).value_or("");
        t.description = c.str(*o, "description", ptr, true).value_or("");
        t.expected_output = c.str(*o, "expected_output", ptr, false).value_or("");
        t.agent = c.str(*o, "agent", ptr, f.crew.process == Process::sequential).value_or("");
        t.context = c.strings(*o, "context", ptr);
        if (const auto* os = o->if_contains("output_schema")) {
          if (!os->is_object())
            c.fail(ptr + "/output_schema", "expected a JSON Schema object");
          else if (f.crew.process != Process::sequential)
            c.fail(ptr + "/output_schema",
                   "output_schema is supported in sequential crews (the manager of a "
                   "hierarchical crew writes the final answer)");
          else if (auto st = tools::check_schema(os->as_object()); !st)
            c.fail(ptr + "/output_schema", st.error().message);
          else
            t.output_schema = os->as_object();
        }
        if (const auto* cx = o->if_contains("context");
            cx && cx->is_array() && cx->as_array().empty())
          t.context_none = true;
        if (const auto* pf = o->if_contains("prefetch")) {
          if (!pf->is_array()) c.fail(ptr + "/prefetch", "expected an array of tool calls");
          for (std::size_t k = 0; pf->is_array() && k < pf->as_array().size(); ++k) {
            const std::string pp = ptr + "/prefetch/" + std::to_string(k);
            const auto* call = c.object(pf->as_array()[k], pp, {"tool", "arguments"});
            if (!call) continue;
            ToolCall tc;
            tc.name = c.str(*call, "tool", pp, true).value_or("");
            if (const auto* args = call->if_contains("arguments")) {
              if (args->is_object())
                tc.arguments = args->as_object();
              else
                c.fail(pp + "/arguments", "expected an object");
            }
            t.prefetch.push_back(std::move(tc));
          }
        }
        f.crew.tasks.push_back(std::move(t));
      }
    }
  } else {
    f.chat.name = f.name;
    f.chat.agents = agents;
    f.task = c.str(*root, "task", "", true).value_or("");
    if (auto s = c.str(*root, "speaker_selection", "", false)) {
      if (*s == "model")
        f.chat.selection = SpeakerSelection::model;
      else if (*s != "round_robin")
        c.fail("/speaker_selection", "unknown speaker selection '" + *s +
                                         "' (round_robin, model; a function is C++ only)");
    }
    if (const auto* t = root->if_contains("termination")) {
      auto term = Termination::from_json(*t, "/termination");
      if (term) {
        f.chat.termination = *term;
      } else {  // "<pointer>: why": keep the inner position ("/termination/any/1")
        const std::string& m = term.error().message;
        const auto colon = m.find(": ");
        c.fail(m.substr(0, colon), m.substr(colon + 2));
      }
    }
    if (const auto* w = root->if_contains("window")) c.window(*w, "/window", f.chat.window);
    if (auto n = c.integer(*root, "max_rounds", "", 1))
      f.chat.max_rounds = static_cast<std::int32_t>(*n);
    if (const auto* l = root->if_contains("limits")) {
      if (const auto* o = c.object(*l, "/limits", {"token_budget"}))
        if (auto n = c.integer(*o, "token_budget", "/limits", 1)) f.token_budget = *n;
    }
  }
  if (!c.ok()) return Error(Errc::invalid_workflow, c.report());
  return f;
}

Result<AgentsFile> load_agents_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return Error(Errc::not_found, path.string() + ": no such file");
    return Error(Errc::io_error, path.string() + ": cannot read the file");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_agents_file(ss.str(), path);
}

Result<std::shared_ptr<tools::ToolRegistry>> build_tools(const AgentsFile& file,
                                                         ArtifactStore* artifacts) {
  auto reg = std::make_shared<tools::ToolRegistry>();
  auto folder = [&](const json::object& cfg, std::string_view key,
                    std::string_view tool) -> Result<fs::path> {
    const auto* v = cfg.if_contains(key);
    if (!v || !v->is_string())
      return Error(Errc::invalid_workflow,
                   "tools/" + std::string(tool) + ": needs \"" + std::string(key) + "\": a folder");
    fs::path p = v->as_string().c_str();
    if (p.is_relative()) p = file.base_dir / p;
    std::error_code ec;
    if (!fs::is_directory(p, ec))
      return Error(Errc::invalid_workflow,
                   "tools/" + std::string(tool) + ": folder '" + p.string() + "' does not exist");
    return p;
  };
  for (const auto& [name, v] : file.tools) {
    const json::object cfg = v.is_object() ? v.as_object() : json::object{};
    std::shared_ptr<tools::Tool> tool;
    if (name == "calculator") {
      tool = tools::make_calculator();
    } else if (name == "files") {
      auto root = folder(cfg, "root", "files");
      if (!root) return std::move(root).error();
      tool = tools::make_files_tool(*root);
    } else if (name == "artifacts") {
      if (!artifacts)
        return Error(Errc::invalid_workflow, "tools/artifacts: needs an artifact store");
      tool = tools::make_artifacts_tool(*artifacts);
    } else if (name == "doc_search") {
      auto dir = folder(cfg, "folder", "doc_search");
      if (!dir) return std::move(dir).error();
      auto index = tools::DocumentIndex::build(*dir, {});
      if (!index) return std::move(index).error();
      tool = tools::make_doc_search_tool(std::move(*index));
    } else {
      return Error(Errc::invalid_workflow, "tools: unknown tool '" + std::string(name) +
                                               "' (calculator, files, artifacts, doc_search)");
    }
    if (auto s = reg->add(std::move(tool)); !s) return std::move(s).error();
  }
  // MCP servers: the tools some agent names ("fs/read_file"), all of them for "fs/*".
  std::vector<const AgentSpec*> specs;
  for (const auto& a : file.kind == AgentsFileKind::crew ? file.crew.agents : file.chat.agents)
    specs.push_back(&a);
  if (file.crew.manager) specs.push_back(&*file.crew.manager);
  for (const auto& server : file.mcp_servers) {
    const std::string prefix = server.name + "/";
    std::vector<std::string> only;
    bool all = false;
    for (const auto* a : specs)
      for (const auto& t : a->tools) {
        if (!t.starts_with(prefix)) continue;
        const std::string rest = t.substr(prefix.size());
        if (rest == "*")
          all = true;
        else if (std::find(only.begin(), only.end(), rest) == only.end())
          only.push_back(rest);
      }
    if (all || only.empty()) only.clear();
    auto client = tools::McpClient::connect(server);
    if (!client) return std::move(client).error();
    if (auto s = tools::add_mcp_tools(*reg, std::move(*client), only); !s)
      return std::move(s).error();
  }
  return reg;
}

void expand_tool_patterns(AgentsFile& file, const tools::ToolRegistry& registry) {
  const auto names = registry.names();
  auto expand = [&](AgentSpec& a) {
    std::vector<std::string> out;
    for (const auto& t : a.tools) {
      if (t.size() > 2 && t.ends_with("/*")) {
        const std::string prefix = t.substr(0, t.size() - 1);
        for (const auto& n : names)
          if (n.starts_with(prefix)) out.push_back(n);
      } else {
        out.push_back(t);
      }
    }
    a.tools = std::move(out);
  };
  for (auto& a : file.crew.agents) expand(a);
  for (auto& a : file.chat.agents) expand(a);
  if (file.crew.manager) expand(*file.crew.manager);
}

}  // namespace weir::agents
