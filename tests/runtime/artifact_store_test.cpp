#include "weir/runtime/artifact_store.hpp"

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json/serialize.hpp>

#include "weir/runtime/memory_budget.hpp"

namespace weir {
namespace {

namespace fs = std::filesystem;

class ArtifactStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weir_art_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<ArtifactStore> open(std::size_t memory_limit = 1 << 20,
                                      std::size_t disk_limit = 64 << 20,
                                      MemoryBudget* budget = nullptr) {
    auto s = ArtifactStore::open({dir_, memory_limit, disk_limit, 200, budget});
    EXPECT_TRUE(s) << s.error().message;
    return std::move(*s);
  }
  static std::string text(std::size_t n, char seed) {
    std::string s(n, ' ');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + seed) % 26);
    return s;
  }
  fs::path dir_;
};

TEST_F(ArtifactStoreTest, PutGetRangeAndContentAddress) {
  auto store = open();
  auto ref = store->put("hello, artifacts", "text/plain", "", "run-1");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->id.size(), 64u);
  EXPECT_EQ(ref->bytes, 16u);
  EXPECT_EQ(ref->preview, "hello, artifacts");
  EXPECT_EQ(*store->get(ref->id), "hello, artifacts");
  EXPECT_EQ(*store->get_range(ref->id, 7, 100), "artifacts");
  EXPECT_EQ(*store->get_range(ref->id, 100, 5), "");
  // The id is the SHA-256 of the bytes: a well-known vector.
  auto abc = store->put("abc", "text/plain");
  EXPECT_EQ(abc->id, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto json = ref->to_json();
  EXPECT_EQ(ArtifactRef::from_json(json)->id, ref->id);
  EXPECT_FALSE(ArtifactRef::from_json(boost::json::object{{"id", "x"}}));
}

TEST_F(ArtifactStoreTest, PreviewIsCutOnACharacterBoundary) {
  auto store = open();
  std::string s = std::string(199, 'x') + "\xc3\xa9" + "tail";  // 'é' straddles byte 200
  auto ref = store->put(s, "text/plain");
  EXPECT_EQ(ref->preview, std::string(199, 'x'));
  auto bin = store->put(std::string("\x00\x01\x02", 3), "application/octet-stream");
  EXPECT_EQ(bin->preview, "");
  auto sum = store->put(text(5000, 1), "text/plain", "5000 letters");
  EXPECT_EQ(sum->preview, "5000 letters");
}

TEST_F(ArtifactStoreTest, EqualBytesAreStoredOnce) {
  auto store = open();
  auto a = store->put(text(1000, 3), "text/plain", "", "run-a");
  auto b = store->put(text(1000, 3), "text/plain", "", "run-b");
  EXPECT_EQ(a->id, b->id);
  auto st = store->stats();
  EXPECT_EQ(st.memory_blobs, 1u);
  EXPECT_EQ(st.dedup_hits, 1u);
  EXPECT_EQ(store->release_owner("run-a"), 0u);  // run-b still holds it
  EXPECT_TRUE(store->contains(a->id));
  EXPECT_EQ(store->release_owner("run-b"), 1u);
  EXPECT_FALSE(store->contains(a->id));
}

TEST_F(ArtifactStoreTest, LeastRecentlyUsedBlobsSpillToDiskAndReadBack) {
  auto store = open(300 * 1024);
  std::vector<ArtifactRef> refs;
  for (int i = 0; i < 10; ++i)
    refs.push_back(*store->put(text(100 * 1024, static_cast<char>(i)), "text/plain"));
  auto st = store->stats();
  EXPECT_LE(st.memory_bytes, 300u * 1024);
  EXPECT_GE(st.spills, 7u);
  EXPECT_EQ(st.memory_blobs + st.disk_blobs >= 10, true);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(*store->get(refs[i].id), text(100 * 1024, static_cast<char>(i))) << i;
  EXPECT_EQ(*store->get_range(refs[0].id, 70000, 10), text(100 * 1024, 0).substr(70000, 10));
  EXPECT_GT(store->stats().disk_reads, 0u);
  // A blob bigger than the memory tier goes straight to disk.
  auto big = store->put(text(1 << 20, 9), "text/plain");
  ASSERT_TRUE(big);
  EXPECT_EQ(store->get(big->id)->size(), 1u << 20);
}

