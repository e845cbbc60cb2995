#include "compiler/models/decoder.h"

#include "compiler/dialect/source_slice.h"
#include "compiler/emit/activation_dtype.h"
#include "runtime/base/half.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace kiln::compiler {

using mlir::Value;

DecoderGraph::DecoderGraph(mlir::MLIRContext &context, const HfModelConfig &config,
                           const BuildOptions &options, DecoderLayout layout)
    : context_(context), config_(config), options_(options), layout_(std::move(layout)),
      b_(&context) {}

mlir::LogicalResult DecoderGraph::checkConfig() {
  auto fail = [&](const std::string &message) {
    mlir::emitError(mlir::UnknownLoc::get(&context_)) << "config.json: " << message;
    return mlir::failure();
  };
  const HfModelConfig &c = config_;
  if (c.vocabSize <= 0 || c.hiddenSize <= 0 || c.intermediateSize <= 0 || c.numLayers <= 0 ||
      c.numHeads <= 0 || c.numKvHeads <= 0 || c.headDim <= 0)
    return fail("vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
                "num_attention_heads, num_key_value_heads and head_dim must be positive");
  if (c.numHeads % c.numKvHeads != 0)
    return fail("num_attention_heads (" + std::to_string(c.numHeads) +
                ") must be a multiple of num_key_value_heads (" + std::to_string(c.numKvHeads) +
                ")");
  if (c.headDim % 2 != 0)
    return fail("head_dim (" + std::to_string(c.headDim) + ") must be even for rotary embeddings");
  if (rotaryDim() <= 0 || rotaryDim() % 2 != 0 || rotaryDim() > c.headDim)
    return fail("the rotary dimension (head_dim x partial_rotary_factor = " +
                std::to_string(rotaryDim()) + ") must be even and in [2, head_dim]");
  if (!(c.rmsNormEps > 0.0))
    return fail("rms_norm_eps must be positive");
  if (!c.slidingWindows.empty() && static_cast<int64_t>(c.slidingWindows.size()) != c.numLayers)
    return fail("sliding windows are given for " + std::to_string(c.slidingWindows.size()) +
                " layers but num_hidden_layers is " + std::to_string(c.numLayers));
  return mlir::success();
}

int64_t DecoderGraph::rotaryDim() const {
  return config_.rotaryDim > 0 ? config_.rotaryDim : config_.headDim;
}

mlir::RankedTensorType DecoderGraph::activation(int64_t width) {
  return mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, width}, b_.getF32Type());
}

Value DecoderGraph::weight(const std::string &name, const std::string &source,
                           llvm::ArrayRef<int64_t> shape, mlir::Type dtype) {
  return weight(name, std::vector<std::string>{source}, shape, dtype);
}

// A weight whose rows are the sources' rows in order (an MoE layer's experts stacked).
Value DecoderGraph::weight(const std::string &name, const std::vector<std::string> &sources,
                           llvm::ArrayRef<int64_t> shape, mlir::Type dtype) {
  auto type = mlir::RankedTensorType::get(shape, b_.getF32Type());
  llvm::SmallVector<llvm::StringRef> refs(sources.begin(), sources.end());
  return b_.create<WeightOp>(loc(name), type, b_.getStringAttr(name), b_.getStrArrayAttr(refs),
                             mlir::TypeAttr::get(dtype));
}

Value DecoderGraph::stepInput(StepInputKind kind, int64_t kvGroup) {
  int64_t rank = kind == StepInputKind::BlockTables ? 2 : 1;
  llvm::SmallVector<int64_t> shape(rank, mlir::ShapedType::kDynamic);
  auto type = mlir::RankedTensorType::get(shape, b_.getI32Type());
  std::string name = "step." + stringifyStepInputKind(kind).str();
  if (kvGroup > 0)
    name += "." + std::to_string(kvGroup);
  return b_.create<StepInputOp>(loc(name), type, kind, static_cast<uint64_t>(kvGroup));
}

