#include "weir/agents/crew_file.hpp"

#include <algorithm>
#include <cctype>

#include <boost/json.hpp>

#include "mcp_config.hpp"
#include "weir/agents/config.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"
#include "weir/tools/schema.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// A crew's or group chat's agent: its settings (parse_agent) and its name.
std::optional<AgentSpec> agent(JsonFields& f, const json::value& v, const std::string& ptr) {
  static constexpr std::string_view kExtra[] = {"name"};
  auto a = parse_agent(f, v, ptr, kExtra);
  if (a) a->name = f.string_at(v.as_object(), "name", ptr, true).value_or("");
  return a;
}

// "tools": {"doc_search": {"folder": "../data"}, "artifacts": {}}: keyed by the built-in.
void tools_section(JsonFields& f, const json::value& v, AgentsFile& file) {
  const auto* o = v.if_object();
  if (!o) {
    f.error("/tools",
            std::string("expected an object (tool -> its settings), got ") + json_kind_phrase(v));
    return;
  }
  const auto names = tools::builtin_tool_names();
  const std::vector<std::string_view> keys(names.begin(), names.end());
  f.check_keys(*o, "/tools", keys);
  for (const auto& [name, settings] : *o) {
    if (std::find(names.begin(), names.end(), std::string_view(name)) == names.end()) continue;
    const std::string ptr = json_pointer_append("/tools", name);
    if (!settings.is_object()) {
      f.error(ptr, std::string("expected the tool's settings, {} or like {\"root\": \"../data\"}, "
                               "got ") +
                       json_kind_phrase(settings));
      continue;
    }
    if (auto c = tools::parse_builtin_tool(f, name, ptr, settings.as_object(), ptr, file.base_dir))
      file.tools.push_back(std::move(*c));
  }
}

void mcp_section(JsonFields& f, const json::value& v, AgentsFile& file) {
  const auto* o = v.if_object();
  if (!o) {
    f.error("/mcp_servers", "expected an object (server name -> {\"command\": [...]})");
    return;
  }
  for (const auto& [name, entry] : *o)
    if (auto s = tools::parse_mcp_server(f, name, entry, json_pointer_append("/mcp_servers", name),
                                         file.base_dir))
      file.mcp_servers.push_back(std::move(*s));
}

// One task of a crew.
std::optional<TaskSpec> task(JsonFields& f, const json::value& v, const std::string& ptr,
                             Process process) {
  const auto* o = v.if_object();
  if (!o) {
    f.error(ptr, std::string("expected a task object, got ") + json_kind_phrase(v));
    return std::nullopt;
  }
  f.check_keys(
      *o, ptr,
      {"name", "agent", "description", "expected_output", "context", "prefetch", "output_schema"});
  TaskSpec t;
  t.name = f.string_at(*o, "name", ptr, true).value_or("");
  t.description = f.string_at(*o, "description", ptr, true).value_or("");
  t.expected_output = f.string_at(*o, "expected_output", ptr).value_or("");
  t.agent = f.string_at(*o, "agent", ptr, process == Process::sequential).value_or("");
  if (auto cx = f.strings_at(*o, "context", ptr)) {
    t.context = std::move(*cx);
    t.context_none = t.context.empty();
  }
  if (const auto* os = o->if_contains("output_schema")) {
    if (!os->is_object())
      f.error(ptr + "/output_schema", "expected a JSON Schema object");
    else if (process != Process::sequential)
      f.error(ptr + "/output_schema",
              "output_schema is supported in sequential crews (the manager of a hierarchical "
              "crew writes the final answer)");
    else if (auto st = tools::check_schema(os->as_object()); !st)
      f.error(ptr + "/output_schema", st.error().message);
    else
      t.output_schema = os->as_object();
  }
  if (const auto* pf = o->if_contains("prefetch")) {
    if (!pf->is_array()) f.error(ptr + "/prefetch", "expected an array of tool calls");
    for (std::size_t k = 0; pf->is_array() && k < pf->as_array().size(); ++k) {
      const std::string pp = ptr + "/prefetch/" + std::to_string(k);
      const auto* call = pf->as_array()[k].if_object();
      if (!call) {
        f.error(pp, std::string("expected a tool call like {\"tool\": \"...\", \"arguments\": "
                                "{}}, got ") +
                        json_kind_phrase(pf->as_array()[k]));
        continue;
      }
      f.check_keys(*call, pp, {"tool", "arguments"});
      ToolCall tc;
      tc.name = f.string_at(*call, "tool", pp, true).value_or("");
      if (const auto* args = f.object_at(*call, "arguments", pp)) tc.arguments = *args;
      t.prefetch.push_back(std::move(tc));
    }
  }
  return t;
}

