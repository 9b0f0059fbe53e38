#include "weir/agents/group_chat.hpp"

#include <set>

#include <boost/json.hpp>

#include "chat_trace.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace asio = boost::asio;
using SysClock = std::chrono::system_clock;

namespace {

std::int64_t num(const json::object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  return v && v->is_number() ? v->to_number<std::int64_t>() : 0;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SysClock::now().time_since_epoch())
      .count();
}

std::vector<Message> read_transcript(const graph::StateView& s) {
  std::vector<Message> out;
  if (const auto& v = s.get("transcript"); v.is_array())
    for (const auto& m : v.as_array())
      if (auto msg = Message::from_json(m)) out.push_back(std::move(*msg));
  return out;
}

json::array to_json(const std::vector<Message>& ms) {
  json::array a;
  for (const auto& m : ms) a.push_back(m.to_json());
  return a;
}

}  // namespace

struct GroupChat::Impl {
  GroupChatSpec spec;
  std::shared_ptr<ChatModel> model;
  std::vector<std::string> names;

  // The transcript window, its tokens capped by what the model's context (`ctx`, 0: unknown)
  // leaves after a reply of `reply` tokens (and a margin for the chat template's markers).
  HistoryWindow window_for(std::int64_t reply, std::int64_t ctx) const {
    HistoryWindow w = spec.window;
    if (ctx > 0) {
      const std::int64_t room =
          std::max<std::int64_t>(1, ctx - std::min(reply, ctx / 2) - ctx / 16 - 8);
      if (w.max_tokens <= 0 || w.max_tokens > room) w.max_tokens = room;
    }
    return w;
  }

  asio::awaitable<Result<graph::Update>> select(graph::StateView s, graph::NodeContext& ctx) const {
    graph::Update u;
    auto transcript = read_transcript(s);
    const auto st = s.to_object();
    const std::int64_t count = num(st, "messages");
    std::string next = names[static_cast<std::size_t>(count) % names.size()];
    if (spec.selection == SpeakerSelection::function) {
      std::string pick = spec.selector(transcript, names);
      if (std::find(names.begin(), names.end(), pick) == names.end())
        co_return Error(Errc::invalid_argument,
                        "the speaker selector chose '" + pick + "', who is not in the chat");
      next = std::move(pick);
    } else if (spec.selection == SpeakerSelection::model && count > 0) {
      std::string roster;
      for (const auto& a : spec.agents) roster += "\n- " + a.name + ": " + a.role;
      std::vector<Message> ask = {
          Message::system("You choose who speaks next in a group chat. The participants:" + roster +
                          "\nAnswer with one name only.")};
      std::string recent;
      for (std::size_t i = transcript.size() > 6 ? transcript.size() - 6 : 0; i < transcript.size();
           ++i)
        recent += (transcript[i].name.empty() ? "user" : transcript[i].name) + ": " +
                  transcript[i].content.substr(0, 400) + "\n";
      ask.push_back(Message::user("The conversation so far:\n" + recent + "\nWho speaks next?"));
      ChatParams p;
      p.max_tokens = 8;
      std::vector<ToolSpec> no_tools;
      auto op = async_traced_chat(*model, std::move(ask), std::move(no_tools), p, ctx.trace());
      auto r = co_await std::move(op);
      if (!r) co_return std::move(r).error();
      if (auto c = ctx.charge_tokens(r->usage.prompt_tokens + r->usage.completion_tokens); !c)
        co_return std::move(c).error();
      u.set("tokens", num(st, "tokens") + r->usage.prompt_tokens + r->usage.completion_tokens);
      // The first name the answer mentions; round robin when it names nobody.
      std::size_t best = std::string::npos;
      for (const auto& n : names) {
        auto at = r->message.content.find(n);
        if (at < best) best = at, next = n;
      }
    }
    if (transcript.empty()) {
      u.set("started_ms", now_ms());
      transcript.push_back(Message::user(std::string(s.get("task").as_string())));
      u.set("transcript", to_json(transcript));
    }
    u.set("next", json::string(next));
    co_return u;
  }

