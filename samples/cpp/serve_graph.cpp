// A graph written in C++, served to LangGraph clients: the same server as `weir serve`, with a
// graph of your own beside (or instead of) workflow files. The graph is an assistant (graph_id
// "triage"): the LangGraph SDK, Agent Chat UI and `curl` run it, stream it and read its threads
// (docs/langgraph-api.md "C++ graphs as assistants").
//
//   build/bin/serve_graph [PORT]        (default 2024; Ctrl-C stops it)
//   curl -s localhost:2024/runs/wait -H 'content-type: application/json' \
//     -d '{"assistant_id": "triage", "input": {"ticket": "I want a refund"}}'
//
// triage reads the ticket and routes it to billing or support, which each log what they took.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <boost/json.hpp>

#include "weir/graph/state_graph.hpp"
#include "weir/serve/service.hpp"

namespace json = boost::json;
using namespace weir;

int main(int argc, char** argv) {
  graph::StateGraph b;
  b.add_channel("ticket", {});
  b.add_channel("queue", {});
  b.add_channel("log", {.reducer = graph::ReducerKind::append});
  // A value over the graph's inline_limit (4 KiB by default) reaches a node as a reference to
  // the artifact store, not inline: NodeContext::fetch gives a string's text either way.
  auto ticket_of = [](const graph::StateView& s, graph::NodeContext& c) -> Result<std::string> {
    const json::value& t = s.get("ticket");
    auto text = c.fetch(t);
    if (!text)  // an error the run ends with, shown to the client as it is
      return Error(Errc::invalid_argument, "'ticket' must be text, got " + json::serialize(t));
    return text;
  };
  b.add_node(
      "triage",
      [ticket_of](const graph::StateView& s, graph::NodeContext& c) -> Result<graph::Update> {
        auto ticket = ticket_of(s, c);
        if (!ticket) return std::move(ticket).error();
        const bool money = ticket->find("refund") != std::string::npos ||
                           ticket->find("invoice") != std::string::npos;
        return graph::Update().set("queue", money ? "billing" : "support");
      });
  for (const char* desk : {"billing", "support"})
    b.add_node(desk,
               [desk, ticket_of](const graph::StateView& s,
                                 graph::NodeContext& c) -> Result<graph::Update> {
                 auto ticket = ticket_of(s, c);
                 if (!ticket) return std::move(ticket).error();
                 return graph::Update().set(
                     "log", json::string(std::string(desk) + " took: " + ticket->substr(0, 80)));
               });
  b.add_edge("START", "triage");
  b.add_conditional_edges(
      "triage",
      [](const graph::StateView& s) {
        return std::vector<std::string>{std::string(s.get("queue").as_string())};
      },
      {"billing", "support"});
  b.add_edge("billing", "END").add_edge("support", "END");
  b.set_input_channels({"ticket"}, "triage");
  auto g = b.compile();
  if (!g) {
    std::fprintf(stderr, "serve_graph: %s\n", g.error().message.c_str());
    return 1;
  }
  serve::ServeConfig c;
  c.port = argc > 1 ? static_cast<std::uint16_t>(std::atoi(argv[1])) : 2024;
  c.graphs.push_back({"triage", "Routes a ticket to billing or support.", std::move(*g)});
  return serve::run(std::move(c));
}
