#include "runtime/serve/tgi_token_text.h"

#include <algorithm>

namespace kiln::rt::serve {
namespace {

// How many prompt tokens the first window holds (TGI starts its window 5 tokens back).
constexpr size_t kContextTokens = 5;

} // namespace

TgiTokenTexts::TgiTokenTexts(const ServeModel &model, std::span<const int32_t> promptIds)
    : model_(&model) {
  size_t keep = std::min(promptIds.size(), kContextTokens);
  ids_.assign(promptIds.end() - static_cast<std::ptrdiff_t>(keep), promptIds.end());
  prefixOffset_ = 0;
  readOffset_ = ids_.size();
}

std::string TgiTokenTexts::push(int32_t id, bool last) {
  ids_.push_back(id);
  std::string added;
  if (model_->isSpecialToken(id)) {
    added = model_->tokenText(id);
  } else {
    std::span<const int32_t> all(ids_);
    std::string before = model_->decode(all.subspan(prefixOffset_, readOffset_ - prefixOffset_));
    std::string now = model_->decode(all.subspan(prefixOffset_));
    // A window whose text is not longer yet (or ends mid-character) waits for the next token.
    if (now.size() <= before.size() || (!last && endsInsideCharacter(now)))
      return "";
    added = now.substr(before.size());
    joined_ += added;
  }
  prefixOffset_ = readOffset_;
  readOffset_ = ids_.size();
  return added;
}

bool endsInsideCharacter(const std::string &text) {
  if (text.ends_with("\xEF\xBF\xBD"))
    return true;
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80)
      continue; // a continuation byte: its lead byte is further back
    size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return length > back;
  }
  return false;
}

} // namespace kiln::rt::serve
