// The step program: buffers and ops of one rank. Buffers are created the first time a value is
// seen while walking @step, so the buffer table follows program order and is deterministic.
#include "compiler/emit/plan_emitter.h"

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/emit/activation_dtype.h"
#include "compiler/emit/plan_header.h"
#include "compiler/emit/weight_sources.h"
#include "compiler/transforms/passes.h"
#include "runtime/ops/op_table.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstring>

namespace kiln::compiler {
namespace {

using mlir::failure;
using mlir::LogicalResult;
using mlir::success;
using mlir::Value;

schema::RowScale toRowScale(Rows rows) {
  switch (rows) {
  case Rows::kTokens:
    return schema::RowScale::Tokens;
  case Rows::kSequences:
    return schema::RowScale::Sequences;
  case Rows::kLogits:
    return schema::RowScale::Logits;
  case Rows::kFixed:
    break;
  }
  return schema::RowScale::Fixed;
}

class StepEmitter {
public:
  StepEmitter(std::shared_ptr<const Checkpoint> checkpoint, const EmitOptions &options)
      : checkpoint_(std::move(checkpoint)), options_(options) {}

  LogicalResult run(mlir::func::FuncOp step, uint32_t rankIndex, schema::RankT &rank,
                    std::vector<rt::WeightSource> &weights);

private:
  LogicalResult defineBuffers(mlir::Operation *op);
  uint32_t addBuffer(std::unique_ptr<schema::BufferT> buffer);
  void defineWeight(WeightOp weight);
  void defineConstant(ConstantOp constant);
  void defineStepInput(StepInputOp input);
  LogicalResult defineActivation(mlir::Operation *op, unsigned resultIndex);
  LogicalResult emitOp(mlir::Operation *op);
  LogicalResult lookup(mlir::Operation *op, mlir::ValueRange values, std::vector<uint32_t> &out);

