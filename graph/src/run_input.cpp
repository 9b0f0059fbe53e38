// A run's input: the one check against a graph's input list (state_graph.hpp) and the origin
// that tells a continuation from a new run on a thread (runner.hpp, Thread::origin).
#include <algorithm>

#include <boost/json.hpp>

#include "runner.hpp"
#include "weir/runtime/sha256.hpp"

namespace weir::graph {

Status check_input_channels(const std::vector<std::string>& allowed, std::string_view graph_name,
                            const json::object& input, std::string_view source) {
  if (allowed.empty()) return {};
  for (const auto& kv : input) {
    if (std::find(allowed.begin(), allowed.end(), std::string_view(kv.key())) != allowed.end())
      continue;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return Error(Errc::invalid_argument, std::string(source) + " sets '" + std::string(kv.key()) +
                                             "', which " + std::string(graph_name) +
                                             " does not take as input (its \"input\": " + list +
                                             ")");
  }
  return {};
}

std::string run_origin(const json::object& input, const json::value* resume) {
  if (resume) return "resume:" + sha256_hex(json::serialize(*resume));
  return "input:" + sha256_hex(json::serialize(input));
}

}  // namespace weir::graph
