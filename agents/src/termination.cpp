// A group chat's termination conditions (group_chat.hpp Termination): combined, checked, shown,
// and read from a file's "termination". Apart from the chat so that the file readers (and their
// fuzz target) need no chat.
#include <boost/json.hpp>

#include "weir/agents/group_chat.hpp"

namespace weir::agents {

namespace json = boost::json;

struct Termination::Node {
  enum Kind { kMaxMessages, kText, kTokens, kTimeout, kAny, kAll } kind;
  std::int64_t n = 0;
  std::string text, speaker;
  std::vector<std::shared_ptr<const Node>> kids;

  std::optional<std::string> check(const ChatProgress& p) const {
    switch (kind) {
      case kMaxMessages:
        if (p.messages >= n) return "max_messages " + std::to_string(n) + " reached";
        return std::nullopt;
      case kText:
        if ((speaker.empty() || p.last_speaker == speaker) &&
            p.last_text.find(this->text) != std::string_view::npos)
          return "'" + this->text + "' mentioned" +
                 (p.last_speaker.empty() ? "" : " by " + std::string(p.last_speaker));
        return std::nullopt;
      case kTokens:
        if (p.tokens >= n)
          return "token usage " + std::to_string(p.tokens) + " reached the limit " +
                 std::to_string(n);
        return std::nullopt;
      case kTimeout:
        if (p.elapsed.count() >= n) return "timeout of " + std::to_string(n) + " ms reached";
        return std::nullopt;
      case kAny:
        for (const auto& k : kids)
          if (auto r = k->check(p)) return r;
        return std::nullopt;
      case kAll: {
        std::string why;
        for (const auto& k : kids) {
          auto r = k->check(p);
          if (!r) return std::nullopt;
          why += (why.empty() ? "" : " and ") + *r;
        }
        return why;
      }
    }
    return std::nullopt;
  }

  std::string describe() const {
    switch (kind) {
      case kMaxMessages:
        return "max_messages(" + std::to_string(n) + ")";
      case kText:
        return "text_mention(\"" + this->text + "\"" + (speaker.empty() ? "" : ", " + speaker) +
               ")";
      case kTokens:
        return "token_usage(" + std::to_string(n) + ")";
      case kTimeout:
        return "timeout(" + std::to_string(n) + " ms)";
      case kAny:
      case kAll: {
        std::string s = "(";
        for (std::size_t i = 0; i < kids.size(); ++i)
          s += (i ? (kind == kAny ? " || " : " && ") : "") + kids[i]->describe();
        return s + ")";
      }
    }
    return {};
  }
};

Termination Termination::max_messages(std::int64_t n) {
  return Termination(std::make_shared<const Node>(Node{Node::kMaxMessages, n, {}, {}, {}}));
}
Termination Termination::text_mention(std::string text, std::string speaker) {
  return Termination(
      std::make_shared<const Node>(Node{Node::kText, 0, std::move(text), std::move(speaker), {}}));
}
Termination Termination::token_usage(std::int64_t max_tokens) {
  return Termination(std::make_shared<const Node>(Node{Node::kTokens, max_tokens, {}, {}, {}}));
}
Termination Termination::timeout(std::chrono::milliseconds t) {
  return Termination(std::make_shared<const Node>(Node{Node::kTimeout, t.count(), {}, {}, {}}));
}
Termination Termination::operator||(const Termination& o) const {
  return Termination(std::make_shared<const Node>(Node{Node::kAny, 0, {}, {}, {node_, o.node_}}));
}
Termination Termination::operator&&(const Termination& o) const {
  return Termination(std::make_shared<const Node>(Node{Node::kAll, 0, {}, {}, {node_, o.node_}}));
}
std::optional<std::string> Termination::check(const ChatProgress& p) const {
  return node_->check(p);
}
std::string Termination::describe() const {
  return node_->describe();
}

Result<Termination> Termination::from_json(const json::value& v, std::string where) {
  auto bad = [&](const std::string& why) {
    return Error(Errc::invalid_workflow,
                 (where.empty() ? std::string("termination") : where) + ": " + why);
  };
  const auto* o = v.if_object();
  if (!o || o->size() != 1)
    return bad(
        "a condition is an object with one key: max_messages, text_mention, token_usage, "
        "timeout_ms, any or all");
  const auto& first = *o->begin();  // (not a structured binding: clang's lambdas cannot see one)
  const std::string_view key = first.key();
  const json::value& val = first.value();
  const std::string at = where + "/" + std::string(key);
  auto positive = [&](std::string_view k) -> Result<std::int64_t> {
    if (!val.is_int64() && !val.is_uint64()) return bad(std::string(k) + " must be an integer");
    auto n = val.to_number<std::int64_t>();
    if (n < 1) return bad(std::string(k) + " must be at least 1, got " + std::to_string(n));
    return n;
  };
  if (key == "max_messages" || key == "token_usage" || key == "timeout_ms") {
    auto n = positive(key);
    if (!n) return std::move(n).error();
    if (key == "max_messages") return max_messages(*n);
    if (key == "token_usage") return token_usage(*n);
    return timeout(std::chrono::milliseconds(*n));
  }
  if (key == "text_mention") {
    if (val.is_string() && !val.as_string().empty())
      return text_mention(std::string(val.as_string()));
    return bad("text_mention must be a non-empty string");
  }
  if (key == "any" || key == "all") {
    if (!val.is_array() || val.as_array().empty())
      return bad(std::string(key) + " must be a non-empty array of conditions");
    std::optional<Termination> acc;
    for (std::size_t i = 0; i < val.as_array().size(); ++i) {
      auto t = from_json(val.as_array()[i], at + "/" + std::to_string(i));
      if (!t) return std::move(t).error();
      acc = !acc ? *t : (key == "any" ? *acc || *t : *acc && *t);
    }
    return *acc;
  }
  return bad("unknown condition '" + std::string(key) +
             "' (max_messages, text_mention, token_usage, timeout_ms, any, all)");
}

}  // namespace weir::agents