// The crew part of a crew file: process, manager, limits, tasks.
void crew_part(JsonFields& f, const json::object& root, AgentsFile& file) {
  CrewSpec& crew = file.crew;
  crew.name = file.name;
  if (auto p = f.string_at(root, "process", "")) {
    if (*p == "hierarchical")
      crew.process = Process::hierarchical;
    else if (*p != "sequential")
      f.error("/process", "unknown process '" + *p + "' (sequential, hierarchical)");
  }
  if (const auto* m = root.if_contains("manager")) crew.manager = agent(f, *m, "/manager");
  if (const auto* l = f.object_at(root, "limits", "")) {
    f.check_keys(*l, "/limits",
                 {"token_budget", "summary_bytes", "recursion_limit", "deadline_ms"});
    if (auto n = f.int_at(*l, "token_budget", "/limits", 1)) file.token_budget = *n;
    if (auto n = f.int_at(*l, "summary_bytes", "/limits", 64))
      crew.summary_bytes = static_cast<std::size_t>(*n);
    if (auto n = f.int_at(*l, "recursion_limit", "/limits", 1, INT32_MAX))
      crew.limits.recursion_limit = static_cast<std::int32_t>(*n);
    if (auto n = f.ms_at(*l, "deadline_ms", "/limits", 1))
      crew.limits.deadline = std::chrono::milliseconds(*n);
  }
  crew.limits.token_budget = file.token_budget;
  const auto* tasks = root.if_contains("tasks");
  if (!tasks || !tasks->is_array()) {
    f.error(tasks ? "/tasks" : "",
            tasks ? std::string("expected an array of tasks, got ") + json_kind_phrase(*tasks)
                  : std::string("missing required key 'tasks'"));
    return;
  }
  for (std::size_t i = 0; i < tasks->as_array().size(); ++i)
    if (auto t = task(f, tasks->as_array()[i], "/tasks/" + std::to_string(i), crew.process))
      crew.tasks.push_back(std::move(*t));
}

// The group-chat part: task, speaker selection, termination, window, rounds, limits.
void chat_part(JsonFields& f, const json::object& root, AgentsFile& file) {
  GroupChatSpec& chat = file.chat;
  chat.name = file.name;
  file.task = f.string_at(root, "task", "", true).value_or("");
  if (auto s = f.string_at(root, "speaker_selection", "")) {
    if (*s == "model")
      chat.selection = SpeakerSelection::model;
    else if (*s != "round_robin")
      f.error("/speaker_selection", "unknown speaker selection '" + *s +
                                        "' (round_robin, model; a function is C++ only)");
  }
  if (const auto* t = root.if_contains("termination")) {
    auto term = Termination::from_json(*t, "/termination");
    if (term) {
      chat.termination = *term;
    } else {  // "<pointer>: why": keep the inner position ("/termination/any/1")
      const std::string& m = term.error().message;
      const auto colon = m.find(": ");
      f.error(m.substr(0, colon), m.substr(colon + 2));
    }
  }
  if (const auto* w = root.if_contains("window"))
    parse_history_window(f, *w, "/window", chat.window);
  if (auto n = f.int_at(root, "max_rounds", "", 1, INT32_MAX))
    chat.max_rounds = static_cast<std::int32_t>(*n);
  if (const auto* l = f.object_at(root, "limits", "")) {
    f.check_keys(*l, "/limits", {"token_budget"});
    if (auto n = f.int_at(*l, "token_budget", "/limits", 1)) file.token_budget = *n;
  }
}

}  // namespace

bool is_agents_document(const json::value& v) {
  const auto* o = v.if_object();
  if (!o) return false;
  const auto* k = o->if_contains("kind");
  return k && k->is_string() && (k->as_string() == "crew" || k->as_string() == "group_chat");
}

