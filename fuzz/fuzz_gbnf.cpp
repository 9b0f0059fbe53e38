// Parsing GBNF grammar text (and the regex front end, on the same bytes) must never crash or
// hang: it compiles to a grammar or returns an error with a position.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "constraint/grammar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weir::inference::constraint;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  {
    GrammarBuilder b(std::chrono::milliseconds(500));
    auto root = compile_gbnf(b, text);
    if (root) (void)b.finish(*root);
  }
  if (size < 256) {
    GrammarBuilder b(std::chrono::milliseconds(500));
    auto root = compile_regex(b, text, size % 2 == 0, size % 3 == 0);
    if (root) (void)b.finish(*root);
  }
  return 0;
}
