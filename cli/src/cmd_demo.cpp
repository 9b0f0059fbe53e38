// weir demo: the research crew (researcher -> writer -> reviewer over samples/data, with
// document search and artifacts) run as 64 instances at once on one shared in-process engine,
// under one memory budget, ending with a summary table. The crew is an ordinary crew file:
// `weir run samples/crews/research_crew.json --instances 64` does the same.
#include <filesystem>

#include "agents_run.hpp"
#include "args.hpp"
#include "commands.hpp"

namespace weir::cli {

int cmd_demo(Args args) {
  Flags f("demo", {"--crews", "--concurrency", "--crew", "--model"}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  double crews = 64, concurrency = 32;
  if (!f.number("--crews", crews) || !f.number("--concurrency", concurrency))
    return kExitInvalidInput;
  if (crews < 1 || concurrency < 1)
    return f.fail("--crews and --concurrency must be at least 1"), kExitInvalidInput;
  std::filesystem::path crew =
      f.get("--crew").value_or(std::string(WEIR_SOURCE_DIR) + "/samples/crews/research_crew.json");
  if (!std::filesystem::exists(crew))
    return f.fail("crew file '" + crew.string() + "' not found (give one with --crew FILE)"),
           kExitInvalidInput;
  AgentsRunOptions o;
  o.instances = static_cast<int>(crews);
  o.concurrency = static_cast<int>(concurrency);
  o.model = f.get("--model");
  o.table = true;
  return run_agents_file(crew, o);
}

}  // namespace weir::cli
