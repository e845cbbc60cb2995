// Plan metadata. The runtime sizes its KV cache and validates requests from these fields, so they
// are copied from the config and the options as given, never re-derived differently.
#include "compiler/emit/plan_header.h"

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/dialect/source_slice.h"
#include "compiler/emit/activation_dtype.h"
#include "compiler/emit/weight_sources.h"
#include "compiler/import/sentence_transformers.h"
#include "runtime/base/file.h"
#include "schema/version.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace kiln::compiler {
namespace {

// The checkpoint's dtype, as seen on the embedding table (every Llama checkpoint has one).
schema::DType sourceDType(mlir::ModuleOp module, const Checkpoint &checkpoint) {
  schema::DType dtype = schema::DType::F32;
  module.walk([&](WeightOp weight) {
    auto spec = mlir::cast<mlir::StringAttr>(weight.getSources()[0]).str();
    std::optional<SourceSlice> source = parseSourceSlice(spec);
    if (!source)
      return mlir::WalkResult::advance();
    if (Result<const TensorInfo *> info = checkpoint.info(source->tensor); info.isOk()) {
      dtype = toSchemaDType((*info)->dtype);
      return mlir::WalkResult::interrupt();
    }
    return mlir::WalkResult::advance();
  });
  return dtype;
}

std::unique_ptr<schema::ModelInfoT> modelInfo(const HfModelConfig &config) {
  auto info = std::make_unique<schema::ModelInfoT>();
  info->family = config.modelType;
  info->architecture = config.architecture;
  info->vocab_size = static_cast<uint32_t>(config.vocabSize);
  info->hidden_size = static_cast<uint32_t>(config.hiddenSize);
  info->intermediate_size = static_cast<uint32_t>(config.intermediateSize);
  info->num_layers = static_cast<uint32_t>(config.numLayers);
  info->num_heads = static_cast<uint32_t>(config.numHeads);
  info->num_kv_heads = static_cast<uint32_t>(config.numKvHeads);
  info->head_dim = static_cast<uint32_t>(config.headDim);
  info->rms_norm_eps = static_cast<float>(config.rmsNormEps);
  info->rope_theta = static_cast<float>(config.ropeTheta);
  info->rope_scaling = config.ropeScaling ? config.ropeScaling->type : "";
  info->tie_word_embeddings = config.tieWordEmbeddings;
  info->max_position_embeddings = static_cast<uint32_t>(config.maxPositionEmbeddings);
  info->bos_token_id = config.bosTokenId;
  info->eos_token_ids.assign(config.eosTokenIds.begin(), config.eosTokenIds.end());
  info->pad_token_id = config.padTokenId;
  info->decoder_start_token_id = config.decoderStartTokenId;
  info->type_vocab_size = static_cast<uint32_t>(std::max<int64_t>(config.typeVocabSize, 0));
  return info;
}

// --kv-dtype (validated by compiler/driver/options.cc).
schema::DType kvCacheDType(const std::string &flag) {
  return flag == "fp16"   ? schema::DType::F16
         : flag == "bf16" ? schema::DType::BF16
         : flag == "fp8"  ? schema::DType::F8E4M3
                          : schema::DType::F32;
}

} // namespace

Result<std::string> readChatTemplate(const std::string &modelDir) {
  // transformers 4.47 and later save the template as its own file, which wins when both exist.
  if (std::string jinja = modelDir + "/chat_template.jinja"; fileExists(jinja))
    return readFile(jinja);
  std::string path = modelDir + "/tokenizer_config.json";
  if (!fileExists(path))
    return std::string();
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(path));
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded())
    return invalidArgument(path + ": not valid JSON");
  if (!json.is_object())
    return invalidArgument(path + ": expected a JSON object");
  auto it = json.find("chat_template");
  if (it != json.end() && it->is_string())
    return it->get<std::string>();
  // A list of named templates: the one named "default", as transformers picks without a name.
  if (it != json.end() && it->is_array())
    for (const nlohmann::json &entry : *it)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
  return std::string();
}

std::vector<std::string> extraModelFiles(const std::string &modelDir) {
  static constexpr const char *kNames[] = {
      "tokenizer.json",         "tokenizer_config.json", "special_tokens_map.json",
      "generation_config.json", "config.json",           "chat_template.jinja"};
  std::vector<std::string> files;
  for (const char *name : kNames)
    if (fileExists(modelDir + "/" + name))
      files.push_back(modelDir + "/" + name);
  return files;
}

