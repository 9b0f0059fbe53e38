// The `weir` binary as a user runs it: exit codes, stdout, and the text of errors.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

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

}  // namespace
