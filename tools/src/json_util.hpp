// Small helpers for reading validated tool arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <boost/json/object.hpp>

namespace weir::tools::detail {

// The integer at args[key] (int64, uint64 or an integral double), or `fallback` when absent.
// REQUIRES: the schema said "integer" with minimum 0.
inline std::uint64_t arg_u64(const boost::json::object& args, std::string_view key,
                             std::uint64_t fallback) {
  const auto* v = args.if_contains(key);
  if (!v) return fallback;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64()) return v->get_int64() < 0 ? 0 : static_cast<std::uint64_t>(v->get_int64());
  if (v->is_double()) return v->get_double() < 0 ? 0 : static_cast<std::uint64_t>(v->get_double());
  return fallback;
}

}  // namespace weir::tools::detail
