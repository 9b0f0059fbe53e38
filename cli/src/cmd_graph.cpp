#include <cstdio>
#include <string>

#include "commands.hpp"
#include "document.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/dot.hpp"
#include "weir/graph/workflow.hpp"

namespace weir::cli {

int cmd_graph(Args args) {
  std::string file, format = "dot";
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--format" && i + 1 < args.size()) {
      format = args[++i];
    } else if (!args[i].empty() && args[i][0] == '-') {
      std::fprintf(stderr, "weir graph: unknown option '%.*s'\n", static_cast<int>(args[i].size()),
                   args[i].data());
      return kExitInvalidInput;
    } else if (file.empty()) {
      file = args[i];
    } else {
      std::fprintf(stderr, "weir graph: one workflow file at a time\n");
      return kExitInvalidInput;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "weir graph: give a workflow file (see 'weir graph --help')\n");
    return kExitInvalidInput;
  }
  if (format != "dot") {
    std::fprintf(stderr, "weir graph: unknown format '%s' (supported: dot)\n", format.c_str());
    return kExitInvalidInput;
  }
  auto doc = open_document(file);
  if (!doc) return std::fprintf(stderr, "%s\n", doc.error().message.c_str()), kExitInvalidInput;
  if (doc->agents) {
    std::fprintf(stderr,
                 "weir graph: %s is a crew or group-chat file, which has no graph to draw; "
                 "'weir validate %s' lists its agents and tasks, 'weir run %s' runs it\n",
                 file.c_str(), file.c_str(), file.c_str());
    return kExitInvalidInput;
  }
  auto parsed = std::move(doc->parsed);
  auto r = graph::load_workflow_json(std::move(parsed), doc->text_for_loading(), file,
                                     agents::workflow_checks());
  if (!r.ok()) {
    std::fputs(r.report().c_str(), stderr);
    return kExitInvalidInput;
  }
  std::fputs(graph::workflow_to_dot(*r.spec).c_str(), stdout);
  return kExitOk;
}

}  // namespace weir::cli
