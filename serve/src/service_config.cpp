// weir serve's configuration: --model's NAME=PATH, the summary `weir serve` prints, and the
// checks before anything starts (service.cpp: the server itself).
#include "service_impl.hpp"

namespace weir::serve {
// --- configuration --------------------------------------------------------------------------

ModelSpec parse_model_spec(const std::string& arg) {
  auto eq = arg.find('=');
  // NAME=PATH, unless the '=' is part of a path (a '/' before it).
  if (eq != std::string::npos && eq > 0 && arg.substr(0, eq).find('/') == std::string::npos)
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  return {std::filesystem::path(arg).stem().string(), arg};
}

bool runs_api(const ServeConfig& c) {
  return c.workflows || !c.graphs.empty();
}

std::string describe(const ServeConfig& c) {
  std::string s = "weir serve configuration:\n";
  auto line = [&](const char* k, const std::string& v) {
    s += "  " + std::string(k) + " = " + v + "\n";
  };
  for (const auto& m : c.models) line("--model", m.name + "=" + m.path.string());
  line("--host", c.host);
  line("--port", std::to_string(c.port));
  line("--api-key-env", c.api_key ? "set (Bearer key required)" : "unset (no auth)");
  line("--insecure", c.insecure ? "yes" : "no");
  auto joined = [](const std::vector<std::string>& v, const char* none) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s.empty() ? std::string(none) : s;
  };
  line("--allowed-origins", joined(c.allowed_origins, "none (no CORS)"));
  line("--allowed-hosts", joined(c.allowed_hosts, "none"));
  line("--webhook-hosts", joined(c.webhook_hosts, "none"));
  line("--max-num-seqs", std::to_string(c.max_num_seqs));
  line("--max-model-len", c.max_model_len ? std::to_string(c.max_model_len) : "model's (<= 4096)");
  line("--kv-cache-mb", std::to_string(c.kv_cache_bytes >> 20));
  line("--kv-cache-type", c.kv_cache_type);
  line("--chat-template", c.chat_template.value_or("detected"));
  line("--ignore-eos", c.ignore_eos ? "yes" : "no");
  line("--max-queued-requests", std::to_string(c.max_queued_requests));
  line("--max-queued-tokens", std::to_string(c.max_queued_tokens));
  line("--max-connections", std::to_string(c.max_connections));
  line("--max-body-bytes", std::to_string(c.max_body_bytes));
  line("--request-memory-mb", std::to_string(c.request_memory_bytes >> 20));
  line("--default-max-tokens", std::to_string(c.default_max_tokens));
  line("--max-n", std::to_string(c.max_n));
  line("--request-timeout", ms_text(c.request_timeout));
  line("--grace", ms_text(c.grace));
  line("--write-timeout", ms_text(c.write_timeout));
  line("--idle-timeout", ms_text(c.idle_timeout));
  line("/mcp", c.mcp ? std::to_string(c.mcp->tool_count()) + " tools (--mcp-tools, --mcp-workflows)"
                     : "off");
  std::string graphs;
  for (const auto& g : c.graphs) graphs += (graphs.empty() ? "" : ", ") + g.name;
  line("/v1/runs", !runs_api(c)
                       ? std::string("off")
                       : (c.workflows ? "workflows in " + c.workflows->string() +
                                            (c.models.empty()
                                                 ? std::string(" (crew files: none, no --model)")
                                                 : " (crew files on " + c.models.front().name + ")")
                                      : std::string("no workflow folder")) +
                             (graphs.empty() ? std::string() : ", C++ graphs " + graphs) + ", " +
                             (c.runs_db.empty() ? std::string("in-process queue")
                                                : "queue in " + graph::redact_store(c.runs_db)) +
                             ", --max-runs " + std::to_string(c.max_runs) + ", --max-queued-runs " +
                             std::to_string(c.max_queued_runs));
  line("/console", c.console ? "on (the web console, docs/console.md)" : "off (--console)");
  return s;
}

Status validate(const ServeConfig& c) {
  auto bad = [](std::string m) { return Status(Error(Errc::invalid_argument, std::move(m))); };
  if (c.models.empty() && !c.mcp && !runs_api(c))
    return bad("no model given: --model PATH (or NAME=PATH), once per model");
  if (!c.runs_db.empty() && !runs_api(c))
    return bad("--db needs --workflows DIR: the database holds the runs of those workflows");
  if (runs_api(c) && c.max_runs < 1) return bad("--max-runs must be at least 1");
  std::set<std::string> names;
  for (const auto& m : c.models) {
    if (m.name.empty()) return bad("a model has an empty name: use --model NAME=PATH");
    if (!names.insert(m.name).second)
      return bad("two models are named '" + m.name + "': name them with --model NAME=PATH");
  }
  if (auto o = http::BrowserPolicy::normalize_origins(c.allowed_origins); !o)
    return bad(o.error().message);
  if (auto h = http::BrowserPolicy::normalize_hosts(c.allowed_hosts); !h)
    return bad(h.error().message);
  if (auto w = check_webhook_hosts(c.webhook_hosts); !w) return bad(w.error().message);
  if (!http::is_loopback_host(c.host) && !c.api_key && !c.insecure)
    return bad("refusing to listen on " + c.host +
               " without an API key: anyone who can reach it could use the models. Set "
               "--api-key-env VAR (Bearer key), or pass --insecure to do it anyway");
  if (c.api_key && c.api_key->empty()) return bad("the API key is empty");
  if (c.max_num_seqs < 1) return bad("--max-num-seqs must be at least 1");
  if (c.max_connections < 1) return bad("--max-connections must be at least 1");
  if (c.max_body_bytes < 64) return bad("--max-body-bytes must be at least 64");
  if (c.request_memory_bytes < (std::size_t{1} << 20))
    return bad("--request-memory-mb must be at least 1");
  if (c.max_queued_tokens < 0) return bad("--max-queued-tokens must not be negative");
  if (c.default_max_tokens < 1) return bad("--default-max-tokens must be at least 1");
  if (c.max_n < 1) return bad("--max-n must be at least 1");
  if (c.request_timeout.count() <= 0) return bad("--request-timeout must be positive");
  return {};
}

}  // namespace weir::serve
