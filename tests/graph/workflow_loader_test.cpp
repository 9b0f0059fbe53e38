#include "weir/graph/workflow.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <boost/json/serialize.hpp>

namespace weir::graph {
namespace {

namespace fs = std::filesystem;

class WorkflowLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weir_wf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }
  WorkflowLoad load(const std::string& text) {
    return load_workflow_file(write("flow.json", text));
  }
  std::vector<std::string> messages(const WorkflowLoad& r) {
    std::vector<std::string> m;
    for (const auto& d : r.diagnostics)
      m.push_back(d.to_string().substr(d.to_string().find("flow.json:")));
    return m;
  }
  fs::path dir_;
};

TEST_F(WorkflowLoader, LoadsAValidWorkflow) {
  auto r = load(R"({
  "name": "map_reduce",
  "limits": {"recursion_limit": 10, "max_concurrency": 4, "memory": {"run_state": "16MiB"}},
  "state": {"items": {"reducer": "append", "max_items": 100}, "total": {"reducer": "sum", "default": 0},
            "status": {}},
  "tools": {"calc": {"builtin": "calculator"}},
  "nodes": {
    "split": {"kind": "set", "values": {"items": [1, 2, 3]}},
    "fan": {"kind": "map", "over": "items", "node": "square"},
    "square": {"kind": "tool", "tool": "calc", "args": {"expression": "{{item}} * {{item}}"}, "output": "total"},
    "check": {"kind": "router"}
  },
  "edges": [
    {"from": "START", "to": "split"},
    {"from": "split", "to": "fan"},
    {"from": "fan", "to": "check"},
    {"from": "check", "route": {"when": {"channel": "total", "op": ">", "value": 10}, "then": "END", "else": "split"}}
  ]
})");
  ASSERT_TRUE(r.ok()) << r.report();
  const auto& s = *r.spec;
  EXPECT_EQ(s.name, "map_reduce");
  EXPECT_EQ(*s.limits.recursion_limit, 10);
  EXPECT_EQ(*s.limits.memory.run_state, 16 << 20);
  ASSERT_EQ(s.channels.size(), 3u);
  EXPECT_EQ(s.channel("items")->reducer, ReducerKind::append);
  EXPECT_EQ(*s.channel("items")->max_items, 100);
  EXPECT_EQ(s.node("fan")->kind, NodeKind::map);
  ASSERT_EQ(s.edges.size(), 4u);
  ASSERT_TRUE(s.edges[3].route);
  EXPECT_EQ(s.edges[3].route->form, RouteSpec::Form::when);
  EXPECT_EQ(s.edges[3].route->all_targets(), (std::vector<std::string>{"END", "split"}));
}

// Every problem is reported, each with line, column, pointer and a suggestion.
TEST_F(WorkflowLoader, ReportsEveryProblemLikeACompiler) {
  auto r = load(R"({
  "name": "demo",
  "limits": {"recursion_limt": 5},
  "state": {"notes": {"reducer": "apend"}},
  "nodes": {
    "summarize": {"kind": "router"},
    "fetch": {"kind": "tool", "tool": "search"}
  },
  "edges": [
    {"from": "START", "to": "fetch"},
    {"from": "fetch", "to": "sumarize"},
    {"from": "summarize", "to": "END"}
  ]
})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      messages(r),
      (std::vector<std::string>{
          "flow.json:3:32: /limits/recursion_limt: unknown key 'recursion_limt'; did you mean "
          "'recursion_limit'?",
          "flow.json:4:34: /state/notes/reducer: unknown reducer 'apend'; did you mean 'append'?",
          "flow.json:7:39: /nodes/fetch/tool: unknown tool 'search' (none are defined)",
          "flow.json:11:29: /edges/1/to: unknown node 'sumarize'; did you mean 'summarize'?",
      }));
}

