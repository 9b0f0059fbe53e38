#include "weir/inference/chat_template.hpp"

#include <algorithm>

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

namespace {

// Appends text to a prompt, remembering which bytes are markup.
class PromptBuilder {
 public:
  void markup(std::string_view s) { append(s, true); }
  void content(std::string_view s) { append(s, false); }
  // A turn's content with its own markup ranges.
  void turn(const ChatTurn& t) {
    const std::size_t base = p_.text.size();
    p_.text += t.content;
    for (const TextRange& r : t.markup)
      mark(base + std::min(r.begin, t.content.size()), base + std::min(r.end, t.content.size()));
  }
  bool empty() const { return p_.text.empty(); }
  ChatPrompt take() { return std::move(p_); }

 private:
  void append(std::string_view s, bool is_markup) {
    if (is_markup) mark(p_.text.size(), p_.text.size() + s.size());
    p_.text += s;
  }
  void mark(std::size_t begin, std::size_t end) {
    if (begin >= end) return;
    if (!p_.markup.empty() && begin <= p_.markup.back().end) {  // adjacent: one range
      p_.markup.back().end = std::max(p_.markup.back().end, end);
      return;
    }
    p_.markup.push_back({begin, end});
  }
  ChatPrompt p_;
};

}  // namespace

ChatPrompt render_chat(ChatFamily family, const std::vector<ChatTurn>& turns, bool gen) {
  PromptBuilder b;
  std::vector<const ChatTurn*> system;  // gemma, llama2, mistral: folded into the next user turn
  auto flush_system = [&](std::string_view open, std::string_view close) {
    for (const ChatTurn* t : system) {
      b.markup(open);
      b.turn(*t);
      b.markup(close);
    }
    system.clear();
  };
  switch (family) {
    case ChatFamily::chatml:
      for (const auto& m : turns) {
        b.markup("<|im_start|>" + m.role + "\n");
        b.turn(m);
        b.markup("<|im_end|>\n");
      }
      if (gen) b.markup("<|im_start|>assistant\n");
      break;
    case ChatFamily::llama3:
      for (const auto& m : turns) {
        b.markup("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
        b.turn(m);
        b.markup("<|eot_id|>");
      }
      if (gen) b.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatFamily::phi3:
      for (const auto& m : turns) {
        b.markup("<|" + m.role + "|>\n");
        b.turn(m);
        b.markup("<|end|>\n");
      }
      if (gen) b.markup("<|assistant|>\n");
      break;
    case ChatFamily::gemma:  // no system role: the system text opens the first user turn
      for (const auto& m : turns) {
        if (m.role == "system") {
          system.push_back(&m);
          continue;
        }
        const bool user = m.role != "assistant";
        b.markup(user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (user) flush_system("", "\n\n");
        b.turn(m);
        b.markup("<end_of_turn>\n");
      }
      if (gen) b.markup("<start_of_turn>model\n");
      break;
    case ChatFamily::llama2:
    case ChatFamily::mistral:
      for (const auto& m : turns) {
        if (m.role == "system") {
          system.assign(1, &m);  // the last system turn counts
        } else if (m.role == "assistant") {
          b.markup(" ");
          b.turn(m);
          b.markup("</s>");
        } else {
          b.markup(b.empty() ? "[INST] " : "<s>[INST] ");
          if (family == ChatFamily::llama2)
            flush_system("<<SYS>>\n", "\n<</SYS>>\n\n");
          else
            flush_system("", "\n\n");
          b.turn(m);
          b.markup(" [/INST]");
        }
      }
      break;  // the assistant's turn follows [/INST]
  }
  return b.take();
}

std::string apply_chat_template(ChatFamily family, const std::vector<ChatTurn>& turns, bool gen) {
  return render_chat(family, turns, gen).text;
}

}  // namespace weir::inference
