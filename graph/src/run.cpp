// The run loop: run state, supersteps, checkpoints, interrupts, subgraph runs, and the
// GraphRuntime's admission (see state_graph.hpp). Building and compiling are in state_graph.cpp.
#include "weir/graph/state_graph.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/json.hpp>

#include "checkpointer_common.hpp"
#include "events_impl.hpp"
#include "weir/graph/checkpointer.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/limiter.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/memory_budget.hpp"

namespace weir::graph {

namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

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
                 "node '" + std::string(node_) +
                     "': the value is neither an artifact reference nor a string");
  }
  if (!artifacts_)
    return Error(Errc::not_found,
                 "node '" + std::string(node_) + "': this run has no artifact store");
  return artifacts_->get_range(r->id, offset, length);
}

Status NodeContext::charge_tokens(std::int64_t n) {
  if (!tokens_used_) return {};
  *tokens_used_ += n;
  if (token_budget_ > 0 && *tokens_used_ > token_budget_) {
    return Error(Errc::token_budget_exceeded,
                 "run stopped in node '" + std::string(node_) + "': " +
                     std::to_string(*tokens_used_) + " tokens used, over the token budget of " +
                     std::to_string(token_budget_) + " (limits.token_budget)");
  }
  return {};
}

// --- running --------------------------------------------------------------------------------

void NodeContext::emit(std::string name, json::value data) {
  if (!streaming_) return;
  emitted_.emplace_back(std::move(name), json::value(std::move(data), json::storage_ptr()));
}

Error NodeContext::interrupt(json::value payload) {
  interrupt_ = json::value(std::move(payload), json::storage_ptr());
  return Error(Errc::interrupted, "node '" + std::string(node_) + "' interrupted the run");
}

// --- running --------------------------------------------------------------------------------

struct Task {
  std::size_t node;
  json::value input;  // Send input, or null
  bool from_send = false;
};

namespace {

std::int64_t default_tokens(std::string_view text) {
  return static_cast<std::int64_t>((text.size() + 3) / 4);
}

bool has_role(const json::value& m, std::string_view role) {
  if (!m.is_object()) return false;
  const auto* r = m.as_object().if_contains("role");
  return r && r->is_string() && r->as_string() == role;
}

// The marker a window leaves for its evicted turns (see ChannelOptions).
bool is_marker(const json::value& m) {
  if (!has_role(m, "system")) return false;
  const auto* n = m.as_object().if_contains("name");
  return n && n->is_string() && n->as_string() == "summary" && m.as_object().contains("archived");
}

// [leading system messages, marker?, turns...] -> (index of the marker slot, first turn).
std::pair<std::size_t, std::size_t> window_layout(const json::array& arr) {
  std::size_t keep = 0;
  while (keep < arr.size() && has_role(arr[keep], "system") && !is_marker(arr[keep])) ++keep;
  const bool marker = keep < arr.size() && is_marker(arr[keep]);
  return {keep, keep + (marker ? 1 : 0)};
}

// At most `max` bytes, cut on a UTF-8 boundary, ending in a note when cut.
std::string cap_summary(std::string s, std::size_t max) {
  if (s.size() <= max) return s;
  static constexpr std::string_view kNote = "... [summary truncated]";
  std::size_t cut = max > kNote.size() ? max - kNote.size() : 0;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  if (max >= kNote.size()) s += kNote;
  return s;
}

}  // namespace

// [channel] -> (writing node, value) in task order, for the barrier of one step.
using Writes = std::vector<std::vector<std::pair<std::size_t, const json::value*>>>;

namespace {

// A run's scratch vectors keep their capacity for the thread's next run (a pool of at most
// kPooled), and a Runner's memory is reused the same way: a short run then allocates little
// beyond its coroutine frame and its state.
constexpr std::size_t kPooled = 32;
constexpr std::size_t kPooledItems = 64;  // larger vectors are freed, not pooled

struct Scratch {
  std::vector<Task> tasks, next;
  std::vector<Result<Update>> results;
  std::vector<NodeContext> ctxs;
  Writes writes;
};

struct Pools {
  std::vector<Scratch> scratch;
  std::vector<void*> runners;  // blocks of sizeof(Runner)
  ~Pools() {
    for (void* p : runners) ::operator delete(p);
  }
};
thread_local Pools t_pools;

}  // namespace

struct Runner {
  static void* operator new(std::size_t n) {
    auto& free = t_pools.runners;
    if (free.empty()) return ::operator new(n);
    void* p = free.back();
    free.pop_back();
    return p;
  }
  static void operator delete(void* p) {
    auto& free = t_pools.runners;
    if (free.size() < kPooled)
      free.push_back(p);
    else
      ::operator delete(p);
  }

  const CompiledGraph& g;
  const RuntimeOptions& opt;
  const GraphLimits lim;  // the graph's, or a subgraph node's override
  std::string run_id;
  RunState st;
  std::int64_t tokens = 0;
  std::int64_t* tokens_used = &tokens;  // a subgraph charges its top-level run
  std::int64_t token_budget = 0;
  std::size_t offloaded = 0;
  Clock::time_point deadline = Clock::time_point::max();

