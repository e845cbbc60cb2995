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

// Checkpoint names of one post-norm layer's parts (".weight" / ".bias" appended), "{l}" standing
// for the layer index.
struct LayerNames {
  std::string q, k, v, o, attentionNorm, up, down, mlpNorm;
  std::string crossQ, crossK, crossV, crossO, crossNorm; // a decoder layer's cross-attention
};

LayerNames bertNames() {
  const std::string a = "encoder.layer.{l}.attention.";
  return {a + "self.query",
          a + "self.key",
          a + "self.value",
          a + "output.dense",
          a + "output.LayerNorm",
          "encoder.layer.{l}.intermediate.dense",
          "encoder.layer.{l}.output.dense",
          "encoder.layer.{l}.output.LayerNorm"};
}

LayerNames bartNames(const std::string &stack) {
  const std::string l = stack + ".layers.{l}.";
  return {l + "self_attn.q_proj",
          l + "self_attn.k_proj",
          l + "self_attn.v_proj",
          l + "self_attn.out_proj",
          l + "self_attn_layer_norm",
          l + "fc1",
          l + "fc2",
          l + "final_layer_norm",
          l + "encoder_attn.q_proj",
          l + "encoder_attn.k_proj",
          l + "encoder_attn.v_proj",
          l + "encoder_attn.out_proj",
          l + "encoder_attn_layer_norm"};
}

int64_t positionRows(const HfModelConfig &c) {
  return c.positionRows > 0 ? c.positionRows : c.maxPositionEmbeddings;
}

std::string forLayer(std::string name, int64_t layer) {
  const size_t at = name.find("{l}");
  return at == std::string::npos ? name : name.replace(at, 3, std::to_string(layer));
}

// The encoder reuses the decoder's weight, linear and step-input builders; its own blocks are
// the embeddings, the post-norm layers (self-attention, for a decoder also cross-attention over
// the encoder's output, then the MLP) and the hidden-state output.
class EncoderGraph : public DecoderGraph {
public:
  EncoderGraph(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options,
               EncoderLayout layout)
      : DecoderGraph(context, config, options, {}), layout_(std::move(layout)) {}

  mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> build();

private:
  std::string tensor(const std::string &name) const { return layout_.prefix + name; }
  Value layerNorm(const std::string &name, const std::string &hf, Value x);
  Value bertEmbeddings();
  // BART: the shared table (times sqrt(hidden) with scale_embedding) at `ids`, + positions from
  // row 2, then the stack's layernorm_embedding.
  Value bartEmbeddings(const std::string &stack, Value ids);
  // Keys and values of `from` written as KV layer `kvLayer`, queries from `x`; `positions`: the
  // attention's (causal: Positions; bidirectional: LastPositions).
  Value attend(const std::string &name, int64_t kvLayer, Value x, Value from, Value positions,
               const std::string &q, const std::string &k, const std::string &v,
               const std::string &o);
  Value postNorm(const std::string &name, const std::string &norm, Value x, Value residual);
  Value mlp(const std::string &name, const LayerNames &n, int64_t layer, Value x);
  Value encoderLayer(const LayerNames &n, int64_t layer, Value hidden);
  Value decoderLayer(const LayerNames &n, int64_t layer, Value hidden, Value encoded);
  void defineInputs();

  EncoderLayout layout_;
  Value positions_, lastPositions_, shiftedTokenIds_, slotMapping_, blockTables_, zeroFrequencies_;
};

Value EncoderGraph::layerNorm(const std::string &name, const std::string &hf, Value x) {
  int64_t width = mlir::cast<mlir::RankedTensorType>(x.getType()).getDimSize(1);
  Value w = weight(name + ".weight", tensor(hf + ".weight"), {width}, b_.getF32Type());
  Value b = weight(name + ".bias", tensor(hf + ".bias"), {width}, b_.getF32Type());
  return b_.create<LayerNormOp>(loc(name), x.getType(), x, w, b,
                                b_.getF32FloatAttr(static_cast<float>(config_.layerNormEps)));
}

