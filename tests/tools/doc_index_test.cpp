#include "weir/tools/doc_index.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"
#include "weir/tools/builtin.hpp"

namespace weir::tools {
namespace {

using test::TempDir;

TEST(DocIndexTest, TheRightDocumentRanksFirst) {
  TempDir dir;
  dir.write("attention.md",
            "# Paged attention\n\nThe KV cache is split into fixed-size blocks; a block table maps "
            "each sequence's logical blocks to physical ones, like virtual memory pages.\n");
  dir.write("search/bm25.txt",
            "BM25 ranks documents by term frequency, saturated by k1, and by inverse document "
            "frequency, with length normalisation controlled by b.\n");
  dir.write("notes",
            "Backpressure: a bounded queue makes fast producers wait for slow consumers.\n");
  auto ix = DocumentIndex::build(dir.path());
  ASSERT_TRUE(ix) << ix.error().message;
  EXPECT_EQ((*ix)->doc_count(), 3u);
  EXPECT_EQ((*ix)->passage_count(), 3u);

  auto hits = (*ix)->search("inverse document frequency", 5);
  ASSERT_FALSE(hits.empty());
  EXPECT_EQ(hits[0].path, "search/bm25.txt");
  EXPECT_EQ(hits[0].offset, 0u);
  EXPECT_GT(hits[0].score, 0);
  EXPECT_NE(hits[0].snippet.find("inverse document frequency"), std::string::npos)
      << hits[0].snippet;

  hits = (*ix)->search("Block TABLE pages", 5);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].path, "attention.md");

  hits = (*ix)->search("queue", 5);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].path, "notes");  // a file without an extension is indexed

  EXPECT_TRUE((*ix)->search("zebra", 5).empty());
  EXPECT_TRUE((*ix)->search("", 5).empty());
}

TEST(DocIndexTest, LongDocumentsAreSplitIntoPassagesAndTheSnippetComesFromTheHit) {
  TempDir dir;
  std::string doc;
  for (int i = 0; i < 40; ++i)
    doc += "Paragraph " + std::to_string(i) + " talks about ordinary filler material.\n\n";
  const std::size_t needle_at = doc.size();
  doc += "Checkpointing writes the superstep state so that a crashed run resumes.\n\n";
  for (int i = 0; i < 40; ++i)
    doc += "More filler text in paragraph " + std::to_string(i) + ".\n\n";
  dir.write("long.md", doc);
  auto ix = DocumentIndex::build(dir.path());
  ASSERT_TRUE(ix) << ix.error().message;
  EXPECT_GT((*ix)->passage_count(), 3u);
  auto hits = (*ix)->search("checkpointing crashed", 3);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_LE(hits[0].offset, needle_at);
  EXPECT_GT(hits[0].offset, 0u);
  EXPECT_NE(hits[0].snippet.find("Checkpointing writes the superstep state"), std::string::npos)
      << hits[0].snippet;
}

TEST(DocIndexTest, TwoThousandDocumentsInBoundedMemory) {
  TempDir dir;
  for (int i = 0; i < 2000; ++i) {
    std::string text = "Document " + std::to_string(i) + " is about topic" +
                       std::to_string(i % 50) + " and word" + std::to_string(i) +
                       ".\n\nShared filler text for every file.\n";
    dir.write("d/" + std::to_string(i / 100) + "/doc" + std::to_string(i) + ".txt", text);
  }
  auto ix = DocumentIndex::build(dir.path());
  ASSERT_TRUE(ix) << ix.error().message;
  EXPECT_EQ((*ix)->doc_count(), 2000u);
  EXPECT_EQ((*ix)->passage_count(), 2000u);
  const std::size_t bytes = (*ix)->memory_bytes();
  EXPECT_GT(bytes, 0u);
  EXPECT_LT(bytes, 4u << 20) << "the index of 2,000 tiny documents should stay small";
  auto hits = (*ix)->search("word1234", 3);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].path, "d/12/doc1234.txt");
  EXPECT_EQ((*ix)->search("topic7", 100).size(), 40u);
}

