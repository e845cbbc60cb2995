#include "runtime/serve/serving_model_adapter.h"

namespace kiln::rt::serve {

ServingModelAdapter::ServingModelAdapter(std::unique_ptr<ServingModel> model,
                                         std::string servedName, ToolCallFormat toolCallFormat)
    : model_(std::move(model)),
      name_(servedName.empty() ? model_->modelName() : std::move(servedName)),
      eosIds_(model_->eosTokenIds()), toolCallFormat_(toolCallFormat) {}

Result<std::vector<int32_t>> ServingModelAdapter::encodePrompt(std::string_view text) const {
  return model_->encodePrompt(text);
}

Result<std::vector<int32_t>> ServingModelAdapter::encodePrompt(std::string_view text,
                                                               const Truncation &truncation) const {
  return model_->encodePrompt(text, truncation);
}

Result<PairEncoding> ServingModelAdapter::encodePromptPair(std::string_view text,
                                                           std::string_view textPair) const {
  return model_->encodePromptPair(text, textPair);
}

Result<std::vector<int32_t>>
ServingModelAdapter::encodeChat(const nlohmann::ordered_json &messages, bool addGenerationPrompt,
                                const nlohmann::ordered_json &extra) const {
  return model_->encodeChat(messages, addGenerationPrompt, extra);
}

std::string ServingModelAdapter::tokenText(int32_t id) const {
  const Tokenizer *tokenizer = model_->tokenizer();
  if (!tokenizer)
    return "";
  int32_t ids[1] = {id};
  return tokenizer->decode(ids, /*skipSpecialTokens=*/false);
}

std::string ServingModelAdapter::decode(std::span<const int32_t> ids) const {
  const Tokenizer *tokenizer = model_->tokenizer();
  return tokenizer ? tokenizer->decode(ids, /*skipSpecialTokens=*/false) : "";
}

bool ServingModelAdapter::isSpecialToken(int32_t id) const {
  const Tokenizer *tokenizer = model_->tokenizer();
  return tokenizer && tokenizer->isSpecialToken(id);
}

} // namespace kiln::rt::serve
