// Llama family (Llama 1/2/3 incl. llama3 rope scaling, GQA, explicit head_dim, tied embeddings,
// attention/mlp biases) as the unfused kiln graph. q/k/v feed rope_kv_write as three operands and
// gate/up stay separate linears + silu + mul, so the fusion passes have real work to do.
#include "models/builders.h"

#include "compiler/emit/activation_dtype.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include <cmath>

namespace kiln::compiler {
namespace {

using mlir::Value;

class LlamaBuilder {
public:
  LlamaBuilder(mlir::MLIRContext &context, const HfModelConfig &config,
               const BuildOptions &options)
      : context_(context), config_(config), options_(options), b_(&context) {}

  mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> build();

private:
  mlir::LogicalResult checkConfig();
  mlir::Location loc(const std::string &name) { return namedLoc(&context_, name); }
  mlir::RankedTensorType activation(int64_t width) {
    return mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, width}, b_.getF32Type());
  }
  Value weight(const std::string &name, const std::string &source, llvm::ArrayRef<int64_t> shape,
               mlir::Type dtype);
  Value stepInput(StepInputKind kind);
  Value linear(const std::string &name, const std::string &hfPrefix, Value x, int64_t out,
               bool bias);
  Value rmsNorm(const std::string &name, const std::string &hfWeight, Value x);
  Value attentionBlock(int64_t layer, Value normed);
  Value mlpBlock(int64_t layer, Value normed);

  mlir::MLIRContext &context_;
  const HfModelConfig &config_;
  const BuildOptions &options_;
  mlir::OpBuilder b_;
  Value positions_, slotMapping_, queryStartLoc_, contextLens_, blockTables_, invFreq_;
};

mlir::LogicalResult LlamaBuilder::checkConfig() {
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
  if (!(c.rmsNormEps > 0.0))
    return fail("rms_norm_eps must be positive");
  return mlir::success();
}

Value LlamaBuilder::weight(const std::string &name, const std::string &source,
                           llvm::ArrayRef<int64_t> shape, mlir::Type dtype) {
  auto type = mlir::RankedTensorType::get(shape, b_.getF32Type());
  return b_.create<WeightOp>(loc(name), type, b_.getStringAttr(name),
                             b_.getStrArrayAttr({source}), mlir::TypeAttr::get(dtype));
}

Value LlamaBuilder::stepInput(StepInputKind kind) {
  int64_t rank = kind == StepInputKind::BlockTables ? 2 : 1;
  llvm::SmallVector<int64_t> shape(rank, mlir::ShapedType::kDynamic);
  auto type = mlir::RankedTensorType::get(shape, b_.getI32Type());
  std::string name = "step." + stringifyStepInputKind(kind).str();
  return b_.create<StepInputOp>(loc(name), type, kind);
}

// `name` is the kiln prefix ("layers.0.attn.q"); weights are `name`.weight / `name`.bias.
Value LlamaBuilder::linear(const std::string &name, const std::string &hfPrefix, Value x,
                           int64_t out, bool bias) {
  int64_t in = mlir::cast<mlir::RankedTensorType>(x.getType()).getDimSize(1);
  Value w = weight(name + ".weight", hfPrefix + ".weight", {out, in}, options_.weightType);
  Value b = bias ? weight(name + ".bias", hfPrefix + ".bias", {out}, b_.getF32Type()) : Value();
  return b_.create<LinearOp>(loc(name), activation(out), x, w, b);
}

Value LlamaBuilder::rmsNorm(const std::string &name, const std::string &hfWeight, Value x) {
  Value w = weight(name + ".weight", hfWeight, {config_.hiddenSize}, b_.getF32Type());
  return b_.create<RmsNormOp>(loc(name), x.getType(), x, w,
                              b_.getF32FloatAttr(static_cast<float>(config_.rmsNormEps)));
}

Value LlamaBuilder::attentionBlock(int64_t layer, Value normed) {
  const HfModelConfig &c = config_;
  std::string name = "layers." + std::to_string(layer) + ".attn";
  std::string hf = "model.layers." + std::to_string(layer) + ".self_attn";
  Value q = linear(name + ".q", hf + ".q_proj", normed, c.numHeads * c.headDim, c.attentionBias);
  Value k = linear(name + ".k", hf + ".k_proj", normed, c.numKvHeads * c.headDim, c.attentionBias);
  Value v = linear(name + ".v", hf + ".v_proj", normed, c.numKvHeads * c.headDim, c.attentionBias);
  mlir::Type qType = activation(c.numHeads * c.headDim);
  Value rotated = b_.create<RopeKvWriteOp>(
      loc(name + ".rope_kv_write"), qType, mlir::ValueRange{q, k, v}, positions_, slotMapping_,
      invFreq_, b_.getI64IntegerAttr(layer), b_.getI64IntegerAttr(c.numHeads),
      b_.getI64IntegerAttr(c.numKvHeads), b_.getI64IntegerAttr(c.headDim),
      b_.getI64IntegerAttr(c.headDim));
  float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.headDim)));
  Value attended = b_.create<AttentionOp>(
      loc("layers." + std::to_string(layer) + ".attention"), qType, rotated, positions_,
      queryStartLoc_, contextLens_, blockTables_, b_.getI64IntegerAttr(layer),
      b_.getI64IntegerAttr(c.numHeads), b_.getI64IntegerAttr(c.numKvHeads),
      b_.getI64IntegerAttr(c.headDim), b_.getF32FloatAttr(scale));
  return linear(name + ".o", hf + ".o_proj", attended, c.hiddenSize, c.attentionBias);
}

