// OpenAI's error body, shared by the server (limits enforced before a handler runs) and the
// wire types (openai.hpp). No Asio, no Beast.
#pragma once

#include <string>
#include <string_view>

namespace weir::http {

// {"error": {"message": message, "type": type, "param": param|null, "code": code|null}}
std::string error_json(std::string_view message, std::string_view type, std::string_view param = {},
                       std::string_view code = {});
// OpenAI's error type for an HTTP status: 400 invalid_request_error, 401 authentication_error,
// 404 not_found_error, 413 invalid_request_error, 429 rate_limit_error, 5xx server_error...
const char* error_type_for_status(int status);

}  // namespace weir::http
