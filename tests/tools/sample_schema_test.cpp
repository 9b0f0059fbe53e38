// The sample files validate against their JSON Schemas (schemas/*.schema.json), and the
// schemas agree with the loaders: what a schema rejects, the loader rejects at the same place.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "weir/agents/crew_file.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/tools/schema.hpp"

namespace weir::tools {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

const fs::path kSource = WEIR_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json::value read_json(const fs::path& p) {
  return json::parse(read_text(p));
}

const Schema& schema(const char* file) {
  static std::map<std::string, Schema> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    auto s = Schema::compile(read_json(kSource / "schemas" / file));
    if (!s) throw std::runtime_error(std::string(file) + ": " + s.error().message);
    it = cache.emplace(file, std::move(*s)).first;
  }
  return it->second;
}
const Schema& workflow_schema() {
  return schema("workflow.schema.json");
}
const Schema& crew_schema() {
  return schema("crew.schema.json");
}

std::vector<fs::path> samples(const char* folder) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kSource / "samples" / folder))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string violation(const Schema& s, const json::value& v) {
  auto st = s.validate(v);
  return st ? "ok" : st.error().message;
}

// The workflow loader's report for `v` (as if it were samples/workflows/x.json), or "ok": the
// graph layer's checks and the sections' (agents::workflow_checks), as weir run loads a file.
std::string workflow_loader(const json::value& v) {
  auto load = graph::load_workflow_text(json::serialize(v), kSource / "samples/workflows/x.json",
                                        agents::workflow_checks());
  return load.ok() ? "ok" : load.report();
}

std::string crew_loader(const json::value& v) {
  auto f = agents::parse_agents_file(json::serialize(v), kSource / "samples/crews/x.json");
  return f ? "ok" : f.error().message;
}

// A copy of samples/<folder>/<name> changed by `edit`.
json::value edited(const char* folder, const char* name,
                   const std::function<void(json::object&)>& edit) {
  json::value v = read_json(kSource / "samples" / folder / name);
  edit(v.as_object());
  return v;
}

TEST(SampleSchemaTest, SchemasAreWellFormed) {
  for (const char* f : {"workflow.schema.json", "crew.schema.json"}) {
    SCOPED_TRACE(f);
    const json::value v = read_json(kSource / "schemas" / f);
    ASSERT_TRUE(v.is_object());
    auto st = check_schema(v.as_object());
    EXPECT_TRUE(st) << st.error().message;
  }
}

TEST(SampleSchemaTest, EveryWorkflowSampleValidates) {
  const auto files = samples("workflows");
  ASSERT_GE(files.size(), 4u);
  for (const auto& p : files) {
    SCOPED_TRACE(p.filename().string());
    const json::value v = read_json(p);
    EXPECT_EQ(v.at("$schema"), "../../schemas/workflow.schema.json");
    EXPECT_EQ(violation(workflow_schema(), v), "ok");
    // The loader agrees that the sample is good.
    auto load = graph::load_workflow_file(p, agents::workflow_checks());
    EXPECT_TRUE(load.ok()) << load.report();
  }
}

TEST(SampleSchemaTest, EveryCrewSampleValidates) {
  // crew_file.cpp has no "$schema" key, so samples/crews/* map to crew.schema.json here.
  const auto files = samples("crews");
  ASSERT_GE(files.size(), 2u);
  for (const auto& p : files) {
    SCOPED_TRACE(p.filename().string());
    EXPECT_EQ(violation(crew_schema(), read_json(p)), "ok");
    auto f = agents::load_agents_file(p);
    EXPECT_TRUE(f) << f.error().message;
  }
}

struct Case {
  const char* what;
  std::function<void(json::object&)> edit;
  std::string schema_message;
  std::string loader_pointer;  // where the loader reports the same problem ("": the root)
};

void expect_rejected(const char* folder, const char* sample, const std::vector<Case>& cases) {
  const bool workflow = std::string(folder) == "workflows";
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const json::value v = edited(folder, sample, c.edit);
    EXPECT_EQ(violation(workflow ? workflow_schema() : crew_schema(), v), c.schema_message);
    const std::string loader = workflow ? workflow_loader(v) : crew_loader(v);
    EXPECT_NE(loader, "ok");
    // The root has no pointer in a diagnostic: "x.json:1:1: missing required key 'task'".
    EXPECT_NE(loader.find(c.loader_pointer.empty() ? ":1:1: " : ": " + c.loader_pointer + ": "),
              std::string::npos)
        << loader;
  }
}

