// A run's channels: the reducers, message windows (eviction, archive, rolling summary) and
// the offload of large values to the artifact store (see runner.hpp, state_graph.hpp).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <boost/json.hpp>

#include <cstdio>
#include <random>

#include "channel_defaults.hpp"
#include "runner.hpp"
#include "weir/runtime/artifact_store.hpp"
#include "weir/runtime/log.hpp"
#include "weir/runtime/text.hpp"

namespace weir::graph {

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
  s.resize(utf8_cut(s, max > kNote.size() ? max - kNote.size() : 0));
  if (max >= kNote.size()) s += kNote;
  return s;
}

// What a messages channel's write holds that is not a message: it takes messages (objects) and
// texts, alone or in a list. nullopt when it fits; else "5", or "true as item 1 of its list".
std::optional<std::string> not_messages(const json::value& w) {
  auto bad = [](const json::value& x) { return !is_message(x); };
  auto shown = [](const json::value& x) {
    return x.is_array() ? std::string("a list") : json::serialize(x);
  };
  if (!w.is_array()) return bad(w) ? std::optional(shown(w)) : std::nullopt;
  const auto& items = w.as_array();
  for (std::size_t k = 0; k < items.size(); ++k)
    if (bad(items[k])) return shown(items[k]) + " as item " + std::to_string(k) + " of its list";
  return std::nullopt;
}

}  // namespace

std::int64_t Runner::tokens_of(std::size_t ch, const json::value& m) const {
  const auto& [name, o] = g.channels_[ch];
  const auto* c = m.is_object() ? m.as_object().if_contains("content") : nullptr;
  std::string text = c && c->is_string() ? std::string(c->as_string()) : json::serialize(m);
  if (!o.token_counter) return default_tokens(text);
  std::int64_t n = 0;
  try {
    n = o.token_counter(text);
  } catch (...) {  // the run's error, naming the channel (it escaped the run)
    throw Exception(Errc::tool_failed,
                    "channel '" + name + "' token counter " + thrown_error().message);
  }
  if (n < 0)
    throw Exception(Errc::invalid_argument, "channel '" + name + "' token counter returned " +
                                                std::to_string(n) +
                                                " for a message; a count is 0 or more");
  // Past the window's limit every count evicts alike: capped there, the window's sums stay in
  // range (a counter returning INT64_MAX overflowed them, and nothing was evicted).
  const std::int64_t max_tokens = o.max_tokens.value_or(0);
  return max_tokens > 0 && max_tokens < INT64_MAX ? std::min(n, max_tokens + 1) : n;
}

void Runner::trim_window(std::size_t ch, json::array& arr) {
  const ChannelOptions& o = g.channels_[ch].second;
  const std::int64_t max_messages = o.max_messages.value_or(0);
  const std::int64_t max_tokens = o.max_tokens.value_or(0);
  if (max_messages <= 0 && max_tokens <= 0) return;
  const auto [marker, first] = window_layout(arr);
  const std::size_t marker_count = first - marker;
  std::int64_t total = 0;
  if (max_tokens > 0) {
    for (const auto& m : arr) {  // saturating: many messages at the cap
      const std::int64_t t = tokens_of(ch, m);
      total = total > INT64_MAX - t ? INT64_MAX : total + t;
    }
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
    if (max_tokens > 0) total -= tokens_of(ch, arr[first + drop]);
    ++drop;
  }
  if (drop == 0) return;
  note_fence({{"fence", "window_eviction"},
              {"channel", g.channels_[ch].first},
              {"evicted_messages", static_cast<std::int64_t>(drop)}});
  if (traced)
    trace_fence("weir.fence.window_eviction",
                {{"weir.channel", g.channels_[ch].first},
                 {"weir.window.evicted_messages", static_cast<std::int64_t>(drop)}});
  if (opt.artifacts || o.summarize) {
    auto& evicted = extra().evicted;
    if (evicted.empty()) evicted.resize(g.channels_.size());
    for (std::size_t i = 0; i < drop; ++i) evicted[ch].emplace_back(arr[first + i]);
  }
  arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(first),
            arr.begin() + static_cast<std::ptrdiff_t>(first + drop));
}

