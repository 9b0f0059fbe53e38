// An agent with a calculator tool, run as weir's reason-act loop (a compiled state graph) under
// a memory budget, with a scripted model so that it needs no model file: the first reply calls
// the tool, the second answers. Built against an installed weir (see CMakeLists.txt).
//
// Exit code 0 when the agent called the tool and answered; prints what happened.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "weir/agents/agent.hpp"
#include "weir/agents/scripted_model.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/registry.hpp"
#include "weir/version.hpp"

namespace asio = boost::asio;
using namespace weir;

int main() {
  std::printf("weir %s\n", WEIR_VERSION_STRING);

  auto tools = std::make_shared<tools::ToolRegistry>();
  if (!tools->add(tools::make_calculator())) return std::fprintf(stderr, "no calculator\n"), 1;

  // What a model would say: a tool call in one of the forms weir parses, then an answer.
  auto model = std::make_shared<agents::ScriptedChatModel>(std::vector<std::string>{
      R"(<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>)",
      "6 times 7 is 42."});

  agents::AgentSpec spec;
  spec.name = "mathematician";
  spec.role = "a careful mathematician";
  spec.goal = "answer arithmetic questions exactly";
  spec.tools = {"calculator"};
  spec.max_iter = 3;
  auto agent = agents::Agent::create(spec, model, tools);
  if (!agent) return std::fprintf(stderr, "%s\n", agent.error().message.c_str()), 1;

  BudgetLimits limits;
  limits.total = std::size_t{64} << 20;
  MemoryBudget budget(limits);
  graph::RuntimeOptions options;
  options.budget = &budget;
  graph::GraphRuntime runtime(options);

  asio::io_context io;
  Result<agents::AgentResult> result = Error(Errc::cancelled, "not run");
  auto run = [&]() -> asio::awaitable<void> {
    // The awaitable is made first and then awaited: GCC 12 mishandles temporaries created
    // inside a co_await expression (as samples/cpp/research_crew.cpp does).
    auto op = (*agent)->async_run(runtime, "What is 6 times 7?", {}, graph::RunOptions{});
    result = co_await std::move(op);
  };
  asio::co_spawn(io, run(), asio::detached);
  io.run();
  if (!result) return std::fprintf(stderr, "run failed: %s\n", result.error().message.c_str()), 2;

  std::printf("answer: %s\nmodel calls: %d, tool calls: %d, supersteps: %d\n",
              result->output.c_str(), result->iterations, result->tool_calls, result->steps);
  std::printf("peak memory: %s\n", format_bytes(budget.peak_total()).c_str());
  return result->tool_calls == 1 && result->output == "6 times 7 is 42." ? 0 : 3;
}
