// The text TGI reports for each generated token, in its stream events and in details.tokens
// alike: the token decoded after a few tokens before it (so a SentencePiece leading space or a
// byte-level merge comes out as it does inside the whole text), released once it no longer ends
// inside a UTF-8 character. Special tokens (eos) are reported with their own text ("</s>"), as
// decoding with special tokens kept gives them.
#pragma once

#include "runtime/serve/serve_model.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::rt::serve {

class TgiTokenTexts {
public:
  // `promptIds` give the first generated token its context; only their last few are kept.
  TgiTokenTexts(const ServeModel &model, std::span<const int32_t> promptIds);

  // The text generated token `id` adds: "" while the text ends inside a character (that text
  // then goes with a later token). The sample's `last` token takes whatever is still held back,
  // so the texts join to the whole text even when it ends inside a character.
  std::string push(int32_t id, bool last = false);
  // The texts of the non-special tokens pushed so far, joined: what a TGI client that
  // concatenates the stream's tokens reads.
  const std::string &joined() const { return joined_; }

private:
  const ServeModel *model_;
  std::vector<int32_t> ids_;
  size_t prefixOffset_ = 0; // where the decoding window starts
  size_t readOffset_ = 0;   // tokens before this were already reported
  std::string joined_;
};

// True when `text` ends inside a UTF-8 character (an unfinished sequence, or the U+FFFD a
// tokenizer writes for one).
bool endsInsideCharacter(const std::string &text);

} // namespace kiln::rt::serve
