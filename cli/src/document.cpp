#include "document.hpp"

#include <filesystem>

#include "weir/agents/crew_file.hpp"
#include "weir/graph/workflow.hpp"

namespace weir::cli {

Result<Document> open_document(const std::string& path) {
  auto file = parse_json_file(path, graph::kWorkflowJson);  // crew files too
  if (!file) return std::move(file).error();
  // Constructed, not assigned: assigning a Boost.JSON value to one with another memory resource
  // copies the whole document.
  Document d{.path = path, .text = std::move(file->text), .parsed = std::move(file->parsed)};
  d.agents = agents::is_agents_document(d.parsed.value);
  std::error_code ec;
  d.regular_file = !d.from_stdin() && std::filesystem::is_regular_file(path, ec);
  if (d.agents && d.text.empty()) {    // a large crew file, parsed as it was read: its checker
    auto text = read_json_file(path);  // reads the text
    if (!text) return std::move(text).error();
    d.text = std::move(*text);
  }
  return d;
}

}  // namespace weir::cli
