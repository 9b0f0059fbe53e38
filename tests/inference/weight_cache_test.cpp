// The rearranged copy of a model (model/weight_cache.hpp): a load from it gives the same weights
// and logits as rearranging; a stale, truncated or corrupt copy is ignored and rebuilt; a
// directory that cannot be written still loads.
#include "model/weight_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "model/repack.hpp"
#include "runner/llama_runner.hpp"
#include "weir/inference/gguf_writer.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {
namespace {

namespace fs = std::filesystem;

class WeightCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_reads_x16()) GTEST_SKIP() << "this CPU's kernels read no x16 layout: no copy to keep";
    dir_ = fs::temp_directory_path() / ("weir_wcache_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "cache");
    options_.cache_dir = dir_ / "cache";
    options_.cache_min_bytes = 0;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  fs::path model(GgmlType type) {
    RandomModelShape shape{256, 512, 2, 4, 4, 512, 64};  // rows of 256 and 512: Q4_K fits
    const fs::path p = dir_ / (std::string("m-") + ggml_type_name(type) + ".gguf");
    EXPECT_TRUE(write_random_llama(p, shape, type, 11));
    return p;
  }
  std::shared_ptr<const Model> load(const fs::path& p, ModelOptions o) {
    auto m = Model::load(p, o);
    EXPECT_TRUE(m) << m.error().message;
    return m ? *m : nullptr;
  }
  fs::path copy_of(const fs::path& p) { return *cache_location(p, options_.cache_dir); }

  fs::path dir_;
  ModelOptions options_;
};

std::span<const std::byte> image(const Model& m) {
  return {m.gguf().header_bytes().data(), m.gguf().file_bytes()};
}

std::vector<float> logits(const std::shared_ptr<const Model>& m) {
  auto runner = make_llama_runner(m, 2);
  const auto& hp = m->hp();
  KvLayout L{hp.n_layers, hp.n_kv_heads, hp.head_dim, 16, 4};
  std::vector<float> pool(static_cast<std::size_t>(L.total_elems()));
  std::vector<BlockId> table = {3};
  StepBatch batch;
  batch.tokens = {1, 7, 99};
  batch.positions = {0, 1, 2};
  batch.seq_index = {0, 0, 0};
  batch.seqs = {{table, 3}};
  batch.logit_rows = {2};
  std::vector<float> out(static_cast<std::size_t>(hp.n_vocab));
  EXPECT_TRUE(runner->forward(batch, L, pool, out));
  return out;
}

TEST_F(WeightCache, ACachedLoadHasTheRearrangedLoadsWeightsAndLogits) {
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_k, GgmlType::q4_0}) {
    SCOPED_TRACE(ggml_type_name(type));
    const fs::path p = model(type);
    auto first = load(p, options_);
    ASSERT_TRUE(first);
    EXPECT_TRUE(first->load_report().rearranged);
    EXPECT_FALSE(first->load_report().from_cache);
    EXPECT_TRUE(first->load_report().cache_writing) << first->load_report().note;
    first.reset();  // waits for the copy
    EXPECT_TRUE(fs::exists(copy_of(p)));

    auto cached = load(p, options_);
    ASSERT_TRUE(cached);
    EXPECT_TRUE(cached->load_report().from_cache) << cached->load_report().note;
    EXPECT_FALSE(cached->load_report().cache_writing);
    EXPECT_EQ(cached->layers()[0].wq.layout, x16_layout(type));

    ModelOptions off = options_;
    off.weight_cache = false;
    auto computed = load(p, off);
    ASSERT_TRUE(computed);
    EXPECT_FALSE(computed->load_report().from_cache);
    EXPECT_TRUE(computed->load_report().cache.empty());

    ASSERT_EQ(image(*cached).size(), image(*computed).size());
    EXPECT_EQ(std::memcmp(image(*cached).data(), image(*computed).data(), image(*cached).size()),
              0);
    EXPECT_EQ(logits(cached), logits(computed));
  }
}

