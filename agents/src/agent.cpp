#include "weir/agents/agent.hpp"

#include <algorithm>

#include <boost/json.hpp>

#include "chat_trace.hpp"
#include "weir/agents/local_model.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/registry.hpp"
#include "weir/tools/schema.hpp"
#include "weir/tools/tool.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;

std::string agent_system_prompt(const AgentSpec& spec) {
  std::string s = "You are " + (spec.role.empty() ? spec.name : spec.role) + ".";
  if (!spec.backstory.empty()) s += " " + spec.backstory;
  if (!spec.goal.empty()) s += "\nYour goal: " + spec.goal;
  return s;
}

namespace {

std::int64_t int_of(const json::object& s, std::string_view k) {
  const auto* v = s.if_contains(k);
  return v && v->is_number() ? v->to_number<std::int64_t>() : 0;
}

std::int64_t message_tokens(const Message& m, const ChatModel& model) {
  std::int64_t n = model.count_tokens(m.content) + 4;  // role markers
  for (const auto& c : m.tool_calls) n += model.count_tokens(json::serialize(c.arguments)) + 8;
  return n;
}

// Cuts `s` to at most `n` bytes on a UTF-8 character boundary.
std::string cut_utf8(std::string_view s, std::size_t n) {
  return std::string(s.substr(0, utf8_cut(s, n)));
}

}  // namespace

std::string clip_to_window(std::string text, const HistoryWindow& window, const ChatModel& model) {
  if (window.max_tokens <= 0) return text;
  const std::int64_t room = window.max_tokens / 2;
  std::int64_t tokens = model.count_tokens(text);
  if (tokens <= room) return text;
  static constexpr std::string_view kNote =
      "\n[... cut to fit the history window; read the rest with the artifacts tool when the "
      "output names an artifact]";
  std::size_t bytes = text.size();
  while (tokens > room && bytes > 16) {
    bytes = static_cast<std::size_t>(static_cast<double>(bytes) * 0.9 * room / tokens);
    tokens = model.count_tokens(std::string_view(text).substr(0, bytes)) + 24;
  }
  return cut_utf8(text, bytes) + std::string(kNote);
}

std::vector<Message> fit_window(std::vector<Message>& messages, const HistoryWindow& window,
                                const ChatModel& model, std::size_t pinned) {
  std::vector<Message> dropped;
  const std::size_t keep_first = std::min(pinned, messages.size());
  std::int64_t tokens = 0;
  for (const auto& m : messages) tokens += message_tokens(m, model);
  auto over = [&] {
    const auto turns = static_cast<std::int64_t>(messages.size() - keep_first);
    return turns > 1 && ((window.max_messages > 0 && turns > window.max_messages) ||
                         (window.max_tokens > 0 && tokens > window.max_tokens));
  };
  while (over()) {
    auto it = messages.begin() + static_cast<std::ptrdiff_t>(keep_first);
    tokens -= message_tokens(*it, model);
    dropped.push_back(std::move(*it));
    messages.erase(it);
    // A tool result without its call would confuse the model: it goes with the call.
    while (messages.size() > keep_first + 1 && messages[keep_first].role == Role::tool) {
      tokens -= message_tokens(messages[keep_first], model);
      dropped.push_back(std::move(messages[keep_first]));
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(keep_first));
    }
  }
  return dropped;
}

AgentResult agent_result(const graph::RunResult& run) {
  AgentResult r;
  const auto& s = run.state;
  if (const auto* o = s.if_contains("output"); o && o->is_string()) r.output = o->as_string();
  r.iterations = static_cast<std::int32_t>(int_of(s, "iterations"));
  r.tool_calls = static_cast<std::int32_t>(int_of(s, "tool_calls"));
  r.malformed_tool_calls = static_cast<std::int32_t>(int_of(s, "malformed_tool_calls"));
  r.refused_tool_calls = static_cast<std::int32_t>(int_of(s, "refused_tool_calls"));
  r.prompt_tokens = int_of(s, "prompt_tokens");
  r.completion_tokens = int_of(s, "completion_tokens");
  r.steps = run.steps;
  return r;
}

