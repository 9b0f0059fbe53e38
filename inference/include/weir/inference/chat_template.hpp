// Chat templates: messages -> prompt text, for the common model families. A family is
// recognised from the GGUF's tokenizer.chat_template (a Jinja text) by its distinctive markers;
// an unrecognised template is an error that lists the families and how to choose one.
//
// Thread safety: pure functions and values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weir/runtime/error.hpp"

namespace weir::inference {

enum class ChatFamily { llama2, llama3, chatml, mistral, phi3, gemma };
const char* chat_family_name(ChatFamily f);
// "llama2", "llama3", "chatml", "mistral", "phi3", "gemma".
std::optional<ChatFamily> parse_chat_family(std::string_view name);

struct ChatTurn {
  std::string role;  // "system", "user", "assistant" (tool results: pass them as "user")
  std::string content;
};

// Recognises the family of a Jinja chat template. Errors: unsupported, listing the families
// and the override ("set chat_template in the model's settings, or --chat-template NAME").
Result<ChatFamily> detect_chat_family(std::string_view jinja);

// The prompt text (without BOS: the tokenizer adds it). add_generation_prompt opens the
// assistant's turn.
std::string apply_chat_template(ChatFamily family, const std::vector<ChatTurn>& turns,
                                bool add_generation_prompt = true);

}  // namespace weir::inference
