// Triggers: free text until a text such as "<tool_call>" appears, then a value
// (ConstraintMatcher with a trigger). The trigger is followed with KMP over the output's bytes
// (`matched`: how much of it ends the output). A value that starts must end within the budget,
// so the free text's mask refuses the tokens that would start, continue or complete the
// trigger when what must follow them does not fit: after a token that leaves m bytes of the
// trigger matched, the fewest tokens that spell the rest of it plus the value's min_tokens;
// after a token that completes it, the min_tokens of the value its remaining bytes start (and
// such a token whose remaining bytes no value starts with is never allowed). These needs are
// the same for every request, so each trigger's table is built once per constraint.
#include <algorithm>

#include "constraint/constraint_impl.hpp"

namespace weir::inference {

std::int32_t constraint::Trigger::advance(std::int32_t m, std::string_view piece) const {
  const auto n = static_cast<std::int32_t>(text.size());
  for (std::size_t i = 0; i < piece.size(); ++i) {
    while (m > 0 && text[static_cast<std::size_t>(m)] != piece[i])
      m = fail[static_cast<std::size_t>(m)];
    if (text[static_cast<std::size_t>(m)] == piece[i]) ++m;
    if (m == n) return -1 - static_cast<std::int32_t>(i + 1);
  }
  return m;
}

std::shared_ptr<const constraint::Trigger> Constraint::Impl::trigger(
    const std::string& text) const {
  {
    std::lock_guard lock(trigger_mu);
    if (auto it = triggers.find(text); it != triggers.end()) return it->second;
  }
  auto t = std::make_shared<constraint::Trigger>();
  t->text = text;
  const auto n = text.size();
  t->fail.assign(n + 1, 0);
  for (std::size_t m = 2, k = 0; m <= n; ++m) {  // fail[m]: border of text[0, m)
    while (k > 0 && text[m - 1] != text[k]) k = static_cast<std::size_t>(t->fail[k]);
    if (text[m - 1] == text[k]) ++k;
    t->fail[m] = static_cast<std::int32_t>(k);
  }
  const VocabTrie& v = *vocab;
  auto piece = [&](std::int32_t id) -> std::string_view {
    const std::string& p = v.pieces[static_cast<std::size_t>(id)];
    if (!p.empty()) return p;
    auto it = v.control_pieces.find(id);
    return it == v.control_pieces.end() ? std::string_view() : std::string_view(it->second);
  };
  // spell[m]: the fewest tokens that write text[m, n) exactly (kNoCompletion: none do).
  std::vector<std::int32_t> spell(n + 1, kNoCompletion);
  spell[n] = 0;
  for (std::size_t m = n; m-- > 0;) {
    for (std::uint32_t node = 0, j = static_cast<std::uint32_t>(m); j < n; ++j) {
      node = constraint::trie_child(v, node, static_cast<unsigned char>(text[j]));
      if (node == 0) break;
      if (v.tok_begin[node] < v.tok_begin[node + 1] && spell[j + 1] < kNoCompletion)
        spell[m] = std::min(spell[m], spell[j + 1] + 1);
    }
    for (const auto& [id, p] : v.control_pieces)
      if (text.compare(m, p.size(), p) == 0 && spell[m + p.size()] < kNoCompletion)
        spell[m] = std::min(spell[m], spell[m + p.size()] + 1);
  }
  const std::int32_t value = min_tokens(initial);
  // Tokens holding the trigger's first byte, and the control tokens: with those that continue
  // a partial match, every token that can leave the trigger (partly) matched.
  std::vector<std::int32_t> starting;
  for (std::int32_t id = 0; id < v.n_vocab; ++id)
    if (piece(id).find(text[0]) != std::string_view::npos || v.control_pieces.count(id))
      starting.push_back(id);
  t->needs.resize(n);
  t->max_need.assign(n, 0);
  std::vector<std::int32_t> candidates;
  for (std::size_t m = 0; m < n; ++m) {
    candidates = starting;
    for (std::size_t k = m; k > 0; k = static_cast<std::size_t>(t->fail[k])) {
      // Tokens that copy text[k, ...): prefixes of it and those that hold all of it.
      std::uint32_t node = 0;
      for (std::size_t j = k; j < n; ++j) {
        node = constraint::trie_child(v, node, static_cast<unsigned char>(text[j]));
        if (node == 0) break;
        const std::uint32_t to = j + 1 == n ? v.nodes[node].end : node + 1;
        candidates.insert(candidates.end(), v.toks.begin() + v.tok_begin[node],
                          v.toks.begin() + v.tok_begin[to]);
      }
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    for (std::int32_t id : candidates) {
      const std::string_view p = piece(id);
      const std::int32_t r = t->advance(static_cast<std::int32_t>(m), p);
      std::int32_t need = 0;
      if (r == 0) continue;  // the trigger is left behind
      if (r > 0) {
        need = spell[static_cast<std::size_t>(r)] >= kNoCompletion || value >= kNoCompletion
                   ? kNoCompletion
                   : spell[static_cast<std::size_t>(r)] + value;
      } else {
        std::vector<std::uint32_t> cur = initial, next, tmp;
        const Stacks st{grammar};
        for (char ch : p.substr(static_cast<std::size_t>(-1 - r))) {
          st.advance(cur.data(), cur.size(), static_cast<unsigned char>(ch), next, tmp);
          cur.swap(next);
          if (cur.empty()) break;
        }
        need = cur.empty() ? kNoCompletion : min_tokens(cur);
      }
      t->needs[m].emplace_back(id, need);
      t->max_need[m] = std::max(t->max_need[m], need);
    }
  }
  std::lock_guard lock(trigger_mu);
  return triggers.emplace(text, std::move(t)).first->second;
}

}  // namespace weir::inference
