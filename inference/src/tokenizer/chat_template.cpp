#include "weir/inference/chat_template.hpp"

namespace weir::inference {

const char* chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::llama2:
      return "llama2";
    case ChatFamily::llama3:
      return "llama3";
    case ChatFamily::chatml:
      return "chatml";
    case ChatFamily::mistral:
      return "mistral";
    case ChatFamily::phi3:
      return "phi3";
    case ChatFamily::gemma:
      return "gemma";
  }
  return "unknown";
}

std::optional<ChatFamily> parse_chat_family(std::string_view n) {
  for (auto f : {ChatFamily::llama2, ChatFamily::llama3, ChatFamily::chatml, ChatFamily::mistral,
                 ChatFamily::phi3, ChatFamily::gemma}) {
    if (n == chat_family_name(f)) return f;
  }
  return std::nullopt;
}

Result<ChatFamily> detect_chat_family(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<|start_header_id|>")) return ChatFamily::llama3;
  if (has("<|im_start|>")) return ChatFamily::chatml;
  if (has("<start_of_turn>")) return ChatFamily::gemma;
  if (has("<|user|>") && has("<|end|>")) return ChatFamily::phi3;
  if (has("[INST]")) return has("<<SYS>>") ? ChatFamily::llama2 : ChatFamily::mistral;
  return Error(Errc::unsupported,
               "the model's chat template is not one weir recognises (known families: llama2, "
               "llama3, chatml, "
               "mistral, phi3, gemma); choose one explicitly: \"chat_template\": \"chatml\" in the "
               "workflow's model, "
               "or --chat-template chatml");
}

std::string apply_chat_template(ChatFamily family, const std::vector<ChatTurn>& turns, bool gen) {
  std::string out, system;
  switch (family) {
    case ChatFamily::chatml:
      for (const auto& m : turns)
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (gen) out += "<|im_start|>assistant\n";
      return out;
    case ChatFamily::llama3:
      for (const auto& m : turns)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFamily::phi3:
      for (const auto& m : turns) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      if (gen) out += "<|assistant|>\n";
      return out;
    case ChatFamily::gemma:  // no system role: the system text opens the first user turn
      for (const auto& m : turns) {
        if (m.role == "system") {
          system += m.content + "\n\n";
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : "user";
        out += "<start_of_turn>" + role + "\n" + (role == "user" ? system : "") + m.content +
               "<end_of_turn>\n";
        if (role == "user") system.clear();
      }
      if (gen) out += "<start_of_turn>model\n";
      return out;
    case ChatFamily::llama2:
    case ChatFamily::mistral:
      for (const auto& m : turns) {
        if (m.role == "system") {
          system = family == ChatFamily::llama2 ? "<<SYS>>\n" + m.content + "\n<</SYS>>\n\n"
                                                : m.content + "\n\n";
        } else if (m.role == "assistant") {
          out += " " + m.content + "</s>";
        } else {
          out +=
              (out.empty() ? "" : "<s>") + std::string("[INST] ") + system + m.content + " [/INST]";
          system.clear();
        }
      }
      return out;  // the assistant's turn follows [/INST]
  }
  return out;
}

}  // namespace weir::inference
