#include "langgraph_request.hpp"

#include <cctype>
#include <cmath>
#include <initializer_list>

#include <boost/json/serialize.hpp>

#include "weir/graph/ids.hpp"
#include "weir/http/client.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/json_parse.hpp"
#include "weir/runtime/text.hpp"

namespace weir::serve {

namespace json = boost::json;

namespace {

Error bad(std::string why) {
  return Error(Errc::invalid_argument, std::move(why));
}

Error not_yet(std::string_view route, std::string what) {
  return Error(Errc::unsupported, std::string(route) + ": " + std::move(what) +
                                      " is not supported by weir yet (docs/langgraph-api.md)");
}

// A field's value when it is present and not null.
const json::value* field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}

// An empty list or object is the same as none (the SDKs send `[]` and `{}` for "not set").
bool set(const json::value* v) {
  return v && !(v->is_array() && v->as_array().empty()) &&
         !(v->is_object() && v->as_object().empty());
}

}  // namespace

std::vector<std::string> langgraph_segments(std::string_view path) {
  std::vector<std::string> out;
  std::size_t i = path.empty() || path[0] != '/' ? 0 : 1;
  while (i <= path.size()) {
    const auto j = path.find('/', i);
    const auto end = j == std::string_view::npos ? path.size() : j;
    out.push_back(percent_decode(path.substr(i, end - i)));
    i = end + 1;
  }
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

Result<json::object> langgraph_body(std::string_view text) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object{};
  auto p = parse_json(text, "the request body");
  if (!p) return std::move(p).error();
  if (!p->value.is_object()) return bad("the request body must be a JSON object");
  return std::move(p->value.as_object());
}

std::string encode_segment(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<LangGraphEventId> read_last_event_id(std::string_view whole) {
  LangGraphEventId st;
  if (whole.empty() || whole == "null" || whole == "-1") return st;
  if (whole == "end") {
    st.checkpoint = "end";
    return st;
  }
  auto wrong = [&] {
    return Error(Errc::invalid_argument,
                 "Last-Event-ID '" + std::string(whole.substr(0, 200)) +
                     "' is not an event id of this API (\"<checkpoint_id>:<n>\", that with "
                     "\";<message id>=<bytes>\" for each message being generated, or \"end\")");
  };
  // A piece's id: the messages being generated and the bytes of each sent.
  std::string_view h = whole.substr(0, whole.find(';'));
  for (std::string_view rest = whole.substr(h.size()); !rest.empty();) {
    rest.remove_prefix(1);  // ';'
    const std::string_view item = rest.substr(0, rest.find(';'));
    rest.remove_prefix(item.size());
    const auto eq = item.rfind('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size() || item.size() - eq > 16 ||
        st.texts.size() >= kMaxPieceIds)
      return wrong();
    std::uint64_t n = 0;
    for (char c : item.substr(eq + 1)) {
      if (c < '0' || c > '9') return wrong();
      n = n * 10 + static_cast<std::uint64_t>(c - '0');
    }
    const std::string id(item.substr(0, eq));
    if (auto c = graph::check_id("Last-Event-ID", id); !c) return wrong();
    st.texts[id] = n;
  }
  const auto colon = h.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == h.size() || h.size() - colon > 7)
    return wrong();
  long k = 0;
  for (char c : h.substr(colon + 1)) {
    if (c < '0' || c > '9') return wrong();
    k = k * 10 + (c - '0');
  }
  const std::string id(h.substr(0, colon));
  if (auto c = graph::check_id("Last-Event-ID", id); !c) return wrong();
  st.checkpoint = id;
  st.index = k;
  return st;
}

Status check_stream_modes(const std::vector<std::string>& modes, std::string_view route) {
  for (const auto& m : modes) {
    if (m == "tools" || m == "lifecycle") return not_yet(route, "'stream_mode' '" + m + "'");
    if (m != "values" && m != "updates" && m != "messages" && m != "messages-tuple" &&
        m != "custom" && m != "debug" && m != "tasks" && m != "checkpoints" && m != "events")
      return bad("'stream_mode' '" + m +
                 "' is not a mode (values, updates, messages-tuple, messages, custom, events, "
                 "debug, tasks, checkpoints, tools, lifecycle)");
  }
  return {};
}