// The loop's nodes. Shared by every run of the agent (no per-run data here).
struct Agent::Loop {
  // Copies, not a pointer to the Agent: the compiled graph stands on its own (a crew may hold it
  // as a subgraph longer than the Agent object lives).
  AgentSpec spec;
  std::shared_ptr<ChatModel> model;
  std::shared_ptr<tools::ToolRegistry> tools;
  std::vector<ToolSpec> tool_specs;

  static Result<std::vector<Message>> read_messages(const graph::StateView& state,
                                                    const graph::NodeContext& ctx,
                                                    std::string_view channel) {
    std::vector<Message> out;
    json::value v = state.get(channel);
    if (ArtifactRef::from_json(v)) {  // a big window was offloaded: fetch it back
      auto text = ctx.fetch(v);
      if (!text) return std::move(text).error();
      std::error_code ec;
      v = json::parse(*text, ec);
      if (ec)
        return Error(Errc::corrupt_data, "the '" + std::string(channel) + "' artifact is not JSON");
    }
    if (!v.is_array()) return out;
    for (const auto& m : v.as_array()) {
      auto msg = Message::from_json(m);
      if (!msg) return std::move(msg).error();
      out.push_back(std::move(*msg));
    }
    return out;
  }

  // The history window less the tools' descriptions, which ride in the system turn; never more
  // than the model's context (`ctx`, 0: unknown) leaves after the reply (and a margin for the chat
  // template's markers, which the window's count estimates).
  HistoryWindow effective_window(std::int64_t ctx) const {
    HistoryWindow window = spec.history;
    if (ctx > 0) {
      const std::int64_t reply = std::min<std::int64_t>(spec.max_tokens_per_turn, ctx / 2);
      const std::int64_t room = std::max<std::int64_t>(1, ctx - reply - ctx / 16 - 8);
      if (window.max_tokens <= 0 || window.max_tokens > room) window.max_tokens = room;
    }
    if (window.max_tokens > 0 && !tool_specs.empty())
      window.max_tokens = std::max<std::int64_t>(
          64, window.max_tokens - model->count_tokens(describe_tools(tool_specs)));
    return window;
  }

  static json::array to_json(const std::vector<Message>& ms) {
    json::array a;
    a.reserve(ms.size());
    for (const auto& m : ms) a.push_back(m.to_json());
    return a;
  }

  // Evicted turns: archived as an artifact (when the run has a store) and folded by the model
  // into the rolling summary, capped at max_summary_bytes.
  asio::awaitable<Result<std::string>> summarize(std::string previous,
                                                 const std::vector<Message>& evicted,
                                                 graph::NodeContext& ctx, graph::Update& u) const {
    std::string text;
    for (const auto& m : evicted) {
      text += role_name(m.role);
      if (!m.name.empty()) text += " (" + m.name + ")";
      text += ": " + m.content + "\n";
      for (const auto& c : m.tool_calls)
        text += "  calls " + c.name + " " + json::serialize(c.arguments) + "\n";
    }
    if (ctx.artifacts()) {
      auto ref = ctx.artifacts()->put(text, "text/plain", "", ctx.run_id());
      if (ref) u.set("archive", ref->to_json());
    }
    std::vector<Message> req = {
        Message::system("You keep a running summary of a conversation. Merge the earlier summary "
                        "and the new turns into one short summary (at most " +
                        std::to_string(spec.history.max_summary_bytes / 6) +
                        " words) that keeps facts, decisions and tool results. Answer with the "
                        "summary only."),
        Message::user("Earlier summary:\n" + (previous.empty() ? "(none)" : previous) +
                      "\n\nNew turns:\n" + cut_utf8(text, spec.history.max_summary_bytes * 2))};
    ChatParams p;
    p.max_tokens =
        static_cast<std::int32_t>(std::max<std::size_t>(16, spec.history.max_summary_bytes / 4));
    p.temperature = 0;
    std::vector<ToolSpec> no_tools;
    auto op =
        async_traced_chat(*model, std::move(req), std::move(no_tools), p, ctx.trace(), "summary");
    auto r = co_await std::move(op);
    if (!r) co_return std::move(r).error();
    if (auto s = ctx.charge_tokens(r->usage.prompt_tokens + r->usage.completion_tokens); !s)
      co_return std::move(s).error();
    co_return cut_utf8(r->message.content, spec.history.max_summary_bytes);
  }

