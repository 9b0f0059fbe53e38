#include "weir/agents/local_model.hpp"

#include <algorithm>

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/agents/tool_call_parser.hpp"
#include "weir/inference/chat_template.hpp"
#include "weir/inference/constraint.hpp"
#include "weir/inference/engine.hpp"
#include "weir/inference/engine_async.hpp"
#include "weir/inference/engine_registry.hpp"
#include "weir/inference/gguf.hpp"
#include "weir/inference/model.hpp"
#include "weir/inference/runner.hpp"
#include "weir/inference/tokenizer.hpp"
#include "weir/runtime/log.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;
namespace inf = weir::inference;

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + static_cast<std::size_t>(len) <= s.size();
    std::uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; ok && k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
      ok = false;
    if (ok && cp != 0) {
      out.append(s.substr(i, static_cast<std::size_t>(len)));
      i += static_cast<std::size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
  return out;
}

std::string describe_tools(const std::vector<ToolSpec>& tools) {
  if (tools.empty()) return {};
  std::string s = "\n\nYou can call these tools:\n";
  for (const auto& t : tools) {
    s += "- " + t.name + ": " + t.description + "\n  parameters: " + json::serialize(t.parameters) +
         "\n";
  }
  s += "To call a tool, answer with only:\n<tool_call>{\"name\": \"TOOL\", \"arguments\": "
       "{...}}</tool_call>\nWhen you have the final answer, answer in plain text without a tool "
       "call.";
  return s;
}

LocalChatModel::LocalChatModel(std::string name, std::shared_ptr<inf::Engine> engine,
                               std::shared_ptr<const inf::Tokenizer> tokenizer, int family)
    : name_(std::move(name)),
      engine_(std::move(engine)),
      tokenizer_(std::move(tokenizer)),
      family_(family) {}

LocalChatModel::~LocalChatModel() = default;

Result<std::shared_ptr<LocalChatModel>> LocalChatModel::open(inf::EngineRegistry& engines,
                                                             const std::filesystem::path& path,
                                                             LocalModelOptions options) {
  auto file = inf::GgufFile::open(path);
  if (!file) return std::move(file).error();
  auto tok = inf::Tokenizer::from_gguf(**file);
  if (!tok) return std::move(tok).error();
  inf::ChatFamily family = inf::ChatFamily::chatml;
  if (options.chat_template) {
    auto f = inf::parse_chat_family(*options.chat_template);
    if (!f)
      return Error(Errc::unsupported, "unknown chat template '" + *options.chat_template +
                                          "' (llama2, llama3, chatml, mistral, phi3, gemma)");
    family = *f;
  } else if (auto t = (*file)->get_string("tokenizer.chat_template"); t && *t && !(*t)->empty()) {
    auto f = inf::detect_chat_family(**t);
    if (!f) return std::move(f).error();
    family = *f;
  }
  std::shared_ptr<const inf::Tokenizer> tokenizer = std::move(*tok);
  const inf::Tokenizer* tp = tokenizer.get();
  auto engine = engines.get(
      path, [&](std::shared_ptr<const inf::Model> m) -> Result<std::unique_ptr<inf::Engine>> {
        auto r = inf::make_runner(m, inf::Device::automatic, options.threads);
        if (!r) return std::move(r).error();
        std::int64_t len = options.max_model_len;
        if (len <= 0) len = std::min<std::int64_t>(4096, m->hp().context_length);
        inf::EngineConfig cfg;
        cfg.max_num_seqs = options.max_num_seqs;
        cfg.max_num_batched_tokens = options.max_num_batched_tokens;
        cfg.block_size = options.block_size;
        cfg.max_model_len = len;
        cfg.kv_cache_bytes = options.kv_cache_bytes;
        auto kv_type = inf::parse_kv_type(options.kv_cache_type);
        if (!kv_type) return std::move(kv_type).error();
        cfg.kv_cache_type = *kv_type;
        cfg.budget = options.budget;
        cfg.metrics_name = options.metrics_name;
        if (!options.ignore_eog) cfg.eog_tokens = tp->eog_tokens();
        cfg.token_text = [tokenizer](std::int32_t id) { return tokenizer->token_to_piece(id); };
        return inf::Engine::create(std::move(r->runner), std::move(cfg));
      });
  if (!engine) return std::move(engine).error();
  return std::make_shared<LocalChatModel>(path.filename().string(), std::move(*engine),
                                          std::move(tokenizer), static_cast<int>(family));
}

