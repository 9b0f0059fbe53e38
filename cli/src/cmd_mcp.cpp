// `weir mcp`: weir's tools and workflows served over MCP's stdio transport.
//
// stdin carries JSON-RPC 2.0 messages one per line (each at most --max-message-bytes; a longer
// line is answered with a parse error and skipped); stdout carries the answers, one per line;
// logs go to stderr. Calls run on a small thread pool, at most kMaxCallsInFlight at once
// (beyond: JSON-RPC error -32000), each under the registry's fences (timeout, concurrency,
// output cap: large outputs spill to the artifact store and the answer says so). A call the
// client cancels (notifications/cancelled) gets no answer. At EOF weir waits for the calls in
// flight, then exits 0.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "weir/agents/workflow.hpp"
#include "weir/graph/state_graph.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/graph/workflow_graph.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/json_write.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/memory_budget.hpp"
#include "weir/tools/builtin.hpp"
#include "weir/tools/jsonrpc.hpp"
#include "weir/tools/mcp.hpp"
#include "weir/tools/registry.hpp"

namespace weir::cli {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
namespace rpc = tools::jsonrpc;

namespace {

constexpr std::size_t kMaxCallsInFlight = 64;

// One workflow served as a tool: its spec (which the graph borrows), graph and runtime.
struct ServedWorkflow {
  graph::WorkflowSpec spec;
  graph::WorkflowGraph built;
  std::unique_ptr<graph::GraphRuntime> runtime;
};

// The input schema of a workflow: its input channels (every channel when it names none).
json::object workflow_schema(const graph::WorkflowSpec& spec) {
  json::object props;
  auto add = [&](const std::string& name) {
    json::object p{{"description", "the '" + name + "' channel"}};
    props[name] = std::move(p);
  };
  if (!spec.input.empty())
    for (const auto& n : spec.input) add(n);
  else
    for (const auto& c : spec.channels) add(c.name);
  return json::object{{"type", "object"}, {"properties", std::move(props)}};
}

class Server {
 public:
  Server(tools::ToolRegistry& reg, ArtifactStore* store) : reg_(reg), store_(store) {}

