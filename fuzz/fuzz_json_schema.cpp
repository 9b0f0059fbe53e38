// Compiling a JSON Schema (the structured-output front end) must never crash, hang or grow
// without bound, whatever the bytes: it compiles to a grammar (whose shortest completions are
// consistent: fuzz_grammar_checks.hpp) or returns an error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "constraint/grammar.hpp"
#include "fuzz_grammar_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weir::inference::constraint;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  GrammarBuilder b(std::chrono::milliseconds(500));
  auto root = compile_json_schema(b, text);
  if (!root) return 0;
  auto g = b.finish(*root);
  if (!g) return 0;
  if (g->elems.size() > kMaxGrammarElements + kMaxRules) __builtin_trap();
  check_rest_bytes(*g);
  return 0;
}