  // A run on a thread with a checkpointer. (Out of line: most runs have none, and every byte
  // of a Runner is paid by each run in flight.)
  struct Thread {
    std::string id, parent_checkpoint;
    json::object checkpoint_metadata;
    std::int64_t step_base = 0;
    std::string resume_node;  // async_resume: the node that interrupted
  };
  Checkpointer* checkpointer = nullptr;  // set together with `thread`
  std::unique_ptr<Thread> thread;
  bool resumed = false;

  // async_resume: the value for thread->resume_node in the first step.
  const json::value* resume_value = nullptr;

  std::shared_ptr<EventStream::Impl> events;  // null: not streaming
  std::string event_prefix;                   // "parent/" in a subgraph
  bool stream_state = false;
  bool nested = false;  // a subgraph's run: no checkpoints, no interrupts, no run_* events

  // Turns evicted by a messages window in this step, folded into its marker at the barrier.
  std::vector<json::array> evicted;  // [channels]

  std::vector<NodeContext> ctxs;  // [tasks of the current step]

  Runner(const CompiledGraph& graph, const RuntimeOptions& o, std::string id, GraphLimits limits)
      : g(graph),
        opt(o),
        lim(limits),
        run_id(std::move(id)),
        st(o.budget, limits.max_state_bytes, "run " + run_id + " state") {
    if (lim.deadline.count() > 0) deadline = Clock::now() + lim.deadline;
    token_budget = lim.token_budget;
    if (auto& pool = t_pools.scratch; !pool.empty()) {
      Scratch& sc = pool.back();
      tasks = std::move(sc.tasks);
      next = std::move(sc.next);
      results = std::move(sc.results);
      ctxs = std::move(sc.ctxs);
      writes = std::move(sc.writes);
      pool.pop_back();
    }
  }
  ~Runner() {
    st.values.clear();  // before the budget accounting goes
    auto& pool = t_pools.scratch;
    // Only small steps' vectors are kept: a 10,000-way Send must not pin its memory.
    if (pool.size() >= kPooled || tasks.capacity() > kPooledItems ||
        next.capacity() > kPooledItems || results.capacity() > kPooledItems ||
        ctxs.capacity() > kPooledItems || writes.capacity() > kPooledItems)
      return;
    tasks.clear();
    next.clear();
    results.clear();
    ctxs.clear();
    for (auto& w : writes) {
      w.clear();
      if (w.capacity() > kPooledItems) w.shrink_to_fit();
    }
    pool.push_back(Scratch{std::move(tasks), std::move(next), std::move(results), std::move(ctxs),
                           std::move(writes)});
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  Error node_error(std::size_t node, const Error& e) const {
    return Error(e.code, "node '" + g.nodes_[node].name + "': " + e.message);
  }

  // Events are built outside co_await expressions (GCC 12 mishandles temporaries there).
  Event event(EventKind kind, std::string_view node, std::int64_t step, json::value data) const {
    Event e;
    e.kind = kind;
    e.run_id = run_id;
    if (!node.empty()) e.node = event_prefix + std::string(node);
    e.step = step;
    e.data = std::move(data);
    return e;
  }
  asio::awaitable<void> push(Event e) { co_await push_event(events, std::move(e)); }

  std::int64_t tokens_of(const ChannelOptions& o, const json::value& m) const {
    const auto* c = m.is_object() ? m.as_object().if_contains("content") : nullptr;
    std::string text = c && c->is_string() ? std::string(c->as_string()) : json::serialize(m);
    return o.token_counter ? o.token_counter(text) : default_tokens(text);
  }

  // A messages window over max_messages / max_tokens: the oldest turns move to evicted[ch].
  void trim_window(std::size_t ch, json::array& arr) {
    const ChannelOptions& o = g.channels_[ch].second;
    const std::int64_t max_messages = o.max_messages.value_or(0);
    const std::int64_t max_tokens = o.max_tokens.value_or(0);
    if (max_messages <= 0 && max_tokens <= 0) return;
    const auto [marker, first] = window_layout(arr);
    const std::size_t marker_count = first - marker;
    std::int64_t total = 0;
    if (max_tokens > 0) {
      for (const auto& m : arr) total += tokens_of(o, m);
    }
    std::size_t drop = 0;
    auto over = [&] {
      const std::size_t turns = arr.size() - first - drop;
      if (turns == 0) return false;
      if (max_messages > 0 &&
          static_cast<std::int64_t>(arr.size() - marker_count - drop) > max_messages)
        return true;
      return max_tokens > 0 && total > max_tokens && turns > 1;  // the newest turn stays
    };
    while (over()) {
      if (max_tokens > 0) total -= tokens_of(o, arr[first + drop]);
      ++drop;
    }
    if (drop == 0) return;
    if (opt.artifacts || o.summarize) {
      if (evicted.empty()) evicted.resize(g.channels_.size());
      for (std::size_t i = 0; i < drop; ++i) evicted[ch].emplace_back(arr[first + i]);
    }
    arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(first),
              arr.begin() + static_cast<std::ptrdiff_t>(first + drop));
  }

