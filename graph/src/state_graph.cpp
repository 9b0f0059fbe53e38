#include "weir/graph/state_graph.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "weir/graph/checkpointer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::graph {

namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

// --- building and compiling -------------------------------------------------------------------

StateGraph& StateGraph::add_channel(std::string name, ChannelOptions options) {
  channels_.emplace_back(std::move(name), std::move(options));
  return *this;
}
StateGraph& StateGraph::add_node(std::string name, SyncNode fn, NodeOptions options) {
  nodes_.push_back({std::move(name), std::move(fn), {}, options});
  return *this;
}
StateGraph& StateGraph::add_async_node(std::string name, AsyncNode fn, NodeOptions options) {
  nodes_.push_back({std::move(name), {}, std::move(fn), options});
  return *this;
}
StateGraph& StateGraph::add_edge(std::string from, std::string to) {
  edges_.push_back({std::move(from), {std::move(to)}, {}});
  return *this;
}
StateGraph& StateGraph::add_conditional_edges(std::string from, Router router,
                                              std::vector<std::string> targets) {
  edges_.push_back({std::move(from), std::move(targets), std::move(router)});
  return *this;
}

StateGraph& StateGraph::add_sends(std::string from, std::vector<std::string> targets) {
  edges_.push_back({std::move(from), std::move(targets), {}, true});
  return *this;
}

std::optional<std::size_t> CompiledGraph::node_index(std::string_view name) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name == name) return i;
  }
  return std::nullopt;
}

std::optional<std::size_t> CompiledGraph::channel_index(std::string_view name) const {
  for (std::size_t i = 0; i < channels_.size(); ++i) {
    if (channels_[i].first == name) return i;
  }
  return std::nullopt;
}

Result<std::shared_ptr<const CompiledGraph>> StateGraph::compile(GraphLimits limits) const {
  auto g = std::make_shared<CompiledGraph>();
  g->limits_ = limits;
  g->channels_ = channels_;
  g->nodes_ = nodes_;
  g->edges_ = edges_;
  std::vector<std::string> problems;
  std::set<std::string> seen;
  for (const auto& n : nodes_) {
    if (n.name == kStart || n.name == kEnd)
      problems.push_back("'" + n.name + "' is reserved; rename the node");
    if (!seen.insert(n.name).second) problems.push_back("node '" + n.name + "' is defined twice");
  }
  std::set<std::string> channel_names;
  for (const auto& [name, opt] : channels_) {
    if (!channel_names.insert(name).second)
      problems.push_back("channel '" + name + "' is defined twice");
  }
  std::vector<std::string> names;
  for (const auto& n : nodes_) names.push_back(n.name);
  const std::size_t N = nodes_.size();
  g->static_next_.assign(N + 1, {});
  g->routers_.assign(N + 1, {});
  std::vector<std::set<std::size_t>> adj(N + 2);  // N + 1 = END
  auto index = [&](const std::string& s) -> std::optional<std::size_t> {
    if (s == kStart) return 0;
    if (s == kEnd) return N + 1;
    if (auto i = g->node_index(s)) return *i + 1;
    return std::nullopt;
  };
  for (const auto& e : g->edges_) {
    auto from = index(e.from);
    if (!from || *from == N + 1) {
      auto m = closest_match(e.from, names);
      problems.push_back("edge from '" + e.from + "': unknown node" +
                         (m ? "; did you mean '" + *m + "'?" : ""));
      continue;
    }
    if (e.router) g->routers_[*from].push_back(&e.router);
    for (const auto& t : e.to) {
      auto to = index(t);
      if (!to || *to == 0) {
        auto m = closest_match(t, names);
        problems.push_back("edge from '" + e.from + "' to '" + t + "': unknown node" +
                           (m ? "; did you mean '" + *m + "'?" : ""));
        continue;
      }
      adj[*from].insert(*to);
      if (!e.router && !e.send && *to != N + 1) g->static_next_[*from].push_back(*to - 1);
    }
    if (e.router && e.to.empty()) {  // undeclared targets: assume any node
      for (std::size_t i = 1; i <= N + 1; ++i) adj[*from].insert(i);
    }
  }
  // A node invoked by Send returns to the barrier: it needs no way to END of its own.
  std::vector<bool> send_target(N + 2);
  for (const auto& e : g->edges_) {
    if (!e.send) continue;
    for (const auto& t : e.to) {
      if (auto i = index(t)) send_target[*i] = true;
    }
  }
  std::vector<bool> reach(N + 2), to_end(N + 2);
  std::vector<std::size_t> stack = {0};
  while (!stack.empty()) {
    auto v = stack.back();
    stack.pop_back();
    if (reach[v]) continue;
    reach[v] = true;
    for (auto w : adj[v]) stack.push_back(w);
  }
  stack = {N + 1};
  while (!stack.empty()) {
    auto v = stack.back();
    stack.pop_back();
    if (to_end[v]) continue;
    to_end[v] = true;
    for (std::size_t u = 0; u <= N; ++u) {
      if (adj[u].count(v)) stack.push_back(u);
    }
  }
  for (std::size_t i = 0; i < N; ++i) {
    if (!reach[i + 1])
      problems.push_back("node '" + nodes_[i].name + "' is not reachable from START");
    else if (!to_end[i + 1] && !send_target[i + 1])
      problems.push_back("node '" + nodes_[i].name + "' cannot reach END");
  }
  if (adj[0].empty()) problems.push_back("no edge leaves START");
  // Cycles (informational): a node that can reach itself.
  for (std::size_t i = 1; i <= N; ++i) {
    std::vector<bool> vis(N + 2);
    std::vector<std::size_t> st(adj[i].begin(), adj[i].end());
    bool cyc = false;
    while (!st.empty() && !cyc) {
      auto v = st.back();
      st.pop_back();
      if (v == i) cyc = true;
      if (vis[v] || v == N + 1) continue;
      vis[v] = true;
      for (auto w : adj[v]) st.push_back(w);
    }
    if (cyc) g->cycles_.push_back({nodes_[i - 1].name});
  }
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + p;
    return Error(Errc::invalid_workflow, msg);
  }
  return std::shared_ptr<const CompiledGraph>(std::move(g));
}

