// Helpers shared by the tools tests: temporary folders and running a tool to completion.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>

#include "weir/tools/tool.hpp"

namespace weir::tools::test {

// A fresh folder named after the running test, removed on destruction.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("weir_tools_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  void write(const std::string& rel, std::string_view bytes) const {
    const auto p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  std::filesystem::path path_;
};

// Invokes `tool` directly (no registry) with JSON arguments and returns its result.
inline Result<std::string> invoke(Tool& tool, std::string_view args, const ToolContext& ctx = {}) {
  boost::asio::io_context io;
  auto f = boost::asio::co_spawn(io, tool.invoke(boost::json::parse(args).as_object(), ctx),
                                 boost::asio::use_future);
  io.run();
  return f.get();
}

// "ok: <text>" or "<errc name>: <message>": one string to compare in tests.
inline std::string show(const Result<std::string>& r) {
  return r ? "ok: " + *r : r.error().to_string();
}

}  // namespace weir::tools::test
