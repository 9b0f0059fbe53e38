// Small text helpers shared by modules that read outside input (URLs, connection strings).
#pragma once

#include <string>
#include <string_view>

namespace weir {

// "%41b%2Fc" -> "Ab/c": each %XX with two hex digits becomes that byte; anything else (a lone
// '%', "%zz") is kept as written. '+' is not a space here (paths and URIs, not form data).
std::string percent_decode(std::string_view s);

}  // namespace weir