// A channel's default must fit its reducer, said at the default (`weir validate` said ok, and
// the run failed at its first write or dropped the default; found by the breaking pass).
TEST_F(WorkflowLoader, AChannelsDefaultMustFitItsReducer) {
  auto r = load(R"({
  "name": "demo",
  "state": {"n": {"reducer": "sum", "default": "abc"}, "xs": {"reducer": "append", "default": 5},
            "ok": {"reducer": "max", "default": 2}},
  "nodes": {"a": {"kind": "set", "values": {"ok": 1}}},
  "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]
})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(messages(r),
            (std::vector<std::string>{
                "flow.json:3:48: /state/n/default: the channel sums numbers, but its default is "
                "\"abc\": give it a number or no default",
                "flow.json:3:95: /state/xs/default: the channel appends to a list, but its "
                "default is 5: give it a list or no default",
            }));
}

TEST_F(WorkflowLoader, StructureErrors) {
  auto r = load(
      R"({"name": "s", "nodes": {"a": {"kind": "router"}, "b": {"kind": "router"}, "c": {"kind": "router"}},
  "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}, {"from": "c", "to": "a"}, {"from": "a", "to": "b"}]})");
  ASSERT_FALSE(r.ok());
  auto m = messages(r);
  ASSERT_EQ(m.size(), 2u) << r.report();
  EXPECT_EQ(m[0], "flow.json:1:55: /nodes/b: node 'b' cannot reach END (it has no outgoing edge)");
  EXPECT_EQ(m[1], "flow.json:1:80: /nodes/c: node 'c' is not reachable from START");
}

// Counts that the runtime holds in 32 bits are bounded where the file is read: 4294967297 was
// cut to 1 (a recursion_limit of one superstep, a single attempt) and 3000000000 went negative.
TEST_F(WorkflowLoader, CountsAreBoundedWhereTheFileIsRead) {
  auto r = load(R"({"name": "big",
  "limits": {"recursion_limit": 4294967297, "max_concurrency": 3000000000,
             "max_concurrent_runs": 1000000000, "max_queued_runs": 100000000000},
  "nodes": {"a": {"kind": "set", "values": {}, "retry": {"max_attempts": 4294967297}}},
  "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
  ASSERT_FALSE(r.ok());
  auto m = messages(r);
  ASSERT_EQ(m.size(), 5u) << r.report();
  EXPECT_EQ(m[0],
            "flow.json:2:33: /limits/recursion_limit: must be at most 1000000, got 4294967297");
  EXPECT_EQ(m[1], "flow.json:2:64: /limits/max_concurrency: must be at most 10000, got 3000000000");
  EXPECT_EQ(m[2],
            "flow.json:3:37: /limits/max_concurrent_runs: must be at most 100000, got 1000000000");
  EXPECT_EQ(m[3],
            "flow.json:3:68: /limits/max_queued_runs: must be at most 10000000, got 100000000000");
  EXPECT_EQ(m[4],
            "flow.json:4:74: /nodes/a/retry/max_attempts: must be at most 1000, got 4294967297");
}

TEST_F(WorkflowLoader, SyntaxErrorPointsAtTheByte) {
  auto r = load(
      "{\n  \"name\": \"x\",\n  \"nodes\": {\"a\": {\"kind\": \"router\"}\n  \"edges\": []\n}");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_NE(r.diagnostics[0].message.find("flow.json:4:3:"), std::string::npos)
      << r.diagnostics[0].message;
}

// A key given twice in one object is an error at its second place, naming the key and where it
// is: one of the two values was kept unsaid.
TEST_F(WorkflowLoader, ADuplicateKeyIsAnError) {
  auto twice = load(R"({"name": "x", "nodes": {"a": {"kind": "router"}},
 "nodes": {"b": {"kind": "router"}}, "edges": []})");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(messages(twice),
            std::vector<std::string>{"flow.json:2:2: duplicate key \"nodes\" (at /nodes)"});
  auto node = load(R"({"name": "x", "nodes": {
  "a": {"kind": "set", "values": {"c": 1}, "kind": "router"}},
  "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(messages(node),
            std::vector<std::string>{"flow.json:2:44: duplicate key \"kind\" (at /nodes/a/kind)"});
  // The same text, not a file.
  auto text = load_workflow_text(R"({"name": "x", "name": "y"})", dir_ / "flow.json");
  EXPECT_EQ(messages(text),
            std::vector<std::string>{"flow.json:1:15: duplicate key \"name\" (at /name)"});
}

