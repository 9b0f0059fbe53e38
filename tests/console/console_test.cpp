// The web console: `weir serve --console` serves the page embedded in the binary (types, the
// headers that keep it to itself, the key and browser rules), and a real browser uses it as a
// person would (tests/console/browser/console_flows.mjs: headless Chromium driven by
// puppeteer-core). The browser test skips, saying why, without node, chromium or the package
// (tests/console/browser/setup installs it).
#include <gtest/gtest.h>

#include <cstdlib>

#include "serve_child.hpp"
#include "serve_fixture.hpp"

namespace weir::serve {
namespace {

ServeConfig console_config() {
  ServeConfig c;
  c.workflows = fs::path(WEIR_SOURCE_DIR) / "samples/workflows";
  c.console = true;
  return c;
}

TEST(Console, OffIsA404ThatSaysHowToTurnItOn) {
  ServeConfig c = console_config();
  c.console = false;
  auto s = start(c);
  for (const char* path : {"/console", "/console/", "/console/app.js"}) {
    auto r = call(s.port, "GET", path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(error_message(r),
              "the console is off: start weir serve with --console (and --workflows DIR for its "
              "runs), then open /console")
        << path;
  }
  // A path that only starts like it is another route.
  EXPECT_EQ(call(s.port, "GET", "/consoles").status, 404);
}

TEST(Console, ServesTheEmbeddedPageWithItsTypesAndHeaders) {
  auto s = start(console_config());
  for (const char* path : {"/console", "/console/", "/console/index.html"}) {
    auto r = call(s.port, "GET", path);
    ASSERT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.header("content-type"), "text/html; charset=utf-8") << path;
    EXPECT_NE(r.body.find("<title>weir console</title>"), std::string::npos) << path;
    EXPECT_NE(r.body.find("src=\"/console/app.js\""), std::string::npos) << path;
    EXPECT_NE(r.header("content-security-policy").find("default-src 'self'"), std::string::npos);
    EXPECT_NE(r.header("content-security-policy").find("frame-ancestors 'none'"),
              std::string::npos);
    EXPECT_EQ(r.header("x-content-type-options"), "nosniff");
    EXPECT_EQ(r.header("x-frame-options"), "DENY");
  }
  for (const char* js :
       {"/console/app.js", "/console/api.js", "/console/graph.js", "/console/charts.js"}) {
    auto r = call(s.port, "GET", js);
    EXPECT_EQ(r.status, 200) << js;
    EXPECT_EQ(r.header("content-type"), "text/javascript; charset=utf-8") << js;
    EXPECT_FALSE(r.body.empty()) << js;
  }
  auto css = call(s.port, "GET", "/console/console.css");
  EXPECT_EQ(css.status, 200);
  EXPECT_EQ(css.header("content-type"), "text/css; charset=utf-8");

  auto missing = call(s.port, "GET", "/console/nope.js");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(error_message(missing),
            "no console file /console/nope.js (files: api.js, app.js, charts.js, console.css, "
            "graph.js, index.html)");
  auto post = call(s.port, "POST", "/console", "{}");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(error_message(post), "POST is not allowed on /console; use GET");
}

TEST(Console, KeepsTheBrowserRulesOfEveryRoute) {
  auto s = start(console_config());
  // A page of another site (or a DNS-rebound name) cannot read it: the Host and Origin rules.
  EXPECT_EQ(call(s.port, "GET", "/console", "", "Host: evil.example:8080\r\n").status, 403);
  EXPECT_EQ(call(s.port, "GET", "/console", "", "Origin: http://evil.example\r\n").status, 403);
  EXPECT_EQ(call(s.port, "GET", "/console", "", "Host: localhost:1234\r\n").status, 200);
}

TEST(Console, WithAKeyThePageLoadsAndItsDataStillNeedsTheKey) {
  ServeConfig c = console_config();
  c.api_key = "sekrit";
  auto s = start(c);
  // A browser cannot send a header when it opens a page: the files (no data, no secret) load,
  // the page asks for the key and sends it on each API call.
  EXPECT_EQ(call(s.port, "GET", "/console").status, 200);
  EXPECT_EQ(call(s.port, "GET", "/console/app.js").status, 200);
  EXPECT_EQ(call(s.port, "GET", "/console/nope.js").status, 401);  // not a file of the page
  EXPECT_EQ(call(s.port, "POST", "/threads/search", "{}").status, 401);
  EXPECT_EQ(call(s.port, "GET", "/metrics").status, 401);
  EXPECT_EQ(call(s.port, "POST", "/threads/search", "{}", "X-Api-Key: sekrit\r\n").status, 200);
  // Without --console, the key guards /console like any route.
  c.console = false;
  auto off = start(c);
  EXPECT_EQ(call(off.port, "GET", "/console").status, 401);
}

TEST(Console, MetricsCarryTheBudgetLimitsItDraws) {
  auto s = start(console_config());
  // The request bodies' memory (--request-memory-mb, 512 MiB by default) is the one category
  // with a limit of its own here.
  EXPECT_EQ(metric(s.port, "weir_memory_limit_bytes{category=\"run_state\"}"), 536870912.0);
  EXPECT_TRUE(std::isnan(metric(s.port, "weir_memory_limit_bytes{category=\"kv_cache\"}")));
  EXPECT_EQ(metric(s.port, "weir_memory_used_bytes{category=\"kv_cache\"}"), 0.0);
}

// --- in a real browser ----------------------------------------------------------------------

std::string browser_dir() {
  return std::string(WEIR_SOURCE_DIR) + "/tests/console/browser";
}

std::string chromium() {
  if (const char* c = std::getenv("WEIR_CHROMIUM")) return c;
  return "/usr/bin/chromium";
}

// Why the browser tests cannot run here ("" when they can).
std::string no_browser() {
  if (std::system("command -v node >/dev/null 2>&1") != 0)
    return "node is missing (apt-get install nodejs)";
  if (!fs::exists(chromium()))
    return chromium() + " is missing (apt-get install chromium; scripts/setup does)";
  if (!fs::exists(browser_dir() + "/node_modules/puppeteer-core"))
    return "tests/console/browser/node_modules is missing (run tests/console/browser/setup, "
           "which needs npm and its registry)";
  return "";
}

// Runs `node tests/console/browser/<script> http://127.0.0.1:<port> <shots> <chromium>` and
// reads the JSON object it prints (null, with a failure, when it does not).
json::value run_flow(const std::string& script, const std::string& port, const std::string& shots) {
  return run_node_json("node " + browser_dir() + "/" + script + " http://127.0.0.1:" + port + " " +
                       shots + " " + chromium());
}

TEST(ConsoleBrowser, HumanReviewStartedAnsweredAndForkedInThePage) {
  if (auto why = no_browser(); !why.empty()) GTEST_SKIP() << why;
  // The binary, as a user starts it, on a free loopback port.
  auto child = testing_serve::spawn({"serve", "--console", "--port", "0", "--workflows",
                                     std::string(WEIR_SOURCE_DIR) + "/samples/workflows"});
  auto m = child->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << child->err;
  const std::string port = m[1];
  EXPECT_NE(child->err.find("/console = on"), std::string::npos) << child->err;
  const std::string shots = WEIR_CONSOLE_SHOTS;
  fs::remove_all(shots);
  const json::value v = run_flow("console_flows.mjs", port, shots);
  ASSERT_TRUE(v.is_object());
  const std::string all = json::serialize(v);

  // Nothing went wrong in the page: no console error, no failed request, no step that timed out.
  EXPECT_TRUE(v.at("problems").as_array().empty()) << all;
  EXPECT_FALSE(v.as_object().contains("failed")) << all;

  EXPECT_EQ(v.at("title"), "weir console");
  EXPECT_EQ(json::serialize(v.at("assistants")),
            R"(["big_payload","human_review","loop_guard","map_reduce"])");
  EXPECT_EQ(v.at("empty_count"), "0 threads");

  // Started from the form: the graph is drawn, the run waits at review with its payload.
  EXPECT_EQ(json::serialize(v.at("graph_nodes")),
            R"(["__start__","write","review","decide","note","publish","__end__"])");
  EXPECT_EQ(json::serialize(v.at("waiting_nodes")), R"(["review"])");
  EXPECT_EQ(v.at("live"), "waiting for input at review");
  EXPECT_EQ(v.at("interrupt_title"), "Waiting for you at review");
  EXPECT_EQ(json::serialize(v.at("interrupt_payload")),
            R"({"question":"approve, or write what to change",)"
            R"("draft":"A short note on bounded queues (revision 0)."})");
  EXPECT_EQ(v.at("status_interrupted"), "interrupted");

  // The form refuses what is not JSON, before sending anything.
  EXPECT_EQ(v.at("bad_json_disabled"), true);
  EXPECT_NE(std::string(v.at("bad_json_error").as_string()).find("not JSON"), std::string::npos)
      << all;
  EXPECT_EQ(v.at("good_json_disabled"), false);

  // Answered: the run went on to publish and the thread is idle.
  EXPECT_EQ(v.at("status_finished"), "idle");
  EXPECT_EQ(json::serialize(v.at("steps")),
            R"(["input","write","review","review","decide","publish"])");
  EXPECT_EQ(json::serialize(v.at("visited")),
            R"(["__start__","write","review","decide","publish","__end__"])");
  EXPECT_EQ(json::serialize(v.at("runs_after_resume")), R"(["success","success"])");
  EXPECT_EQ(json::serialize(v.at("last_diff")), R"(["+ published added"])");
  EXPECT_EQ(json::serialize(v.at("step1_diff")), R"(["+ draft added","+ revision added"])");

  // Forked from step 1: a third run, which stops at the review again.
  EXPECT_EQ(v.at("runs_after_fork"), 3);
  EXPECT_EQ(v.at("status_forked"), "interrupted");
  EXPECT_EQ(v.at("forked_payload"), v.at("interrupt_payload"));

  // A thread whose metadata names a graph this server does not run still shows in full.
  EXPECT_EQ(v.at("renamed_status"), 200);
  EXPECT_EQ(v.at("renamed_steps"), true);
  EXPECT_GT(v.at("renamed_graph_nodes").as_int64(), 0);

  // The list, filtered by status.
  EXPECT_EQ(json::serialize(v.at("interrupted_rows")), R"(["interrupted"])");
  EXPECT_EQ(v.at("list_count"), "1 thread");
  EXPECT_EQ(v.at("idle_count"), "0 threads");

  // The fences that acted on a run, on the step where they acted: big_payload's document.
  EXPECT_EQ(json::serialize(v.at("fence_badges")), R"(["artifact 4.8 MiB"])") << all;
  ASSERT_EQ(v.at("fence_text").as_array().size(), 1u) << all;
  EXPECT_EQ(std::string(v.at("fence_text").at(0).as_string())
                .rfind("document (from produce): 4.8 MiB moved to the artifact store (over the "
                       "workflow's inline_limit); state holds artifact ",
                       0),
            0u)
      << all;

  // Its download: the whole document, saved by the browser.
  EXPECT_EQ(v.at("download_status"), 200) << all;
  EXPECT_EQ(v.at("download_type"), "text/plain; charset=utf-8") << all;
  EXPECT_EQ(v.at("download_label"), "Downloaded (4.8 MiB)") << all;
  ASSERT_EQ(v.at("downloaded").as_array().size(), 1u) << all;
  EXPECT_EQ(v.at("downloaded").at(0).at("bytes"), 5000000) << all;

  // The fences: the budget against its limit, the runs, and no model (no KV cache).
  EXPECT_NE(std::string(v.at("memory_label").as_string()).find("run_state: 0 B of 512.0 MiB"),
            std::string::npos)
      << all;
  EXPECT_EQ(std::string(v.at("runs_label").as_string()).rfind("running: now 0; queued: now 0", 0),
            0u)
      << all;  // the run service's own counts (weir_runs in /metrics)
  EXPECT_NE(std::string(v.at("runs_label").as_string()).find("interrupted: now 1"),
            std::string::npos)
      << all;
  EXPECT_NE(std::string(v.at("kv_text").as_string()).find("No model is loaded"), std::string::npos);

  // A screenshot of each view, for people to look at (docs/console.md shows them).
  for (const char* view :
       {"threads", "run-interrupted", "run-finished", "fork", "run-fences", "fences"}) {
    const fs::path png = fs::path(shots) / (std::string(view) + ".png");
    ASSERT_TRUE(fs::exists(png)) << png;
    EXPECT_GT(fs::file_size(png), 10'000u) << png;
  }
}

// A reply shown as it is generated: an llm node's pieces in the Messages card, marked as
// typing, then the same message once its step lands.
TEST(ConsoleBrowser, AReplyIsShownAsItIsGenerated) {
  if (auto why = no_browser(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = talk_workflows(slow_model(), 1200);  // ~3 KB: stays inline
  auto child =
      testing_serve::spawn({"serve", "--console", "--port", "0", "--workflows", dir.string()});
  auto m = child->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << child->err;
  const std::string shots = std::string(WEIR_CONSOLE_SHOTS) + "-tokens";
  const json::value v = run_flow("console_tokens.mjs", m[1], shots);
  ASSERT_TRUE(v.is_object());
  const std::string all = json::serialize(v);
  EXPECT_TRUE(v.at("problems").as_array().empty()) << all;
  EXPECT_EQ(v.at("typing_grew"), true) << all;
  // Landed: the question and the reply, which kept the id it was typed under.
  ASSERT_EQ(v.at("messages").as_array().size(), 2u) << all;
  EXPECT_EQ(v.at("messages").at(0).at("type"), "human");
  EXPECT_EQ(v.at("messages").at(1).at("type"), "ai") << all;
  EXPECT_EQ(v.at("messages").at(1).at("id"), v.at("typing_id")) << all;
  EXPECT_FALSE(v.at("messages").at(1).at("text").as_string().empty());
  EXPECT_TRUE(fs::exists(fs::path(shots) / "run-typing.png"));
  fs::remove_all(dir);
}

// samples/crews/research_crew.json in the console: a question starts the crew, each agent's
// answer shows as soon as its task is done (marked as typing until the crew's step lands), and
// the conversation ends with the three agents' messages under their names.
TEST(ConsoleBrowser, ACrewsAgentsAnswerOneByOne) {
  if (auto why = no_browser(); !why.empty()) GTEST_SKIP() << why;
  auto child = testing_serve::spawn({"serve", "--console", "--port", "0", "--workflows",
                                     (fs::path(WEIR_SOURCE_DIR) / "samples/crews").string(),
                                     "--model", slow_model().string()});
  auto m = child->wait_for(std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"));
  ASSERT_FALSE(m.empty()) << child->err;
  const std::string shots = std::string(WEIR_CONSOLE_SHOTS) + "-crew";
  const json::value v = run_flow("console_crew.mjs", m[1], shots);
  ASSERT_TRUE(v.is_object());
  const std::string all = json::serialize(v);
  EXPECT_TRUE(v.at("problems").as_array().empty()) << all;
  EXPECT_EQ(v.at("status_while_typing"), "busy") << all;
  const auto& typing = v.at("while_running").as_array();
  ASSERT_GE(typing.size(), 2u) << all;
  EXPECT_EQ(typing.back().at("type"), "ai typing") << all;
  const auto& msgs = v.at("messages").as_array();
  ASSERT_EQ(msgs.size(), 4u) << all;
  EXPECT_EQ(msgs[0].at("type"), "human");
  EXPECT_EQ(msgs[0].at("text"), "paged attention");
  const char* who[] = {"researcher", "writer", "reviewer"};
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(msgs[i].at("type"), "ai") << all;
    EXPECT_EQ(msgs[i].at("who"), who[i - 1]) << all;
  }
  EXPECT_EQ(msgs[1].at("id"), typing[1].at("id")) << "the researcher's answer kept its id";
  EXPECT_EQ(msgs[1].at("text"), typing[1].at("text"));
  EXPECT_TRUE(fs::exists(fs::path(shots) / "run-crew.png"));
}

}  // namespace
}  // namespace weir::serve
