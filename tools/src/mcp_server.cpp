#include "weir/tools/mcp_server.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string_view>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/trace.hpp"
#include "weir/tools/jsonrpc.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"
#include "weir/version.hpp"

namespace weir::tools {

namespace asio = boost::asio;
namespace json = boost::json;
namespace rpc = jsonrpc;

// JSON-RPC's range for server errors; MCP leaves its meaning to the server.
constexpr std::int64_t kServerBusy = -32000;
constexpr std::int64_t kResourceNotFound = -32002;  // the MCP specification's code
constexpr std::string_view kArtifactUriPrefix = "weir://artifacts/";
constexpr std::uint64_t kMaxResourceBytes = 16u << 20;  // one resources/read answer

struct McpServer::Impl {
  Impl(ToolRegistry& r, McpServerOptions o)
      : reg(r), opt(std::move(o)), pool(static_cast<std::size_t>(std::max(1, opt.threads))) {}

  ToolRegistry& reg;
  McpServerOptions opt;
  asio::thread_pool pool;
  mutable std::mutex mu;
  std::condition_variable idle;
  std::set<std::string> running, cancelled;  // GUARDED_BY(mu): session + '\n' + id as JSON
  bool draining = false;                     // GUARDED_BY(mu)
  std::once_flag joined;

  static std::string key(const std::string& session, const json::value& id) {
    return session + '\n' + rpc::id_text(id);
  }

  std::string initialize(const rpc::Message& m, const json::object& params) const {
    std::string version(kMcpProtocolVersion);
    if (const auto* v = params.if_contains("protocolVersion"); v && v->is_string())
      for (auto s : kMcpSupportedVersions)
        if (v->get_string() == s) version = s;
    return rpc::response(
        m.id,
        json::object{
            {"protocolVersion", version},
            {"capabilities",
             opt.artifacts ? json::object{{"tools", json::object{}}, {"resources", json::object{}}}
                           : json::object{{"tools", json::object{}}}},
            {"serverInfo",
             json::object{{"name", opt.name},
                          {"version", opt.version.empty() ? WEIR_VERSION_STRING : opt.version}}}});
  }

  std::string list(const rpc::Message& m) const {
    json::array tools;
    for (const auto& n : reg.names()) {
      auto t = reg.find(n);
      if (!t) continue;
      tools.push_back(json::object{
          {"name", n}, {"description", t->description()}, {"inputSchema", t->parameters()}});
    }
    return rpc::response(m.id, json::object{{"tools", std::move(tools)}});
  }

  void cancel(const std::string& session, const json::value& params) {
    if (!params.is_object()) return;
    const auto* id = params.as_object().if_contains("requestId");
    if (!id) return;
    std::lock_guard lock(mu);
    if (running.contains(key(session, *id))) cancelled.insert(key(session, *id));
  }

  struct Outcome {
    Result<ToolOutput> result = Error(Errc::tool_failed, "the call did not run");
    bool cancelled = false;
  };

  // Runs on the pool, and leaves `running` there too: drain() then never depends on the
  // caller's executor still running.
  asio::awaitable<Outcome> run(std::string name, json::object args, std::string k,
                               trace::Context trace) {
    Outcome out;
    try {
      ToolContext ctx;
      ctx.artifacts = opt.artifacts;
      ctx.trace = trace;
      auto op = reg.async_call(name, std::move(args), ctx);
      out.result = co_await std::move(op);
    } catch (const std::exception& e) {
      out.result = Error(Errc::tool_failed, "tool '" + name + "' threw: " + e.what());
    }
    std::lock_guard lock(mu);
    running.erase(k);
    out.cancelled = cancelled.erase(k) > 0;
    if (running.empty()) idle.notify_all();
    co_return out;
  }

  // The span of one tools/call (see McpServerOptions::tracer); not recording without a tracer.
  trace::Span call_span(const std::string& tool, const rpc::Message& m, const json::object& params,
                        const std::string& session, const trace::SpanContext* parent) const {
    if (!opt.tracer) return trace::Span();
    std::optional<trace::SpanContext> from_meta;
    if (!(parent && parent->valid()))
      if (const auto* meta = params.if_contains("_meta"); meta && meta->is_object()) {
        const auto* tp = meta->as_object().if_contains("traceparent");
        const auto* ts = meta->as_object().if_contains("tracestate");
        if (tp && tp->is_string())
          from_meta = trace::parse_traceparent(
              tp->get_string(), ts && ts->is_string() ? std::string_view(ts->get_string()) : "");
      }
    const trace::SpanContext* p = parent && parent->valid() ? parent
                                  : from_meta               ? &*from_meta
                                                            : nullptr;
    trace::Span span = opt.tracer->start_span("tools/call " + tool, p, trace::SpanKind::server);
    span.set("mcp.method.name", "tools/call");
    span.set(trace::attr::kToolName, tool);
    span.set("jsonrpc.request.id", rpc::id_text(m.id));
    if (!session.empty()) span.set("mcp.session.id", session);
    return span;
  }