TEST_F(WorkflowLoader, RoutesNeedOneFormAndAFallback) {
  auto r = load(R"({"name": "r", "state": {"status": {}}, "nodes": {"a": {"kind": "router"}},
  "edges": [{"from": "START", "to": "a"},
            {"from": "a", "route": {"on": "status", "cases": {"done": "END"}}},
            {"from": "a", "route": {"on": "status", "tool_calls": "a"}},
            {"from": "a", "to": "END", "route": {"tool_calls": "a", "default": "END"}},
            {"from": "a", "route": {"when": {"channel": "status", "op": "<"}, "then": "END", "else": "a"}}]})");
  ASSERT_FALSE(r.ok());
  auto rep = r.report();
  EXPECT_NE(rep.find("/edges/1/route: missing required key 'default'"), std::string::npos) << rep;
  EXPECT_NE(rep.find("/edges/2/route: a route needs exactly one of"), std::string::npos) << rep;
  EXPECT_NE(rep.find("/edges/3: an edge needs exactly one of \"to\" (static) or \"route\""),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("/edges/4/route/when: the operator '<' needs a \"value\""), std::string::npos)
      << rep;
}

TEST_F(WorkflowLoader, SubgraphsLoadRelativeToTheFileAndCyclesAreCaught) {
  write(
      "child.json",
      R"({"name": "child", "state": {"x": {}}, "nodes": {"inc": {"kind": "set", "values": {"x": 1}}},
                         "edges": [{"from": "START", "to": "inc"}, {"from": "inc", "to": "END"}]})");
  auto ok = load(
      R"({"name": "parent", "state": {"y": {}}, "nodes": {"sub": {"kind": "subgraph", "path": "child.json",
                   "output": {"x": "y"}}}, "edges": [{"from": "START", "to": "sub"}, {"from": "sub", "to": "END"}]})");
  ASSERT_TRUE(ok.ok()) << ok.report();
  ASSERT_TRUE(ok.spec->subgraphs.count("sub"));
  EXPECT_EQ(ok.spec->subgraphs.at("sub")->name, "child");

  write("loop.json",
        R"({"name": "loop", "nodes": {"again": {"kind": "subgraph", "path": "loop.json"}},
                        "edges": [{"from": "START", "to": "again"}, {"from": "again", "to": "END"}]})");
  auto cyc = load_workflow_file(dir_ / "loop.json");
  ASSERT_FALSE(cyc.ok());
  EXPECT_NE(cyc.report().find("subgraph 'loop.json' includes itself"), std::string::npos)
      << cyc.report();

  auto missing = load(R"({"name": "p", "nodes": {"s": {"kind": "subgraph", "path": "nope.json"}},
                        "edges": [{"from": "START", "to": "s"}, {"from": "s", "to": "END"}]})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.report().find("cannot read subgraph file"), std::string::npos);
}

// A subgraph node's mappings name channels of both files (`weir validate` once said ok, and
// only building the graph refused them, without a place).
TEST_F(WorkflowLoader, SubgraphMappingsNameChannelsOfBothFiles) {
  write("child.json", R"({"name": "child", "state": {"y": {}, "q": {}},
    "nodes": {"inc": {"kind": "set", "values": {"y": 1}}},
    "edges": [{"from": "START", "to": "inc"}, {"from": "inc", "to": "END"}]})");
  auto r = load(R"({"name": "p", "state": {"ys": {}, "z": {}},
 "nodes": {"w": {"kind": "subgraph", "path": "child.json", "input": {"x": "q", "z": "qq"},
                 "output": {"y": "yz", "q": "z"}}},
 "edges": [{"from": "START", "to": "w"}, {"from": "w", "to": "END"}]})");
  ASSERT_FALSE(r.ok());
  std::vector<std::string> got;
  for (const auto& d : r.diagnostics) got.push_back(d.pointer + ": " + d.message);
  EXPECT_EQ(got, (std::vector<std::string>{
                     "/nodes/w/input/x: maps unknown channel 'x' (known: ys, z)",
                     "/nodes/w/input/z: maps the subgraph's unknown channel 'qq'; did you mean "
                     "'q'?",
                     "/nodes/w/output/y: maps unknown channel 'yz'; did you mean 'ys'?",
                 }));
}

