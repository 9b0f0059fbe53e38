// OpenAI responses: whole completions and stream chunks built from the codec's structs.
#include <boost/json.hpp>

#include "weir/http/openai.hpp"

namespace weir::http::openai {

namespace json = boost::json;

// --- responses ------------------------------------------------------------------------------

json::object usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {

json::array bytes_of(const std::string& s) {
  json::array a;
  for (unsigned char c : s) a.push_back(c);
  return a;
}

json::value chat_logprobs(const std::optional<std::vector<TokenLogprobs>>& lps) {
  if (!lps) return nullptr;
  json::array content;
  for (const auto& t : *lps) {
    json::array top;
    for (const auto& a : t.top)
      top.push_back({{"token", a.token}, {"logprob", a.logprob}, {"bytes", bytes_of(a.token)}});
    content.push_back({{"token", t.token},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return json::object{{"content", std::move(content)}};
}

json::value completion_logprobs(const std::optional<std::vector<TokenLogprobs>>& lps,
                                std::size_t text_offset) {
  if (!lps) return nullptr;
  json::array tokens, token_lps, tops, offsets;
  for (const auto& t : *lps) {
    tokens.push_back(json::value(t.token));
    token_lps.push_back(t.logprob);
    json::object top;
    for (const auto& a : t.top) top[a.token] = a.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += t.token.size();
  }
  return json::object{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_lps)},
                      {"top_logprobs", std::move(tops)},
                      {"text_offset", std::move(offsets)}};
}

json::array tool_calls_json(const std::vector<ToolCall>& calls, bool delta) {
  json::array a;
  int i = 0;
  for (const auto& c : calls) {
    json::object o{{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
    if (delta) o["index"] = i;
    ++i;
    a.push_back(std::move(o));
  }
  return a;
}

json::value finish(const std::string& f) {
  return f.empty() ? json::value(nullptr) : json::value(f);
}

json::object head(const Envelope& e, const char* object) {
  return {{"id", e.id}, {"object", object}, {"created", e.created}, {"model", e.model}};
}

}  // namespace

std::string chat_completion(const Envelope& e, const std::vector<Choice>& choices, const Usage& u) {
  json::object o = head(e, "chat.completion");
  json::array cs;
  for (const auto& c : choices) {
    json::object msg{{"role", "assistant"},
                     {"content", c.text.empty() && !c.tool_calls.empty() ? json::value(nullptr)
                                                                         : json::value(c.text)}};
    if (!c.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(c.tool_calls, false);
    cs.push_back({{"index", c.index},
                  {"message", std::move(msg)},
                  {"logprobs", chat_logprobs(c.logprobs)},
                  {"finish_reason", finish(c.finish_reason)}});
  }
  o["choices"] = std::move(cs);
  o["usage"] = usage_json(u);
  return json::serialize(o);
}

std::string chat_chunk(const Envelope& e, const std::vector<Choice>& choices, bool with_role,
                       const Usage* usage) {
  json::object o = head(e, "chat.completion.chunk");
  json::array cs;
  for (const auto& c : choices) {
    json::object delta;
    if (with_role) delta["role"] = "assistant";
    if (!c.text.empty() || (with_role && c.tool_calls.empty())) delta["content"] = c.text;
    if (!c.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(c.tool_calls, true);
    cs.push_back({{"index", c.index},
                  {"delta", std::move(delta)},
                  {"logprobs", chat_logprobs(c.logprobs)},
                  {"finish_reason", finish(c.finish_reason)}});
  }
  o["choices"] = std::move(cs);
  o["usage"] = usage ? json::value(usage_json(*usage)) : json::value(nullptr);
  return json::serialize(o);
}

std::string completion(const Envelope& e, const std::vector<Choice>& choices, const Usage& u) {
  json::object o = head(e, "text_completion");
  json::array cs;
  for (const auto& c : choices) {
    cs.push_back({{"index", c.index},
                  {"text", c.text},
                  {"logprobs", completion_logprobs(c.logprobs, 0)},
                  {"finish_reason", finish(c.finish_reason)}});
  }
  o["choices"] = std::move(cs);
  o["usage"] = usage_json(u);
  return json::serialize(o);
}

std::string completion_chunk(const Envelope& e, const std::vector<Choice>& choices,
                             const Usage* usage) {
  json::object o = head(e, "text_completion");
  json::array cs;
  for (const auto& c : choices) {
    cs.push_back({{"index", c.index},
                  {"text", c.text},
                  {"logprobs", completion_logprobs(c.logprobs, 0)},
                  {"finish_reason", finish(c.finish_reason)}});
  }
  o["choices"] = std::move(cs);
  o["usage"] = usage ? json::value(usage_json(*usage)) : json::value(nullptr);
  return json::serialize(o);
}

}  // namespace weir::http::openai