Result<LangGraphRun> read_langgraph_run(const json::object& b, std::string_view route) {
  LangGraphRun r;
  const auto* aid = field(b, "assistant_id");
  if (!aid) return bad("'assistant_id' is required: a graph id or an assistant id");
  if (!aid->is_string() || aid->as_string().empty())
    return bad("'assistant_id' must be a graph id or an assistant id (a string), got " +
               json::serialize(*aid));
  r.assistant_id = aid->as_string();
  if (set(field(b, "context"))) return not_yet(route, "'context'");
  if (const auto* a = field(b, "after_seconds")) {
    constexpr double kMax = std::chrono::duration<double>(cluster::kMaxRunDelay).count();
    if (!a->is_number() || !(a->to_number<double>() >= 0) || a->to_number<double>() > kMax)
      return bad("'after_seconds' must be a number of seconds from 0 to " +
                 std::to_string(static_cast<long>(kMax)) + " (a day), got " +
                 json::serialize(*a).substr(0, 100));
    r.after = std::chrono::milliseconds(std::llround(a->to_number<double>() * 1000.0));
  }
  if (const auto* w = field(b, "webhook")) {
    if (!w->is_string())
      return bad("'webhook' must be a URL (a string), got " + std::string(json_kind_phrase(*w)));
    if (auto u = read_webhook_url(w->as_string()); !u) return std::move(u).error();
    r.webhook = w->as_string();
  }
  for (const char* key : {"interrupt_before", "interrupt_after"}) {
    const auto* v = field(b, key);
    if (!set(v)) continue;
    auto& to = std::string_view(key) == "interrupt_before" ? r.controls.interrupt_before
                                                           : r.controls.interrupt_after;
    const std::string must =
        std::string("'") + key + "' must be \"*\" or a list of node names, got ";
    if (v->is_string()) {
      if (v->as_string() != "*") return bad(must + json::serialize(*v));
      to.emplace_back("*");
    } else if (v->is_array()) {
      if (v->as_array().size() > 1000)
        return bad(std::string("'") + key + "' names over 1000 nodes");
      for (const auto& n : v->as_array()) {
        if (!n.is_string() || n.as_string().empty())
          return bad(must + json::serialize(*v).substr(0, 200));
        to.emplace_back(n.as_string());
      }
    } else {
      return bad(must + json::serialize(*v).substr(0, 200));
    }
  }
  if (const auto* m = field(b, "multitask_strategy");
      m && *m != "reject" && *m != "interrupt" && *m != "rollback" && *m != "enqueue")
    return bad("'multitask_strategy' must be one of reject, interrupt, rollback, enqueue, got " +
               json::serialize(*m));
  if (const auto* m = field(b, "multitask_strategy")) {
    r.multitask = m->as_string();
    r.controls.multitask_strategy = r.multitask;  // shown with the run
  }
  if (const auto* c = field(b, "config")) {
    if (!c->is_object()) return bad("'config' must be an object");
    for (const auto& kv : c->as_object()) {
      if (kv.key() == "recursion_limit" && !kv.value().is_null()) {
        const auto& n = kv.value();
        if (!n.is_int64() || n.as_int64() < 1 || n.as_int64() > 1'000'000)
          return bad("'config.recursion_limit' must be a whole number from 1, got " +
                     json::serialize(n).substr(0, 100));
        r.controls.recursion_limit = static_cast<int>(n.as_int64());
      } else if ((kv.key() == "configurable" || kv.key() == "metadata") && !kv.value().is_null() &&
                 !kv.value().is_object()) {
        return bad("'config." + std::string(kv.key()) + "' must be an object, got " +
                   std::string(json_kind_phrase(kv.value())));
      } else if (kv.key() == "tags" && !kv.value().is_null() && !kv.value().is_array()) {
        return bad("'config.tags' must be a list of strings, got " +
                   std::string(json_kind_phrase(kv.value())));
      } else if (kv.key() != "configurable" && kv.key() != "tags" && kv.key() != "metadata" &&
                 !kv.value().is_null()) {
        return not_yet(route, "'config." + std::string(kv.key()) + "'");
      }
    }
  }
  if (const auto* cmd = field(b, "command")) {
    if (!cmd->is_object()) return bad("'command' must be an object: {\"resume\": value}");
    for (const auto& kv : cmd->as_object()) {
      if (kv.key() == "resume") {
        r.resume = kv.value();
      } else if (kv.key() == "update" && kv.value().is_object()) {
        r.update = kv.value().as_object();
      } else if (kv.key() == "update" && kv.value().is_array()) {  // [[channel, value], ...]
        for (const auto& pair : kv.value().as_array()) {
          if (!pair.is_array() || pair.as_array().size() != 2 || !pair.as_array()[0].is_string())
            return bad(
                "'command.update' must be an object of channel values or a list of "
                "[channel, value] pairs");
          r.update[pair.as_array()[0].as_string()] = pair.as_array()[1];
        }
      } else if (kv.key() == "goto" && !kv.value().is_null()) {
        // A node name, a Send ({"node", "input"}), or a list of them.
        const auto& v = kv.value();
        const json::array one{v};
        const json::array& names = v.is_array() ? v.as_array() : one;
        if (names.size() > 1000) return bad("'command.goto' names over 1000 nodes");
        for (const auto& n : names) {
          if (const auto* send = n.if_object()) {  // a Send: {"node", "input"}
            const auto* node = send->if_contains("node");
            const bool only = std::all_of(send->begin(), send->end(), [](const auto& f) {
              return f.key() == "node" || f.key() == "input";
            });
            if (!node || !node->is_string() || node->as_string().empty() || !only)
              return bad(
                  "a Send in 'command.goto' is {\"node\": <a node name>, \"input\": <its "
                  "input>}, got " +
                  json::serialize(n).substr(0, 200));
            const auto* input = send->if_contains("input");
            r.controls.go_to_sends.emplace_back(std::string(node->as_string()),
                                                input ? *input : json::value(nullptr));
            continue;
          }
          if (!n.is_string() || n.as_string().empty())
            return bad(
                "'command.goto' must be a node name, a Send ({\"node\", \"input\"}) or a list "
                "of them, got " +
                json::serialize(v).substr(0, 200));
          r.controls.go_to.emplace_back(n.as_string());
        }
      } else if (kv.key() == "update" && !kv.value().is_null()) {
        return bad(
            "'command.update' must be an object of channel values or a list of "
            "[channel, value] pairs");
      } else if (!kv.value().is_null()) {
        return not_yet(route, "'command." + std::string(kv.key()) + "'");
      }
    }
  }
  if (const auto* in = field(b, "input")) {
    if (!in->is_object())
      return bad("'input' must be an object of channel values, got " +
                 std::string(json_kind_phrase(*in)));
    r.input = in->as_object();
  }
  if (r.resume && !r.input.empty()) return bad("give 'input' or 'command.resume', not both");
  if (r.resume && (!r.controls.go_to.empty() || !r.controls.go_to_sends.empty()))
    return not_yet(route, "'command.goto' with 'command.resume' (resume first, then goto)");
  if (r.resume && r.after.count() > 0)
    return not_yet(route, "'after_seconds' with 'command.resume' (a delayed resume)");
  auto from = read_langgraph_checkpoint(b);
  if (!from) return std::move(from).error();
  r.checkpoint_id = std::move(*from);
  if (const auto* m = field(b, "metadata")) {
    if (!m->is_object()) return bad("'metadata' must be an object");
    r.metadata = m->as_object();
    r.controls.metadata = r.metadata;
  }
  if (const auto* s = field(b, "stream_mode")) {
    r.stream_modes.clear();
    if (s->is_string()) {
      r.stream_modes.emplace_back(s->as_string());
    } else if (s->is_array()) {
      for (const auto& m : s->as_array()) {
        if (!m.is_string()) return bad("'stream_mode' must be a mode or a list of modes");
        r.stream_modes.emplace_back(m.as_string());
      }
    } else {
      return bad("'stream_mode' must be a mode or a list of modes");
    }
  }
  if (auto c = check_stream_modes(r.stream_modes, route); !c) return std::move(c).error();
  if (const auto* g = field(b, "stream_subgraphs")) {
    if (!g->is_bool())
      return bad("'stream_subgraphs' must be true or false, got " + json::serialize(*g));
    r.controls.subgraph_steps = g->as_bool();
  }
  if (const auto* d = field(b, "on_disconnect")) {
    if (*d != "cancel" && *d != "continue")
      return bad("'on_disconnect' must be \"cancel\" or \"continue\", got " + json::serialize(*d));
    r.cancel_on_disconnect = *d == "cancel";
  }
  if (const auto* i = field(b, "if_not_exists")) {
    if (*i != "create" && *i != "reject")
      return bad("'if_not_exists' must be \"create\" or \"reject\", got " + json::serialize(*i));
    r.create_thread = *i == "create";
  }
  return r;
}