  static bool valid_json(const std::string& text, const json::object& schema) {
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    return !ec && tools::validate(json::value(schema), v);
  }

  asio::awaitable<Result<graph::Update>> think(graph::StateView state,
                                               graph::NodeContext& ctx) const {
    auto msgs = read_messages(state, ctx, "messages");
    if (!msgs) co_return std::move(msgs).error();
    graph::Update u;
    const auto st = state.to_object();
    std::int64_t iter = int_of(st, "iterations");
    std::int64_t prompt_tokens = int_of(st, "prompt_tokens");
    std::int64_t completion_tokens = int_of(st, "completion_tokens");
    const std::int64_t context_tokens = co_await model->async_context_length();
    const HistoryWindow window = effective_window(context_tokens);
    if (msgs->empty()) {
      msgs->push_back(Message::system(agent_system_prompt(spec)));
      const auto& task = state.get("task");
      msgs->push_back(
          Message::user(task.is_string() ? std::string(task.as_string()) : json::serialize(task)));
      auto pre = read_messages(state, ctx, "preamble");
      if (!pre) co_return std::move(pre).error();
      for (auto& m : *pre) {
        if (m.role == Role::tool) m.content = clip_to_window(std::move(m.content), window, *model);
        msgs->push_back(std::move(m));
      }
    }
    // The window: evicted turns go to the archive and the rolling summary.
    std::string summary;
    if (const auto& s = state.get("summary"); s.is_string()) summary = s.as_string();
    std::size_t pinned = 0;  // the system prompt and the task stay
    while (pinned < msgs->size() && (*msgs)[pinned].role == Role::system) ++pinned;
    if (pinned < msgs->size() && (*msgs)[pinned].role == Role::user) ++pinned;
    auto dropped = fit_window(*msgs, window, *model, pinned);
    if (!dropped.empty()) {
      ctx.trace_event("weir.fence.window_eviction", {{"weir.window.evicted_messages",
                                                      static_cast<std::int64_t>(dropped.size())}});
      auto s = co_await summarize(summary, dropped, ctx, u);
      if (s) {
        summary = std::move(*s);
        u.set("summary", json::string(summary));
      } else {
        log(LogLevel::warn,
            "agent '" + spec.name + "': summarizing evicted turns failed: " + s.error().message);
      }
    }
    std::vector<Message> conversation;
    conversation.reserve(msgs->size() + 2);
    std::size_t i = 0;
    for (; i < msgs->size() && (*msgs)[i].role == Role::system; ++i)
      conversation.push_back((*msgs)[i]);
    if (!summary.empty())
      conversation.push_back(Message::system("Summary of the earlier conversation: " + summary));
    for (; i < msgs->size(); ++i) conversation.push_back((*msgs)[i]);

    // The task's output_schema: the final answer is one JSON value valid against it.
    std::optional<json::object> schema;
    if (const auto& os = state.get("output_schema"); os.is_object()) schema = os.as_object();
    const bool final_turn = iter + 1 >= spec.max_iter;
    std::vector<ToolSpec> tools = final_turn ? std::vector<ToolSpec>{} : tool_specs;
    if (final_turn && iter > 0)
      conversation.push_back(Message::user(
          "This is your last step (max_iter " + std::to_string(spec.max_iter) +
          "). Give your final answer now, " +
          (schema ? "as JSON matching the output schema" : std::string("in plain text")) +
          ", without calling tools."));
    ChatParams params;
    params.max_tokens = spec.max_tokens_per_turn;
    params.temperature = spec.temperature;
    params.seed = spec.seed + static_cast<std::uint64_t>(iter);
    if (tools.empty()) params.response_schema = schema;
    std::vector<Message> asked;  // kept for a second, constrained answer
    if (schema && !tools.empty()) asked = conversation;
    auto op =
        async_traced_chat(*model, std::move(conversation), std::move(tools), params, ctx.trace());
    auto r = co_await std::move(op);
    if (!r) co_return std::move(r).error();
    prompt_tokens += r->usage.prompt_tokens;
    completion_tokens += r->usage.completion_tokens;
    if (auto s = ctx.charge_tokens(r->usage.prompt_tokens + r->usage.completion_tokens); !s)
      co_return std::move(s).error();
    // A final answer from a turn that offered tools was not constrained: when it does not
    // validate against the output schema, the model answers once more, constrained, without
    // tools (one more model call, counted as an iteration).
    if (schema && !asked.empty() && r->message.tool_calls.empty() && !r->tool_call_error &&
        !valid_json(r->message.content, *schema)) {
      asked.push_back(r->message);
      asked.back().role = Role::assistant;
      asked.push_back(Message::user(
          "Give your final answer now as one JSON value matching this JSON Schema, without "
          "calling tools: " +
          json::serialize(*schema)));
      params.response_schema = schema;
      std::vector<ToolSpec> none;
      auto again =
          async_traced_chat(*model, std::move(asked), std::move(none), params, ctx.trace());
      r = co_await std::move(again);
      if (!r) co_return std::move(r).error();
      prompt_tokens += r->usage.prompt_tokens;
      completion_tokens += r->usage.completion_tokens;
      if (auto s = ctx.charge_tokens(r->usage.prompt_tokens + r->usage.completion_tokens); !s)
        co_return std::move(s).error();
      ++iter;
    }
    u.set("iterations", iter + 1);
    u.set("prompt_tokens", prompt_tokens);
    u.set("completion_tokens", completion_tokens);

    Message reply = std::move(r->message);
    reply.role = Role::assistant;
    if (reply.name.empty()) reply.name = spec.name;
    if (r->tool_call_error) u.set("malformed_tool_calls", int_of(st, "malformed_tool_calls") + 1);
    if (r->tool_call_error && !final_turn) {
      // Fed back so the model can correct itself; it cost an iteration.
      msgs->push_back(std::move(reply));
      msgs->push_back(Message::user("Your tool call could not be used: " + *r->tool_call_error));
      u.set("messages", to_json(*msgs));
      u.go_to = std::vector<std::string>{"think"};
    } else if (!reply.tool_calls.empty() && !final_turn) {
      msgs->push_back(std::move(reply));
      u.set("messages", to_json(*msgs));
      u.go_to = std::vector<std::string>{"act"};
    } else {
      reply.tool_calls.clear();
      u.set("output", json::string(reply.content));
      msgs->push_back(std::move(reply));
      u.set("messages", to_json(*msgs));
      u.go_to = std::vector<std::string>{std::string(graph::kEnd)};
    }
    co_return u;
  }