// KV cache groups (schema/plan.fbs "KV cache groups"): layers of one attention kind (full, or
// one sliding window) in groups of equal size, the smallest kind's layer count, so one block of
// the shared pool holds that many layers whichever group owns it: Gemma 2's alternating layers
// make two groups of half the layers, Gemma 3's 5 local : 1 global pattern one global group and
// five local ones. A model without sliding windows has one group.
int64_t DecoderGraph::assignKvGroups() {
  const HfModelConfig &c = config_;
  std::map<int64_t, std::vector<int64_t>> layersOfWindow; // window 0 (full) first
  for (int64_t layer = 0; layer < c.numLayers; ++layer)
    layersOfWindow[c.slidingWindows.empty() ? 0 : c.slidingWindows[layer]].push_back(layer);
  size_t groupSize = static_cast<size_t>(c.numLayers);
  for (const auto &[window, layers] : layersOfWindow)
    groupSize = std::min(groupSize, layers.size());
  kvGroupOfLayer_.assign(c.numLayers, 0);
  int64_t group = 0;
  for (const auto &[window, layers] : layersOfWindow)
    for (size_t i = 0; i < layers.size(); i += groupSize, ++group)
      for (size_t j = i; j < std::min(layers.size(), i + groupSize); ++j)
        kvGroupOfLayer_[layers[j]] = group;
  return group;
}

void DecoderGraph::defineStepInputs() {
  const int64_t numKvGroups = assignKvGroups();
  tokenIds_ = stepInput(StepInputKind::TokenIds);
  positions_ = stepInput(StepInputKind::Positions);
  for (int64_t g = 0; g < numKvGroups; ++g)
    slotMappings_.push_back(stepInput(StepInputKind::SlotMapping, g));
  queryStartLoc_ = stepInput(StepInputKind::QueryStartLoc);
  contextLens_ = stepInput(StepInputKind::ContextLens);
  for (int64_t g = 0; g < numKvGroups; ++g)
    blockTables_.push_back(stepInput(StepInputKind::BlockTables, g));
  logitsIndices_ = stepInput(StepInputKind::LogitsIndices);
}

// RoPE inverse frequencies, computed exactly as transformers does, stored as a constant: one
// table, or for longrope the short then the long one (rope_kv_write picks per sequence).
Value DecoderGraph::ropeFrequencies(const RopeTables &rope, const std::string &name) {
  std::vector<float> invFreq = rope.invFreq;
  invFreq.insert(invFreq.end(), rope.longInvFreq.begin(), rope.longInvFreq.end());
  auto type = mlir::RankedTensorType::get({static_cast<int64_t>(invFreq.size())}, b_.getF32Type());
  return b_.create<ConstantOp>(loc(name), type, b_.getStringAttr(name),
                               mlir::DenseElementsAttr::get(type, llvm::ArrayRef<float>(invFreq)));
}

// Gemma 3's sliding-window layers: rope_local_base_freq, unscaled.
bool DecoderGraph::localRope(int64_t layer) const {
  return config_.localRopeTheta > 0 && !config_.slidingWindows.empty() &&
         config_.slidingWindows[layer] > 0;
}

std::string DecoderGraph::layerName(int64_t layer) const {
  return layout_.layerPrefix + std::to_string(layer);
}

std::string DecoderGraph::partSource(int64_t layer, const std::string &block,
                                     const std::string &part, const std::string &fused,
                                     int64_t begin, int64_t rows, const std::string &suffix) const {
  const std::string prefix = layerName(layer) + "." + block + ".";
  if (fused.empty())
    return prefix + part + suffix;
  SourceSlice slice;
  slice.tensor = prefix + fused + suffix;
  slice.rowBegin = begin;
  slice.rowEnd = begin + rows;
  return formatSourceSlice(slice);
}

