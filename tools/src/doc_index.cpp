#include "weir/tools/doc_index.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <system_error>
#include <unordered_set>

#include "weir/runtime/memory_budget.hpp"
#include "weir/runtime/text.hpp"

namespace weir::tools {

namespace fs = std::filesystem;

namespace {

constexpr double kK1 = 1.2;
constexpr double kB = 0.75;
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kMaxTokenBytes = 64;

bool token_char(unsigned char c) {
  return std::isalnum(c) || c >= 0x80;
}
bool space_char(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

bool indexable_name(const fs::path& p) {
  const std::string ext = p.extension().string();
  if (ext.empty()) return true;
  std::string lower;
  for (char c : ext) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == ".txt" || lower == ".md" || lower == ".markdown";
}

// Calls f(token) for each token of `text` (lowercased).
template <class F>
void for_each_token(std::string_view text, F&& f) {
  std::string tok;
  for (unsigned char c : text) {
    if (token_char(c)) {
      if (tok.size() < kMaxTokenBytes) tok += static_cast<char>(std::tolower(c));
    } else if (!tok.empty()) {
      f(tok);
      tok.clear();
    }
  }
  if (!tok.empty()) f(tok);
}

// True when the whole file is valid UTF-8 without NUL bytes (read in chunks).
bool is_text_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  Utf8Stream v;
  std::string buf(kReadChunk, '\0');
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n == 0) break;
    if (!v.feed(std::string_view(buf.data(), n))) return false;
  }
  return v.finish();
}

template <class T>
std::size_t vector_bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

}  // namespace

// Feeds one document's bytes through the passage cutter and the tokenizer.
class DocumentIndex::Builder {
 public:
  explicit Builder(DocumentIndex& ix) : ix_(ix) {}

  void add_file(std::uint32_t doc, const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::string buf(kReadChunk, '\0');
    doc_ = doc;
    pos_ = 0;
    start_ = 0;
    newlines_ = 0;
    tokens_ = 0;
    tok_.clear();
    tf_.clear();
    const std::size_t target = std::max<std::size_t>(ix_.opts_.passage_bytes, 64);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const auto n = static_cast<std::size_t>(in.gcount());
      for (std::size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(buf[i]);
        if (token_char(c)) {
          if (tok_.size() < kMaxTokenBytes) tok_ += static_cast<char>(std::tolower(c));
        } else {
          flush_token();
        }
        if (c == '\n') {
          ++newlines_;
        } else if (!space_char(c)) {
          newlines_ = 0;
        }
        ++pos_;
        const std::uint64_t len = pos_ - start_;
        const bool cut = (len >= target && c == '\n' && newlines_ >= 2) ||
                         (len >= 2 * target && space_char(c)) || (len >= 4 * target && c < 0x80) ||
                         len >= 8 * target;
        if (cut) finish_passage();
      }
      if (n == 0) break;
    }
    finish_passage();
  }

 private:
  void flush_token() {
    if (tok_.empty()) return;
    auto [it, inserted] =
        ix_.terms_.try_emplace(tok_, static_cast<std::uint32_t>(ix_.postings_.size()));
    if (inserted) ix_.postings_.emplace_back();
    ++tf_[it->second];
    ++tokens_;
    tok_.clear();
  }

  void finish_passage() {
    flush_token();
    if (tokens_ > 0) {
      const auto id = static_cast<std::uint32_t>(ix_.passages_.size());
      ix_.passages_.push_back({doc_, static_cast<std::uint32_t>(pos_ - start_), start_, tokens_});
      for (const auto& [term, tf] : tf_) ix_.postings_[term].push_back({id, tf});
      total_tokens_ += tokens_;
    }
    tf_.clear();
    tokens_ = 0;
    start_ = pos_;
    newlines_ = 0;
  }

 public:
  std::uint64_t total_tokens_ = 0;

 private:
  DocumentIndex& ix_;
  std::uint32_t doc_ = 0;
  std::uint64_t pos_ = 0, start_ = 0;
  int newlines_ = 0;
  std::uint32_t tokens_ = 0;
  std::string tok_;
  std::unordered_map<std::uint32_t, std::uint32_t> tf_;  // term -> count in this passage
};