namespace {

// What only the whole file shows, each at its place: an agent's tool that is none of the file's
// "tools" (or of its MCP servers: "server/tool", "server/*"), and the crew's crew_problems.
void cross_check(JsonFields& f, const AgentsFile& file) {
  std::string have;
  for (const auto& c : file.tools) have += (have.empty() ? "" : ", ") + c.builtin;
  std::string servers;
  for (const auto& m : file.mcp_servers) servers += (servers.empty() ? "" : ", ") + m.name;
  // A tool a name names: one of "tools", or "server/tool" of one of "mcp_servers".
  auto check_tool = [&](const std::string& t, const std::string& who, const std::string& ptr) {
    if (const auto slash = t.find('/'); slash != std::string::npos) {
      const std::string server = t.substr(0, slash);
      if (std::none_of(file.mcp_servers.begin(), file.mcp_servers.end(),
                       [&](const auto& m) { return m.name == server; }))
        f.error(ptr, who + " names tool '" + t + "' of MCP server '" + server +
                         "', which the crew does not have (its \"mcp_servers\": " +
                         (servers.empty() ? "none" : servers) + ")");
    } else if (std::none_of(file.tools.begin(), file.tools.end(),
                            [&](const auto& c) { return c.builtin == t; })) {
      f.error(ptr, who + " names unknown tool '" + t +
                       "' (the crew's \"tools\": " + (have.empty() ? "none" : have) + ")");
    }
  };
  auto check = [&](const AgentSpec& a, const std::string& at) {
    for (std::size_t k = 0; k < a.tools.size(); ++k)
      check_tool(a.tools[k], "agent '" + a.name + "'", at + "/tools/" + std::to_string(k));
  };
  const bool crew = file.kind == AgentsFileKind::crew;
  const auto& agents = crew ? file.crew.agents : file.chat.agents;
  for (std::size_t i = 0; i < agents.size(); ++i) check(agents[i], "/agents/" + std::to_string(i));
  if (!crew) return;
  if (file.crew.manager) check(*file.crew.manager, "/manager");
  for (std::size_t i = 0; i < file.crew.tasks.size(); ++i) {
    const auto& t = file.crew.tasks[i];
    for (std::size_t k = 0; k < t.prefetch.size(); ++k)
      check_tool(t.prefetch[k].name, "task '" + t.name + "'",
                 "/tasks/" + std::to_string(i) + "/prefetch/" + std::to_string(k) + "/tool");
  }
  for (const auto& p : crew_problems(file.crew)) f.error(p.pointer, p.message);
}

// A crew or group-chat document into `file`, its problems into `f` (pointers from its root).
void read_agents_document(JsonFields& f, const json::value& value, AgentsFile& file) {
  const auto* root = value.if_object();
  if (!root) {
    f.error("", std::string("a crew or group-chat file is a JSON object, got ") +
                    json_kind_phrase(value));
    return;
  }
  f.check_keys(*root, "",
               {"weir", "kind", "name", "description", "tools", "agents", "tasks", "process",
                "manager", "inputs", "limits", "engine", "task", "speaker_selection", "termination",
                "window", "max_rounds", "mcp_servers"});
  if (const auto* w = root->if_contains("weir");
      !w || !(w->is_int64() || w->is_uint64()) || w->to_number<std::int64_t>() != 1)
    f.error(w ? "/weir" : "", "\"weir\": 1 is required (the format version)");
  const auto kind = f.string_at(*root, "kind", "", true);
  if (kind == "group_chat")
    file.kind = AgentsFileKind::group_chat;
  else if (kind && *kind != "crew")
    f.error("/kind", "unknown kind '" + *kind + "' (crew, group_chat)");
  // Keys of the other kind are mistakes, not silently ignored.
  const bool chat = file.kind == AgentsFileKind::group_chat;
  static const std::vector<const char*> kCrewOnly = {"tasks", "process", "manager"};
  static const std::vector<const char*> kChatOnly = {"task", "speaker_selection", "termination",
                                                     "window", "max_rounds"};
  for (const char* k : chat ? kCrewOnly : kChatOnly) {
    if (root->contains(k))
      f.error(json_pointer_append("", k), "'" + std::string(k) + "' belongs to " +
                                              (chat ? "crew files" : "group-chat files") +
                                              ", not to a " + (chat ? "group chat" : "crew"));
  }
  (void)f.string_at(*root, "description", "");
  file.name = f.string_at(*root, "name", "", true).value_or("");
  if (const auto* t = root->if_contains("tools")) tools_section(f, *t, file);
  if (const auto* m = root->if_contains("mcp_servers")) mcp_section(f, *m, file);
  if (const auto* e = f.object_at(*root, "engine", ""))
    file.engine = parse_engine_settings(f, *e, "/engine");
  if (const auto* in = f.object_at(*root, "inputs", "")) file.inputs = *in;
  std::vector<AgentSpec> agents;
  if (const auto* a = root->if_contains("agents"); a && a->is_array()) {
    for (std::size_t i = 0; i < a->as_array().size(); ++i)
      if (auto s = agent(f, a->as_array()[i], "/agents/" + std::to_string(i)))
        agents.push_back(std::move(*s));
  } else {
    f.error(a ? "/agents" : "",
            a ? std::string("expected an array of agents, got ") + json_kind_phrase(*a)
              : std::string("missing required key 'agents'"));
  }
  if (chat) {
    file.chat.agents = std::move(agents);
    chat_part(f, *root, file);
  } else {
    file.crew.agents = std::move(agents);
    crew_part(f, *root, file);
  }
  if (f.ok()) cross_check(f, file);  // (a part that did not read would say more of the same)
}

// A workflow's crew entry as the crew document it stands for.
json::value crew_document(std::string_view name, const json::value& entry) {
  json::object doc = entry.is_object() ? entry.as_object() : json::object();
  doc.emplace("weir", 1);
  doc.emplace("kind", "crew");
  doc.emplace("name", name);
  return doc;
}

}  // namespace