// Expressions are the tools layer's: their checks are in tests/agents/workflow_test.cpp.
TEST_F(WorkflowLoader, TyposInTemplatesAndMapSettingsArePositioned) {
  auto r = load(R"J({"name": "t", "state": {"counter": {}, "items": {}, "out": {}},
 "tools": {"calc": {"builtin": "calculator"}},
 "nodes": {"a": {"kind": "set", "values": {"counter": {"$expr": 5}}},
           "b": {"kind": "tool", "tool": "calc", "args": {"expression": "{{state.countr}} + 1"}, "output": "out"},
           "m": {"kind": "map", "over": "items", "node": "b", "item_key": "x", "output": "out", "max_concurrency": 2}},
 "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "m"}, {"from": "b", "to": "END"}]})J");
  ASSERT_FALSE(r.ok());
  const std::string rep = r.report();
  EXPECT_NE(rep.find(":3:65: /nodes/a/values/counter/$expr: an expression must be a string like "
                     "\"counter + 1\""),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("/nodes/b/args/expression: template {{state.countr}}: unknown channel "
                     "'countr'; did you mean 'counter'?"),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("/nodes/m/item_key: a map node has no \"item_key\""), std::string::npos);
  EXPECT_NE(rep.find("/nodes/m/output: a map node has no \"output\""), std::string::npos);
  EXPECT_NE(rep.find("/nodes/m/max_concurrency: a map node has no \"max_concurrency\""),
            std::string::npos);
}

TEST_F(WorkflowLoader, ManyErrorsAreCappedAndCounted) {
  std::string nodes;
  for (int i = 0; i < 150; ++i)
    nodes += (i ? "," : "") + std::string("\"n") + std::to_string(i) + "\": {\"kind\": \"nope\"}";
  auto r = load("{\"name\": \"t\", \"nodes\": {" + nodes +
                "}, \"edges\": [{\"from\": \"START\", \"to\": \"END\"}]}");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 101u);
  EXPECT_NE(r.diagnostics.back().message.find(": 50 more errors not shown"), std::string::npos)
      << r.diagnostics.back().message;
}

// A chain of `n` set nodes, one line a node and one an edge (n0 -> n1 -> ... -> END).
std::string chain_workflow(int n, const std::string& last_target = "END") {
  std::string text = "{\"name\": \"big\", \"state\": {\"c\": {}}, \"nodes\": {\n";
  for (int i = 0; i < n; ++i)
    text += (i ? ",\n" : "") + std::string("\"n") + std::to_string(i) +
            "\": {\"kind\": \"set\", \"description\": \"" + std::string(100, 'd') +
            "\", \"values\": {\"c\": " + std::to_string(i) + "}}";
  text += "},\n\"edges\": [\n{\"from\": \"START\", \"to\": \"n0\"}";
  for (int i = 1; i < n; ++i)
    text +=
        ",\n{\"from\": \"n" + std::to_string(i - 1) + "\", \"to\": \"n" + std::to_string(i) + "\"}";
  return text + ",\n{\"from\": \"n" + std::to_string(n - 1) + "\", \"to\": \"" + last_target +
         "\"}]}\n";
}

