// The agents layer's sections of configuration files, read once for every format that has them
// (DESIGN.md: configuration is parsed by the layer that owns it): a workflow's "models" and
// "agents" entries, a crew or group-chat file's "engine" and agents. Each reader reports every
// problem through a JsonFields (weir/runtime/json_fields.hpp) at its JSON pointer, and sets only
// what the file sets: the defaults are the options' own (LocalModelOptions,
// OpenAIModelOptions, AgentSpec), in their headers.
//
// The tools layer reads its own sections (tools::parse_builtin_tool, tools::parse_mcp_server).
//
// Thread safety: free functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/agents/agent.hpp"
#include "weir/agents/local_model.hpp"
#include "weir/agents/openai_model.hpp"

namespace weir {
class JsonFields;
}

namespace weir::agents {

// A local engine's settings ("engine": {...}): max_model_len (>= 16), max_num_seqs
// (1..4096), max_num_batched_tokens, block_size, threads (>= 1), kv_cache_type ("f32",
// "f16" or "q8_0"). Each set only when the file sets it.
struct EngineSettings {
  std::optional<std::int64_t> max_model_len, max_num_batched_tokens;
  std::optional<std::int32_t> max_num_seqs, block_size, threads;
  std::optional<std::string> kv_cache_type;
  // Writes the settings that are set into `o`; max_model_len only where `o` has none (a
  // command line's --max-model-len wins over the file).
  void apply(LocalModelOptions& o) const;
};
EngineSettings parse_engine_settings(JsonFields& fields, const boost::json::object& o,
                                     std::string_view ptr);

// A "models" entry of a workflow file: a GGUF file ("provider": "local", the default:
// "path", "chat_template", "engine") or an OpenAI-compatible endpoint ("provider": "openai":
// "base_url" (one URL or several), "model", "api_key_env", and the client's fences as in
// OpenAIModelOptions, "timeout_ms" and the like in milliseconds).
struct ModelConfig {
  std::string name;
  bool remote = false;
  std::filesystem::path path;  // local: resolved against the file's folder
  std::optional<std::string> chat_template;
  EngineSettings engine;
  OpenAIModelOptions openai;  // remote
};
std::optional<ModelConfig> parse_model(JsonFields& fields, std::string_view name,
                                       const boost::json::value& entry, std::string_view ptr,
                                       const std::filesystem::path& base_dir);

// An agent's settings, as crew files and workflow files write them: "role" (required), "goal",
// "backstory", "tools", "max_iter" (>= 1), "max_tokens_per_turn" (>= 1), "temperature",
// "seed", "history" ({"max_messages" >= 1, "max_tokens" >= 16, "max_summary_bytes" >= 64}).
// Keys besides those and `extra_keys` (which the caller reads: a crew's "name", a workflow's
// "model") are reported. nullopt when the entry is not an object.
std::optional<AgentSpec> parse_agent(JsonFields& fields, const boost::json::value& entry,
                                     std::string_view ptr,
                                     std::span<const std::string_view> extra_keys = {});

// A history window ({"max_messages", "max_tokens", "max_summary_bytes"}) over `w`.
void parse_history_window(JsonFields& fields, const boost::json::value& v, std::string_view ptr,
                          HistoryWindow& w);

}  // namespace weir::agents