  asio::awaitable<Result<graph::Update>> act(graph::StateView state,
                                             graph::NodeContext& ctx) const {
    auto msgs = read_messages(state, ctx, "messages");
    if (!msgs) co_return std::move(msgs).error();
    if (msgs->empty() || msgs->back().tool_calls.empty())
      co_return Error(Errc::invalid_argument, "agent '" + spec.name + "': act without tool calls");
    const std::vector<ToolCall> calls = msgs->back().tool_calls;
    const std::int64_t context_tokens = co_await model->async_context_length();
    std::int64_t n = int_of(state.to_object(), "tool_calls");
    std::int64_t refused = int_of(state.to_object(), "refused_tool_calls");
    for (const auto& call : calls) {
      ++n;
      std::string content;
      if (std::find(spec.tools.begin(), spec.tools.end(), call.name) == spec.tools.end()) {
        content = "Error: tool '" + call.name + "' is not available to you; your tools: ";
        for (std::size_t k = 0; k < spec.tools.size(); ++k)
          content += (k ? ", " : "") + spec.tools[k];
        if (spec.tools.empty()) content += "(none)";
        ++refused;
      } else {
        tools::ToolContext tctx;
        tctx.artifacts = ctx.artifacts();
        tctx.owner = std::string(ctx.run_id());
        tctx.trace = ctx.trace();
        tctx.call_id = call.id;
        auto out = co_await tools->async_call(call.name, call.arguments, tctx);
        if (out) {
          content = std::move(out->content);
        } else {
          // Arguments the tool's schema refuses: the call itself was invalid.
          if (out.error().is(Errc::invalid_argument)) ++refused;
          content =
              "Error (" + std::string(errc_name(out.error().code)) + "): " + out.error().message;
        }
      }
      Message m;
      m.role = Role::tool;
      m.name = call.name;
      m.tool_call_id = call.id;
      m.content = clip_to_window(std::move(content), effective_window(context_tokens), *model);
      msgs->push_back(std::move(m));
    }
    graph::Update u;
    u.set("messages", to_json(*msgs));
    u.set("tool_calls", n);
    u.set("refused_tool_calls", refused);
    co_return u;
  }
};

