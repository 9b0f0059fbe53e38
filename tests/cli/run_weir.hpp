// build/bin/weir as a subprocess for the CLI-level tests (cli, scale-out, cluster): stdout
// captured through a pipe, stderr through a temporary file, the exit code; and the files they
// hand it.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace weir::testing {

struct Run {
  int code = -1;
  std::string out, err;
};

// `env`: assignments put before the command ("TMPDIR=/x").
inline Run run_weir_env(const std::string& env, const std::string& args) {
  static int n = 0;
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() /
      ("weir_test_err_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  const std::string cmd =
      env + " " + std::string(WEIR_BIN_DIR) + "/weir " + args + " 2>" + err_file.string();
  Run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  std::size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), got);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_file);
  return r;
}

inline Run run_weir(const std::string& args) {
  return run_weir_env("", args);
}

// A file holding `text` in the temporary folder, named after this process and `name` (which
// must be unique within the test binary).
inline std::filesystem::path temp_file(const std::string& name, const std::string& text) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("weir_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A workflow file of samples/workflows.
inline std::filesystem::path sample(const std::string& name) {
  return std::filesystem::path(WEIR_SOURCE_DIR) / "samples/workflows" / name;
}

}  // namespace weir::testing
