// Making the built-in tools by name (weir/tools/builtin.hpp), with a configuration file's
// settings over their own options.
#include <boost/json.hpp>

#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/text.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/doc_index.hpp"

namespace weir::tools {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// A built-in with a workflow's or crew file's settings over its own options.
class ConfiguredTool final : public Tool {
 public:
  ConfiguredTool(std::shared_ptr<Tool> inner, std::string name, ToolOptions options)
      : inner_(std::move(inner)), name_(std::move(name)), options_(options) {}
  const std::string& name() const override { return name_; }
  const std::string& description() const override { return inner_->description(); }
  const json::object& parameters() const override { return inner_->parameters(); }
  ToolOptions options() const override { return options_; }
  boost::asio::awaitable<Result<std::string>> invoke(json::object args,
                                                     const ToolContext& ctx) override {
    return inner_->invoke(std::move(args), ctx);
  }

 private:
  std::shared_ptr<Tool> inner_;
  std::string name_;
  ToolOptions options_;
};

}  // namespace

Result<std::shared_ptr<Tool>> make_builtin_tool(const BuiltinToolConfig& c,
                                                ArtifactStore* artifacts, std::string name) {
  const std::string who = "tool '" + (name.empty() ? c.builtin : name) + "'";
  if (builtin_tool_needs_root(c.builtin)) {
    std::error_code ec;
    if (c.root.empty() || !fs::is_directory(c.root, ec))
      return Error(Errc::invalid_argument,
                   who + ": " +
                       (c.root.empty() ? std::string("needs a \"root\" folder")
                                       : "folder '" + c.root.string() + "' does not exist"));
  }
  std::shared_ptr<Tool> tool;
  if (c.builtin == "calculator") {
    tool = make_calculator();
  } else if (c.builtin == "files") {
    tool = make_files_tool(c.root);
  } else if (c.builtin == "artifacts") {
    if (!artifacts)
      return Error(Errc::invalid_argument, who + ": the artifacts tool needs an artifact store");
    tool = make_artifacts_tool(*artifacts);
  } else if (c.builtin == "doc_search") {
    auto index = DocumentIndex::build(c.root);
    if (!index) return Error(index.error().code, who + ": " + index.error().message);
    tool = make_doc_search_tool(std::move(*index));
  } else if (c.builtin == "lorem") {
    tool = make_lorem_tool();
  } else if (c.builtin == "sleep") {
    tool = make_sleep_tool();
  } else {
    return Error(
        Errc::invalid_argument,
        who + ": " + unknown_name_message("builtin tool", c.builtin, builtin_tool_names()));
  }
  const bool renamed = !name.empty() && name != tool->name();
  if (!renamed && !c.timeout && !c.max_concurrency && !c.rate_per_minute && !c.max_output_bytes)
    return tool;
  ToolOptions o = tool->options();
  if (c.timeout) o.timeout = *c.timeout;
  if (c.max_concurrency) o.max_concurrency = *c.max_concurrency;
  if (c.rate_per_minute) o.rate_per_minute = *c.rate_per_minute;
  if (c.max_output_bytes) o.max_output_bytes = *c.max_output_bytes;
  std::string registered = renamed ? std::move(name) : tool->name();
  return std::shared_ptr<Tool>(
      std::make_shared<ConfiguredTool>(std::move(tool), std::move(registered), o));
}

}  // namespace weir::tools
