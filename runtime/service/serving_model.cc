#include "runtime/service/serving_model.h"

#include "runtime/base/file.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/multi_rank_runner.h"
#include "runtime/hal/device.h"
#include "runtime/service/text_hooks.h"

#include <filesystem>
#include <sstream>

namespace kiln::rt {
namespace {

constexpr size_t kDefaultCpuKvCacheBytes = size_t(256) << 20;

std::string modelNameOf(const std::string &dir) {
  std::filesystem::path path(dir);
  std::string name = path.filename().string();
  if (name.empty()) // "model.kiln/"
    name = path.parent_path().filename().string();
  const std::string kSuffix = ".kiln";
  if (name.size() > kSuffix.size() && name.ends_with(kSuffix))
    name.resize(name.size() - kSuffix.size());
  return name.empty() ? "model" : name;
}

// The artifact's chat template: --chat-template, else the plan's, else tokenizer_config.json's.
Result<std::optional<ChatTemplate>> loadChatTemplate(const Artifact &artifact,
                                                     const std::string &override) {
  std::string source = override;
  if (source.empty() && artifact.plan().model()->chat_template())
    source = artifact.plan().model()->chat_template()->str();
  if (source.empty() && fileExists(artifact.path("tokenizer_config.json"))) {
    KILN_ASSIGN_OR_RETURN(std::string config, readFile(artifact.path("tokenizer_config.json")));
    Result<std::string> fromConfig = chatTemplateFromTokenizerConfig(config);
    if (fromConfig.isOk())
      source = *fromConfig;
  }
  if (source.empty())
    return std::optional<ChatTemplate>();
  Result<ChatTemplate> parsed = ChatTemplate::parse(source);
  if (!parsed.isOk())
    return parsed.status().withContext("chat template");
  return std::optional<ChatTemplate>(std::move(*parsed));
}

Result<ChatSpecialTokens> loadSpecialTokens(const Artifact &artifact) {
  if (!fileExists(artifact.path("tokenizer_config.json")))
    return ChatSpecialTokens{};
  KILN_ASSIGN_OR_RETURN(std::string config, readFile(artifact.path("tokenizer_config.json")));
  return specialTokensFromTokenizerConfig(config);
}

std::string formatFraction(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// Places the artifact's ranks (--device, --devices) and builds its runner: one executor for
// tp 1, a MultiRankRunner otherwise.
Status createRunner(const Artifact &artifact, const ServingOptions &options,
                    ExecutorOptions executorOptions, std::unique_ptr<Device> &device,
                    std::unique_ptr<ModelRunner> &runner) {
  RankPlacementRequest request;
  request.artifactDir = artifact.directory();
  request.tp = static_cast<int>(artifact.plan().tp());
  request.device = options.device;
  request.devices = options.devices;
  KILN_ASSIGN_OR_RETURN(DeviceName name, parseDeviceName(options.device));
  if (name.kind == DeviceKind::kCuda)
    request.visible = countCudaDevices();
  KILN_ASSIGN_OR_RETURN(RankPlacement placement, placeRanks(request));
  if (request.tp == 1) {
    KILN_ASSIGN_OR_RETURN(device, createDevice(placement.deviceName(0)));
    KILN_ASSIGN_OR_RETURN(runner, Executor::create(artifact, *device, executorOptions));
    return okStatus();
  }
  // One device and executor per rank; on cpu the ranks share the host's memory, so the default
  // cache is split between them (same block count as tp 1: each holds 1/tp of a block).
  if (!options.kvCacheBytes && placement.kind == DeviceKind::kCpu)
    executorOptions.kvCacheBytes /= request.tp;
  MultiRankOptions multiRank;
  multiRank.device = placement.kind == DeviceKind::kCpu ? "cpu" : "cuda";
  multiRank.devices = placement.ordinals;
  multiRank.executor = executorOptions;
  multiRank.log = options.log;
  KILN_ASSIGN_OR_RETURN(runner, MultiRankRunner::create(artifact, multiRank));
  return okStatus();
}

} // namespace

Result<ExecutorOptions> kvCacheExecutorOptions(const ServingOptions &options, DeviceKind kind) {
  const double fraction = options.gpuMemoryUtilization;
  if (!(fraction >= 0 && fraction <= 1)) // also NaN
    return outOfRange("--gpu-memory-utilization " + formatFraction(fraction) +
                      " is outside (0, 1]");
  ExecutorOptions executor;
  if (kind == DeviceKind::kCpu) {
    if (fraction > 0)
      return invalidArgument("--gpu-memory-utilization applies to CUDA devices; on cpu the KV "
                             "cache size is --kv-cache-mb");
    executor.kvCacheBytes = options.kvCacheBytes ? options.kvCacheBytes : kDefaultCpuKvCacheBytes;
    return executor;
  }
  if (fraction > 0 && options.kvCacheBytes)
    return invalidArgument("--kv-cache-mb and --gpu-memory-utilization both size the KV cache: "
                           "give one of them");
  if (options.kvCacheBytes)
    executor.kvCacheBytes = options.kvCacheBytes;
  else
    executor.memoryUtilization = fraction > 0 ? fraction : kDefaultGpuMemoryUtilization;
  return executor;
}

struct ServingModel::TextHooks {
  explicit TextHooks(const Tokenizer &tokenizer) : hooks(tokenizer) {}
  TokenizerTextHooks hooks;
};

ServingModel::~ServingModel() {
  shutdown();
}

Result<std::unique_ptr<ServingModel>> ServingModel::open(const std::string &artifactDir,
                                                         const ServingOptions &options) {
  std::unique_ptr<ServingModel> model(new ServingModel());
  model->modelName_ = modelNameOf(artifactDir);
  // Flag errors that need no artifact come before the (possibly long) weight verification.
  KILN_ASSIGN_OR_RETURN(DeviceName deviceName, parseDeviceName(options.device));
  KILN_ASSIGN_OR_RETURN(ExecutorOptions executorOptions,
                        kvCacheExecutorOptions(options, deviceName.kind));
  executorOptions.log = options.log;
  LoadOptions loadOptions;
  loadOptions.verifyWeights = options.verifyWeights;
  KILN_ASSIGN_OR_RETURN(model->artifact_, Artifact::load(artifactDir, loadOptions));
  KILN_RETURN_IF_ERROR(
      createRunner(*model->artifact_, options, executorOptions, model->device_, model->executor_));

  EngineConfig config;
  config.runner = model->executor_.get();
  config.eosTokenIds = model->eosTokenIds();
  if (fileExists(model->artifact_->path("tokenizer.json"))) {
    Result<Tokenizer> tokenizer = Tokenizer::fromDirectory(model->artifact_->directory());
    if (!tokenizer.isOk())
      return tokenizer.status().withContext("loading the artifact's tokenizer");
    model->tokenizer_ = std::move(*tokenizer);
    model->textHooks_ = std::make_unique<TextHooks>(*model->tokenizer_);
    config.detokenizer = &model->textHooks_->hooks;
    config.stopStrings = &model->textHooks_->hooks;
    config.vocabulary = tokenVocabulary(*model->tokenizer_);
  }
  KILN_ASSIGN_OR_RETURN(model->chatTemplate_,
                        loadChatTemplate(*model->artifact_, options.chatTemplate));
  KILN_ASSIGN_OR_RETURN(model->specialTokens_, loadSpecialTokens(*model->artifact_));
  config.maxBatch = options.maxBatch;
  config.maxTokensPerStep = options.maxTokensPerStep;
  config.maxSeqLen = options.maxSeqLen;
  config.enablePrefixCaching = options.enablePrefixCaching;
  config.seed = options.seed;
  KILN_ASSIGN_OR_RETURN(model->engine_, Engine::create(config));
  KILN_RETURN_IF_ERROR(model->startEmbeddings());
  return model;
}

// An encoder artifact embeds (its engine refuses generation requests); pooling as compiled. A
// generating artifact embeds through its engine where its plan returns final hidden states.
Status ServingModel::startEmbeddings() {
  if (!executor_->limits().embeds) {
    if (executor_->limits().hiddenWidth > 0)
      engineEmbeddings_ =
          std::make_unique<EngineEmbeddings>(*engine_, executor_->limits().hiddenWidth);
    return okStatus();
  }
  const schema::ModelInfo &info = *artifact_->plan().model();
  KILN_ASSIGN_OR_RETURN(PoolingMode pooling,
                        parsePoolingMode(info.pooling() ? info.pooling()->str() : ""));
  KILN_ASSIGN_OR_RETURN(embeddings_, EmbeddingService::start({executor_.get(), pooling},
                                                             info.normalize_embeddings()));
  return okStatus();
}

Embeddings *ServingModel::embeddings() {
  if (embeddings_)
    return embeddings_.get();
  return engineEmbeddings_.get();
}

std::vector<int32_t> ServingModel::eosTokenIds() const {
  std::vector<int32_t> ids;
  if (const auto *eos = artifact_->plan().model()->eos_token_ids())
    ids.assign(eos->begin(), eos->end());
  return ids;
}

Result<std::vector<int32_t>> ServingModel::encodePrompt(std::string_view text) const {
  if (!tokenizer_)
    return invalidArgument("the artifact has no tokenizer.json: give the prompt as token ids");
  return tokenizer_->encode(text, /*addSpecialTokens=*/true);
}

Result<std::vector<int32_t>> ServingModel::encodePrompt(std::string_view text,
                                                        const Truncation &truncation) const {
  if (!tokenizer_)
    return invalidArgument("the artifact has no tokenizer.json: give the prompt as token ids");
  return tokenizer_->encode(text, /*addSpecialTokens=*/true, truncation);
}

Result<PairEncoding> ServingModel::encodePromptPair(std::string_view text,
                                                    std::string_view textPair) const {
  if (!tokenizer_)
    return invalidArgument("the artifact has no tokenizer.json: give the input as token ids");
  return tokenizer_->encodePair(text, textPair, /*addSpecialTokens=*/true);
}

Result<std::string> ServingModel::renderChat(const nlohmann::ordered_json &messages,
                                             bool addGenerationPrompt,
                                             const nlohmann::ordered_json &extra) const {
  if (!chatTemplate_)
    return invalidArgument("this model has no chat template (the artifact's tokenizer_config.json "
                           "has no chat_template); start kiln serve with --chat-template FILE");
  return chatTemplate_->renderChat(messages, addGenerationPrompt, specialTokens_,
                                   extra.is_null() ? nlohmann::ordered_json::object() : extra);
}

Result<std::vector<int32_t>> ServingModel::encodeChat(const nlohmann::ordered_json &messages,
                                                      bool addGenerationPrompt,
                                                      const nlohmann::ordered_json &extra) const {
  if (!tokenizer_)
    return invalidArgument("the artifact has no tokenizer.json: chat needs a tokenizer");
  KILN_ASSIGN_OR_RETURN(std::string prompt, renderChat(messages, addGenerationPrompt, extra));
  // The template already wrote BOS and friends, as transformers' apply_chat_template assumes.
  return tokenizer_->encode(prompt, /*addSpecialTokens=*/false);
}

void ServingModel::shutdown() {
  if (engine_)
    engine_->shutdown();
  if (embeddings_)
    embeddings_->shutdown();
}

} // namespace kiln::rt
