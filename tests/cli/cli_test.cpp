// The `weir` binary as a user runs it: exit codes, stdout, and the text of errors.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Run {
  int code = -1;
  std::string out, err;
};

Run weir(const std::string& args) {
  static int n = 0;
  fs::path err_file = fs::temp_directory_path() /
                      ("weir_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  std::string cmd = std::string(WEIR_BIN_DIR) + "/weir " + args + " 2>" + err_file.string();
  Run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  std::size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), got);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  fs::remove(err_file);
  return r;
}

fs::path temp_file(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("weir_cli_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

const char* kLoop = R"({"name": "loop_guard", "state": {"n": {"reducer": "sum", "default": 0}},
 "nodes": {"tick": {"kind": "set", "values": {"n": 1}}, "check": {"kind": "router"}},
 "edges": [{"from": "START", "to": "tick"}, {"from": "tick", "to": "check"},
           {"from": "check", "route": {"when": {"channel": "n", "op": ">=", "value": 10}, "then": "END", "else": "tick"}}]})";

TEST(Cli, HelpVersionAndUnknownCommands) {
  auto help = weir("help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: weir COMMAND"), std::string::npos);
  EXPECT_NE(help.out.find("validate"), std::string::npos);
  auto version = weir("--version");
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.out.rfind("weir ", 0), 0u);
  auto unknown = weir("frobnicate");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err, "weir: unknown command 'frobnicate' (see 'weir help')\n");
  auto cmd_help = weir("validate --help");
  EXPECT_EQ(cmd_help.code, 0);
  EXPECT_NE(cmd_help.out.find("example:"), std::string::npos);
}

TEST(Cli, ValidateReportsEveryErrorAndExitsOne) {
  auto good = temp_file("good.json", kLoop);
  auto ok = weir("validate " + good.string());
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find(": ok (2 nodes, 3 edges)"), std::string::npos);

  std::string typo = kLoop;
  auto swap = [&](const std::string& from, const std::string& to) {
    typo.replace(typo.find(from), from.size(), to);
  };
  swap("\"to\": \"check\"", "\"to\": \"chek\"");
  swap("\"reducer\": \"sum\"", "\"reducer\": \"summ\"");
  auto bad = temp_file("bad.json", typo);
  auto r = weir("validate " + bad.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/state/n/reducer: unknown reducer 'summ'; did you mean 'sum'?"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("/edges/1/to: unknown node 'chek'; did you mean 'check'?"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(": 2 errors"), std::string::npos) << r.err;
  fs::remove(good);
  fs::remove(bad);
}

TEST(Cli, GraphPrintsDotWithLabelledConditionalEdges) {
  auto f = temp_file("loop.json", kLoop);
  auto r = weir("graph " + f.string() + " --format dot");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("digraph \"loop_guard\" {", 0), 0u);
  EXPECT_NE(r.out.find("\"check\" -> \"__END\" [style=dashed, label=\"n >= 10\"];"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"check\" -> \"tick\" [style=dashed, label=\"else\"];"), std::string::npos)
      << r.out;
  auto fmt = weir("graph " + f.string() + " --format svg");
  EXPECT_EQ(fmt.code, 1);
  EXPECT_EQ(fmt.err, "weir graph: unknown format 'svg' (supported: dot)\n");
  fs::remove(f);
}

fs::path shared(const std::string& rel) {
  return fs::path(WEIR_SHARED_DIR) / rel;
}

TEST(Cli, GenerateReproducesTheGoldenGreedyText) {
  auto model = shared("models/aidreams260K.gguf");
  if (!fs::exists(model)) GTEST_SKIP() << "reference models not found (../shared absent)";
  // The golden is the FP32 greedy text: pinned to the CPU, since on a GPU machine the default
  // device is CUDA with BF16 weights (its FP32 goldens are in inference_gpu_test).
  auto r = weir("generate --model " + model.string() +
                " --prompt 'I dream of' -n 64 --json --device cpu");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"text\":\" 0.000000. Dimensions unfold, as I softly refine, as I softly "
                       "refine, as I adapt, a "
                       "tapestry of 0.00000\""),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"finish_reason\":\"length\""), std::string::npos);
  auto streamed =
      weir("generate --model " + model.string() + " --prompt 'I dream of' -n 8 --device cpu");
  EXPECT_EQ(streamed.code, 0);
  EXPECT_EQ(streamed.out.rfind(" 0.0000", 0), 0u) << streamed.out;
}

