// Remote MCP tools as weir Tools: the result's content turned into the text a model reads.
#include <set>

#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"
#include "weir/tools/schema.hpp"

namespace weir::tools {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

std::optional<std::string> base64_decode(std::string_view in) {
  static const auto table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = i;
    return t;
  }();
  std::string out;
  out.reserve(in.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    if (c == '\n' || c == '\r' || c == ' ') continue;
    const int v = table[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string str_of(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

// A binary or large block: into the artifact store, a reference line for the model.
std::string store(std::string_view kind, std::string_view label, std::string_view bytes,
                  const std::string& mime, const std::string& source, const ToolContext& ctx) {
  std::string head = "[" + std::string(kind) + (label.empty() ? "" : " " + std::string(label)) +
                     " " + (mime.empty() ? "application/octet-stream" : mime) + ", " +
                     std::to_string(bytes.size()) + " bytes: ";
  if (!ctx.artifacts) return head + "not kept (no artifact store)]";
  auto ref = ctx.artifacts->put(bytes, mime.empty() ? "application/octet-stream" : mime,
                                std::string(kind) + " from " + source, ctx.owner);
  if (!ref) return head + "not kept: " + ref.error().message + "]";
  return head + "artifact " + ref->id + "]";
}

class McpTool final : public BasicTool {
 public:
  McpTool(std::shared_ptr<McpClient> client, const McpToolInfo& info, json::object schema)
      : BasicTool(client->config().name + "/" + info.name, info.description, std::move(schema),
                  client->config().options),
        client_(std::move(client)),
        remote_(info.name) {}

  asio::awaitable<Result<std::string>> invoke(json::object args, const ToolContext& ctx) override {
    auto op = client_->async_call_tool(remote_, std::move(args), options().timeout, ctx.trace);
    auto r = co_await std::move(op);
    if (!r) co_return std::move(r).error();
    const std::string source = name();
    std::string text;
    auto add = [&](std::string_view s) {
      if (!text.empty()) text += '\n';
      text += s;
    };
    bool has_text = false;
    if (const auto* content = r->if_contains("content"); content && content->is_array()) {
      for (const auto& block : content->get_array()) {
        const auto* b = block.if_object();
        if (!b) continue;
        const std::string type = str_of(*b, "type");
        if (type == "text") {
          add(str_of(*b, "text"));
          has_text = true;
        } else if (type == "image" || type == "audio") {
          auto bytes = base64_decode(str_of(*b, "data"));
          if (!bytes)
            co_return Error(Errc::tool_failed, "mcp server '" + client_->config().name +
                                                   "': tool '" + remote_ + "' returned " + type +
                                                   " data that is not base64");
          add(store(type, "", *bytes, str_of(*b, "mimeType"), source, ctx));
        } else if (type == "resource") {
          const auto* res = b->if_contains("resource");
          const json::object empty;
          const json::object& ro = res && res->is_object() ? res->get_object() : empty;
          const std::string uri = str_of(ro, "uri");
          if (ro.contains("blob")) {
            auto bytes = base64_decode(str_of(ro, "blob"));
            add(store("resource", uri, bytes.value_or(""), str_of(ro, "mimeType"), source, ctx));
          } else {
            add(store("resource", uri, str_of(ro, "text"),
                      str_of(ro, "mimeType").empty() ? "text/plain" : str_of(ro, "mimeType"),
                      source, ctx));
          }
        } else if (type == "resource_link") {
          add("[resource link: " + str_of(*b, "uri") +
              (b->contains("name") ? " (" + str_of(*b, "name") + ")" : "") + "]");
        }
      }
    }
    if (!has_text) {
      if (const auto* sc = r->if_contains("structuredContent"); sc && !sc->is_null())
        add(json::serialize(*sc));
    }
    if (const auto* e = r->if_contains("isError"); e && e->is_bool() && e->get_bool())
      co_return Error(Errc::tool_failed, "mcp server '" + client_->config().name + "': tool '" +
                                             remote_ + "' failed: " + text);
    co_return text;
  }

 private:
  std::shared_ptr<McpClient> client_;
  std::string remote_;
};

}  // namespace

Result<std::vector<std::shared_ptr<Tool>>> make_mcp_tools(std::shared_ptr<McpClient> client,
                                                          std::span<const std::string> only) {
  const std::string who = "mcp server '" + client->config().name + "'";
  const auto listed = client->tools();
  const bool all = only.empty() || std::find(only.begin(), only.end(), "*") != only.end();
  if (!all) {
    for (const auto& want : only) {
      if (std::none_of(listed.begin(), listed.end(),
                       [&](const McpToolInfo& t) { return t.name == want; })) {
        std::string offered;
        for (const auto& t : listed) offered += (offered.empty() ? "" : ", ") + t.name;
        return Error(Errc::not_found, who + " has no tool '" + want + "' (it offers: " +
                                          (offered.empty() ? "no tools" : offered) + ")");
      }
    }
  }
  std::vector<std::shared_ptr<Tool>> out;
  for (const auto& t : listed) {
    if (!all && std::find(only.begin(), only.end(), t.name) == only.end()) continue;
    json::object schema = t.input_schema;
    if (!schema.contains("type")) schema["type"] = "object";
    const auto* type = schema.if_contains("type");
    if (!type->is_string() || type->get_string() != "object")
      return Error(Errc::invalid_argument,
                   who + ": tool '" + t.name + "': its inputSchema must have \"type\": \"object\"");
    if (auto s = check_schema(schema); !s)
      return Error(
          Errc::invalid_argument,
          who + ": tool '" + t.name + "': weir cannot check its inputSchema: " + s.error().message);
    out.push_back(std::make_shared<McpTool>(client, t, std::move(schema)));
  }
  return out;
}

Status add_mcp_tools(ToolRegistry& registry, std::shared_ptr<McpClient> client,
                     std::span<const std::string> only) {
  auto tools = make_mcp_tools(std::move(client), only);
  if (!tools) return std::move(tools).error();
  for (const auto& t : *tools)
    if (registry.find(t->name()))
      return Error(Errc::invalid_argument,
                   "tool registry: a tool named '" + t->name() + "' is already registered");
  for (auto& t : *tools)
    if (auto s = registry.add(t); !s) return s;
  return {};
}

}  // namespace weir::tools
