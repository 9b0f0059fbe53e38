#include <cstdio>
#include <string>

#include "agents_run.hpp"
#include "commands.hpp"
#include "document.hpp"
#include "weir/agents/crew.hpp"
#include "weir/agents/crew_file.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/workflow.hpp"

namespace weir::cli {

int cmd_validate(Args args) {
  if (args.empty()) {
    std::fprintf(stderr,
                 "weir validate: give one or more workflow files (see 'weir validate --help')\n");
    return kExitInvalidInput;
  }
  int bad = 0;
  for (auto a : args) {
    // Read and parsed once; a crew file is small, so its own checker may parse it again.
    auto doc = open_document(std::string(a));
    if (!doc) {
      ++bad;
      std::fprintf(stderr, "%s\n%.*s: 1 error\n", doc.error().message.c_str(),
                   static_cast<int>(a.size()), a.data());
      continue;
    }
    if (doc->agents) {
      auto f = agents::parse_agents_file(doc->text, std::string(a));
      if (!f) {
        ++bad;
        std::fprintf(stderr, "%s\n", f.error().message.c_str());
        continue;
      }
      if (f->kind == agents::AgentsFileKind::crew)
        std::printf("%.*s: ok (crew: %zu agents, %zu tasks)\n", static_cast<int>(a.size()),
                    a.data(), f->crew.agents.size(), f->crew.tasks.size());
      else
        std::printf("%.*s: ok (group chat: %zu agents)\n", static_cast<int>(a.size()), a.data(),
                    f->chat.agents.size());
      continue;
    }
    auto parsed = std::move(doc->parsed);
    auto r = graph::load_workflow_json(std::move(parsed), doc->text_for_loading(), std::string(a),
                                       agents::workflow_checks());
    if (r.ok()) {
      std::printf("%.*s: ok (%zu nodes, %zu edges)\n", static_cast<int>(a.size()), a.data(),
                  r.spec->nodes.size(), r.spec->edges.size());
    } else {
      ++bad;
      std::fputs(r.report().c_str(), stderr);
      std::fprintf(stderr, "%.*s: %zu error%s\n", static_cast<int>(a.size()), a.data(),
                   r.diagnostics.size(), r.diagnostics.size() == 1 ? "" : "s");
    }
  }
  return bad ? kExitInvalidInput : kExitOk;
}

}  // namespace weir::cli
