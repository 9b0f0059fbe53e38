// The LangGraph API's assistants: a graph's default assistant (the graph itself) and those made
// with POST /assistants (langgraph_assistants.hpp): search, count, get, graph, schemas,
// subgraphs, create, update, delete, versions, latest.
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "langgraph_assistants.hpp"
#include "langgraph_common.hpp"
#include "langgraph_request.hpp"
#include "langgraph_shapes.hpp"
#include "run_follow.hpp"
#include "runs_path.hpp"
#include "weir/cluster/run_service.hpp"
#include "weir/graph/ids.hpp"
#include "weir/graph/workflow.hpp"
#include "weir/runtime/text.hpp"

namespace weir::serve {

namespace asio = boost::asio;
namespace json = boost::json;
using asio::awaitable;

namespace {

// The workflow a graph's default assistant id names: the graph id (the workflow's name) or
// its uuid5.
std::shared_ptr<const graph::WorkflowSpec> assistant(const cluster::RunService& runs,
                                                     std::string_view id, std::string* name) {
  for (const auto& n : runs.workflow_names()) {
    if (n == id || iequals(assistant_id_of(n), id)) {
      if (name) *name = n;
      return runs.workflow(n);
    }
  }
  return nullptr;
}

std::string unknown_assistant(const cluster::RunService& runs, std::string_view id) {
  std::string list;
  for (const auto& n : runs.workflow_names()) list += (list.empty() ? "" : ", ") + n;
  return "Assistant '" + std::string(id).substr(0, 200) +
         "' not found (this server's graphs: " + list +
         "; and the assistants made with POST "
         "/assistants)";
}

// Pages `all` (sorted as `q` asks) into `out`, with LangGraph's pagination headers.
void assistant_page(std::vector<json::object> all, const LangGraphAssistantSearch& q,
                    http::Response& out) {
  const std::string key = q.sort_by;
  auto less = [&](const json::value& a, const json::value& b) {
    if (a.is_number() && b.is_number()) return a.to_number<double>() < b.to_number<double>();
    return json::serialize(a) < json::serialize(b);  // strings (ISO times sort as text)
  };
  std::stable_sort(all.begin(), all.end(), [&](const json::object& x, const json::object& y) {
    return q.ascending ? less(x.at(key), y.at(key)) : less(y.at(key), x.at(key));
  });
  const std::size_t total = all.size(), limit = q.page.limit, offset = q.page.offset;
  json::array page;
  for (std::size_t i = offset; i < total && page.size() < limit; ++i) page.push_back(all[i]);
  const std::size_t shown = page.size();
  out = answer(200, std::move(page));
  out.headers.emplace_back("X-Pagination-Total", std::to_string(total));
  if (offset + shown < total)
    out.headers.emplace_back("X-Pagination-Next", std::to_string(offset + shown));
}

bool name_has(std::string have, std::string want) {
  for (auto* str : {&have, &want})
    std::transform(str->begin(), str->end(), str->begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return have.find(want) != std::string::npos;
}

Error default_assistant_fixed(const std::string& id, const std::string& graph) {
  return Error(Errc::thread_busy,  // answered 409
               "assistant '" + id + "' is graph " + graph +
                   "'s default assistant, which is the graph itself: make an assistant of your "
                   "own with POST /assistants to change its settings");
}

// The graph `w` names (a 404 naming the server's graphs otherwise) and its config's
// recursion_limit within that graph's cap (422).
Status check_assistant(const cluster::RunService& runs, const LangGraphAssistantWrite& w,
                       const std::string& graph) {
  auto spec = runs.workflow(graph);
  if (!spec) {
    std::string list;
    for (const auto& n : runs.workflow_names()) list += (list.empty() ? "" : ", ") + n;
    return Error(Errc::not_found, "graph '" + graph.substr(0, 200) +
                                      "' not found (this server's graphs: " + list + ")");
  }
  cluster::RunControls c;
  if (w.config)
    if (const auto* l = w.config->if_contains("recursion_limit"); l && l->is_int64())
      c.recursion_limit = static_cast<int>(l->as_int64());
  return cluster::check_controls(*spec, c);
}

}  // namespace

awaitable<std::optional<FoundAssistant>> find_assistant(const LangGraphApi& api,
                                                        const std::string& id,
                                                        http::Response& out) {
  FoundAssistant f;
  f.spec = assistant(*api.runs, id, &f.graph);
  if (f.spec) co_return f;
  if (api.assistants && graph::check_id("assistant", id)) {
    LangGraphAssistants* book = api.assistants.get();
    auto made = co_await off_thread(*api.blocking, [&] { return book->get(id); });
    if (!made) {
      out = from_error(made.error());
      co_return std::nullopt;
    }
    if (*made) {
      f.graph = (*made)->graph_id;
      f.spec = api.runs->workflow(f.graph);
      f.made = std::move(*made);
      if (f.spec) co_return f;
      out = detail(404, "assistant '" + id + "' runs graph '" + f.graph +
                            "', which this server does not run");
      co_return std::nullopt;
    }
  }
  out = detail(404, unknown_assistant(*api.runs, id));
  co_return std::nullopt;
}

awaitable<void> route_assistants(const LangGraphApi& api, const http::Request& rq,
                                 const std::vector<std::string>& s, http::Response& out) {
  cluster::RunService& runs = *api.runs;
  LangGraphAssistants* book = api.assistants.get();
  if (s.size() == 2 && (s[1] == "search" || s[1] == "count") && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto q = read_langgraph_assistant_search(*b);
    if (!q) {
      out = from_error(q.error());
      co_return;
    }
    auto keep = [&](const json::object& a) {
      if (q->graph_id && a.at("graph_id") != json::value(*q->graph_id)) return false;
      if (q->metadata && !json_contains(a.at("metadata"), json::value(*q->metadata))) return false;
      return !q->name || name_has(std::string(a.at("name").as_string()), *q->name);
    };
    std::vector<json::object> found;
    for (const auto& n : runs.workflow_names()) {
      json::object a = assistant_json(api.started_ms, n, *runs.workflow(n));
      if (keep(a)) found.push_back(std::move(a));
    }
    if (book) {
      auto made = co_await off_thread(*api.blocking, [&] { return book->all(); });
      if (!made) {
        out = from_error(made.error());
        co_return;
      }
      for (const auto& m : *made) {
        json::object a = assistant_object(m);
        if (keep(a)) found.push_back(std::move(a));
      }
    }
    if (s[1] == "count") {
      out = answer(200, static_cast<std::int64_t>(found.size()));
      co_return;
    }
    assistant_page(std::move(found), *q, out);
    co_return;
  }
  if (s.size() == 1 && rq.method == "POST") {  // create
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto w = read_langgraph_assistant_write(*b, "POST /assistants");
    if (!w) {
      out = from_error(w.error());
      co_return;
    }
    if (!w->graph_id) {
      out = detail(422, "'graph_id' is required: the graph the assistant runs");
      co_return;
    }
    if (auto c = check_assistant(runs, *w, *w->graph_id); !c) {
      out = from_error(c.error());
      co_return;
    }
    LangGraphAssistant a;
    a.id = w->assistant_id.value_or(new_thread_id());
    if (std::string g; assistant(runs, a.id, &g)) {
      out = from_error(default_assistant_fixed(a.id, g));
      co_return;
    }
    a.graph_id = *w->graph_id;
    a.name = w->name.value_or("Untitled");
    a.description = w->description.value_or(nullptr);
    a.config = w->config.value_or(json::object{});
    a.metadata = w->metadata.value_or(json::object{});
    a.created_ms = a.updated_ms = now_ms();
    if (!book) {
      out = not_implemented(rq, "/assistants");
      co_return;
    }
    LangGraphAssistant existing;
    auto made = co_await off_thread(*api.blocking, [&] { return book->create(a, existing); });
    if (!made) {
      out = from_error(made.error());
      co_return;
    }
    if (!*made && !w->do_nothing_if_exists) {
      out = detail(409, "assistant '" + a.id +
                            "' exists already ('if_exists': \"do_nothing\" "
                            "answers it instead)");
      co_return;
    }
    out = answer(200, assistant_object(*made ? a : existing));
    co_return;
  }
  if (s.size() < 2) {
    out = not_implemented(rq, "/assistants");
    co_return;
  }
  const std::string& id = s[1];
  auto found = co_await find_assistant(api, id, out);
  if (!found) co_return;
  const bool fixed = !found->made;  // a graph's default assistant
  auto current = [&] {
    return fixed ? assistant_json(api.started_ms, found->graph, *found->spec)
                 : assistant_object(*found->made);
  };
  if (rq.method == "GET" && s.size() <= 3) {
    const auto& spec = *found->spec;
    if (s.size() == 2)
      out = answer(200, current());
    else if (s[2] == "graph")
      out = answer(200, graph_json(spec));
    else if (s[2] == "schemas")
      out = answer(200, schemas_json(found->graph, spec));
    else if (s[2] == "subgraphs") {
      json::object subs;
      for (const auto& [node, sub] : spec.subgraphs) subs[node] = schemas_json(sub->name, *sub);
      out = answer(200, subs);
    } else
      out = not_implemented(rq, "/assistants/{assistant_id}/" + s[2]);
    co_return;
  }
  if (s.size() == 2 && (rq.method == "PATCH" || rq.method == "DELETE") && fixed) {
    out = from_error(default_assistant_fixed(id, found->graph));
    co_return;
  }
  if (s.size() == 2 && rq.method == "PATCH") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto w = read_langgraph_assistant_write(*b, "PATCH /assistants/{assistant_id}");
    if (!w) {
      out = from_error(w.error());
      co_return;
    }
    if (auto c = check_assistant(runs, *w, w->graph_id.value_or(found->graph)); !c) {
      out = from_error(c.error());
      co_return;
    }
    const auto now = now_ms();
    auto a = co_await off_thread(*api.blocking, [&] { return book->update(id, *w, now); });
    out = a ? answer(200, assistant_object(*a)) : from_error(a.error());
    co_return;
  }
  if (s.size() == 2 && rq.method == "DELETE") {
    const auto del = query_value(rq.target, "delete_threads").value_or("false");
    if (del != "false" && del != "0") {
      out = not_implemented(rq, "DELETE /assistants/{assistant_id}?delete_threads=true");
      co_return;
    }
    auto gone = co_await off_thread(*api.blocking, [&] { return book->erase(id); });
    out = gone ? http::Response{204, "", {}, ""} : from_error(gone.error());
    co_return;
  }
  if (s.size() == 3 && s[2] == "versions" && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto q = read_langgraph_assistant_search(*b);  // metadata, limit, offset
    if (!q) {
      out = from_error(q.error());
      co_return;
    }
    std::vector<json::object> all;
    if (fixed) {
      all.push_back(current());
    } else {
      auto vs = co_await off_thread(*api.blocking, [&] { return book->versions(id); });
      if (!vs) {
        out = from_error(vs.error());
        co_return;
      }
      for (auto& v : *vs) {
        v.created_ms = v.updated_ms;  // a version's time is when it was made
        all.push_back(assistant_object(v));
      }
    }
    std::erase_if(all, [&](const json::object& a) {
      return q->metadata && !json_contains(a.at("metadata"), json::value(*q->metadata));
    });
    q->sort_by = "version";
    q->ascending = false;
    assistant_page(std::move(all), *q, out);
    co_return;
  }
  if (s.size() == 3 && s[2] == "latest" && rq.method == "POST") {
    auto b = body_of(rq, out);
    if (!b) co_return;
    auto v = read_langgraph_assistant_version(*b);
    if (!v) {
      out = from_error(v.error());
      co_return;
    }
    if (fixed) {
      out = *v == 1 ? answer(200, current())
                    : detail(404, "assistant '" + id + "' has no version " + std::to_string(*v) +
                                      " (it keeps 1)");
      co_return;
    }
    const auto now = now_ms();
    const std::int64_t version = *v;
    auto a = co_await off_thread(*api.blocking, [&] { return book->set_latest(id, version, now); });
    out = a ? answer(200, assistant_object(*a)) : from_error(a.error());
    co_return;
  }
  out = not_implemented(rq, "/assistants/{assistant_id}/...");
}

}  // namespace weir::serve
