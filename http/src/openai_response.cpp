// OpenAI responses: whole completions and stream chunks built from the codec's structs (a
// server's side) and read back into them (a client's side), and error bodies read back.
#include <algorithm>

#include <boost/json.hpp>

#include "weir/http/openai.hpp"
#include "weir/runtime/json_parse.hpp"

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
    if (delta) {
      o["index"] = c.index >= 0 ? c.index : i;
      if (c.id.empty()) o.erase("id"), o.erase("type");
      if (c.name.empty()) o["function"].as_object().erase("name");
    }
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
                  {"logprobs", completion_logprobs(c.logprobs, c.text_offset)},
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
                  {"logprobs", completion_logprobs(c.logprobs, c.text_offset)},
                  {"finish_reason", finish(c.finish_reason)}});
  }
  o["choices"] = std::move(cs);
  o["usage"] = usage ? json::value(usage_json(*usage)) : json::value(nullptr);
  return json::serialize(o);
}

// --- responses read back (a client's side) -------------------------------------------------

namespace {

// Lenient readers: a missing field or one of another type reads as empty.
const json::object* obj(const json::value* v) {
  return v ? v->if_object() : nullptr;
}
const json::value* field(const json::object* o, std::string_view k) {
  return o ? o->if_contains(k) : nullptr;
}
std::string str(const json::value* v) {
  if (v && v->is_string()) return std::string(v->get_string());
  return {};
}
// A count: a non-negative integer (or a double holding one), else 0.
std::int64_t count(const json::value* v) {
  if (v && v->is_int64()) return std::max<std::int64_t>(0, v->get_int64());
  if (v && v->is_uint64())
    return static_cast<std::int64_t>(std::min<std::uint64_t>(v->get_uint64(), INT64_MAX));
  if (v && v->is_double() && v->get_double() >= 0 && v->get_double() < 9e18)
    return static_cast<std::int64_t>(v->get_double());
  return 0;
}
float real(const json::value* v) {
  return v && v->is_number() ? static_cast<float>(v->to_number<double>()) : 0.0f;
}

// Message content: a string, null, or text parts (their text concatenated).
std::string content_text(const json::value* v) {
  if (!v) return {};
  if (v->is_string()) return std::string(v->get_string());
  std::string s;
  if (const auto* a = v->if_array())
    for (const auto& part : *a) s += str(field(part.if_object(), "text"));
  return s;
}

std::optional<Usage> read_usage(const json::value* v) {
  const auto* u = obj(v);
  if (!u) return std::nullopt;
  Usage usage;
  usage.prompt_tokens = count(field(u, "prompt_tokens"));
  usage.completion_tokens = count(field(u, "completion_tokens"));
  usage.cached_tokens = count(field(obj(field(u, "prompt_tokens_details")), "cached_tokens"));
  return usage;
}

void read_envelope(const json::object* root, Envelope& e) {
  e.id = str(field(root, "id"));
  e.created = count(field(root, "created"));
  e.model = str(field(root, "model"));
}

// A tool call's function: arguments sent as an object (some servers do) become its text.
void read_function(const json::object* fn, ToolCall& c) {
  c.name += str(field(fn, "name"));
  const auto* args = field(fn, "arguments");
  if (args && args->is_object())
    c.arguments += json::serialize(*args);
  else
    c.arguments += str(args);
}

// Chat logprobs ({"content": [{token, logprob, top_logprobs: [...]}]}) appended to `out`.
void read_chat_logprobs(const json::value* v, std::optional<std::vector<TokenLogprobs>>& out) {
  const auto* lp = obj(v);
  if (!lp) return;
  if (!out) out.emplace();
  const auto* content = field(lp, "content");
  if (!content || !content->is_array()) return;
  for (const auto& t : content->get_array()) {
    const auto* to = t.if_object();
    TokenLogprobs tl{str(field(to, "token")), real(field(to, "logprob")), {}};
    if (const auto* top = field(to, "top_logprobs"); top && top->is_array())
      for (const auto& a : top->get_array())
        tl.top.push_back(
            {str(field(a.if_object(), "token")), real(field(a.if_object(), "logprob"))});
    out->push_back(std::move(tl));
  }
}

// Completion logprobs ({"tokens", "token_logprobs", "top_logprobs": [{token: logprob}]}).
void read_completion_logprobs(const json::value* v,
                              std::optional<std::vector<TokenLogprobs>>& out) {
  const auto* lp = obj(v);
  if (!lp) return;
  if (!out) out.emplace();
  const auto* tokens = field(lp, "tokens");
  if (!tokens || !tokens->is_array()) return;
  const auto* lps = field(lp, "token_logprobs");
  const auto* tops = field(lp, "top_logprobs");
  for (std::size_t i = 0; i < tokens->get_array().size(); ++i) {
    TokenLogprobs tl;
    tl.token = str(&tokens->get_array()[i]);
    if (lps && lps->is_array() && i < lps->get_array().size())
      tl.logprob = real(&lps->get_array()[i]);
    if (tops && tops->is_array() && i < tops->get_array().size())
      if (const auto* top = tops->get_array()[i].if_object())
        for (const auto& [k, x] : *top) tl.top.push_back({std::string(k), real(&x)});
    out->push_back(std::move(tl));
  }
}

Result<json::value> parse_body(std::string_view body, const char* what) {
  auto parsed = parse_json(body, what);
  if (!parsed) return Error(Errc::model_error, parsed.error().message);
  if (!parsed->value.is_object())
    return Error(Errc::model_error, std::string(what) + " is not a JSON object: " +
                                        parse_error_body(200, body).message);
  return std::move(parsed->value);
}

void sort_choices(std::vector<Choice>& cs) {
  std::stable_sort(cs.begin(), cs.end(),
                   [](const Choice& a, const Choice& b) { return a.index < b.index; });
}

int choice_index(const json::object* choice, std::size_t position) {
  const auto* i = field(choice, "index");
  return i && (i->is_int64() || i->is_uint64())
             ? static_cast<int>(std::min<std::int64_t>(count(i), INT32_MAX))
             : static_cast<int>(position);
}

}  // namespace