TEST_F(ArtifactStoreTest, BlobsSurviveARestart) {
  std::string id;
  {
    auto store = open(1024);  // tiny memory tier: everything spills
    id = store->put(text(50000, 4), "application/json", "a summary")->id;
    ASSERT_TRUE(store->put(text(10, 5), "text/plain"));
  }
  auto again = open(1024);
  auto ref = again->stat(id);
  ASSERT_TRUE(ref) << ref.error().message;
  EXPECT_EQ(ref->media_type, "application/json");
  EXPECT_EQ(ref->preview, "a summary");
  EXPECT_EQ(*again->get(id), text(50000, 4));
  EXPECT_TRUE(again->release(id, ""));  // found on disk: held by "" until released
  EXPECT_FALSE(fs::exists(dir_ / id.substr(0, 2) / id));
}

TEST_F(ArtifactStoreTest, CorruptAndTruncatedFilesAreReportedNotReturned) {
  std::string id;
  {
    auto store = open(1024);
    id = store->put(text(200000, 6), "text/plain")->id;
  }
  fs::path file = dir_ / id.substr(0, 2) / id;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1000, std::ios::end);
    f.put('#');
  }
  auto store = open(1024);
  auto r = store->get(id);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(Errc::corrupt_data));
  EXPECT_EQ(r.error().message,
            "artifact file " + file.string() +
                " is corrupt: checksum mismatch in chunk 3 (bytes 196608..200000)");
  EXPECT_TRUE(store->get_range(id, 0, 1000));  // chunks that are intact still read
  fs::resize_file(file, fs::file_size(file) - 10);
  auto reopened = open(1024);
  auto t = reopened->get(id);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find(
                "is corrupt: holds 199990 payload bytes, expected 200000 (truncated or extended)"),
            std::string::npos)
      << t.error().message;
  auto missing = reopened->get(std::string(64, '0'));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().to_string(), "not_found: artifact " + std::string(64, '0') +
                                             " is not in the store (released, or never stored)");
}

TEST_F(ArtifactStoreTest, DiskLimitAndMemoryOnlyStoreRefuseClearly) {
  auto store = open(1024, 100 * 1024);
  ASSERT_TRUE(store->put(text(60 * 1024, 1), "text/plain"));
  auto over = store->put(text(60 * 1024, 2), "text/plain");
  ASSERT_FALSE(over);
  EXPECT_EQ(
      over.error().message,
      "the artifact store's disk tier would grow to 120.5 KiB, over disk_limit=100.0 KiB; raise "
      "artifacts.disk_limit or release artifacts");
  EXPECT_EQ(store->stats().disk_blobs, 1u);  // nothing stored on failure

  auto mem = ArtifactStore::open({{}, 1000, 0, 200, nullptr});
  ASSERT_TRUE(mem);
  auto r = (*mem)->put(text(2000, 1), "text/plain");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "an artifact of 2.0 KiB does not fit the memory tier (memory_limit=1000 B, 0 B in use) "
            "and the store "
            "has no disk directory; set artifacts.dir or raise the limit");
}

TEST_F(ArtifactStoreTest, MemoryTierIsChargedToTheBudget) {
  BudgetLimits lim;
  lim.category[static_cast<int>(BudgetCategory::artifacts)] = 150 * 1024;
  MemoryBudget budget(lim);
  {
    auto store = open(1 << 20, 64 << 20, &budget);
    ASSERT_TRUE(store->put(text(100 * 1024, 1), "text/plain", "", "r"));
    EXPECT_EQ(budget.used(BudgetCategory::artifacts), 100u * 1024);
    ASSERT_TRUE(store->put(text(100 * 1024, 2), "text/plain", "",
                           "r"));  // the first spills to fit the budget
    EXPECT_EQ(budget.used(BudgetCategory::artifacts), 100u * 1024);
    EXPECT_EQ(store->stats().spills, 1u);
    store->release_owner("r");
    EXPECT_EQ(budget.used(BudgetCategory::artifacts), 0u);
  }
}

TEST_F(ArtifactStoreTest, ConcurrentPutsAndGetsFromManyThreads) {
  auto store = open(256 * 1024);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        std::string data = text(1000 + static_cast<std::size_t>((t * 300 + i) % 97) * 100,
                                static_cast<char>(i % 20));
        auto ref = store->put(data, "text/plain", "", "run-" + std::to_string(t));
        if (!ref || *store->get(ref->id) != data) ++bad;
      }
      store->release_owner("run-" + std::to_string(t));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  auto st = store->stats();
  EXPECT_EQ(st.memory_blobs + st.disk_blobs, 0u);
  EXPECT_EQ(st.memory_bytes, 0u);
}

}  // namespace
}  // namespace weir