  // Folds this step's evicted turns of every window into its marker: the archive artifact is
  // extended, the summary hook called. A failing hook keeps the previous summary (warning).
  asio::awaitable<Status> fold_evicted(std::int64_t step) {
    for (std::size_t ch = 0; ch < evicted.size(); ++ch) {
      // A marker that pushes the window over max_tokens evicts more turns: fold again.
      while (!evicted[ch].empty()) {
        json::array turns = std::move(evicted[ch]);
        evicted[ch] = json::array();
        const std::string& name = g.channels_[ch].first;
        const ChannelOptions& o = g.channels_[ch].second;
        std::string previous;
        std::int64_t archived = 0;
        std::optional<ArtifactRef> old_archive;
        {
          const json::array& arr = st.values[ch].as_array();
          const auto layout = window_layout(arr);
          if (layout.second > layout.first) {
            const json::object& m = arr[layout.first].as_object();
            if (const auto* c = m.if_contains("content"); c && c->is_string())
              previous = std::string(c->as_string());
            if (const auto* a = m.if_contains("archived"); a && a->is_int64())
              archived = a->as_int64();
            if (const auto* a = m.if_contains("archive")) old_archive = ArtifactRef::from_json(*a);
          }
        }
        json::object marker_msg(st.sp);
        marker_msg["role"] = "system";
        marker_msg["name"] = "summary";
        archived += static_cast<std::int64_t>(turns.size());
        if (opt.artifacts) {
          std::string lines;
          if (old_archive) {
            auto old = opt.artifacts->get(old_archive->id);
            if (!old)
              co_return Error(old.error().code, "channel '" + name + "': reading its archive: " +
                                                    old.error().message);
            lines = std::move(*old);
          }
          for (const auto& m : turns) lines += json::serialize(m) + "\n";
          auto ref = opt.artifacts->put(lines, "application/x-ndjson", "", run_id);
          if (!ref)
            co_return Error(
                ref.error().code,
                "channel '" + name + "': archiving evicted messages: " + ref.error().message);
          if (old_archive && old_archive->id != ref->id)
            (void)opt.artifacts->release(old_archive->id, run_id);
          marker_msg["archive"] = ref->to_json();
        }
        std::string summary;
        if (o.summarize) {
          Result<std::string> r = Error(Errc::cancelled, "not run");
          try {
            r = co_await o.summarize(previous, std::move(turns));
          } catch (const Exception& e) {
            r = e.error();
          } catch (const std::exception& e) {
            r = Error(Errc::tool_failed, std::string("threw: ") + e.what());
          }
          if (r) {
            summary = cap_summary(std::move(*r), o.max_summary_bytes);
          } else {
            summary = std::move(previous);
            const std::string msg = "run " + run_id + ": channel '" + name +
                                    "': the summarize hook failed (" + r.error().to_string() +
                                    "); keeping the previous summary";
            log(LogLevel::warn, msg);
            if (events) {
              json::object data;
              data["code"] = errc_name(r.error().code);
              data["message"] = msg;
              data["channel"] = name;
              Event e = event(EventKind::warning, {}, step, std::move(data));
              co_await push(std::move(e));
            }
          }
        } else {
          summary = "[" + std::to_string(archived) + " earlier messages archived]";
        }
        marker_msg["content"] = summary;
        marker_msg["archived"] = archived;
        json::array& arr = st.values[ch].as_array();
        const auto layout = window_layout(arr);
        if (layout.second > layout.first)
          arr[layout.first] = std::move(marker_msg);
        else
          arr.insert(arr.begin() + static_cast<std::ptrdiff_t>(layout.first),
                     json::value(std::move(marker_msg)));
        trim_window(ch, arr);
      }
    }
    co_return Status{};
  }

  // fold_evicted with its status in `s`: run()'s frame keeps no temporary for it.
  asio::awaitable<void> fold_evicted_into(std::int64_t step, Status& s) {
    s = co_await fold_evicted(step);
  }

