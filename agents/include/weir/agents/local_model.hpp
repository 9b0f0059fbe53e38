// LocalChatModel: the ChatModel adapter on weir's in-process engine.
//
// Messages become a prompt through the model's chat template (detected from the GGUF, or
// chosen); tools are described in the system turn with one calling convention,
//   <tool_call>{"name": "...", "arguments": {...}}</tool_call>
// and the model's output is parsed for calls in that form (and the other forms
// parse_tool_calls accepts). After "<tool_call>" the engine constrains the output to
// {"name": one of the tools, "arguments": that tool's parameters} (structured output,
// inference/constraint.hpp), so calls are valid JSON for their schema by construction, and a
// call that starts ends within the turn's max_tokens (the budget rule: the model cannot open
// "<tool_call>" where the call could not end); a tool schema the constraint cannot enforce
// leaves calls unconstrained. An output_schema answer likewise always ends valid; a turn too
// short for any valid value is refused (invalid_argument naming both numbers). A malformed call
// comes back as ChatResponse::tool_call_error for the agent loop to feed back. Tool results go to
// the model as user turns wrapped in <tool_response name="..."> ... </tool_response>.
//
// One engine per model file: open() goes through the inference::EngineRegistry it is given (the
// program's, owned by its composition root), so every agent that names the same file shares
// its weights, its KV cache and its batches. The engine lives as long as the registry or a
// LocalChatModel on it holds it.
//
// Thread safety: async_chat may be called concurrently from any number of coroutines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weir/agents/chat.hpp"

namespace weir {
class MemoryBudget;
}
namespace weir::inference {
class Engine;
class EngineRegistry;
class Tokenizer;
class Constraint;
struct ChatPrompt;
enum class ChatFamily;
}  // namespace weir::inference

namespace weir::agents {

struct LocalModelOptions {
  std::optional<std::string> chat_template;  // family name; default: detected, else chatml
  std::int32_t max_num_seqs = 64;
  // Tokens a prompt and its reply may hold together. 0: the model's context length, capped at
  // 4096 (a 512-token model gets 512). Above the model's context: invalid_argument.
  std::int64_t max_model_len = 0;
  std::int64_t max_num_batched_tokens = 1024;
  std::int32_t block_size = 16;
  std::int32_t threads = 0;  // 0: the machine's cores
  // The KV pool's bytes; with a budget, never more than its kv_cache category grants.
  std::size_t kv_cache_bytes = 128u << 20;
  // "f32", "f16" (twice the tokens in the same bytes) or "q8_0" (up to 3.9 times; the CPU runner;
  // EngineConfig's kv_cache_type). Another name: invalid_argument from open().
  std::string kv_cache_type = "f32";
  // The KV pool is reserved from kv_cache when set. REQUIRES: the budget outlives the engine:
  // the registry it came from and every LocalChatModel on it.
  MemoryBudget* budget = nullptr;
  // Random-weight models never emit end-of-generation; run every turn to max_tokens.
  bool ignore_eog = false;
  // When set, the engine reports its gauges under {engine=<metrics_name>} (EngineConfig).
  std::string metrics_name;
};

class LocalChatModel final : public ChatModel {
 public:
  // Loads (or reuses) `engines`' engine for `path`; the engine's settings come from the options
  // of the first open() of that file in that registry. Errors: model_error, not_found,
  // unsupported (an unknown chat template, with the families to choose from),
  // memory_budget_exceeded.
  static Result<std::shared_ptr<LocalChatModel>> open(inference::EngineRegistry& engines,
                                                      const std::filesystem::path& path,
                                                      LocalModelOptions options = {});
  ~LocalChatModel() override;

  std::string name() const override { return name_; }
  boost::asio::awaitable<Result<ChatResponse>> async_chat(std::vector<Message> messages,
                                                          std::vector<ToolSpec> tools,
                                                          ChatParams params) override;
  std::int64_t count_tokens(std::string_view text) const override;
  std::int64_t context_length() const override;

  inference::Engine& engine() const { return *engine_; }
  const inference::Tokenizer& tokenizer() const { return *tokenizer_; }

  // The prompt text for `messages` and `tools` (exposed for tests and `weir` debugging).
  std::string render_prompt(const std::vector<Message>& messages,
                            const std::vector<ToolSpec>& tools) const;
  // The prompt's token ids, BOS first when the vocabulary asks for it. Only the chat template's
  // own markers (and weir's tool-call markup) become special tokens; what the messages hold is
  // text through and through: "</s>" or "<|im_start|>" in a user message, a tool's output or a
  // document is those characters, never end-of-sequence or a new turn. `reply_prefix` is
  // markup the reply starts with (serve's forced "<tool_call>").
  std::vector<std::int32_t> encode_prompt(const std::vector<Message>& messages,
                                          const std::vector<ToolSpec>& tools,
                                          std::string_view reply_prefix = {}) const;

  // The constraint for a tool call: {"name": one of `tools`, "arguments": that tool's
  // parameters} (compiled once per set of tools: compile_constraint caches). An error naming
  // the tool ("tool 'odd': ...", pointers within its parameters) when a tool's schema uses a
  // keyword the constraint cannot enforce.
  Result<std::shared_ptr<const inference::Constraint>> tool_call_constraint(
      const std::vector<ToolSpec>& tools) const;

  LocalChatModel(std::string name, std::shared_ptr<inference::Engine> engine,
                 std::shared_ptr<const inference::Tokenizer> tokenizer, int family);

 private:
  inference::ChatPrompt render(const std::vector<Message>& messages,
                               const std::vector<ToolSpec>& tools) const;

  std::string name_;
  std::shared_ptr<inference::Engine> engine_;
  std::shared_ptr<const inference::Tokenizer> tokenizer_;
  int family_;  // inference::ChatFamily
};

// `s` with every invalid UTF-8 sequence (and NUL) replaced by U+FFFD.
std::string to_valid_utf8(std::string_view s);

// The system-turn text that describes `tools` and the calling convention (empty without tools).
std::string describe_tools(const std::vector<ToolSpec>& tools);

}  // namespace weir::agents
