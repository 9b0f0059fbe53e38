#include "weir/agents/config.hpp"

#include <boost/json.hpp>

#include "weir/http/client.hpp"
#include "weir/runtime/json_fields.hpp"

namespace weir::agents {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMaxSeqs = 4096;

std::string at(std::string_view ptr, std::string_view key) {
  return json_pointer_append(ptr, key);
}

// "provider": "openai".
void parse_openai(JsonFields& f, const json::object& o, const std::string& ptr,
                  OpenAIModelOptions& m) {
  f.check_keys(o, ptr,
               {"provider", "base_url", "model", "api_key_env", "max_concurrency", "max_queued",
                "requests_per_minute", "max_retries", "timeout_ms", "connect_timeout_ms",
                "max_response_bytes", "stream", "context_length", "breaker_failures",
                "breaker_cooldown_ms", "affinity_slack", "attempt_timeout_ms"});
  // One URL, or several serving the same model (balanced, with failover).
  const auto* bu = o.if_contains("base_url");
  if (!bu) {
    f.error(ptr, "missing required key 'base_url'");
  } else if (!bu->is_string() && !bu->is_array()) {
    f.error(at(ptr, "base_url"),
            std::string("expected a URL or an array of URLs, got ") + json_kind_phrase(*bu));
  } else if (bu->is_array() && bu->as_array().empty()) {
    f.error(at(ptr, "base_url"), "expected at least one URL");
  } else {
    const json::array urls = bu->is_array() ? bu->as_array() : json::array{*bu};
    for (std::size_t i = 0; i < urls.size(); ++i) {
      const std::string up =
          bu->is_array() ? json_pointer_append(at(ptr, "base_url"), i) : at(ptr, "base_url");
      const auto* u = urls[i].if_string();
      if (!u || !(u->starts_with("http://") || u->starts_with("https://"))) {
        f.error(up, "expected an http:// or https:// URL such as \"http://127.0.0.1:8080/v1\"");
        continue;
      }
      // What the model's client will refuse (a bad host or port, credentials) is refused here,
      // positioned, by the same parser.
      if (auto parsed = http::parse_url(*u); !parsed) {
        f.error(up, parsed.error().message);
        continue;
      }
      (m.base_url.empty() ? m.base_url : m.more_base_urls.emplace_back()) = std::string(*u);
    }
  }
  if (auto v = f.string_at(o, "model", ptr, true)) {
    if (v->empty()) f.error(at(ptr, "model"), "expected the model's name as its server knows it");
    m.model = *v;
  }
  if (auto v = f.string_at(o, "api_key_env", ptr)) {
    if (v->empty()) f.error(at(ptr, "api_key_env"), "expected the name of an environment variable");
    m.api_key_env = *v;
  }
  auto ms = [](std::int64_t n) { return std::chrono::milliseconds(n); };
  if (auto n = f.int_at(o, "max_concurrency", ptr, 1)) m.max_concurrency = *n;
  if (auto n = f.int_at(o, "max_queued", ptr, 1)) m.max_queued = *n;
  if (auto n = f.int_at(o, "requests_per_minute", ptr, 0))
    m.requests_per_minute = static_cast<double>(*n);
  if (auto n = f.int_at(o, "max_retries", ptr, 0, 100))
    m.max_retries = static_cast<std::int32_t>(*n);
  if (auto n = f.ms_at(o, "timeout_ms", ptr, 1)) m.timeout = ms(*n);
  if (auto n = f.ms_at(o, "connect_timeout_ms", ptr, 1)) m.connect_timeout = ms(*n);
  if (auto n = f.ms_at(o, "attempt_timeout_ms", ptr, 0)) m.attempt_timeout = ms(*n);
  if (auto n = f.int_at(o, "max_response_bytes", ptr, 1)) m.max_response_bytes = *n;
  if (auto v = f.bool_at(o, "stream", ptr)) m.stream = *v;
  if (auto n = f.int_at(o, "context_length", ptr, 0)) m.context_length = *n;
  if (auto n = f.int_at(o, "breaker_failures", ptr, 1, 1000))
    m.breaker_failures = static_cast<std::int32_t>(*n);
  if (auto n = f.ms_at(o, "breaker_cooldown_ms", ptr, 1)) m.breaker_cooldown = ms(*n);
  if (auto n = f.int_at(o, "affinity_slack", ptr, 0)) m.affinity_slack = *n;
}

}  // namespace

void EngineSettings::apply(LocalModelOptions& o) const {
  if (max_model_len && o.max_model_len == 0) o.max_model_len = *max_model_len;
  if (max_num_batched_tokens) o.max_num_batched_tokens = *max_num_batched_tokens;
  if (max_num_seqs) o.max_num_seqs = *max_num_seqs;
  if (block_size) o.block_size = *block_size;
  if (threads) o.threads = *threads;
  if (kv_cache_type) o.kv_cache_type = *kv_cache_type;
}

