// The artifact references inside a checkpoint's values ({"$artifact": id, ...}, weir/runtime/
// artifact_store.hpp's ArtifactRef): what a checkpoint must carry, or a copy of it must take
// along, for its state to be read elsewhere. One walk for the runtime and the run service.
#pragma once

#include <functional>
#include <string>

#include <boost/json/object.hpp>

namespace weir::graph {

// Calls f(id) for every artifact reference inside the values of `values` (depth-first; a
// reference's own fields are not searched further). Iterative: deep values cannot overflow
// the stack.
void for_each_artifact_id(const boost::json::object& values,
                          const std::function<void(const std::string&)>& f);

}  // namespace weir::graph