TEST(SampleSchemaTest, BrokenWorkflowsFailWithPointers) {
  auto node = [](json::object& w, const char* name) -> json::object& {
    return w["nodes"].as_object()[name].as_object();
  };
  expect_rejected(
      "workflows", "map_reduce.json",
      {
          {"misspelt edge key",
           [](json::object& w) {
             auto& e = w["edges"].as_array()[0].as_object();
             e["too"] = e["to"];
             e.erase("to");
           },
           "/edges/0/too: unexpected property (allowed: from, to, route)", "/edges/0/too"},
          {"misspelt node key",
           [&](json::object& w) {
             auto& n = node(w, "square");
             n["outptu"] = n["output"];
             n.erase("output");
           },
           R"(/nodes/square/outptu: invalid property name: expected one of "kind", "description", "max_visits", "retry", "timeout_ms", "tool", "args", "output", got "outptu")",
           "/nodes/square/outptu"},
          {"wrong type", [](json::object& w) { w["limits"].as_object()["max_concurrency"] = "4"; },
           "/limits/max_concurrency: expected integer, got string", "/limits/max_concurrency"},
          {"unknown node kind", [&](json::object& w) { node(w, "fan")["kind"] = "mapp"; },
           R"(/nodes/fan/kind: expected one of "set", "tool", "llm", "agent", "router", "map", "subgraph", "interrupt", "crew", got "mapp")",
           "/nodes/fan/kind"},
          {"set node without values", [&](json::object& w) { node(w, "join").erase("values"); },
           "/nodes/join/values: missing required property", "/nodes/join"},
          {"edge with both to and route",
           [](json::object& w) {
             w["edges"].as_array()[2].as_object()["route"] = json::parse(
                 R"({"when":{"channel":"mean","op":"exists"},"then":"END","else":"fan"})");
           },
           "/edges/2: matches oneOf branches 0 and 1, expected exactly one", "/edges/2"},
          {"bad node name",
           [](json::object& w) {
             w["nodes"].as_object()["2nd"] = json::parse(R"({"kind":"router"})");
           },
           R"(/nodes/2nd: invalid property name: "2nd" does not match the pattern "^[A-Za-z_][A-Za-z0-9_-]*$")",
           "/nodes/2nd"},
      });
}

// Rules the workflow loader enforces beyond keys and types, which the schema states too.
TEST(SampleSchemaTest, WorkflowSchemaFollowsTheLoadersRules) {
  expect_rejected(
      "workflows", "map_reduce.json",
      {
          {"llm node without prompt or messages",
           [](json::object& w) {
             w["models"] = json::parse(R"({"m":{"path":"m.gguf"}})");
             w["nodes"].as_object()["ask"] = json::parse(R"({"kind":"llm","model":"m"})");
           },
           "/nodes/ask: matches none of the anyOf branches (0: /nodes/ask/prompt: missing "
           "required property; 1: /nodes/ask/messages: missing required property)",
           "/nodes/ask"},
          {"expression that is not a string",
           [](json::object& w) {
             w["nodes"].as_object()["join"].as_object()["values"] =
                 json::parse(R"({"mean":{"$expr":5}})");
           },
           "/nodes/join/values/mean/$expr: expected string, got number",
           "/nodes/join/values/mean/$expr"},
          {"reserved node name",
           [](json::object& w) {
             w["nodes"].as_object()["END"] = json::parse(R"({"kind":"router"})");
           },
           R"(/nodes/END: invalid property name: must not match the schema under "not" ({"enum":["START","END"]}))",
           "/nodes/END"},
      });
  expect_rejected("workflows", "human_review.json",
                  {
                      {"max_items without the append reducer",
                       [](json::object& w) {
                         w["state"].as_object()["notes"].as_object()["reducer"] = "last_value";
                       },
                       R"(/state/notes/reducer: expected "append", got "last_value")",
                       "/state/notes/max_items"},
                      {"then in an \"on\" route",
                       [](json::object& w) {
                         w["edges"].as_array()[3].as_object()["route"].as_object()["then"] = "note";
                       },
                       "/edges/3/route/then: no value is allowed here (the schema is false)",
                       "/edges/3/route/then"},
                      {"\"on\" route without a default",
                       [](json::object& w) {
                         w["edges"].as_array()[3].as_object()["route"].as_object().erase("default");
                       },
                       "/edges/3/route/default: missing required property", "/edges/3/route"},
                  });
  expect_rejected(
      "workflows", "loop_guard.json",
      {
          {"comparison without a value",
           [](json::object& w) {
             w["edges"].as_array()[2].as_object()["route"].as_object()["when"] =
                 json::parse(R"({"channel":"answer","op":"=="})");
           },
           "/edges/2/route/when/value: missing required property", "/edges/2/route/when"},
          {"two route forms",
           [](json::object& w) {
             auto& r = w["edges"].as_array()[2].as_object()["route"].as_object();
             r["tool_calls"] = "END";
             r["default"] = "END";
           },
           "/edges/2/route: matches oneOf branches 1 and 2, expected exactly one",
           "/edges/2/route"},
      });
  expect_rejected("workflows", "big_payload.json",
                  {
                      {"files tool without a root",
                       [](json::object& w) {
                         w["tools"].as_object()["generate"] = json::parse(R"({"builtin":"files"})");
                       },
                       "/tools/generate/root: missing required property", "/tools/generate"},
                  });
}