  std::shared_ptr<const Checkpoint> checkpoint_;
  const EmitOptions &options_;
  schema::RankT *rank_ = nullptr;
  std::vector<rt::WeightSource> *weights_ = nullptr;
  llvm::DenseMap<Value, uint32_t> bufferOf_;
  int32_t inPlaceInput_ = -1; // of the op being emitted (OpEntry::inPlaceInput)
};

uint32_t StepEmitter::addBuffer(std::unique_ptr<schema::BufferT> buffer) {
  rank_->buffers.push_back(std::move(buffer));
  return static_cast<uint32_t>(rank_->buffers.size() - 1);
}

void StepEmitter::defineWeight(WeightOp weight) {
  auto type = mlir::cast<mlir::RankedTensorType>(weight.getType());
  auto buffer = std::make_unique<schema::BufferT>();
  buffer->name = weight.getName().str();
  buffer->kind = schema::BufferKind::Weight;
  std::optional<WeightQuant> quant = weightQuant(weight);
  buffer->dtype = quant ? quantDType(quant->format) : storedDType(weight.getDtype());
  // Per-row scales (group 0) are one group of the weight's (or its shard's) columns.
  buffer->group_size =
      quant ? static_cast<uint32_t>(quant->groupSize ? quant->groupSize : type.getDimSize(1)) : 0;
  buffer->shape.assign(type.getShape().begin(), type.getShape().end());
  buffer->rows = schema::RowScale::Fixed;
  buffer->weight = static_cast<int32_t>(weights_->size());
  rt::WeightSource source;
  source.name = buffer->name;
  source.dtype = buffer->dtype;
  source.shape = buffer->shape;
  source.groupSize = buffer->group_size;
  std::vector<std::string> parts;
  for (mlir::Attribute attr : weight.getSources())
    parts.push_back(mlir::cast<mlir::StringAttr>(attr).str());
  source.produce = [checkpoint = checkpoint_, parts, quant,
                    dtype = buffer->dtype](std::vector<uint8_t> &bytes) {
    if (quant)
      return produceQuantizedWeightBytes(*checkpoint, parts, *quant, bytes);
    return produceWeightBytes(*checkpoint, parts, dtype, bytes);
  };
  weights_->push_back(std::move(source));
  bufferOf_[weight.getResult()] = addBuffer(std::move(buffer));
}

void StepEmitter::defineConstant(ConstantOp constant) {
  auto buffer = std::make_unique<schema::BufferT>();
  buffer->name = constant.getName().str();
  buffer->kind = schema::BufferKind::Weight;
  buffer->dtype = schema::DType::F32;
  auto shape = constant.getValue().getType().getShape();
  buffer->shape.assign(shape.begin(), shape.end());
  buffer->rows = schema::RowScale::Fixed;
  buffer->weight = static_cast<int32_t>(weights_->size());
  std::vector<float> values(constant.getValue().getValues<float>().begin(),
                            constant.getValue().getValues<float>().end());
  rt::WeightSource source{buffer->name, buffer->dtype, buffer->shape,
                          [values](std::vector<uint8_t> &bytes) {
                            bytes.resize(values.size() * sizeof(float));
                            std::memcpy(bytes.data(), values.data(), bytes.size());
                            return okStatus();
                          }};
  weights_->push_back(std::move(source));
  bufferOf_[constant.getResult()] = addBuffer(std::move(buffer));
}

void StepEmitter::defineStepInput(StepInputOp input) {
  uint64_t tokens = options_.maxTokensPerStep, batch = options_.maxBatch;
  uint64_t blocksPerSeq = (options_.maxSeqLen + options_.kvBlockSize - 1) / options_.kvBlockSize;
  auto buffer = std::make_unique<schema::BufferT>();
  buffer->name = "step." + stringifyStepInputKind(input.getKind()).str();
  if (input.getKvGroup() > 0)
    buffer->name += "." + std::to_string(input.getKvGroup());
  buffer->kv_group = static_cast<uint32_t>(input.getKvGroup());
  buffer->kind = schema::BufferKind::StepInput;
  buffer->dtype = schema::DType::I32;
  buffer->rows = toRowScale(stepInputRows(input.getKind()));
  buffer->step_input = static_cast<schema::StepInputKind>(input.getKind());
  switch (input.getKind()) {
  case StepInputKind::QueryStartLoc:
    buffer->shape = {batch + 1};
    break;
  case StepInputKind::ContextLens:
  case StepInputKind::SequenceLengths:
    buffer->shape = {batch};
    break;
  case StepInputKind::BlockTables:
    buffer->shape = {batch, blocksPerSeq};
    break;
  default:
    buffer->shape = {tokens};
    break;
  }
  uint64_t elements = 1;
  for (uint64_t dim : buffer->shape)
    elements *= dim;
  buffer->size_bytes = elements * sizeof(int32_t);
  bufferOf_[input.getResult()] = addBuffer(std::move(buffer));
}

LogicalResult StepEmitter::defineActivation(mlir::Operation *op, unsigned resultIndex) {
  Value result = op->getResult(resultIndex);
  if (inPlaceInput_ >= 0 && resultIndex == 0) {
    // The op table entry says output 0 is an input updated in place (AddRmsNorm's residual).
    bufferOf_[result] = bufferOf_.lookup(op->getOperand(static_cast<unsigned>(inPlaceInput_)));
    return success();
  }
  auto offsets = op->getAttrOfType<mlir::DenseI64ArrayAttr>(kArenaOffsetsAttr);
  if (!offsets || offsets.size() != static_cast<int64_t>(op->getNumResults()) ||
      offsets[resultIndex] < 0)
    return op->emitOpError() << "has no arena offset: run plan-memory before emission";
  auto type = mlir::cast<mlir::RankedTensorType>(result.getType());
  auto buffer = std::make_unique<schema::BufferT>();
  buffer->name = opName(op);
  if (buffer->name.empty())
    buffer->name = op->getName().stripDialect().str() + "." + std::to_string(rank_->buffers.size());
  buffer->kind = schema::BufferKind::Activation;
  // The same rule plan-memory sized the arena range with.
  mlir::Type storage = activationStorageType(result);
  buffer->dtype = storedDType(storage);
  buffer->rows = toRowScale(rowsOf(result));
  // The same rows plan-memory sized the range with (max logits rows downstream of gather_rows).
  const int64_t rows = rowsOf(result) == Rows::kLogits && options_.maxLogitsPerStep > 0
                           ? options_.maxLogitsPerStep
                           : options_.maxTokensPerStep;
  buffer->shape = {static_cast<uint64_t>(rows), static_cast<uint64_t>(type.getDimSize(1))};
  buffer->arena_offset = static_cast<uint64_t>(offsets[resultIndex]);
  buffer->size_bytes =
      buffer->shape[0] * buffer->shape[1] * static_cast<uint64_t>(storageBytes(storage));
  bufferOf_[result] = addBuffer(std::move(buffer));
  return success();
}

LogicalResult StepEmitter::defineBuffers(mlir::Operation *op) {
  if (auto weight = mlir::dyn_cast<WeightOp>(op))
    defineWeight(weight);
  else if (auto constant = mlir::dyn_cast<ConstantOp>(op))
    defineConstant(constant);
  else if (auto input = mlir::dyn_cast<StepInputOp>(op))
    defineStepInput(input);
  else
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      if (failed(defineActivation(op, i)))
        return failure();
  return success();
}

LogicalResult StepEmitter::lookup(mlir::Operation *op, mlir::ValueRange values,
                                  std::vector<uint32_t> &out) {
  for (Value value : values) {
    auto it = bufferOf_.find(value);
    if (it == bufferOf_.end())
      return op->emitOpError() << "reads a value that has no buffer";
    out.push_back(it->second);
  }
  return success();
}

// The op table entry named by the kiln op (kiln.<name>) packs its attributes into the plan's
// params; inputs are the op's operands in ODS order, which is plan.fbs's order.
LogicalResult StepEmitter::emitOp(mlir::Operation *op) {
  if (mlir::isa<WeightOp, ConstantOp, StepInputOp, mlir::func::ReturnOp>(op))
    return success();
  const rt::OpEntry *entry = rt::findOp(op->getName().stripDialect().str());
  if (!entry || !entry->packParams)
    return op->emitOpError() << "has no plan op: the fusion passes (fuse-qkv, fuse-gate-up) "
                                "must run before emission";
  rt::OpParamValues values;
  values.numInputs = op->getNumOperands();
  for (mlir::NamedAttribute attr : op->getAttrs()) {
    if (auto integer = mlir::dyn_cast<mlir::IntegerAttr>(attr.getValue()))
      values.set(attr.getName().str(), static_cast<double>(integer.getInt()));
    else if (auto real = mlir::dyn_cast<mlir::FloatAttr>(attr.getValue()))
      values.set(attr.getName().str(), real.getValueAsDouble());
    else if (auto flag = mlir::dyn_cast<mlir::BoolAttr>(attr.getValue()))
      values.set(attr.getName().str(), flag.getValue() ? 1.0 : 0.0);
  }
  auto planOp = std::make_unique<schema::OpT>();
  planOp->name = opName(op);
  Status packed = entry->packParams(values, planOp->params);
  if (!packed.isOk())
    return op->emitOpError() << packed.message();
  inPlaceInput_ = entry->inPlaceInput;
  if (failed(defineBuffers(op)) || failed(lookup(op, op->getOperands(), planOp->inputs)) ||
      failed(lookup(op, op->getResults(), planOp->outputs)))
    return failure();
  planOp->grid = std::make_unique<schema::GridRuleT>();
  planOp->grid->x_rows = rank_->buffers[planOp->outputs.front()]->rows;
  rank_->program.push_back(std::move(planOp));
  return success();
}

LogicalResult StepEmitter::run(mlir::func::FuncOp step, uint32_t rankIndex, schema::RankT &rank,
                               std::vector<rt::WeightSource> &weights) {
  rank_ = &rank;
  weights_ = &weights;
  auto planned = step->getAttrOfType<mlir::IntegerAttr>(kPlannedRowsAttr);
  auto arenaBytes = step->getAttrOfType<mlir::IntegerAttr>(kArenaBytesAttr);
  if (!planned || !arenaBytes)
    return step.emitError() << "@step has no memory plan: run plan-memory before emission";
  if (planned.getInt() != options_.maxTokensPerStep)
    return step.emitError() << "memory was planned for " << planned.getInt()
                            << " rows but --max-tokens-per-step is " << options_.maxTokensPerStep;
  auto plannedLogits = step->getAttrOfType<mlir::IntegerAttr>(kPlannedLogitsRowsAttr);
  const int64_t logitsRows =
      options_.maxLogitsPerStep > 0 ? options_.maxLogitsPerStep : options_.maxTokensPerStep;
  if (!plannedLogits || plannedLogits.getInt() != logitsRows)
    return step.emitError() << "memory was planned for "
                            << (plannedLogits ? plannedLogits.getInt() : 0)
                            << " logits rows but --max-logits-per-step is " << logitsRows;
  rank.rank = rankIndex;
  rank.arena_bytes = static_cast<uint64_t>(arenaBytes.getInt());
  for (mlir::Operation &op : step.getBody().front()) {
    bool isLeaf = mlir::isa<WeightOp, ConstantOp, StepInputOp>(op);
    if (failed(isLeaf ? defineBuffers(&op) : emitOp(&op)))
      return failure();
    if (auto ret = mlir::dyn_cast<mlir::func::ReturnOp>(op)) {
      if (ret.getNumOperands() != 1 || !bufferOf_.count(ret.getOperand(0)))
        return ret.emitOpError() << "@step must return exactly one value, the logits";
      rank.logits = bufferOf_.lookup(ret.getOperand(0));
    }
  }
  return success();
}

} // namespace

mlir::FailureOr<rt::ArtifactContents>
emitArtifactContents(llvm::ArrayRef<mlir::ModuleOp> rankModules, const HfModelConfig &config,
                     std::shared_ptr<const Checkpoint> checkpoint, const EmitOptions &options) {
  if (rankModules.empty())
    return failure();
  mlir::ModuleOp first = rankModules[0];
  if (static_cast<int64_t>(rankModules.size()) != options.tp)
    return first.emitError() << "tp is " << options.tp << " but " << rankModules.size()
                             << " rank module(s) were given";
  rt::ArtifactContents contents;
  if (failed(fillPlanHeader(first, config, *checkpoint, options, contents.plan)))
    return failure();
  for (size_t r = 0; r < rankModules.size(); ++r) {
    mlir::ModuleOp module = rankModules[r];
    auto step = module.lookupSymbol<mlir::func::FuncOp>("step");
    if (!step || step.getBody().empty())
      return module.emitError() << "the module of rank " << r << " has no func.func @step to emit";
    auto rank = std::make_unique<schema::RankT>();
    contents.rankWeights.emplace_back();
    if (failed(StepEmitter(checkpoint, options)
                   .run(step, static_cast<uint32_t>(r), *rank, contents.rankWeights[r])))
      return failure();
    contents.plan.ranks.push_back(std::move(rank));
  }
  contents.extraFiles = extraModelFiles(options.modelDir);
  return contents;
}

mlir::FailureOr<rt::ArtifactContents>
emitArtifactContents(mlir::ModuleOp module, const HfModelConfig &config,
                     std::shared_ptr<const Checkpoint> checkpoint, const EmitOptions &options) {
  return emitArtifactContents(llvm::ArrayRef<mlir::ModuleOp>(module), config, std::move(checkpoint),
                              options);
}

} // namespace kiln::compiler