Result<WebhookUrl> read_webhook_url(std::string_view url) {
  auto shown = [&] { return "'" + escape_control(url.substr(0, 200)) + "'"; };
  if (url.size() > 2048) return bad("'webhook' is longer than 2048 bytes");
  const auto scheme_end = url.find("://");
  const auto slash = url.find('/', scheme_end == std::string_view::npos ? 0 : scheme_end + 3);
  const auto query = url.find('?');
  // The origin (and path) as http::parse_url reads a base URL; the query travels as it is.
  const std::string_view base = url.substr(0, std::min(query, url.size()));
  auto u = http::parse_url(base);
  if (!u) return bad("'webhook': " + u.error().message);
  WebhookUrl w;
  w.tls = u->tls;
  w.host = u->host;
  w.port = u->port;
  w.origin = u->origin();
  w.target = slash == std::string_view::npos || slash > query
                 ? "/"
                 : std::string(url.substr(slash, std::min(query, url.size()) - slash));
  if (query != std::string_view::npos) {
    const std::string_view q = url.substr(query);
    for (const char c : q)
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '#')
        return bad("'webhook': invalid URL " + shown() +
                   ": its query may not hold a space, a control character or a fragment");
    w.target += q;
  }
  return w;
}

Result<LangGraphThreadCreate> read_langgraph_thread_create(const json::object& b) {
  LangGraphThreadCreate t;
  if (const auto* id = field(b, "thread_id")) {
    if (!id->is_string()) return bad("'thread_id' must be a string");
    t.thread_id = id->as_string();
    if (auto c = graph::check_id("thread_id", t.thread_id); !c) return std::move(c).error();
  }
  if (const auto* m = field(b, "metadata")) {
    if (!m->is_object()) return bad("'metadata' must be an object");
    t.metadata = m->as_object();
  }
  if (const auto* g = field(b, "graph_id"); g && g->is_string()) t.metadata["graph_id"] = *g;
  for (const char* key : {"supersteps", "ttl"})
    if (set(field(b, key))) return not_yet("POST /threads", std::string("'") + key + "'");
  if (const auto* e = field(b, "if_exists")) {
    if (*e != "raise" && *e != "do_nothing")
      return bad("'if_exists' must be \"raise\" or \"do_nothing\", got " + json::serialize(*e));
    t.do_nothing_if_exists = *e == "do_nothing";
  }
  return t;
}