TEST(Cli, TokenizeWorksOnVocabOnlyFiles) {
  auto vocab = shared("testdata/vocab/ggml-vocab-gpt-2.gguf");
  if (!fs::exists(vocab)) GTEST_SKIP() << "vocab fixtures not found (../shared absent)";
  auto r = weir("tokenize --model " + vocab.string() + " --text 'Hello world'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995\n");
  auto spm = weir("tokenize --model " + shared("models/aidreams260K.gguf").string() +
                  " --text 'I dream of'");
  EXPECT_EQ(spm.out, "1 303 281 269 435 447 275\n");
  auto nobos = weir("tokenize --model " + shared("models/aidreams260K.gguf").string() +
                    " --text 'I dream of' --no-bos");
  EXPECT_EQ(nobos.out, "303 281 269 435 447 275\n");
}

TEST(Cli, ModelCommandsGiveClearErrors) {
  auto missing = weir("generate --model /nonexistent.gguf --prompt hi");
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err,
            "weir generate: cannot open model file /nonexistent.gguf: No such file or directory\n");
  auto vocab = shared("testdata/vocab/ggml-vocab-gpt-2.gguf");
  if (fs::exists(vocab)) {
    auto arch = weir("generate --model " + vocab.string() + " --prompt hi");
    EXPECT_EQ(arch.code, 1);
    EXPECT_NE(arch.err.find("architecture 'gpt2' is not supported; weir runs: llama"),
              std::string::npos)
        << arch.err;
    auto inspect = weir("inspect " + vocab.string());
    EXPECT_EQ(inspect.code, 0);
    EXPECT_NE(inspect.out.find("tokenizer: gpt2 (pre: gpt-2), 50257 tokens"), std::string::npos)
        << inspect.out;
  }
  auto flags = weir("tokenize --model x.gguf");
  EXPECT_EQ(
      flags.err,
      "weir tokenize: give exactly one of --text or --text-file (see 'weir tokenize --help')\n");
  auto bad_n = weir("generate --model x --prompt y -n lots");
  EXPECT_EQ(bad_n.err,
            "weir generate: -n expects a number, got 'lots' (see 'weir generate --help')\n");
}

fs::path sample(const std::string& name) {
  return fs::path(WEIR_SOURCE_DIR) / "samples/workflows" / name;
}

TEST(Cli, EverySampleWorkflowValidates) {
  for (const auto& e : fs::directory_iterator(fs::path(WEIR_SOURCE_DIR) / "samples/workflows")) {
    auto r = weir("validate " + e.path().string());
    EXPECT_EQ(r.code, 0) << e.path() << "\n" << r.err;
  }
}

TEST(Cli, RunSamples) {
  auto loop = weir("run " + sample("loop_guard.json").string());
  EXPECT_EQ(loop.code, 2);
  EXPECT_EQ(loop.err,
            "weir run: step_limit_exceeded: run stopped after 20 supersteps (recursion_limit=20); "
            "nodes active in the last "
            "step: think; raise limits.recursion_limit or add an exit condition\n");
  auto mr = weir("run " + sample("map_reduce.json").string());
  EXPECT_EQ(mr.code, 0) << mr.err;
  EXPECT_EQ(mr.out, "{\"numbers\":[1,2,3,4,5,6,7,8],\"total\":204,\"mean\":2.55E1}\n");
  auto big = weir("run " + sample("big_payload.json").string());
  EXPECT_EQ(big.code, 0) << big.err;
  EXPECT_NE(big.out.find("\"bytes\":5000000"), std::string::npos);
  EXPECT_NE(big.out.find("\"summary\":\"read 5000000 bytes from artifact "), std::string::npos)
      << big.out;
  EXPECT_NE(big.err.find("1 value moved to artifacts"), std::string::npos) << big.err;
  auto input = weir("run " + sample("map_reduce.json").string() + " --input '{\"numbers\": [3]}'");
  EXPECT_EQ(input.out, "{\"numbers\":[3],\"total\":9,\"mean\":1.125E0}\n");
  auto bad = weir("run " + sample("map_reduce.json").string() + " --input '{\"numbers\": [3'");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err.rfind("weir run: --input:1:", 0), 0u) << bad.err;
}

