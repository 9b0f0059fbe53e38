// Pieces of the OpenAI wire format shared by OpenAIChatModel and the fuzz target. Private to
// weir::agents. (parse_chat_completion and ChatStreamAssembler are public: openai_model.hpp.)
#pragma once

#include <string>
#include <string_view>

namespace weir::agents {

// The message of a server's error body ({"error": {"message": ...}}, {"error": "..."},
// {"message": ...}), else the body's first 300 bytes on one line.
std::string server_message(std::string_view body);

}  // namespace weir::agents
