// A lazily built DFA over a grammar's matcher states, so token masks cost a table walk instead
// of stack copies: each distinct set of stacks (GrammarMatcher) gets a state id the first time it
// is reached, each (state, byte) transition is computed once by GrammarMatcher::advance and kept,
// and each state's token mask is computed once (a walk of the vocabulary trie along the kept
// transitions: one forward pass over the trie's preorder entries, TokenTrie::entries) and kept.
// Inside a JSON string every step is the same state, so its mask is a lookup; measured on
// Qwen2.5's 151,665 tokens, the first mask of a string state took 400 ms walking stacks, and
// takes 4 ms on the flat trie (docs/benchmarks.md).
//
// Shared by every request with the same grammar (runtime/engine/engine_core.cc keeps one per
// grammar); not thread-safe: only the engine thread uses it. Past kMaxStates it forgets every
// state and starts again (the matcher's stacks stay the truth), and it keeps at most kMaxMasks
// masks (later states' masks are walked each time), so memory stays bounded whatever the grammar.
#pragma once

#include "runtime/structured/grammar_matcher.h"

#include <array>
#include <map>
#include <memory>
#include <vector>

namespace kiln::structured {

class GrammarAutomaton {
public:
  static constexpr size_t kMaxStates = 4096; // 1 KiB of transitions each
  static constexpr size_t kMaxMasks = 128;   // a vocabulary's bytes each (150 KB for Qwen2.5)

  GrammarAutomaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab);

  // 1 for each token whose bytes the grammar accepts from `stacks` (a matcher's state).
  const std::vector<uint8_t> &allowedTokens(const std::vector<GrammarStack> &stacks);
  size_t numStates() const { return states_.size(); }

private:
  static constexpr int32_t kDead = -1, kUnknown = -2;
  int32_t intern(std::vector<GrammarStack> stacks);
  int32_t next(int32_t state, uint8_t byte);
  void markTokens(int32_t state, std::vector<uint8_t> &mask);

  GrammarMatcher matcher_; // its advance() computes transitions
  std::shared_ptr<const TokenTrie> vocab_;
  std::vector<std::vector<GrammarStack>> states_;
  std::map<std::vector<GrammarStack>, int32_t> ids_;
  std::vector<std::array<int32_t, 256>> transitions_;
  std::vector<std::vector<uint8_t>> masks_; // empty until computed
  size_t numMasks_ = 0;
  std::vector<uint8_t> scratch_;     // a mask past kMaxMasks
  std::vector<int32_t> depthStates_; // markTokens' state at each depth of the trie
};

} // namespace kiln::structured