std::string CompiledGraph::to_dot() const {
  std::string out = "digraph {\n  \"START\" [shape=circle];\n  \"END\" [shape=doublecircle];\n";
  for (const auto& n : nodes_) out += "  \"" + n.name + "\" [shape=box];\n";
  for (const auto& e : edges_) {
    for (const auto& t : e.to)
      out += "  \"" + e.from + "\" -> \"" + t + "\"" + (e.router ? " [style=dashed]" : "") + ";\n";
  }
  return out + "}\n";
}

// --- state ----------------------------------------------------------------------------------

struct RunState {
  explicit RunState(MemoryBudget* budget, std::size_t cap, std::string what)
      : resource(budget, BudgetCategory::run_state, cap, std::move(what)), sp(&resource) {}
  AccountingResource resource;
  json::storage_ptr sp;
  std::vector<json::value> values;   // [channels]
  std::vector<std::int64_t> visits;  // [nodes]
  ~RunState() { values.clear(); }
};

const json::value& StateView::get(std::string_view channel) const {
  static const json::value null;
  auto i = g_.channel_index(channel);
  return i ? s_.values[*i] : null;
}

json::object StateView::to_object() const {
  json::object o;
  for (std::size_t i = 0; i < g_.channel_count(); ++i) o[g_.channel_name(i)] = s_.values[i];
  return o;
}

Result<std::string> NodeContext::fetch(const json::value& ref, std::uint64_t offset,
                                       std::uint64_t length) const {
  auto r = ArtifactRef::from_json(ref);
  if (!r) {
    if (ref.is_string())
      return std::string(ref.as_string())
          .substr(std::min<std::size_t>(offset, ref.as_string().size()), length);
    return Error(Errc::invalid_argument,
                 "node '" + node_ + "': the value is neither an artifact reference nor a string");
  }
  if (!artifacts_)
    return Error(Errc::not_found, "node '" + node_ + "': this run has no artifact store");
  return artifacts_->get_range(r->id, offset, length);
}