// A copy of several 2 MiB pages: where the kernel maps the page cache 2 MiB at a time (ext4,
// XFS on recent kernels) the load maps it instead of copying it; either way the same bytes.
TEST_F(WeightCache, AMappedOrCopiedCopyHoldsTheSameBytes) {
  RandomModelShape shape{1024, 2816, 2, 8, 8, 4096, 64};  // 31 MB
  const fs::path p = dir_ / "larger.gguf";
  ASSERT_TRUE(write_random_llama(p, shape, GgmlType::q8_0, 5));
  ASSERT_TRUE(load(p, options_));  // writes the copy
  auto cached = load(p, options_);
  ASSERT_TRUE(cached);
  EXPECT_TRUE(cached->load_report().from_cache) << cached->load_report().note;
  EXPECT_NE(cached->load_report().mapped, cached->load_report().in_memory);
  RecordProperty("mapped", cached->load_report().mapped ? "yes" : "no");
  ModelOptions off = options_;
  off.weight_cache = false;
  auto computed = load(p, off);
  ASSERT_TRUE(computed);
  EXPECT_TRUE(computed->load_report().in_memory);
  ASSERT_EQ(image(*cached).size(), image(*computed).size());
  EXPECT_EQ(std::memcmp(image(*cached).data(), image(*computed).data(), image(*cached).size()), 0);
  EXPECT_EQ(logits(cached), logits(computed));
  // Nothing to rearrange: the file itself is mapped where it can be, else copied.
  ModelOptions file_layout = off;
  file_layout.cpu_layout = false;
  auto plain = load(p, file_layout);
  ASSERT_TRUE(plain);
  EXPECT_NE(plain->load_report().mapped, plain->load_report().in_memory);
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(bytes.size(), image(*plain).size());
  EXPECT_EQ(std::memcmp(bytes.data(), image(*plain).data(), bytes.size()), 0);
}

TEST_F(WeightCache, AStaleTruncatedOrCorruptCopyIsIgnoredAndRebuilt) {
  const fs::path p = model(GgmlType::q8_0);
  ASSERT_TRUE(load(p, options_));  // writes the copy (the temporary model waits for it)
  const fs::path c = copy_of(p);
  ASSERT_TRUE(fs::exists(c));
  auto want = logits(load(p, options_));

  auto expect_rebuilt = [&](const std::string& why) {
    SCOPED_TRACE(why);
    auto m = load(p, options_);
    ASSERT_TRUE(m);
    EXPECT_FALSE(m->load_report().from_cache);
    EXPECT_NE(m->load_report().note.find(why), std::string::npos) << m->load_report().note;
    EXPECT_TRUE(m->load_report().cache_writing);
    EXPECT_EQ(logits(m), want);
    m.reset();
    auto again = load(p, options_);
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->load_report().from_cache) << again->load_report().note;
  };

  fs::resize_file(c, fs::file_size(c) - 100);
  expect_rebuilt("truncated");

  auto poke = [&](std::uint64_t at) {
    std::fstream f(c, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put('#');
  };
  poke(0);
  expect_rebuilt("not a weir x16 copy");
  poke(kCacheHeaderBytes + 30);  // inside the GGUF header the copy holds
  expect_rebuilt("does not hold this model");
  poke(8);  // the format version
  expect_rebuilt("another weir version");

  // The model is replaced (a newer download): its time changes, the copy is stale.
  fs::last_write_time(p, fs::last_write_time(p) + std::chrono::seconds(5));
  expect_rebuilt("stale");
}

// Another model of the same size, modification time and GGUF header (a fine-tune copied with
// `cp -p` or `rsync -a`, an image built with fixed times) renamed over the first, as the docs
// say to replace a model: its load must not take the first one's copy. Size, mtime and header
// alone matched, and it ran on the old weights without a word.
TEST_F(WeightCache, AnotherModelOfTheSameSizeTimeAndHeaderIsNotServedTheOldCopy) {
  const fs::path p = dir_ / "model.gguf", other = dir_ / "other.gguf";
  RandomModelShape shape{256, 512, 2, 4, 4, 512, 64};
  ASSERT_TRUE(write_random_llama(p, shape, GgmlType::q8_0, 11));
  ASSERT_TRUE(write_random_llama(other, shape, GgmlType::q8_0, 12));  // other weights
  ASSERT_EQ(fs::file_size(p), fs::file_size(other));
  const auto when = fs::last_write_time(p);
  ASSERT_TRUE(load(p, options_));  // writes the copy of the first
  ASSERT_TRUE(fs::exists(copy_of(p)));
  fs::last_write_time(other, when);
  fs::rename(other, p);
  auto m = load(p, options_);
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->load_report().from_cache);
  EXPECT_NE(m->load_report().note.find("is stale: it records another model file"),
            std::string::npos)
      << m->load_report().note;
  ModelOptions off = options_;
  off.weight_cache = false;
  EXPECT_EQ(logits(m), logits(load(p, off)));
}