// `name` is the kiln prefix ("layers.0.attn.q"); weights are `name`.weight / `name`.bias.
Value DecoderGraph::linear(const std::string &name, const std::string &source, Value x, int64_t out,
                           const std::string &biasSource) {
  int64_t in = mlir::cast<mlir::RankedTensorType>(x.getType()).getDimSize(1);
  Value w = weight(name + ".weight", source, {out, in}, options_.weightType);
  Value b =
      biasSource.empty() ? Value() : weight(name + ".bias", biasSource, {out}, b_.getF32Type());
  return b_.create<LinearOp>(loc(name), activation(out), x, w, b);
}

// A norm weight's source: the tensor, or 1 + it for Gemma's norms.
std::string DecoderGraph::normSource(const std::string &tensor) const {
  if (!config_.normPlusOne)
    return tensor;
  SourceSlice slice;
  slice.tensor = tensor;
  slice.plusOne = true;
  return formatSourceSlice(slice);
}

Value DecoderGraph::rmsNorm(const std::string &name, const std::string &source, Value x) {
  int64_t width = mlir::cast<mlir::RankedTensorType>(x.getType()).getDimSize(1);
  Value w = weight(name + ".weight", normSource(source), {width}, b_.getF32Type());
  return b_.create<RmsNormOp>(loc(name), x.getType(), x, w,
                              b_.getF32FloatAttr(static_cast<float>(config_.rmsNormEps)));
}

Value DecoderGraph::attentionBlock(int64_t layer, Value normed) {
  const HfModelConfig &c = config_;
  const std::string name = "layers." + std::to_string(layer) + ".attn";
  const int64_t qRows = c.numHeads * c.headDim, kvRows = c.numKvHeads * c.headDim;
  const std::string fused = layout_.fusedQkv ? "qkv_proj" : "";
  auto part = [&](const char *proj, int64_t begin, int64_t rows, bool bias) {
    std::string w = partSource(layer, "self_attn", proj, fused, begin, rows, ".weight");
    std::string b = bias ? partSource(layer, "self_attn", proj, fused, begin, rows, ".bias") : "";
    return std::make_pair(w, b);
  };
  auto [qw, qb] = part("q_proj", 0, qRows, c.qkvBias);
  auto [kw, kb] = part("k_proj", qRows, kvRows, c.qkvBias);
  auto [vw, vb] = part("v_proj", qRows + kvRows, kvRows, c.qkvBias);
  Value q = linear(name + ".q", qw, normed, qRows, qb);
  Value k = linear(name + ".k", kw, normed, kvRows, kb);
  Value v = linear(name + ".v", vw, normed, kvRows, vb);
  Value qNorm, kNorm;
  if (c.qkNorm) {
    const std::string prefix = layerName(layer) + ".self_attn.";
    qNorm = weight(name + ".q_norm.weight", normSource(prefix + "q_norm.weight"), {c.headDim},
                   b_.getF32Type());
    kNorm = weight(name + ".k_norm.weight", normSource(prefix + "k_norm.weight"), {c.headDim},
                   b_.getF32Type());
  }
  mlir::Type qType = activation(qRows);
  auto i64 = [&](int64_t v) { return b_.getI64IntegerAttr(v); };
  auto f32 = [&](double v) { return b_.getF32FloatAttr(static_cast<float>(v)); };
  const bool local = localRope(layer);
  const RopeTables &rope = local ? localRope_ : rope_;
  // Frequencies that follow the sequence's length need to know which sequence a token is in.
  const bool byLength = rope.mode != RopeMode::kStatic;
  Value rotated = b_.create<RopeKvWriteOp>(
      loc(name + ".rope_kv_write"), qType, mlir::ValueRange{q, k, v}, positions_,
      slotMappings_[kvGroupOfLayer_[layer]], local ? localInvFreq_ : invFreq_,
      byLength ? queryStartLoc_ : Value(), byLength ? sequenceLengths_ : Value(), qNorm, kNorm,
      i64(layer), i64(c.numHeads), i64(c.numKvHeads), i64(c.headDim), i64(rotaryDim()),
      i64(static_cast<int64_t>(rope.mode)), i64(rope.originalMaxPositions), f32(rope.ropeTheta),
      b_.getF64FloatAttr(rope.dynamicFactor), f32(rope.attentionScaling),
      f32(c.qkNorm ? c.rmsNormEps : 0));
  const double scale =
      c.attentionScale > 0 ? c.attentionScale : 1.0 / std::sqrt(static_cast<double>(c.headDim));
  const int64_t window = c.slidingWindows.empty() ? 0 : c.slidingWindows[layer];
  Value attended = b_.create<AttentionOp>(loc("layers." + std::to_string(layer) + ".attention"),
                                          qType, rotated, positions_, queryStartLoc_, contextLens_,
                                          blockTables_[kvGroupOfLayer_[layer]], i64(layer),
                                          i64(c.numHeads), i64(c.numKvHeads), i64(c.headDim),
                                          f32(scale), i64(window), f32(c.attnLogitSoftcap));
  const std::string prefix = layerName(layer) + ".self_attn.o_proj";
  return linear(name + ".o", prefix + ".weight", attended, c.hiddenSize,
                c.oBias ? prefix + ".bias" : "");
}

