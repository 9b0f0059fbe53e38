// weir serve and web browsers (issue 35, items 5 and 6): while no API key is set, no route may be
// driven by a page of another site. A request whose Host names another machine (DNS rebinding)
// or whose Origin is another site is 403; a JSON route takes only application/json (a form or a
// text/plain fetch() needs no preflight); a CORS preflight is refused unless --allowed-origins
// names the page's origin. Real HTTP on loopback.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "serve_fixture.hpp"

namespace weir::serve {
namespace {

const std::string kChat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})";

ServeConfig with_runs(const std::string& model) {
  auto c = tiny_config(model);
  c.workflows = fs::path(WEIR_SOURCE_DIR) / "samples/workflows";
  return c;
}

std::string origin_refusal(const std::string& origin) {
  return "Origin '" + origin +
         "' is not allowed: a web page of another site must not drive this server; allow a "
         "page's origin with --allowed-origins, or require a key with --api-key-env";
}

// Issue 35.6: POST /v1/runs with text/plain from evil.com answered 202 and ran a workflow.
TEST(ServeBrowser, AnotherSitesPageCannotStartARun) {
  auto s = start(with_runs("b1"));
  const std::string run = R"({"workflow": "map_reduce", "input": {}})";
  auto evil = call(s.port, "POST", "/v1/runs", run,
                   "Origin: http://evil.com\r\nContent-Type: text/plain\r\n");
  EXPECT_EQ(evil.status, 403) << evil.body;
  EXPECT_EQ(error_message(evil), origin_refusal("http://evil.com"));
  // Without an Origin (a form whose page hid it, a fetch() in no-cors mode): still not JSON.
  auto plain = call(s.port, "POST", "/v1/runs", run, "Content-Type: text/plain\r\n");
  EXPECT_EQ(plain.status, 415) << plain.body;
  EXPECT_EQ(error_message(plain),
            "Content-Type 'text/plain' is not accepted: send the body as JSON with "
            "'Content-Type: application/json'");
  EXPECT_EQ(body_json(plain).at("error").at("code"), "unsupported_media_type");
  // Nothing ran.
  auto listed = call(s.port, "GET", "/v1/runs");
  ASSERT_EQ(listed.status, 200) << listed.body;
  EXPECT_TRUE(body_json(listed).at("data").as_array().empty()) << listed.body;
  // The same run as JSON from this machine is accepted.
  auto ok = call(s.port, "POST", "/v1/runs", run, "Origin: http://localhost:5173\r\n");
  EXPECT_EQ(ok.status, 202) << ok.body;
}