TEST_F(WeightCache, ADirectoryThatCannotBeWrittenStillLoads) {
  const fs::path p = model(GgmlType::q8_0);
  auto want = logits(load(p, [&] {
    ModelOptions o = options_;
    o.weight_cache = false;
    return o;
  }()));
  // A path under a regular file cannot be created, whoever runs the test (root ignores modes).
  std::ofstream(dir_ / "plain") << "x";
  ModelOptions o = options_;
  o.cache_dir = dir_ / "plain" / "cache";
  auto m = load(p, o);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->load_report().rearranged);
  EXPECT_FALSE(m->load_report().cache_writing);
  EXPECT_NE(m->load_report().note.find("cannot create"), std::string::npos)
      << m->load_report().note;
  EXPECT_NE(m->load_report().note.find("WEIR_MODEL_CACHE"), std::string::npos);
  EXPECT_EQ(logits(m), want);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().extension() == ".tmp", false);
}

TEST_F(WeightCache, ItsPlaceComesFromTheOptionOrWEIR_MODEL_CACHE) {
  const char* old = std::getenv("WEIR_MODEL_CACHE");
  const std::string saved = old ? old : "";
  const fs::path m = "/models/tiny.gguf";
  ::unsetenv("WEIR_MODEL_CACHE");
  EXPECT_EQ(*cache_location(m, {}), fs::path("/models/tiny.gguf.weir-x16"));
  ::setenv("WEIR_MODEL_CACHE", "off", 1);
  EXPECT_FALSE(cache_location(m, {}));
  // Spaces around a word are no folder's name, and the words for on mean the default place.
  for (const char* v : {" off", "off ", "\tNo\n"}) {
    ::setenv("WEIR_MODEL_CACHE", v, 1);
    EXPECT_FALSE(cache_location(m, {})) << v;
  }
  for (const char* v : {"1", "on", " TRUE ", "yes"}) {
    ::setenv("WEIR_MODEL_CACHE", v, 1);
    EXPECT_EQ(*cache_location(m, {}), fs::path("/models/tiny.gguf.weir-x16")) << v;
  }
  ::setenv("WEIR_MODEL_CACHE", "/var/cache/weir", 1);
  const fs::path in_dir = *cache_location(m, {});
  EXPECT_EQ(in_dir.parent_path(), fs::path("/var/cache/weir"));
  EXPECT_EQ(in_dir.filename().string().rfind("tiny.gguf-", 0), 0u);
  EXPECT_EQ(in_dir.extension(), ".weir-x16");
  // Two models of one name in different folders get different copies.
  EXPECT_NE(*cache_location("/other/tiny.gguf", {}), in_dir);
  // The option wins over the variable.
  EXPECT_EQ(cache_location(m, "/tmp/c")->parent_path(), fs::path("/tmp/c"));
  if (old)
    ::setenv("WEIR_MODEL_CACHE", saved.c_str(), 1);
  else
    ::unsetenv("WEIR_MODEL_CACHE");
}

// One copy per file, however its path is spelt: relative, with "..", through a symbolic link
// (the copy goes beside the file the link names).
TEST_F(WeightCache, AFileHasOneCopyHoweverItsPathIsSpelt) {
  const fs::path p = model(GgmlType::q8_0);
  fs::create_directories(dir_ / "sub");
  fs::create_symlink(p, dir_ / "sub" / "link.gguf");
  const fs::path want = *cache_location(p, options_.cache_dir);
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  EXPECT_EQ(*cache_location(p.filename(), options_.cache_dir), want);
  fs::current_path(cwd);
  EXPECT_EQ(*cache_location(dir_ / "sub" / ".." / p.filename(), options_.cache_dir), want);
  EXPECT_EQ(*cache_location(dir_ / "sub" / "link.gguf", options_.cache_dir), want);
  const char* env = std::getenv("WEIR_MODEL_CACHE");
  const std::string saved = env ? env : "";
  ::unsetenv("WEIR_MODEL_CACHE");  // beside the model
  EXPECT_EQ(cache_location(dir_ / "sub" / "link.gguf", {})->string(), p.string() + ".weir-x16");
  if (env) ::setenv("WEIR_MODEL_CACHE", saved.c_str(), 1);
}

