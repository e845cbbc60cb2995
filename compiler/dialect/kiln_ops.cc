// Shape verifiers of the kiln ops and the activation queries shared by passes and emission.
// Verifiers run after every pass (the pass manager's verifier), so a fusion that gets a width
// wrong fails at the pass that did it, with the op and both numbers in the message.
#include "compiler/dialect/kiln_dialect.h"

#include "mlir/IR/Builders.h"

#include <cstdint>
#include <limits>

namespace kiln::compiler {
namespace {

using mlir::failure;
using mlir::FailureOr;
using mlir::LogicalResult;
using mlir::RankedTensorType;
using mlir::success;
using mlir::Value;

RankedTensorType tensorType(Value value) {
  return mlir::cast<RankedTensorType>(value.getType());
}

// An activation is [rows, n]: rows dynamic (scales with the step), n static.
FailureOr<int64_t> activationWidth(mlir::Operation *op, Value value, llvm::StringRef what) {
  RankedTensorType type = tensorType(value);
  if (type.getRank() != 2 || !type.isDynamicDim(0) || type.isDynamicDim(1)) {
    op->emitOpError() << what << " must be a [?, n] tensor (dynamic rows, static width), got "
                      << type;
    return failure();
  }
  return type.getDimSize(1);
}

// A static [n] vector (norm weights, biases, inv_freq). Returns n.
FailureOr<int64_t> vectorSize(mlir::Operation *op, Value value, llvm::StringRef what) {
  RankedTensorType type = tensorType(value);
  if (type.getRank() != 1 || !type.hasStaticShape()) {
    op->emitOpError() << what << " must be a static [n] tensor, got " << type;
    return failure();
  }
  return type.getDimSize(0);
}

LogicalResult expectRank(mlir::Operation *op, Value value, int64_t rank, llvm::StringRef what) {
  if (tensorType(value).getRank() != rank)
    return op->emitOpError() << what << " must have rank " << rank << ", got " << value.getType();
  return success();
}

LogicalResult expectWidth(mlir::Operation *op, Value value, int64_t width, llvm::StringRef what,
                          llvm::StringRef expected) {
  FailureOr<int64_t> actual = activationWidth(op, value, what);
  if (failed(actual))
    return failure();
  if (*actual != width)
    return op->emitOpError() << what << " width " << *actual << " must equal " << expected << " ("
                             << width << ")";
  return success();
}

// Shared by rope_kv_write and attention: GQA needs whole groups of query heads per KV head.
LogicalResult verifyHeads(mlir::Operation *op, int64_t heads, int64_t kvHeads, int64_t headDim) {
  if (heads <= 0 || kvHeads <= 0 || headDim <= 0)
    return op->emitOpError() << "num_heads (" << heads << "), num_kv_heads (" << kvHeads
                             << ") and head_dim (" << headDim << ") must be positive";
  if (heads % kvHeads != 0)
    return op->emitOpError() << "num_heads (" << heads << ") must be a multiple of num_kv_heads ("
                             << kvHeads << ")";
  return success();
}

LogicalResult verifySameActivation(mlir::Operation *op) {
  mlir::Type type = op->getResult(0).getType();
  if (failed(activationWidth(op, op->getResult(0), "result")))
    return failure();
  for (Value operand : op->getOperands())
    if (operand.getType() != type)
      return op->emitOpError() << "operand type " << operand.getType()
                               << " must equal the result type " << type;
  return success();
}

} // namespace

LogicalResult WeightOp::verify() {
  if (getSources().empty())
    return emitOpError() << "'" << getName() << "' needs at least one checkpoint source";
  mlir::Type dtype = getDtype();
  if (!dtype.isF32() && !dtype.isF16() && !dtype.isBF16())
    return emitOpError() << "'" << getName() << "' dtype must be f32, f16 or bf16, got " << dtype;
  RankedTensorType type = tensorType(getResult());
  if (!type.hasStaticShape() || type.getRank() < 1 || type.getRank() > 2)
    return emitOpError() << "'" << getName() << "' must have a static rank-1 or rank-2 shape, got "
                         << type;
  if (!getQuant() && !getGroupSize())
    return success();
  std::optional<QuantFormat> format = getQuant() ? parseQuantFormat(*getQuant()) : std::nullopt;
  if (!format || !getGroupSize() || type.getRank() != 2 ||
      !validQuantGroup(type.getDimSize(1), *getGroupSize() ? *getGroupSize() : type.getDimSize(1)))
    return emitOpError()
           << "'" << getName()
           << "': quant must be Q8, Q4, Q4M, Q4Z or Q8F with a group_size that is a multiple "
              "of 32 and divides the columns of a rank-2 weight (0: one group per "
              "row, columns a multiple of 32), got "
           << (getQuant() ? getQuant()->str() : "none") << " / "
           << (getGroupSize() ? *getGroupSize() : 0) << " on " << type;
  return success();
}

std::optional<WeightQuant> weightQuant(WeightOp weight) {
  if (!weight.getQuant() || !weight.getGroupSize())
    return std::nullopt;
  std::optional<QuantFormat> format = parseQuantFormat(*weight.getQuant());
  if (!format)
    return std::nullopt;
  return WeightQuant{*format, *weight.getGroupSize()};
}

void setWeightQuant(WeightOp weight, std::optional<WeightQuant> quant) {
  if (!quant) {
    weight.removeQuantAttr();
    weight.removeGroupSizeAttr();
    return;
  }
  mlir::Builder builder(weight.getContext());
  weight.setQuantAttr(builder.getStringAttr(quantFormatName(quant->format)));
  weight.setGroupSizeAttr(builder.getI64IntegerAttr(quant->groupSize));
}

LogicalResult ConstantOp::verify() {
  if (getValue().getType().getShape() != tensorType(getResult()).getShape())
    return emitOpError() << "'" << getName() << "' data shape " << getValue().getType()
                         << " must equal the result shape " << getResult().getType();
  return success();
}

LogicalResult StepInputOp::verify() {
  int64_t rank = getKind() == StepInputKind::BlockTables ? 2 : 1;
  return expectRank(*this, getResult(), rank, stringifyStepInputKind(getKind()));
}

LogicalResult EmbeddingOp::verify() {
  if (failed(expectRank(*this, getIds(), 1, "ids")))
    return failure();
  RankedTensorType table = tensorType(getTable());
  if (table.getRank() != 2 || !table.hasStaticShape())
    return emitOpError() << "table must be a static [vocab, hidden] tensor, got " << table;
  if (getVocabStart() < 0 || getVocabStart() > std::numeric_limits<int32_t>::max())
    return emitOpError() << "vocab_start must be in [0, 2^31), got " << getVocabStart();
  return expectWidth(*this, getResult(), table.getDimSize(1), "result", "the table's hidden size");
}

// RmsNorm and AddRmsNorm: the weight spans x's width and eps is positive.
static LogicalResult verifyNormWeight(mlir::Operation *op, Value x, Value w, llvm::APFloat eps) {
  FailureOr<int64_t> width = activationWidth(op, x, "x");
  FailureOr<int64_t> weight = vectorSize(op, w, "w");
  if (failed(width) || failed(weight))
    return failure();
  if (*width != *weight)
    return op->emitOpError() << "weight size " << *weight << " must equal x's width " << *width;
  if (eps.convertToFloat() <= 0.0f)
    return op->emitOpError() << "eps must be positive";
  return success();
}

LogicalResult RmsNormOp::verify() {
  if (getX().getType() != getResult().getType())
    return emitOpError() << "result type " << getResult().getType() << " must equal x's "
                         << getX().getType();
  return verifyNormWeight(*this, getX(), getW(), getEps());
}

LogicalResult LayerNormOp::verify() {
  if (getX().getType() != getResult().getType() || getW().getType() != getB().getType())
    return emitOpError() << "x and the result, w and b must have one type each";
  return verifyNormWeight(*this, getX(), getW(), getEps());
}

LogicalResult GeluOp::verify() {
  return verifySameActivation(*this);
}

LogicalResult SigmoidGatedAddOp::verify() {
  mlir::Type type = getResult().getType();
  if (failed(activationWidth(*this, getResult(), "result")))
    return failure();
  if (getA().getType() != type || getB().getType() != type || getX().getType() != type)
    return emitOpError() << "a, b and x must have the result's type " << type;
  const int64_t width = tensorType(getResult()).getDimSize(1);
  RankedTensorType w = tensorType(getW());
  if (w.getRank() != 2 || w.getDimSize(0) != 1 || w.getDimSize(1) != width)
    return emitOpError() << "w must be [1, " << width << "], got " << getW().getType();
  return success();
}

LogicalResult AddOp::verify() {
  return verifySameActivation(*this);
}
LogicalResult MulOp::verify() {
  return verifySameActivation(*this);
}
LogicalResult SiluOp::verify() {
  return verifySameActivation(*this);
}
LogicalResult GeluTanhOp::verify() {
  return verifySameActivation(*this);
}
LogicalResult SoftcapOp::verify() {
  if (!(getCap().convertToFloat() > 0.0f))
    return emitOpError() << "cap must be positive, got " << getCap().convertToFloat();
  return verifySameActivation(*this);
}

LogicalResult AddRmsNormOp::verify() {
  mlir::Type type = getX().getType();
  if (getResidual().getType() != type || getUpdatedResidual().getType() != type ||
      getNormed().getType() != type)
    return emitOpError() << "x, residual and both results must have one type, got x " << type
                         << " and residual " << getResidual().getType();
  return verifyNormWeight(*this, getX(), getW(), getEps());
}

LogicalResult LinearOp::verify() {
  FailureOr<int64_t> inFeatures = activationWidth(*this, getX(), "x");
  if (failed(inFeatures))
    return failure();
  RankedTensorType weight = tensorType(getW());
  if (weight.getRank() != 2 || !weight.hasStaticShape())
    return emitOpError() << "weight must be a static [out, in] tensor, got " << weight;
  if (weight.getDimSize(1) != *inFeatures)
    return emitOpError() << "in-features of x (" << *inFeatures << ") must equal weight dim 1 ("
                         << weight.getDimSize(1) << ")";
  int64_t outFeatures = weight.getDimSize(0);
  if (Value bias = getBias()) {
    FailureOr<int64_t> biasSize = vectorSize(*this, bias, "bias");
    if (failed(biasSize))
      return failure();
    if (*biasSize != outFeatures)
      return emitOpError() << "bias size " << *biasSize << " must equal weight dim 0 ("
                           << outFeatures << ")";
  }
  return expectWidth(*this, getResult(), outFeatures, "result", "weight dim 0");
}

// [gate | up] -> half its width: silu_mul and gelu_tanh_mul.
template <typename GatedOp> static LogicalResult verifyGated(GatedOp op) {
  FailureOr<int64_t> width = activationWidth(op, op.getGateUp(), "gate_up");
  if (failed(width))
    return failure();
  if (*width % 2 != 0)
    return op.emitOpError() << "gate_up width " << *width << " must be even ([gate | up])";
  return expectWidth(op, op.getResult(), *width / 2, "result", "half the gate_up width");
}

LogicalResult MoeExpertsOp::verify() {
  const int64_t experts = getNumExperts(), k = getTopK(), inter = getIntermediate();
  if (experts <= 0 || k <= 0 || k > experts || inter <= 0)
    return emitOpError() << "needs num_experts > 0, 0 < top_k <= num_experts and intermediate > 0";
  FailureOr<int64_t> hidden = activationWidth(*this, getX(), "x");
  if (failed(hidden) ||
      failed(expectWidth(*this, getRouterLogits(), experts, "router_logits", "num_experts")) ||
      failed(expectWidth(*this, getResult(), *hidden, "result", "x's width")))
    return failure();
  RankedTensorType gateUp = tensorType(getGateUp()), down = tensorType(getDown());
  if (gateUp.getShape() != llvm::ArrayRef<int64_t>{experts * 2 * inter, *hidden} ||
      down.getShape() != llvm::ArrayRef<int64_t>{experts * *hidden, inter})
    return emitOpError() << "gate_up must be [num_experts * 2 * intermediate, hidden] and down "
                            "[num_experts * hidden, intermediate], got "
                         << gateUp << " and " << down;
  return success();
}

LogicalResult GeluTanhMulOp::verify() {
  return verifyGated(*this);
}

LogicalResult SiluMulOp::verify() {
  return verifyGated(*this);
}

// q_norm and k_norm come together, with a positive eps, as [head_dim] vectors.
static LogicalResult verifyQkNorm(RopeKvWriteOp op, int64_t headDim) {
  const bool norm = static_cast<bool>(op.getQNorm());
  if (norm != static_cast<bool>(op.getKNorm()))
    return op.emitOpError() << "takes q_norm and k_norm together";
  if (norm != (op.getQkNormEps().convertToFloat() > 0.0f))
    return op.emitOpError() << "qk_norm_eps must be positive exactly when q_norm is given";
  for (Value weight : {op.getQNorm(), op.getKNorm()}) {
    if (!weight)
      continue;
    FailureOr<int64_t> size = vectorSize(op, weight, "q_norm/k_norm");
    if (failed(size))
      return failure();
    if (*size != headDim)
      return op.emitOpError() << "q_norm/k_norm size " << *size << " must equal head_dim "
                              << headDim;
  }
  return success();
}

LogicalResult RopeKvWriteOp::verify() {
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads(), headDim = getHeadDim();
  if (failed(verifyHeads(*this, heads, kvHeads, headDim)))
    return failure();
  int64_t rotaryDim = getRotaryDim();
  if (rotaryDim <= 0 || rotaryDim % 2 != 0 || rotaryDim > headDim)
    return emitOpError() << "rotary_dim (" << rotaryDim << ") must be even and in [2, head_dim ("
                         << headDim << ")]";
  mlir::ValueRange qkv = getQkv();
  if (qkv.size() == 1) {
    if (failed(expectWidth(*this, qkv[0], (heads + 2 * kvHeads) * headDim, "qkv",
                           "(num_heads + 2 * num_kv_heads) * head_dim")))
      return failure();
  } else if (qkv.size() == 3) {
    if (failed(expectWidth(*this, qkv[0], heads * headDim, "q", "num_heads * head_dim")) ||
        failed(expectWidth(*this, qkv[1], kvHeads * headDim, "k", "num_kv_heads * head_dim")) ||
        failed(expectWidth(*this, qkv[2], kvHeads * headDim, "v", "num_kv_heads * head_dim")))
      return failure();
  } else {
    return emitOpError() << "takes 1 fused qkv operand or 3 (q, k, v), got " << qkv.size();
  }
  if (failed(expectRank(*this, getPositions(), 1, "positions")) ||
      failed(expectRank(*this, getSlotMapping(), 1, "slot_mapping")))
    return failure();
  FailureOr<int64_t> invFreq = vectorSize(*this, getInvFreq(), "inv_freq");
  if (failed(invFreq))
    return failure();
  const int64_t mode = getRopeMode();
  if (mode < 0 || mode > 2)
    return emitOpError() << "rope_mode " << mode << " must be 0 (static), 1 (long/short) or 2 "
                         << "(dynamic NTK)";
  const int64_t tables = mode == 1 ? 2 : 1;
  if (*invFreq != tables * (rotaryDim / 2))
    return emitOpError() << "inv_freq size " << *invFreq << " must equal "
                         << (tables == 2 ? "2 x " : "") << "rotary_dim / 2 (" << rotaryDim / 2
                         << ")";
  if ((mode != 0) != static_cast<bool>(getQueryStartLoc()) ||
      static_cast<bool>(getQueryStartLoc()) != static_cast<bool>(getSequenceLengths()))
    return emitOpError() << "reads query_start_loc and sequence_lengths exactly when rope_mode "
                            "is not 0";
  if (mode != 0 && getOriginalMaxPositions() <= 0)
    return emitOpError() << "rope_mode " << mode << " needs original_max_positions > 0";
  if (!(getAttentionScaling().convertToFloat() > 0.0f))
    return emitOpError() << "attention_scaling must be positive";
  if (failed(verifyQkNorm(*this, headDim)))
    return failure();
  return expectWidth(*this, getQ(), heads * headDim, "result", "num_heads * head_dim");
}

LogicalResult AttentionOp::verify() {
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads(), headDim = getHeadDim();
  if (failed(verifyHeads(*this, heads, kvHeads, headDim)))
    return failure();
  if (failed(expectWidth(*this, getQ(), heads * headDim, "q", "num_heads * head_dim")))
    return failure();
  if (getResult().getType() != getQ().getType())
    return emitOpError() << "result type " << getResult().getType() << " must equal q's "
                         << getQ().getType();
  if (failed(expectRank(*this, getPositions(), 1, "positions")) ||
      failed(expectRank(*this, getQueryStartLoc(), 1, "query_start_loc")) ||
      failed(expectRank(*this, getContextLens(), 1, "context_lens")) ||
      failed(expectRank(*this, getBlockTables(), 2, "block_tables")))
    return failure();
  if (!(getScale().convertToFloat() > 0.0f))
    return emitOpError() << "scale must be positive";
  if (getSlidingWindow() < 0)
    return emitOpError() << "sliding_window " << getSlidingWindow()
                         << " must be 0 (full attention) or positive";
  return success();
}

LogicalResult GatherRowsOp::verify() {
  FailureOr<int64_t> width = activationWidth(*this, getX(), "x");
  if (failed(width) || failed(expectRank(*this, getIndices(), 1, "indices")))
    return failure();
  return expectWidth(*this, getResult(), *width, "result", "x's width");
}

LogicalResult AllReduceOp::verify() {
  return verifySameActivation(*this);
}

LogicalResult AllGatherOp::verify() {
  FailureOr<int64_t> in = activationWidth(*this, getX(), "x");
  FailureOr<int64_t> out = activationWidth(*this, getResult(), "result");
  if (failed(in) || failed(out))
    return failure();
  if (*out < *in)
    return emitOpError() << "result width " << *out << " must be at least x's width " << *in
                         << " (one shard per rank)";
  return success();
}

bool isActivation(Value value) {
  mlir::Operation *def = value.getDefiningOp();
  if (!def || !llvm::isa<KilnDialect>(def->getDialect()))
    return false;
  return !mlir::isa<WeightOp, ConstantOp, StepInputOp>(def);
}

Rows stepInputRows(StepInputKind kind) {
  switch (kind) {
  case StepInputKind::QueryStartLoc:
  case StepInputKind::ContextLens:
  case StepInputKind::BlockTables:
  case StepInputKind::SequenceLengths:
    return Rows::kSequences;
  case StepInputKind::LogitsIndices:
    return Rows::kLogits;
  default:
    return Rows::kTokens;
  }
}

mlir::Operation *gateActivation(MulOp mul, Value &other) {
  for (auto [side, rest] : {std::pair{mul.getLhs(), mul.getRhs()}, {mul.getRhs(), mul.getLhs()}}) {
    mlir::Operation *def = side.getDefiningOp();
    if (def && mlir::isa<SiluOp, GeluTanhOp>(def)) {
      other = rest;
      return def;
    }
  }
  return nullptr;
}

Rows rowsOf(Value value) {
  // Rows flow from an op's first operand (x, ids, q, ...), except gather_rows, whose rows are its
  // indices'. Iterative: a deep model's chain is thousands of ops long.
  while (true) {
    mlir::Operation *def = value.getDefiningOp();
    if (!def || mlir::isa<WeightOp, ConstantOp>(def))
      return Rows::kFixed;
    if (auto input = mlir::dyn_cast<StepInputOp>(def))
      return stepInputRows(input.getKind());
    if (auto gather = mlir::dyn_cast<GatherRowsOp>(def)) {
      value = gather.getIndices();
      continue;
    }
    if (def->getNumOperands() == 0)
      return Rows::kFixed;
    value = def->getOperand(0);
  }
}

std::string opName(mlir::Operation *op) {
  mlir::Location loc = op->getLoc();
  if (auto fused = mlir::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location part : fused.getLocations())
      if (mlir::isa<mlir::NameLoc>(part)) {
        loc = part;
        break;
      }
  if (auto name = mlir::dyn_cast<mlir::NameLoc>(loc))
    return name.getName().str();
  return "";
}

mlir::Location namedLoc(mlir::MLIRContext *context, llvm::StringRef name) {
  return mlir::NameLoc::get(mlir::StringAttr::get(context, name));
}

} // namespace kiln::compiler