namespace {

// A turn's content: weir's markup (tool-call and tool-response tags) and text (what a model, a
// user, a tool or a document wrote).
struct TurnText {
  inf::ChatTurn turn;
  void markup(std::string_view s) {
    turn.markup.push_back({turn.content.size(), turn.content.size() + s.size()});
    turn.content += s;
  }
  void text(std::string_view s) { turn.content += s; }
};

}  // namespace

inf::ChatPrompt LocalChatModel::render(const std::vector<Message>& messages,
                                       const std::vector<ToolSpec>& tools) const {
  std::vector<inf::ChatTurn> turns;
  std::string system;
  for (const auto& m : messages) {
    TurnText t;
    switch (m.role) {
      case Role::system:
        system += (system.empty() ? "" : "\n\n") + m.content;
        continue;
      case Role::user:
        t.turn.role = "user";
        t.text(m.content);
        break;
      case Role::assistant:
        t.turn.role = "assistant";
        t.text(m.content);
        for (const auto& c : m.tool_calls) {
          if (!t.turn.content.empty()) t.text("\n");
          t.markup("<tool_call>");
          t.text(json::serialize(json::object{{"name", c.name}, {"arguments", c.arguments}}));
          t.markup("</tool_call>");
        }
        break;
      case Role::tool:
        t.turn.role = "user";
        t.markup("<tool_response name=\"");
        t.text(m.name);
        t.markup("\">\n");
        t.text(m.content);
        t.markup("\n</tool_response>");
        break;
    }
    turns.push_back(std::move(t.turn));
  }
  system += describe_tools(tools);
  if (!system.empty()) turns.insert(turns.begin(), inf::ChatTurn{"system", system});
  return inf::render_chat(static_cast<inf::ChatFamily>(family_), turns, true);
}

std::string LocalChatModel::render_prompt(const std::vector<Message>& messages,
                                          const std::vector<ToolSpec>& tools) const {
  return render(messages, tools).text;
}

std::vector<std::int32_t> LocalChatModel::encode_prompt(const std::vector<Message>& messages,
                                                        const std::vector<ToolSpec>& tools,
                                                        std::string_view reply_prefix) const {
  inf::ChatPrompt p = render(messages, tools);
  if (!reply_prefix.empty()) {
    p.markup.push_back({p.text.size(), p.text.size() + reply_prefix.size()});
    p.text += reply_prefix;
  }
  return tokenizer_->encode_marked(p.text, p.markup, true);
}

Result<std::shared_ptr<const inf::Constraint>> LocalChatModel::tool_call_constraint(
    const std::vector<ToolSpec>& tools) const {
  json::array branches;
  for (const auto& t : tools) {
    json::object args = t.parameters;
    if (args.empty()) args["type"] = "object";
    json::object props;
    props["name"] = json::object{{"const", t.name}};
    props["arguments"] = std::move(args);
    json::object branch;
    branch["type"] = "object";
    branch["properties"] = std::move(props);
    branch["required"] = json::array{"name", "arguments"};
    branch["additionalProperties"] = false;
    branches.push_back(std::move(branch));
  }
  const std::string schema = json::serialize(json::object{{"anyOf", std::move(branches)}});
  auto c =
      inf::compile_constraint({inf::ConstraintSpec::Kind::json_schema, schema, {}}, *tokenizer_);
  if (c) return *c;
  // Which tool: its parameters alone give the error at their own JSON pointers.
  for (const auto& t : tools) {
    json::object args = t.parameters;
    if (args.empty()) args["type"] = "object";
    auto one = inf::compile_constraint(
        {inf::ConstraintSpec::Kind::json_schema, json::serialize(args), {}}, *tokenizer_);
    if (!one) return Error(one.error().code, "tool '" + t.name + "': " + one.error().message);
  }
  return std::move(c).error();
}

