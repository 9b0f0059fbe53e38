// DocumentIndex: BM25 search over a folder of text and markdown files.
//
// build() walks the folder recursively and indexes .txt, .md and .markdown files and files
// without an extension; any file that is not valid UTF-8 text (a NUL byte, a bad sequence) or is
// larger than max_file_bytes is skipped and counted. Each document is read in 64 KiB chunks,
// one file at a time, and cut into passages of about passage_bytes (at a paragraph break once
// that size is reached, at whitespace past twice that size, anywhere past four times). The
// index keeps, per passage, only its file, byte offset, length and token count, plus postings
// (passage, term frequency) per term: no document text stays in memory. Snippets are read from
// the file at query time (a file changed since the build gives a stale or empty snippet).
//
// Scoring: Okapi BM25 with k1 = 1.2, b = 0.75 over passages; tokens are runs of ASCII letters
// and digits (lowercased) and non-ASCII bytes, at most 64 bytes each. search() returns the best
// passage of each document, best document first (ties: path order).
//
// Thread safety: an index is immutable after build(); search() may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weir/runtime/error.hpp"

namespace weir::tools {

struct DocIndexOptions {
  std::size_t passage_bytes = 1024;
  std::size_t max_file_bytes = 16u << 20;     // larger files are skipped
  std::size_t max_documents = 100000;         // more -> invalid_argument
  std::size_t max_memory_bytes = 512u << 20;  // the index's own estimate; more -> error
  std::size_t snippet_bytes = 240;
};

struct DocHit {
  std::string path;          // relative to the folder, '/' separated
  std::uint64_t offset = 0;  // the passage's byte offset in the file
  double score = 0;
  std::string snippet;  // up to snippet_bytes of the passage, whitespace collapsed
};

class DocumentIndex {
 public:
  // Errors: not_found (no such folder), invalid_argument (not a folder, too many documents),
  // memory_budget_exceeded (estimate above max_memory_bytes), io_error (a walk failure).
  // Unreadable files are skipped, not errors.
  static Result<std::shared_ptr<DocumentIndex>> build(const std::filesystem::path& folder,
                                                      DocIndexOptions opts);
  static Result<std::shared_ptr<DocumentIndex>> build(const std::filesystem::path& folder);

  // Up to k hits (k is clipped to [1, 100]); empty when no query token is indexed.
  std::vector<DocHit> search(std::string_view query, std::size_t k) const;

  std::size_t doc_count() const noexcept { return docs_.size(); }
  std::size_t passage_count() const noexcept { return passages_.size(); }
  std::size_t term_count() const noexcept { return postings_.size(); }
  std::size_t skipped_count() const noexcept { return skipped_; }  // binary/oversized files
  // Bytes held by the index's tables (capacities), an estimate of its heap use.
  std::size_t memory_bytes() const noexcept;
  const std::filesystem::path& folder() const noexcept { return folder_; }

 private:
  struct Passage {
    std::uint32_t doc;
    std::uint32_t length;  // bytes
    std::uint64_t offset;  // bytes from the file's start
    std::uint32_t tokens;
  };
  struct Posting {
    std::uint32_t passage;
    std::uint32_t tf;
  };
  class Builder;

  DocumentIndex() = default;
  std::string read_snippet(const Passage& p, const std::vector<std::string>& terms) const;

  std::filesystem::path folder_;
  DocIndexOptions opts_;
  std::vector<std::string> docs_;  // relative paths
  std::vector<Passage> passages_;
  std::unordered_map<std::string, std::uint32_t> terms_;  // term -> index into postings_
  std::vector<std::vector<Posting>> postings_;
  double avg_tokens_ = 0;
  std::size_t skipped_ = 0;
};

}  // namespace weir::tools