Result<LangGraphPage> read_langgraph_page(const json::object& b) {
  LangGraphPage p;
  for (auto [key, dst, lo, hi] :
       {std::tuple{"limit", &p.limit, 1, 1000}, std::tuple{"offset", &p.offset, 0, 100'000'000}}) {
    const auto* v = field(b, key);
    if (!v) continue;
    if (!v->is_int64() || v->as_int64() < lo || v->as_int64() > hi)
      return bad(std::string("'") + key + "' must be an integer from " + std::to_string(lo) +
                 " to " + std::to_string(hi) + ", got " + json::serialize(*v));
    *dst = static_cast<std::size_t>(v->as_int64());
  }
  return p;
}

namespace {

Result<std::optional<json::object>> object_field(const json::object& b, std::string_view key) {
  const auto* v = field(b, key);
  if (!v) return std::optional<json::object>();
  if (!v->is_object())
    return bad("'" + std::string(key) + "' must be an object, got " +
               std::string(json_kind_phrase(*v)));
  return std::optional<json::object>(v->as_object());
}

Result<std::optional<std::string>> string_field(const json::object& b, std::string_view key) {
  const auto* v = field(b, key);
  if (!v) return std::optional<std::string>();
  if (!v->is_string())
    return bad("'" + std::string(key) + "' must be a string, got " +
               std::string(json_kind_phrase(*v)));
  return std::optional<std::string>(std::string(v->as_string()));
}

// `key`'s value when it is one of `allowed` (else a 422 listing them); `fallback` when absent.
Result<std::string> one_of(const json::object& b, std::string_view key,
                           std::initializer_list<std::string_view> allowed,
                           std::string_view fallback) {
  auto v = string_field(b, key);
  if (!v) return std::move(v).error();
  if (!*v) return std::string(fallback);
  std::string list;
  for (auto a : allowed) {
    if (**v == a) return **v;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return bad("'" + std::string(key) + "' must be one of " + list + ", got '" + **v + "'");
}

}  // namespace

Result<LangGraphThreadSearch> read_langgraph_thread_search(const json::object& b) {
  LangGraphThreadSearch q;
  auto page = read_langgraph_page(b);
  if (!page) return std::move(page).error();
  q.page = *page;
  for (auto [key, dst] : {std::pair{"metadata", &q.metadata}, {"values", &q.values}}) {
    auto o = object_field(b, key);
    if (!o) return std::move(o).error();
    *dst = std::move(*o);
  }
  if (const auto* ids = field(b, "ids")) {
    if (!ids->is_array() || ids->as_array().size() > 1000)
      return bad("'ids' must be a list of at most 1000 thread ids");
    q.ids.emplace();
    for (const auto& id : ids->as_array()) {
      if (!id.is_string()) return bad("'ids' must be a list of thread ids (strings)");
      q.ids->emplace_back(id.as_string());
    }
  }
  auto status = one_of(b, "status", {"idle", "busy", "interrupted", "error"}, "");
  if (!status) return std::move(status).error();
  q.status = std::move(*status);
  auto sort =
      one_of(b, "sort_by", {"thread_id", "created_at", "updated_at", "status", "state_updated_at"},
             "created_at");
  if (!sort) return std::move(sort).error();
  if (*sort == "status" || *sort == "state_updated_at")
    return not_yet("POST /threads/search", "'sort_by': '" + *sort + "'");
  q.sort_by = std::move(*sort);
  auto order = one_of(b, "sort_order", {"asc", "desc"}, "desc");
  if (!order) return std::move(order).error();
  q.ascending = *order == "asc";
  for (const char* key : {"select", "extract"})
    if (set(field(b, key))) return not_yet("POST /threads/search", std::string("'") + key + "'");
  return q;
}

Result<LangGraphAssistantSearch> read_langgraph_assistant_search(const json::object& b) {
  LangGraphAssistantSearch q;
  auto page = read_langgraph_page(b);
  if (!page) return std::move(page).error();
  q.page = *page;
  for (auto [key, dst] : {std::pair{"graph_id", &q.graph_id}, {"name", &q.name}}) {
    auto v = string_field(b, key);
    if (!v) return std::move(v).error();
    *dst = std::move(*v);
  }
  auto m = object_field(b, "metadata");
  if (!m) return std::move(m).error();
  q.metadata = std::move(*m);
  auto sort = one_of(b, "sort_by", {"assistant_id", "graph_id", "name", "created_at", "updated_at"},
                     "name");
  if (!sort) return std::move(sort).error();
  auto order = one_of(b, "sort_order", {"asc", "desc"}, "asc");
  if (!order) return std::move(order).error();
  if (set(field(b, "select"))) return not_yet("POST /assistants/search", "'select'");
  q.sort_by = std::move(*sort);
  q.ascending = *order == "asc";
  return q;
}

Result<LangGraphAssistantWrite> read_langgraph_assistant_write(const json::object& b,
                                                               std::string_view route) {
  LangGraphAssistantWrite w;
  for (auto [key, dst] :
       {std::pair{"graph_id", &w.graph_id}, {"assistant_id", &w.assistant_id}, {"name", &w.name}}) {
    auto v = string_field(b, key);
    if (!v) return std::move(v).error();
    *dst = std::move(*v);
  }
  if (w.graph_id && w.graph_id->empty()) return bad("'graph_id' must name a graph");
  if (w.assistant_id)
    if (auto c = graph::check_id("'assistant_id'", *w.assistant_id); !c)
      return std::move(c).error();
  if (w.name && w.name->size() > 256)
    return bad("'name' is " + std::to_string(w.name->size()) + " bytes; at most 256");
  if (const auto* d = b.if_contains("description")) {
    if (!d->is_string() && !d->is_null())
      return bad("'description' must be a string or null, got " +
                 std::string(json_kind_phrase(*d)));
    if (d->is_string() && d->as_string().size() > 4096)
      return bad("'description' is over 4096 bytes");
    w.description = *d;
  }
  auto m = object_field(b, "metadata");
  if (!m) return std::move(m).error();
  w.metadata = std::move(*m);
  if (set(field(b, "context"))) return not_yet(route, "'context'");
  if (const auto* c = field(b, "config")) {
    if (!c->is_object()) return bad("'config' must be an object");
    for (const auto& kv : c->as_object()) {
      const auto& v = kv.value();
      if (v.is_null()) continue;
      if (kv.key() == "recursion_limit") {
        if (!v.is_int64() || v.as_int64() < 1 || v.as_int64() > 1'000'000)
          return bad("'config.recursion_limit' must be a whole number from 1, got " +
                     json::serialize(v).substr(0, 100));
      } else if (kv.key() == "configurable" && !v.is_object()) {
        return bad("'config.configurable' must be an object, got " +
                   std::string(json_kind_phrase(v)));
      } else if (kv.key() == "tags" && !v.is_array()) {
        return bad("'config.tags' must be a list of strings, got " +
                   std::string(json_kind_phrase(v)));
      } else if (kv.key() != "configurable" && kv.key() != "tags" &&
                 kv.key() != "recursion_limit") {
        return not_yet(route, "'config." + std::string(kv.key()) + "'");
      }
    }
    w.config = c->as_object();
  }
  auto e = one_of(b, "if_exists", {"raise", "do_nothing"}, "raise");
  if (!e) return std::move(e).error();
  w.do_nothing_if_exists = *e == "do_nothing";
  return w;
}

Result<std::int64_t> read_langgraph_assistant_version(const json::object& b) {
  const auto* v = field(b, "version");
  if (!v || !v->is_int64() || v->as_int64() < 1)
    return bad("'version' must be a version number (1 or more), got " +
               (v ? json::serialize(*v).substr(0, 100) : std::string("nothing")));
  return v->as_int64();
}

Result<std::string> read_langgraph_before(const json::object& b) {
  const auto* bf = field(b, "before");
  if (!bf) return std::string();
  const json::value* id = bf;
  if (bf->is_object()) {
    const auto& o = bf->as_object();
    const auto* conf = o.if_contains("configurable");
    id = conf && conf->is_object() ? conf->as_object().if_contains("checkpoint_id")
                                   : o.if_contains("checkpoint_id");
  }
  if (!id || !id->is_string())
    return bad("'before' must be a checkpoint id or {\"configurable\": {\"checkpoint_id\": ...}}");
  return std::string(id->as_string());
}

Result<std::vector<json::object>> langgraph_batch(std::string_view text) {
  auto p = parse_json(text, "the request body");
  if (!p) return std::move(p).error();
  if (!p->value.is_array() || p->value.as_array().empty())
    return bad("POST /runs/batch takes a list of runs (1 to " + std::to_string(kMaxBatch) +
               " run requests)");
  const auto& a = p->value.as_array();
  if (a.size() > kMaxBatch)
    return bad("POST /runs/batch takes at most " + std::to_string(kMaxBatch) + " runs, got " +
               std::to_string(a.size()));
  std::vector<json::object> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_object())
      return bad("run " + std::to_string(i) + " of the batch must be an object, got " +
                 std::string(json_kind_phrase(a[i])));
    out.push_back(a[i].as_object());
  }
  return out;
}