EngineSettings parse_engine_settings(JsonFields& f, const json::object& o, std::string_view ptr) {
  f.check_keys(o, ptr,
               {"max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "threads",
                "kv_cache_type"});
  EngineSettings e;
  e.max_model_len = f.int_at(o, "max_model_len", ptr, 16);
  e.max_num_batched_tokens = f.int_at(o, "max_num_batched_tokens", ptr, 1);
  if (auto n = f.int_at(o, "max_num_seqs", ptr, 1, kMaxSeqs))
    e.max_num_seqs = static_cast<std::int32_t>(*n);
  if (auto n = f.int_at(o, "block_size", ptr, 1, 4096))
    e.block_size = static_cast<std::int32_t>(*n);
  if (auto n = f.int_at(o, "threads", ptr, 1, 4096)) e.threads = static_cast<std::int32_t>(*n);
  if (auto t = f.string_at(o, "kv_cache_type", ptr)) {  // the KV cache's element type
    if (*t == "f32" || *t == "f16" || *t == "q8_0")
      e.kv_cache_type = *t;
    else
      f.error(at(ptr, "kv_cache_type"),
              "expected \"f32\", \"f16\" or \"q8_0\", got \"" + *t + "\"");
  }
  return e;
}

std::optional<ModelConfig> parse_model(JsonFields& f, std::string_view name, const json::value& v,
                                       std::string_view ptr_in, const fs::path& base_dir) {
  const std::string ptr(ptr_in);
  const auto* o = v.if_object();
  if (!o) {
    f.error(ptr,
            std::string("expected a model object with a \"path\", got ") + json_kind_phrase(v));
    return std::nullopt;
  }
  ModelConfig m;
  m.name = std::string(name);
  const auto provider = f.string_at(*o, "provider", ptr).value_or("local");
  if (provider == "openai") {
    m.remote = true;
    parse_openai(f, *o, ptr, m.openai);
    return m;
  }
  if (provider != "local") {
    f.error(at(ptr, "provider"), "unknown provider '" + provider +
                                     "' (local: a GGUF file; openai: an OpenAI-compatible "
                                     "endpoint)");
    return std::nullopt;
  }
  f.check_keys(*o, ptr, {"provider", "path", "chat_template", "engine"});
  if (auto p = f.string_at(*o, "path", ptr, true)) {
    const fs::path path(*p);
    m.path = path.is_absolute() ? path : (base_dir / path).lexically_normal();
  }
  m.chat_template = f.string_at(*o, "chat_template", ptr);
  if (const auto* e = f.object_at(*o, "engine", ptr))
    m.engine = parse_engine_settings(f, *e, at(ptr, "engine"));
  return m;
}

void parse_history_window(JsonFields& f, const json::value& v, std::string_view ptr,
                          HistoryWindow& w) {
  const auto* o = v.if_object();
  if (!o) {
    f.error(ptr, std::string("expected an object, got ") + json_kind_phrase(v));
    return;
  }
  f.check_keys(*o, ptr, {"max_messages", "max_tokens", "max_summary_bytes"});
  if (auto n = f.int_at(*o, "max_messages", ptr, 1)) w.max_messages = *n;
  if (auto n = f.int_at(*o, "max_tokens", ptr, 16)) w.max_tokens = *n;
  if (auto n = f.int_at(*o, "max_summary_bytes", ptr, 64))
    w.max_summary_bytes = static_cast<std::size_t>(*n);
}

std::optional<AgentSpec> parse_agent(JsonFields& f, const json::value& v, std::string_view ptr_in,
                                     std::span<const std::string_view> extra_keys) {
  const std::string ptr(ptr_in);
  const auto* o = v.if_object();
  if (!o) {
    f.error(ptr, std::string("expected an agent object like {\"role\": \"...\"}, got ") +
                     json_kind_phrase(v));
    return std::nullopt;
  }
  std::vector<std::string_view> keys(extra_keys.begin(), extra_keys.end());
  for (std::string_view k : {"role", "goal", "backstory", "tools", "max_iter", "history",
                             "max_tokens_per_turn", "temperature", "seed"})
    keys.push_back(k);
  f.check_keys(*o, ptr, keys);
  AgentSpec a;
  a.role = f.string_at(*o, "role", ptr, true).value_or("");
  a.goal = f.string_at(*o, "goal", ptr).value_or("");
  a.backstory = f.string_at(*o, "backstory", ptr).value_or("");
  a.tools = f.strings_at(*o, "tools", ptr).value_or(std::vector<std::string>{});
  if (auto n = f.int_at(*o, "max_iter", ptr, 1, INT32_MAX))
    a.max_iter = static_cast<std::int32_t>(*n);
  if (auto n = f.int_at(*o, "max_tokens_per_turn", ptr, 1, INT32_MAX))
    a.max_tokens_per_turn = static_cast<std::int32_t>(*n);
  if (auto n = f.int_at(*o, "seed", ptr, 0)) a.seed = static_cast<std::uint64_t>(*n);
  if (auto t = f.number_at(*o, "temperature", ptr)) a.temperature = static_cast<float>(*t);
  if (const auto* h = o->if_contains("history"))
    parse_history_window(f, *h, at(ptr, "history"), a.history);
  return a;
}

}  // namespace weir::agents