asio::awaitable<Status> Runner::fold_evicted(std::int64_t step) {
  auto& evicted = extra().evicted;
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
      json::object marker_msg(st.sp());
      marker_msg["role"] = "system";
      marker_msg["name"] = "summary";
      archived += static_cast<std::int64_t>(turns.size());
      if (opt.artifacts) {
        // This eviction's turns only, after a line naming the archive before it: a chain, so
        // that each eviction writes what it evicts (a copy of every earlier turn, each time,
        // made a long chat's archives quadratic in its length, kept with every checkpoint).
        std::string lines;
        if (old_archive)
          lines =
              json::serialize(json::object{{kPreviousArchiveKey, old_archive->to_json()}}) + "\n";
        for (const auto& m : turns) lines += json::serialize(m) + "\n";
        auto ref = opt.artifacts->put(lines, "application/x-ndjson", "", run_id);
        if (!ref)
          co_return Error(ref.error().code, "channel '" + name + "': archiving evicted messages: " +
                                                ref.error().message);
        marker_msg["archive"] = ref->to_json();
      }
      std::string summary;
      if (o.summarize) {
        Result<std::string> r = Error(Errc::cancelled, "not run");
        try {
          r = co_await o.summarize(previous, std::move(turns));
        } catch (...) {
          r = thrown_error();
        }
        if (r) {
          summary = cap_summary(std::move(*r), o.max_summary_bytes);
        } else {
          summary = std::move(previous);
          const std::string msg = "run " + run_id + ": channel '" + name +
                                  "': the summarize hook failed (" + r.error().to_string() +
                                  "); keeping the previous summary";
          log(LogLevel::warn, msg);
          if (streaming()) {
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

// A message is written once and kept by id (LangGraph's clients key branches and edits by it):
// one written without an id gets one here, from the process, the run, the thread's step and its
// place (and a subgraph's, its call: Extra::scope), so equal messages of two runs (the same answer
// on two branches, even from two processes whose runs are both "run-1") are told apart.
std::string Runner::message_id(std::int32_t step, std::string_view key) const {
  static const std::uint64_t salt = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  const std::int64_t at = (thread ? thread->step_base : 0) + step;
  std::uint64_t h = 1469598103934665603ull ^ salt;  // FNV-1a of "<run_id>/<step>/<key>"
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  mix(run_id);
  if (extras) mix(extras->scope);  // a subgraph's call
  mix("/" + std::to_string(at) + "/");
  mix(key);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("msg-") + hex;
}

void Runner::name_messages(json::array& arr, std::size_t from, std::int32_t step,
                           std::string_view key) const {
  std::string k(key);
  for (std::size_t i = from; i < arr.size(); ++i) {
    if (!arr[i].is_object() || arr[i].as_object().contains("id")) continue;
    k.resize(key.size());
    k += std::to_string(i - from);
    arr[i].as_object()["id"] = message_id(step, k);
  }
}

Status Runner::reduce(std::size_t ch,
                      const std::vector<std::pair<std::size_t, const json::value*>>& writes,
                      std::int32_t step) {
  const auto& [name, opt_c] = g.channels_[ch];
  json::value& cur = st.values[ch];
  if (!opt_c.custom &&
      (opt_c.reducer == ReducerKind::append || opt_c.reducer == ReducerKind::messages)) {
    // The step's items in one allocation, not one growth per item (five nodes appending one
    // item each grew the list four times).
    // An append channel's max_items bounds what it may hold at once: a write of 100,000 items
    // to a channel that keeps 3 had the state reserve (and the run's budget refuse) them all.
    if (!cur.is_array()) cur = json::array(st.sp());
    std::size_t items = 0;
    for (const auto& [node, w] : writes) items += w->is_array() ? w->as_array().size() : 1;
    if (opt_c.reducer == ReducerKind::append && opt_c.max_items.value_or(0) > 0)
      items = std::min(items, static_cast<std::size_t>(*opt_c.max_items));
    cur.as_array().reserve(cur.as_array().size() + items);
  }
  for (std::size_t i = 0; i < writes.size(); ++i) {
    const json::value& w = *writes[i].second;
    if (opt_c.custom) {
      Result<json::value> r = Error(Errc::tool_failed, "");
      try {
        r = opt_c.custom(cur, w);
      } catch (...) {
        return Error(Errc::tool_failed, "channel '" + name + "' reducer " + thrown_error().message +
                                            " (on the write of " + writer(writes[i].first) + ")");
      }
      if (!r)
        return Error(r.error().code, "channel '" + name + "' reducer refused the write of " +
                                         writer(writes[i].first) + ": " + r.error().message);
      cur = json::value(*r, st.sp());
      continue;
    }
    switch (opt_c.reducer) {
      case ReducerKind::last_value:
        if (writes.size() > 1) {
          const std::string& a = g.nodes_[writes[0].first].name;
          const std::string& b = g.nodes_[writes[1].first].name;
          // One node twice: its update set the channel twice, or two of its Send tasks did.
          return Error(
              Errc::conflicting_writes,
              (a == b ? "node '" + a + "' wrote channel '" + name +
                            "' more than once (twice in its update, or from two of "
                            "its Send tasks)"
                      : "nodes '" + a + "' and '" + b + "' both wrote channel '" + name + "'") +
                  " in superstep " + std::to_string(step) +
                  "; a last-value channel takes one write per step: give it a reducer "
                  "(e.g. append) or write it " +
                  (a == b ? "once" : "from one node"));
        }
        cur = json::value(w, st.sp());
        break;
      case ReducerKind::append:
      case ReducerKind::messages: {
        if (opt_c.reducer == ReducerKind::messages) {
          if (auto bad = not_messages(w))  // they were kept as items of the list
            return Error(Errc::invalid_argument, "channel '" + name +
                                                     "' holds messages (objects or texts); " +
                                                     writer(writes[i].first) + " wrote " + *bad);
        }
        if (!cur.is_array()) cur = json::array(st.sp());
        auto& arr = cur.as_array();
        const std::size_t before = arr.size();
        // messages: one whose id the channel holds takes that message's place (LangGraph's
        // add_messages); appended otherwise. Only messages given an id are looked up.
        auto add = [&](const json::value& x) {
          const json::value* id = nullptr;
          if (opt_c.reducer == ReducerKind::messages && x.is_object())
            if (const auto* i = x.as_object().if_contains("id"); i && i->is_string()) id = i;
          if (id)
            for (auto& m : arr)
              if (const auto* have = m.is_object() ? m.as_object().if_contains("id") : nullptr;
                  have && *have == *id) {
                m = x;
                return;
              }
          arr.emplace_back(x);
        };
        if (w.is_array()) {
          const auto& items = w.as_array();
          std::size_t skip = 0;  // appended only to be dropped below
          if (const std::int64_t cap = opt_c.max_items.value_or(0);
              opt_c.reducer == ReducerKind::append && cap > 0 &&
              items.size() > static_cast<std::size_t>(cap))
            skip = items.size() - static_cast<std::size_t>(cap);
          for (std::size_t k = skip; k < items.size(); ++k) add(items[k]);
        } else {
          add(w);
        }
        if (opt_c.reducer == ReducerKind::messages) {
          // "c:<channel>/<write>.<item>"; NodeContext::new_message_id's keys start "n:".
          name_messages(arr, before, step, "c:" + name + "/" + std::to_string(i) + ".");
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
          return Error(Errc::invalid_argument, "channel '" + name + "' holds numbers; " +
                                                   writer(writes[i].first) + " wrote " +
                                                   json::serialize(w));
        if (cur.is_null()) {
          cur = w;
        } else if (opt_c.reducer == ReducerKind::sum) {
          // Past int64 the sum wrapped, past a double it was Infinity, which is not JSON (and a
          // thread's checkpoint refused it at every later step).
          std::int64_t sum = 0;
          double d = 0;
          const bool wide = !(cur.is_int64() && w.is_int64());
          if (wide ? !std::isfinite(d = cur.to_number<double>() + w.to_number<double>())
                   : __builtin_add_overflow(cur.as_int64(), w.as_int64(), &sum))
            return Error(Errc::invalid_argument,
                         "channel '" + name + "': " + json::serialize(w) + " from " +
                             writer(writes[i].first) + " added to the channel's " +
                             json::serialize(cur) + " is past the range of " +
                             (wide ? "a double" : "a 64-bit integer"));
          if (wide)
            cur = d;
          else
            cur = sum;
        } else {
          const bool bigger = w.to_number<double>() > cur.to_number<double>();
          if ((opt_c.reducer == ReducerKind::max) == bigger) cur = w;
        }
        break;
      }
      case ReducerKind::merge:
        if (!cur.is_object()) cur = json::object(st.sp());
        if (!w.is_object())
          return Error(Errc::invalid_argument, "channel '" + name + "' merges objects; " +
                                                   writer(writes[i].first) + " wrote a non-object");
        for (const auto& [k, v] : w.as_object()) cur.as_object()[k] = v;
        break;
    }
  }
  return {};
}

Status Runner::offload(json::value& v, std::string_view channel, std::string_view node, bool item) {
  // A list written to a list channel (append, messages) is items: each over the limit is
  // stored on its own, so that a long message among short ones stays a message (one artifact
  // for the whole list would be merged into the channel as one item).
  if (!item && v.is_array() && opt.artifacts) {
    if (auto ch = g.channel_index(channel)) {
      const ChannelOptions& o = g.channels_[*ch].second;
      if (!o.custom && (o.reducer == ReducerKind::append || o.reducer == ReducerKind::messages)) {
        for (auto& x : v.as_array())
          if (auto s = offload(x, channel, node, true); !s) return s;
        return {};
      }
    }
  }
  if (!opt.artifacts || v.is_null() || v.is_bool() || v.is_number()) return {};
  if (v.is_string() && v.as_string().size() <= lim.inline_limit) return {};
  if (ArtifactRef::from_json(v)) return {};
  std::string text = v.is_string() ? std::string(v.as_string()) : json::serialize(v);
  if (text.size() <= lim.inline_limit) return {};
  auto ref =
      opt.artifacts->put(text, v.is_string() ? "text/plain" : "application/json", "", run_id);
  if (!ref) return std::move(ref).error();
  json::object f{{"fence", "artifact_offload"}, {"channel", channel}};
  if (!node.empty()) f["node"] = node;
  f["bytes"] = static_cast<std::int64_t>(text.size());
  f["artifact"] = ref->id;
  note_fence(std::move(f));
  v = ref->to_json();
  ++offloaded;
  return {};
}

}  // namespace weir::graph