ApiError parse_error_body(int status, std::string_view body) {
  ApiError e;
  e.status = status;
  if (auto parsed = parse_json(body, "error body")) {
    const auto* o = parsed->value.if_object();
    const auto* err = field(o, "error");
    if (err && err->is_string()) {
      e.message = err->get_string();
    } else if (const auto* eo = obj(err)) {
      e.message = str(field(eo, "message"));
      e.param = str(field(eo, "param"));
      if (const auto* c = field(eo, "code"); c && c->is_number())
        e.code = json::serialize(*c);
      else
        e.code = str(c);
    } else {
      e.message = str(field(o, "message"));
    }
    if (!e.message.empty()) return e;
  }
  e.message = std::string(body.substr(0, 300));
  std::replace(e.message.begin(), e.message.end(), '\n', ' ');
  return e;
}

ChatMessage assistant_message(const Choice& c) {
  return {"assistant", c.text, c.tool_calls, {}, {}};
}

// A response's envelope, usage and choices; `read_choice(choice object, Choice&)` reads what
// differs between chat and text completions. `what` names the response in errors.
template <class ReadChoice>
Result<Completion> parse_choices(std::string_view body, const char* what, ReadChoice read_choice) {
  auto parsed = parse_body(body, what);
  if (!parsed) return std::move(parsed).error();
  const auto* root = parsed->if_object();
  const auto* choices = field(root, "choices");
  if (!choices || !choices->is_array() || choices->get_array().empty())
    return Error(Errc::model_error,
                 std::string(what) + " without choices: " + parse_error_body(200, body).message);
  Completion out;
  read_envelope(root, out.envelope);
  out.usage = read_usage(field(root, "usage"));
  std::size_t position = 0;
  for (const auto& c : choices->get_array()) {
    const auto* choice = c.if_object();
    Choice ch;
    ch.index = choice_index(choice, position++);
    ch.finish_reason = str(field(choice, "finish_reason"));
    if (auto s = read_choice(choice, ch); !s) return std::move(s).error();
    out.choices.push_back(std::move(ch));
  }
  sort_choices(out.choices);
  return out;
}

Result<Completion> parse_chat_completion(std::string_view body) {
  return parse_choices(
      body, "chat completion", [](const json::object* choice, Choice& ch) -> Status {
        const auto* msg = obj(field(choice, "message"));
        if (!msg) return Error(Errc::model_error, "chat completion choice without a message");
        ch.text = content_text(field(msg, "content"));
        if (ch.text.empty()) ch.text = str(field(msg, "refusal"));
        read_chat_logprobs(field(choice, "logprobs"), ch.logprobs);
        if (const auto* tc = field(msg, "tool_calls"); tc && tc->is_array()) {
          for (const auto& call : tc->get_array()) {
            const auto* co = call.if_object();
            ToolCall t;
            t.id = str(field(co, "id"));
            read_function(obj(field(co, "function")), t);
            ch.tool_calls.push_back(std::move(t));
          }
        }
        return {};
      });
}

