// weir demo: the research crew (researcher -> writer -> reviewer over samples/data, with
// document search and artifacts) run as 64 instances at once on one shared in-process engine,
// under one memory budget, ending with a summary table. The crew is an ordinary crew file:
// `weir run samples/crews/research_crew.json --instances 64` does the same.
#include <filesystem>

#include "agents_run.hpp"
#include "args.hpp"
#include "commands.hpp"

namespace weir::cli {
namespace {

// The source tree's crew when run from a build, else the installed one
// (<prefix>/bin/weir -> <prefix>/share/weir/samples/crews/research_crew.json).
std::filesystem::path default_crew() {
  const std::filesystem::path rel = "samples/crews/research_crew.json";
  std::filesystem::path source = std::filesystem::path(WEIR_SOURCE_DIR) / rel;
  if (std::filesystem::exists(source)) return source;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return source;
  return exe.parent_path().parent_path() / "share" / "weir" / rel;
}

}  // namespace

int cmd_demo(Args args) {
  Flags f("demo", {"--crews", "--concurrency", "--crew", "--model", "--max-model-len"}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  int crews = 64, concurrency = 32;
  if (!f.integer("--crews", crews, 1, 1'000'000) ||
      !f.integer("--concurrency", concurrency, 1, 100'000))
    return kExitInvalidInput;
  AgentsRunOptions o;
  if (!f.integer("--max-model-len", o.max_model_len, std::int64_t{16}, std::int64_t{1} << 20))
    return kExitInvalidInput;
  std::filesystem::path crew = f.get("--crew").value_or(default_crew().string());
  if (!std::filesystem::exists(crew))
    return f.fail("crew file '" + crew.string() + "' not found (give one with --crew FILE)"),
           kExitInvalidInput;
  o.instances = crews;
  o.concurrency = concurrency;
  o.model = f.get("--model");
  o.table = true;
  return run_agents_file(crew, o);
}

}  // namespace weir::cli