Status NodeContext::charge_tokens(std::int64_t n) {
  if (!tokens_used_) return {};
  *tokens_used_ += n;
  if (token_budget_ > 0 && *tokens_used_ > token_budget_) {
    return Error(Errc::token_budget_exceeded,
                 "run stopped in node '" + node_ + "': " + std::to_string(*tokens_used_) +
                     " tokens used, over the token budget of " + std::to_string(token_budget_) +
                     " (limits.token_budget)");
  }
  return {};
}

// --- running --------------------------------------------------------------------------------

struct Task {
  std::size_t node;
  json::value input;  // Send input, or null
  bool from_send = false;
};

struct Runner {
  const CompiledGraph& g;
  const RuntimeOptions& opt;
  std::string run_id;
  RunState st;
  std::int64_t tokens = 0;
  std::size_t offloaded = 0;
  Clock::time_point deadline = Clock::time_point::max();

  Checkpointer* checkpointer = nullptr;
  std::string thread_id, parent_checkpoint;
  std::int64_t step_base = 0;
  bool resumed = false;

  Runner(const CompiledGraph& graph, const RuntimeOptions& o, std::string id)
      : g(graph),
        opt(o),
        run_id(std::move(id)),
        st(o.budget, graph.limits_.max_state_bytes, "run " + run_id + " state") {
    if (g.limits_.deadline.count() > 0) deadline = Clock::now() + g.limits_.deadline;
  }

  Error node_error(std::size_t node, const Error& e) const {
    return Error(e.code, "node '" + g.nodes_[node].name + "': " + e.message);
  }