Result<std::shared_ptr<DocumentIndex>> DocumentIndex::build(const fs::path& folder) {
  return build(folder, DocIndexOptions{});
}

Result<std::shared_ptr<DocumentIndex>> DocumentIndex::build(const fs::path& folder,
                                                            DocIndexOptions opts) {
  std::error_code ec;
  const auto st = fs::status(folder, ec);
  if (ec || !fs::exists(st))
    return Error(Errc::not_found, "doc index: folder '" + folder.string() + "' does not exist");
  if (!fs::is_directory(st))
    return Error(Errc::invalid_argument, "doc index: '" + folder.string() + "' is not a folder");

  std::shared_ptr<DocumentIndex> ix(new DocumentIndex());
  ix->folder_ = folder;
  ix->opts_ = opts;

  // Collect candidate paths first (sorted, so document ids do not depend on directory order).
  std::vector<fs::path> files;
  for (fs::recursive_directory_iterator
           it(folder, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_regular_file(e2) || !indexable_name(it->path())) continue;
    if (files.size() >= opts.max_documents)
      return Error(Errc::invalid_argument, "doc index: '" + folder.string() + "' holds more than " +
                                               std::to_string(opts.max_documents) +
                                               " documents (DocIndexOptions::max_documents)");
    files.push_back(it->path());
  }
  if (ec)
    return Error(Errc::io_error,
                 "doc index: cannot walk '" + folder.string() + "': " + ec.message());
  std::sort(files.begin(), files.end());

  Builder b(*ix);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const fs::path& p = files[i];
    std::error_code e2;
    const auto size = fs::file_size(p, e2);
    if (e2 || size > opts.max_file_bytes || !is_text_file(p)) {
      ++ix->skipped_;
      continue;
    }
    const auto doc = static_cast<std::uint32_t>(ix->docs_.size());
    ix->docs_.push_back(p.lexically_relative(folder).generic_string());
    b.add_file(doc, p);
    if (i % 256 == 255 && ix->memory_bytes() > opts.max_memory_bytes)
      return Error(Errc::memory_budget_exceeded,
                   "doc index: the index of '" + folder.string() + "' grew past " +
                       format_bytes(opts.max_memory_bytes) + " after " + std::to_string(i + 1) +
                       " of " + std::to_string(files.size()) +
                       " files (DocIndexOptions::max_memory_bytes)");
  }
  for (auto& pl : ix->postings_) pl.shrink_to_fit();
  ix->passages_.shrink_to_fit();
  ix->docs_.shrink_to_fit();
  if (ix->memory_bytes() > opts.max_memory_bytes)
    return Error(Errc::memory_budget_exceeded,
                 "doc index: the index of '" + folder.string() + "' needs " +
                     format_bytes(ix->memory_bytes()) + ", more than " +
                     format_bytes(opts.max_memory_bytes) + " (DocIndexOptions::max_memory_bytes)");
  ix->avg_tokens_ =
      ix->passages_.empty() ? 0 : static_cast<double>(b.total_tokens_) / ix->passages_.size();
  return ix;
}

std::size_t DocumentIndex::memory_bytes() const noexcept {
  std::size_t n =
      sizeof(*this) + vector_bytes(docs_) + vector_bytes(passages_) + vector_bytes(postings_);
  for (const auto& d : docs_) n += d.capacity() > 15 ? d.capacity() + 1 : 0;
  for (const auto& pl : postings_) n += vector_bytes(pl);
  // unordered_map: a bucket pointer each, and a node (next pointer, key, value, hash) per term.
  n += terms_.bucket_count() * sizeof(void*);
  for (const auto& [term, unused] : terms_)
    n += sizeof(void*) + sizeof(std::string) + 8 + sizeof(std::size_t) +
         (term.capacity() > 15 ? term.capacity() + 1 : 0);
  return n;
}

