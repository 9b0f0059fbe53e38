// The HTTP scenario needs weir::serve and weir::agents; without them it reports itself skipped.
#include "gauntlet.hpp"

namespace weir::gauntlet {

void register_http_scenarios() {
  register_scenario("fanout_http", [](Ctx&) {
    return json::object{{"pass", false}, {"skipped", "serve or agents module not built"}};
  });
}

}  // namespace weir::gauntlet