TEST(SampleSchemaTest, ByteSizesAsTheLoaderReadsThem) {
  for (const char* size : {"256KiB", " 1.5 MiB ", "4096", "10GB"}) {
    SCOPED_TRACE(size);
    const json::value v = edited("workflows", "big_payload.json", [&](json::object& w) {
      w["limits"].as_object()["max_state_bytes"] = size;
    });
    EXPECT_EQ(violation(workflow_schema(), v), "ok");
    EXPECT_EQ(workflow_loader(v), "ok");
  }
  const json::value bad = edited("workflows", "big_payload.json", [](json::object& w) {
    w["limits"].as_object()["max_state_bytes"] = "256 KB/s";
  });
  EXPECT_EQ(violation(workflow_schema(), bad),
            "/limits/max_state_bytes: matches none of the oneOf branches (0: "
            "/limits/max_state_bytes: expected integer, got string; 1: /limits/max_state_bytes: "
            "\"256 KB/s\" does not match the pattern "
            "\"^\\\\s*[0-9]+(\\\\.[0-9]+)?\\\\s*(B|KiB|MiB|GiB|KB|MB|GB)?\\\\s*$\")");
  EXPECT_NE(workflow_loader(bad).find(": /limits/max_state_bytes: "), std::string::npos);
}

TEST(SampleSchemaTest, BrokenCrewsFailWithPointers) {
  auto agent = [](json::object& f, std::size_t i) -> json::object& {
    return f["agents"].as_array()[i].as_object();
  };
  expect_rejected(
      "crews", "research_crew.json",
      {
          {"misspelt agent key",
           [&](json::object& f) {
             auto& a = agent(f, 1);
             a["max_iters"] = a["max_iter"];
             a.erase("max_iter");
           },
           "/agents/1/max_iters: unexpected property (allowed: name, role, goal, backstory, "
           "tools, max_iter, history, max_tokens_per_turn, temperature, seed)",
           "/agents/1/max_iters"},
          {"wrong type", [&](json::object& f) { agent(f, 0)["max_iter"] = "4"; },
           "/agents/0/max_iter: expected integer, got string", "/agents/0/max_iter"},
          {"unknown kind", [](json::object& f) { f["kind"] = "team"; },
           R"(/kind: expected one of "crew", "group_chat", got "team")", "/kind"},
          {"sequential task without an agent",
           [](json::object& f) { f["tasks"].as_array()[1].as_object().erase("agent"); },
           "/tasks/1/agent: missing required property", "/tasks/1"},
          {"crew limit below its minimum",
           [](json::object& f) { f["limits"].as_object()["summary_bytes"] = 10; },
           "/limits/summary_bytes: 10 is less than the minimum 64", "/limits/summary_bytes"},
          {"unknown tool", [](json::object& f) { f["tools"].as_object()["lorm"] = json::object(); },
           "/tools/lorm: unexpected property (allowed: calculator, artifacts, lorem, sleep, "
           "doc_search, files)",
           "/tools/lorm"},
          {"tool setting out of range",
           [](json::object& f) {
             f["tools"].as_object()["artifacts"] = json::parse(R"({"max_concurrency": 0})");
           },
           "/tools/artifacts/max_concurrency: 0 is less than the minimum 1",
           "/tools/artifacts/max_concurrency"},
          {"engine setting (one reader with workflow models)",
           [](json::object& f) { f["engine"] = json::parse(R"({"kv_cache_type": "q8"})"); },
           R"(/engine/kv_cache_type: expected one of "f32", "f16", "q8_0", got "q8")",
           "/engine/kv_cache_type"},
      });
  expect_rejected(
      "crews", "group_chat.json",
      {
          {"termination condition with two keys",
           [](json::object& f) {
             f["termination"].as_object()["any"].as_array()[1] =
                 json::parse(R"({"text_mention":"OK","max_messages":3})");
           },
           "/termination/any/1: object of 2 properties has more than maxProperties 1",
           "/termination/any/1"},
          {"window below its minimum",
           [](json::object& f) { f["window"].as_object()["max_tokens"] = 8; },
           "/window/max_tokens: 8 is less than the minimum 16", "/window/max_tokens"},
          {"crew-only limit in a group chat",
           [](json::object& f) { f["limits"] = json::parse(R"({"summary_bytes":600})"); },
           "/limits/summary_bytes: unexpected property (allowed: token_budget)",
           "/limits/summary_bytes"},
          {"unknown speaker selection", [](json::object& f) { f["speaker_selection"] = "random"; },
           R"(/speaker_selection: expected one of "round_robin", "model", got "random")",
           "/speaker_selection"},
          {"group chat without its task", [](json::object& f) { f.erase("task"); },
           "/task: missing required property", ""},
      });
}

TEST(SampleSchemaTest, HierarchicalCrewTasksNeedNoAgent) {
  const json::value v = edited("crews", "research_crew.json", [](json::object& f) {
    f["process"] = "hierarchical";
    f["tasks"].as_array()[1].as_object().erase("agent");
  });
  EXPECT_EQ(violation(crew_schema(), v), "ok");
  EXPECT_EQ(crew_loader(v), "ok");
}

}  // namespace
}  // namespace weir::tools
