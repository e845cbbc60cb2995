#include "runtime/structured/output_constraint.h"

namespace kiln::structured {

OutputConstraint::OutputConstraint(std::shared_ptr<const Grammar> grammar,
                                   std::shared_ptr<const TokenTrie> vocab,
                                   std::shared_ptr<GrammarAutomaton> automaton)
    : matcher_(std::move(grammar)), vocab_(std::move(vocab)), automaton_(std::move(automaton)) {}

std::vector<uint8_t> OutputConstraint::allowedMask(std::span<const int32_t> stopIds) const {
  std::vector<uint8_t> mask = automaton_->allowedTokens(matcher_.stacks());
  // A stop id ends the sample whatever its bytes (a random fixture's eos may spell "%"): it is
  // allowed exactly where the text is complete.
  const uint8_t end = matcher_.canEnd() ? 1 : 0;
  for (int32_t id : stopIds)
    if (id >= 0 && static_cast<size_t>(id) < mask.size())
      mask[id] = end;
  return mask;
}

bool OutputConstraint::accept(int32_t tokenId) {
  const std::string &bytes = vocab_->bytesOf(tokenId);
  return !bytes.empty() && matcher_.acceptBytes(bytes);
}

} // namespace kiln::structured
