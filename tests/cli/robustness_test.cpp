// The `weir` binary fed what users really type: numbers that are not numbers, forgotten flag
// values, inputs of any length, models too small for the crew. Each case checks the exit code,
// the message and, where memory is the point, the child's peak RSS.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "run_weir.hpp"

namespace {

namespace fs = std::filesystem;

struct Run {
  int code = -1;
  std::string out, err;
  long peak_rss_kb = 0;  // the child's, from wait4
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs build/bin/weir with `args` (no shell), killed after `timeout_s`: a hang is a failure
// with code -1, never a stuck test.
Run weir(const std::vector<std::string>& args, int timeout_s = 60) {
  static int n = 0;
  const std::string base =
      (fs::temp_directory_path() /
       ("weir_robust_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
          .string();
  const fs::path out_file = base + ".out", err_file = base + ".err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(out_file.c_str(), "w", stdout);
    std::freopen(err_file.c_str(), "w", stderr);
    ::alarm(static_cast<unsigned>(timeout_s));  // SIGALRM ends a hang
    std::vector<std::string> argv_s = {std::string(WEIR_BIN_DIR) + "/weir"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.peak_rss_kb = ru.ru_maxrss;
  r.out = slurp(out_file);
  r.err = slurp(err_file);
  fs::remove(out_file);
  fs::remove(err_file);
  return r;
}

using weir::testing::temp_file;

const std::string kWorkflow = std::string(WEIR_SOURCE_DIR) + "/samples/workflows/map_reduce.json";

TEST(CliRobustness, NumericFlagsAreCheckedAsTheirTypeAndRange) {
  auto inputs = temp_file("one.jsonl", "{}\n");
  // Each of these hung forever at 0% CPU (inf, nan, 1e300, 2^66) or was taken as 2 (2.5).
  for (std::string bad :
       {"inf", "nan", "1e300", "99999999999999999999", "2.5", "0", "-3", "", "12abc", "0x10"}) {
    SCOPED_TRACE(bad);
    auto r = weir({"batch", kWorkflow, "--inputs", inputs.string(), "--max-concurrency", bad}, 20);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "weir batch: --max-concurrency expects an integer from 1 to 100000, got '" +
                         bad + "' (see 'weir batch --help')\n");
  }
  auto temp = weir({"generate", "--model", "nowhere.gguf", "--prompt", "x", "--temp", "nan"});
  EXPECT_EQ(temp.code, 1);
  EXPECT_EQ(temp.err,
            "weir generate: --temp expects a number from 0 to 100, got 'nan' (see 'weir generate "
            "--help')\n");
  auto top_p = weir({"generate", "--model", "nowhere.gguf", "--prompt", "x", "--top-p", "1.5"});
  EXPECT_EQ(top_p.code, 1);
  EXPECT_NE(top_p.err.find("--top-p expects a number from 0 to 1, got '1.5'"), std::string::npos);
  auto n = weir({"generate", "--model", "nowhere.gguf", "--prompt", "x", "-n", "1e3"});
  EXPECT_EQ(n.code, 1);
  EXPECT_NE(n.err.find("-n expects an integer from 1 to 1048576, got '1e3'"), std::string::npos);
  auto kv = weir({"serve", "--model", "nowhere.gguf", "--kv-cache-type", "q8"});
  EXPECT_EQ(kv.code, 1);
  EXPECT_EQ(
      kv.err,
      "weir serve: --kv-cache-type: unknown KV cache type 'q8' (choose f32, f16 or q8_0) (see "
      "'weir serve --help')\n");
  auto crews = weir({"demo", "--crews", "2.5"});
  EXPECT_EQ(crews.code, 1);
  EXPECT_EQ(crews.err,
            "weir demo: --crews expects an integer from 1 to 1000000, got '2.5' (see 'weir demo "
            "--help')\n");
  // A good value still works.
  auto ok = weir({"batch", kWorkflow, "--inputs", inputs.string(), "--max-concurrency", "3"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  fs::remove(inputs);
}

TEST(CliRobustness, AFlagWithoutItsValueIsNotGivenTheNextFlag) {
  // `--thread --stream` took "--stream" as the thread's id.
  auto r = weir({"run", kWorkflow, "--thread", "--stream"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "weir run: --thread needs a value (got the option '--stream') (see 'weir run "
            "--help')\n");
}

// `--name=value`, as most command lines take it, is `--name value`; a switch given a value, or an
// unknown name, is refused by its name. Both used to be "unknown option '--max-concurrency=3'".
TEST(CliRobustness, AFlagTakesItsValueAfterAnEqualsSign) {
  auto inputs = temp_file("eq.jsonl", "{}\n");
  auto ok = weir({"batch", kWorkflow, "--inputs=" + inputs.string(), "--max-concurrency=3"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"ok\":true"), std::string::npos) << ok.out;
  auto bad = weir({"batch", kWorkflow, "--inputs", inputs.string(), "--max-concurrency=x"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err,
            "weir batch: --max-concurrency expects an integer from 1 to 100000, got 'x' (see "
            "'weir batch --help')\n");
  auto sw = weir({"run", kWorkflow, "--stream=yes"});
  EXPECT_EQ(sw.code, 1);
  EXPECT_EQ(sw.err,
            "weir run: --stream takes no value (got '--stream=yes') (see 'weir run --help')\n");
  auto unknown = weir({"run", kWorkflow, "--nope=1"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err, "weir run: unknown option '--nope=1' (see 'weir run --help')\n");
  fs::remove(inputs);
}

// `weir batch` memory does not depend on the input's length: every finished run's coroutine
// frames used to stay alive to the end of the file (~1.3 KB a line).
TEST(CliRobustness, BatchMemoryIsIndependentOfTheInputsLength) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "peak memory is not measured under AddressSanitizer (its shadow memory and "
                  "quarantine grow with what the process frees)";
#endif
  auto write_lines = [](const std::string& name, int n) {
    fs::path p =
        fs::temp_directory_path() / ("weir_robust_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream f(p);
    for (int i = 0; i < n; ++i) f << "{\"numbers\": [" << i % 7 << ", 2, 3]}\n";
    return p;
  };
  auto small = write_lines("small.jsonl", 10'000), large = write_lines("large.jsonl", 100'000);
  for (const char* conc : {"1", "64"}) {
    SCOPED_TRACE(conc);
    auto a = weir({"batch", kWorkflow, "--inputs", small.string(), "--max-concurrency", conc,
                   "--output", "/dev/null"});
    auto b = weir({"batch", kWorkflow, "--inputs", large.string(), "--max-concurrency", conc,
                   "--output", "/dev/null"});
    ASSERT_EQ(a.code, 0) << a.err;
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_NE(b.err.find("weir batch: 100000 runs, 0 failed"), std::string::npos) << b.err;
    // 10x the lines in the same memory (+10%; before the fix: 21 MB vs 135 MB).
    EXPECT_LE(b.peak_rss_kb, a.peak_rss_kb * 11 / 10)
        << "10,000 lines: " << a.peak_rss_kb << " KB, 100,000 lines: " << b.peak_rss_kb << " KB";
  }
  fs::remove(small);
  fs::remove(large);
}

fs::path shared_model(const char* name) {
  return fs::path(WEIR_SHARED_DIR) / "models" / name;
}

// Models of 512 and 128 tokens of context: crew files and group chats used to hard-code 4096
// and refuse them ("lower it") with no key or flag to lower.
TEST(CliRobustness, SmallContextModelsRunCrewsAndGroupChats) {
  const auto ctx512 = shared_model("stories260K-gqa.gguf"),
             ctx128 = shared_model("aidreams260K.gguf");
  if (!fs::exists(ctx512) || !fs::exists(ctx128))
    GTEST_SKIP() << "no " << ctx512 << " (../shared is absent)";
  const std::string samples = std::string(WEIR_SOURCE_DIR) + "/samples/crews/";
  auto chat = weir({"run", samples + "group_chat.json", "--model", ctx512.string()}, 120);
  EXPECT_EQ(chat.code, 0) << chat.err;
  EXPECT_NE(chat.out.find("\"transcript\""), std::string::npos);
  // A smaller context than the model's is honoured: windows shrink to fit it.
  auto smaller = weir(
      {"run", samples + "group_chat.json", "--model", ctx512.string(), "--max-model-len", "256"},
      120);
  EXPECT_EQ(smaller.code, 0) << smaller.err;
  // The same crew with its KV cache in F16 ("engine": {"kv_cache_type": "f16"}).
  {
    std::ifstream in(samples + "group_chat.json");
    std::stringstream ss;
    ss << in.rdbuf();
    auto crew = boost::json::parse(ss.str()).as_object();
    crew["engine"] = boost::json::object{{"kv_cache_type", "f16"}};
    auto f16 = temp_file("group_chat_f16.json", boost::json::serialize(crew));
    auto r = weir({"run", f16.string(), "--model", ctx512.string()}, 120);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("\"transcript\""), std::string::npos);
    fs::remove(f16);
  }
  // A workflow's local model takes it in its "engine" entry, checked by validate.
  {
    auto wf = temp_file("kv_type_wf.json", R"({"name": "kv", "state": {"out": {}},
      "models": {"m": {"path": "m.gguf", "engine": {"kv_cache_type": "bf16"}}},
      "nodes": {"a": {"kind": "llm", "model": "m", "prompt": "hi", "output": "out"}},
      "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
    auto r = weir({"validate", wf.string()});
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(
        r.err.find(":2:70: /models/m/engine/kv_cache_type: expected \"f32\", \"f16\" or \"q8_0\", "
                   "got \"bf16\""),
        std::string::npos)
        << r.err;
    auto ok = temp_file("kv_type_ok.json", R"({"name": "kv", "state": {"out": {}},
      "models": {"m": {"path": "m.gguf", "engine": {"kv_cache_type": "f16"}}},
      "nodes": {"a": {"kind": "llm", "model": "m", "prompt": "Once", "max_tokens": 8,
                      "output": "out"}},
      "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
    auto run = weir({"run", ok.string(), "--model", ctx512.string()}, 120);
    EXPECT_EQ(run.code, 0) << run.err;
    EXPECT_NE(run.out.find("\"out\""), std::string::npos) << run.out;
    fs::remove(wf);
    fs::remove(ok);
  }
  // At 128 tokens the agents' system prompts alone leave no room for a reply: the error names
  // both counts and the knobs.
  auto tiny = weir({"run", samples + "group_chat.json", "--model", ctx128.string()}, 120);
  EXPECT_EQ(tiny.code, 2);
  EXPECT_NE(tiny.err.find("aidreams260K.gguf: the prompt is "), std::string::npos) << tiny.err;
  EXPECT_NE(tiny.err.find(" of them the system prompt) but the model's context holds 128 tokens "
                          "with the reply; shorten the system prompt, lower the history window"),
            std::string::npos)
      << tiny.err;
  EXPECT_NE(tiny.err.find("--max-model-len"), std::string::npos) << tiny.err;
  // Above the model's context: refused at once, naming the flag.
  auto big = weir(
      {"run", samples + "group_chat.json", "--model", ctx512.string(), "--max-model-len", "4096"});
  EXPECT_EQ(big.code, 2);
  EXPECT_NE(big.err.find("max_model_len=4096 exceeds the model's context length of 512; lower "
                         "it (weir run/demo: --max-model-len N"),
            std::string::npos)
      << big.err;
}

TEST(CliRobustness, CrewFilesTakeAnEngineEntry) {
  auto file = temp_file("engine_crew.json", R"({"weir": 1, "kind": "group_chat", "name": "c",
    "agents": [{"name": "a", "role": "r", "max_tokens_per_turn": 8}], "task": "t",
    "termination": {"any": [{"max_messages": 2}]},
    "engine": {"max_model_len": 3, "max_num_seq": 4, "kv_cache_type": "f8"}})");
  auto r = weir({"run", file.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/engine/kv_cache_type: expected \"f32\", \"f16\" or \"q8_0\", got \"f8\""),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("/engine/max_model_len: must be at least 16, got 3"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("/engine/max_num_seq: unknown key 'max_num_seq'; did you mean "
                       "'max_num_seqs'?"),
            std::string::npos)
      << r.err;
  fs::remove(file);
}

// Exit codes: 1 when weir refused the input before a run started, 2 when a run started and
// failed, even with an error code that also names bad input (a node's invalid arguments).
TEST(CliRobustness, ExitCodesSeparateBadInputFromRunFailures) {
  // The artifacts tool answers not_found for an unknown id: an error code that also names bad
  // input, from inside the run (it exited 1 before).
  auto wf = temp_file("bad_art.json", R"({"name": "bad_art", "state": {"out": {}},
    "tools": {"art": {"builtin": "artifacts"}},
    "nodes": {"c": {"kind": "tool", "tool": "art", "args": {"id": "0123456789abcdef"},
                    "output": "out"}},
    "edges": [{"from": "START", "to": "c"}, {"from": "c", "to": "END"}]})");
  auto failed = weir({"run", wf.string()});
  EXPECT_EQ(failed.code, 2) << failed.err;
  EXPECT_EQ(failed.err,
            "weir run: not_found: node 'c': artifacts: no artifact with id "
            "'0123456789abcdef'\n");
  auto bad_input = weir({"run", wf.string(), "--input", "[1]"});
  EXPECT_EQ(bad_input.code, 1);
  EXPECT_EQ(bad_input.err, "weir run: --input must be a JSON object of channel values\n");
  auto missing = weir({"run", "/nonexistent/flow.json"});
  EXPECT_EQ(missing.code, 1);
  fs::remove(wf);
}

// A store or queue that cannot be reached is one error with one exit code, 4, whichever command
// met it (it was 1 for weir run, 2 for weir resume, store prune, submit, runs, cancel and
// worker: "a run started and failed"). Nothing listens on port 1.
TEST(CliRobustness, AnUnreachableStoreIsExitCodeFourForEveryCommand) {
  auto wf = temp_file("unreachable.json", R"({"name": "u", "state": {"n": {}},
    "nodes": {"a": {"kind": "set", "values": {"n": 1}}},
    "edges": [{"from": "START", "to": "a"}, {"from": "a", "to": "END"}]})");
  const std::string down = "postgres://weir:Secr3tPw@127.0.0.1:1/x";
  // (The checkpointer and the queue word it differently until they share one PostgreSQL layer.)
  const std::string shown = "postgres 'weir@127.0.0.1:1/x'";
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"run", {"run", wf.string(), "--thread", "t", "--store", down}},
      {"resume", {"resume", "t", "--store", down}},
      {"store prune", {"store", "prune", "--keep", "1", "--store", down}},
      {"submit", {"submit", wf.string(), "--db", down}},
      {"runs", {"runs", "--db", down}},
      {"cancel", {"cancel", "r-0123456789abcdef", "--db", down}},
      {"worker", {"worker", "--db", down, "--connect-timeout", "0"}}};
  for (const auto& [name, args] : commands) {
    auto r = weir(args);
    EXPECT_EQ(r.code, 4) << name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("weir " + name + ": ", 0), 0u) << name << ": " << r.err;
    EXPECT_NE(r.err.find(shown), std::string::npos) << name << ": " << r.err;
    EXPECT_NE(r.err.find("Connection refused"), std::string::npos) << name << ": " << r.err;
    EXPECT_EQ(r.err.find("Secr3tPw"), std::string::npos) << r.err;
  }
  // An SQLite store that cannot be opened is the same kind of failure.
  auto file = weir({"run", wf.string(), "--thread", "t", "--store", "/dev/null/x.db"});
  EXPECT_EQ(file.code, 4) << file.err;
  fs::remove(wf);
}

}  // namespace