Value DecoderGraph::gatedMlp(int64_t layer, Value normed) {
  return gatedMlp(layer, normed, "mlp", "layers." + std::to_string(layer) + ".mlp",
                  config_.intermediateSize);
}

Value DecoderGraph::gatedMlp(int64_t layer, Value normed, const std::string &block,
                             const std::string &name, int64_t rows) {
  const HfModelConfig &c = config_;
  const std::string fused = layout_.fusedGateUp ? "gate_up_proj" : "";
  auto source = [&](const char *proj, int64_t begin, const char *suffix) {
    return partSource(layer, block, proj, fused, begin, rows, suffix);
  };
  Value gate = linear(name + ".gate", source("gate_proj", 0, ".weight"), normed, rows,
                      c.mlpBias ? source("gate_proj", 0, ".bias") : "");
  Value up = linear(name + ".up", source("up_proj", rows, ".weight"), normed, rows,
                    c.mlpBias ? source("up_proj", rows, ".bias") : "");
  Value activated =
      c.geluTanhMlp
          ? b_.create<GeluTanhOp>(loc(name + ".gelu_tanh"), gate.getType(), gate).getResult()
          : b_.create<SiluOp>(loc(name + ".silu"), gate.getType(), gate).getResult();
  Value product = b_.create<MulOp>(loc(name + ".mul"), gate.getType(), activated, up);
  const std::string down = layerName(layer) + "." + block + ".down_proj";
  return linear(name + ".down", down + ".weight", product, c.hiddenSize,
                c.mlpBias ? down + ".bias" : "");
}

bool DecoderGraph::moeLayer(int64_t layer) const {
  return config_.numExperts > 0 &&
         (config_.denseMlpLayers.empty() || !config_.denseMlpLayers[layer]);
}

Value DecoderGraph::moeMlp(int64_t layer, Value normed) {
  const HfModelConfig &c = config_;
  const std::string name = "layers." + std::to_string(layer) + ".moe";
  const std::string block = layerName(layer) + "." + layout_.moeBlock + ".";
  const int64_t experts = c.numExperts, inter = c.expertIntermediate, hidden = c.hiddenSize;
  Value logits = linear(name + ".router", block + layout_.moeRouter, normed, experts, "");
  auto expertTensor = [&](const std::string &pattern, int64_t e) {
    std::string name = pattern;
    name.replace(name.find("{e}"), 3, std::to_string(e));
    return block + name;
  };
  std::vector<std::string> gateUp, down;
  for (int64_t e = 0; e < experts; ++e) {
    gateUp.push_back(expertTensor(layout_.expertGate, e));
    gateUp.push_back(expertTensor(layout_.expertUp, e));
    down.push_back(expertTensor(layout_.expertDown, e));
  }
  Value gateUpW =
      weight(name + ".gate_up", gateUp, {experts * 2 * inter, hidden}, options_.weightType);
  Value downW = weight(name + ".down", down, {experts * hidden, inter}, options_.weightType);
  auto i64 = [&](int64_t v) { return b_.getI64IntegerAttr(v); };
  Value routed = b_.create<MoeExpertsOp>(loc(name + ".experts"), normed.getType(), normed, logits,
                                         gateUpW, downW, i64(experts), i64(c.expertsPerToken),
                                         i64(inter), i64(c.renormalizeExperts ? 1 : 0));
  if (c.sharedExpertIntermediate == 0)
    return routed;
  // Qwen2-MoE: routed + sigmoid(x . shared_expert_gate) * shared_expert(x).
  Value shared = gatedMlp(layer, normed, layout_.moeBlock + ".shared_expert", name + ".shared",
                          c.sharedExpertIntermediate);
  Value gate = weight(name + ".shared_gate.weight", block + "shared_expert_gate.weight",
                      {1, hidden}, b_.getF32Type());
  return b_.create<SigmoidGatedAddOp>(loc(name + ".shared_add"), normed.getType(), routed, shared,
                                      normed, gate);
}