Result<AgentsFile> parse_agents_file(std::string_view text, const fs::path& path) {
  auto doc = parse_json(text, path.string());
  if (!doc) return Error(Errc::invalid_workflow, doc.error().message);
  JsonFields f(path.string(), [&](std::string_view ptr) { return doc->locate(text, ptr); });
  AgentsFile file;
  file.base_dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  read_agents_document(f, doc->value, file);
  if (!f.ok()) return Error(Errc::invalid_workflow, f.report());
  return file;
}

namespace {
// A workflow's crew entry read into `file`; its problems in `f` at their place in the workflow.
void read_workflow_crew(JsonFields& f, std::string_view name, const json::value& entry,
                        const std::string& ptr, AgentsFile& file) {
  if (!entry.is_object()) {
    f.error(ptr, std::string("expected a crew object, got ") + json_kind_phrase(entry));
    return;
  }
  const auto* kind = entry.as_object().if_contains("kind");
  if (kind && *kind != "crew") {  // (a crew file's document, inline, says "crew")
    f.error(ptr + "/kind", "a workflow's crew is a crew, got kind " + json::serialize(*kind));
    return;
  }
  JsonFields inner(f.file());
  read_agents_document(inner, crew_document(name, entry), file);
  for (const auto& d : inner.diagnostics()) f.error(ptr + d.pointer, d.message);
}
}  // namespace

void check_workflow_crew(JsonFields& f, std::string_view name, const json::value& entry,
                         const std::string& ptr, const fs::path& base_dir) {
  AgentsFile file;
  file.base_dir = base_dir;
  read_workflow_crew(f, name, entry, ptr, file);
}

Result<AgentsFile> parse_workflow_crew(std::string_view name, const json::value& entry,
                                       const fs::path& workflow_file) {
  JsonFields f(workflow_file.string());
  AgentsFile file;
  file.base_dir = workflow_file.parent_path();
  read_workflow_crew(f, name, entry, json_pointer_append("/crews", name), file);
  if (!f.ok()) return Error(Errc::invalid_workflow, f.report());
  return file;
}

Result<AgentsFile> load_agents_file(const fs::path& path) {
  auto text = read_json_file(path);  // its size checked before it is read
  if (!text) return std::move(text).error();
  return parse_agents_file(*text, path);
}