  void write(const std::string& line) {
    std::lock_guard lock(out_mu_);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

  void handle(std::string_view line) {
    auto m = rpc::parse(line);
    if (!m) {
      write(rpc::error_response(nullptr, rpc::kParseError, m.error().message));
      return;
    }
    if (m->kind == rpc::Kind::notification) {
      if (m->method == "notifications/cancelled" && m->params.is_object()) {
        if (const auto* id = m->params.as_object().if_contains("requestId")) {
          std::lock_guard lock(mu_);
          if (running_.contains(rpc::id_text(*id))) cancelled_.insert(rpc::id_text(*id));
        }
      }
      return;  // initialized and unknown notifications need nothing
    }
    if (m->kind != rpc::Kind::request) return;  // we send no requests: stray answers are ignored
    const json::object params = m->params.is_object() ? m->params.as_object() : json::object{};
    if (m->method == "initialize") {
      std::string version(tools::kMcpProtocolVersion);
      if (const auto* v = params.if_contains("protocolVersion"); v && v->is_string())
        for (auto s : tools::kMcpSupportedVersions)
          if (v->get_string() == s) version = s;
      write(rpc::response(
          m->id, json::object{{"protocolVersion", version},
                              {"capabilities", json::object{{"tools", json::object{}}}},
                              {"serverInfo", json::object{{"name", "weir"}, {"version", "0.1"}}}}));
    } else if (m->method == "ping") {
      write(rpc::response(m->id, json::object{}));
    } else if (m->method == "tools/list") {
      json::array list;
      for (const auto& n : reg_.names()) {
        auto t = reg_.find(n);
        list.push_back(json::object{
            {"name", n}, {"description", t->description()}, {"inputSchema", t->parameters()}});
      }
      write(rpc::response(m->id, json::object{{"tools", std::move(list)}}));
    } else if (m->method == "tools/call") {
      call(*m, params);
    } else {
      write(rpc::error_response(m->id, rpc::kMethodNotFound, "Method not found: " + m->method));
    }
  }

  void call(const rpc::Message& m, const json::object& params) {
    const auto* name = params.if_contains("name");
    if (!name || !name->is_string()) {
      write(rpc::error_response(m.id, rpc::kInvalidParams, "tools/call needs a \"name\""));
      return;
    }
    if (!reg_.find(name->get_string())) {
      write(rpc::error_response(m.id, rpc::kInvalidParams,
                                "Unknown tool: " + std::string(name->get_string())));
      return;
    }
    json::object args;
    if (const auto* a = params.if_contains("arguments"); a && a->is_object()) args = a->as_object();
    const std::string key = rpc::id_text(m.id);
    {
      std::lock_guard lock(mu_);
      if (running_.size() >= kMaxCallsInFlight) {
        write(rpc::error_response(m.id, -32000,
                                  "weir mcp: " + std::to_string(kMaxCallsInFlight) +
                                      " calls are in flight; retry later"));
        return;
      }
      running_.insert(key);
    }
    in_flight_.fetch_add(1);
    asio::co_spawn(pool_, run(m.id, std::string(name->get_string()), std::move(args)),
                   [this](std::exception_ptr e) {
                     if (e) weir::log(LogLevel::error, "weir mcp: a call ended with an exception");
                   });
  }

  asio::awaitable<void> run(json::value id, std::string name, json::object args) {
    tools::ToolContext ctx;
    ctx.artifacts = store_;
    auto op = reg_.async_call(name, std::move(args), ctx);
    auto r = co_await std::move(op);
    const std::string key = rpc::id_text(id);
    bool cancelled = false;
    {
      std::lock_guard lock(mu_);
      running_.erase(key);
      cancelled = cancelled_.erase(key) > 0;
    }
    if (!cancelled) {
      const std::string text = r ? r->content : r.error().to_string();
      write(rpc::response(
          id, json::object{{"content", json::array{json::object{{"type", "text"}, {"text", text}}}},
                           {"isError", !r}}));
    }
    in_flight_.fetch_sub(1);
  }

  void drain() {
    while (in_flight_.load() > 0) ::usleep(10000);
    pool_.join();
  }

 private:
  tools::ToolRegistry& reg_;
  ArtifactStore* store_;
  asio::thread_pool pool_{2};
  std::mutex out_mu_, mu_;
  std::set<std::string> running_, cancelled_;  // GUARDED_BY(mu_): ids as JSON text
  std::atomic<int> in_flight_{0};
};

}  // namespace

int cmd_mcp(Args args) {
  Flags f("mcp", {"--tools", "--root", "--workflows", "--max-message-bytes"}, {});
  if (!f.parse(args)) return kExitInvalidInput;
  std::size_t max_line = 4u << 20;
  if (f.has("--max-message-bytes") &&
      !f.integer("--max-message-bytes", max_line, std::size_t{1024}, std::size_t{1} << 30))
    return kExitInvalidInput;
  auto budget = std::make_unique<MemoryBudget>(BudgetLimits{});
  const fs::path art_dir = fs::temp_directory_path() / ("weir-mcp-" + std::to_string(::getpid()));
  auto store = ArtifactStore::open(
      {art_dir, std::size_t{64} << 20, std::size_t{4} << 30, 200, budget.get()});
  if (!store)
    return std::fprintf(stderr, "weir mcp: %s\n", store.error().message.c_str()), kExitRunFailed;
  tools::ToolRegistry reg;
  std::string list = f.get("--tools").value_or("calculator");
  const fs::path root = f.get("--root").value_or(".");
  std::stringstream ss(list);
  for (std::string t; std::getline(ss, t, ',');) {
    if (t.empty()) continue;
    std::shared_ptr<tools::Tool> tool;
    if (t == "calculator")
      tool = tools::make_calculator();
    else if (t == "files")
      tool = tools::make_files_tool(root);
    else if (t == "artifacts")
      tool = tools::make_artifacts_tool(**store);
    else
      return std::fprintf(stderr,
                          "weir mcp: --tools: unknown tool '%s' (calculator, files, artifacts)\n",
                          t.c_str()),
             kExitInvalidInput;
    if (auto s = reg.add(tool); !s)
      return std::fprintf(stderr, "weir mcp: %s\n", s.error().message.c_str()), kExitInvalidInput;
  }
  std::vector<std::unique_ptr<ServedWorkflow>> workflows;
  if (auto dir = f.get("--workflows")) {
    std::error_code ec;
    if (!fs::is_directory(*dir, ec))
      return std::fprintf(stderr, "weir mcp: --workflows: '%s' is not a folder\n", dir->c_str()),
             kExitInvalidInput;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(*dir, ec))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      auto load = graph::load_workflow_file(p);
      if (!load.ok()) {
        weir::log(LogLevel::warn, "weir mcp: skipping " + p.string() + ":\n" + load.report());
        continue;
      }
      auto w = std::make_unique<ServedWorkflow>();
      w->spec = std::move(*load.spec);
      agents::WorkflowServices services;
      services.artifacts = store->get();
      services.budget = budget.get();
      auto built = agents::build_workflow(w->spec, services);
      if (!built) {
        weir::log(LogLevel::warn,
                  "weir mcp: skipping " + p.string() + ": " + built.error().message);
        continue;
      }
      w->built = std::move(*built);
      graph::RuntimeOptions ro = w->built.runtime;
      ro.budget = budget.get();
      ro.artifacts = store->get();
      w->runtime = std::make_unique<graph::GraphRuntime>(ro);
      const std::string name = w->spec.name.empty() ? p.stem().string() : w->spec.name;
      ServedWorkflow* sw = w.get();
      tools::ToolOptions opt;
      if (w->spec.limits.deadline_ms)
        opt.timeout = std::chrono::milliseconds(*w->spec.limits.deadline_ms);
      opt.max_concurrency = 4;
      auto tool = tools::make_async_tool(
          name,
          w->spec.description.empty() ? "runs the workflow " + p.filename().string()
                                      : w->spec.description,
          workflow_schema(w->spec),
          [sw](json::object input,
               const tools::ToolContext&) -> asio::awaitable<Result<std::string>> {
            auto r = co_await sw->runtime->async_invoke(sw->built.graph, std::move(input));
            if (!r) co_return std::move(r).error();
            json::object out;
            if (sw->spec.output.empty()) {
              out = std::move(r->state);
            } else {
              for (const auto& k : sw->spec.output)
                if (auto* v = r->state.if_contains(k)) out[k] = *v;
            }
            co_return to_json_text(out);
          },
          opt);
      if (auto s = reg.add(tool); !s)
        return std::fprintf(stderr, "weir mcp: %s\n", s.error().message.c_str()), kExitInvalidInput;
      workflows.push_back(std::move(w));
    }
  }
  weir::log(LogLevel::info,
            "weir mcp: serving " + std::to_string(reg.names().size()) + " tools on stdio");
  // Bounded line reading: a line over max_line is refused and skipped up to its newline.
  {
    Server server(reg, store->get());
    std::string line;
    bool skipping = false;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] == '\n') {
          if (!skipping && !line.empty()) server.handle(line);
          line.clear();
          skipping = false;
        } else if (!skipping) {
          line += buf[i];
          if (line.size() > max_line) {
            server.write(rpc::error_response(
                nullptr, rpc::kParseError,
                "message over " + std::to_string(max_line) + " bytes (--max-message-bytes)"));
            line.clear();
            line.shrink_to_fit();
            skipping = true;
          }
        }
      }
    }
    if (!skipping && !line.empty()) server.handle(line);
    server.drain();
  }
  workflows.clear();
  store->reset();
  std::error_code ec;
  fs::remove_all(art_dir, ec);
  return kExitOk;
}

}  // namespace weir::cli
