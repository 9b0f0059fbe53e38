// Budgets: the fewest tokens that complete a value from a parse state.
//
// Bytes first. Grammar::rest_bytes gives, for every position of an alternative, the fewest
// bytes the rest of it derives; a parse stack's shortest completion is the sum over its
// positions, a parse state's the least over its stacks (Stacks::min_bytes, kept per DFA state
// with the "tight" bytes that start such a shortest completion: a tight byte takes the
// shortest completion one byte down, every other byte keeps it or makes it longer).
//
// Tokens: min_tokens(S) is the fewest tokens that spell a completion of S at most kSlack
// bytes longer than its shortest (the slack lets "false" beat "true" where it takes fewer
// tokens, and an optional space merge into the token beside it; no slack is spent on the
// characters of a string, which never shorten one):
//   U_k(S) = 0 when S is complete, else 1 + min over tokens t whose bytes keep within k of
//   the shortest (slack(t) = |t| + min_bytes(S after t) - min_bytes(S) <= k) of
//   U_{k - slack(t)}(S after t),   min_tokens(S) = U_kSlack(S),
// found by walking the vocabulary trie along the bytes that keep within the slack (a literal
// such as `"}` or `, "name": ` leaves one or two at a time, so the walk follows a path) and
// memoised per DFA state and slack. The first token of a best spelling leaves a state whose
// completions within the slack hold the rest of that spelling, so from S with
// min_tokens(S) <= n there is always a token after which min_tokens <= n - 1: allowing only
// such tokens never leaves a sequence without one, and a value that started within budget
// ends within it. min_tokens is at least the true fewest tokens of any completion; the
// structured tests' exhaustive search finds them equal on every schema it tries. Where every
// byte value is a token of its own, min_tokens(S) <= min_bytes(S), which lets the mask skip
// the tokens' computation while the budget exceeds the bytes every allowed token leaves to
// write (Impl::fits).
#include <algorithm>

#include "constraint/constraint_impl.hpp"

