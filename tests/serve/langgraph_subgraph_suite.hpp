// Subgraphs and C++ graphs on each backend of the run service (included by each backend's
// instance): a run asked with stream_subgraphs shows each step of the subgraphs it calls as
// LangGraph's namespaced events ("values|<node>:<task id>", "updates|..."), before the step that
// called them; a graph written in C++ is an assistant like a workflow file.
#pragma once

#include <cctype>
#include <regex>

#include "weir/graph/state_graph.hpp"

#include "langgraph_suite.hpp"

namespace weir::serve::runs_suite {

// outer: START -> inner (the subgraph inner.json: first -> second) -> finish -> END.
// A JSON object's text with its keys sorted (std::map order), so that tests compare contents.
inline std::string sorted_keys(const std::string& text) {
  const json::value v = json::parse(text);
  if (!v.is_object()) return text;
  std::map<std::string, std::string> keys;
  for (const auto& kv : v.as_object()) keys[kv.key()] = json::serialize(kv.value());
  std::string out = "{";
  for (const auto& [k, x] : keys)
    out += (out.size() > 1 ? "," : "") + json::serialize(json::string(k)) + ":" + x;
  return out + "}";
}

inline void write_nested_workflows(const fs::path& dir) {
  std::ofstream(dir / "inner.json") << R"({"name": "inner",
 "state": {"topic": {"default": ""}, "seen": {"reducer": "append"}},
 "nodes": {"first": {"kind": "set", "values": {"seen": "first {{state.topic}}"}},
           "second": {"kind": "set", "values": {"seen": "second"}}},
 "edges": [{"from": "START", "to": "first"}, {"from": "first", "to": "second"},
           {"from": "second", "to": "END"}]})";
  std::ofstream(dir / "outer.json") << R"({"name": "outer",
 "state": {"topic": {"default": ""}, "seen": {"reducer": "append"}, "done": {"default": false}},
 "input": ["topic"],
 "nodes": {"inner": {"kind": "subgraph", "path": "inner.json"},
           "finish": {"kind": "set", "values": {"done": true}}},
 "edges": [{"from": "START", "to": "inner"}, {"from": "inner", "to": "finish"},
           {"from": "finish", "to": "END"}]})";
}

TEST_P(RunsApi, LangGraphStreamSubgraphsShowsEachStepOfASubgraph) {
  write_nested_workflows(dir_);
  start();
  auto stream = [&](bool subgraphs) {
    const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
    auto r = post("/threads/" + t + "/runs/stream",
                  std::string(R"({"assistant_id": "outer", "input": {"topic": "tides"},
                     "stream_mode": ["values", "updates"], "stream_subgraphs": )") +
                      (subgraphs ? "true" : "false") + "}");
    EXPECT_EQ(r.status, 200) << r.body;
    // "<event> <data>", the task id in a namespace as <id>, the data's keys in order.
    std::vector<std::string> out;
    std::set<std::string> ids;
    static const std::regex task(":([0-9a-f]{32})");
    for (const auto& f : frames_of(r.body)) {
      if (f.event == "metadata") continue;
      for (std::sregex_iterator i(f.event.begin(), f.event.end(), task), end; i != end; ++i)
        ids.insert((*i)[1]);
      out.push_back(std::regex_replace(f.event, task, ":<id>") + " " + sorted_keys(f.data));
    }
    EXPECT_LE(ids.size(), 1u) << "one call, one namespace";
    return out;
  };
  EXPECT_EQ(stream(true),
            (std::vector<std::string>{
                R"(values {"topic":"tides"})", R"(values|inner:<id> {"topic":"tides"})",
                R"(updates|inner:<id> {"first":{"seen":["first tides"]}})",
                R"(values|inner:<id> {"seen":["first tides"],"topic":"tides"})",
                R"(updates|inner:<id> {"second":{"seen":["second"]}})",
                R"(values|inner:<id> {"seen":["first tides","second"],"topic":"tides"})",
                R"(updates {"inner":{"seen":["first tides","second"]}})",
                R"(values {"seen":["first tides","second"],"topic":"tides"})",
                R"(updates {"finish":{"done":true}})",
                R"(values {"done":true,"seen":["first tides","second"],"topic":"tides"})"}));
  // Without it, the subgraph shows only as the step that called it.
  for (const auto& e : stream(false)) EXPECT_EQ(e.find('|'), std::string::npos) << e;
  // A request that is not a yes or no is refused, naming the field.
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto bad = post("/threads/" + t + "/runs/stream",
                  R"({"assistant_id": "outer", "input": {}, "stream_subgraphs": "yes"})");
  EXPECT_EQ(bad.status, 422);
  EXPECT_EQ(detail_of(bad), "'stream_subgraphs' must be true or false, got \"yes\"");
}

