#include "weir/pg/conninfo.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "weir/runtime/text.hpp"

namespace weir::pg {
namespace {

struct OptionsFree {
  void operator()(PQconninfoOption* o) const { PQconninfoFree(o); }
};

// Every spelling of a password the input may hold, as written and decoded.
std::vector<std::string> password_candidates(std::string_view in) {
  std::vector<std::string> out;
  auto add = [&](std::string_view v) {
    if (v.empty()) return;
    out.emplace_back(v);
    out.push_back(percent_decode(v));
  };
  if (is_postgres_uri(in)) {
    std::string_view rest = in.substr(in.find("://") + 3);
    const std::string_view authority = rest.substr(0, rest.find_first_of("/?"));
    if (auto at = authority.rfind('@'); at != std::string_view::npos) {
      const std::string_view userinfo = authority.substr(0, at);
      if (auto colon = userinfo.find(':'); colon != std::string_view::npos)
        add(userinfo.substr(colon + 1));
    }
  }
  // password=VALUE, in a URI query or as a key/value pair ('quoted' values may hold spaces).
  for (std::size_t pos = in.find("password"); pos != std::string_view::npos;
       pos = in.find("password", pos + 1)) {
    std::size_t i = pos + 8;
    while (i < in.size() && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n')) ++i;
    if (i >= in.size() || in[i] != '=') continue;
    ++i;
    while (i < in.size() && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n')) ++i;
    if (i < in.size() && in[i] == '\'') {
      std::string value;
      std::string raw;
      for (++i; i < in.size() && in[i] != '\''; ++i) {
        raw += in[i];
        if (in[i] == '\\' && i + 1 < in.size()) ++i;
        value += in[i];
      }
      add(value);
      add(raw);
    } else {
      const std::size_t end = in.find_first_of(" \t\n&#", i);
      add(in.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i));
    }
  }
  return out;
}

std::string option(const PQconninfoOption* opts, std::string_view key) {
  for (const PQconninfoOption* o = opts; o->keyword != nullptr; ++o)
    if (key == o->keyword && o->val != nullptr) return o->val;
  return "";
}

}  // namespace

bool is_postgres_uri(std::string_view s) {
  return s.starts_with("postgres://") || s.starts_with("postgresql://");
}

std::string scrub_password(std::string text, std::string_view conninfo) {
  auto candidates = password_candidates(conninfo);
  // Longest first, so a password that contains another candidate is replaced whole.
  std::sort(candidates.begin(), candidates.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& c : candidates) {
    if (c.empty()) continue;
    for (std::size_t pos = text.find(c); pos != std::string::npos; pos = text.find(c, pos + 3))
      text.replace(pos, c.size(), "***");
  }
  return text;
}

Result<Conninfo> parse_conninfo(std::string_view conninfo) {
  if (conninfo.empty())
    return Error(Errc::invalid_argument,
                 "postgres: the connection string is empty; give a URI such as "
                 "postgres://user@host:5432/dbname or key=value pairs");
  if (conninfo.find('\0') != std::string_view::npos)
    return Error(Errc::invalid_argument, "postgres: the connection string holds a NUL byte");
  const std::string text(conninfo);
  char* err = nullptr;
  std::unique_ptr<PQconninfoOption, OptionsFree> opts(PQconninfoParse(text.c_str(), &err));
  if (!opts) {
    std::string why = err != nullptr ? err : "out of memory";
    PQfreemem(err);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return Error(Errc::invalid_argument, "postgres: cannot parse the connection string " +
                                             scrub_password("'" + text + "'", conninfo) + ": " +
                                             scrub_password(std::move(why), conninfo));
  }
  // libpq checks a port only when it connects, and then reports it as a connection failure.
  const std::string ports = option(opts.get(), "port");
  for (std::size_t begin = 0; begin <= ports.size() && !ports.empty();) {
    std::size_t end = ports.find(',', begin);
    if (end == std::string::npos) end = ports.size();
    const std::string one = ports.substr(begin, end - begin);
    long value = 0;
    bool ok = !one.empty() && one.size() <= 5;
    for (char ch : one) {
      ok = ok && ch >= '0' && ch <= '9';
      if (ok) value = value * 10 + (ch - '0');
    }
    // An empty entry in a list means the default port.
    if (!(one.empty() && ports.find(',') != std::string::npos) &&
        (!ok || value < 1 || value > 65535))
      return Error(Errc::invalid_argument, "postgres: cannot parse the connection string: port " +
                                               scrub_password("'" + one + "'", conninfo) +
                                               " is not a number from 1 to 65535");
    begin = end + 1;
  }
  const std::string password = option(opts.get(), "password");
  std::string host = option(opts.get(), "host");
  if (host.empty()) host = option(opts.get(), "hostaddr");
  if (host.empty()) host = "localhost";
  std::string port = option(opts.get(), "port");
  if (port.empty()) port = "5432";
  std::string user = option(opts.get(), "user");
  std::string dbname = option(opts.get(), "dbname");
  std::string where =
      "postgres '" + (user.empty() ? "" : user + "@") + host + ":" + port + "/" + dbname + "'";
  // A password is never part of user, host, port or dbname, but a user may have put one there.
  if (!password.empty())
    for (std::size_t pos = where.find(password); pos != std::string::npos;
         pos = where.find(password, pos + 3))
      where.replace(pos, password.size(), "***");
  return Conninfo{text, scrub_password(std::move(where), conninfo)};
}

}  // namespace weir::pg
