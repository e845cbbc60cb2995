// Adapters from the text layer (IncrementalDetokenizer, StopStringMatcher) to the engine's text
// hooks, so the engine stays independent of how text is produced.
#pragma once

#include "runtime/engine/text_hooks.h"
#include "runtime/text/tokenizer.h"

namespace kiln::rt {

class TokenizerTextHooks final : public Detokenizer, public StopStringFilterFactory {
public:
  explicit TokenizerTextHooks(const Tokenizer &tokenizer) : tokenizer_(tokenizer) {}

  std::unique_ptr<TextStream> openStream(std::span<const int32_t> promptIds) override;
  Result<std::unique_ptr<StopStringFilter>> create(const std::vector<std::string> &stops) override;

private:
  const Tokenizer &tokenizer_;
};

} // namespace kiln::rt