  bool has_evicted() const {
    for (const auto& e : evicted) {
      if (!e.empty()) return true;
    }
    return false;
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
          if (opt_c.reducer == ReducerKind::messages) {
            trim_window(ch, arr);
            break;
          }
          const std::int64_t cap = opt_c.max_items.value_or(0);
          if (cap > 0 && static_cast<std::int64_t>(arr.size()) > cap) {
            const std::size_t drop = arr.size() - static_cast<std::size_t>(cap);
            arr.erase(arr.begin(), arr.begin() + static_cast<std::ptrdiff_t>(drop));
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
    if (v.is_string() && v.as_string().size() <= lim.inline_limit) return {};
    if (ArtifactRef::from_json(v)) return {};
    std::string text = v.is_string() ? std::string(v.as_string()) : json::serialize(v);
    if (text.size() <= lim.inline_limit) return {};
    auto ref =
        opt.artifacts->put(text, v.is_string() ? "text/plain" : "application/json", "", run_id);
    if (!ref) return std::move(ref).error();
    v = ref->to_json();
    ++offloaded;
    return {};
  }

  // A subgraph node: the child graph runs to END as a nested run of this one.
  asio::awaitable<Result<Update>> run_subgraph(const StateGraph::NodeDef& n) {
    const auto& def = *n.sub;
    const CompiledGraph& child_graph = *def.graph;
    json::object in;
    std::vector<std::size_t> seeded(g.channels_.size(), SIZE_MAX);  // [parent channel]: length
    for (auto [p, c] : def.in) {
      in[child_graph.channel_name(c)] = json::value(st.values[p], json::storage_ptr());
      if (st.values[p].is_array()) seeded[p] = st.values[p].as_array().size();
    }
    auto child = std::make_unique<Runner>(child_graph, opt, run_id,
                                          def.options.limits.value_or(child_graph.limits_));
    child->nested = true;
    child->tokens_used = tokens_used;
    if (token_budget > 0) child->token_budget = token_budget;
    child->events = events;
    child->event_prefix = event_prefix + n.name + "/";
    child->input = std::move(in);
    Runner* c = child.get();
    auto op = c->run(std::move(child));
    auto res = co_await std::move(op);
    if (!res) co_return std::move(res).error();
    Update up;
    for (auto [c, p] : def.out) {
      const json::value* v = res->state.if_contains(child_graph.channel_name(c));
      if (!v) continue;
      const auto& po = g.channels_[p].second;
      const bool appends =
          !po.custom && (po.reducer == ReducerKind::append || po.reducer == ReducerKind::messages);
      if (appends && v->is_array()) {
        // Only what the child added after the items it was given.
        const auto& arr = v->as_array();
        const std::size_t from = seeded[p] == SIZE_MAX ? 0 : std::min(seeded[p], arr.size());
        if (from == arr.size()) continue;
        json::array added;
        for (std::size_t i = from; i < arr.size(); ++i) added.push_back(arr[i]);
        up.set(g.channels_[p].first, std::move(added));
      } else if (*v != st.values[p]) {
        up.set(g.channels_[p].first, *v);
      }
    }
    co_return up;
  }

  // A node with retries, a subgraph or a sync node among async ones: the result goes to `r`
  // (not returned, so that the awaiting frame keeps no temporary for it).
  asio::awaitable<void> call(const Task& t, NodeContext& ctx, Result<Update>& r) {
    const auto& n = g.nodes_[t.node];
    for (std::int32_t attempt = 1;; ++attempt) {
      try {
        if (n.sub)
          r = co_await run_subgraph(n);
        else if (n.sync)
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
      if (r || !retryable || attempt >= n.options.max_attempts) co_return;
      ctx.emitted_.clear();
      asio::steady_timer timer(co_await asio::this_coro::executor,
                               n.options.backoff * (1 << std::min(attempt - 1, 10)));
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  RunResult result(std::int32_t steps) {
    RunResult out;
    out.resumed = resumed;
    if (thread) out.checkpoint_id = thread->parent_checkpoint;
    out.state = StateView(g, st).to_object();
    out.steps = steps;
    out.tokens_used = *tokens_used;
    out.peak_state_bytes = st.resource.peak_bytes();
    out.offloaded = offloaded;
    return out;
  }

  // Before the first superstep: channel defaults, the checkpoint to continue from, the input
  // (through the reducers), START's targets. Not a coroutine: see run().
  Status prepare(const json::object& input, std::vector<Task>& tasks) {
    const std::size_t C = g.channels_.size();
    st.values.reserve(C);
    for (const auto& [name, o] : g.channels_)
      st.values.emplace_back(o.default_value ? json::value(*o.default_value, st.sp)
                                             : json::value(st.sp));
    st.visits.assign(g.nodes_.size(), 0);
    if (checkpointer) {
      if (auto s = restore(tasks); !s) return s;
    }
    if (input.empty()) return {};
    std::vector<std::pair<std::size_t, const json::value*>> w(1);
    for (const auto& [k, v] : input) {
      auto ch = g.channel_index(k);
      if (!ch) {
        return Error(Errc::invalid_argument,
                     "input key '" + std::string(k) + "' is not a channel of this graph");
      }
      w[0] = {0, &v};
      if (auto s = reduce(*ch, w, 0); !s) return s;
    }
    return {};
  }

  Status start(const json::object& input, std::vector<Task>& tasks) {
    if (!resumed) {
      for (auto n : g.static_next_[0]) tasks.push_back({n, nullptr});
      for (const Router* r : g.routers_[0]) {
        if (auto s = route(*r, tasks); !s) return s;
      }
    }
    if (checkpointer && !input.empty()) {  // the input is a step of its own: resume replays it
      std::vector<bool> written(g.channels_.size());
      for (const auto& kv : input) written[*g.channel_index(kv.key())] = true;
      return save(written, tasks, 0);
    }
    return {};
  }

  // The caps checked before a superstep, then the step's node contexts.
  Status begin_step(const std::vector<Task>& tasks, std::int32_t& step) {
    if (step >= lim.recursion_limit) {
      std::string active;
      for (const auto& t : tasks) active += (active.empty() ? "" : ", ") + g.nodes_[t.node].name;
      return Error(Errc::step_limit_exceeded,
                   "run stopped after " + std::to_string(step) +
                       " supersteps (recursion_limit=" + std::to_string(lim.recursion_limit) +
                       "); nodes active in the last step: " + active +
                       "; raise limits.recursion_limit or add an exit condition");
    }
    if (deadline != Clock::time_point::max() && Clock::now() > deadline) {
      return Error(Errc::deadline_exceeded,
                   "run stopped after " + std::to_string(lim.deadline.count()) +
                       " ms (limits.deadline_ms) in superstep " + std::to_string(step));
    }
    ++step;
    for (const auto& t : tasks) {
      const auto& n = g.nodes_[t.node];
      if (n.options.max_visits > 0 && ++st.visits[t.node] > n.options.max_visits) {
        return Error(Errc::visit_limit_exceeded,
                     "node '" + n.name + "' would run a " + std::to_string(st.visits[t.node]) +
                         "th time (max_visits=" + std::to_string(n.options.max_visits) + ")");
      }
    }
    ctxs.resize(tasks.size());
    const bool resuming_step = step == 1 && resume_value;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      auto& c = ctxs[i];
      c.node_ = g.nodes_[tasks[i].node].name;
      c.run_id_ = run_id;
      c.input_ = tasks[i].input;
      c.artifacts_ = opt.artifacts;
      c.tokens_used_ = tokens_used;
      c.token_budget_ = token_budget;
      c.streaming_ = events != nullptr;
      c.emitted_.clear();
      c.interrupt_.reset();
      c.resume_ = resuming_step && c.node_ == thread->resume_node ? resume_value : nullptr;
    }
    return {};
  }

  // Every node of the step, inline when all are plain sync nodes.
  bool run_inline(const std::vector<Task>& tasks, std::vector<Result<Update>>& results) {
    for (const auto& t : tasks) {
      if (!g.nodes_[t.node].sync || g.nodes_[t.node].options.max_attempts > 1) return false;
    }
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      try {
        results.push_back(g.nodes_[tasks[i].node].sync(StateView(g, st), ctxs[i]));
      } catch (const Exception& e) {
        results.push_back(e.error());
      } catch (const std::exception& e) {
        results.push_back(Error(Errc::tool_failed, std::string("threw: ") + e.what()));
      }
    }
    return true;
  }

  // The barrier, part 1: node errors, large values offloaded, writes grouped per channel in
  // task order.
  Status collect(const std::vector<Task>& tasks, std::vector<Result<Update>>& results,
                 Writes& writes) {
    for (auto& w : writes) w.clear();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (!results[i]) return node_error(tasks[i].node, results[i].error());
      for (auto& [ch_name, v] : results[i]->writes) {
        if (auto s = offload(v); !s) return node_error(tasks[i].node, s.error());
        auto ch = g.channel_index(ch_name);
        if (!ch) {
          return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                   "' wrote unknown channel '" + ch_name + "'");
        }
        writes[*ch].emplace_back(tasks[i].node, &v);
      }
    }
    return {};
  }

