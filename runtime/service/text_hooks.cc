#include "runtime/service/text_hooks.h"

#include "runtime/text/detokenizer.h"
#include "runtime/text/stop_strings.h"

namespace kiln::rt {
namespace {

class DetokenizerStream final : public TextStream {
public:
  DetokenizerStream(const Tokenizer &tokenizer, std::span<const int32_t> promptIds,
                    bool skipSpecialTokens)
      : detokenizer_(tokenizer, skipSpecialTokens) {
    detokenizer_.prime(promptIds);
  }
  std::string append(int32_t tokenId) override { return detokenizer_.push(tokenId); }
  std::string flush() override { return detokenizer_.finish(); }

private:
  IncrementalDetokenizer detokenizer_;
};

class MatcherFilter final : public StopStringFilter {
public:
  explicit MatcherFilter(const std::vector<std::string> &stops) : matcher_(stops) {}
  StopCheck push(std::string_view delta) override {
    StopStringUpdate update = matcher_.push(delta);
    return StopCheck{std::move(update.text), update.matched >= 0};
  }
  std::string flush() override { return matcher_.finish(); }

private:
  StopStringMatcher matcher_;
};

} // namespace

std::unique_ptr<TextStream> TokenizerTextHooks::openStream(std::span<const int32_t> promptIds,
                                                           bool skipSpecialTokens) {
  return std::make_unique<DetokenizerStream>(tokenizer_, promptIds, skipSpecialTokens);
}

Result<std::unique_ptr<StopStringFilter>>
TokenizerTextHooks::create(const std::vector<std::string> &stops) {
  return std::unique_ptr<StopStringFilter>(std::make_unique<MatcherFilter>(stops));
}

std::shared_ptr<const structured::TokenTrie> tokenVocabulary(const Tokenizer &tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocabSize()));
  for (int32_t id = 0; id < tokenizer.vocabSize(); ++id)
    bytes[id] = tokenizer.tokenBytes(id);
  return std::make_shared<const structured::TokenTrie>(std::move(bytes));
}

} // namespace kiln::rt
