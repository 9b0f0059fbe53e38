// The tools layer's sections of configuration files: built-in tools by name and MCP server
// entries (weir/tools/builtin.hpp, weir/tools/mcp.hpp). One reader each, for every file format
// that has them; the defaults are the tools' own (ToolOptions, McpServerConfig). Parsing only
// (the fuzzers compile it alone); making the tools is builtin_tools.cpp's.
#include <algorithm>
#include <array>

#include <boost/json.hpp>

#include "weir/http/client.hpp"
#include "weir/runtime/json_fields.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/mcp.hpp"

namespace weir::tools {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// One rule for a tool's and an MCP server's concurrency and rate, whichever file sets them.
constexpr std::int64_t kMaxConcurrency = 4096;
constexpr std::int64_t kMaxRatePerMinute = std::int64_t{1} << 30;

fs::path resolve(const std::string& p, const fs::path& base_dir) {
  const fs::path path(p);
  return path.is_absolute() ? path : (base_dir / path).lexically_normal();
}

}  // namespace

std::span<const std::string> builtin_tool_names() {
  static const std::array<std::string, 6> names = {"calculator", "files", "artifacts",
                                                   "doc_search", "lorem", "sleep"};
  return names;
}

bool builtin_tool_needs_root(std::string_view builtin) noexcept {
  return builtin == "files" || builtin == "doc_search";
}

std::optional<BuiltinToolConfig> parse_builtin_tool(JsonFields& f, std::string_view builtin,
                                                    std::string_view builtin_ptr,
                                                    const json::object& o, std::string_view ptr,
                                                    const fs::path& base_dir,
                                                    std::span<const std::string_view> extra_keys) {
  const auto names = builtin_tool_names();
  if (std::find(names.begin(), names.end(), builtin) == names.end()) {
    f.error(builtin_ptr, unknown_name_message("builtin tool", builtin, names));
    return std::nullopt;
  }
  std::vector<std::string_view> keys(extra_keys.begin(), extra_keys.end());
  for (std::string_view k :
       {"root", "timeout_ms", "max_output_bytes", "max_concurrency", "rate_per_minute"})
    keys.push_back(k);
  if (builtin == "doc_search") keys.push_back("folder");
  f.check_keys(o, ptr, keys);
  BuiltinToolConfig c;
  c.builtin = std::string(builtin);
  auto root = f.string_at(o, "root", ptr);
  if (auto folder = f.string_at(o, "folder", ptr)) {
    if (root)
      f.error(std::string(ptr) + "/folder", "give the folder once, as \"root\" or as \"folder\"");
    root = folder;
  }
  if (root) c.root = resolve(*root, base_dir);
  if (builtin_tool_needs_root(builtin) && !o.contains("root") && !o.contains("folder")) {
    f.error(ptr, "the " + c.builtin + " tool needs a \"root\" folder (relative to this file)");
    return std::nullopt;
  }
  if (auto n = f.ms_at(o, "timeout_ms", ptr, 1)) c.timeout = std::chrono::milliseconds(*n);
  if (auto n = f.bytes_at(o, "max_output_bytes", ptr)) {
    if (*n < 1)
      f.error(std::string(ptr) + "/max_output_bytes", "must be at least 1 byte");
    else
      c.max_output_bytes = static_cast<std::size_t>(*n);
  }
  if (auto n = f.int_at(o, "max_concurrency", ptr, 1, kMaxConcurrency))
    c.max_concurrency = static_cast<std::int32_t>(*n);
  if (auto n = f.int_at(o, "rate_per_minute", ptr, 0, kMaxRatePerMinute))
    c.rate_per_minute = static_cast<std::int32_t>(*n);
  return c;
}

Status check_environment_variable(std::string_view name, std::string_view value) {
  if (name.empty()) return Error(Errc::invalid_argument, "an environment variable needs a name");
  if (name.find('\0') != std::string_view::npos)
    return Error(Errc::invalid_argument, "an environment variable's name holds a NUL byte");
  if (name.find('=') != std::string_view::npos)
    return Error(Errc::invalid_argument, "environment variable name '" + utf8_abbreviate(name, 64) +
                                             "' holds '=', which ends a name");
  if (value.find('\0') != std::string_view::npos)
    return Error(Errc::invalid_argument, "environment variable '" + std::string(name) +
                                             "' holds a NUL byte, which would cut its value short");
  return {};
}

