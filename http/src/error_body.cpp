#include "weir/http/error_body.hpp"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/text.hpp"

namespace weir::http {

const char* error_type_for_status(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    case 504:
      return "timeout_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string error_json(std::string_view message, std::string_view type, std::string_view param,
                       std::string_view code) {
  // A message that quotes a request's bytes (a Host, an Origin) stays valid UTF-8, so that the
  // body is JSON a strict client can parse: such a message shows its bytes escaped (\xff).
  std::string shown;
  if (find_invalid_utf8(message)) {
    shown = escape_control(message);
    message = shown;
  }
  boost::json::object e{{"message", message},
                        {"type", type},
                        {"param", param.empty() ? boost::json::value() : boost::json::value(param)},
                        {"code", code.empty() ? boost::json::value() : boost::json::value(code)}};
  return boost::json::serialize(boost::json::object{{"error", std::move(e)}});
}

}  // namespace weir::http