// greet -> shout, in C++: each appends to `log` what it says of `topic`.
inline std::shared_ptr<const graph::CompiledGraph> greeter_graph() {
  graph::StateGraph b;
  b.add_channel("topic", {});
  b.add_channel("log", {.reducer = graph::ReducerKind::append});
  b.add_node("greet", [](const graph::StateView& s, graph::NodeContext&) -> Result<graph::Update> {
    return graph::Update().set("log",
                               json::string("hello " + std::string(s.get("topic").as_string())));
  });
  b.add_node("shout", [](const graph::StateView& s, graph::NodeContext&) -> Result<graph::Update> {
    std::string loud = "HELLO " + std::string(s.get("topic").as_string());
    for (auto& ch : loud) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return graph::Update().set("log", json::string(loud));
  });
  b.add_edge("START", "greet").add_edge("greet", "shout").add_edge("shout", "END");
  b.set_input_channels({"topic"}, "greeter");
  return *b.compile();
}

TEST_P(RunsApi, LangGraphACppGraphIsAnAssistant) {
  graphs_.push_back({"greeter", "Greets a topic, then shouts it.", greeter_graph()});
  start();
  auto found = post("/assistants/search", R"({"graph_id": "greeter"})");
  ASSERT_EQ(found.status, 200) << found.body;
  const json::value list = json::parse(found.body);
  ASSERT_EQ(list.as_array().size(), 1u) << found.body;
  const std::string id(list.at(0).at("assistant_id").as_string());
  EXPECT_EQ(list.at(0).at("description"), "Greets a topic, then shouts it.");
  auto drawn = get("/assistants/" + id + "/graph");
  ASSERT_EQ(drawn.status, 200) << drawn.body;
  const json::value g = json::parse(drawn.body);
  EXPECT_EQ(g.at("nodes").at(1).at("id"), "greet");
  EXPECT_EQ(json::serialize(g.at("nodes").at(1).at("data").at("id")), R"(["weir","code"])");
  EXPECT_EQ(g.at("edges").as_array().size(), 3u);
  auto schemas = get("/assistants/" + id + "/schemas");
  ASSERT_EQ(schemas.status, 200) << schemas.body;
  EXPECT_EQ(json::serialize(json::parse(schemas.body).at("input_schema").at("properties")),
            R"({"topic":{}})");
  // Runs: waited for, streamed, and refused input it does not take, as a workflow's.
  const std::string t(object_of(post("/threads", "{}").body)["thread_id"].as_string());
  auto waited = post("/threads/" + t + "/runs/wait",
                     R"({"assistant_id": "greeter", "input": {"topic": "tides"}})");
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_EQ(sorted_keys(waited.body), R"({"log":["hello tides","HELLO TIDES"],"topic":"tides"})");
  auto streamed = post(
      "/threads/" + t + "/runs/stream",
      R"({"assistant_id": ")" + id + R"(", "input": {"topic": "wind"}, "stream_mode": "updates"})");
  std::vector<std::string> updates;
  for (const auto& f : frames_of(streamed.body))
    if (f.event == "updates") updates.push_back(f.data);
  EXPECT_EQ(updates, (std::vector<std::string>{R"({"greet":{"log":["hello wind"]}})",
                                               R"({"shout":{"log":["HELLO WIND"]}})"}));
  auto refused = post("/threads/" + t + "/runs/wait",
                      R"({"assistant_id": "greeter", "input": {"log": ["forged"]}})");
  EXPECT_EQ(refused.status, 422);
  EXPECT_EQ(detail_of(refused),
            "'input' sets 'log', which greeter does not take as input (its \"input\": topic)");
}

}  // namespace weir::serve::runs_suite