Result<LangGraphCancelMany> read_langgraph_cancel_many(const json::object& b) {
  LangGraphCancelMany c;
  auto t = string_field(b, "thread_id");
  if (!t) return std::move(t).error();
  c.thread_id = t->value_or("");
  if (!c.thread_id.empty())
    if (auto k = graph::check_id("thread_id", c.thread_id); !k) return std::move(k).error();
  if (const auto* ids = field(b, "run_ids")) {
    if (!ids->is_array() || ids->as_array().size() > 1000)
      return bad("'run_ids' must be a list of at most 1000 run ids");
    for (const auto& id : ids->as_array()) {
      if (!id.is_string()) return bad("'run_ids' must be a list of run ids");
      if (auto k = graph::check_id("run id", id.as_string()); !k) return std::move(k).error();
      c.run_ids.emplace_back(id.as_string());
    }
  }
  auto st = one_of(b, "status", {"pending", "running", "all"}, "all");
  if (!st) return std::move(st).error();
  c.status = std::move(*st);
  if (c.thread_id.empty() && c.run_ids.empty())
    return bad("POST /runs/cancel needs 'thread_id' or 'run_ids'");
  return c;
}

Result<std::string> read_langgraph_checkpoint(const json::object& b) {
  std::string id;
  if (const auto* c = field(b, "checkpoint")) {
    const json::value* v = nullptr;
    if (c->is_object()) {
      const auto& o = c->as_object();
      const auto* conf = o.if_contains("configurable");
      v = conf && conf->is_object() ? conf->as_object().if_contains("checkpoint_id")
                                    : o.if_contains("checkpoint_id");
      if (const auto* ns = o.if_contains("checkpoint_ns");
          ns && !ns->is_null() && *ns != json::value(""))
        return bad(
            "'checkpoint.checkpoint_ns' names a subgraph's checkpoint; weir's threads have "
            "one namespace (\"\")");
    }
    if (!c->is_object() || (v && !v->is_null() && !v->is_string()))
      return bad("'checkpoint' must be {\"checkpoint_id\": \"...\"}");
    if (v && v->is_string()) id = v->as_string();
  }
  if (const auto* c = field(b, "checkpoint_id")) {
    if (!c->is_string()) return bad("'checkpoint_id' must be a string");
    if (!id.empty() && id != c->as_string())
      return bad("'checkpoint' and 'checkpoint_id' name two checkpoints");
    id = c->as_string();
  }
  if (!id.empty())
    if (auto c = graph::check_id("checkpoint_id", id); !c) return std::move(c).error();
  return id;
}

