// What a channel's default must be for its reducer: one check for StateGraph::compile() and the
// workflow loader (which reports it at the file's /state/<channel>/default).
#pragma once

#include <optional>
#include <string>

#include <boost/json.hpp>

#include "weir/graph/state_graph.hpp"

namespace weir::graph {

// Why `d` cannot be the default of a channel with `reducer` (not custom), or nullopt: a number
// channel's default is the number its first write starts from, a list channel's its first
// items (a non-number failed the run at its first write, a non-list was dropped unsaid), and a
// messages channel's items messages or texts, as its writes must be.
inline std::optional<std::string> default_problem(ReducerKind reducer,
                                                  const boost::json::value& d) {
  if (d.is_null()) return std::nullopt;
  const char* what = nullptr;
  const char* want = nullptr;
  switch (reducer) {
    case ReducerKind::sum:
      what = "sums numbers", want = "a number";
      break;
    case ReducerKind::max:
      what = "keeps the largest number", want = "a number";
      break;
    case ReducerKind::min:
      what = "keeps the smallest number", want = "a number";
      break;
    case ReducerKind::append:
      what = "appends to a list", want = "a list";
      break;
    case ReducerKind::messages:
      what = "holds a list of messages", want = "a list";
      break;
    default:
      return std::nullopt;
  }
  const bool number = want[2] == 'n';  // "a number"
  if (!(number ? d.is_number() : d.is_array()))
    return std::string(what) + ", but its default is " + boost::json::serialize(d) + ": give it " +
           want + " or no default";
  // A messages channel's items are what its writes may be: messages (objects) or texts.
  if (reducer == ReducerKind::messages) {
    const auto& items = d.as_array();
    for (std::size_t k = 0; k < items.size(); ++k)
      if (!items[k].is_object() && !items[k].is_string())
        return std::string(what) + ", but its default holds " + boost::json::serialize(items[k]) +
               " as item " + std::to_string(k) +
               ": give it a list of messages (objects or texts) or no default";
  }
  return std::nullopt;
}

}  // namespace weir::graph