TEST(Cli, CrewAndGroupChatSamplesRunOnTheDefaultModel) {
  const std::string crews = std::string(WEIR_SOURCE_DIR) + "/samples/crews/";
  auto v = weir("validate " + crews + "research_crew.json " + crews + "group_chat.json");
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("research_crew.json: ok (crew: 3 agents, 3 tasks)"), std::string::npos)
      << v.out;
  auto crew = weir("run " + crews + "research_crew.json --input '{\"topic\": \"BM25\"}'");
  ASSERT_EQ(crew.code, 0) << crew.err;
  auto out = boost::json::parse(crew.out).as_object();
  const auto& tasks = out.at("tasks").as_array();
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].at("agent"), "researcher");
  EXPECT_EQ(tasks[0].at("tool_calls"), 1);  // the doc_search prefetch
  EXPECT_EQ(tasks[2].at("agent"), "reviewer");
  EXPECT_EQ(tasks[2].at("artifact").as_string().size(), 64u);
  EXPECT_GT(out.at("prompt_tokens").as_int64(), 0);
  auto chat = weir("run " + crews + "group_chat.json");
  ASSERT_EQ(chat.code, 0) << chat.err;
  auto c = boost::json::parse(chat.out).as_object();
  EXPECT_EQ(c.at("stop_reason"), "max_messages 9 reached");
  const auto& tr = c.at("transcript").as_array();
  ASSERT_EQ(tr.size(), 9u);  // the task + the window of 8
  EXPECT_EQ(tr[0].at("content"), "Write a design note on bounding an agent's chat history.");
}

TEST(Cli, BadCrewFilesGiveEveryProblem) {
  auto f = temp_file("crew.json", R"({"weir": 1, "kind": "crew", "name": "c",
  "agents": [{"name": "a", "role": "r", "tools": ["web"]}],
  "tasks": [{"name": "t", "agent": "b", "description": "d"}]})");
  auto r = weir("run " + f.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            f.string() +
                ": crew 'c' is invalid:\n  - task 't' names unknown agent 'b'\n  - agent 'a' "
                "names unknown tool 'web' (available: none)\n");
  auto g = temp_file("crew2.json", R"({"weir": 1, "kind": "crew", "name": "c", "agnts": []})");
  auto v = weir("validate " + g.string());
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.err.find(":1:51: /agnts: unknown key 'agnts' (did you mean 'agents'?)"),
            std::string::npos)
      << v.err;
  fs::remove(f);
  fs::remove(g);
}

