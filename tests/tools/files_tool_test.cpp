#include <filesystem>

#include <gtest/gtest.h>

#include "test_util.hpp"
#include "weir/tools/builtin.hpp"

namespace weir::tools {
namespace {

namespace fs = std::filesystem;
using test::invoke;
using test::show;
using test::TempDir;

class FilesToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() / "root";
    fs::create_directories(root_ / "notes");
    dir_.write("root/hello.txt", "hello world\n");
    dir_.write("root/notes/a.md", "# A\n\nalpha\n");
    dir_.write("secret.txt", "top secret\n");
    tool_ = make_files_tool(root_);
  }
  std::string call(std::string_view args) { return show(invoke(*tool_, args)); }
  TempDir dir_;
  fs::path root_;
  std::shared_ptr<Tool> tool_;
};

TEST_F(FilesToolTest, ReadsAFile) {
  EXPECT_EQ(call(R"({"op":"read","path":"hello.txt"})"), "ok: hello world\n");
  EXPECT_EQ(call(R"({"op":"read","path":"./notes/a.md"})"), "ok: # A\n\nalpha\n");
}

TEST_F(FilesToolTest, ReadsARangeAndSaysWhereToGoOn) {
  EXPECT_EQ(call(R"({"op":"read","path":"hello.txt","offset":0,"limit":5})"),
            "ok: hello\n[bytes 0-5 of 12; call again with offset=5 to read on]");
  EXPECT_EQ(call(R"({"op":"read","path":"hello.txt","offset":6})"),
            "ok: world\n\n[bytes 6-12 of 12]");
  EXPECT_EQ(call(R"({"op":"read","path":"hello.txt","offset":13})"),
            "invalid_argument: files: offset 13 is past the end of 'hello.txt' (12 bytes)");
}

TEST_F(FilesToolTest, RangesCutOnCharacterBoundaries) {
  dir_.write("root/u.txt",
             "a\xc3\xa9"
             "b");  // a é b: 4 bytes
  // A limit of 2 would split 'é': only 'a' is returned.
  EXPECT_EQ(call(R"({"op":"read","path":"u.txt","limit":2})"),
            "ok: a\n[bytes 0-1 of 4; call again with offset=1 to read on]");
  // An offset inside 'é' starts at the next character.
  EXPECT_EQ(call(R"({"op":"read","path":"u.txt","offset":2})"), "ok: b\n[bytes 3-4 of 4]");
}

TEST_F(FilesToolTest, Lists) {
  EXPECT_EQ(call(R"({"op":"list","path":"."})"), "ok: hello.txt (12 bytes)\nnotes/\n");
  EXPECT_EQ(call(R"({"op":"list","path":"notes"})"), "ok: a.md (11 bytes)\n");
  EXPECT_EQ(call(R"({"op":"list","path":".","limit":1})"),
            "ok: hello.txt (12 bytes)\n[entries 0-1 of 2; call again with offset=1]\n");
  fs::create_directories(root_ / "empty");
  EXPECT_EQ(call(R"({"op":"list","path":"empty"})"), "ok: (empty folder)");
  EXPECT_EQ(call(R"({"op":"list","path":"hello.txt"})"),
            "invalid_argument: files: 'hello.txt' is a file, not a folder; use op \"read\"");
  EXPECT_EQ(call(R"({"op":"read","path":"notes"})"),
            "invalid_argument: files: 'notes' is a folder; use op \"list\"");
}

TEST_F(FilesToolTest, RefusesTraversal) {
  EXPECT_EQ(call(R"({"op":"read","path":"../secret.txt"})"),
            "invalid_argument: files: path '../secret.txt' refused: '..' is not allowed");
  EXPECT_EQ(call(R"({"op":"read","path":"notes/../../secret.txt"})"),
            "invalid_argument: files: path 'notes/../../secret.txt' refused: '..' is not allowed");
}

TEST_F(FilesToolTest, RefusesAbsolutePaths) {
  EXPECT_EQ(call(R"({"op":"read","path":"/etc/passwd"})"),
            "invalid_argument: files: absolute path '/etc/passwd' refused; give a path relative "
            "to the files root");
}

TEST_F(FilesToolTest, RefusesSymlinksThatLeaveTheRoot) {
  fs::create_symlink(dir_.path() / "secret.txt", root_ / "link.txt");
  fs::create_directory_symlink(dir_.path(), root_ / "up");
  EXPECT_EQ(call(R"({"op":"read","path":"link.txt"})"),
            "invalid_argument: files: path 'link.txt' refused: it resolves outside the files root "
            "(through a symbolic link)");
  EXPECT_EQ(call(R"({"op":"read","path":"up/secret.txt"})"),
            "invalid_argument: files: path 'up/secret.txt' refused: it resolves outside the files "
            "root (through a symbolic link)");
  // A link that stays inside the root is fine.
  fs::create_symlink(root_ / "hello.txt", root_ / "inside.txt");
  EXPECT_EQ(call(R"({"op":"read","path":"inside.txt"})"), "ok: hello world\n");
}

TEST_F(FilesToolTest, MissingFileIsNotFound) {
  auto r = invoke(*tool_, R"({"op":"read","path":"nope.txt"})");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::not_found));
  EXPECT_EQ(r.error().message, "files: 'nope.txt' does not exist");
}

TEST_F(FilesToolTest, RefusesBinaryFiles) {
  dir_.write("root/blob.bin", std::string("ab\0cd", 5));
  EXPECT_EQ(call(R"({"op":"read","path":"blob.bin"})"),
            "invalid_argument: files: 'blob.bin' is not a text file (a NUL byte at offset 2)");
  dir_.write("root/latin1.txt", "caf\xe9!");
  EXPECT_EQ(call(R"({"op":"read","path":"latin1.txt"})"),
            "invalid_argument: files: 'latin1.txt' is not UTF-8 text (invalid byte at offset 3)");
}

}  // namespace
}  // namespace weir::tools
