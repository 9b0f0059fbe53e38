// build/bin/weir as a subprocess for the CLI-level tests (cli, scale-out, cluster): stdout
// captured through a pipe, stderr through a temporary file, the exit code; and the files they
// hand it.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

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

// build/bin/weir started in the background (`sh -c "exec weir ARGS"`: the pid is weir's own, so
// a test can SIGKILL it mid-run), stdout and stderr into files. The destructor kills a child
// still running.
struct Background {
  pid_t pid = -1;
  std::filesystem::path out, err;
  int code = -1;  // after wait(): the exit code, or -signal

  Background() = default;
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      wait();
    }
    std::error_code ec;
    std::filesystem::remove(out, ec);
    std::filesystem::remove(err, ec);
  }
  // Waits for the exit; returns the exit code (or -signal).
  int wait() {
    int status = 0;
    if (pid > 0 && ::waitpid(pid, &status, 0) == pid)
      code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    pid = -1;
    return code;
  }
  void kill_now() {
    if (pid > 0) ::kill(pid, SIGKILL);
    wait();
  }
  std::string stdout_text() const;
  std::string stderr_text() const;
};

inline std::unique_ptr<Background> start_weir(const std::string& args,
                                              const std::string& env = "") {
  static int n = 0;
  auto b = std::make_unique<Background>();
  const std::string stem =
      (std::filesystem::temp_directory_path() /
       ("weir_test_bg_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
          .string();
  b->out = stem + ".out";
  b->err = stem + ".err";
  const std::string cmd = env + " exec " + std::string(WEIR_BIN_DIR) + "/weir " + args + " >" +
                          b->out.string() + " 2>" + b->err.string();
  b->pid = ::fork();
  if (b->pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan if the test process dies
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return b;
}

// Polls `done` every 20 ms for at most `limit`; whether it became true.
template <class F>
bool eventually(F done, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
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

inline std::string Background::stdout_text() const {
  return read_text(out);
}
inline std::string Background::stderr_text() const {
  return read_text(err);
}

// A workflow file of samples/workflows.
inline std::filesystem::path sample(const std::string& name) {
  return std::filesystem::path(WEIR_SOURCE_DIR) / "samples/workflows" / name;
}

}  // namespace weir::testing