// Pre-norm attention and MLP, each added to the residual stream.
Value DecoderGraph::preNormLayer(int64_t layer, Value hidden) {
  const std::string prefix = "layers." + std::to_string(layer);
  const std::string hf = layerName(layer);
  Value normed = rmsNorm(prefix + ".attn_norm", hf + ".input_layernorm.weight", hidden);
  hidden = b_.create<AddOp>(loc(prefix + ".attn_residual"), hidden.getType(), hidden,
                            attentionBlock(layer, normed));
  normed = rmsNorm(prefix + ".mlp_norm", hf + ".post_attention_layernorm.weight", hidden);
  Value mlp = moeLayer(layer) ? moeMlp(layer, normed) : gatedMlp(layer, normed);
  return b_.create<AddOp>(loc(prefix + ".mlp_residual"), hidden.getType(), hidden, mlp);
}

// Gemma 2's layer: each block's output is normed again before it joins the residual stream
// (post_attention_layernorm is that norm here, pre_feedforward_layernorm the MLP's input norm).
Value DecoderGraph::sandwichLayer(int64_t layer, Value hidden) {
  const std::string prefix = "layers." + std::to_string(layer);
  const std::string hf = layerName(layer);
  Value normed = rmsNorm(prefix + ".attn_norm", hf + ".input_layernorm.weight", hidden);
  Value attended = rmsNorm(prefix + ".attn_post_norm", hf + ".post_attention_layernorm.weight",
                           attentionBlock(layer, normed));
  hidden = b_.create<AddOp>(loc(prefix + ".attn_residual"), hidden.getType(), hidden, attended);
  normed = rmsNorm(prefix + ".mlp_norm", hf + ".pre_feedforward_layernorm.weight", hidden);
  Value mlp = rmsNorm(prefix + ".mlp_post_norm", hf + ".post_feedforward_layernorm.weight",
                      gatedMlp(layer, normed));
  return b_.create<AddOp>(loc(prefix + ".mlp_residual"), hidden.getType(), hidden, mlp);
}

