// Crew and group-chat files: the JSON form of Crew and GroupChat, run by `weir run`.
//
//   {"weir": 1, "kind": "crew", "name": "research_crew",
//    "tools": {"doc_search": {"folder": "../data"}, "artifacts": {}, "calculator": {},
//              "files": {"root": "../data", "timeout_ms": 5000}},   (any built-in, with the
//              tools layer's settings: tools::parse_builtin_tool)
//    "agents": [{"name": "researcher", "role": "...", "goal": "...", "backstory": "...",
//                "tools": ["doc_search", "artifacts"], "max_iter": 4,
//                "history": {"max_messages": 12, "max_tokens": 1024},
//                "max_tokens_per_turn": 96}],
//    "tasks": [{"name": "research", "agent": "researcher", "description": "... {{topic}} ...",
//               "expected_output": "...", "context": [],
//               "prefetch": [{"tool": "doc_search", "arguments": {"query": "{{topic}}"}}]}],
//    "process": "sequential",            (or "hierarchical", with an optional "manager" agent)
//    "inputs": {"topic": "paged attention"},  (defaults; --input overrides)
//    "limits": {"token_budget": 200000, "summary_bytes": 600},
//    "engine": {"max_model_len": 512, "max_num_seqs": 64, "kv_cache_type": "f16"},
//                                (the local engine; optional; agents::parse_engine_settings)
//    "mcp_servers": {"fs": {"command": ["npx", "-y", "@modelcontextprotocol/server-filesystem",
//                                       "/data"],
//                           "env": {"K": "v"}, "cwd": "dir", "timeout_ms": 30000,
//                           "max_concurrency": 8, "rate_per_minute": 0,
//                           "max_message_bytes": 4194304}}}
//   MCP servers (docs/agents.md, "MCP servers"): weir starts each one; agents name its tools as
//   "fs/read_file", or "fs/*" for all of them.
//
//   {"weir": 1, "kind": "group_chat", "name": "...", "agents": [...], "task": "...",
//    "speaker_selection": "round_robin" | "model",
//    "termination": {"any": [{"max_messages": 8}, {"text_mention": "APPROVED"}]},
//    "window": {"max_messages": 16, "max_tokens": 2048}, "max_rounds": 20}
//
// Paths in "tools" are relative to the file's folder. Every problem is reported, each as
// "file:line:column: /json/pointer: message"; unknown keys are errors (with a suggestion). The
// sections other files share are read by the same readers as there: agents (parse_agent), the
// engine, tools and MCP servers (tools::parse_mcp_server).
//
// Thread safety: pure functions.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "weir/agents/config.hpp"
#include "weir/agents/crew.hpp"
#include "weir/agents/group_chat.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/mcp.hpp"

namespace weir {
class ArtifactStore;
}

namespace weir::agents {

enum class AgentsFileKind { crew, group_chat };

struct AgentsFile {
  AgentsFileKind kind = AgentsFileKind::crew;
  std::string name;
  std::filesystem::path base_dir;               // the file's folder
  std::vector<tools::BuiltinToolConfig> tools;  // "tools", in file order
  boost::json::object inputs;                   // defaults
  CrewSpec crew;                                // kind crew
  GroupChatSpec chat;                           // kind group_chat
  std::string task;                             // kind group_chat
  std::int64_t token_budget = 0;                // 0: none
  // "engine": settings of the in-process engine the file's agents share, over
  // LocalModelOptions' defaults (EngineSettings::apply).
  EngineSettings engine;
  std::vector<tools::McpServerConfig> mcp_servers;  // "mcp_servers", in file order
};

// True when `v` is an object whose "kind" is "crew" or "group_chat".
bool is_agents_document(const boost::json::value& v);

// Errors: not_found / io_error / invalid_argument (read_json_file's: a missing file, a folder,
// one over 64 MiB), invalid_workflow with every problem.
Result<AgentsFile> load_agents_file(const std::filesystem::path& path);
Result<AgentsFile> parse_agents_file(std::string_view text, const std::filesystem::path& path);
// A workflow's "crews" entry `name` (a crew file's document without "weir", "kind" and "name",
// or with them), as parse_agents_file reads a file: check_workflow_crew reports its problems
// into the workflow's `f` at `ptr` ("/crews/<name>/tasks/0/agent"; workflow_checks().crew);
// parse_workflow_crew reads it (relative paths against the workflow's folder). Errors:
// invalid_workflow with every problem.
void check_workflow_crew(JsonFields& f, std::string_view name, const boost::json::value& entry,
                         const std::string& ptr, const std::filesystem::path& base_dir);
Result<AgentsFile> parse_workflow_crew(std::string_view name, const boost::json::value& entry,
                                       const std::filesystem::path& workflow_file);

// A crew file as a workflow of one crew node, so that a run service (weir serve --workflows)
// runs it as it runs workflow files: the crew in its "crews" section as written, its model
// `model` (a GGUF file; the crew file's "engine" as that model's), channels "messages" (a chat:
// the last user message fills the crew's only input, else the first input its tasks'
// descriptions name ("{{topic}}"), else its input "request"; each task's output is appended as
// its agent's message), one channel per input (its default the
// file's), and "result" (the final output). The workflow's name is the crew's; its token budget
// the file's. Errors: invalid_workflow (the file's problems), unsupported (a group chat).
Result<std::string> crew_workflow_text(std::string_view crew_text,
                                       const std::filesystem::path& crew_file,
                                       const std::filesystem::path& model);

// The registry for the file's "tools" (tools::make_builtin_tool) and
// its "mcp_servers" (each started and connected here; the tools the agents name, or every tool
// of a server some agent names as "server/*"). `artifacts` backs the artifacts tool. Errors:
// invalid_workflow (unknown tool, a folder that does not exist), the tools' own errors, the MCP
// client's (a command not found, a tool the server does not offer: what it offers is listed).
Result<std::shared_ptr<tools::ToolRegistry>> build_tools(const AgentsFile& file,
                                                         ArtifactStore* artifacts);

// Replaces each agent's "server/*" by the registered tools of that server (sorted).
void expand_tool_patterns(AgentsFile& file, const tools::ToolRegistry& registry);

}  // namespace weir::agents