Result<std::shared_ptr<const Agent>> Agent::create(AgentSpec spec, std::shared_ptr<ChatModel> model,
                                                   std::shared_ptr<tools::ToolRegistry> tools) {
  if (spec.name.empty()) return Error(Errc::invalid_argument, "an agent needs a name");
  if (spec.max_iter < 1)
    return Error(Errc::invalid_argument, "agent '" + spec.name +
                                             "': max_iter must be at least 1, got " +
                                             std::to_string(spec.max_iter));
  if (!model) return Error(Errc::invalid_argument, "agent '" + spec.name + "' has no model");
  auto a = std::shared_ptr<Agent>(new Agent());
  for (const auto& t : spec.tools) {
    std::shared_ptr<tools::Tool> tool = tools ? tools->find(t) : nullptr;
    if (!tool) {
      std::string avail;
      if (tools)
        for (const auto& n : tools->names()) avail += (avail.empty() ? "" : ", ") + n;
      return Error(Errc::invalid_argument, "agent '" + spec.name + "' names unknown tool '" + t +
                                               "' (available: " + (avail.empty() ? "none" : avail) +
                                               ")");
    }
    a->tool_specs_.push_back({tool->name(), tool->description(), tool->parameters()});
  }
  a->spec_ = std::move(spec);
  a->model_ = std::move(model);
  a->tools_ = std::move(tools);

  auto loop = std::make_shared<Loop>(Loop{a->spec_, a->model_, a->tools_, a->tool_specs_});
  graph::StateGraph g;
  g.add_channel("task");
  g.add_channel("preamble");
  g.add_channel("output_schema");
  g.add_channel("messages");
  g.add_channel("summary");
  g.add_channel("archive", {.reducer = graph::ReducerKind::append, .max_items = 64});
  for (const char* c : {"iterations", "tool_calls", "malformed_tool_calls", "refused_tool_calls",
                        "prompt_tokens", "completion_tokens"})
    g.add_channel(c, {.default_value = json::value(0)});
  g.add_channel("output", {.default_value = json::value("")});
  g.add_async_node(
      "think", [loop](graph::StateView s, graph::NodeContext& ctx) { return loop->think(s, ctx); });
  g.add_async_node(
      "act", [loop](graph::StateView s, graph::NodeContext& ctx) { return loop->act(s, ctx); });
  g.add_edge(std::string(graph::kStart), "think");
  g.set_trace_span("invoke_agent", a->spec_.name);
  // think picks its successor with go_to; the declared targets are for validation and drawing.
  g.add_conditional_edges("think",
                          [](const graph::StateView&) { return std::vector<std::string>{}; },
                          {"act", "think", std::string(graph::kEnd)});
  g.add_edge("act", "think");
  graph::GraphLimits limits;
  // Each iteration is think (+ act): the loop ends by max_iter; this is the backstop.
  limits.recursion_limit = 2 * a->spec_.max_iter + 2;
  limits.inline_limit = std::size_t{1} << 20;  // the window is bounded by tokens already
  auto compiled = g.compile(limits);
  if (!compiled) return std::move(compiled).error();
  a->graph_ = std::move(*compiled);
  return std::shared_ptr<const Agent>(std::move(a));
}

asio::awaitable<Result<AgentResult>> Agent::async_run(
    graph::GraphRuntime& runtime, std::string task, std::vector<Message> preamble,
    graph::RunOptions options, std::optional<json::object> output_schema) const {
  json::object input;
  input["task"] = json::string(task);
  if (output_schema) input["output_schema"] = std::move(*output_schema);
  if (!preamble.empty()) input["preamble"] = Loop::to_json(preamble);
  auto r = co_await runtime.async_invoke(graph_, std::move(input), std::move(options));
  if (!r) co_return Error(r.error().code, "agent '" + spec_.name + "': " + r.error().message);
  co_return agent_result(*r);
}

}  // namespace weir::agents
