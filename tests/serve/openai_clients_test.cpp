// weir serve through the official clients, from npm (tests/serve/clients, installed by its
// setup script; skipped with the reason when node or the packages are missing): the openai
// package's create and stream helper, and LangChain.js's ChatOpenAI.bindTools with invoke and
// streamed chunks, all with tool_choice "required" or a named function and max_tokens 64, get
// a tool call with finish_reason "tool_calls" whose arguments validate; JSON with
// response_format and stop sequences comes back whole.
#include <gtest/gtest.h>

#include <cstdio>

#include <boost/json.hpp>

#include "serve_fixture.hpp"
#include "weir/tools/schema.hpp"

namespace weir::serve {
namespace {

const char* kWeather =
    R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["city"],"additionalProperties":false})";
const char* kSearch =
    R"({"type":"object","properties":{"q":{"type":"string"}},"required":["q"],"additionalProperties":false})";

void expect_call(const json::value& call, const std::string& want_name = "") {
  const std::string name(call.at("name").as_string());
  if (!want_name.empty()) EXPECT_EQ(name, want_name);
  ASSERT_TRUE(name == "weather" || name == "search") << name;
  // openai: arguments as JSON text; LangChain: parsed into args.
  json::value args;
  if (const auto* a = call.as_object().if_contains("arguments")) {
    boost::system::error_code ec;
    args = json::parse(a->as_string(), ec);
    ASSERT_FALSE(ec) << "arguments do not parse: " << a->as_string();
  } else {
    args = call.at("args");
  }
  auto st = tools::validate(json::parse(name == "weather" ? kWeather : kSearch), args);
  EXPECT_TRUE(st) << (st ? "" : st.error().message) << ": " << json::serialize(args);
}

TEST(OpenAiClients, ToolCallsAndJsonThroughTheOfficialClients) {
  const std::string dir = std::string(WEIR_SOURCE_DIR) + "/tests/serve/clients";
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !fs::exists(dir + "/node_modules/openai") ||
      !fs::exists(dir + "/node_modules/@langchain/openai"))
    GTEST_SKIP() << "node or tests/serve/clients/node_modules is missing (run "
                    "tests/serve/clients/setup, which needs npm and its registry)";
  auto s = start(tiny_config("clients", 1024));
  const std::string cmd = "node " + dir +
                          "/clients.mjs http://127.0.0.1:" + std::to_string(s.port) +
                          "/v1 clients 64 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  boost::system::error_code ec;
  const json::value v = json::parse(out, ec);
  ASSERT_FALSE(ec) << out;

  const auto& create = v.at("create");
  EXPECT_EQ(create.at("finish"), "tool_calls") << out;
  EXPECT_TRUE(create.at("content").is_null()) << out;
  ASSERT_EQ(create.at("calls").as_array().size(), 1u) << out;
  EXPECT_EQ(create.at("calls").at(0).at("type"), "function");
  EXPECT_FALSE(create.at("calls").at(0).at("id").as_string().empty());
  expect_call(create.at("calls").at(0));

  const auto& stream = v.at("stream");  // the stream helper assembled the deltas
  EXPECT_EQ(stream.at("finish"), "tool_calls") << out;
  ASSERT_EQ(stream.at("calls").as_array().size(), 1u) << out;
  EXPECT_FALSE(stream.at("calls").at(0).at("id").as_string().empty());
  expect_call(stream.at("calls").at(0), "weather");
  ASSERT_EQ(stream.at("done").as_array().size(), 1u) << out;
  expect_call(stream.at("done").at(0), "weather");

  const auto& js = v.at("json");
  EXPECT_EQ(js.at("finish"), "stop") << out;
  const json::value person = json::parse(js.at("content").as_string(), ec);
  ASSERT_FALSE(ec) << out;
  EXPECT_TRUE(tools::validate(
      json::parse(
          R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false})"),
      person))
      << out;

  for (const char* k : {"langchain", "langchain_stream"}) {
    SCOPED_TRACE(k);
    const auto& lc = v.at(k);
    EXPECT_EQ(lc.at("finish"), "tool_calls") << out;
    ASSERT_EQ(lc.at("calls").as_array().size(), 1u) << out;
    EXPECT_TRUE(lc.at("invalid").as_array().empty()) << out;
    expect_call(lc.at("calls").at(0));
  }
}

}  // namespace
}  // namespace weir::serve
