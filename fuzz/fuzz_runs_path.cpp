// Request targets -> the runs API's path and query reading: no crash, and what it returns holds
// together (an action only with an id; a valid path starts with /v1/).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "runs_path.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(data), size);
  const auto p = weir::serve::split_runs_path(target.substr(0, target.find('?')));
  if (p.valid && target.substr(0, 4) != "/v1/") std::abort();
  if (!p.action.empty() && p.id.empty()) std::abort();
  if (auto v = weir::serve::query_value(target, "limit"); v && v->size() > target.size())
    std::abort();  // decoding never grows a value
  return 0;
}
