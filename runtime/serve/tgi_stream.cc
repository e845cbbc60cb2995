#include "runtime/serve/tgi_stream.h"

#include "runtime/serve/json_text.h"
#include "runtime/serve/tgi_token_text.h"

#include <optional>

namespace kiln::rt::serve {
namespace {

class TgiStream : public StreamFormatter {
public:
  TgiStream(TgiContext context, TgiStreamStyle style) : c_(std::move(context)), style_(style) {}

  std::string output(size_t, const RequestOutput &out, const GenerationResult &soFar) override {
    if (out.finishReason == FinishReason::kError) {
      ApiError error = errorFromStatus(out.error.isOk() ? internalError("generation failed")
                                                        : out.error);
      return frame(tgiErrorBody(error));
    }
    const SampleResult &sample = soFar.samples[out.index];
    if (!texts_)
      texts_.emplace(*c_.model, soFar.promptIds);
    std::string events;
    for (size_t i = 0; i < out.tokenIds.size(); ++i) {
      bool last = i + 1 == out.tokenIds.size();
      const TokenLogprobs *lp = i < out.logprobs.size() ? &out.logprobs[i] : nullptr;
      const SampleResult *finished =
          last && out.finishReason != FinishReason::kNone ? &sample : nullptr;
      events += frame(dumpJson(event(out.tokenIds[i], last ? out.text : "", lp, finished)));
    }
    return events;
  }

  std::string end(const std::vector<GenerationResult> &) override { return {}; }

private:
  // LMI reports the engine's text, which usually comes one token per output; when the engine
  // releases several, it goes with the last of them (it cannot be split back into tokens). TGI
  // reports each token's own text, as details.tokens does (tgi_token_text.h), stop tokens and
  // stop sequences included.
  nlohmann::json event(int32_t id, const std::string &engineText, const TokenLogprobs *lp,
                       const SampleResult *finished) {
    if (style_ == TgiStreamStyle::kLmiJsonLines)
      return lmiStreamLine(c_, id, engineText, lp, finished);
    std::string text = texts_->push(id, /*last=*/finished != nullptr);
    nlohmann::json top = lp && c_.request->topLogprobs > 0 ? tgiTopTokensJson(c_, *lp)
                                                           : nlohmann::json(nullptr);
    return tgiStreamEvent(c_, ++index_, tgiTokenJson(c_, id, text, lp), std::move(top), finished,
                          texts_->joined());
  }

  std::string frame(const std::string &payload) const {
    if (style_ == TgiStreamStyle::kLmiJsonLines)
      return frameEvent(Framing::kJsonLines, payload);
    return "data:" + payload + "\n\n"; // TGI writes no space after the colon
  }

  TgiContext c_;
  TgiStreamStyle style_;
  std::optional<TgiTokenTexts> texts_; // made from the prompt ids on the first output
  int64_t index_ = 0;
};

} // namespace

std::unique_ptr<StreamFormatter> makeTgiStream(TgiContext context, TgiStreamStyle style) {
  return std::make_unique<TgiStream>(std::move(context), style);
}

} // namespace kiln::rt::serve
