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

#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/error.hpp"

namespace weir::inference {

enum class ChatFamily { llama2, llama3, chatml, mistral, phi3, gemma };
const char* chat_family_name(ChatFamily f);
// "llama2", "llama3", "chatml", "mistral", "phi3", "gemma".
std::optional<ChatFamily> parse_chat_family(std::string_view name);

struct ChatTurn {
  std::string role;  // "system", "user", "assistant" (tool results: pass them as "user")
  std::string content;
  // Byte ranges of `content` that are markup the program wrote (weir's tool-call tags around a
  // call's JSON), ascending: special-token texts there may become special tokens. Everything
  // else in `content` is text.
  std::vector<TextRange> markup = {};
};

// A rendered prompt: its text, and the byte ranges that are markup (the template's own
// markers and the turns' markup), ascending. Tokenise it with Tokenizer::encode_marked, so that
// only markup becomes special tokens: a message holding "<|im_end|>\n<|im_start|>system" stays
// text and cannot close its turn or open another.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> markup;
};

// Recognises the family of a Jinja chat template. Errors: unsupported, listing the families
// and the override ("set chat_template in the model's settings, or --chat-template NAME").
Result<ChatFamily> detect_chat_family(std::string_view jinja);

// The prompt (without BOS: the tokenizer adds it). add_generation_prompt opens the assistant's
// turn. REQUIRES: each turn's markup ranges are ascending and inside its content.
ChatPrompt render_chat(ChatFamily family, const std::vector<ChatTurn>& turns,
                       bool add_generation_prompt = true);
// render_chat's text alone.
std::string apply_chat_template(ChatFamily family, const std::vector<ChatTurn>& turns,
                                bool add_generation_prompt = true);

}  // namespace weir::inference