Value LlamaBuilder::mlpBlock(int64_t layer, Value normed) {
  const HfModelConfig &c = config_;
  std::string name = "layers." + std::to_string(layer) + ".mlp";
  std::string hf = "model.layers." + std::to_string(layer) + ".mlp";
  Value gate = linear(name + ".gate", hf + ".gate_proj", normed, c.intermediateSize, c.mlpBias);
  Value up = linear(name + ".up", hf + ".up_proj", normed, c.intermediateSize, c.mlpBias);
  Value activated = b_.create<SiluOp>(loc(name + ".silu"), gate.getType(), gate);
  Value product = b_.create<MulOp>(loc(name + ".mul"), gate.getType(), activated, up);
  return linear(name + ".down", hf + ".down_proj", product, c.hiddenSize, c.mlpBias);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> LlamaBuilder::build() {
  if (failed(checkConfig()))
    return mlir::failure();
  const HfModelConfig &c = config_;
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc("model"));
  module->getOperation()->setAttr("kiln.model_type", b_.getStringAttr(c.modelType));
  // --dtype stores the activations (and so the KV cache) in the weights' type: one compute dtype
  // for the whole step, as transformers runs a model loaded with that torch_dtype.
  module->getOperation()->setAttr(kActivationDtypeAttr, mlir::TypeAttr::get(options_.weightType));
  b_.setInsertionPointToEnd(module->getBody());
  auto funcType = b_.getFunctionType({}, {activation(c.vocabSize)});
  auto func = b_.create<mlir::func::FuncOp>(loc("step"), "step", funcType);
  b_.setInsertionPointToStart(func.addEntryBlock());

  Value tokenIds = stepInput(StepInputKind::TokenIds);
  positions_ = stepInput(StepInputKind::Positions);
  slotMapping_ = stepInput(StepInputKind::SlotMapping);
  queryStartLoc_ = stepInput(StepInputKind::QueryStartLoc);
  contextLens_ = stepInput(StepInputKind::ContextLens);
  blockTables_ = stepInput(StepInputKind::BlockTables);
  Value logitsIndices = stepInput(StepInputKind::LogitsIndices);
  std::vector<float> invFreq = ropeInverseFrequencies(c, c.headDim);
  auto invFreqType =
      mlir::RankedTensorType::get({static_cast<int64_t>(invFreq.size())}, b_.getF32Type());
  invFreq_ = b_.create<ConstantOp>(loc("rope.inv_freq"), invFreqType,
                                   b_.getStringAttr("rope.inv_freq"),
                                   mlir::DenseElementsAttr::get(invFreqType,
                                                                llvm::ArrayRef<float>(invFreq)));

  // Tied checkpoints may store only one of the two names; the safetensors loader resolves the
  // alias, and the emitter falls back to lm_head.weight when only that one is stored.
  Value table = weight("embed.weight", "model.embed_tokens.weight", {c.vocabSize, c.hiddenSize},
                       options_.weightType);
  Value hidden = b_.create<EmbeddingOp>(loc("embed"), activation(c.hiddenSize), tokenIds, table);
  for (int64_t layer = 0; layer < c.numLayers; ++layer) {
    std::string prefix = "layers." + std::to_string(layer);
    std::string hf = "model.layers." + std::to_string(layer);
    Value normed = rmsNorm(prefix + ".attn_norm", hf + ".input_layernorm.weight", hidden);
    hidden = b_.create<AddOp>(loc(prefix + ".attn_residual"), hidden.getType(), hidden,
                              attentionBlock(layer, normed));
    normed = rmsNorm(prefix + ".mlp_norm", hf + ".post_attention_layernorm.weight", hidden);
    hidden = b_.create<AddOp>(loc(prefix + ".mlp_residual"), hidden.getType(), hidden,
                              mlpBlock(layer, normed));
  }
  Value normed = rmsNorm("final_norm", "model.norm.weight", hidden);
  Value rows = b_.create<GatherRowsOp>(loc("logits_rows"), normed.getType(), normed, logitsIndices);
  Value head = c.tieWordEmbeddings
                   ? table
                   : weight("lm_head.weight", "lm_head.weight", {c.vocabSize, c.hiddenSize},
                            options_.weightType);
  Value logits = b_.create<LinearOp>(loc("lm_head"), activation(c.vocabSize), rows, head, Value());
  b_.create<mlir::func::ReturnOp>(loc("return"), logits);
  if (failed(mlir::verify(*module)))
    return mlir::failure();
  return module;
}

} // namespace

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildLlama(mlir::MLIRContext &context,
                                                             const HfModelConfig &config,
                                                             const BuildOptions &options) {
  loadKilnDialects(context);
  return LlamaBuilder(context, config, options).build();
}

} // namespace kiln::compiler
