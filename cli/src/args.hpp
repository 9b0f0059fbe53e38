// A tiny flag parser for the subcommands: --name VALUE, --flag, and positionals. Unknown flags
// are errors naming the command.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
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
      if (with_value_.count(a)) {
        if (i + 1 >= args.size()) return fail(a + " needs a value");
        values_[a] = std::string(args[++i]);
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
  // Numbers: a clear error on garbage.
  bool number(const std::string& f, double& out) {
    auto v = get(f);
    if (!v) return true;
    try {
      std::size_t used = 0;
      out = std::stod(*v, &used);
      if (used != v->size()) throw 0;
    } catch (...) {
      return fail(f + " expects a number, got '" + *v + "'");
    }
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
};

}  // namespace weir::cli