// Breaking pass (break-doors 6): with two Host or Origin headers the first one won, so the check
// and whatever reads the second could disagree. RFC 9112 wants a 400 for two Hosts, and for none
// in HTTP/1.1.
TEST(ServeBrowser, HeadersThatDecideWhoIsCallingComeOnce) {
  auto s = start(tiny_config("b7"));
  auto two_hosts = call(s.port, "POST", "/v1/chat/completions", kChat,
                        "Host: 127.0.0.1\r\nHost: evil.example\r\n");
  EXPECT_EQ(two_hosts.status, 400) << two_hosts.body;
  EXPECT_EQ(error_message(two_hosts), "malformed HTTP request: 2 'host' headers; send it once");
  auto two_origins = call(s.port, "POST", "/v1/chat/completions", kChat,
                          "Origin: http://localhost:5173\r\nOrigin: http://evil.com\r\n");
  EXPECT_EQ(two_origins.status, 400) << two_origins.body;
  EXPECT_EQ(error_message(two_origins), "malformed HTTP request: 2 'origin' headers; send it once");
  auto two_types = call(s.port, "POST", "/v1/chat/completions", kChat,
                        "Content-Type: application/json\r\nContent-Type: text/plain\r\n");
  EXPECT_EQ(two_types.status, 400) << two_types.body;
  EXPECT_EQ(error_message(two_types),
            "malformed HTTP request: 2 'content-type' headers; send it once");
  Conn no_host(s.port);
  ASSERT_TRUE(no_host.send_all("GET /health HTTP/1.1\r\n\r\n"));
  Reply r;
  ASSERT_TRUE(no_host.read_head(r));
  EXPECT_EQ(r.status, 400);
  // A chunked body's trailer is not the header section: a Host there is no Host (break39 A1).
  Conn trailer(s.port);
  ASSERT_TRUE(
      trailer.send_all("POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n" +
                       [] {
                         char len[16];
                         std::snprintf(len, sizeof len, "%zx", kChat.size());
                         return std::string(len);
                       }() +
                       "\r\n" + kChat + "\r\n0\r\nHost: 127.0.0.1\r\n\r\n"));
  Reply rt = trailer.read_reply();
  EXPECT_EQ(rt.status, 400) << rt.body;
  EXPECT_EQ(error_message(rt), "malformed HTTP request: an HTTP/1.1 request needs a 'Host' header");
  // A refusal that quotes the request's bytes is still JSON (break39 A2: a raw 0xFF in it).
  auto bad_host = call(s.port, "GET", "/v1/models", {}, "Host: l\xffhost\r\n");
  EXPECT_EQ(bad_host.status, 403) << bad_host.body;
  EXPECT_EQ(error_message(bad_host), "the Host header 'l\\xffhost' is not a host name");
  // HTTP/1.0 has no Host; one Host of each is served.
  Conn old(s.port);
  ASSERT_TRUE(old.send_all("GET /health HTTP/1.0\r\n\r\n"));
  Reply r10;
  ASSERT_TRUE(old.read_head(r10));
  EXPECT_EQ(r10.status, 200);
  EXPECT_EQ(call(s.port, "POST", "/v1/chat/completions", kChat).status, 200);
}

// RFC 9112 3.2.2: a request target in absolute form (as sent to a proxy) is served, and its
// authority is the request's Host (it was a 404; break39 A5). So a Host header that names this
// machine does not let a target naming another site through.
TEST(ServeBrowser, AnAbsoluteFormTargetIsServedWithItsAuthorityAsHost) {
  auto s = start(tiny_config("b8"));
  const std::string here = "127.0.0.1:" + std::to_string(s.port);
  Conn c(s.port);
  ASSERT_TRUE(
      c.send_all("GET http://" + here + "/v1/models HTTP/1.1\r\nHost: " + here + "\r\n\r\n"));
  Reply models = c.read_reply();
  EXPECT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(body_json(models).at("object"), "list");
  Conn q(s.port);
  ASSERT_TRUE(q.send_all("GET HTTP://localhost?x=1 HTTP/1.1\r\nHost: " + here + "\r\n\r\n"));
  Reply root = q.read_reply();
  EXPECT_EQ(root.status, 404) << root.body;  // "/?x=1": served as the root, which has no route
  EXPECT_EQ(error_message(root).substr(0, 18), "no route GET / (ro");
  Conn evil(s.port);
  ASSERT_TRUE(
      evil.send_all("GET http://evil.example/v1/models HTTP/1.1\r\nHost: " + here + "\r\n\r\n"));
  Reply e = evil.read_reply();
  EXPECT_EQ(e.status, 403) << e.body;
  EXPECT_EQ(error_message(e).substr(0, 42), "Host 'evil.example' is not this machine: t");
}