  asio::awaitable<std::optional<std::string>> call(rpc::Message m, json::object params,
                                                   std::string session,
                                                   const trace::SpanContext* parent) {
    const auto* name = params.if_contains("name");
    if (!name || !name->is_string())
      co_return rpc::error_response(m.id, rpc::kInvalidParams, "tools/call needs a \"name\"");
    const std::string tool(name->get_string());
    if (!reg.find(tool))
      co_return rpc::error_response(m.id, rpc::kInvalidParams, "Unknown tool: " + tool);
    json::object args;
    if (const auto* a = params.if_contains("arguments")) {
      if (!a->is_object())
        co_return rpc::error_response(m.id, rpc::kInvalidParams,
                                      "tools/call: \"arguments\" must be an object");
      args = a->as_object();
    }
    const std::string k = key(session, m.id);
    {
      std::lock_guard lock(mu);
      if (draining) co_return rpc::error_response(m.id, kServerBusy, opt.name + ": shutting down");
      if (running.size() >= opt.max_calls_in_flight)
        co_return rpc::error_response(m.id, kServerBusy,
                                      opt.name + ": " + std::to_string(opt.max_calls_in_flight) +
                                          " calls are in flight; retry later");
      if (!running.insert(k).second)
        co_return rpc::error_response(m.id, rpc::kInvalidRequest,
                                      "request id " + rpc::id_text(m.id) + " is already in use");
    }
    trace::Span span = call_span(tool, m, params, session, parent);
    // Not recording (no tracer, or a caller's unsampled traceparent): nothing under it either.
    const trace::Context ctx =
        span.recording() ? trace::Context{opt.tracer, span.context()} : trace::Context{};
    auto op = asio::co_spawn(pool, run(tool, std::move(args), k, ctx), asio::use_awaitable);
    Outcome o = co_await std::move(op);
    if (o.cancelled) {
      span.set_error("cancelled", "the client cancelled the call");
      co_return std::nullopt;
    }
    const Result<ToolOutput>& r = o.result;
    if (!r) span.set_error(r.error());
    const std::string text = r ? r->content : r.error().to_string();
    json::array content{json::object{{"type", "text"}, {"text", text}}};
    // An output over the tool's cap was stored whole as an artifact: the client gets the capped
    // text and a link it can read with resources/read.
    if (r && r->artifact_id)
      content.push_back(json::object{
          {"type", "resource_link"},
          {"uri", std::string(kArtifactUriPrefix) + *r->artifact_id},
          {"name", tool + " output"},
          {"description", "the whole output (" + std::to_string(r->output_bytes) + " bytes)"},
          {"mimeType", "text/plain"},
          {"size", r->output_bytes}});
    co_return rpc::response(m.id, json::object{{"content", std::move(content)}, {"isError", !r}});
  }

  // resources/read of an artifact link ("weir://artifacts/<id>"), whole up to kMaxResourceBytes.
  std::string read_resource(const rpc::Message& m, const json::object& params) const {
    const auto* u = params.if_contains("uri");
    if (!u || !u->is_string())
      return rpc::error_response(m.id, rpc::kInvalidParams, "resources/read needs a \"uri\"");
    const std::string uri(u->get_string());
    if (!opt.artifacts || !uri.starts_with(kArtifactUriPrefix))
      return rpc::error_response(m.id, kResourceNotFound, "Resource not found: " + uri);
    const std::string id = uri.substr(kArtifactUriPrefix.size());
    auto ref = opt.artifacts->stat(id);
    if (!ref) return rpc::error_response(m.id, kResourceNotFound, "Resource not found: " + uri);
    if (ref->bytes > kMaxResourceBytes)
      return rpc::error_response(m.id, rpc::kInvalidParams,
                                 uri + " holds " + std::to_string(ref->bytes) +
                                     " bytes, more than resources/read returns (" +
                                     std::to_string(kMaxResourceBytes) +
                                     "): read slices with weir's artifacts tool");
    auto data = opt.artifacts->get(id);
    if (!data) return rpc::error_response(m.id, kResourceNotFound, "Resource not found: " + uri);
    return rpc::response(
        m.id, json::object{{"contents", json::array{json::object{{"uri", uri},
                                                                 {"mimeType", "text/plain"},
                                                                 {"text", std::move(*data)}}}}});
  }
};

McpServer::McpServer(ToolRegistry& registry, McpServerOptions options)
    : impl_(std::make_unique<Impl>(registry, std::move(options))) {}

McpServer::~McpServer() {
  drain();
}

asio::awaitable<std::optional<std::string>> McpServer::handle(std::string message,
                                                              std::string session,
                                                              const trace::SpanContext* parent) {
  auto m = rpc::parse(message);
  if (!m) co_return rpc::refusal(message, m.error());
  if (m->kind == rpc::Kind::notification) {
    if (m->method == "notifications/cancelled") impl_->cancel(session, m->params);
    co_return std::nullopt;  // initialized and unknown notifications need nothing
  }
  if (m->kind != rpc::Kind::request) co_return std::nullopt;  // we send no requests
  json::object params = m->params.is_object() ? m->params.as_object() : json::object{};
  if (m->method == "initialize") co_return impl_->initialize(*m, params);
  if (m->method == "ping") co_return rpc::response(m->id, json::object{});
  if (m->method == "tools/list") co_return impl_->list(*m);
  if (m->method == "resources/read" && impl_->opt.artifacts)
    co_return impl_->read_resource(*m, params);
  if (m->method == "resources/list" && impl_->opt.artifacts)  // links come with results only
    co_return rpc::response(m->id, json::object{{"resources", json::array{}}});
  if (m->method == "tools/call") {
    auto op = impl_->call(std::move(*m), std::move(params), std::move(session), parent);
    co_return co_await std::move(op);
  }
  co_return rpc::error_response(m->id, rpc::kMethodNotFound, "Method not found: " + m->method);
}

void McpServer::drain() {
  std::unique_lock lock(impl_->mu);
  impl_->draining = true;
  impl_->idle.wait(lock, [&] { return impl_->running.empty(); });
  lock.unlock();
  // The pool's threads have handed every answer to its caller's executor once they stop.
  std::call_once(impl_->joined, [&] { impl_->pool.join(); });
}

std::size_t McpServer::calls_in_flight() const {
  std::lock_guard lock(impl_->mu);
  return impl_->running.size();
}

std::size_t McpServer::tool_count() const {
  return impl_->reg.names().size();
}

}  // namespace weir::tools
