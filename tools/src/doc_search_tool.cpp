#include <cstdio>

#include <boost/json/parse.hpp>

#include "json_util.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/doc_index.hpp"

namespace weir::tools {

namespace json = boost::json;

namespace {

class DocSearchTool final : public BasicTool {
 public:
  explicit DocSearchTool(std::shared_ptr<const DocumentIndex> index)
      : BasicTool(
            "doc_search",
            "Searches a local library of text and markdown documents (BM25 keyword ranking) and "
            "returns the best matching passages: path, byte offset, score and a snippet. Use "
            "specific keywords; read more of a hit with the files tool when available.",
            json::parse(R"json({
          "type": "object",
          "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 1000,
                      "description": "keywords, e.g. \"paged attention block table\""},
            "k": {"type": "integer", "minimum": 1, "maximum": 20,
                  "description": "how many hits (default 5)"}
          },
          "required": ["query"],
          "additionalProperties": false
        })json")
                .as_object()),
        index_(std::move(index)) {}

  boost::asio::awaitable<Result<std::string>> invoke(json::object args,
                                                     const ToolContext& ctx) override {
    co_return run(args);
  }

  Result<std::string> run(const json::object& args) const {
    if (!index_) return Error(Errc::tool_failed, "doc_search: no document index was given");
    const std::string query(args.at("query").as_string());
    const auto k = static_cast<std::size_t>(detail::arg_u64(args, "k", 5));
    const auto hits = index_->search(query, k);
    if (hits.empty()) return "no passages match \"" + query + "\"";
    std::string out;
    for (std::size_t i = 0; i < hits.size(); ++i) {
      char score[32];
      std::snprintf(score, sizeof score, "%.2f", hits[i].score);
      out += std::to_string(i + 1) + ". " + hits[i].path + " (offset " +
             std::to_string(hits[i].offset) + ", score " + score + ")\n   " + hits[i].snippet +
             "\n";
    }
    return out;
  }

 private:
  std::shared_ptr<const DocumentIndex> index_;
};

}  // namespace

std::shared_ptr<Tool> make_doc_search_tool(std::shared_ptr<const DocumentIndex> index) {
  return std::make_shared<DocSearchTool>(std::move(index));
}

}  // namespace weir::tools