Result<std::string> crew_workflow_text(std::string_view crew_text, const fs::path& crew_file,
                                       const fs::path& model) {
  auto file = parse_agents_file(crew_text, crew_file);
  if (!file) return std::move(file).error();
  if (file->kind != AgentsFileKind::crew)
    return Error(Errc::unsupported, crew_file.string() +
                                        ": a group chat is not served as a workflow (run it with "
                                        "`weir run FILE`)");
  boost::system::error_code ec;
  json::value parsed = json::parse(crew_text, ec);
  if (ec || !parsed.is_object())  // read by parse_json above; Boost.JSON reads what it reads
    return Error(Errc::invalid_workflow, crew_file.string() + ": not a JSON object");
  json::object doc = std::move(parsed.as_object());
  const auto* d = doc.if_contains("description");
  const std::string description = d && d->is_string() ? std::string(d->as_string()) : "";
  json::object state{{"messages", json::object{{"reducer", "messages"}}},
                     {"result", json::object()}};
  json::array input{"messages"};
  json::object inputs;
  for (const auto& [k, v] : file->inputs) {
    // An input whose name cannot be a channel's (or is one of the two above) keeps its default.
    const bool plain = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!plain || k == "messages" || k == "result") continue;
    state[k] = json::object{{"default", v}};
    input.emplace_back(k);
    inputs[k] = "{{state." + std::string(k) + "}}";
  }
  json::object model_entry{{"path", fs::absolute(model).string()}};
  if (auto* e = doc.if_contains("engine")) model_entry["engine"] = *e;
  // The chat's input: the crew's only input, else the first input its tasks' descriptions
  // name ("{{topic}}"), else "request".
  std::string chat_input = file->inputs.size() == 1 ? std::string(file->inputs.begin()->key()) : "";
  for (const auto& t : file->crew.tasks) {
    for (std::size_t at = t.description.find("{{"); chat_input.empty() && at != std::string::npos;
         at = t.description.find("{{", at + 2)) {
      const auto end = t.description.find("}}", at + 2);
      if (end == std::string::npos) break;
      const std::string key = t.description.substr(at + 2, end - at - 2);
      if (inputs.contains(key)) chat_input = key;
    }
  }
  json::object node{{"kind", "crew"},   {"crew", file->name},     {"model", "crew"},
                    {"inputs", inputs}, {"messages", "messages"}, {"output", "result"}};
  if (!chat_input.empty()) node["chat_input"] = chat_input;  // else the node's own, "request"
  json::object wf{{"name", file->name},
                  {"state", std::move(state)},
                  {"input", std::move(input)},
                  {"output", json::array{"messages", "result"}},
                  {"models", json::object{{"crew", std::move(model_entry)}}},
                  {"crews", json::object{{file->name, std::move(doc)}}},
                  {"nodes", json::object{{file->name, std::move(node)}}},
                  {"edges", json::array{json::object{{"from", "START"}, {"to", file->name}},
                                        json::object{{"from", file->name}, {"to", "END"}}}}};
  if (!description.empty()) wf["description"] = description;
  if (file->token_budget > 0) wf["limits"] = json::object{{"token_budget", file->token_budget}};
  return json::serialize(wf);
}

std::vector<CrewProblem> crew_problems(const CrewSpec& spec) {
  std::vector<CrewProblem> out;
  if (spec.tasks.empty()) out.push_back({"/tasks", "a crew needs at least one task"});
  if (spec.agents.empty()) out.push_back({"/agents", "a crew needs at least one agent"});
  std::vector<std::string> agent_names, task_names;
  for (std::size_t i = 0; i < spec.agents.size(); ++i) {
    const auto& a = spec.agents[i];
    if (std::find(agent_names.begin(), agent_names.end(), a.name) != agent_names.end())
      out.push_back(
          {"/agents/" + std::to_string(i) + "/name", "two agents are named '" + a.name + "'"});
    else
      agent_names.push_back(a.name);
  }
  std::string agents;
  for (const auto& n : agent_names) agents += (agents.empty() ? "" : ", ") + n;
  for (std::size_t i = 0; i < spec.tasks.size(); ++i) {
    const auto& t = spec.tasks[i];
    const std::string at = "/tasks/" + std::to_string(i);
    if (t.name.empty()) out.push_back({at, "a task needs a name"});
    if (spec.process == Process::sequential &&
        std::find(agent_names.begin(), agent_names.end(), t.agent) == agent_names.end())
      out.push_back({at + "/agent", "task '" + t.name + "' names unknown agent '" + t.agent +
                                        "' (its agents: " + agents + ")"});
    for (std::size_t k = 0; k < t.context.size(); ++k)
      if (std::find(task_names.begin(), task_names.end(), t.context[k]) == task_names.end())
        out.push_back({at + "/context/" + std::to_string(k),
                       "task '" + t.name + "' takes context from '" + t.context[k] +
                           "', which is not an earlier task"});
    if (std::find(task_names.begin(), task_names.end(), t.name) != task_names.end())
      out.push_back({at + "/name", "two tasks are named '" + t.name + "'"});
    task_names.push_back(t.name);
  }
  return out;
}

}  // namespace weir::agents