TEST(ServeBrowser, EveryRouteRefusesAnotherSite) {
  auto s = start(with_runs("b2"));
  struct Route {
    const char* method;
    const char* path;
    std::string body;
  };
  const std::vector<Route> routes = {{"GET", "/v1/models", ""},
                                     {"GET", "/metrics", ""},
                                     {"POST", "/v1/chat/completions", kChat},
                                     {"POST", "/v1/completions", R"({"prompt": "x"})"},
                                     {"POST", "/tokenize", R"({"prompt": "x"})"},
                                     {"POST", "/detokenize", R"({"tokens": [1]})"},
                                     {"GET", "/v1/workflows", ""},
                                     {"GET", "/v1/runs", ""},
                                     {"POST", "/v1/threads/t/resume", R"({"value": 1})"}};
  for (const auto& r : routes) {
    auto evil = call(s.port, r.method, r.path, r.body, "Origin: https://evil.example\r\n");
    EXPECT_EQ(evil.status, 403) << r.path << " " << evil.body;
    EXPECT_EQ(error_message(evil), origin_refusal("https://evil.example")) << r.path;
    // DNS rebinding: the page's own name in Host (its domain now resolves to 127.0.0.1), and
    // no Origin (a same-origin GET carries none).
    auto rebound = call(s.port, r.method, r.path, r.body, "Host: evil.example:8080\r\n");
    EXPECT_EQ(rebound.status, 403) << r.path << " " << rebound.body;
    EXPECT_EQ(error_message(rebound),
              "Host 'evil.example:8080' is not this machine: the server listens on a loopback "
              "address and answers requests for localhost, 127.0.0.1 or [::1] only (a web page "
              "whose domain re-resolves to this machine sends its own name); add a reverse "
              "proxy's name with --allowed-hosts")
        << r.path;
  }
  // Names of this machine pass, with or without a port; look-alikes do not.
  for (const char* host :
       {"localhost:8080", "127.0.0.1", "127.3.4.5:80", "[::1]:8080", "LOCALHOST"}) {
    auto ok = call(s.port, "GET", "/v1/models", {}, "Host: " + std::string(host) + "\r\n");
    EXPECT_EQ(ok.status, 200) << host << " " << ok.body;
  }
  for (const char* host :
       {"127.0.0.1.evil.example", "localhost.evil.example", "127.0.0.1.nip.io:80", "[::2]:80"}) {
    auto no = call(s.port, "GET", "/v1/models", {}, "Host: " + std::string(host) + "\r\n");
    EXPECT_EQ(no.status, 403) << host << " " << no.body;
  }
  // JSON routes take JSON only: a form post and a text/plain body need no preflight.
  for (const char* type : {"application/x-www-form-urlencoded", "text/plain;charset=UTF-8",
                           "multipart/form-data; boundary=x"}) {
    auto r = call(s.port, "POST", "/v1/chat/completions", kChat,
                  "Content-Type: " + std::string(type) + "\r\n");
    EXPECT_EQ(r.status, 415) << type << " " << r.body;
  }
  auto charset = call(s.port, "POST", "/v1/chat/completions", kChat,
                      "Content-Type: Application/JSON; charset=utf-8\r\n");
  EXPECT_EQ(charset.status, 200) << charset.body;
  // The refusals are counted.
  EXPECT_EQ(metric(s.port, "weir_serve_http_responses_total{status=\"403\"}"), 2.0 * 9 + 4);
  EXPECT_EQ(metric(s.port, "weir_serve_http_responses_total{status=\"415\"}"), 3);
}