namespace weir::inference {

namespace {

using Dfa = Constraint::Impl::Dfa;
constexpr int kSlack = Dfa::kSlack;

// A state and the slack left to spend from it.
struct Target {
  std::int32_t sid;
  int slack;
  bool operator<(const Target& o) const { return sid != o.sid ? sid < o.sid : slack < o.slack; }
  bool operator==(const Target& o) const { return sid == o.sid && slack == o.slack; }
};

// The states (and the slack each leaves) reached by the tokens that keep a completion from
// `sid` within `slack` bytes of its shortest (see above), in `out` (sorted, unique).
void targets_of(const Constraint::Impl& impl, Dfa& dfa, std::int32_t sid, int slack,
                std::vector<Target>& out) {
  const VocabTrie& v = *impl.vocab;
  const std::uint32_t base = dfa.min_bytes[static_cast<std::size_t>(sid)];
  out.clear();
  struct At {
    std::uint32_t node;
    std::int32_t s;
    int used;
  };
  thread_local std::vector<At> stack;
  stack.assign(1, {0u, sid, 0});
  while (!stack.empty()) {
    const At at = stack.back();
    stack.pop_back();
    const auto si = static_cast<std::size_t>(at.s);
    const std::uint32_t depth = at.node == 0 ? 0 : v.nodes[at.node].depth;
    // The bytes worth following: the tight ones, and within the slack any other but a string
    // body's (extra characters, escapes or multi-byte ones, never save a token).
    std::bitset<256> follow = dfa.tight[si];
    if (at.used < slack && impl.plain_step(dfa, at.s) < 0) follow |= dfa.first[si];
    auto visit = [&](std::uint32_t k) {
      const unsigned char c = v.nodes[k].byte;
      std::int32_t next = dfa.next[si][c];
      if (next == -2) next = impl.step(dfa, at.s, c);
      if (next < 0) return;
      const std::int64_t used = static_cast<std::int64_t>(depth) + 1 +
                                dfa.min_bytes[static_cast<std::size_t>(next)] -
                                static_cast<std::int64_t>(base);
      if (used > slack) return;
      if (v.tok_begin[k] < v.tok_begin[k + 1]) {
        // Few distinct targets among many tokens (a run of digits leaves the same few
        // states): the first kFewTargets are kept unique as they come, where sorting every
        // token's would cost more (the rest are sorted out below).
        constexpr std::size_t kFewTargets = 64;
        const Target t{next, slack - static_cast<int>(used)};
        if (out.size() >= kFewTargets || std::find(out.begin(), out.end(), t) == out.end())
          out.push_back(t);
      }
      stack.push_back({k, next, static_cast<int>(used)});
    };
    const std::array<std::uint32_t, 256>* wide =
        at.node != 0 && v.is_wide[at.node] ? &v.wide.find(at.node)->second.child : nullptr;
    if (at.node == 0 || wide) {  // many children: look up the few bytes to follow
      const auto& table = at.node == 0 ? v.root_child : *wide;
      for (unsigned c = 0; c < 256; ++c)
        if (follow.test(c) && table[c]) visit(table[c]);
    } else {
      for (std::uint32_t k = at.node + 1; k < v.nodes[at.node].end; k = v.nodes[k].end)
        if (follow.test(v.nodes[k].byte)) visit(k);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

}  // namespace

std::int32_t Constraint::Impl::min_tokens(Dfa& dfa, std::int32_t sid) const {
  auto memo = [&](Target t) -> std::int32_t& {
    return dfa.min_tokens[static_cast<std::size_t>(t.sid)][static_cast<std::size_t>(t.slack)];
  };
  const Target start{sid, kSlack};
  if (memo(start) >= 0) return memo(start);
  // Depth-first over the targets, each (state, slack) once: min_bytes + slack falls with every
  // token (no cycle). A frame is expanded (its targets found and pushed), then resolved once
  // they all are; no recursion.
  struct Frame {
    Target at;
    std::size_t first, count;  // its targets in `targets`, once expanded
    bool expanded;
  };
  const std::size_t bytes_before = dfa.bytes;
  std::vector<Frame> frames = {{start, 0, 0, false}};
  std::vector<Target> targets, found;
  while (!frames.empty()) {
    const std::size_t top = frames.size() - 1;
    const Target at = frames[top].at;
    if (memo(at) >= 0) {
      frames.pop_back();
      continue;
    }
    if (dfa.min_bytes[static_cast<std::size_t>(at.sid)] == 0) {
      memo(at) = 0;
      frames.pop_back();
      continue;
    }
    if (!frames[top].expanded) {
      // Too long to plan: no answer (not memoised). What this search added counts, not what
      // the DFA held before it (a DFA kept across walks holds earlier searches' states: it
      // refused every token mid-value, found by the breaking pass).
      if (dfa.bytes - bytes_before > kMaxPlanBytes) {
        dfa.plan_cut = true;
        return kNoCompletion;
      }
      targets_of(*this, dfa, at.sid, at.slack, found);
      frames[top].expanded = true;
      frames[top].first = targets.size();
      frames[top].count = found.size();
      targets.insert(targets.end(), found.begin(), found.end());
      for (const Target& t : found)
        if (memo(t) < 0) frames.push_back({t, 0, 0, false});
      continue;
    }
    std::int32_t best = kNoCompletion;
    for (std::size_t k = 0; k < frames[top].count; ++k) {
      const std::int32_t u = memo(targets[frames[top].first + k]);
      if (u < kNoCompletion) best = std::min(best, u + 1);
    }
    memo(at) = best;
    frames.pop_back();
  }
  return memo(start);
}

std::int32_t Constraint::Impl::min_tokens(const std::vector<std::uint32_t>& state) const {
  std::unique_ptr<Dfa> dfa = take_dfa();
  const std::int32_t sid = dfa->intern(Stacks{grammar}, state);
  const std::int32_t n = min_tokens(*dfa, sid);
  give_dfa(std::move(dfa));
  return n;
}

std::int32_t Constraint::Impl::run_max_tokens(Dfa& dfa, std::int32_t pid) const {
  const auto pi = static_cast<std::size_t>(pid);
  if (dfa.run_max_tokens[pi] >= 0) return dfa.run_max_tokens[pi];
  const unsigned run = plain_run(dfa, pid);
  std::int32_t most = 0, fewest = kNoCompletion;
  std::vector<std::int32_t> seen;
  for (std::int32_t s = pid, j = 0; j < static_cast<std::int32_t>(run); ++j) {
    s = plain_step(dfa, s);
    if (s < 0 || std::find(seen.begin(), seen.end(), s) != seen.end()) break;  // a cycle: done
    seen.push_back(s);
    const std::int32_t u = min_tokens(dfa, s);
    most = std::max(most, u);
    fewest = std::min(fewest, u);
  }
  dfa.run_max_tokens[static_cast<std::size_t>(pid)] = most;
  dfa.run_min_tokens[static_cast<std::size_t>(pid)] = fewest;
  return most;
}

}  // namespace weir::inference
