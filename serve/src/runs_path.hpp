// The runs API's reading of a request target (no Asio: the fuzz build compiles it alone):
// "/v1/runs/ID/events" -> {"runs", "ID", "events"} with ID percent-decoded, and a query's value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weir::serve {

struct RunsPath {
  std::string collection;  // "runs", "threads", "workflows"
  std::string id;          // "" when none (then `action` is "" too)
  std::string action;      // "" when none
  bool valid = false;      // false: not a runs API path at all
};

// "/v1/<collection>[/<id>[/<action>]]" with a known collection; a trailing '/' after the
// collection is allowed. Anything else (more segments, an empty id before an action) is not valid.
RunsPath split_runs_path(std::string_view path);

// The decoded value of `key` in the target's query ("/v1/runs?limit=5" -> "5"; a key without
// '=' has the value ""); nullopt when the query does not have it.
std::optional<std::string> query_value(std::string_view target, std::string_view key);
// Every value of `key`, in order ("?m=a&m=b" -> {"a", "b"}).
std::vector<std::string> query_values(std::string_view target, std::string_view key);

}  // namespace weir::serve
