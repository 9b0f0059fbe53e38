#include "document.hpp"

#include "weir/agents/crew_file.hpp"

namespace weir::cli {

Result<Document> open_document(const std::string& path) {
  Document d;
  d.path = path;
  auto text = read_json_file(path);
  if (!text) return std::move(text).error();
  d.text = std::move(*text);
  auto parsed = parse_json(d.text, path, {.text_is_padded = true});
  if (!parsed) return std::move(parsed).error();
  d.parsed = std::move(*parsed);
  d.agents = agents::is_agents_document(d.parsed.value);
  return d;
}

}  // namespace weir::cli
