// The GGUF reader (and the tokenizer and model loaders on top of it) must reject any bytes
// cleanly: no crash, no out-of-bounds read, no huge allocation.
#include <cstddef>
#include <cstdint>
#include <span>

#include "weir/inference/gguf.hpp"
#include "weir/inference/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto f =
      weir::inference::GgufFile::from_memory(std::as_bytes(std::span(data, size)), "fuzz.gguf");
  if (!f) return 0;
  for (auto k : (*f)->keys()) (void)(*f)->value_to_string(k);
  if (auto t = weir::inference::Tokenizer::from_gguf(**f))
    (void)(*t)->encode("fuzz text: héllo 123", true, true);
  return 0;
}
