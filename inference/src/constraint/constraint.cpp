// compile_constraint (with its caches) and the matcher: parse stacks advanced byte by byte.
// Masks: constraint/mask.cpp; the vocabulary trie: constraint/vocab_trie.cpp.
#include "weir/inference/constraint.hpp"

#include <algorithm>
#include <cassert>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

#include "constraint/constraint_impl.hpp"

namespace weir::inference {

using constraint::build_trie;

std::int32_t Constraint::n_vocab() const {
  return impl_->vocab->n_vocab;
}
std::size_t Constraint::grammar_size() const {
  return impl_->grammar.elems.size();
}
std::uint64_t Constraint::mask_walks() const {
  return impl_->walks.load();
}
std::uint64_t Constraint::mask_cache_hits() const {
  return impl_->hits.load();
}
std::int32_t Constraint::min_tokens() const {
  std::int32_t n = impl_->initial_min.load(std::memory_order_relaxed);
  if (n < 0) {
    n = impl_->min_tokens(impl_->initial);
    impl_->initial_min.store(n, std::memory_order_relaxed);
  }
  return n;
}

// --- compile + caches -----------------------------------------------------------------------

namespace {

std::string vocab_key(const Tokenizer& t) {
  // The tokenizer's address, size and a sample of its tokens: a freed tokenizer whose address
  // is reused by another vocabulary differs in the sample.
  std::string k =
      std::to_string(reinterpret_cast<std::uintptr_t>(&t)) + ":" + std::to_string(t.n_vocab());
  const std::int32_t n = t.n_vocab();
  for (std::int32_t i = 0; i < 64 && n > 0; ++i) {
    const std::int32_t id = static_cast<std::int32_t>((static_cast<std::int64_t>(i) * 7919) % n);
    k += '\x1f';
    k += t.token_text(id);
  }
  return k;
}

struct Caches {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<const VocabTrie>> tries;
  // LRU of compiled constraints.
  std::list<std::pair<std::string, std::shared_ptr<const Constraint>>> lru;
  std::unordered_map<std::string, decltype(lru)::iterator> index;
  static constexpr std::size_t kMax = 256;
};
Caches& caches() {
  static Caches c;
  return c;
}

}  // namespace

Result<std::shared_ptr<const Constraint>> compile_constraint(const ConstraintSpec& spec,
                                                             const Tokenizer& tokenizer) {
  const std::string vk = vocab_key(tokenizer);
  std::string key = std::to_string(static_cast<int>(spec.kind)) + '\x1e' + spec.text;
  for (const auto& c : spec.choices) key += '\x1e' + std::to_string(c.size()) + ':' + c;
  key += '\x1d' + vk;
  auto& cache = caches();
  std::shared_ptr<const VocabTrie> trie;
  {
    std::lock_guard lock(cache.mu);
    if (auto it = cache.index.find(key); it != cache.index.end()) {
      cache.lru.splice(cache.lru.begin(), cache.lru, it->second);
      return it->second->second;
    }
    if (auto it = cache.tries.find(vk); it != cache.tries.end()) trie = it->second.lock();
  }
  constraint::GrammarBuilder b;
  Result<std::uint32_t> root = std::uint32_t{0};
  switch (spec.kind) {
    case ConstraintSpec::Kind::json_schema:
      root = constraint::compile_json_schema(b, spec.text);
      break;
    case ConstraintSpec::Kind::json_object:
      root = constraint::json_any_object(b);
      break;
    case ConstraintSpec::Kind::regex:
      root = constraint::compile_regex(b, spec.text, false, true);
      break;
    case ConstraintSpec::Kind::gbnf:
      root = constraint::compile_gbnf(b, spec.text);
      break;
    case ConstraintSpec::Kind::choice: {
      if (spec.choices.empty()) return Error(Errc::invalid_argument, "choice: no choices given");
      const std::uint32_t r = b.new_rule("root");
      for (const auto& c : spec.choices) {
        if (c.empty())
          return Error(Errc::invalid_argument, "choice: an empty string is not a valid choice");
        b.add_alt(r, b.literal(c));
      }
      root = r;
      break;
    }
  }
  if (!root) return std::move(root).error();
  auto g = b.finish(*root);
  if (!g) return std::move(g).error();
  if (!trie) trie = build_trie(tokenizer);
  auto impl = std::make_shared<Constraint::Impl>();
  impl->grammar = std::move(*g);
  impl->vocab = trie;
  Stacks{impl->grammar}.initial(impl->initial);
  // The fewest tokens of a whole value, planned here once (every request asks for it before
  // it is admitted), within Impl::kMaxPlanBytes.
  {
    auto dfa = impl->take_dfa();
    const std::int32_t sid = dfa->intern(Stacks{impl->grammar}, impl->initial);
    const std::int32_t n = impl->min_tokens(*dfa, sid);
    const bool cut = dfa->plan_cut;
    const std::uint32_t bytes = dfa->min_bytes[static_cast<std::size_t>(sid)];
    impl->give_dfa(std::move(dfa));
    if (cut)
      return Error(
          Errc::invalid_argument,
          "constraint too large: planning the fewest tokens of its shortest valid value (" +
              std::to_string(bytes) + " bytes) takes more than " +
              std::to_string(Constraint::Impl::kMaxPlanBytes >> 20) +
              " MiB of parse states; lower the sizes it asks for (minItems, minLength), or "
              "give untyped items a type");
    impl->initial_min.store(n);
  }
  auto c = std::make_shared<const Constraint>(std::move(impl));
  std::lock_guard lock(cache.mu);
  cache.tries[vk] = trie;
  if (auto it = cache.index.find(key); it != cache.index.end()) return it->second->second;
  cache.lru.emplace_front(key, c);
  cache.index[key] = cache.lru.begin();
  if (cache.lru.size() > Caches::kMax) {
    cache.index.erase(cache.lru.back().first);
    cache.lru.pop_back();
  }
  return std::shared_ptr<const Constraint>(c);
}

// --- matcher -------------------------------------------------------------------------------

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const Constraint> constraint,
                                     std::string trigger)
    : c_(std::move(constraint)), state_(c_->impl().initial) {
  if (!trigger.empty()) {
    trigger_ = c_->impl().trigger(trigger);
    active_ = false;
  }
}

