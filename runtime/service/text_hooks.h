// Adapters from the text layer (IncrementalDetokenizer, StopStringMatcher, token bytes) to the
// engine's text hooks and structured-output vocabulary, so the engine stays independent of how
// text is produced.
#pragma once

#include "runtime/engine/text_hooks.h"
#include "runtime/structured/grammar_matcher.h"
#include "runtime/text/tokenizer.h"

#include <memory>

namespace kiln::rt {

class TokenizerTextHooks final : public Detokenizer, public StopStringFilterFactory {
public:
  explicit TokenizerTextHooks(const Tokenizer &tokenizer) : tokenizer_(tokenizer) {}

  std::unique_ptr<TextStream> openStream(std::span<const int32_t> promptIds,
                                         bool skipSpecialTokens) override;
  Result<std::unique_ptr<StopStringFilter>> create(const std::vector<std::string> &stops) override;

private:
  const Tokenizer &tokenizer_;
};

// Every token's bytes (Tokenizer::tokenBytes) in a trie: EngineConfig::vocabulary.
std::shared_ptr<const structured::TokenTrie> tokenVocabulary(const Tokenizer &tokenizer);

} // namespace kiln::rt
