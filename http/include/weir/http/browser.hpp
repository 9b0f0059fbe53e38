// Requests from web browsers: the Host and Origin rules and CORS of weir's HTTP server
// (docs/serve.md, "Browsers and other sites"). A web page the user visits can make the browser
// send requests to a server on this machine: a form or fetch() with a "simple" content type goes
// out without asking (cross-site request forgery), and a page whose own domain re-resolves to
// 127.0.0.1 reads the answers too (DNS rebinding). A server without its own key therefore
// refuses a request whose Host names another machine (while it listens on loopback) and one
// whose Origin is another site, and answers a CORS preflight only for the origins it was told.
//
// Plain values and parsers of header text (no Asio): the server applies them before a handler.
// Thread safety: the functions are pure; a BrowserPolicy is read-only once the server runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weir/runtime/error.hpp"

namespace weir::http {

// True for an IP literal in 127.0.0.0/8, "::1" (also bracketed, and ::ffff:127.x.y.z), and
// "localhost" (any case). Exact: "127.0.0.1.evil.example" and "localhost.evil" are not.
bool is_loopback_host(std::string_view host);

struct HostPort {
  std::string host;  // lower case, IPv6 brackets removed
  std::optional<std::uint16_t> port;
};
// A Host header ("example.com", "127.0.0.1:8080", "[::1]:80"). nullopt when it is not one
// (empty, a bad port, characters a host name cannot hold).
std::optional<HostPort> parse_host(std::string_view value);

// An Origin header ("http://localhost:3000") as browsers serialise it: scheme "http" or
// "https", a host, the port only when it is not the scheme's default. nullopt for "null",
// another scheme, a path, user info or a bad port.
struct Origin {
  std::string scheme;  // "http" or "https"
  std::string host;    // lower case, IPv6 brackets removed
  std::uint16_t port = 0;
  std::string text;  // serialised again: "http://localhost:3000", "https://[::1]"
};
std::optional<Origin> parse_origin(std::string_view value);

struct BrowserPolicy {
  // Refuse what a page of another site can make a browser send: a Host that names another
  // machine (only while `loopback`) and an Origin that is not allowed. Off when the server
  // asks every request for its own key (a page cannot send it without a preflight).
  bool refuse_cross_site = true;
  // The server listens on a loopback address: Host must be loopback (or in allowed_hosts), and
  // an Origin of this machine (any port) is allowed.
  bool loopback = true;
  // Origins whose pages may call the server (and get CORS answers), serialised as parse_origin
  // does, or "*" for any origin.
  std::vector<std::string> allowed_origins;
  // More Host names to accept (a reverse proxy's), lower case, without port.
  std::vector<std::string> allowed_hosts;

  // The origins and hosts as given on the command line ("http://LocalHost:80" becomes
  // "http://localhost"). Errors: invalid_argument naming the entry that is not one.
  static Result<std::vector<std::string>> normalize_origins(const std::vector<std::string>& in);
  static Result<std::vector<std::string>> normalize_hosts(const std::vector<std::string>& in);
  // True when a page of this origin may read the server's answers (CORS).
  bool allows_origin(std::string_view origin) const;
};

// Why a request is refused (the message of a 403), or nullopt when it may go on. `host` and
// `origin` are the request's headers, when present.
std::optional<std::string> cross_site_refusal(const BrowserPolicy& policy,
                                              std::optional<std::string_view> host,
                                              std::optional<std::string_view> origin);

// The request headers a CORS preflight may name, and the methods, for the answer.
inline constexpr std::string_view kCorsAllowHeaders =
    "Authorization, Content-Type, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, X-Api-Key";
inline constexpr std::string_view kCorsAllowMethods = "GET, POST, PATCH, DELETE, OPTIONS";
// The response headers a page may read.
inline constexpr std::string_view kCorsExposeHeaders =
    "Mcp-Session-Id, Location, Retry-After, Content-Location, X-Pagination-Total, "
    "X-Pagination-Next";

}  // namespace weir::http
