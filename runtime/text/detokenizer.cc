#include "runtime/text/detokenizer.h"

namespace kiln::rt {

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tokenizer, bool skipSpecialTokens)
    : tokenizer_(std::move(tokenizer)), stream_(tokenizer_.newDecodeStream()),
      skipSpecial_(skipSpecialTokens) {}

void IncrementalDetokenizer::prime(std::span<const int32_t> ids) {
  for (int32_t id : ids)
    (void)push(id);
}

std::string IncrementalDetokenizer::push(int32_t id) {
  std::string out;
  bool known = false;
  std::string_view token = tokenizer_.tokenString(id, known);
  if (!known || (skipSpecial_ && tokenizer_.isSpecialToken(id)))
    return out;
  stream_.push(token, out);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out;
  stream_.finish(out);
  return out;
}

} // namespace kiln::rt