// word + token type 0 (one table: the type row added to every word row in fp32, as transformers'
// inputs_embeds + token_type_embeddings), + the token's type row less type 0's (where the model
// has more than one type: the TokenTypeIds step input; type 0 adds zeros, so a text alone sums as
// before), + position p's row (p + offset), then LayerNorm.
Value EncoderGraph::bertEmbeddings() {
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
  position.rowEnd = positionRows(c);
  const int64_t rows = positionRows(c) - c.positionOffset;
  Value table = weight("embed.position.weight", formatSourceSlice(position), {rows, c.hiddenSize},
                       options_.weightType);
  auto embed = [&](const std::string &name, Value ids, Value t) -> Value {
    return b_.create<EmbeddingOp>(loc(name), activation(c.hiddenSize), ids, t,
                                  b_.getI64IntegerAttr(0), b_.getF32FloatAttr(1));
  };
  Value tokens = embed("embed", tokenIds_, words);
  if (c.typeVocabSize > 1) {
    SourceSlice types;
    types.tensor = types.addRowTensor = tensor("embeddings.token_type_embeddings.weight");
    types.subtractRow = true;
    Value typeTable = weight("embed.token_type.weight", formatSourceSlice(types),
                             {c.typeVocabSize, c.hiddenSize}, options_.weightType);
    tokens = b_.create<AddOp>(
        loc("embed.typed"), activation(c.hiddenSize), tokens,
        embed("embed.token_type", stepInput(StepInputKind::TokenTypeIds), typeTable));
  }
  Value sum = b_.create<AddOp>(loc("embed.sum"), activation(c.hiddenSize), tokens,
                               embed("embed.position", positions_, table));
  return layerNorm("embed.norm", "embeddings.LayerNorm", sum);
}

Value EncoderGraph::bartEmbeddings(const std::string &stack, Value ids) {
  const HfModelConfig &c = config_;
  Value words = weight(stack + ".embed.weight", tensor("shared.weight"),
                       {c.vocabSize, c.hiddenSize}, options_.weightType);
  SourceSlice position;
  position.tensor = tensor(stack + ".embed_positions.weight");
  position.rowBegin = c.positionOffset;
  position.rowEnd = positionRows(c);
  Value table = weight(stack + ".embed.position.weight", formatSourceSlice(position),
                       {positionRows(c) - c.positionOffset, c.hiddenSize}, options_.weightType);
  const float scale = c.scaleEmbeddingsExactly
                          ? static_cast<float>(std::sqrt(static_cast<double>(c.hiddenSize)))
                          : 1.0f;
  Value tokens = b_.create<EmbeddingOp>(loc(stack + ".embed"), activation(c.hiddenSize), ids, words,
                                        b_.getI64IntegerAttr(0), b_.getF32FloatAttr(scale));
  Value positions =
      b_.create<EmbeddingOp>(loc(stack + ".embed.position"), activation(c.hiddenSize), positions_,
                             table, b_.getI64IntegerAttr(0), b_.getF32FloatAttr(1));
  Value sum =
      b_.create<AddOp>(loc(stack + ".embed.sum"), activation(c.hiddenSize), tokens, positions);
  return layerNorm(stack + ".embed.norm", stack + ".layernorm_embedding", sum);
}

Value EncoderGraph::attend(const std::string &name, int64_t kvLayer, Value x, Value from,
                           Value positions, const std::string &q, const std::string &k,
                           const std::string &v, const std::string &o) {
  const HfModelConfig &c = config_;
  const int64_t width = c.numHeads * c.headDim;
  auto project = [&](const char *part, const std::string &source, Value in) {
    return linear(name + "." + part, tensor(source) + ".weight", in, width,
                  tensor(source) + ".bias");
  };
  auto i64 = [&](int64_t value) { return b_.getI64IntegerAttr(value); };
  auto f32 = [&](double value) { return b_.getF32FloatAttr(static_cast<float>(value)); };
  // rope_kv_write takes q, k and v of one input (fuse-qkv makes them one linear): cross-attention
  // writes `from`'s keys and values with `from`'s own query projection beside them, unused, and
  // attends with `x`'s queries (rotation by angle 0 is the identity, so they need no rotating).
  Value stored = b_.create<RopeKvWriteOp>(
      loc(name + ".kv_write"), activation(width),
      mlir::ValueRange{project("q", q, from), project("k", k, from), project("v", v, from)},
      positions_, slotMapping_, zeroFrequencies_, Value(), Value(), Value(), Value(), i64(kvLayer),
      i64(c.numHeads), i64(c.numHeads), i64(c.headDim), i64(c.headDim),
      i64(static_cast<int64_t>(RopeMode::kStatic)), i64(0), f32(0), b_.getF64FloatAttr(1.0), f32(1),
      f32(0));
  Value queries = x == from ? stored : project("cross_q", q, x);
  Value attended = b_.create<AttentionOp>(
      loc(name + ".attention"), activation(width), queries, positions, queryStartLoc_, contextLens_,
      blockTables_, i64(kvLayer), i64(c.numHeads), i64(c.numHeads), i64(c.headDim),
      f32(1.0 / std::sqrt(static_cast<double>(c.headDim))), i64(0), f32(0));
  return linear(name + ".o", tensor(o) + ".weight", attended, c.hiddenSize, tensor(o) + ".bias");
}

Value EncoderGraph::postNorm(const std::string &name, const std::string &norm, Value x,
                             Value residual) {
  Value sum = b_.create<AddOp>(loc(name + ".residual"), x.getType(), x, residual);
  return layerNorm(name + ".norm", norm, sum);
}

