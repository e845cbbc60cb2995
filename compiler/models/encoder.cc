#include "compiler/models/encoder.h"

#include "compiler/dialect/source_slice.h"
#include "compiler/emit/activation_dtype.h"
#include "compiler/models/decoder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"

#include <cmath>

namespace kiln::compiler {
namespace {

using mlir::Value;

// The encoder reuses the decoder's weight, linear and step-input builders; its own blocks are
// the embeddings, the post-norm layer and the hidden-state output.
class EncoderGraph : public DecoderGraph {
public:
  EncoderGraph(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options,
               EncoderLayout layout)
      : DecoderGraph(context, config, options, {}), layout_(std::move(layout)) {}

  mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> build();

private:
  std::string tensor(const std::string &name) const { return layout_.prefix + name; }
  Value layerNorm(const std::string &name, const std::string &hf, Value x);
  Value embeddings();
  Value selfAttention(int64_t layer, Value hidden);
  Value layer(int64_t layer, Value hidden);

  EncoderLayout layout_;
  Value positions_, lastPositions_, slotMapping_, blockTables_, zeroFrequencies_;
};

Value EncoderGraph::layerNorm(const std::string &name, const std::string &hf, Value x) {
  int64_t width = mlir::cast<mlir::RankedTensorType>(x.getType()).getDimSize(1);
  Value w = weight(name + ".weight", tensor(hf + ".weight"), {width}, b_.getF32Type());
  Value b = weight(name + ".bias", tensor(hf + ".bias"), {width}, b_.getF32Type());
  return b_.create<LayerNormOp>(loc(name), x.getType(), x, w, b,
                                b_.getF32FloatAttr(static_cast<float>(config_.layerNormEps)));
}

// word + token type 0 (one table: the type row added to every word row in fp32, as transformers'
// inputs_embeds + token_type_embeddings), + position p's row (p + offset), then LayerNorm.
Value EncoderGraph::embeddings() {
  const HfModelConfig &c = config_;
  SourceSlice word;
  word.tensor = tensor("embeddings.word_embeddings.weight");
  if (c.typeVocabSize > 0) {
    word.addRowTensor = tensor("embeddings.token_type_embeddings.weight");
    word.addRow = 0;
  }
  Value words = weight("embed.weight", formatSourceSlice(word), {c.vocabSize, c.hiddenSize},
                       options_.weightType);
  SourceSlice position;
  position.tensor = tensor("embeddings.position_embeddings.weight");
  position.rowBegin = c.positionOffset;
  position.rowEnd = c.maxPositionEmbeddings;
  const int64_t rows = c.maxPositionEmbeddings - c.positionOffset;
  Value table = weight("embed.position.weight", formatSourceSlice(position), {rows, c.hiddenSize},
                       options_.weightType);
  auto embed = [&](const std::string &name, Value ids, Value t) -> Value {
    return b_.create<EmbeddingOp>(loc(name), activation(c.hiddenSize), ids, t,
                                  b_.getI64IntegerAttr(0), b_.getF32FloatAttr(1));
  };
  Value sum =
      b_.create<AddOp>(loc("embed.sum"), activation(c.hiddenSize), embed("embed", tokenIds_, words),
                       embed("embed.position", positions_, table));
  return layerNorm("embed.norm", "embeddings.LayerNorm", sum);
}

Value EncoderGraph::selfAttention(int64_t layer, Value hidden) {
  const HfModelConfig &c = config_;
  const std::string name = "layers." + std::to_string(layer) + ".attn";
  const std::string hf = "encoder.layer." + std::to_string(layer) + ".attention.";
  const int64_t width = c.numHeads * c.headDim;
  auto project = [&](const char *part) {
    const std::string source = tensor(hf + "self." + part);
    return linear(name + "." + part, source + ".weight", hidden, width, source + ".bias");
  };
  Value q = project("query"), k = project("key"), v = project("value");
  auto i64 = [&](int64_t value) { return b_.getI64IntegerAttr(value); };
  auto f32 = [&](double value) { return b_.getF32FloatAttr(static_cast<float>(value)); };
  Value stored = b_.create<RopeKvWriteOp>(
      loc(name + ".kv_write"), activation(width), mlir::ValueRange{q, k, v}, positions_,
      slotMapping_, zeroFrequencies_, Value(), Value(), Value(), Value(), i64(layer),
      i64(c.numHeads), i64(c.numHeads), i64(c.headDim), i64(c.headDim),
      i64(static_cast<int64_t>(RopeMode::kStatic)), i64(0), f32(0), b_.getF64FloatAttr(1.0), f32(1),
      f32(0));
  Value attended = b_.create<AttentionOp>(
      loc(name + ".attention"), activation(width), stored, lastPositions_, queryStartLoc_,
      contextLens_, blockTables_, i64(layer), i64(c.numHeads), i64(c.numHeads), i64(c.headDim),
      f32(1.0 / std::sqrt(static_cast<double>(c.headDim))), i64(0), f32(0));
  const std::string out = tensor(hf + "output.dense");
  Value o = linear(name + ".o", out + ".weight", attended, c.hiddenSize, out + ".bias");
  Value sum = b_.create<AddOp>(loc(name + ".residual"), hidden.getType(), o, hidden);
  return layerNorm(name + ".norm", hf + "output.LayerNorm", sum);
}

Value EncoderGraph::layer(int64_t layer, Value hidden) {
  const HfModelConfig &c = config_;
  hidden = selfAttention(layer, hidden);
  const std::string name = "layers." + std::to_string(layer) + ".mlp";
  const std::string hf = "encoder.layer." + std::to_string(layer) + ".";
  const std::string up = tensor(hf + "intermediate.dense");
  Value inner = linear(name + ".up", up + ".weight", hidden, c.intermediateSize, up + ".bias");
  inner = b_.create<GeluOp>(loc(name + ".gelu"), inner.getType(), inner);
  const std::string down = tensor(hf + "output.dense");
  Value out = linear(name + ".down", down + ".weight", inner, c.hiddenSize, down + ".bias");
  Value sum = b_.create<AddOp>(loc(name + ".residual"), hidden.getType(), out, hidden);
  return layerNorm(name + ".norm", hf + "output.LayerNorm", sum);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> EncoderGraph::build() {
  const HfModelConfig &c = config_;
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc("model"));
  module->getOperation()->setAttr("kiln.model_type", b_.getStringAttr(c.modelType));
  module->getOperation()->setAttr(kActivationDtypeAttr, mlir::TypeAttr::get(options_.weightType));
  module->getOperation()->setAttr(kOutputAttr, b_.getStringAttr(kHiddenStatesOutput));
  b_.setInsertionPointToEnd(module->getBody());
  auto funcType = b_.getFunctionType({}, {activation(c.hiddenSize)});
  auto func = b_.create<mlir::func::FuncOp>(loc("step"), "step", funcType);
  b_.setInsertionPointToStart(func.addEntryBlock());
  tokenIds_ = stepInput(StepInputKind::TokenIds);
  positions_ = stepInput(StepInputKind::Positions);
  slotMapping_ = stepInput(StepInputKind::SlotMapping);
  queryStartLoc_ = stepInput(StepInputKind::QueryStartLoc);
  contextLens_ = stepInput(StepInputKind::ContextLens);
  blockTables_ = stepInput(StepInputKind::BlockTables);
  lastPositions_ = stepInput(StepInputKind::LastPositions);
  logitsIndices_ = stepInput(StepInputKind::LogitsIndices);
  RopeTables none;
  none.invFreq.assign(c.headDim / 2, 0.0f);
  zeroFrequencies_ = ropeFrequencies(none, "rope.inv_freq");

  Value hidden = embeddings();
  for (int64_t l = 0; l < c.numLayers; ++l)
    hidden = layer(l, hidden);
  Value rows =
      b_.create<GatherRowsOp>(loc("output_rows"), hidden.getType(), hidden, logitsIndices_);
  b_.create<mlir::func::ReturnOp>(loc("return"), rows);
  if (failed(mlir::verify(*module)))
    return mlir::failure();
  return module;
}

} // namespace

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildEncoder(mlir::MLIRContext &context,
                                                                const HfModelConfig &config,
                                                                const BuildOptions &options,
                                                                const EncoderLayout &layout) {
  loadKilnDialects(context);
  return EncoderGraph(context, config, options, layout).build();
}

Status readEncoderConfig(const ConfigFields &fields, HfModelConfig &config) {
  std::string act = "gelu", positions = "absolute";
  KILN_RETURN_IF_ERROR(fields.readString("hidden_act", act));
  if (act != "gelu")
    return unimplemented(fields.source() + ": field 'hidden_act' is '" + act +
                         "'; kiln compiles encoders with hidden_act: gelu");
  KILN_RETURN_IF_ERROR(fields.readString("position_embedding_type", positions));
  if (positions != "absolute")
    return unimplemented(fields.source() + ": field 'position_embedding_type' is '" + positions +
                         "'; kiln compiles absolute position embeddings only");
  config.embeds = true;
  KILN_RETURN_IF_ERROR(fields.readDouble("layer_norm_eps", config.layerNormEps));
  if (!(config.layerNormEps > 0))
    return fields.error("layer_norm_eps", "must be positive");
  config.typeVocabSize = 2;
  KILN_RETURN_IF_ERROR(fields.readInt("type_vocab_size", config.typeVocabSize));
  if (config.typeVocabSize < 0)
    return fields.error("type_vocab_size", "must be >= 0");
  return okStatus();
}

} // namespace kiln::compiler
