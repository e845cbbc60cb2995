// One sample's constraint while it generates: the grammar's matcher over the text so far, the
// allowed-token mask for the next step, and the end of sequence where the grammar may end. The
// engine (runtime/engine/engine_core.cc) keeps one per constrained sample and calls it around
// sampling; the state depends only on the sample's own tokens, so preemption (which recomputes
// the KV cache from those tokens) leaves it valid.
#pragma once

#include "runtime/structured/grammar_automaton.h"
#include "runtime/structured/grammar_matcher.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kiln::structured {

class OutputConstraint {
public:
  // `automaton` caches the masks of `grammar` over `vocab` (shared by the grammar's requests).
  OutputConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                   std::shared_ptr<GrammarAutomaton> automaton);

  // 1 for each token that may come next: the tokens whose bytes the grammar accepts here, but
  // the stop ids (end of sequence) only where the text is a complete match, whatever their bytes.
  std::vector<uint8_t> allowedMask(std::span<const int32_t> stopIds) const;
  // Advances past a sampled token that is not a stop id; false (state unchanged) when the
  // grammar does not allow its bytes.
  bool accept(int32_t tokenId);
  // Nothing but the end of sequence can follow: the sample is complete.
  bool mustEnd() const { return matcher_.mustEnd(); }

private:
  GrammarMatcher matcher_;
  std::shared_ptr<const TokenTrie> vocab_;
  std::shared_ptr<GrammarAutomaton> automaton_;
};

} // namespace kiln::structured