// Issue 35.5: /mcp compared the Origin's host by prefix ("127." passed), so a page of
// http://127.0.0.1.evil.example could call tools.
TEST(ServeBrowser, CorsPreflightIsRefusedUnlessTheOriginIsAllowed) {
  auto c = tiny_config("b3");
  c.allowed_origins = {"http://localhost:3000", "HTTPS://App.Example:443/"};
  auto s = start(c);
  const std::string preflight =
      "Access-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: content-type, authorization\r\n";
  auto evil = call(s.port, "OPTIONS", "/v1/chat/completions", {},
                   "Origin: http://evil.com\r\n" + preflight);
  EXPECT_EQ(evil.status, 403);
  EXPECT_EQ(evil.header("access-control-allow-origin"), "");
  EXPECT_EQ(error_message(evil),
            "cross-origin requests from 'http://evil.com' are not allowed: the server answers "
            "pages of the origins in --allowed-origins only (none of them is this one)");
  // A loopback page is still another origin: no CORS for it without --allowed-origins.
  auto local = call(s.port, "OPTIONS", "/v1/chat/completions", {},
                    "Origin: http://localhost:5173\r\n" + preflight);
  EXPECT_EQ(local.status, 403);

  auto app = call(s.port, "OPTIONS", "/v1/chat/completions", {},
                  "Origin: https://app.example\r\n" + preflight);
  EXPECT_EQ(app.status, 204) << app.body;
  EXPECT_EQ(app.header("access-control-allow-origin"), "https://app.example");
  EXPECT_EQ(app.header("access-control-allow-methods"), "GET, POST, PATCH, DELETE, OPTIONS");
  EXPECT_EQ(app.header("access-control-allow-headers"),
            "Authorization, Content-Type, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, "
            "X-Api-Key");
  EXPECT_EQ(app.header("access-control-max-age"), "600");
  EXPECT_NE(app.header("vary").find("Origin"), std::string::npos);
  // Its requests are answered with the CORS headers, streamed or not.
  auto chat =
      call(s.port, "POST", "/v1/chat/completions", kChat, "Origin: https://app.example\r\n");
  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.header("access-control-allow-origin"), "https://app.example");
  EXPECT_EQ(chat.header("access-control-expose-headers"),
            "Mcp-Session-Id, Location, Retry-After, Content-Location, X-Pagination-Total, "
            "X-Pagination-Next");
  auto stream =
      call(s.port, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "stream": true})",
           "Origin: http://localhost:3000\r\n");
  EXPECT_EQ(stream.status, 200);
  EXPECT_EQ(stream.header("access-control-allow-origin"), "http://localhost:3000");
  // An allowed origin of another machine passes the Origin rule; an error keeps the header.
  auto missing =
      call(s.port, "POST", "/v1/chat/completions", "{}", "Origin: https://app.example\r\n");
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(missing.header("access-control-allow-origin"), "https://app.example");
}

// With --api-key-env the key decides: a page cannot send it without a preflight, which is
// refused. Clients that send an Origin of their own still work with the key.
TEST(ServeBrowser, WithAKeyTheKeyDecides) {
  auto c = tiny_config("b4");
  c.api_key = "k3y";
  auto s = start(c);
  auto no_key = call(s.port, "GET", "/v1/models", {}, "Origin: http://evil.com\r\n");
  EXPECT_EQ(no_key.status, 401);
  auto key = call(s.port, "GET", "/v1/models", {},
                  "Origin: http://evil.com\r\nHost: api.example\r\nAuthorization: Bearer k3y\r\n");
  EXPECT_EQ(key.status, 200) << key.body;
  EXPECT_EQ(key.header("access-control-allow-origin"), "");
  auto preflight = call(s.port, "OPTIONS", "/v1/models", {},
                        "Origin: http://evil.com\r\nAccess-Control-Request-Method: GET\r\n");
  EXPECT_EQ(preflight.status, 403);
}

TEST(ServeBrowser, BadAllowedOriginsRefuseTheStart) {
  auto c = tiny_config("b5");
  c.allowed_origins = {"localhost:3000"};
  auto s = Service::start(c);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "--allowed-origins: 'localhost:3000' is not an origin: write it as a browser sends "
            "it, scheme://host[:port] (e.g. http://localhost:3000), or * for any");
  auto d = tiny_config("b5");
  d.allowed_hosts = {"http://proxy.example"};
  s = Service::start(d);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "--allowed-hosts: 'http://proxy.example' is not a host name (a name or an IP "
            "address, without scheme or port)");
  auto e = tiny_config("b5");
  e.allowed_hosts = {"Proxy.Example"};
  auto ok = start(e);
  EXPECT_EQ(call(ok.port, "GET", "/v1/models", {}, "Host: proxy.example:443\r\n").status, 200);
}

}  // namespace
}  // namespace weir::serve