// Something at the copy's path that is not a regular file is refused, not read: a FIFO would
// otherwise block the load forever.
TEST_F(WeightCache, AFifoAtTheCopysPathIsRefusedAtOnce) {
  const fs::path p = model(GgmlType::q8_0);
  ASSERT_EQ(::mkfifo(copy_of(p).c_str(), 0644), 0);
  auto fd = open_cache(copy_of(p), {1, 0, {}});
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().to_string(),
            "corrupt_data: " + copy_of(p).string() + " is not a regular file");
}

// A temporary copy of a live process means it is writing the copy: this one leaves it to it. One
// of a process that is gone was left by a kill: it is removed, and this one writes.
TEST_F(WeightCache, OneProcessWritesTheCopyAndAKilledOnesLeftoverIsRemoved) {
  const fs::path copy = dir_ / "cache" / "m.gguf-0123.weir-x16";
  const fs::path live = copy.string() + ".tmp." + std::to_string(::getppid());
  { std::ofstream(live) << "partial"; }
  auto busy = begin_cache(copy);
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().to_string(),
            "io_error: process " + std::to_string(::getppid()) + " is writing " + copy.string());
  fs::remove(live);
  // A pid above the kernel's largest (pid_max is at most 2^22) is no process.
  const fs::path dead = copy.string() + ".tmp.99999999";
  { std::ofstream(dead) << "partial"; }
  auto w = begin_cache(copy);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(w->tmp));
  ::close(w->fd);
  fs::remove(w->tmp);
}

// A process id in a leftover's name may belong to another process by now: weir as a container's
// pid 1, killed while it wrote the copy and started again as pid 1, found "its own" leftover and
// could never create the file again; any live process with that id made every load say "process
// N is writing" for ever. A writer holds a lock on its file: a leftover nobody holds is removed
// when its id is this process's, or when it has not been written to for a while.
TEST_F(WeightCache, ALeftoverWhoseProcessIdIsTakenAgainIsRemoved) {
  const fs::path copy = dir_ / "cache" / "m.gguf-0123.weir-x16";
  const fs::path mine = copy.string() + ".tmp." + std::to_string(::getpid());
  { std::ofstream(mine) << "partial"; }
  auto w = begin_cache(copy);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->tmp, mine);
  EXPECT_EQ(fs::file_size(mine), 0u);  // made anew
  // While this writer holds its file, another load leaves the writing to it.
  auto second = begin_cache(copy);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().to_string(),
            "io_error: process " + std::to_string(::getpid()) + " is writing " + copy.string());
  ::close(w->fd);
  fs::remove(w->tmp);

  const fs::path stale = copy.string() + ".tmp." + std::to_string(::getppid());  // alive
  { std::ofstream(stale) << "partial"; }
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(1));
  auto after = begin_cache(copy);
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_FALSE(fs::exists(stale));
  ::close(after->fd);
  fs::remove(after->tmp);
}

TEST_F(WeightCache, SmallFilesAndTheFileLayoutKeepNoCopy) {
  const fs::path p = model(GgmlType::q8_0);
  ModelOptions small = options_;
  small.cache_min_bytes = std::uint64_t{1} << 40;
  auto m = load(p, small);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->load_report().rearranged);
  EXPECT_FALSE(m->load_report().cache_writing);
  ModelOptions file_layout = options_;
  file_layout.cpu_layout = false;
  auto f = load(p, file_layout);
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->load_report().rearranged);
  EXPECT_FALSE(f->load_report().cache_writing);
  EXPECT_FALSE(fs::exists(copy_of(p)));
}

}  // namespace
}  // namespace weir::inference
