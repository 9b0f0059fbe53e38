// What a channel's default must be for its reducer, and what a messages channel's item is: one
// check for StateGraph::compile(), the workflow loader (which reports it at the file's
// /state/<channel>/default) and the run's reducer.
#pragma once

#include <optional>
#include <string>

#include <boost/json.hpp>

#include "weir/graph/state_graph.hpp"

namespace weir::graph {

// What a messages channel takes as an item, written or as its default: a message (an object) or
// a text.
inline bool is_message(const boost::json::value& x) {
  return x.is_object() || x.is_string();
}

// Why `d` cannot be the default of a channel with `reducer` (not custom), or nullopt: a number
// channel's default is the number its first write starts from, a list channel's its first
// items (a non-number failed the run at its first write, a non-list was dropped unsaid), and a
// messages channel's items messages or texts, as its writes must be.
inline std::optional<std::string> default_problem(ReducerKind reducer,
                                                  const boost::json::value& d) {
  if (d.is_null()) return std::nullopt;
  const char* what = nullptr;
  bool number = true;  // else a list
  switch (reducer) {
    case ReducerKind::sum:
      what = "sums numbers";
      break;
    case ReducerKind::max:
      what = "keeps the largest number";
      break;
    case ReducerKind::min:
      what = "keeps the smallest number";
      break;
    case ReducerKind::append:
      what = "appends to a list", number = false;
      break;
    case ReducerKind::messages:
      what = "holds a list of messages", number = false;
      break;
    default:
      return std::nullopt;
  }
  if (!(number ? d.is_number() : d.is_array()))
    return std::string(what) + ", but its default is " + boost::json::serialize(d) + ": give it " +
           (number ? "a number" : "a list") + " or no default";
  if (reducer == ReducerKind::messages) {
    const auto& items = d.as_array();
    for (std::size_t k = 0; k < items.size(); ++k)
      if (!is_message(items[k]))
        return std::string(what) + ", but its default holds " + boost::json::serialize(items[k]) +
               " as item " + std::to_string(k) +
               ": give it a list of messages (objects or texts) or no default";
  }
  return std::nullopt;
}

}  // namespace weir::graph
