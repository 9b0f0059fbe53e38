// Invariants of a finished constraint grammar the fuzzers check (a violation traps): every
// alternative's shortest completion (Grammar::rest_bytes) shrinks by one byte per byte element
// and by at least nothing per rule element, and ends at 0.
#pragma once

#include "constraint/grammar.hpp"

namespace weir::inference::constraint {

inline void check_rest_bytes(const Grammar& g) {
  if (g.rest_bytes.size() != g.elems.size()) __builtin_trap();
  for (const auto& alts : g.alts) {
    for (std::uint32_t at : alts) {
      std::uint32_t e = at;
      for (; g.elems[e].kind != Element::end; ++e) {
        const std::uint32_t own = g.rest_bytes[e] - g.rest_bytes[e + 1];
        if (g.rest_bytes[e] < g.rest_bytes[e + 1]) __builtin_trap();
        if (g.elems[e].kind == Element::bytes && own != 1 && g.rest_bytes[e] < (1u << 30))
          __builtin_trap();
      }
      if (g.rest_bytes[e] != 0) __builtin_trap();
    }
  }
}

}  // namespace weir::inference::constraint