TEST(DocIndexTest, MemoryCapIsEnforced) {
  TempDir dir;
  for (int i = 0; i < 300; ++i)
    dir.write("f" + std::to_string(i) + ".txt", "unique" + std::to_string(i));
  DocIndexOptions o;
  o.max_memory_bytes = 1000;
  auto ix = DocumentIndex::build(dir.path(), o);
  ASSERT_FALSE(ix);
  EXPECT_TRUE(ix.error().is(Errc::memory_budget_exceeded));
  EXPECT_NE(ix.error().message.find("(DocIndexOptions::max_memory_bytes)"), std::string::npos)
      << ix.error().message;
}

TEST(DocIndexTest, EmptyFolder) {
  TempDir dir;
  auto ix = DocumentIndex::build(dir.path());
  ASSERT_TRUE(ix) << ix.error().message;
  EXPECT_EQ((*ix)->doc_count(), 0u);
  EXPECT_TRUE((*ix)->search("anything", 5).empty());
}

TEST(DocIndexTest, BinaryAndOtherFilesAreSkipped) {
  TempDir dir;
  dir.write("good.md", "alpha beta\n");
  dir.write("blob", std::string("alpha\0\x01\x02", 8));  // no extension, binary
  dir.write("bad.txt", "alpha \xff\xfe gamma\n");        // invalid UTF-8
  dir.write("image.png", "alpha");                       // not a text extension
  auto ix = DocumentIndex::build(dir.path());
  ASSERT_TRUE(ix) << ix.error().message;
  EXPECT_EQ((*ix)->doc_count(), 1u);
  EXPECT_EQ((*ix)->skipped_count(), 2u);
  auto hits = (*ix)->search("alpha", 5);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].path, "good.md");
}

TEST(DocIndexTest, MissingFolder) {
  auto ix = DocumentIndex::build("/nonexistent/weir/docs");
  ASSERT_FALSE(ix);
  EXPECT_TRUE(ix.error().is(Errc::not_found));
  EXPECT_EQ(ix.error().message, "doc index: folder '/nonexistent/weir/docs' does not exist");
}

TEST(DocIndexTest, SearchTool) {
  TempDir dir;
  dir.write("kv.md", "The KV cache stores keys and values of past tokens.\n");
  dir.write("other.md", "Unrelated words about gardening.\n");
  auto ix = DocumentIndex::build(dir.path());
  ASSERT_TRUE(ix);
  auto tool = make_doc_search_tool(*ix);
  EXPECT_EQ(tool->name(), "doc_search");
  auto r = test::invoke(*tool, R"({"query":"kv cache","k":3})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->rfind("1. kv.md (offset 0, score ", 0), 0u) << *r;
  EXPECT_NE(r->find(")\n   The KV cache stores keys and values of past tokens.\n"),
            std::string::npos)
      << *r;
  EXPECT_EQ(r->find("2."), std::string::npos);
  EXPECT_EQ(test::show(test::invoke(*tool, R"({"query":"zebra"})")),
            "ok: no passages match \"zebra\"");
}

TEST(DocIndexTest, SampleLibraryAnswersObviousQueries) {
  auto ix = DocumentIndex::build(std::filesystem::path(WEIR_SOURCE_DIR) / "samples" / "data");
  ASSERT_TRUE(ix) << ix.error().message;
  EXPECT_GE((*ix)->doc_count(), 8u);
  EXPECT_EQ((*ix)->skipped_count(), 0u);
  auto first = [&](std::string_view q) {
    auto hits = (*ix)->search(q, 3);
    return hits.empty() ? std::string("(none)") : hits[0].path;
  };
  EXPECT_EQ(first("block table physical blocks"), "paged_attention.md");
  EXPECT_EQ(first("inverse document frequency saturation"), "bm25.md");
  EXPECT_EQ(first("load shedding bounded queue"), "backpressure.md");
  EXPECT_EQ(first("resume from the last superstep checkpoint"), "checkpointing.md");
}

}  // namespace
}  // namespace weir::tools
