#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.hpp"
#include "commands.hpp"
#include "weir/inference/tokenizer.hpp"

namespace weir::cli {

int cmd_tokenize(Args args) {
  Flags f("tokenize", {"--model", "--text", "--text-file"}, {"--no-bos", "--parse-special"});
  if (!f.parse(args)) return kExitInvalidInput;
  auto model = f.get("--model");
  if (!model) return f.fail("--model FILE is required"), kExitInvalidInput;
  if (f.has("--text") == f.has("--text-file"))
    return f.fail("give exactly one of --text or --text-file"), kExitInvalidInput;
  std::string text;
  if (auto t = f.get("--text")) {
    text = *t;
  } else {
    std::ifstream in(*f.get("--text-file"), std::ios::binary);
    if (!in) return f.fail("cannot read '" + *f.get("--text-file") + "'"), kExitInvalidInput;
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto file = inference::GgufFile::open(*model);
  if (!file)
    return std::fprintf(stderr, "weir tokenize: %s\n", file.error().message.c_str()),
           kExitInvalidInput;
  auto tok = inference::Tokenizer::from_gguf(**file);
  if (!tok)
    return std::fprintf(stderr, "weir tokenize: %s\n", tok.error().message.c_str()),
           kExitInvalidInput;
  // As weir generate reads its prompt: text, unless --parse-special.
  auto ids = (*tok)->encode(text, !f.has("--no-bos"), f.has("--parse-special"));
  std::string line;
  for (std::size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return kExitOk;
}

}  // namespace weir::cli
