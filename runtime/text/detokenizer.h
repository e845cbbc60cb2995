// Streaming detokenization: feed generated ids one at a time, get text deltas. The concatenated
// deltas (plus finish()) equal Tokenizer::decode of all ids exactly: text is released only once no
// later token can change it (open byte-fallback group, unfinished UTF-8 sequence), and the
// decoder's start-of-text rules (SentencePiece's leading-space strip) apply once, at the start.
#pragma once

#include "runtime/text/tokenizer.h"

#include <cstdint>
#include <span>
#include <string>

namespace kiln::rt {

class IncrementalDetokenizer {
public:
  IncrementalDetokenizer(Tokenizer tokenizer, bool skipSpecialTokens);

  // Feeds context that is not to be returned (the prompt), so the first generated token decodes
  // as it does after the prompt (e.g. keeps its leading space). Call before the first push().
  void prime(std::span<const int32_t> ids);
  // Appends one id and returns the text that became final (often empty for partial characters).
  std::string push(int32_t id);
  // Ends the sequence and returns everything still held back.
  std::string finish();

private:
  Tokenizer tokenizer_;
  Decoder::Stream stream_;
  bool skipSpecial_;
};

} // namespace kiln::rt