Value EncoderGraph::mlp(const std::string &name, const LayerNames &n, int64_t layer, Value x) {
  const HfModelConfig &c = config_;
  const std::string up = tensor(forLayer(n.up, layer)), down = tensor(forLayer(n.down, layer));
  Value inner = linear(name + ".up", up + ".weight", x, c.intermediateSize, up + ".bias");
  inner = b_.create<GeluOp>(loc(name + ".gelu"), inner.getType(), inner);
  return linear(name + ".down", down + ".weight", inner, c.hiddenSize, down + ".bias");
}

// Bidirectional self-attention and the MLP, each followed by LayerNorm(x + residual).
Value EncoderGraph::encoderLayer(const LayerNames &n, int64_t layer, Value hidden) {
  const std::string name = "layers." + std::to_string(layer);
  auto at = [&](const std::string &s) { return forLayer(s, layer); };
  Value a = attend(name + ".attn", layer, hidden, hidden, lastPositions_, at(n.q), at(n.k), at(n.v),
                   at(n.o));
  hidden = postNorm(name + ".attn", at(n.attentionNorm), a, hidden);
  return postNorm(name + ".mlp", at(n.mlpNorm), mlp(name + ".mlp", n, layer, hidden), hidden);
}

// Causal self-attention, bidirectional cross-attention over the encoder's output, the MLP; KV
// layers after the encoder's: the self-attention's, then the cross-attention's.
Value EncoderGraph::decoderLayer(const LayerNames &n, int64_t layer, Value hidden, Value encoded) {
  const HfModelConfig &c = config_;
  const std::string name = "decoder.layers." + std::to_string(layer);
  auto at = [&](const std::string &s) { return forLayer(s, layer); };
  Value a = attend(name + ".attn", c.numLayers + layer, hidden, hidden, positions_, at(n.q),
                   at(n.k), at(n.v), at(n.o));
  hidden = postNorm(name + ".attn", at(n.attentionNorm), a, hidden);
  Value x = attend(name + ".cross", c.numLayers + c.decoderLayers + layer, hidden, encoded,
                   lastPositions_, at(n.crossQ), at(n.crossK), at(n.crossV), at(n.crossO));
  hidden = postNorm(name + ".cross", at(n.crossNorm), x, hidden);
  return postNorm(name + ".mlp", at(n.mlpNorm), mlp(name + ".mlp", n, layer, hidden), hidden);
}

void EncoderGraph::defineInputs() {
  tokenIds_ = stepInput(StepInputKind::TokenIds);
  positions_ = stepInput(StepInputKind::Positions);
  slotMapping_ = stepInput(StepInputKind::SlotMapping);
  queryStartLoc_ = stepInput(StepInputKind::QueryStartLoc);
  contextLens_ = stepInput(StepInputKind::ContextLens);
  blockTables_ = stepInput(StepInputKind::BlockTables);
  lastPositions_ = stepInput(StepInputKind::LastPositions);
  if (config_.decoderLayers > 0)
    shiftedTokenIds_ = stepInput(StepInputKind::ShiftedTokenIds);
  logitsIndices_ = stepInput(StepInputKind::LogitsIndices);
  RopeTables none;
  none.invFreq.assign(config_.headDim / 2, 0.0f);
  zeroFrequencies_ = ropeFrequencies(none, "rope.inv_freq");
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
  defineInputs();
  const bool bart = c.decoderLayers > 0;
  const LayerNames encoderNames = bart ? bartNames("encoder") : bertNames();
  Value hidden = bart ? bartEmbeddings("encoder", tokenIds_) : bertEmbeddings();
  for (int64_t l = 0; l < c.numLayers; ++l)
    hidden = encoderLayer(encoderNames, l, hidden);
  if (bart) { // the decoder's last hidden state is BartModel's output
    const Value encoded = hidden;
    hidden = bartEmbeddings("decoder", shiftedTokenIds_);
    for (int64_t l = 0; l < c.decoderLayers; ++l)
      hidden = decoderLayer(bartNames("decoder"), l, hidden, encoded);
  }
  Value rows =
      b_.create<GatherRowsOp>(loc("output_rows"), hidden.getType(), hidden, logitsIndices_);
  b_.create<mlir::func::ReturnOp>(loc("return"), rows);
  if (failed(mlir::verify(*module)))
    return mlir::failure();
  return module;
}

} // namespace

EncoderLayout headPrefixLayout(const BuildOptions &options, const std::string &prefix,
                               const std::string &probe) {
  EncoderLayout layout;
  if (options.hasTensor && options.hasTensor(prefix + probe))
    layout.prefix = prefix;
  return layout;
}

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
