// A compiled artifact ready to serve: artifact -> device -> executor -> engine, with the
// artifact's tokenizer and chat template wired into the engine's text hooks. What `kiln serve`,
// `kiln generate`, `kiln bench` and `kiln verify` share.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/embed/embedding_service.h"
#include "runtime/engine/engine.h"
#include "runtime/exec/executor.h"
#include "runtime/hal/device.h"
#include "runtime/service/engine_embeddings.h"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::rt {

inline constexpr double kDefaultGpuMemoryUtilization = 0.9;

struct ServingOptions {
  std::string device = "cpu"; // cpu, cuda (GPU 0) or cuda:N
  // --devices: rank r of a tensor-parallel artifact runs on CUDA GPU devices[r]; repeated
  // ordinals share a GPU (the staged communicator then). Empty: GPU r. CUDA only.
  std::vector<int> devices;
  size_t kvCacheBytes = 0; // 0: 256 MiB on cpu; on cuda, the utilization decides
  // --gpu-memory-utilization, in (0, 1]: the KV cache takes what keeps each GPU's used memory at
  // or below this fraction. 0: 0.9 on cuda unless kvCacheBytes is given; an error on cpu.
  double gpuMemoryUtilization = 0;
  int32_t maxBatch = 0;         // 0: the compiled maximum; above it is an error naming the flag
  int32_t maxTokensPerStep = 0; // 0: the compiled maximum
  int32_t maxSeqLen = 0;        // 0: the compiled maximum
  bool enablePrefixCaching = true;
  bool verifyWeights = true;
  std::optional<uint64_t> seed; // for unseeded requests
  std::string chatTemplate;     // Jinja source overriding the artifact's template (--chat-template)
  // Receives one-line notes made while loading (which collectives a tp artifact uses); null:
  // none.
  std::function<void(const std::string &)> log;
};

// The KV cache knobs for a device of `kind`: --kv-cache-mb on cpu (default 256 MiB),
// --gpu-memory-utilization (default 0.9) or --kv-cache-mb on cuda. Errors name the flags.
Result<ExecutorOptions> kvCacheExecutorOptions(const ServingOptions &options, DeviceKind kind);

class ServingModel {
public:
  static Result<std::unique_ptr<ServingModel>> open(const std::string &artifactDir,
                                                    const ServingOptions &options = {});
  ~ServingModel();

  Engine &engine() { return *engine_; }
  // The model's embeddings: an embedding artifact's own service (its engine refuses to
  // generate), or for a generating artifact whose plan returns its final hidden states, its
  // engine's embedding requests; null otherwise.
  Embeddings *embeddings();
  // False for an embedding artifact (its engine refuses generation requests).
  bool generates() const { return !executor_->limits().embeds; }
  const Artifact &artifact() const { return *artifact_; }
  // The served model's name: the artifact directory's base name without ".kiln".
  const std::string &modelName() const { return modelName_; }
  std::vector<int32_t> eosTokenIds() const;

  // Null when the artifact has no tokenizer.json / no chat template.
  const Tokenizer *tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const ChatTemplate *chatTemplate() const { return chatTemplate_ ? &*chatTemplate_ : nullptr; }

  // Text -> ids with the tokenizer's special-token rules (BOS as the model expects).
  Result<std::vector<int32_t>> encodePrompt(std::string_view text) const;
  Result<std::vector<int32_t>> encodePrompt(std::string_view text,
                                            const Truncation &truncation) const;
  // A text pair as the tokenizer pairs them, with each token's type (Tokenizer::encodePair).
  Result<PairEncoding> encodePromptPair(std::string_view text, std::string_view textPair) const;
  // Renders the chat template (as transformers.apply_chat_template) and encodes the result
  // without adding special tokens again (the template writes them).
  Result<std::string> renderChat(const nlohmann::ordered_json &messages, bool addGenerationPrompt,
                                 const nlohmann::ordered_json &extra = {}) const;
  Result<std::vector<int32_t>> encodeChat(const nlohmann::ordered_json &messages,
                                          bool addGenerationPrompt,
                                          const nlohmann::ordered_json &extra = {}) const;

  // Stops the engine: finishes requests in flight, rejects new ones.
  void shutdown();

private:
  struct TextHooks;
  ServingModel() = default;
  Status startEmbeddings();

  std::unique_ptr<Artifact> artifact_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<ModelRunner> executor_;
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chatTemplate_;
  ChatSpecialTokens specialTokens_;
  std::unique_ptr<TextHooks> textHooks_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EmbeddingService> embeddings_;
  std::unique_ptr<EngineEmbeddings> engineEmbeddings_;
  std::string modelName_;
};

} // namespace kiln::rt
