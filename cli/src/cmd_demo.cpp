#include <cstdio>

#include "commands.hpp"

namespace weir::cli {

int cmd_demo(Args) {
  std::printf("weir demo: the demonstration job is assembled as weir's modules land.\n");
  return kExitOk;
}

}  // namespace weir::cli