bool ConstraintMatcher::complete() const {
  if (!active_) return true;
  for (std::size_t i = 0; i < state_.size(); i += state_[i] + 1)
    if (state_[i] == 0) return true;
  return false;
}

bool ConstraintMatcher::finished() const {
  if (!active_ || state_.empty()) return false;
  for (std::size_t i = 0; i < state_.size(); i += state_[i] + 1)
    if (state_[i] != 0) return false;
  return true;
}

bool ConstraintMatcher::dead() const {
  return active_ && state_.empty();
}

std::int32_t ConstraintMatcher::min_tokens() const {
  if (!active_) return 0;
  if (dead()) return kNoCompletion;
  if (state_ == c_->impl().initial) return c_->min_tokens();  // planned at compile
  return c_->impl().min_tokens(state_);
}

std::string ConstraintMatcher::state_key() const {
  std::string k(reinterpret_cast<const char*>(state_.data()),
                state_.size() * sizeof(std::uint32_t));
  if (!active_) k += "free " + std::to_string(matched_);
  return k;
}

bool ConstraintMatcher::fill_mask(std::span<std::uint64_t> words, std::int32_t budget) const {
  const auto& impl = c_->impl();
  assert(budget >= 1);
  assert(words.size() >= mask_words(impl.vocab->n_vocab));
  words = words.first(mask_words(impl.vocab->n_vocab));
  if (!active_) {
    // Free text: every token but those that would take the trigger where its value cannot
    // follow (Trigger::needs).
    const std::int32_t limit = budget == kNoBudget ? kNoCompletion - 1 : budget - 1;
    const auto m = static_cast<std::size_t>(matched_);
    if (trigger_->max_need[m] <= limit) return false;
    std::fill(words.begin(), words.end(), ~std::uint64_t{0});
    for (const auto& [id, need] : trigger_->needs[m])
      if (need > limit)
        words[static_cast<std::size_t>(id) >> 6] &= ~(std::uint64_t{1} << (id & 63));
    return true;
  }
  if (finished() || dead()) {
    std::fill(words.begin(), words.end(), 0);
  } else {
    impl.mask(state_, words, budget);
  }
  if (complete()) {
    for (std::int32_t id : impl.vocab->eog)
      if (id >= 0 && id < impl.vocab->n_vocab)
        words[static_cast<std::size_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
  }
  return true;
}

bool ConstraintMatcher::accept_bytes(std::string_view bytes) {
  if (!active_) {
    const std::int32_t r = trigger_->advance(matched_, bytes);
    if (r >= 0) {
      matched_ = r;
      return true;
    }
    // The trigger is complete: the bytes after it start the value, which must accept them.
    ConstraintMatcher value(c_);
    if (!value.accept_bytes(bytes.substr(static_cast<std::size_t>(-1 - r)))) return false;
    state_ = std::move(value.state_);
    active_ = true;
    return true;
  }
  const Stacks st{c_->impl().grammar};
  std::vector<std::uint32_t> cur = state_, next, tmp;
  for (char ch : bytes) {
    st.advance(cur.data(), cur.size(), static_cast<unsigned char>(ch), next, tmp);
    if (next.empty()) return false;
    cur.swap(next);
  }
  state_.swap(cur);
  return true;
}

bool ConstraintMatcher::accept(std::int32_t token) {
  const auto& v = *c_->impl().vocab;
  if (token < 0 || token >= v.n_vocab) return false;
  if (std::find(v.eog.begin(), v.eog.end(), token) != v.eog.end()) return complete();
  const std::string& p = v.pieces[static_cast<std::size_t>(token)];
  if (!active_) {  // free text: control tokens too
    if (p.empty()) {
      auto it = v.control_pieces.find(token);
      return accept_bytes(it == v.control_pieces.end() ? std::string_view() : it->second);
    }
    return accept_bytes(p);
  }
  if (p.empty()) return false;
  return accept_bytes(p);
}

}  // namespace weir::inference