std::vector<DocHit> DocumentIndex::search(std::string_view query, std::size_t k) const {
  k = std::clamp<std::size_t>(k, 1, 100);
  std::vector<std::string> terms;
  for_each_token(query, [&](const std::string& t) {
    if (std::find(terms.begin(), terms.end(), t) == terms.end()) terms.push_back(t);
  });
  std::unordered_map<std::uint32_t, double> scores;
  const double n = static_cast<double>(passages_.size());
  for (const auto& t : terms) {
    auto it = terms_.find(t);
    if (it == terms_.end()) continue;
    const auto& pl = postings_[it->second];
    const double df = static_cast<double>(pl.size());
    const double idf = std::log(1 + (n - df + 0.5) / (df + 0.5));
    for (const auto& post : pl) {
      const double tf = post.tf;
      const double len = passages_[post.passage].tokens;
      const double norm = kK1 * (1 - kB + kB * len / std::max(avg_tokens_, 1.0));
      scores[post.passage] += idf * tf * (kK1 + 1) / (tf + norm);
    }
  }
  // The best passage per document.
  std::unordered_map<std::uint32_t, std::pair<double, std::uint32_t>> best;
  for (const auto& [passage, score] : scores) {
    const std::uint32_t doc = passages_[passage].doc;
    auto [it, inserted] = best.try_emplace(doc, score, passage);
    if (!inserted &&
        (score > it->second.first || (score == it->second.first && passage < it->second.second)))
      it->second = {score, passage};
  }
  std::vector<std::pair<double, std::uint32_t>> ranked;  // score, passage
  ranked.reserve(best.size());
  for (const auto& [doc, sp] : best) ranked.push_back(sp);
  auto better = [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return docs_[passages_[a.second].doc] < docs_[passages_[b.second].doc];
  };
  const std::size_t take = std::min(k, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(take),
                    ranked.end(), better);
  std::vector<DocHit> hits;
  for (std::size_t i = 0; i < take; ++i) {
    const Passage& p = passages_[ranked[i].second];
    hits.push_back({docs_[p.doc], p.offset, ranked[i].first, read_snippet(p, terms)});
  }
  return hits;
}

std::string DocumentIndex::read_snippet(const Passage& p,
                                        const std::vector<std::string>& terms) const {
  std::ifstream in(folder_ / docs_[p.doc], std::ios::binary);
  if (!in) return {};
  const std::size_t want = std::min<std::size_t>(p.length, 8192);
  std::string text(want, '\0');
  in.seekg(static_cast<std::streamoff>(p.offset));
  in.read(text.data(), static_cast<std::streamsize>(want));
  text.resize(static_cast<std::size_t>(in.gcount()));

  // Start a little before the first query term, at a word boundary.
  const std::unordered_set<std::string> wanted(terms.begin(), terms.end());
  std::size_t hit = std::string::npos;
  std::string tok;
  for (std::size_t i = 0; i <= text.size() && hit == std::string::npos; ++i) {
    const auto c = i < text.size() ? static_cast<unsigned char>(text[i]) : ' ';
    if (token_char(c)) {
      if (tok.size() < kMaxTokenBytes) tok += static_cast<char>(std::tolower(c));
    } else {
      if (!tok.empty() && wanted.contains(tok)) hit = i - std::min(i, tok.size());
      tok.clear();
    }
  }
  const std::size_t snippet = std::max<std::size_t>(opts_.snippet_bytes, 16);
  std::size_t from = 0;
  if (hit != std::string::npos && hit > snippet / 4) {
    from = hit - snippet / 4;
    while (from < hit && !space_char(static_cast<unsigned char>(text[from]))) ++from;
  }
  std::string_view view(text);
  view.remove_prefix(from);
  view.remove_prefix(utf8_skip_continuation(view));
  const bool cut_end = view.size() > snippet;
  view = view.substr(0, utf8_cut(view, snippet));
  std::string out;
  if (from > 0) out += "...";
  bool space = false;
  for (char c : view) {
    if (space_char(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  if (cut_end) out += "...";
  return out;
}

}  // namespace weir::tools
