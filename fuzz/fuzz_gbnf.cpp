// Parsing GBNF grammar text (and the regex front end, on the same bytes) must never crash or
// hang: it compiles to a grammar (with nullable repetitions normalised, no left recursion
// left, and consistent shortest completions: fuzz_grammar_checks.hpp) or returns an error with
// a position.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "constraint/grammar.hpp"
#include "fuzz_grammar_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weir::inference::constraint;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  {
    GrammarBuilder b(std::chrono::milliseconds(500));
    auto root = compile_gbnf(b, text);
    if (root)
      if (auto g = b.finish(*root)) check_rest_bytes(*g);
  }
  if (size < 256) {
    GrammarBuilder b(std::chrono::milliseconds(500));
    auto root = compile_regex(b, text, size % 2 == 0, size % 3 == 0);
    if (root)
      if (auto g = b.finish(*root)) check_rest_bytes(*g);
  }
  return 0;
}