TEST(Cli, BatchRunsEveryLineAndReportsBadOnesWithoutStopping) {
  auto in =
      temp_file("batch.jsonl",
                "{\"numbers\": [1, 2]}\nnot json\n\n{\"numbers\": \"x\"}\n{\"numbers\": [3]}\n");
  const fs::path out_file =
      fs::temp_directory_path() / ("weir_cli_batch_" + std::to_string(::getpid()));
  auto r = weir("batch " + sample("map_reduce.json").string() + " --inputs " + in.string() +
                " --max-concurrency 2 --output " + out_file.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  std::ifstream written(out_file);
  std::stringstream ws;
  ws << written.rdbuf();
  std::map<std::int64_t, boost::json::object> lines;
  std::istringstream out(ws.str());
  std::vector<std::int64_t> order;
  for (std::string line; std::getline(out, line);) {
    auto o = boost::json::parse(line).as_object();
    order.push_back(o.at("index").as_int64());
    lines[o.at("index").as_int64()] = o;
  }
  EXPECT_EQ(order, (std::vector<std::int64_t>{0, 1, 3, 4}));  // input order
  ASSERT_EQ(lines.size(), 4u);  // the blank line is skipped, its index kept
  EXPECT_EQ(lines[0].at("state").at("total"), 5);
  EXPECT_EQ(lines[1].at("error").at("code"), "corrupt_data");
  EXPECT_EQ(lines[3].at("error").at("message"),
            "node 'fan': map over 'numbers': the channel does not hold a list");
  EXPECT_EQ(lines[4].at("state").at("total"), 9);
  EXPECT_EQ(r.err.rfind("weir batch: 4 runs, 2 failed, in ", 0), 0u) << r.err;
  fs::remove(in);
  fs::remove(out_file);
}

TEST(Cli, HumanReviewPausesAndResumesFromTheCheckpointFile) {
  const fs::path db = fs::temp_directory_path() / ("weir_cli_ckpt_" + std::to_string(::getpid()));
  const std::string wf = sample("human_review.json").string();
  const std::string store = " --store " + db.string();
  auto first = weir("run " + wf + " --thread t1" + store);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out,
            "{\"interrupted\":\"review\",\"payload\":{\"question\":\"approve, or write what to "
            "change\",\"draft\":\"A short note on bounded agent memory (revision 0).\"},"
            "\"thread\":\"t1\"}\n");
  EXPECT_NE(first.err.find("continue with:\n  weir resume t1 --value JSON" + store),
            std::string::npos)
      << first.err;
  // Each command is a new process: the state, and the workflow file, come from the store.
  auto again = weir("resume t1" + store + " --value '\"shorter\"'");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("(revision 1)"), std::string::npos) << again.out;
  auto done = weir("resume t1" + store + " --value '\"approve\"' --stream");
  ASSERT_EQ(done.code, 0) << done.err;
  EXPECT_EQ(done.out.rfind("{\"event\":\"run_started\"", 0), 0u) << done.out;
  EXPECT_NE(done.out.find("{\"event\":\"node_finished\",\"step\":1,\"node\":\"review\",\"data\":"
                          "{\"verdict\":\"approve\"}}"),
            std::string::npos)
      << done.out;
  EXPECT_NE(done.out.find("\"notes\":[\"shorter\"],\"published\":true}\n"), std::string::npos)
      << done.out;
  auto over = weir("resume t1" + store + " --value '\"approve\"'");
  EXPECT_EQ(over.code, 1);
  EXPECT_EQ(over.err,
            "weir resume: invalid_argument: thread 't1' is not interrupted (its last run "
            "finished)\n");
  auto unknown = weir("resume t9" + store);
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err, "weir resume: no thread 't9' in " + db.string() + "\n");
  auto none = weir("run " + wf);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("unsupported"), std::string::npos) << none.err;
  fs::remove(db);
}

TEST(Cli, WorkflowToolAndAgentNodesUseTheToolsAndAgentsLayers) {
  const fs::path model = fs::path(WEIR_SHARED_DIR) / "models" / "stories260K-gqa.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "fixture model absent";
  const std::string data = std::string(WEIR_SOURCE_DIR) + "/samples/data";
  auto wf = temp_file("agentflow.json", R"({"name": "agentflow",
    "models": {"tiny": {"path": ")" + model.string() +
                                            R"("}},
    "tools": {"search": {"builtin": "doc_search", "root": ")" +
                                            data + R"("}},
    "agents": {"teller": {"role": "a storyteller", "model": "tiny", "max_iter": 2, "max_tokens_per_turn": 16}},
    "state": {"query": {"default": "paged attention"}, "hits": {}, "story": {}, "title": {}},
    "nodes": {"find": {"kind": "tool", "tool": "search", "args": {"query": "{{state.query}}", "k": 1}, "output": "hits"},
              "tell": {"kind": "agent", "agent": "teller", "input": "query", "output": "story"},
              "name": {"kind": "llm", "model": "tiny", "prompt": "A title for {{state.query}}", "max_tokens": 8, "output": "title"}},
    "edges": [{"from": "START", "to": "find"}, {"from": "find", "to": "tell"}, {"from": "tell", "to": "name"},
              {"from": "name", "to": "END"}]})");
  auto r = weir("run " + wf.string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto state = boost::json::parse(r.out).as_object();
  EXPECT_NE(std::string(state.at("hits").as_string()).find("paged_attention.md"), std::string::npos)
      << state.at("hits");
  EXPECT_TRUE(state.at("story").is_string());
  EXPECT_TRUE(state.at("title").is_string());  // the llm node, on the same engine as the agent
  fs::remove(wf);
}

}  // namespace
