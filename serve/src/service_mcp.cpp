// weir serve's /mcp endpoint (MCP's Streamable HTTP transport): sessions, and each POSTed
// JSON-RPC message handed to the server's tools (tools/mcp_server).
#include <cstdio>
#include <random>

#include "service_impl.hpp"

namespace weir::serve {

// --- MCP (Streamable HTTP) -------------------------------------------------------------------

namespace {

// 128 random bits: a session id is a capability, so it must not be guessable.
std::string session_id() {
  static thread_local std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

http::Response mcp_error(int status, std::int64_t code, const std::string& message) {
  return json_response(status, tools::jsonrpc::error_response(nullptr, code, message));
}

}  // namespace

awaitable<void> Service::Impl::mcp(http::Exchange& ex, http::Response& out,
                                   const trace::SpanContext& request_span) {
  namespace rpc = tools::jsonrpc;
  const auto& rq = ex.request();
  // (A web page of another site never gets here: the server's browser rules refuse it first.)
  if (rq.method == "GET") {
    out = mcp_error(405, rpc::kInvalidRequest,
                    "GET /mcp: weir sends no server-initiated messages; POST JSON-RPC messages");
    out.headers.emplace_back("Allow", "POST, DELETE");
    co_return;
  }
  const std::string session(rq.header("mcp-session-id").value_or(""));
  if (!session.empty() && !mcp_session_index.contains(session)) {
    out =
        mcp_error(404, rpc::kInvalidRequest,
                  "unknown MCP session '" + session + "' (ended, or expired after " +
                      std::to_string(cfg.max_mcp_sessions) + " newer sessions): initialize again");
    co_return;
  }
  if (rq.method == "DELETE") {
    if (session.empty()) {
      out = mcp_error(400, rpc::kInvalidRequest, "DELETE /mcp needs the Mcp-Session-Id header");
    } else {
      mcp_sessions.erase(mcp_session_index.at(session));
      mcp_session_index.erase(session);
      out = {200, "application/json", {}, ""};
    }
    co_return;
  }
  if (rq.method != "POST") {
    out = mcp_error(405, rpc::kInvalidRequest, rq.method + " is not allowed on /mcp; use POST");
    out.headers.emplace_back("Allow", "POST, DELETE");
    co_return;
  }
  if (auto v = rq.header("mcp-protocol-version")) {
    bool known = false;
    for (auto s : tools::kMcpSupportedVersions) known = known || *v == s;
    if (!known) {
      std::string list;
      for (auto s : tools::kMcpSupportedVersions)
        list += (list.empty() ? "" : ", ") + std::string(s);
      out = mcp_error(
          400, rpc::kInvalidRequest,
          "MCP-Protocol-Version '" + std::string(*v) + "' is not supported (" + list + ")");
      co_return;
    }
  }
  auto msg = rpc::parse(rq.body);
  if (!msg) {
    out = json_response(400, rpc::refusal(rq.body, msg.error()));
    co_return;
  }
  std::string sid = session;
  if (msg->kind == rpc::Kind::request && msg->method == "initialize") {
    sid = session_id();
    if (mcp_sessions.size() >= cfg.max_mcp_sessions && !mcp_sessions.empty()) {
      mcp_session_index.erase(mcp_sessions.back());
      mcp_sessions.pop_back();
    }
    mcp_sessions.push_front(sid);
    mcp_session_index[sid] = mcp_sessions.begin();
  } else if (!sid.empty()) {
    mcp_sessions.splice(mcp_sessions.begin(), mcp_sessions, mcp_session_index.at(sid));
  }
  std::string body = rq.body;
  auto op = cfg.mcp->handle(std::move(body), sid, &request_span);
  auto answer = co_await std::move(op);
  if (!answer) {
    out = {202, "application/json", {}, ""};  // a notification or a response: accepted
  } else {
    out = json_response(200, std::move(*answer));
    if (sid != session) out.headers.emplace_back("Mcp-Session-Id", sid);
  }
}

}  // namespace weir::serve
