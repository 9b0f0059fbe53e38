// JSON text for people and programs: like boost::json::serialize, but a double is written in
// its shortest form that reads back to the same value, in plain notation where that is short
// (25.5, 0.001, 1e+300), never Boost's "2.55E1". Integers, strings, objects and arrays are
// written as boost::json::serialize writes them (no whitespace, keys in insertion order).
//
// Thread safety: a pure function.
#pragma once

#include <string>

#include <boost/json/fwd.hpp>

namespace weir {

std::string to_json_text(const boost::json::value& v);

}  // namespace weir