// transformers' normalizer: torch.tensor(hidden_size ** 0.5, dtype=the activations' dtype).
float DecoderGraph::embeddingScale() const {
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(config_.hiddenSize)));
  if (options_.weightType.isBF16())
    return bf16ToF32(f32ToBf16(scale));
  if (options_.weightType.isF16())
    return f16ToF32(f32ToF16(scale));
  return scale;
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> DecoderGraph::build() {
  if (failed(checkConfig()))
    return mlir::failure();
  const HfModelConfig &c = config_;
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc("model"));
  module->getOperation()->setAttr("kiln.model_type", b_.getStringAttr(c.modelType));
  // --dtype stores the activations (and so the KV cache) in the weights' type: one compute dtype
  // for the whole step, as transformers runs a model loaded with that torch_dtype.
  module->getOperation()->setAttr(kActivationDtypeAttr, mlir::TypeAttr::get(options_.weightType));
  b_.setInsertionPointToEnd(module->getBody());
  if (c.embeds)
    module->getOperation()->setAttr(kOutputAttr, b_.getStringAttr(kHiddenStatesOutput));
  auto funcType = b_.getFunctionType({}, {activation(c.embeds ? c.hiddenSize : c.vocabSize)});
  auto func = b_.create<mlir::func::FuncOp>(loc("step"), "step", funcType);
  b_.setInsertionPointToStart(func.addEntryBlock());
  rope_ = ropeTables(config_);
  defineStepInputs();
  if (rope_.mode != RopeMode::kStatic)
    sequenceLengths_ = stepInput(StepInputKind::SequenceLengths);
  invFreq_ = ropeFrequencies(rope_, "rope.inv_freq");
  bool anyLocal = false;
  for (int64_t layer = 0; layer < c.numLayers; ++layer)
    anyLocal = anyLocal || localRope(layer);
  if (anyLocal) { // unscaled, so static: no sequence lengths needed
    HfModelConfig local = c;
    local.ropeTheta = c.localRopeTheta;
    local.ropeScaling.reset();
    localRope_ = ropeTables(local);
    localInvFreq_ = ropeFrequencies(localRope_, "rope.local_inv_freq");
  }

  // Tied checkpoints may store only one of the two names; the safetensors loader resolves the
  // alias, and the emitter falls back to lm_head.weight when only that one is stored.
  Value table =
      weight("embed.weight", layout_.embedTokens, {c.vocabSize, c.hiddenSize}, options_.weightType);
  Value hidden = b_.create<EmbeddingOp>(
      loc("embed"), activation(c.hiddenSize), tokenIds_, table, b_.getI64IntegerAttr(0),
      b_.getF32FloatAttr(c.scaleEmbeddings ? embeddingScale() : 1));
  for (int64_t layer = 0; layer < c.numLayers; ++layer)
    hidden = c.sandwichNorms ? sandwichLayer(layer, hidden) : preNormLayer(layer, hidden);
  Value normed = rmsNorm("final_norm", layout_.finalNorm, hidden);
  Value rows =
      b_.create<GatherRowsOp>(loc("logits_rows"), normed.getType(), normed, logitsIndices_);
  if (c.embeds) { // an embedding model: the final hidden states, no lm_head
    b_.create<mlir::func::ReturnOp>(loc("return"), rows);
    if (failed(mlir::verify(*module)))
      return mlir::failure();
    return module;
  }
  Value head = c.tieWordEmbeddings ? table
                                   : weight("lm_head.weight", layout_.lmHead,
                                            {c.vocabSize, c.hiddenSize}, options_.weightType);
  Value logits = b_.create<LinearOp>(loc("lm_head"), activation(c.vocabSize), rows, head, Value());
  if (c.finalLogitSoftcap > 0)
    logits = b_.create<SoftcapOp>(loc("logits_softcap"), logits.getType(), logits,
                                  b_.getF32FloatAttr(static_cast<float>(c.finalLogitSoftcap)));
  b_.create<mlir::func::ReturnOp>(loc("return"), logits);
  if (failed(mlir::verify(*module)))
    return mlir::failure();
  return module;
}

namespace {

// `name` without a leading "model.".
std::string bare(const std::string &name) {
  return name.rfind("model.", 0) == 0 ? name.substr(6) : name;
}

} // namespace

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildDecoder(mlir::MLIRContext &context,
                                                                const HfModelConfig &config,
                                                                const BuildOptions &options,
                                                                const DecoderLayout &layout) {
  loadKilnDialects(context);
  DecoderLayout used = layout;
  if (config.embeds && options.hasTensor && !options.hasTensor(layout.embedTokens) &&
      options.hasTensor(bare(layout.embedTokens))) {
    used.embedTokens = bare(layout.embedTokens);
    used.layerPrefix = bare(layout.layerPrefix);
    used.finalNorm = bare(layout.finalNorm);
  }
  return DecoderGraph(context, config, options, used).build();
}

} // namespace kiln::compiler