  // Merges the writes of one channel in node order through its reducer.
  Status reduce(std::size_t ch,
                const std::vector<std::pair<std::size_t, const json::value*>>& writes,
                std::int32_t step) {
    const auto& [name, opt_c] = g.channels_[ch];
    json::value& cur = st.values[ch];
    for (std::size_t i = 0; i < writes.size(); ++i) {
      const json::value& w = *writes[i].second;
      if (opt_c.custom) {
        auto r = opt_c.custom(cur, w);
        if (!r)
          return Error(r.error().code, "channel '" + name + "' reducer: " + r.error().message);
        cur = json::value(*r, st.sp);
        continue;
      }
      switch (opt_c.reducer) {
        case ReducerKind::last_value:
          if (writes.size() > 1) {
            return Error(Errc::conflicting_writes,
                         "nodes '" + g.nodes_[writes[0].first].name + "' and '" +
                             g.nodes_[writes[1].first].name + "' both wrote channel '" + name +
                             "' in superstep " + std::to_string(step) +
                             "; a last-value channel takes one write per step: give it a reducer "
                             "(e.g. append) or write "
                             "it from one node");
          }
          cur = json::value(w, st.sp);
          break;
        case ReducerKind::append:
        case ReducerKind::messages: {
          if (!cur.is_array()) cur = json::array(st.sp);
          auto& arr = cur.as_array();
          if (w.is_array()) {
            for (const auto& x : w.as_array()) arr.emplace_back(x);
          } else {
            arr.emplace_back(w);
          }
          std::int64_t cap = opt_c.reducer == ReducerKind::append ? opt_c.max_items.value_or(0)
                                                                  : opt_c.max_messages.value_or(0);
          if (cap > 0 && static_cast<std::int64_t>(arr.size()) > cap) {
            // Keep a leading system message in a messages window.
            std::size_t keep_first =
                opt_c.reducer == ReducerKind::messages && arr.size() && arr[0].is_object() &&
                        arr[0].as_object().contains("role") && arr[0].at("role") == "system"
                    ? 1
                    : 0;
            std::size_t drop = arr.size() - static_cast<std::size_t>(cap);
            arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(keep_first),
                      arr.begin() + static_cast<std::ptrdiff_t>(keep_first + drop));
          }
          break;
        }
        case ReducerKind::sum:
        case ReducerKind::max:
        case ReducerKind::min: {
          if (!w.is_number())
            return Error(Errc::invalid_argument, "channel '" + name + "' holds numbers; node '" +
                                                     g.nodes_[writes[i].first].name + "' wrote " +
                                                     json::serialize(w));
          if (cur.is_null()) {
            cur = w;
          } else if (opt_c.reducer == ReducerKind::sum) {
            if (cur.is_int64() && w.is_int64())
              cur = cur.as_int64() + w.as_int64();
            else
              cur = cur.to_number<double>() + w.to_number<double>();
          } else {
            const bool bigger = w.to_number<double>() > cur.to_number<double>();
            if ((opt_c.reducer == ReducerKind::max) == bigger) cur = w;
          }
          break;
        }
        case ReducerKind::merge:
          if (!cur.is_object()) cur = json::object(st.sp);
          if (!w.is_object())
            return Error(Errc::invalid_argument, "channel '" + name + "' merges objects; node '" +
                                                     g.nodes_[writes[i].first].name +
                                                     "' wrote a non-object");
          for (const auto& [k, v] : w.as_object()) cur.as_object()[k] = v;
          break;
      }
    }
    return {};
  }

  // A written value over inline_limit moves to the artifact store before it enters state;
  // state keeps the reference. (Elements appended one by one are checked one by one.)
  Status offload(json::value& v) {
    if (!opt.artifacts || v.is_null() || v.is_bool() || v.is_number()) return {};
    if (v.is_string() && v.as_string().size() <= g.limits_.inline_limit) return {};
    if (ArtifactRef::from_json(v)) return {};
    std::string text = v.is_string() ? std::string(v.as_string()) : json::serialize(v);
    if (text.size() <= g.limits_.inline_limit) return {};
    auto ref =
        opt.artifacts->put(text, v.is_string() ? "text/plain" : "application/json", "", run_id);
    if (!ref) return std::move(ref).error();
    v = ref->to_json();
    ++offloaded;
    return {};
  }

  asio::awaitable<Result<Update>> call(const Task& t, NodeContext& ctx) {
    const auto& n = g.nodes_[t.node];
    for (std::int32_t attempt = 1;; ++attempt) {
      Result<Update> r = Error(Errc::cancelled, "not run");
      try {
        if (n.sync)
          r = n.sync(StateView(g, st), ctx);
        else
          r = co_await n.async(StateView(g, st), ctx);
      } catch (const Exception& e) {
        r = e.error();
      } catch (const std::exception& e) {
        r = Error(Errc::tool_failed, std::string("threw: ") + e.what());
      }
      const bool retryable =
          !r && (r.error().is(Errc::tool_failed) || r.error().is(Errc::tool_timeout) ||
                 r.error().is(Errc::model_error));
      if (r || !retryable || attempt >= n.options.max_attempts) co_return r;
      asio::steady_timer timer(co_await asio::this_coro::executor,
                               n.options.backoff * (1 << std::min(attempt - 1, 10)));
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  asio::awaitable<Result<RunResult>> run(json::object input) {
    const std::size_t C = g.channels_.size();
    st.values.reserve(C);
    for (const auto& [name, o] : g.channels_)
      st.values.emplace_back(o.default_value ? json::value(*o.default_value, st.sp)
                                             : json::value(st.sp));
    st.visits.assign(g.nodes_.size(), 0);
    std::vector<Task> tasks, next;
    if (checkpointer) {
      if (auto s = restore(tasks); !s) co_return std::move(s).error();
    }
    std::vector<bool> input_written(C);
    {
      std::vector<std::pair<std::size_t, const json::value*>> w(1);
      for (const auto& [k, v] : input) {
        auto ch = g.channel_index(k);
        if (!ch) {
          co_return Error(Errc::invalid_argument,
                          "input key '" + std::string(k) + "' is not a channel of this graph");
        }
        w[0] = {0, &v};
        if (auto s = reduce(*ch, w, 0); !s) co_return std::move(s).error();
        input_written[*ch] = true;
      }
    }
    if (!resumed) {
      for (auto n : g.static_next_[0]) tasks.push_back({n, nullptr});
      for (const Router* r : g.routers_[0]) {
        if (auto s = route(*r, tasks); !s) co_return std::move(s).error();
      }
    }
    if (checkpointer && !input.empty()) {  // the input is a step of its own: resume replays it
      if (auto s = save(input_written, tasks, 0); !s) co_return std::move(s).error();
    }
    std::vector<Result<Update>> results;
    std::vector<std::vector<std::pair<std::size_t, const json::value*>>> writes(C);
    std::int32_t step = 0;
    while (!tasks.empty()) {
      if (step >= g.limits_.recursion_limit) {
        std::string active;
        for (const auto& t : tasks) active += (active.empty() ? "" : ", ") + g.nodes_[t.node].name;
        co_return Error(
            Errc::step_limit_exceeded,
            "run stopped after " + std::to_string(step) +
                " supersteps (recursion_limit=" + std::to_string(g.limits_.recursion_limit) +
                "); nodes active in the last step: " + active +
                "; raise limits.recursion_limit or add an exit condition");
      }
      if (Clock::now() > deadline) {
        co_return Error(Errc::deadline_exceeded,
                        "run stopped after " + std::to_string(g.limits_.deadline.count()) +
                            " ms (limits.deadline_ms) in superstep " + std::to_string(step));
      }
      ++step;
      for (const auto& t : tasks) {
        const auto& n = g.nodes_[t.node];
        if (n.options.max_visits > 0 && ++st.visits[t.node] > n.options.max_visits) {
          co_return Error(Errc::visit_limit_exceeded,
                          "node '" + n.name + "' would run a " + std::to_string(st.visits[t.node]) +
                              "th time (max_visits=" + std::to_string(n.options.max_visits) + ")");
        }
      }
      results.clear();
      ctxs.resize(tasks.size());
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        auto& c = ctxs[i];
        c.node_ = g.nodes_[tasks[i].node].name;
        c.run_id_ = run_id;
        c.input_ = tasks[i].input;
        c.artifacts_ = opt.artifacts;
        c.tokens_used_ = &tokens;
        c.token_budget_ = g.limits_.token_budget;
      }
      bool all_sync = true;
      for (const auto& t : tasks)
        all_sync &=
            static_cast<bool>(g.nodes_[t.node].sync) && g.nodes_[t.node].options.max_attempts <= 1;
      if (all_sync) {
        for (std::size_t i = 0; i < tasks.size(); ++i) {
          try {
            results.push_back(g.nodes_[tasks[i].node].sync(StateView(g, st), ctxs[i]));
          } catch (const Exception& e) {
            results.push_back(e.error());
          } catch (const std::exception& e) {
            results.push_back(Error(Errc::tool_failed, std::string("threw: ") + e.what()));
          }
        }
      } else if (tasks.size() == 1) {
        results.push_back(co_await call(tasks[0], ctxs[0]));
      } else {
        co_await run_concurrently(tasks, results);
      }
      // Barrier: merge writes per channel, in task order.
      for (auto& w : writes) w.clear();
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        if (!results[i]) co_return node_error(tasks[i].node, results[i].error());
        for (auto& [ch_name, v] : results[i]->writes) {
          if (auto s = offload(v); !s) co_return node_error(tasks[i].node, s.error());
          auto ch = g.channel_index(ch_name);
          if (!ch) {
            co_return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                        "' wrote unknown channel '" + ch_name +
                                                        "'");
          }
          writes[*ch].emplace_back(tasks[i].node, &v);
        }
      }
      for (std::size_t ch = 0; ch < C; ++ch) {
        if (writes[ch].empty()) continue;
        if (auto s = reduce(ch, writes[ch], step); !s) co_return std::move(s).error();
      }
      next.clear();
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        const Update& u = *results[i];
        for (const auto& s : u.sends) {
          auto n = g.node_index(s.node);
          if (!n)
            co_return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                        "' sent to unknown node '" + s.node + "'");
          next.push_back({*n, s.input, true});
        }
        if (u.go_to) {
          for (const auto& t : *u.go_to) {
            if (t == kEnd) continue;
            auto n = g.node_index(t);
            if (!n)
              co_return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                          "' went to unknown node '" + t + "'");
            add_unique(next, *n);
          }
          continue;
        }
        for (auto n : g.static_next_[tasks[i].node + 1]) add_unique(next, n);
        for (const Router* r : g.routers_[tasks[i].node + 1]) {
          if (auto s = route(*r, next); !s) co_return node_error(tasks[i].node, s.error());
        }
      }
      if (checkpointer) {
        std::vector<bool> written(C);
        for (std::size_t ch = 0; ch < C; ++ch) written[ch] = !writes[ch].empty();
        if (auto s = save(written, next, step); !s) co_return std::move(s).error();
      }
      std::swap(tasks, next);
    }
    RunResult out;
    out.resumed = resumed;
    out.checkpoint_id = parent_checkpoint;
    out.state = StateView(g, st).to_object();
    out.steps = step;
    out.tokens_used = tokens;
    out.peak_state_bytes = st.resource.peak_bytes();
    out.offloaded = offloaded;
    co_return out;
  }

  // Restores the thread's state from its latest checkpoint; an unfinished one also gives the
  // tasks to run next.
  Status restore(std::vector<Task>& tasks) {
    auto latest = checkpointer->latest(thread_id);
    if (!latest) return std::move(latest).error();
    if (!*latest) return {};
    const Checkpoint& cp = **latest;
    auto state = checkpointer->state_at(thread_id, cp.checkpoint_id);
    if (!state) return std::move(state).error();
    for (const auto& [k, v] : *state) {
      if (auto ch = g.channel_index(k)) st.values[*ch] = json::value(v, st.sp);
    }
    parent_checkpoint = cp.checkpoint_id;
    step_base = cp.step;
    const auto* status = cp.pending.if_contains("status");
    if (status && *status == "done") return {};
    resumed = true;
    if (const auto* next = cp.pending.if_contains("next"); next && next->is_array()) {
      for (const auto& n : next->as_array()) {
        auto i = n.is_string() ? g.node_index(n.as_string()) : std::nullopt;
        if (!i) {
          return Error(Errc::corrupt_data, "checkpoint " + cp.checkpoint_id + " of thread '" +
                                               thread_id + "' names node " + json::serialize(n) +
                                               ", which this graph does not have");
        }
        tasks.push_back({*i, nullptr});
      }
    }
    if (const auto* sends = cp.pending.if_contains("sends"); sends && sends->is_array()) {
      for (const auto& sd : sends->as_array()) {
        const auto* node = sd.is_object() ? sd.as_object().if_contains("node") : nullptr;
        auto i = node && node->is_string() ? g.node_index(node->as_string()) : std::nullopt;
        if (!i)
          return Error(Errc::corrupt_data,
                       "checkpoint " + cp.checkpoint_id + " sends to an unknown node");
        tasks.push_back(
            {*i, sd.as_object().contains("input") ? sd.at("input") : json::value(), true});
      }
    }
    return {};
  }

  // A checkpoint with only the channels written in this step, and what runs next.
  Status save(const std::vector<bool>& written, const std::vector<Task>& next_tasks,
              std::int32_t step) {
    Checkpoint cp;
    cp.thread_id = thread_id;
    cp.step = step_base + step;
    cp.checkpoint_id = new_checkpoint_id(cp.step);
    cp.parent_id = parent_checkpoint;
    for (std::size_t ch = 0; ch < written.size(); ++ch) {
      if (written[ch]) cp.writes[g.channels_[ch].first] = json::value(st.values[ch]);
    }
    json::array nodes, sends;
    for (const auto& t : next_tasks) {
      if (t.from_send)
        sends.push_back(json::object{{"node", g.nodes_[t.node].name}, {"input", t.input}});
      else
        nodes.push_back(json::value(g.nodes_[t.node].name));
    }
    cp.pending = json::object{{"status", next_tasks.empty() ? "done" : "running"},
                              {"next", std::move(nodes)},
                              {"sends", std::move(sends)}};
    cp.metadata = json::object{{"run_id", run_id}};
    if (auto s = checkpointer->put(cp); !s) return s;
    parent_checkpoint = cp.checkpoint_id;
    return {};
  }

  static void add_unique(std::vector<Task>& v, std::size_t n) {
    for (const auto& t : v) {
      if (t.node == n && !t.from_send) return;
    }
    v.push_back({n, nullptr});
  }

  Status route(const Router& r, std::vector<Task>& out) {
    for (const auto& t : r(StateView(g, st))) {
      if (t == kEnd) continue;
      auto n = g.node_index(t);
      if (!n) return Error(Errc::invalid_argument, "router chose unknown node '" + t + "'");
      add_unique(out, *n);
    }
    return {};
  }

  // One node of a concurrent step (a member, not a lambda: the coroutine must not outlive a
  // closure). The references point into vectors that live until the step's barrier.
  asio::awaitable<void> run_one(const Task& t, NodeContext& c, Result<Update>& out) {
    out = co_await call(t, c);
  }

  // Async nodes of one step, at most max_concurrency at a time, on one strand; results in order.
  asio::awaitable<void> run_concurrently(const std::vector<Task>& tasks,
                                         std::vector<Result<Update>>& results) {
    auto ex = co_await asio::this_coro::executor;
    auto strand = asio::make_strand(ex);
    results.assign(tasks.size(), Error(Errc::cancelled, "not run"));
    // Thread-safe: the children finish on their strand, the parent may wait on another thread.
    asio::experimental::concurrent_channel<void(boost::system::error_code)> done(ex, 1);
    std::size_t next = 0, running = 0, finished = 0;
    const std::size_t limit = static_cast<std::size_t>(std::max(1, g.limits_.max_concurrency));
    std::function<void()> launch = [&] {
      while (running < limit && next < tasks.size()) {
        const std::size_t i = next++;
        ++running;
        asio::co_spawn(strand, run_one(tasks[i], ctxs[i], results[i]),
                       [&, i](std::exception_ptr e) {
                         if (e)
                           results[i] = Error(Errc::tool_failed, "node threw an unknown exception");
                         --running;
                         ++finished;
                         launch();
                         if (finished == tasks.size()) done.try_send(boost::system::error_code{});
                       });
      }
    };
    asio::dispatch(strand, [&] { launch(); });
    co_await done.async_receive(asio::as_tuple(asio::use_awaitable));
  }
  std::vector<NodeContext> ctxs;  // [tasks of the current step]
};

