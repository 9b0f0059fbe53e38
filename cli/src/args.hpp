// A tiny flag parser for the subcommands: --name VALUE (or --name=VALUE), --flag, and positionals.
// Unknown flags are errors naming the command.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "commands.hpp"

namespace weir::cli {

class Flags {
 public:
  // `with_value`: flags that take a value; `switches`: flags that do not.
  Flags(std::string command, std::set<std::string> with_value, std::set<std::string> switches)
      : command_(std::move(command)),
        with_value_(std::move(with_value)),
        switches_(std::move(switches)) {}

  bool parse(Args args) {
    for (std::size_t i = 0; i < args.size(); ++i) {
      std::string a(args[i]);
      // --name=value is --name value.
      if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
        const std::string name = a.substr(0, eq);
        if (with_value_.count(name)) {
          values_[name] = a.substr(eq + 1);
          continue;
        }
        if (switches_.count(name)) return fail(name + " takes no value (got '" + a + "')");
        return fail("unknown option '" + a + "'");
      }
      if (with_value_.count(a)) {
        if (i + 1 >= args.size()) return fail(a + " needs a value");
        std::string v(args[++i]);
        // `--thread --stream` is a forgotten value, not a thread named "--stream".
        if (with_value_.count(v) || switches_.count(v))
          return fail(a + " needs a value (got the option '" + v + "')");
        values_[a] = std::move(v);
      } else if (switches_.count(a)) {
        values_[a] = "";
      } else if (a.size() > 1 && a[0] == '-') {
        return fail("unknown option '" + a + "'");
      } else {
        positional_.push_back(a);
      }
    }
    return true;
  }
  bool has(const std::string& f) const { return values_.count(f) != 0; }
  std::optional<std::string> get(const std::string& f) const {
    auto it = values_.find(f);
    return it == values_.end() ? std::nullopt : std::optional(it->second);
  }
  const std::vector<std::string>& positional() const { return positional_; }
  // Numbers: each flag is parsed as its type and checked against its range; anything else
  // (garbage, a fraction for an integer, inf, nan, out of range) is refused with the flag's
  // name, the range and what was given. `out` is left unchanged when the flag is absent.
  template <class Int>
  requires std::is_integral_v<Int>
  bool integer(const std::string& f, Int& out, Int min, Int max) {
    auto v = get(f);
    if (!v) return true;
    long long parsed = 0;
    const char* b = v->data();
    const char* e = b + v->size();
    auto [ptr, ec] = std::from_chars(b, e, parsed);
    const bool in_range = ec == std::errc() && ptr == e && parsed >= static_cast<long long>(min) &&
                          parsed <= static_cast<long long>(max);
    if (!in_range)
      return fail(f + " expects an integer from " + std::to_string(min) + " to " +
                  std::to_string(max) + ", got '" + *v + "'");
    out = static_cast<Int>(parsed);
    return true;
  }
  bool real(const std::string& f, double& out, double min, double max) {
    auto v = get(f);
    if (!v) return true;
    double parsed = 0;
    const char* b = v->data();
    const char* e = b + v->size();
    auto [ptr, ec] = std::from_chars(b, e, parsed);
    if (ec != std::errc() || ptr != e || !std::isfinite(parsed) || parsed < min || parsed > max)
      return fail(f + " expects a number from " + format_real(min) + " to " + format_real(max) +
                  ", got '" + *v + "'");
    out = parsed;
    return true;
  }
  bool fail(const std::string& msg) {
    std::fprintf(stderr, "weir %s: %s (see 'weir %s --help')\n", command_.c_str(), msg.c_str(),
                 command_.c_str());
    return false;
  }

 private:
  std::string command_;
  std::set<std::string> with_value_, switches_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;

  static std::string format_real(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
  }
};

}  // namespace weir::cli
