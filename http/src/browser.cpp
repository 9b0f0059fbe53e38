#include "weir/http/browser.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace weir::http {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

std::optional<std::uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  std::uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

// "host", "host:port", "[v6]", "[v6]:port" -> host (no brackets, lower case) and port.
std::optional<HostPort> split_host_port(std::string_view s) {
  HostPort out;
  std::string_view rest;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos || close == 1) return std::nullopt;
    const std::string_view inside = s.substr(1, close - 1);
    std::string text(inside);
    in6_addr a6{};
    if (::inet_pton(AF_INET6, text.c_str(), &a6) != 1) return std::nullopt;
    out.host = lower(inside);
    rest = s.substr(close + 1);
  } else {
    const auto colon = s.find(':');
    const std::string_view name = s.substr(0, colon);
    if (name.empty() || !std::all_of(name.begin(), name.end(), host_char)) return std::nullopt;
    out.host = lower(name);
    rest = colon == std::string_view::npos ? std::string_view() : s.substr(colon);
  }
  if (!rest.empty()) {
    if (rest.front() != ':') return std::nullopt;
    out.port = parse_port(rest.substr(1));
    if (!out.port) return std::nullopt;
  }
  return out;
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

bool is_loopback_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (lower(host) == "localhost") return true;
  if (host.empty() || host.size() > 64) return false;
  const std::string text(host);
  in_addr a4{};
  if (::inet_pton(AF_INET, text.c_str(), &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;  // 127.0.0.0/8
  in6_addr a6{};
  if (::inet_pton(AF_INET6, text.c_str(), &a6) != 1) return false;
  static const unsigned char kLoop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a6.s6_addr, kLoop, 16) == 0) return true;
  return std::memcmp(a6.s6_addr, kMapped, 12) == 0 && a6.s6_addr[12] == 127;
}

std::optional<HostPort> parse_host(std::string_view value) {
  value = trim(value);
  if (value.empty() || value.size() > 255) return std::nullopt;
  return split_host_port(value);
}

std::optional<Origin> parse_origin(std::string_view value) {
  value = trim(value);
  const auto sep = value.find("://");
  if (sep == std::string_view::npos || value.size() > 300) return std::nullopt;
  Origin o;
  o.scheme = lower(value.substr(0, sep));
  if (o.scheme != "http" && o.scheme != "https") return std::nullopt;
  auto hp = split_host_port(value.substr(sep + 3));
  if (!hp) return std::nullopt;
  const std::uint16_t default_port = o.scheme == "http" ? 80 : 443;
  o.host = std::move(hp->host);
  o.port = hp->port.value_or(default_port);
  const bool v6 = o.host.find(':') != std::string::npos;
  o.text = o.scheme + "://" + (v6 ? "[" + o.host + "]" : o.host);
  if (o.port != default_port) o.text += ":" + std::to_string(o.port);
  return o;
}

Result<std::vector<std::string>> BrowserPolicy::normalize_origins(
    const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& entry : in) {
    std::string_view e = trim(entry);
    if (e == "*") {
      out.emplace_back("*");
      continue;
    }
    if (!e.empty() && e.back() == '/') e.remove_suffix(1);
    auto o = parse_origin(e);
    if (!o)
      return Error(Errc::invalid_argument,
                   "--allowed-origins: '" + entry +
                       "' is not an origin: write it as a browser sends it, "
                       "scheme://host[:port] (e.g. http://localhost:3000), or * for any");
    out.push_back(o->text);
  }
  return out;
}

Result<std::vector<std::string>> BrowserPolicy::normalize_hosts(
    const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& entry : in) {
    auto hp = parse_host(entry);
    if (!hp || hp->port)
      return Error(Errc::invalid_argument, "--allowed-hosts: '" + entry +
                                               "' is not a host name (a name or an IP address, "
                                               "without scheme or port)");
    out.push_back(hp->host);
  }
  return out;
}

bool BrowserPolicy::allows_origin(std::string_view origin) const {
  if (contains(allowed_origins, "*")) return true;
  auto o = parse_origin(origin);
  return o && contains(allowed_origins, o->text);
}

std::optional<std::string> cross_site_refusal(const BrowserPolicy& policy,
                                              std::optional<std::string_view> host,
                                              std::optional<std::string_view> origin) {
  if (!policy.refuse_cross_site) return std::nullopt;
  if (policy.loopback && host) {
    auto hp = parse_host(*host);
    if (!hp) return "the Host header '" + std::string(*host) + "' is not a host name";
    if (!is_loopback_host(hp->host) && !contains(policy.allowed_hosts, hp->host))
      return "Host '" + std::string(trim(*host)) +
             "' is not this machine: the server listens on a loopback address and answers "
             "requests for localhost, 127.0.0.1 or [::1] only (a web page whose domain "
             "re-resolves to this machine sends its own name); add a reverse proxy's name "
             "with --allowed-hosts";
  }
  if (origin) {
    if (policy.allows_origin(*origin)) return std::nullopt;
    auto o = parse_origin(*origin);
    if (policy.loopback && o && is_loopback_host(o->host)) return std::nullopt;
    return "Origin '" + std::string(trim(*origin)) +
           "' is not allowed: a web page of another site must not drive this server; allow a "
           "page's origin with --allowed-origins, or require a key with --api-key-env";
  }
  return std::nullopt;
}

}  // namespace weir::http