  // Part 2: the reducers.
  Status merge(const Writes& writes, std::int32_t step) {
    for (std::size_t ch = 0; ch < writes.size(); ++ch) {
      if (writes[ch].empty()) continue;
      if (auto s = reduce(ch, writes[ch], step); !s) return s;
    }
    return {};
  }

  // Part 3: the next step's tasks (Sends, go_to, edges, routers) and the step's checkpoint.
  Status advance(const std::vector<Task>& tasks, const std::vector<Result<Update>>& results,
                 const Writes& writes, std::vector<Task>& next, std::int32_t step) {
    next.clear();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const Update& u = *results[i];
      for (const auto& s : u.sends) {
        auto n = g.node_index(s.node);
        if (!n)
          return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                   "' sent to unknown node '" + s.node + "'");
        next.push_back({*n, s.input, true});
      }
      if (u.go_to) {
        for (const auto& t : *u.go_to) {
          if (t == kEnd) continue;
          auto n = g.node_index(t);
          if (!n)
            return Error(Errc::invalid_argument, "node '" + g.nodes_[tasks[i].node].name +
                                                     "' went to unknown node '" + t + "'");
          add_unique(next, *n);
        }
        continue;
      }
      for (auto n : g.static_next_[tasks[i].node + 1]) add_unique(next, n);
      for (const Router* r : g.routers_[tasks[i].node + 1]) {
        if (auto s = route(*r, next); !s) return node_error(tasks[i].node, s.error());
      }
    }
    if (checkpointer) {
      std::vector<bool> written(writes.size());
      for (std::size_t ch = 0; ch < writes.size(); ++ch) written[ch] = !writes[ch].empty();
      return save(written, next, step);
    }
    return {};
  }

  // Scratch of the superstep loop. Members rather than locals of run(): a coroutine frame keeps
  // a slot for every local and temporary of every scope, and each run in flight pays for its
  // frame (100k runs: bench/bench_graph.cpp).
  std::vector<Task> tasks, next;
  std::vector<Result<Update>> results;
  Writes writes;

  // A plain async node (no retries, not a subgraph) is awaited straight from run(): one
  // coroutine frame less per node in flight than going through call().
  bool direct(const Task& t) const {
    const auto& n = g.nodes_[t.node];
    return n.async && !n.sub && n.options.max_attempts <= 1;
  }

  // Set up by GraphRuntime::async_run for a top-level run (null for a subgraph's run).
  std::shared_ptr<const CompiledGraph> graph_ref;  // keeps `g` alive
  Limiter* admission = nullptr;
  std::optional<Limiter::Permit> permit;
  json::object input;

  // The whole run: admission (top level), the superstep loop, the final event. `self` owns
  // *this for as long as the coroutine lives, so that a run in flight is this object and one
  // coroutine frame, and the frame only sequences: the work is in plain functions.
  // Start it as `Runner* p = r.get(); p->run(std::move(r))`.
  asio::awaitable<Result<RunResult>> run(std::unique_ptr<Runner> self) {
    (void)self;
    Status s;
    if (admission) {  // a free permit is taken without a coroutine of its own; else queue
      permit = admission->try_acquire();
      if (!permit) co_await queue_for_permit(s);
      if (!s) {
        if (events) co_await push_final(s.error());
        co_return std::move(s).error();
      }
    }
    std::int32_t step = 0;
    bool interrupted = false;
    try {
      if (events && !nested) co_await push_run_started(input, resume_value);
      writes.resize(g.channels_.size());
      s = prepare(input, tasks);
      if (s && has_evicted()) co_await fold_evicted_into(0, s);
      if (s) s = start(input, tasks);
      input = json::object();
      while (s && !tasks.empty()) {
        s = begin_step(tasks, step);
        if (!s) break;
        if (events) co_await push_started(tasks, step);
        results.clear();
        if (!run_inline(tasks, results)) {
          if (tasks.size() == 1 && direct(tasks[0])) {
            results.emplace_back(Error(Errc::cancelled, "not run"));
            try {
              results[0] = co_await g.nodes_[tasks[0].node].async(StateView(g, st), ctxs[0]);
            } catch (const Exception& e) {
              results[0] = e.error();
            } catch (const std::exception& e) {
              results[0] = Error(Errc::tool_failed, std::string("threw: ") + e.what());
            }
          } else if (tasks.size() == 1) {
            results.emplace_back(Error(Errc::cancelled, "not run"));
            co_await call(tasks[0], ctxs[0], results[0]);
          } else {
            co_await run_concurrently(tasks, results);
          }
        }
        // Interrupts first: the step's writes are discarded and the step is re-run on resume.
        if (auto k = interrupting_task(tasks, results); k < tasks.size()) {
          s = interrupt_run(tasks, k, step);
          interrupted = true;
          break;
        }
        s = collect(tasks, results, writes);
        if (!s) break;
        if (events) {
          for (std::size_t i = 0; i < tasks.size(); ++i)
            co_await push_finished(tasks[i], ctxs[i], *results[i], step);
        }
        s = merge(writes, step);
        if (s && has_evicted()) co_await fold_evicted_into(step, s);
        if (s) s = advance(tasks, results, writes, next, step);
        if (!s) break;
        if (events && stream_state) co_await push_state(step);
        std::swap(tasks, next);
      }
    } catch (const Exception& e) {  // e.g. the run's state went over its memory limit
      s = e.error();
    }
    if (!s) {
      st.values.clear();  // a failed run keeps nothing
      if (!nested && opt.artifacts) opt.artifacts->release_owner(run_id);
      if (events && !nested) co_await push_final(s.error());
      co_return std::move(s).error();
    }
    if (events && !nested) co_await push_final(step, interrupted);
    co_return finish(step, interrupted);
  }

  asio::awaitable<void> queue_for_permit(Status& s) {
    Result<Limiter::Permit> queued = co_await admission->async_acquire();
    if (queued)
      permit.emplace(std::move(*queued));
    else
      s = std::move(queued).error();
  }

  // The task that called interrupt() and returned its error, or tasks.size().
  std::size_t interrupting_task(const std::vector<Task>& tasks,
                                const std::vector<Result<Update>>& results) const {
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (!results[i] && results[i].error().is(Errc::interrupted) && ctxs[i].interrupt_) return i;
    }
    return tasks.size();
  }

  // Stops the run at task k's interrupt: an "interrupted" checkpoint that re-runs this step.
  // The step's node is kept in `interrupted_task` for finish().
  Status interrupt_run(const std::vector<Task>& tasks, std::size_t k, std::int32_t step) {
    const std::string& name = g.nodes_[tasks[k].node].name;
    if (nested) {
      return Error(Errc::unsupported, "node '" + name +
                                          "' called interrupt() inside a subgraph; interrupts "
                                          "are supported only in the top-level graph");
    }
    if (!checkpointer) {
      return Error(Errc::unsupported,
                   "node '" + name +
                       "' called interrupt(), which needs a checkpoint to resume from: set "
                       "RunOptions.checkpointer and RunOptions.thread_id");
    }
    json::object info{{"node", name}, {"payload", *ctxs[k].interrupt_}};
    if (auto s = save(std::vector<bool>(g.channels_.size()), tasks, step - 1, "interrupted", &info);
        !s)
      return s;
    interrupted_task = k;
    return {};
  }
  std::size_t interrupted_task = 0;

  // The result of a run that did not fail (finished, or stopped at an interrupt).
  RunResult finish(std::int32_t step, bool interrupted) {
    if (!interrupted) return result(step);
    RunResult out = result(step - 1);
    out.interrupted = true;
    out.interrupted_node = g.nodes_[tasks[interrupted_task].node].name;
    out.interrupt_payload = std::move(*ctxs[interrupted_task].interrupt_);
    return out;
  }

  // The stream's last event: run_finished or run_interrupted (before finish()), run_failed.
  asio::awaitable<void> push_final(std::int32_t step, bool interrupted) {
    Event e;
    e.run_id = run_id;
    e.step = step;
    if (interrupted) {
      e.kind = EventKind::run_interrupted;
      e.node = g.nodes_[tasks[interrupted_task].node].name;
      e.data = json::object{
          {"payload", json::value(*ctxs[interrupted_task].interrupt_, json::storage_ptr())}};
    } else {
      e.kind = EventKind::run_finished;
      e.data = json::object{{"steps", step}};
    }
    co_await push(std::move(e));
  }
  asio::awaitable<void> push_final(const Error& error) {
    Event e;
    e.run_id = run_id;
    e.kind = EventKind::run_failed;
    e.data = json::object{{"code", errc_name(error.code)}, {"message", error.message}};
    co_await push(std::move(e));
  }

  // Event pushes live in their own coroutines so that run()'s frame stays small.
  asio::awaitable<void> push_started(const std::vector<Task>& tasks, std::int32_t step) {
    for (const auto& t : tasks) {
      Event e = event(EventKind::node_started, g.nodes_[t.node].name, step,
                      json::value(t.input, json::storage_ptr()));
      co_await push(std::move(e));
    }
  }

  // The node's custom events in emit order, then its node_finished with its (offloaded) writes.
  asio::awaitable<void> push_finished(const Task& t, NodeContext& ctx, const Update& u,
                                      std::int32_t step) {
    const std::string& name = g.nodes_[t.node].name;
    for (std::size_t k = 0; k < ctx.emitted_.size(); ++k) {
      Event e = event(EventKind::custom, name, step, std::move(ctx.emitted_[k].second));
      e.name = std::move(ctx.emitted_[k].first);
      co_await push(std::move(e));
    }
    ctx.emitted_.clear();
    json::object w;
    for (const auto& kv : u.writes) w[kv.first] = json::value(kv.second, json::storage_ptr());
    Event e = event(EventKind::node_finished, name, step, std::move(w));
    co_await push(std::move(e));
  }

  asio::awaitable<void> push_run_started(const json::object& input, const json::value* resume) {
    json::value data = resume ? json::value(*resume, json::storage_ptr())
                              : json::value(input, json::storage_ptr());
    Event e = event(EventKind::run_started, {}, 0, std::move(data));
    co_await push(std::move(e));
  }

  asio::awaitable<void> push_state(std::int32_t step) {
    Event e = event(EventKind::state, {}, step, StateView(g, st).to_object());
    co_await push(std::move(e));
  }

  // Restores the thread's state from its latest checkpoint; an unfinished one also gives the
  // tasks to run next. An interrupted one is continued only by async_resume.
  Status restore(std::vector<Task>& tasks) {
    auto latest = checkpointer->latest(thread->id);
    if (!latest) return std::move(latest).error();
    if (!*latest) {
      if (resume_value)
        return Error(Errc::not_found, "thread '" + thread->id + "' has no checkpoint to resume");
      return {};
    }
    const Checkpoint& cp = **latest;
    const auto* status = cp.pending.if_contains("status");
    const bool interrupted = status && *status == "interrupted";
    if (resume_value && !interrupted) {
      return Error(Errc::invalid_argument,
                   "thread '" + thread->id + "' is not interrupted (" +
                       (status && *status == "done"
                            ? "its last run finished)"
                            : "its last run stopped unfinished; async_invoke continues it)"));
    }
    if (!resume_value && interrupted) {
      const auto* info = cp.pending.if_contains("interrupt");
      const auto* node =
          info && info->is_object() ? info->as_object().if_contains("node") : nullptr;
      return Error(Errc::invalid_argument,
                   "thread '" + thread->id + "' is interrupted at node '" +
                       (node && node->is_string() ? std::string(node->as_string()) : "?") +
                       "'; call async_resume with a value to continue it");
    }
    if (interrupted) {
      const auto* info = cp.pending.if_contains("interrupt");
      const auto* node =
          info && info->is_object() ? info->as_object().if_contains("node") : nullptr;
      if (node && node->is_string()) thread->resume_node = std::string(node->as_string());
    }
    auto state = checkpointer->state_at(thread->id, cp.checkpoint_id);
    if (!state) return std::move(state).error();
    for (const auto& [k, v] : *state) {
      if (auto ch = g.channel_index(k)) st.values[*ch] = json::value(v, st.sp);
    }
    thread->parent_checkpoint = cp.checkpoint_id;
    thread->step_base = cp.step;
    if (status && *status == "done") return {};
    resumed = true;
    if (const auto* next = cp.pending.if_contains("next"); next && next->is_array()) {
      for (const auto& n : next->as_array()) {
        auto i = n.is_string() ? g.node_index(n.as_string()) : std::nullopt;
        if (!i) {
          return Error(Errc::corrupt_data, "checkpoint " + cp.checkpoint_id + " of thread '" +
                                               thread->id + "' names node " + json::serialize(n) +
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

  // A checkpoint with only the channels written in this step, and what runs next. `status`
  // overrides "running"/"done"; `interrupt` ({"node","payload"}) is stored in pending.
  Status save(const std::vector<bool>& written, const std::vector<Task>& next_tasks,
              std::int32_t step, const char* status = nullptr,
              const json::object* interrupt = nullptr) {
    Checkpoint cp;
    cp.thread_id = thread->id;
    cp.step = thread->step_base + step;
    cp.checkpoint_id = new_checkpoint_id(cp.step);
    cp.parent_id = thread->parent_checkpoint;
    // Every kSnapshotEvery steps of the thread the checkpoint holds every channel, so that
    // restoring a long thread folds at most that many checkpoints (Checkpointer::state_at stops
    // at a snapshot); the others hold only what the step wrote.
    constexpr std::int64_t kSnapshotEvery = 32;
    const bool snapshot = cp.step > 0 && cp.step % kSnapshotEvery == 0;
    for (std::size_t ch = 0; ch < written.size(); ++ch) {
      if (written[ch] || snapshot) cp.writes[g.channels_[ch].first] = json::value(st.values[ch]);
    }
    if (snapshot) cp.writes[detail::kSnapshotKey] = true;
    json::array nodes, sends;
    for (const auto& t : next_tasks) {
      if (t.from_send)
        sends.push_back(json::object{{"node", g.nodes_[t.node].name}, {"input", t.input}});
      else
        nodes.push_back(json::value(g.nodes_[t.node].name));
    }
    cp.pending = json::object{{"status", status               ? status
                                         : next_tasks.empty() ? "done"
                                                              : "running"},
                              {"next", std::move(nodes)},
                              {"sends", std::move(sends)}};
    if (interrupt) cp.pending["interrupt"] = *interrupt;
    cp.metadata = thread->checkpoint_metadata;
    cp.metadata["run_id"] = run_id;
    if (auto s = checkpointer->put(cp); !s) return s;
    thread->parent_checkpoint = cp.checkpoint_id;
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

  // Async nodes of one step, at most max_concurrency at a time, on one strand; results in order.
  asio::awaitable<void> run_concurrently(const std::vector<Task>& tasks,
                                         std::vector<Result<Update>>& results) {
    auto ex = co_await asio::this_coro::executor;
    auto strand = asio::make_strand(ex);
    results.assign(tasks.size(), Error(Errc::cancelled, "not run"));
    // Thread-safe: the children finish on their strand, the parent may wait on another thread.
    asio::experimental::concurrent_channel<void(boost::system::error_code)> done(ex, 1);
    std::size_t next = 0, running = 0, finished = 0;
    const std::size_t limit = static_cast<std::size_t>(std::max(1, lim.max_concurrency));
    std::function<void()> launch = [&] {
      while (running < limit && next < tasks.size()) {
        const std::size_t i = next++;
        ++running;
        asio::co_spawn(strand, call(tasks[i], ctxs[i], results[i]), [&, i](std::exception_ptr e) {
          if (e) results[i] = Error(Errc::tool_failed, "node threw an unknown exception");
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
  return async_run(std::move(graph), std::move(input), std::move(options), nullptr);
}

asio::awaitable<Result<RunResult>> GraphRuntime::async_resume(
    std::shared_ptr<const CompiledGraph> graph, std::string thread_id, json::value resume_value,
    RunOptions options) {
  if (!options.checkpointer) {
    co_return Error(Errc::unsupported, "async_resume of thread '" + thread_id +
                                           "' needs a checkpointer: set RunOptions.checkpointer");
  }
  if (thread_id.empty())
    co_return Error(Errc::invalid_argument, "async_resume needs a non-empty thread id");
  options.thread_id = std::move(thread_id);
  auto value = std::make_unique<json::value>(std::move(resume_value));
  co_return co_await async_run(std::move(graph), json::object(), std::move(options), value.get());
}

asio::awaitable<Result<RunResult>> GraphRuntime::async_run(
    std::shared_ptr<const CompiledGraph> graph, json::object input, RunOptions options,
    const json::value* resume_value) {
  std::string run_id =
      options.run_id.empty() ? "run-" + std::to_string(next_run_.fetch_add(1)) : options.run_id;
  auto r = std::make_unique<Runner>(*graph, options_, std::move(run_id), graph->limits_);
  r->graph_ref = std::move(graph);
  r->admission = admission_.get();
  r->input = std::move(input);
  if (options.checkpointer && !options.thread_id.empty()) {
    r->checkpointer = options.checkpointer;
    r->thread = std::make_unique<Runner::Thread>();
    r->thread->id = std::move(options.thread_id);
    r->thread->checkpoint_metadata = std::move(options.checkpoint_metadata);
  }
  r->resume_value = resume_value;
  // The run keeps no owning reference to the stream: a consumer that drops it closes it.
  if (options.events) r->events = options.events->impl_;
  r->stream_state = options.stream_state;
  Runner* p = r.get();
  return p->run(std::move(r));
}

}  // namespace weir::graph