  asio::awaitable<Result<graph::Update>> speak(graph::StateView s, graph::NodeContext& ctx) const {
    const auto st = s.to_object();
    const std::string who(s.get("next").as_string());
    const AgentSpec& agent = spec.agents[static_cast<std::size_t>(
        std::find(names.begin(), names.end(), who) - names.begin())];
    auto transcript = read_transcript(s);
    std::string others;
    for (const auto& n : names)
      if (n != who) others += (others.empty() ? "" : ", ") + n;
    std::vector<Message> conv = {Message::system(agent_system_prompt(agent) + "\nYou are " + who +
                                                 " in a group chat with " + others +
                                                 ". Write your next message only.")};
    for (const auto& m : transcript) {
      if (m.role == Role::assistant && m.name == who) {
        conv.push_back(Message::assistant(m.content));
      } else {
        conv.push_back(Message::user((m.name.empty() ? "" : m.name + ": ") + m.content));
      }
    }
    // What is sent never exceeds the model's context: the system turn and the task stay, the
    // oldest turns go first.
    const std::int64_t context_tokens = co_await model->async_context_length();
    if (auto dropped =
            fit_window(conv, window_for(agent.max_tokens_per_turn, context_tokens), *model, 2);
        !dropped.empty())
      ctx.trace_event("weir.fence.window_eviction", {{"weir.window.evicted_messages",
                                                      static_cast<std::int64_t>(dropped.size())}});
    ChatParams p;
    p.max_tokens = agent.max_tokens_per_turn;
    p.temperature = agent.temperature;
    p.seed = agent.seed + static_cast<std::uint64_t>(num(st, "messages"));
    std::vector<ToolSpec> no_tools;
    // The speaker's turn is an agent invocation of its own (GenAI: invoke_agent).
    trace::Span turn = ctx.trace().start("invoke_agent " + who);
    turn.set(trace::attr::kOperation, "invoke_agent");
    turn.set(trace::attr::kAgentName, who);
    auto op =
        async_traced_chat(*model, std::move(conv), std::move(no_tools), p, ctx.trace().child(turn));
    auto r = co_await std::move(op);
    if (r)
      turn.set_ok();
    else
      turn.set_error(r.error());
    turn.end();
    if (!r) co_return Error(r.error().code, who + ": " + r.error().message);
    const std::int64_t used = r->usage.prompt_tokens + r->usage.completion_tokens;
    if (auto c = ctx.charge_tokens(used); !c) co_return std::move(c).error();
    Message reply = Message::assistant(r->message.content);
    reply.name = who;
    transcript.push_back(reply);
    // The transcript window keeps the task (first) and the latest turns.
    std::vector<Message> windowed = transcript;
    fit_window(windowed, window_for(agent.max_tokens_per_turn, context_tokens), *model,
               1);  // the task stays
    const std::int64_t messages = num(st, "messages") + 1;
    const std::int64_t tokens = num(st, "tokens") + used;
    ChatProgress progress;
    progress.messages = messages;
    progress.last_text = reply.content;
    progress.last_speaker = who;
    progress.tokens = tokens;
    progress.elapsed = std::chrono::milliseconds(now_ms() - num(st, "started_ms"));
    graph::Update u;
    u.set("transcript", to_json(windowed));
    u.set("messages", messages);
    u.set("tokens", tokens);
    if (auto why = spec.termination.check(progress)) {
      u.set("stop_reason", json::string(*why));
      u.go_to = std::vector<std::string>{std::string(graph::kEnd)};
    } else {
      u.go_to = std::vector<std::string>{"select"};
    }
    co_return u;
  }
};

Result<std::shared_ptr<const GroupChat>> GroupChat::create(GroupChatSpec spec,
                                                           std::shared_ptr<ChatModel> model) {
  std::vector<std::string> problems;
  if (spec.agents.empty()) problems.push_back("a group chat needs at least one agent");
  std::set<std::string> seen;
  for (const auto& a : spec.agents) {
    if (a.name.empty()) problems.push_back("every agent needs a name");
    if (!seen.insert(a.name).second) problems.push_back("two agents are named '" + a.name + "'");
  }
  if (spec.selection == SpeakerSelection::function && !spec.selector)
    problems.push_back("speaker selection 'function' needs a selector");
  if (spec.max_rounds < 1) problems.push_back("max_rounds must be at least 1");
  if (!model) problems.push_back("a group chat needs a model");
  if (!problems.empty()) {
    std::string msg = "group chat '" + spec.name + "' is invalid:";
    for (const auto& p : problems) msg += "\n  - " + p;
    return Error(Errc::invalid_workflow, msg);
  }
  auto impl = std::make_shared<Impl>();
  impl->spec = spec;
  impl->model = std::move(model);
  for (const auto& a : spec.agents) impl->names.push_back(a.name);
  std::shared_ptr<const Impl> ip = impl;

  graph::StateGraph g;
  g.add_channel("task");
  g.add_channel("transcript");
  g.add_channel("next");
  g.add_channel("stop_reason", {.default_value = json::value("")});
  for (const char* c : {"messages", "tokens", "started_ms"})
    g.add_channel(c, {.default_value = json::value(0)});
  g.add_async_node(
      "select", [ip](graph::StateView s, graph::NodeContext& ctx) { return ip->select(s, ctx); });
  g.add_async_node("speak",
                   [ip](graph::StateView s, graph::NodeContext& ctx) { return ip->speak(s, ctx); });
  g.add_edge(std::string(graph::kStart), "select");
  g.add_edge("select", "speak");
  g.add_conditional_edges("speak",
                          [](const graph::StateView&) { return std::vector<std::string>{}; },
                          {"select", std::string(graph::kEnd)});
  graph::GraphLimits limits;
  limits.recursion_limit = 2 * spec.max_rounds + 2;
  limits.inline_limit = std::size_t{1} << 20;  // the transcript is a bounded window
  auto compiled = g.compile(limits);
  if (!compiled) return std::move(compiled).error();
  auto chat = std::shared_ptr<GroupChat>(new GroupChat());
  chat->spec_ = std::move(spec);
  chat->impl_ = std::move(ip);
  chat->graph_ = std::move(*compiled);
  return std::shared_ptr<const GroupChat>(std::move(chat));
}

asio::awaitable<Result<GroupChatResult>> GroupChat::async_run(graph::GraphRuntime& runtime,
                                                              std::string task,
                                                              graph::RunOptions options) const {
  json::object in;
  in["task"] = json::string(task);
  auto r = co_await runtime.async_invoke(graph_, std::move(in), std::move(options));
  if (!r) co_return Error(r.error().code, "group chat '" + spec_.name + "': " + r.error().message);
  GroupChatResult out;
  const auto& st = r->state;
  if (const auto* t = st.if_contains("transcript"); t && t->is_array())
    for (const auto& m : t->as_array())
      if (auto msg = Message::from_json(m)) out.transcript.push_back(std::move(*msg));
  if (const auto* s = st.if_contains("stop_reason"); s && s->is_string())
    out.stop_reason = s->as_string();
  out.messages = num(st, "messages");
  out.tokens = num(st, "tokens");
  out.steps = r->steps;
  co_return out;
}

}  // namespace weir::agents
