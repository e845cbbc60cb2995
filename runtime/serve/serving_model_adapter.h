// ServeModel over the assembled ServingModel (runtime/service): what `kiln serve` serves.
#pragma once

#include "runtime/serve/serve_model.h"
#include "runtime/service/serving_model.h"

#include <memory>
#include <string>

namespace kiln::rt::serve {

class ServingModelAdapter final : public ServeModel {
public:
  // `servedName` replaces the artifact-derived name when not empty (--served-model-name).
  // `toolCallFormat`: how tool_choice "auto" reads calls (serve_command resolves the flag).
  ServingModelAdapter(std::unique_ptr<ServingModel> model, std::string servedName,
                      ToolCallFormat toolCallFormat = ToolCallFormat::kNone);

  Engine &engine() override { return model_->engine(); }
  const std::string &name() const override { return name_; }
  std::vector<int32_t> eosTokenIds() const override { return eosIds_; }
  Result<std::vector<int32_t>> encodePrompt(std::string_view text) const override;
  Result<PairEncoding> encodePromptPair(std::string_view text,
                                        std::string_view textPair) const override;
  Result<std::vector<int32_t>> encodePrompt(std::string_view text,
                                            const Truncation &truncation) const override;
  bool hasChatTemplate() const override { return model_->chatTemplate() != nullptr; }
  Result<std::vector<int32_t>> encodeChat(const nlohmann::ordered_json &messages,
                                          bool addGenerationPrompt,
                                          const nlohmann::ordered_json &extra) const override;
  std::string tokenText(int32_t id) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  bool isSpecialToken(int32_t id) const override;
  ToolCallFormat toolCallFormat() const override { return toolCallFormat_; }
  Embeddings *embeddings() override { return model_->embeddings(); }
  bool generates() override { return model_->generates(); }

  ServingModel &servingModel() { return *model_; }

private:
  std::unique_ptr<ServingModel> model_;
  std::string name_;
  std::vector<int32_t> eosIds_;
  ToolCallFormat toolCallFormat_;
};

} // namespace kiln::rt::serve
