#include "runtime/structured/grammar_automaton.h"

namespace kiln::structured {

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const Grammar> grammar,
                                   std::shared_ptr<const TokenTrie> vocab)
    : matcher_(std::move(grammar)), vocab_(std::move(vocab)) {}

int32_t GrammarAutomaton::intern(std::vector<GrammarStack> stacks) {
  if (auto it = ids_.find(stacks); it != ids_.end())
    return it->second;
  const auto id = static_cast<int32_t>(states_.size());
  ids_.emplace(stacks, id);
  states_.push_back(std::move(stacks));
  std::array<int32_t, 256> unknown;
  unknown.fill(kUnknown);
  transitions_.push_back(unknown);
  masks_.emplace_back();
  return id;
}

int32_t GrammarAutomaton::next(int32_t state, uint8_t byte) {
  int32_t &to = transitions_[state][byte];
  if (to != kUnknown)
    return to;
  std::vector<GrammarStack> after = matcher_.advance(states_[state], byte);
  // intern() may grow transitions_ and so move `to`: store through a fresh reference.
  const int32_t id = after.empty() ? kDead : intern(std::move(after));
  transitions_[state][byte] = id;
  return id;
}

// One forward pass over the trie's preorder entries (TokenTrie::entries), skipping the subtree
// of every byte that leads nowhere from its parent's state.
void GrammarAutomaton::markTokens(int32_t state, std::vector<uint8_t> &mask) {
  const std::vector<TokenTrie::Entry> &entries = vocab_->entries();
  depthStates_.resize(vocab_->maxDepth() + 1);
  depthStates_[0] = state;
  for (uint32_t i = 1; i < vocab_->numNodes();) {
    const TokenTrie::Entry &e = entries[i];
    const int32_t to = next(depthStates_[e.depth - 1], e.byte);
    if (to == kDead) {
      i = e.subtreeEnd;
      continue;
    }
    for (int32_t token : vocab_->tokensAt(i))
      mask[token] = 1;
    depthStates_[e.depth] = to;
    ++i;
  }
}

const std::vector<uint8_t> &
GrammarAutomaton::allowedTokens(const std::vector<GrammarStack> &stacks) {
  if (states_.size() > kMaxStates) { // forget, keep memory bounded
    states_.clear();
    ids_.clear();
    transitions_.clear();
    masks_.clear();
    numMasks_ = 0;
  }
  const int32_t state = intern(stacks);
  if (!masks_[state].empty())
    return masks_[state];
  std::vector<uint8_t> mask(vocab_->vocabSize(), 0);
  markTokens(state, mask);
  if (numMasks_ >= kMaxMasks) {
    scratch_ = std::move(mask);
    return scratch_;
  }
  ++numMasks_;
  masks_[state] = std::move(mask); // after the walk: it may have interned states
  return masks_[state];
}

} // namespace kiln::structured
