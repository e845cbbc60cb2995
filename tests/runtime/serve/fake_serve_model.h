// A ServeModel over the engine with a FakeRunner: byte-level "tokenizer" (id = byte value, eos =
// 256), a detokenizer that maps ids back to bytes, and a chat "template" that joins contents (and
// prints the template variables).
// Deterministic, model-free: what the server tests run against.
#pragma once

#include "runtime/engine/engine.h"
#include "runtime/engine/fake_runner.h"
#include "runtime/serve/serve_model.h"
#include "runtime/structured/grammar_matcher.h"

#include <memory>
#include <stdexcept>

namespace kiln::rt::serve::testing {

inline constexpr int32_t kEos = 256;
inline constexpr int32_t kVocab = 260;

class ByteStream : public TextStream {
public:
  std::string append(int32_t id) override {
    return id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
  }
  std::string flush() override { return {}; }
};

class ByteDetokenizer : public Detokenizer {
public:
  std::unique_ptr<TextStream> openStream(std::span<const int32_t>, bool) override {
    return std::make_unique<ByteStream>();
  }
};

struct FakeModelOptions {
  int32_t maxBatch = 8;
  int32_t maxSeqLen = 128;
  int32_t numKvBlocks = 512;
  float eosBoost = 0.0f;
  bool hasChatTemplate = true;
  ToolCallFormat toolCallFormat = ToolCallFormat::kNone;
};

// Token t < 256 is the byte t; the rest (eos among them) have no bytes.
inline std::shared_ptr<const structured::TokenTrie> byteVocabulary() {
  std::vector<std::string> bytes(kVocab);
  for (int32_t t = 0; t < 256; ++t)
    bytes[t] = std::string(1, static_cast<char>(t));
  return std::make_shared<const structured::TokenTrie>(std::move(bytes));
}

// The prompt text on which the fake's encodePrompt throws: a handler bug as the server sees it.
inline constexpr const char *kThrowingPrompt = "THROW-IN-HANDLER";
inline constexpr const char *kThrownText = "secret internal detail /srv/kiln/model.cc:42";

class FakeServeModel : public ServeModel {
public:
  explicit FakeServeModel(FakeModelOptions options = {})
      : hasChatTemplate_(options.hasChatTemplate), toolCallFormat_(options.toolCallFormat) {
    FakeRunnerConfig rc;
    rc.limits.maxBatch = options.maxBatch;
    rc.limits.maxTokensPerStep = 512;
    rc.limits.maxSeqLen = options.maxSeqLen;
    rc.limits.blockSize = 4;
    rc.limits.maxBlocksPerSeq = (options.maxSeqLen + 3) / 4;
    rc.limits.numKvBlocks = options.numKvBlocks;
    rc.limits.vocabSize = kVocab;
    rc.seed = 7;
    rc.eosTokenIds = {kEos};
    rc.eosLogitBoost = options.eosBoost;
    runner_ = std::make_unique<FakeRunner>(rc);
    EngineConfig ec;
    ec.runner = runner_.get();
    ec.eosTokenIds = {kEos};
    ec.detokenizer = &detokenizer_;
    ec.vocabulary = byteVocabulary();
    ec.seed = 3;
    engine_ = std::move(Engine::create(ec)).value();
  }
  ~FakeServeModel() override { engine_->shutdown(); }

  Engine &engine() override { return *engine_; }
  const std::string &name() const override { return name_; }
  std::vector<int32_t> eosTokenIds() const override { return {kEos}; }
  Result<std::vector<int32_t>> encodePrompt(std::string_view text) const override {
    if (text == kThrowingPrompt)
      throw std::runtime_error(kThrownText);
    std::vector<int32_t> ids;
    for (unsigned char c : text)
      ids.push_back(c);
    return ids;
  }
  // One id a byte, no special tokens: the first or last maxLength bytes.
  Result<std::vector<int32_t>> encodePrompt(std::string_view text,
                                            const Truncation &truncation) const override {
    const size_t keep = std::min(text.size(), truncation.maxLength);
    return encodePrompt(truncation.side == Truncation::Side::kRight
                            ? text.substr(0, keep)
                            : text.substr(text.size() - keep));
  }
  bool hasChatTemplate() const override { return hasChatTemplate_; }
  // The contents, one a line, then the template variables (tools, chat_template_kwargs) as JSON
  // when there are any, as tool templates print them.
  Result<std::vector<int32_t>> encodeChat(const nlohmann::ordered_json &messages, bool,
                                          const nlohmann::ordered_json &extra) const override {
    std::string text;
    for (const auto &m : messages)
      if (m.contains("content") && m["content"].is_string())
        text += m["content"].get<std::string>() + "\n";
    if (extra.is_object() && !extra.empty())
      text += extra.dump();
    return encodePrompt(text);
  }
  std::string tokenText(int32_t id) const override {
    return id < 256 ? std::string(1, static_cast<char>(id)) : "</s>";
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids)
      text += id < 256 ? std::string(1, static_cast<char>(id)) : "";
    return text;
  }
  bool isSpecialToken(int32_t id) const override { return id >= 256; }
  ToolCallFormat toolCallFormat() const override { return toolCallFormat_; }
  FakeRunner &runner() { return *runner_; }

private:
  bool hasChatTemplate_;
  ToolCallFormat toolCallFormat_;
  std::string name_ = "fake-model";
  ByteDetokenizer detokenizer_;
  std::unique_ptr<FakeRunner> runner_;
  std::unique_ptr<Engine> engine_;
};

} // namespace kiln::rt::serve::testing
