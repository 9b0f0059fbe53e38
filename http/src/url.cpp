// URLs and headers given from outside (configuration files, flags, variables): parsing only, no
// Asio, so that the configuration readers and their fuzzers can check them where they are read.
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "weir/http/client.hpp"
#include "weir/runtime/text.hpp"

namespace weir::http {

std::string Url::origin() const {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(tls ? "https://" : "http://") + (v6 ? "[" + host + "]" : host) + ":" + port;
}

Result<Url> parse_url(std::string_view s) {
  Url u;
  u.text = std::string(s);
  auto bad = [&](std::string why) {  // the URL as given (`s` loses its scheme below)
    return Error(Errc::invalid_argument, "invalid URL '" + escape_control(u.text) + "': " + why);
  };
  // No control character anywhere (ESC, DEL, BEL...): a URL from a file or a flag is shown in
  // messages and sent in a request line.
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(c));
      return bad("it holds a control character (byte " + std::string(byte) + ")");
    }
  // A scheme is case-insensitive (RFC 3986, 3.1): "HTTP://" is "http://".
  auto scheme_is = [&s](std::string_view want) {
    return s.size() >= want.size() &&
           std::equal(want.begin(), want.end(), s.begin(), [](char w, char c) {
             return w == std::tolower(static_cast<unsigned char>(c));
           });
  };
  if (scheme_is("http://")) {
    s.remove_prefix(7);
  } else if (scheme_is("https://")) {
    u.tls = true;
    s.remove_prefix(8);
  } else {
    return bad("expected http:// or https://");
  }
  const auto slash = s.find('/');
  std::string_view authority = s.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : s.substr(slash);
  if (authority.find('@') != std::string_view::npos) return bad("credentials in URLs are refused");
  std::string_view port;
  if (authority.starts_with("[")) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in the host");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected ':' after ']'");
      port = rest.substr(1);
    }
  } else {
    const auto colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return bad("no host");
  // A host is case-insensitive too (RFC 3986, 3.2.2): compared and sent in lowercase, so that an
  // allow-list of hosts matches however a URL spells it.
  for (char& c : u.host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!port.empty()) {
    if (port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoi(std::string(port)) == 0 || std::stoi(std::string(port)) > 65535)
      return bad("port must be 1..65535");
    u.port = std::string(port);
  } else {
    u.port = u.tls ? "443" : "80";
  }
  if (path.find_first_of("?# \t\r\n") != std::string_view::npos)
    return bad("the path may not hold a query, a fragment or spaces");
  while (path.ends_with('/')) path.remove_suffix(1);
  u.path = std::string(path);
  return u;
}

Status check_header(std::string_view name, std::string_view value) {
  static constexpr std::string_view kTokenPunct = "!#$%&'*+-.^_`|~";
  const auto tchar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || kTokenPunct.find(c) != kTokenPunct.npos;
  };
  if (name.empty() || !std::all_of(name.begin(), name.end(), tchar))
    return Error(Errc::invalid_argument, "header name '" + escape_control(name) +
                                             "' is not an HTTP token (letters, digits and " +
                                             std::string(kTokenPunct) + ")");
  for (std::string_view own : {"Host", "Content-Length", "Transfer-Encoding", "Content-Type"})
    if (iequals(name, own))
      return Error(Errc::invalid_argument, "header '" + std::string(name) +
                                               "' is set by weir from the request; leave it out");
  if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos)
    return Error(Errc::invalid_argument,
                 "header '" + std::string(name) + "' holds a line break or NUL");
  // RFC 9110 5.5: a field value is visible characters, spaces and tabs (and obs-text).
  for (const char c : value)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
      return Error(Errc::invalid_argument,
                   "header '" + std::string(name) + "' holds a control character");
  return {};
}

}  // namespace weir::http