// KV cache groups (schema/plan.fbs "KV cache groups"), read off the attention ops: each layer's
// group is its block-table input's kv_group and the group's window is its layers' sliding window.
// One full-attention group is written as none (the layout plans had before groups).
mlir::FailureOr<std::vector<std::unique_ptr<schema::KvCacheGroupT>>>
kvCacheGroups(mlir::ModuleOp module) {
  std::map<int64_t, std::map<int64_t, int64_t>> layersOfGroup; // group -> layer -> window
  module.walk([&](AttentionOp attention) {
    auto table = attention.getBlockTables().getDefiningOp<StepInputOp>();
    layersOfGroup[table ? table.getKvGroup() : 0][attention.getLayer()] =
        attention.getSlidingWindow();
  });
  std::vector<std::unique_ptr<schema::KvCacheGroupT>> groups;
  for (const auto &[group, layers] : layersOfGroup) {
    if (group != static_cast<int64_t>(groups.size()))
      return module.emitError() << "KV cache group " << groups.size() << " has no attention layer";
    auto entry = std::make_unique<schema::KvCacheGroupT>();
    entry->sliding_window = static_cast<uint32_t>(layers.begin()->second);
    for (const auto &[layer, window] : layers) {
      if (window != layers.begin()->second)
        return module.emitError() << "KV cache group " << group << " mixes sliding windows "
                                  << layers.begin()->second << " and " << window;
      entry->layers.push_back(static_cast<uint32_t>(layer));
    }
    groups.push_back(std::move(entry));
  }
  if (groups.size() == 1 && groups[0]->sliding_window == 0)
    groups.clear();
  return groups;
}

mlir::LogicalResult fillPlanHeader(mlir::ModuleOp module, const HfModelConfig &config,
                                   const Checkpoint &checkpoint, const EmitOptions &options,
                                   schema::PlanT &plan) {
  plan.schema_version = kSchemaVersion;
  plan.compiler_version = kKilnVersion;
  plan.cuda_version = "";
  plan.model = modelInfo(config);
  plan.model->source_dtype = sourceDType(module, checkpoint);
  if (auto output = module->getAttrOfType<mlir::StringAttr>(kOutputAttr);
      output && output.getValue() == kHiddenStatesOutput) {
    plan.output = schema::PlanOutput::HiddenStates;
    Result<SentencePooling> pooling = readSentencePooling(options.modelDir);
    if (!pooling.isOk())
      return module.emitError() << pooling.status().message();
    plan.model->pooling = pooling->mode;
    plan.model->normalize_embeddings = pooling->normalize;
  }
  Result<std::string> chatTemplate = readChatTemplate(options.modelDir);
  if (!chatTemplate.isOk())
    return module.emitError() << chatTemplate.status().message();
  plan.model->chat_template = *chatTemplate;

  plan.limits = std::make_unique<schema::CompiledLimitsT>();
  plan.limits->max_batch = static_cast<uint32_t>(options.maxBatch);
  plan.limits->max_seq_len = static_cast<uint32_t>(options.maxSeqLen);
  plan.limits->max_tokens_per_step = static_cast<uint32_t>(options.maxTokensPerStep);
  plan.limits->max_logits_per_step = static_cast<uint32_t>(
      options.maxLogitsPerStep > 0 ? options.maxLogitsPerStep : options.maxTokensPerStep);
  plan.limits->max_blocks_per_seq =
      static_cast<uint32_t>((options.maxSeqLen + options.kvBlockSize - 1) / options.kvBlockSize);

  plan.kv_cache = std::make_unique<schema::KvCacheSpecT>();
  // An encoder-decoder's decoder layers hold their self-attention's and their cross-attention's
  // keys and values after the encoder's (compiler/models/encoder.h).
  plan.kv_cache->num_layers = static_cast<uint32_t>(config.numLayers + 2 * config.decoderLayers);
  // Per rank: the sharding pass gives each rank numKvHeads / tp whole KV heads.
  plan.kv_cache->num_kv_heads = static_cast<uint32_t>(config.numKvHeads / options.tp);
  plan.kv_cache->head_dim = static_cast<uint32_t>(config.headDim);
  plan.kv_cache->block_size = static_cast<uint32_t>(options.kvBlockSize);
  // --dtype: the cache holds k and v as the activations they are copied from, or as --kv-dtype
  // says (plan.fbs "Dtypes").
  schema::DType activations = storedDType(moduleActivationType(module));
  plan.kv_cache->dtype = options.kvDtype.empty() ? activations : kvCacheDType(options.kvDtype);
  plan.kv_cache->k_scales = options.kvKScales;
  plan.kv_cache->v_scales = options.kvVScales;
  mlir::FailureOr<std::vector<std::unique_ptr<schema::KvCacheGroupT>>> groups =
      kvCacheGroups(module);
  if (mlir::failed(groups))
    return mlir::failure();
  plan.kv_cache->groups = std::move(*groups);

  plan.activation_dtype = activations;
  plan.tp = static_cast<uint32_t>(options.tp);
  plan.targets = options.targets;
  return mlir::success();
}

} // namespace kiln::compiler
