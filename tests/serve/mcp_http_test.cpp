// MCP over Streamable HTTP at `weir serve`'s /mcp: real HTTP over loopback to an in-process
// Service whose McpServer serves a registry (calculator and a tool that waits until released).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include "../trace/captured_spans.hpp"
#include "../trace/otlp_receiver.hpp"
#include "http_client.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/serve/service.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/mcp_server.hpp"
#include "weir/tools/registry.hpp"

namespace weir::serve {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;
using testing_http::call;
using testing_http::Conn;
using testing_http::Reply;

std::string rpc(int id, const std::string& method, const std::string& params = "{}") {
  return R"({"jsonrpc": "2.0", "id": )" + std::to_string(id) + R"(, "method": ")" + method +
         R"(", "params": )" + params + "}";
}

struct McpFixture : ::testing::Test {
  std::atomic<bool> release{false};
  std::shared_ptr<trace::Tracer> tracer;  // set before start() to trace the server
  tools::ToolRegistry reg;
  std::shared_ptr<tools::McpServer> mcp;
  std::unique_ptr<Service> svc;
  std::uint16_t port = 0;

  void start(std::size_t max_calls = 64, std::function<void(ServeConfig&)> configure = {}) {
    ASSERT_TRUE(reg.add(tools::make_calculator()));
    ASSERT_TRUE(reg.add(tools::make_async_tool(
        "wait", "waits until the test releases it", json::object{{"type", "object"}},
        [this](json::object, const tools::ToolContext&) -> asio::awaitable<Result<std::string>> {
          asio::steady_timer t(co_await asio::this_coro::executor);
          while (!release) {
            t.expires_after(std::chrono::milliseconds(5));
            co_await t.async_wait(asio::use_awaitable);
          }
          co_return std::string("released");
        })));
    tools::McpServerOptions o;
    o.max_calls_in_flight = max_calls;
    o.tracer = tracer.get();
    mcp = std::make_shared<tools::McpServer>(reg, o);
    ServeConfig c;
    c.port = 0;
    c.mcp = mcp;
    c.tracer = tracer;
    if (configure) configure(c);
    auto s = Service::start(std::move(c));
    ASSERT_TRUE(s) << s.error().message;
    svc = std::move(*s);
    ASSERT_TRUE(svc->wait_ready());
    port = svc->port();
  }
  void TearDown() override {
    release = true;
    if (svc) svc->shutdown(std::chrono::milliseconds(1000));
  }
  std::string initialize() {
    Reply r = call(port, "POST", "/mcp",
                   rpc(1, "initialize",
                       R"({"protocolVersion": "2025-03-26", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}})"));
    EXPECT_EQ(r.status, 200) << r.body;
    return r.header("mcp-session-id");
  }
  Reply post(const std::string& session, const std::string& body, const std::string& extra = {}) {
    return call(port, "POST", "/mcp", body, "Mcp-Session-Id: " + session + "\r\n" + extra);
  }
};

json::value result_of(const Reply& r) {
  auto v = json::parse(r.body).as_object();
  EXPECT_FALSE(v.contains("error")) << r.body;
  return v.contains("result") ? v.at("result") : json::value();
}