// --- runtime --------------------------------------------------------------------------------

GraphRuntime::GraphRuntime(RuntimeOptions options)
    : options_(options),
      admission_(std::make_unique<Limiter>(
          "run limiter (limits.max_concurrent_runs=" + std::to_string(options.max_concurrent_runs) +
              ", limits.max_queued_runs=" + std::to_string(options.max_queued_runs) + ")",
          options.max_concurrent_runs, options.max_queued_runs)) {}

GraphRuntime::~GraphRuntime() = default;

std::size_t GraphRuntime::active_runs() const {
  return admission_->in_use();
}
std::size_t GraphRuntime::queued_runs() const {
  return admission_->waiting();
}

asio::awaitable<Result<RunResult>> GraphRuntime::async_invoke(
    std::shared_ptr<const CompiledGraph> graph, json::object input, RunOptions options) {
  auto permit = co_await admission_->async_acquire();
  if (!permit) co_return std::move(permit).error();
  std::string run_id =
      options.run_id.empty() ? "run-" + std::to_string(next_run_.fetch_add(1)) : options.run_id;
  Result<RunResult> result = Error(Errc::cancelled, "not run");
  {
    Runner r(*graph, options_, run_id);
    if (options.checkpointer && !options.thread_id.empty()) {
      r.checkpointer = options.checkpointer;
      r.thread_id = options.thread_id;
    }
    try {
      result = co_await r.run(std::move(input));
    } catch (const Exception& e) {  // e.g. the run's state went over its memory limit
      result = e.error();
    }
  }
  if (!result && options_.artifacts)
    options_.artifacts->release_owner(run_id);  // a failed run keeps nothing
  co_return result;
}

}  // namespace weir::graph
