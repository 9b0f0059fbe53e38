#include <cstdio>
#include <map>

#include "args.hpp"
#include "commands.hpp"
#include "weir/inference/model.hpp"
#include "weir/inference/tokenizer.hpp"

namespace weir::cli {

int cmd_inspect(Args args) {
  Flags f("inspect", {}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  if (f.positional().size() != 1) return f.fail("give one GGUF file"), kExitInvalidInput;
  auto file = inference::GgufFile::open(f.positional()[0]);
  if (!file)
    return std::fprintf(stderr, "weir inspect: %s\n", file.error().message.c_str()),
           kExitInvalidInput;
  const auto& g = **file;
  std::printf("file: %s (GGUF v%u, %.1f MiB)\n", g.name().c_str(), g.version(),
              g.file_bytes() / 1048576.0);
  std::printf("\nmetadata (%zu keys):\n", g.keys().size());
  for (auto k : g.keys())
    std::printf("  %-44.*s %s\n", static_cast<int>(k.size()), k.data(),
                g.value_to_string(k).c_str());
  std::map<std::string, std::pair<int, std::uint64_t>> by_type;
  for (const auto& t : g.tensors()) {
    auto& e = by_type[inference::ggml_type_name(t.type)];
    ++e.first, e.second += t.n_bytes;
  }
  std::printf("\ntensors: %zu\n", g.tensors().size());
  for (const auto& [type, e] : by_type)
    std::printf("  %-6s %5d tensors %10.1f MiB\n", type.c_str(), e.first, e.second / 1048576.0);
  if (auto tok = inference::Tokenizer::from_gguf(g)) {
    std::printf("\ntokenizer: %.*s (pre: %.*s), %d tokens, bos %d, eos %d\n",
                static_cast<int>((*tok)->model().size()), (*tok)->model().data(),
                static_cast<int>((*tok)->pre().size()), (*tok)->pre().data(), (*tok)->n_vocab(),
                (*tok)->bos(), (*tok)->eos());
  } else {
    std::printf("\ntokenizer: none (%s)\n", tok.error().message.c_str());
  }
  // The file's layout: inspecting rearranges nothing and writes no copy (docs/serve.md).
  auto model = inference::Model::from_gguf(std::move(*file), {.cpu_layout = false});
  if (model) {
    const auto& hp = (*model)->hp();
    std::printf(
        "\nmodel: %s, dim %d, hidden %d, %d layers, %d heads (%d KV heads, head size %d), vocab "
        "%d, context %d,\n"
        "       rope base %g%s, rms eps %g, %s output, %.1f MiB of weights\n",
        hp.arch_name.c_str(), hp.dim, hp.hidden, hp.n_layers, hp.n_heads, hp.n_kv_heads,
        hp.head_dim, hp.n_vocab, hp.context_length, hp.rope_base, hp.rope_neox ? " (neox)" : "",
        hp.rms_eps, hp.tied_output ? "tied" : "separate", (*model)->weight_bytes() / 1048576.0);
  } else {
    std::printf("\nmodel: not runnable by weir: %s\n", model.error().message.c_str());
  }
  return kExitOk;
}

}  // namespace weir::cli