std::optional<McpServerConfig> parse_mcp_server(JsonFields& f, std::string_view name,
                                                const json::value& v, std::string_view ptr,
                                                const fs::path& base_dir) {
  const std::string p(ptr);
  const bool plain = is_plain_name(name);
  if (!plain)
    f.error(p, "MCP server name '" + std::string(name) +
                   "' must start with a letter or '_' and use only letters, digits, '_' and '-'");
  const auto* o = v.if_object();
  if (!o) {
    f.error(
        p, std::string("expected a server object like {\"command\": [\"npx\", \"-y\", \"...\"]} or "
                       "{\"url\": \"http://127.0.0.1:3000/mcp\"}, got ") +
               json_kind_phrase(v));
    return std::nullopt;
  }
  f.check_keys(*o, p,
               {"command", "url", "headers", "headers_env", "env", "cwd", "timeout_ms",
                "max_concurrency", "rate_per_minute", "max_message_bytes"});
  McpServerConfig s;
  s.name = std::string(name);
  const auto* cmd = o->if_contains("command");
  const auto* url = o->if_contains("url");
  if (!cmd == !url) {
    f.error(p,
            "give either \"command\" (a server weir starts, stdio) or \"url\" (Streamable HTTP)");
  } else if (cmd) {
    auto argv = f.strings_at(*o, "command", p);
    if (argv && argv->empty())
      f.error(p + "/command",
              "expected a non-empty array of strings (the program and its arguments)");
    for (std::size_t i = 0; argv && i < argv->size(); ++i)
      if ((*argv)[i].find('\0') != std::string::npos)
        f.error(p + "/command/" + std::to_string(i),
                "holds a NUL byte, which would cut the argument short");
    if (argv && !argv->empty() && argv->front().empty())
      f.error(p + "/command/0", "the program's name is empty");
    if (argv) s.command = std::move(*argv);
  } else if (auto u = f.string_at(*o, "url", p)) {
    if (auto parsed = http::parse_url(*u); !parsed)
      f.error(p + "/url", parsed.error().message + " (the server's MCP endpoint)");
    s.url = *u;
  }
  if (o->contains("env") && url)
    f.error(p + "/env",
            "\"env\" goes with a \"command\" server (a \"url\" server gets \"headers\")");
  if (auto env = f.string_map_at(*o, "env", p)) {
    for (const auto& [k, val] : *env)
      if (auto st = check_environment_variable(k, val); !st)
        f.error(json_pointer_append(p + "/env", k), st.error().message);
    s.env = std::move(*env);
  }
  for (const char* key : {"headers", "headers_env"}) {
    if (o->contains(key) && cmd)
      f.error(p + "/" + key, std::string("\"") + key +
                                 "\" go with a \"url\" server (a server weir starts gets \"env\")");
  }
  // The rule every header weir sends follows (http::check_header), none of the headers MCP's
  // client sets itself, and each header once across both maps (names are case-insensitive: two
  // Authorization headers are a 400 at weir serve). A headers_env value is a variable's name;
  // its header's value is checked when the client connects.
  std::vector<std::string> seen;
  auto check_name = [&](const std::string& key, const std::string& name, std::string_view value) {
    const std::string at = json_pointer_append(p + "/" + key, name);
    if (auto st = http::check_header(name, value); !st) return f.error(at, st.error().message);
    for (std::string_view own : {"Mcp-Session-Id", "MCP-Protocol-Version", "Accept", "Connection",
                                 "traceparent", "tracestate"})
      if (iequals(name, own))
        return f.error(at, "header '" + name + "' is set by weir's MCP client; leave it out");
    for (const auto& other : seen)
      if (iequals(name, other))
        return f.error(at, "header '" + name + "' is given twice (names are case-insensitive)");
    seen.push_back(name);
  };
  if (auto h = f.string_map_at(*o, "headers", p))
    for (auto& [k, val] : *h) {
      check_name("headers", k, val);
      s.headers.emplace_back(k, std::move(val));
    }
  if (auto h = f.string_map_at(*o, "headers_env", p)) {
    for (const auto& [k, var] : *h) {
      check_name("headers_env", k, "");
      if (auto st = check_environment_variable(var, ""); !st)
        f.error(json_pointer_append(p + "/headers_env", k), st.error().message);
    }
    s.headers_env = std::move(*h);
  }
  if (auto cwd = f.string_at(*o, "cwd", p)) {
    if (cwd->find('\0') != std::string::npos)
      f.error(p + "/cwd", "holds a NUL byte, which would cut the folder's name short");
    s.cwd = resolve(*cwd, base_dir);
  }
  if (auto n = f.ms_at(*o, "timeout_ms", p, 1)) s.options.timeout = std::chrono::milliseconds(*n);
  if (auto n = f.int_at(*o, "max_concurrency", p, 1, kMaxConcurrency))
    s.options.max_concurrency = static_cast<std::int32_t>(*n);
  if (auto n = f.int_at(*o, "rate_per_minute", p, 0, kMaxRatePerMinute))
    s.options.rate_per_minute = static_cast<std::int32_t>(*n);
  if (auto n = f.int_at(*o, "max_message_bytes", p, 1024))
    s.max_message_bytes = static_cast<std::size_t>(*n);
  if (!plain) return std::nullopt;
  return s;
}

}  // namespace weir::tools