// Traced, a tools/call at /mcp is a server span under the HTTP request's span (which continues
// the caller's traceparent), with the tool's execute_tool span under it (issue 31).
TEST_F(McpFixture, AToolCallsSpanSitsUnderTheRequestsSpan) {
  auto text = std::make_shared<std::string>();
  tracer = testing::captured_tracer(text);
  start();
  const std::string sid = initialize();
  Reply r = post(
      sid, rpc(2, "tools/call", R"({"name": "calculator", "arguments": {"expression": "6*7"}})"),
      "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("42"), std::string::npos) << r.body;
  ASSERT_TRUE(tracer->flush(std::chrono::seconds(10)));
  auto spans = trace::parse_otlp_json_lines(*text, "captured");
  ASSERT_TRUE(spans) << spans.error().message;
  const trace::SpanData* request = nullptr;
  for (const auto& s : *spans)
    if (s.span.name == "POST /mcp" && s.span.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736")
      request = &s.span;
  ASSERT_TRUE(request) << *text;
  EXPECT_EQ(request->parent_span_id.hex(), "00f067aa0ba902b7");
  const auto* call = testing::find_span(*spans, "tools/call calculator");
  ASSERT_TRUE(call) << *text;
  EXPECT_EQ(call->span.kind, trace::SpanKind::server);
  EXPECT_EQ(call->span.parent_span_id.hex(), request->span_id.hex());
  EXPECT_EQ(testing::str_attr(call->span, "mcp.session.id"), sid);
  EXPECT_EQ(testing::str_attr(call->span, "jsonrpc.request.id"), "2");
  const auto* tool = testing::find_span(*spans, "execute_tool calculator");
  ASSERT_TRUE(tool);
  EXPECT_EQ(tool->span.parent_span_id.hex(), call->span.span_id.hex());
}

TEST_F(McpFixture, InitializeListCallAndEndASession) {
  start();
  const std::string sid = initialize();
  ASSERT_EQ(sid.size(), 32u) << "a 128-bit hex session id";
  EXPECT_NE(sid, initialize()) << "each initialize opens its own session";

  // The client's version is kept when weir speaks it.
  Reply init =
      call(port, "POST", "/mcp", rpc(1, "initialize", R"({"protocolVersion": "2025-03-26"})"));
  EXPECT_EQ(result_of(init).at("protocolVersion"), "2025-03-26");
  EXPECT_EQ(result_of(init).at("serverInfo").at("name"), "weir");

  Reply note = post(sid, R"({"jsonrpc": "2.0", "method": "notifications/initialized"})");
  EXPECT_EQ(note.status, 202);
  EXPECT_EQ(note.body, "");

  Reply list = post(sid, rpc(2, "tools/list"));
  ASSERT_EQ(list.status, 200) << list.body;
  std::vector<std::string> names;
  const json::value listed = result_of(list);
  for (const auto& t : listed.at("tools").as_array()) names.emplace_back(t.at("name").as_string());
  EXPECT_EQ(names, (std::vector<std::string>{"calculator", "wait"}));

  Reply calc = post(sid, rpc(3, "tools/call", R"({"name": "calculator",
                                                   "arguments": {"expression": "2^10"}})"));
  ASSERT_EQ(calc.status, 200) << calc.body;
  EXPECT_EQ(result_of(calc).at("content").at(0).at("text"), "1024");
  EXPECT_EQ(result_of(calc).at("isError"), false);

  // Bad arguments are a tool error result (isError), checked against the schema.
  Reply bad = post(sid, rpc(4, "tools/call", R"({"name": "calculator",
                                                  "arguments": {"expression": 5}})"));
  EXPECT_EQ(result_of(bad).at("isError"), true);
  EXPECT_EQ(result_of(bad).at("content").at(0).at("text"),
            "invalid_argument: calculator: /expression: expected string, got number");

  Reply unknown = post(sid, rpc(5, "tools/call", R"({"name": "nope"})"));
  EXPECT_EQ(json::parse(unknown.body).at("error").at("message"), "Unknown tool: nope");
  Reply method = post(sid, rpc(6, "resources/list"));
  EXPECT_EQ(json::parse(method.body).at("error").at("code"), -32601);

  // Two session ids (or protocol versions) in one request: 400, not the first one silently
  // (break39: a proxy and weir could each pick another).
  Reply two = post(sid, rpc(8, "ping"), "Mcp-Session-Id: other\r\n");
  EXPECT_EQ(two.status, 400);
  EXPECT_EQ(json::parse(two.body).at("error").at("message"),
            "malformed HTTP request: 2 'mcp-session-id' headers; send it once");
  Reply versions = post(sid, rpc(9, "ping"),
                        "MCP-Protocol-Version: 2025-06-18\r\nMCP-Protocol-Version: 2025-03-26\r\n");
  EXPECT_EQ(versions.status, 400);

  // DELETE ends the session; its id is then unknown (404, so the client initializes again).
  Reply del = call(port, "DELETE", "/mcp", "", "Mcp-Session-Id: " + sid + "\r\n");
  EXPECT_EQ(del.status, 200);
  Reply gone = post(sid, rpc(7, "ping"));
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(json::parse(gone.body).at("error").at("message").as_string(),
            "unknown MCP session '" + sid +
                "' (ended, or expired after 1024 newer sessions): initialize again");
}

TEST_F(McpFixture, RefusesWhatTheTransportForbids) {
  start();
  Reply get = call(port, "GET", "/mcp");
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(get.header("allow"), "POST, DELETE");

  Reply junk = call(port, "POST", "/mcp", "{not json");
  EXPECT_EQ(junk.status, 400);
  EXPECT_EQ(json::parse(junk.body).at("error").at("code"), -32700);
  EXPECT_EQ(json::parse(junk.body).at("id"), nullptr);

  // JSON that is no valid request: -32600 with the request's own id, so that the client can
  // match the answer (it was -32700, a parse error, with a null id).
  Reply invalid =
      call(port, "POST", "/mcp", R"({"jsonrpc":"2.0","id":8,"method":"tools/call","params":"x"})");
  EXPECT_EQ(invalid.status, 400);
  auto iv = json::parse(invalid.body);
  EXPECT_EQ(iv.at("id"), 8);
  EXPECT_EQ(iv.at("error").at("code"), -32600);
  EXPECT_EQ(iv.at("error").at("message"),
            "not a JSON-RPC 2.0 message: \"params\" must be an object or an array");
  Reply old = call(port, "POST", "/mcp", R"({"jsonrpc":"1.0","id":"a","method":"ping"})");
  EXPECT_EQ(json::parse(old.body).at("id"), "a");
  EXPECT_EQ(json::parse(old.body).at("error").at("code"), -32600);

  // A web page elsewhere must not reach a loopback server's tools; this machine's may.
  Reply evil = call(port, "POST", "/mcp", rpc(1, "ping"), "Origin: http://evil.example\r\n");
  EXPECT_EQ(evil.status, 403);
  EXPECT_EQ(json::parse(evil.body).at("error").at("message"),
            "Origin 'http://evil.example' is not allowed: a web page of another site must not "
            "drive this server; allow a page's origin with --allowed-origins, or require a key "
            "with --api-key-env");
  Reply local = call(port, "POST", "/mcp", rpc(1, "ping"), "Origin: http://localhost:5173\r\n");
  EXPECT_EQ(local.status, 200) << local.body;

  Reply version =
      call(port, "POST", "/mcp", rpc(1, "ping"), "MCP-Protocol-Version: 1999-01-01\r\n");
  EXPECT_EQ(version.status, 400);
  EXPECT_EQ(json::parse(version.body).at("error").at("message"),
            "MCP-Protocol-Version '1999-01-01' is not supported (2025-06-18, 2025-03-26, "
            "2024-11-05)");

  // The OpenAI routes still answer beside /mcp (this server has no model).
  Reply nf = call(port, "GET", "/nope");
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(nf.body.find("POST /mcp"), std::string::npos) << nf.body;
}

// Issue 35.5: the Origin's host was compared by prefix ("127." passed), so a page served from
// http://127.0.0.1.evil.example (DNS rebinding) ran tools/call. Origin and Host are parsed and
// compared exactly: an IP literal in 127.0.0.0/8, ::1, or localhost.
TEST_F(McpFixture, OriginAndHostAreComparedExactly) {
  start();
  const std::string call_calc =
      rpc(7, "tools/call", R"({"name": "calculator", "arguments": {"expression": "6*7"}})");
  for (const char* origin :
       {"http://127.0.0.1.evil.example", "http://127.evil.example", "http://localhost.evil.example",
        "http://localhost@evil.example", "http://[::1].evil.example", "null", "file://",
        "http://127.0.0.1.evil.example:8080"}) {
    Reply r = call(port, "POST", "/mcp", call_calc, "Origin: " + std::string(origin) + "\r\n");
    EXPECT_EQ(r.status, 403) << origin << " " << r.body;
    EXPECT_EQ(r.body.find("42"), std::string::npos) << origin;
  }
  for (const char* host : {"127.0.0.1.evil.example:8080", "evil.example", "localhost.evil"}) {
    Reply r = call(port, "POST", "/mcp", call_calc, "Host: " + std::string(host) + "\r\n");
    EXPECT_EQ(r.status, 403) << host << " " << r.body;
  }
  for (const char* origin : {"http://127.0.0.1:5173", "http://127.9.9.9", "http://[::1]:3000",
                             "https://LOCALHOST", "http://localhost"}) {
    Reply r = call(port, "POST", "/mcp", call_calc, "Origin: " + std::string(origin) + "\r\n");
    EXPECT_EQ(r.status, 200) << origin << " " << r.body;
    EXPECT_EQ(result_of(r).at("content").at(0).at("text"), "42") << origin;
  }
}

TEST_F(McpFixture, CallsBeyondTheCapAreRefusedAtOnceAndCancelledCallsGetNoAnswer) {
  start(/*max_calls=*/1);
  const std::string sid = initialize();
  Conn slow(port);
  ASSERT_TRUE(slow.request("POST", "/mcp", rpc(10, "tools/call", R"({"name": "wait"})"),
                           "Mcp-Session-Id: " + sid + "\r\n"));
  // Wait until the slow call holds the one slot.
  for (int i = 0; i < 400 && mcp->calls_in_flight() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(mcp->calls_in_flight(), 1u);
  Reply busy = post(sid, rpc(11, "tools/call", R"({"name": "calculator",
                                                    "arguments": {"expression": "1+1"}})"));
  EXPECT_EQ(busy.status, 200);
  EXPECT_EQ(json::parse(busy.body).at("error").at("message"),
            "weir: 1 calls are in flight; retry later");
  // Ping is not a call: it is answered while the slot is taken.
  EXPECT_EQ(post(sid, rpc(12, "ping")).status, 200);
  // The client cancels call 10: its POST is then answered 202 with no body.
  Reply cancel = post(sid, R"({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 10}})");
  EXPECT_EQ(cancel.status, 202);
  release = true;
  Reply done = slow.read_reply();
  EXPECT_EQ(done.status, 202);
  EXPECT_EQ(done.body, "");
  // The slot is free again.
  Reply ok = post(sid, rpc(13, "tools/call", R"({"name": "calculator",
                                                  "arguments": {"expression": "1+1"}})"));
  EXPECT_EQ(result_of(ok).at("content").at(0).at("text"), "2");
}

// --- weir's own MCP client (McpClient with a url) against /mcp ----------------------------

tools::McpServerConfig client_config(std::uint16_t port) {
  tools::McpServerConfig c;
  c.name = "served";
  c.url = "http://127.0.0.1:" + std::to_string(port) + "/mcp";
  c.options.timeout = std::chrono::seconds(10);
  c.restart_backoff = std::chrono::milliseconds(20);
  c.connect_timeout = std::chrono::seconds(10);
  return c;
}

std::string call_tool(tools::ToolRegistry& r, const std::string& name, std::string_view args) {
  asio::io_context io;
  auto f =
      asio::co_spawn(io, r.async_call(name, json::parse(args).as_object(), {}), asio::use_future);
  io.run();
  auto out = f.get();
  return out ? "ok: " + out->content : out.error().to_string();
}

TEST_F(McpFixture, WeirsClientUsesServedToolsAndTimesOut) {
  start();
  auto cfg = client_config(port);
  cfg.options.timeout = std::chrono::milliseconds(300);
  auto c = tools::McpClient::connect(cfg);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ((*c)->protocol_version(), "2025-06-18");
  tools::ToolRegistry local;
  ASSERT_TRUE(tools::add_mcp_tools(local, *c));
  EXPECT_EQ(local.names(), (std::vector<std::string>{"served/calculator", "served/wait"}));
  EXPECT_EQ(call_tool(local, "served/calculator", R"({"expression": "6*7"})"), "ok: 42");
  // A call past its timeout fails with the timeout (the client sends notifications/cancelled)
  // and the session serves on while the server's tool still runs.
  EXPECT_EQ(call_tool(local, "served/wait", "{}"),
            "tool_timeout: tool 'served/wait' did not answer within 300 ms");
  EXPECT_EQ(mcp->calls_in_flight(), 1u);
  EXPECT_EQ(call_tool(local, "served/calculator", R"({"expression": "1+1"})"), "ok: 2");
  release = true;
  for (int i = 0; i < 200 && mcp->calls_in_flight() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(mcp->calls_in_flight(), 0u);
  EXPECT_EQ((*c)->restarts(), 0);
}

TEST_F(McpFixture, WeirsClientSendsConfiguredHeaders) {
  start(64, [](ServeConfig& c) { c.api_key = "sekret"; });
  auto c = tools::McpClient::connect(client_config(port));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("initialize: JSON-RPC error -32603: HTTP 401 Unauthorized: "),
            std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("missing API key"), std::string::npos) << c.error().message;

  auto cfg = client_config(port);
  cfg.headers = {{"Authorization", "Bearer sekret"}};
  auto ok = tools::McpClient::connect(cfg);
  ASSERT_TRUE(ok) << ok.error().to_string();
  tools::ToolRegistry local;
  ASSERT_TRUE(tools::add_mcp_tools(local, *ok));
  EXPECT_EQ(call_tool(local, "served/calculator", R"({"expression": "2^5"})"), "ok: 32");
}

TEST_F(McpFixture, WeirsClientStartsANewSessionWhenItsSessionEnds) {
  start(64, [](ServeConfig& c) { c.max_mcp_sessions = 1; });
  auto c = tools::McpClient::connect(client_config(port));
  ASSERT_TRUE(c) << c.error().to_string();
  tools::ToolRegistry local;
  ASSERT_TRUE(tools::add_mcp_tools(local, *c));
  EXPECT_EQ(call_tool(local, "served/calculator", R"({"expression": "1+2"})"), "ok: 3");
  // Another client's session evicts ours (max_mcp_sessions = 1): our next call gets 404, which
  // ends the connection; the call fails with the reason and the client initializes again.
  ASSERT_FALSE(initialize().empty());
  const std::string failed = call_tool(local, "served/calculator", R"({"expression": "1+3"})");
  EXPECT_NE(failed.find("the server ended the session (HTTP 404 for session "), std::string::npos)
      << failed;
  std::string again;
  for (int i = 0; i < 100; ++i) {
    again = call_tool(local, "served/calculator", R"({"expression": "1+4"})");
    if (again == "ok: 5") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(again, "ok: 5");
  EXPECT_EQ((*c)->restarts(), 1);
}

// A tool output over the tool's cap is stored whole as an artifact: the call's result carries the
// capped text and a resource_link, and resources/read returns the whole output.
TEST(McpResources, LargeOutputsComeAsResourceLinks) {
  auto store = ArtifactStore::open({});
  ASSERT_TRUE(store) << store.error().message;
  tools::ToolRegistry reg;
  tools::ToolOptions small;
  small.max_output_bytes = 100;
  ASSERT_TRUE(reg.add(tools::make_tool(
      "big", "returns 5000 bytes", json::object{{"type", "object"}},
      [](const json::object&, const tools::ToolContext&) -> Result<std::string> {
        return std::string(5000, 'x');
      },
      small)));
  tools::McpServerOptions o;
  o.artifacts = store->get();
  auto mcp = std::make_shared<tools::McpServer>(reg, o);
  ServeConfig c;
  c.port = 0;
  c.mcp = mcp;
  auto svc = Service::start(std::move(c));
  ASSERT_TRUE(svc) << svc.error().message;
  ASSERT_TRUE((*svc)->wait_ready());
  const auto port = (*svc)->port();
  Reply init =
      call(port, "POST", "/mcp", rpc(1, "initialize", R"({"protocolVersion": "2025-06-18"})"));
  ASSERT_EQ(init.status, 200) << init.body;
  EXPECT_TRUE(result_of(init).at("capabilities").as_object().contains("resources"));
  const std::string sid = init.header("mcp-session-id");
  auto post = [&](const std::string& body) {
    return call(port, "POST", "/mcp", body, "Mcp-Session-Id: " + sid + "\r\n");
  };
  Reply r = post(rpc(2, "tools/call", R"({"name": "big", "arguments": {}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  const json::value result = result_of(r);
  const auto& content = result.at("content").as_array();
  ASSERT_EQ(content.size(), 2u) << r.body;
  EXPECT_LT(content[0].at("text").as_string().size(), 1000u);
  const auto& link = content[1].as_object();
  EXPECT_EQ(link.at("type"), "resource_link");
  EXPECT_EQ(link.at("size"), 5000);
  const std::string uri(link.at("uri").as_string());
  ASSERT_TRUE(uri.starts_with("weir://artifacts/")) << uri;

  Reply read = post(rpc(3, "resources/read", R"({"uri": ")" + uri + R"("})"));
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(result_of(read).at("contents").at(0).at("text").as_string(), std::string(5000, 'x'));
  Reply missing = post(rpc(4, "resources/read", R"({"uri": "weir://artifacts/nope"})"));
  EXPECT_EQ(json::parse(missing.body).at("error").at("message"),
            "Resource not found: weir://artifacts/nope");
  (*svc)->shutdown(std::chrono::milliseconds(1000));
}

TEST(McpConfig, ServeNeedsAModelOrMcp) {
  ServeConfig c;
  auto st = validate(c);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "no model given: --model PATH (or NAME=PATH), once per model");
}

}  // namespace
}  // namespace weir::serve