TEST_F(WorkflowLoader, LargeFilesLoadWithTheirSettingsAndPositions) {
  // Over 1 MiB, parsed as the file is read: the text is read again only to place a diagnostic.
  const int n = 8000;
  auto r = load(chain_workflow(n));
  ASSERT_TRUE(r.ok()) << r.report();
  ASSERT_EQ(r.spec->nodes.size(), std::size_t(n));
  EXPECT_EQ(r.spec->nodes[n - 1].name, "n7999");
  EXPECT_EQ(r.spec->nodes[n - 1].description, std::string(100, 'd'));
  EXPECT_EQ(boost::json::serialize(r.spec->nodes[n - 1].params), R"({"values":{"c":7999}})");
  EXPECT_EQ(r.spec->edges.back().to, std::vector<std::string>{"END"});
  // The last edge names a node that does not exist: line 2 + n nodes + n edges, column 25 (the
  // value).
  auto bad = load(chain_workflow(n, "n8000"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(
      messages(bad),
      (std::vector<std::string>{"flow.json:" + std::to_string(2 * n + 3) +
                                ":25: /edges/8000/to: unknown node 'n8000' (8000 are defined)"}));
}

// Over 1 MiB a file is parsed by another parser (as it is read), and a text too: a duplicate
// key is found there as well, with the same message.
TEST_F(WorkflowLoader, ADuplicateKeyIsAnErrorInALargeFile) {
  std::string text = chain_workflow(8000);
  const std::string last = "\"n7999\": {\"kind\": \"set\", ";
  const auto at = text.find(last);
  ASSERT_NE(at, std::string::npos);
  text.insert(at + last.size(), "\"kind\": \"set\", ");
  ASSERT_GE(text.size(), std::size_t{1} << 20);
  const std::vector<std::string> want = {
      "flow.json:8001:26: duplicate key \"kind\" (at /nodes/n7999/kind)"};
  EXPECT_EQ(messages(load(text)), want);
  EXPECT_EQ(messages(load_workflow_text(text, dir_ / "flow.json")), want);
}

TEST_F(WorkflowLoader, MissingFileAndResultForm) {
  auto r = load_workflow(dir_ / "absent.json");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::invalid_workflow));
  EXPECT_NE(r.error().message.find(
                "absent.json: cannot read the workflow file: No such file or directory"),
            std::string::npos);
}

// weir::graph keeps the sections of the layers above as written, knowing their names; a
// checker they give (agents::workflow_checks()) reports into the same diagnostics, with
// positions. Without one only the names and the shape (an object) are checked here.
TEST_F(WorkflowLoader, SectionsOfOtherLayersAreKeptAndCheckedByTheirCheckers) {
  const std::string text = R"({"name": "t", "state": {"out": {}},
 "models": {"m": {"path": "m.gguf", "whatever": 1}},
 "tools": {"calc": {"builtin": "calculator"}, "2bad": {}},
 "mcp_servers": {"fs": 7},
 "agents": {"helper": {"role": "r"}},
 "nodes": {"a": {"kind": "tool", "tool": "calc", "output": "out"},
           "b": {"kind": "tool", "tool": "fs/read", "output": "out"},
           "c": {"kind": "agent", "agent": "helpr"}},
 "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "b"}, {"from": "b", "to": "c"},
           {"from": "c", "to": "END"}]})";
  auto r = load_workflow_text(text, dir_ / "flow.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(messages(r),
            (std::vector<std::string>{
                "flow.json:3:55: /tools/2bad: tool name '2bad' must start with a letter or '_' and "
                "use only letters, digits, '_' and '-'",
                "flow.json:4:24: /mcp_servers/fs: expected an object, got an integer",
                "flow.json:8:44: /nodes/c/agent: unknown agent 'helpr'; did you mean 'helper'?"}));
  WorkflowChecks checks;
  std::vector<std::string> seen;
  checks.model = [&](std::string_view name, const boost::json::value& v, const std::string& ptr,
                     const SectionContext& ctx, JsonFields& f) {
    seen.push_back("model " + std::string(name) + " at " + ptr);
    EXPECT_EQ(ctx.base_dir, fs::absolute(dir_));
    if (v.as_object().contains("whatever")) f.error(ptr + "/whatever", "not a model setting");
  };
  checks.agent = [&](std::string_view name, const boost::json::value&, const std::string& ptr,
                     const SectionContext& ctx, JsonFields&) {
    seen.push_back("agent " + std::string(name) + " at " + ptr + " sees tools " +
                   std::to_string(ctx.tools.size()) + ", servers " +
                   std::to_string(ctx.mcp_servers.size()));
  };
  auto c = load_workflow_text(text, dir_ / "flow.json", checks);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(messages(c).front(), "flow.json:2:49: /models/m/whatever: not a model setting");
  EXPECT_EQ(seen, (std::vector<std::string>{"model m at /models/m",
                                            "agent helper at /agents/helper sees tools 1, "
                                            "servers 1"}));
}

}  // namespace
}  // namespace weir::graph
