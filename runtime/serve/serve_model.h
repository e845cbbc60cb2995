// What the HTTP layer needs from a served model: its engine plus tokenization and chat rendering.
// The real one adapts ServingModel (serving_model_adapter.h); tests use a fake over FakeRunner.
// Every const method is called from many HTTP threads at once and must be thread-safe.
#pragma once

#include "runtime/base/status.h"
#include "runtime/embed/embedding_service.h"
#include "runtime/engine/engine.h"
#include "runtime/serve/tool_call_parser.h"
#include "runtime/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt::serve {

class ServeModel {
public:
  virtual ~ServeModel() = default;

  virtual Engine &engine() = 0;
  // The name clients pass as "model".
  virtual const std::string &name() const = 0;
  // The ids that end a sample as "eos_token" (TGI's finish reason), besides request stop ids.
  virtual std::vector<int32_t> eosTokenIds() const = 0;

  // Text -> prompt ids with the model's special-token rules (BOS as the model expects).
  virtual Result<std::vector<int32_t>> encodePrompt(std::string_view text) const = 0;
  // The same cut as HF's truncation does (runtime/text/tokenizer.h Truncation).
  virtual Result<std::vector<int32_t>> encodePrompt(std::string_view text,
                                                    const Truncation &truncation) const = 0;
  // Two texts as the tokenizer pairs them (HF `tokenizer(text, text_pair)`: BERT's [CLS] a [SEP] b
  // [SEP], b's tokens type 1), with each token's type.
  virtual Result<PairEncoding> encodePromptPair(std::string_view text,
                                                std::string_view textPair) const {
    (void)text, (void)textPair;
    return unimplemented("this model encodes no text pairs");
  }
  // False when the model has no chat template: chat requests are then refused with a 400.
  virtual bool hasChatTemplate() const = 0;
  // Renders the chat template and encodes it. `extra` holds further template variables.
  virtual Result<std::vector<int32_t>> encodeChat(const nlohmann::ordered_json &messages,
                                                  bool addGenerationPrompt,
                                                  const nlohmann::ordered_json &extra) const = 0;
  // One token as text (for logprobs); may hold half of a UTF-8 character.
  virtual std::string tokenText(int32_t id) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual bool isSpecialToken(int32_t id) const = 0;
  // The format tool_choice "auto" reads calls in (runtime/serve/tool_call_parser.h):
  // --tool-call-parser, else the chat template's.
  virtual ToolCallFormat toolCallFormat() const { return ToolCallFormat::kNone; }
  // The model's embeddings (ServingModel::embeddings): an encoder's, or a generating model's
  // through its engine; null when it has none.
  virtual Embeddings *embeddings() { return nullptr; }
  // Whether the model generates (an embedding model does not: its engine refuses requests).
  virtual bool generates() { return embeddings() == nullptr; }
};

} // namespace kiln::rt::serve