Result<LangGraphStateUpdate> read_langgraph_state_update(const json::object& b) {
  LangGraphStateUpdate u;
  if (const auto* v = field(b, "values")) {
    if (!v->is_object())
      return bad(
          "'values' must be an object of channel values (weir does not take a list of "
          "updates), got " +
          std::string(json_kind_phrase(*v)));
    u.values = v->as_object();
  }
  auto node = string_field(b, "as_node");
  if (!node) return std::move(node).error();
  u.as_node = node->value_or("");
  auto cp = read_langgraph_checkpoint(b);
  if (!cp) return std::move(cp).error();
  u.checkpoint_id = std::move(*cp);
  return u;
}

Result<LangGraphPrune> read_langgraph_prune(const json::object& b) {
  LangGraphPrune p;
  const auto* ids = field(b, "thread_ids");
  if (!ids || !ids->is_array()) return bad("'thread_ids' must be a list of thread ids");
  if (ids->as_array().size() > 1000) return bad("'thread_ids' may name at most 1000 threads");
  for (const auto& id : ids->as_array()) {
    if (!id.is_string()) return bad("'thread_ids' must be a list of thread ids");
    if (auto c = graph::check_id("thread_id", id.as_string()); !c) return std::move(c).error();
    p.ids.emplace_back(id.as_string());
  }
  auto strategy = one_of(b, "strategy", {"delete", "keep_latest"}, "delete");
  if (!strategy) return std::move(strategy).error();
  p.keep_latest = *strategy == "keep_latest";
  return p;
}

bool json_contains(const json::value& have, const json::value& want) {
  if (want.is_object()) {
    if (!have.is_object()) return false;
    for (const auto& kv : want.as_object()) {
      const auto* h = have.as_object().if_contains(kv.key());
      if (!h || !json_contains(*h, kv.value())) return false;
    }
    return true;
  }
  return have == want;
}

}  // namespace weir::serve