std::int64_t LocalChatModel::count_tokens(std::string_view text) const {
  return static_cast<std::int64_t>(tokenizer_->encode(text, false, false).size());
}

std::int64_t LocalChatModel::context_length() const {
  return engine_->config().max_model_len;
}

asio::awaitable<Result<ChatResponse>> LocalChatModel::async_chat(std::vector<Message> messages,
                                                                 std::vector<ToolSpec> tools,
                                                                 ChatParams params) {
  inf::GenerateRequest rq;
  rq.prompt = encode_prompt(messages, tools);
  // The prompt never exceeds the context. History windows count tokens by estimate (a chat
  // template's markers can cost many tokens in a small vocabulary); here the count is exact, so
  // the oldest turns after the system prompt and the first turn (the task) go until it fits.
  const std::int64_t ctx = context_length();
  std::size_t pinned = 0;
  while (pinned < messages.size() && messages[pinned].role == Role::system) ++pinned;
  if (pinned < messages.size()) ++pinned;
  while (static_cast<std::int64_t>(rq.prompt.size()) >= ctx && messages.size() > pinned) {
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(pinned));
    rq.prompt = encode_prompt(messages, tools);
  }
  // A prompt that leaves no room for one token of reply can never run: say what is in it and
  // which knobs make it fit, instead of the engine's bare count.
  if (static_cast<std::int64_t>(rq.prompt.size()) >= ctx) {
    std::string system;
    for (const auto& m : messages)
      if (m.role == Role::system) system += m.content;
    const std::int64_t fixed = count_tokens(system) + count_tokens(describe_tools(tools));
    co_return Error(
        Errc::invalid_argument,
        name_ + ": the prompt is " + std::to_string(rq.prompt.size()) + " tokens (" +
            std::to_string(fixed) + " of them the system prompt" +
            (tools.empty() ? "" : " and the tool descriptions") +
            ") but the model's context holds " + std::to_string(ctx) +
            " tokens with the reply; shorten the system prompt" +
            (tools.empty() ? "" : " or the agent's tools") +
            ", lower the history window (an agent's \"history\" or a group chat's \"window\": "
            "{\"max_tokens\": N}), or raise the context with --max-model-len / \"engine\": "
            "{\"max_model_len\": N} if the model allows it");
  }
  rq.max_new_tokens = params.max_tokens;
  rq.sampling.temperature = params.temperature;
  rq.sampling.seed = params.seed;
  rq.stop_strings = params.stop;
  bool constrained_call = false;
  if (params.response_schema && tools.empty()) {
    // Compiled once per schema and vocabulary (compile_constraint caches).
    auto c = inf::compile_constraint(
        {inf::ConstraintSpec::Kind::json_schema, json::serialize(*params.response_schema), {}},
        *tokenizer_);
    if (!c)
      co_return Error(Errc::invalid_argument, name_ + ": output_schema: " + c.error().message);
    // The answer ends valid within the turn's tokens (the engine's budget rule), so a turn too
    // short for any valid value is refused here, saying which knob to turn.
    const std::int64_t budget = std::min<std::int64_t>(
        params.max_tokens, ctx - static_cast<std::int64_t>(rq.prompt.size()));
    if (const std::int32_t need = (*c)->min_tokens(); need > budget)
      co_return Error(Errc::invalid_argument,
                      name_ + ": output_schema: its shortest valid value takes " +
                          std::to_string(need) + " tokens of this model's vocabulary, but the " +
                          "turn may have " + std::to_string(budget) +
                          (budget < params.max_tokens
                               ? " (what the context leaves after the prompt); shorten the prompt"
                               : " (max_tokens; an agent's max_tokens_per_turn); raise it to at "
                                 "least " +
                                     std::to_string(need)));
    rq.constraint = *c;
  }
  if (!tools.empty()) {
    rq.stop_strings.push_back("</tool_call>");
    // After "<tool_call>" the output is constrained to {"name": one of the tools, "arguments":
    // that tool's parameters}: a call is valid by construction, and one that starts ends
    // within the turn's max_tokens (the engine refuses "<tool_call>" where it could not). A
    // tool whose schema uses a keyword the constraint cannot enforce leaves calls
    // unconstrained (the parser and the registry still check them), with a warning.
    if (auto c = tool_call_constraint(tools)) {
      rq.constraint = *c;
      rq.constraint_trigger = "<tool_call>";
      constrained_call = true;
    } else {
      log(LogLevel::warn, name_ + ": tool calls are not constrained: " + c.error().message);
    }
  }
  // The reply's text as it is generated, when it is the content as it comes (no tool calls to
  // parse out, no stop string to cut at the end).
  std::function<void(std::int32_t)> on_token;
  if (params.on_text && tools.empty() && rq.stop_strings.empty()) {
    auto decoder = std::make_shared<inf::StreamDecoder>(*tokenizer_);
    on_token = [decoder, on_text = params.on_text,
                eog = engine_->config().eog_tokens](std::int32_t t) {
      if (std::find(eog.begin(), eog.end(), t) != eog.end()) return;  // not text
      if (std::string piece = decoder->push(t); !piece.empty()) on_text(to_valid_utf8(piece));
    };
  }
  auto op = inf::async_generate(*engine_, std::move(rq), asio::use_awaitable, std::move(on_token));
  auto r = co_await std::move(op);
  if (!r) co_return Error(r.error().code, name_ + ": " + r.error().message);
  if (params.span && params.span->recording()) {  // what only the engine knows
    trace::Span& s = *params.span;
    const auto& t = r->timings;
    const std::int64_t block = std::max(1, engine_->config().block_size);
    s.set(trace::attr::kProvider, "weir");
    s.set("weir.engine.queue_ms", t.queue_ms);
    s.set("weir.engine.prefill_ms", std::max(0.0, t.first_token_ms - t.queue_ms));
    s.set("weir.engine.decode_ms", std::max(0.0, t.total_ms - t.first_token_ms));
    s.set("weir.time_to_first_token_ms", t.first_token_ms);
    s.set("weir.kv.blocks",
          (r->usage.prompt_tokens + r->usage.completion_tokens + block - 1) / block);
    s.set("weir.kv.cached_blocks", r->usage.cached_prompt_tokens / block);
    if (t.preemptions > 0)
      s.add_event("weir.fence.preemption",
                  {{"weir.preemptions", static_cast<std::int64_t>(t.preemptions)}});
  }
  ChatResponse out;
  out.usage.prompt_tokens = r->usage.prompt_tokens;
  out.usage.completion_tokens = r->usage.completion_tokens;
  out.usage.cached_prompt_tokens = r->usage.cached_prompt_tokens;
  out.finish_reason = inf::finish_reason_name(r->finish);
  if (r->finish == inf::FinishReason::cancelled)
    co_return Error(Errc::cancelled, name_ + ": the request was cancelled");
  // A model can emit any bytes (a token may end inside a character): the text it gives the
  // rest of weir is valid UTF-8, with U+FFFD for what is not.
  std::string text = to_valid_utf8(tokenizer_->decode(r->tokens));
  // A constrained call ends as soon as its JSON is complete, before the closing tag.
  if (constrained_call && r->finish == inf::FinishReason::stop) {
    const auto open = text.rfind("<tool_call>");
    if (open != std::string::npos && text.find("</tool_call>", open) == std::string::npos)
      text += "</tool_call>";
  }
  out.message.role = Role::assistant;
  if (tools.empty()) {
    out.message.content = std::move(text);
  } else {
    std::vector<std::string> names;
    for (const auto& t : tools) names.push_back(t.name);
    int first_id = 1;
    for (const auto& m : messages) first_id += static_cast<int>(m.tool_calls.size());
    auto parsed = parse_tool_calls(text, names, first_id);
    out.message.content = std::move(parsed.content);
    out.message.tool_calls = std::move(parsed.calls);
    out.tool_call_error = std::move(parsed.error);
    if (!out.message.tool_calls.empty()) out.finish_reason = "tool_calls";
  }
  co_return out;
}

}  // namespace weir::agents
