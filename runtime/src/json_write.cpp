#include "weir/runtime/json_write.hpp"

#include <charconv>
#include <cmath>

#include <boost/json.hpp>

namespace weir {
namespace {

void write(const boost::json::value& v, std::string& out) {
  switch (v.kind()) {
    case boost::json::kind::double_: {
      const double d = v.get_double();
      if (!std::isfinite(d)) {  // JSON has no inf/nan; Boost writes them as this too
        out += boost::json::serialize(v);
        return;
      }
      char buf[32];
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
      std::string_view text(buf, static_cast<std::size_t>(end - buf));
      out += text;
      // A whole double stays a double when read back ("2.0", not "2").
      if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
      return;
    }
    case boost::json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.get_object()) {
        if (!first) out += ',';
        first = false;
        out += boost::json::serialize(boost::json::string_view(k));
        out += ':';
        write(x, out);
      }
      out += '}';
      return;
    }
    case boost::json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v.get_array()) {
        if (!first) out += ',';
        first = false;
        write(x, out);
      }
      out += ']';
      return;
    }
    default:
      out += boost::json::serialize(v);
  }
}

}  // namespace

std::string to_json_text(const boost::json::value& v) {
  std::string out;
  write(v, out);
  return out;
}

}  // namespace weir