Result<Completion> parse_completion(std::string_view body) {
  return parse_choices(body, "completion", [](const json::object* choice, Choice& ch) -> Status {
    ch.text = str(field(choice, "text"));
    read_completion_logprobs(field(choice, "logprobs"), ch.logprobs);
    return {};
  });
}

Status StreamAssembler::add(std::string_view data) {
  if (data == "[DONE]") {
    done_ = true;
    return {};
  }
  auto parsed = parse_json(data, "stream chunk");
  if (!parsed) return Error(Errc::model_error, parsed.error().message);
  const auto* root = parsed->value.if_object();
  if (!root)
    return Error(Errc::model_error,
                 "a stream chunk is not a JSON object: " + parse_error_body(200, data).message);
  if (field(root, "error"))
    return Error(Errc::model_error, "error in the stream: " + parse_error_body(200, data).message);
  if (envelope_.id.empty()) read_envelope(root, envelope_);
  if (auto u = read_usage(field(root, "usage"))) usage_ = u;
  const auto* choices = field(root, "choices");
  if (!choices || !choices->is_array()) return {};
  std::size_t position = 0;
  for (const auto& c : choices->get_array()) {
    const auto* choice = c.if_object();
    const auto index = static_cast<std::size_t>(choice_index(choice, position++));
    if (index >= kMaxChoices)
      return Error(Errc::model_error, "stream chunk names choice index " + std::to_string(index) +
                                          " (at most " + std::to_string(kMaxChoices) + ")");
    if (parts_.size() <= index) parts_.resize(index + 1);
    Part& p = parts_[index];
    p.seen = true;
    if (auto f = str(field(choice, "finish_reason")); !f.empty()) p.finish_reason = std::move(f);
    const auto* delta = obj(field(choice, "delta"));
    if (!delta) {  // a text_completion chunk
      auto text = str(field(choice, "text"));
      tokens_ |= !text.empty();
      p.text += text;
      read_completion_logprobs(field(choice, "logprobs"), p.logprobs);
      continue;
    }
    auto text = str(field(delta, "content"));
    auto refusal = str(field(delta, "refusal"));
    tokens_ |= !text.empty() || !refusal.empty();
    p.text += text;
    p.refusal += refusal;
    read_chat_logprobs(field(choice, "logprobs"), p.logprobs);
    const auto* tc = field(delta, "tool_calls");
    if (!tc || !tc->is_array()) continue;
    std::size_t at = 0;
    for (const auto& call : tc->get_array()) {
      const auto* co = call.if_object();
      const auto* i = field(co, "index");
      const std::uint64_t k = i && (i->is_int64() || i->is_uint64())
                                  ? static_cast<std::uint64_t>(count(i))
                                  : static_cast<std::uint64_t>(at);
      ++at;
      if (k >= kMaxToolCalls)
        return Error(Errc::model_error, "stream chunk names tool call index " + std::to_string(k) +
                                            " (at most " + std::to_string(kMaxToolCalls) + ")");
      if (p.calls.size() <= k) {
        p.calls.resize(k + 1);
        p.call_seen.resize(k + 1);
      }
      p.call_seen[k] = true;
      tokens_ = true;
      if (auto id = str(field(co, "id")); !id.empty()) p.calls[k].id = std::move(id);
      read_function(obj(field(co, "function")), p.calls[k]);
    }
  }
  return {};
}

bool StreamAssembler::finished() const noexcept {
  bool any = false;
  for (const auto& p : parts_) {
    if (!p.seen) continue;
    if (p.finish_reason.empty()) return false;
    any = true;
  }
  return any;
}

Completion StreamAssembler::finish() const {
  Completion out;
  out.envelope = envelope_;
  out.usage = usage_;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const Part& p = parts_[i];
    if (!p.seen) continue;
    Choice ch;
    ch.index = static_cast<int>(i);
    ch.text = p.text.empty() ? p.refusal : p.text;
    ch.finish_reason = p.finish_reason;
    ch.logprobs = p.logprobs;
    for (std::size_t k = 0; k < p.calls.size(); ++k)
      if (p.call_seen[k]) ch.tool_calls.push_back(p.calls[k]);
    out.choices.push_back(std::move(ch));
  }
  return out;
}

}  // namespace weir::http::openai
