// Writes the GGUF fuzzer's seed: a small vocab-only file made with weir's own GGUF writer, so
// no model file is kept in the repository. Usage: seed_gguf OUT.gguf
#include <cstdio>
#include <string>
#include <vector>

#include "weir/inference/gguf_writer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: seed_gguf OUT.gguf\n"), 1;
  weir::inference::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
  }
  for (const char* p : {"\xe2\x96\x81"
                        "a",
                        "\xe2\x96\x81"
                        "b",
                        "\xe2\x96\x81"
                        "ab",
                        "b"})
    tokens.push_back(p);
  std::vector<float> scores;
  std::vector<std::int32_t> types = {2, 3, 3};
  for (std::size_t i = 0; i < tokens.size(); ++i) scores.push_back(-static_cast<float>(i));
  types.resize(259, 6);
  types.resize(tokens.size(), 1);
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_f32s("tokenizer.ggml.scores", scores);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  std::string data(16, '\0');
  w.add_tensor("t", {4}, weir::inference::GgmlType::f32, data);
  auto st = w.write(argv[1]);
  if (!st) return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  return 0;
}
