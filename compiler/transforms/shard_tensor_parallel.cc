// shard-tensor-parallel: rewrites the UNFUSED step graph into rank `rank`'s share of a `tp`-way
// tensor-parallel step (Megatron-style):
//   - q/k/v linears are column-parallel: the rank keeps query heads [r*H/tp, (r+1)*H/tp) and KV
//     heads [r*KV/tp, ...), so rope_kv_write and attention run on whole local heads and the rank's
//     KV cache holds only its KV heads;
//   - gate/up linears are column-parallel over the intermediate dim (silu or gelu_tanh, and mul,
//     stay local); a mixture-of-experts layer shards every expert's intermediate dim alike (its
//     router replicated) and all_reduces its output;
//   - o_proj and down_proj are row-parallel (the rank's slice of the input dim) and followed by an
//     all_reduce, so the residual stream stays replicated on every rank; a bias is added once, by
//     rank 0, before the sum;
//   - lm_head is vocab-parallel (ceil(V/tp) rows per rank, zero-padded at the end) followed by an
//     all_gather of the logits columns, because the sampler needs full rows;
//   - the embedding is vocab-parallel over the same rows: the rank looks up only ids in its range
//     (zero rows for the others) and an all_reduce sums them, so the table's memory is split too.
//     A tied table gives both the same rows, so the rank stores one tensor for both.
// Slices are written into the weights' source strings (compiler/dialect/source_slice.h), so it
// runs before the fusion passes, which concatenate sources without knowing about shards.
#include "compiler/dialect/kiln_dialect.h"
#include "compiler/dialect/source_slice.h"
#include "compiler/transforms/passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace kiln::compiler {
namespace {

using mlir::failure;
using mlir::LogicalResult;
using mlir::success;
using mlir::Value;

mlir::RankedTensorType activationType(mlir::MLIRContext *context, int64_t width) {
  return mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, width},
                                     mlir::Float32Type::get(context));
}

int64_t widthOf(Value value) {
  return mlir::cast<mlir::RankedTensorType>(value.getType()).getDimSize(1);
}

class Sharder {
public:
  Sharder(mlir::func::FuncOp step, int64_t rank, int64_t tp)
      : step_(step), rank_(rank), tp_(tp), b_(step.getContext()) {}

  LogicalResult run();

private:
  LogicalResult shardAttention(AttentionOp attention);
  LogicalResult shardMlp(MulOp mul);
  LogicalResult shardMoe(MoeExpertsOp moe);
  void reduceOnceAfter(SigmoidGatedAddOp add);
  mlir::FailureOr<Value> slicedExperts(MoeExpertsOp moe, Value weight, SourceSlice slice,
                                       llvm::ArrayRef<int64_t> shape);
  LogicalResult shardLmHead(mlir::func::ReturnOp ret);
  LogicalResult shardEmbedding(EmbeddingOp embedding);
  int64_t vocabShard(int64_t vocab) const { return (vocab + tp_ - 1) / tp_; }
  // Column-parallel: keep output features (weight rows) [begin, begin + count).
  LogicalResult shardOutputs(LinearOp linear, int64_t begin, int64_t count);
  // Row-parallel: keep input features (weight cols) [begin, begin + count), then all_reduce.
  LogicalResult shardInputsAndReduce(LinearOp linear, int64_t begin, int64_t count);
  mlir::FailureOr<Value> slicedWeight(mlir::Operation *user, Value weight, SourceSlice slice,
                                      llvm::ArrayRef<int64_t> shape);
  LogicalResult divisible(mlir::Operation *op, int64_t value, const char *field);

  mlir::func::FuncOp step_;
  int64_t rank_, tp_;
  mlir::OpBuilder b_;
  // A table shared by the embedding and lm_head (tied): the original and this rank's shard of it.
  Value tiedTable_, tiedShard_;
};

LogicalResult Sharder::divisible(mlir::Operation *op, int64_t value, const char *field) {
  if (value % tp_ == 0)
    return success();
  return op->emitOpError() << "--tp " << tp_ << " does not divide " << field << " (" << value
                           << "): every rank needs an equal whole share";
}

// A new kiln.weight reading `slice` of `weight`'s single source, used by `user` only (the other
// users of a shared weight keep the original until they are sharded too).
mlir::FailureOr<Value> Sharder::slicedWeight(mlir::Operation *user, Value weight, SourceSlice slice,
                                             llvm::ArrayRef<int64_t> shape) {
  auto op = weight.getDefiningOp<WeightOp>();
  if (!op || op.getSources().size() != 1)
    return user->emitOpError() << "shard-tensor-parallel needs plain single-source kiln.weight "
                                  "operands: run it before the fusion passes";
  std::optional<SourceSlice> source =
      parseSourceSlice(mlir::cast<mlir::StringAttr>(op.getSources()[0]).strref());
  // A part of a fused checkpoint tensor (compiler/models/decoder.h) is a row slice already: the
  // shard is a slice of that part.
  std::optional<SourceSlice> composed =
      source ? composeSourceSlices(*source, slice) : std::optional<SourceSlice>();
  if (!composed)
    return user->emitOpError() << "weight '" << op.getName()
                               << "' cannot be sharded again within its slice";
  slice = *composed;
  std::optional<WeightQuant> quant = weightQuant(op);
  // A row's groups must stay whole; per-row scales (group 0) hold for any share of the row that
  // the kernels' 32-column runs tile.
  const int64_t group = quant ? (quant->groupSize ? quant->groupSize : kQuantSubBlock) : 1;
  if (slice.colBegin % group != 0 || shape.back() % group != 0)
    return user->emitOpError() << "--tp " << tp_ << " splits the " << group
                               << "-column groups of quantized weight '" << op.getName()
                               << "': a rank's share of its columns (" << shape.back()
                               << ") must be a multiple of the group size";
  b_.setInsertionPoint(op);
  auto type = mlir::RankedTensorType::get(shape, b_.getF32Type());
  // A shared weight (the tied embedding table) keeps its name for its other users.
  mlir::StringAttr name =
      op->hasOneUse() ? op.getNameAttr() : b_.getStringAttr(opName(user) + ".weight");
  auto sharded =
      b_.create<WeightOp>(namedLoc(user->getContext(), name.str()), type, name,
                          b_.getStrArrayAttr({formatSourceSlice(slice)}), op.getDtypeAttr());
  setWeightQuant(sharded, quant);
  return sharded.getResult();
}

void replaceOperand(mlir::Operation *user, Value from, Value to) {
  user->replaceUsesOfWith(from, to);
  if (mlir::Operation *def = from.getDefiningOp(); def && def->use_empty())
    def->erase();
}

LogicalResult Sharder::shardOutputs(LinearOp linear, int64_t begin, int64_t count) {
  Value w = linear.getW();
  int64_t in = mlir::cast<mlir::RankedTensorType>(w.getType()).getDimSize(1);
  SourceSlice rows;
  rows.rowBegin = begin;
  rows.rowEnd = begin + count;
  auto weight = slicedWeight(linear, w, rows, {count, in});
  if (failed(weight))
    return failure();
  replaceOperand(linear, w, *weight);
  if (Value bias = linear.getBias()) {
    auto sharded = slicedWeight(linear, bias, rows, {count});
    if (failed(sharded))
      return failure();
    replaceOperand(linear, bias, *sharded);
  }
  linear.getResult().setType(activationType(linear.getContext(), count));
  return success();
}

LogicalResult Sharder::shardInputsAndReduce(LinearOp linear, int64_t begin, int64_t count) {
  Value w = linear.getW();
  int64_t out = mlir::cast<mlir::RankedTensorType>(w.getType()).getDimSize(0);
  SourceSlice cols;
  cols.colBegin = begin;
  cols.colEnd = begin + count;
  auto weight = slicedWeight(linear, w, cols, {out, count});
  if (failed(weight))
    return failure();
  replaceOperand(linear, w, *weight);
  // The sum over ranks would add a replicated bias tp times: only rank 0 keeps it.
  if (Value bias = linear.getBias(); bias && rank_ != 0) {
    linear.getBiasMutable().clear();
    if (mlir::Operation *def = bias.getDefiningOp(); def && def->use_empty())
      def->erase();
  }
  b_.setInsertionPointAfter(linear);
  std::string name = opName(linear) + ".all_reduce";
  auto reduce = b_.create<AllReduceOp>(namedLoc(linear.getContext(), name),
                                       linear.getResult().getType(), linear.getResult());
  linear.getResult().replaceAllUsesExcept(reduce.getResult(), reduce);
  return success();
}

LogicalResult Sharder::shardAttention(AttentionOp attention) {
  auto rope = attention.getQ().getDefiningOp<RopeKvWriteOp>();
  if (!rope || rope.getQkv().size() != 3 || !attention->hasOneUse())
    return attention.emitOpError() << "shard-tensor-parallel expects q from an unfused "
                                      "rope_kv_write(q, k, v) and one o_proj user: run it "
                                      "before the fusion passes";
  auto o = mlir::dyn_cast<LinearOp>(*attention->getUsers().begin());
  llvm::SmallVector<LinearOp, 3> qkv;
  for (Value part : rope.getQkv())
    if (auto linear = part.getDefiningOp<LinearOp>(); linear && linear->hasOneUse())
      qkv.push_back(linear);
  if (!o || o.getX() != attention.getResult() || qkv.size() != 3)
    return attention.emitOpError() << "expects q, k, v and o_proj to be single-use linears";
  int64_t heads = rope.getNumHeads(), kvHeads = rope.getNumKvHeads(), dim = rope.getHeadDim();
  if (failed(divisible(rope, heads, "num_attention_heads")) ||
      failed(divisible(rope, kvHeads, "num_key_value_heads")))
    return failure();
  int64_t localHeads = heads / tp_, localKv = kvHeads / tp_;
  if (failed(shardOutputs(qkv[0], rank_ * localHeads * dim, localHeads * dim)) ||
      failed(shardOutputs(qkv[1], rank_ * localKv * dim, localKv * dim)) ||
      failed(shardOutputs(qkv[2], rank_ * localKv * dim, localKv * dim)))
    return failure();
  auto qType = activationType(rope.getContext(), localHeads * dim);
  rope.setNumHeads(localHeads);
  rope.setNumKvHeads(localKv);
  rope.getQ().setType(qType);
  attention.setNumHeads(localHeads);
  attention.setNumKvHeads(localKv);
  attention.getResult().setType(qType);
  return shardInputsAndReduce(o, rank_ * localHeads * dim, localHeads * dim);
}

// mul(silu(gate(x)), up(x)) -> down (or gelu_tanh): gate/up column-parallel, down row-parallel.
LogicalResult Sharder::shardMlp(MulOp mul) {
  Value other;
  mlir::Operation *silu = gateActivation(mul, other);
  LinearOp gate = silu ? silu->getOperand(0).getDefiningOp<LinearOp>() : LinearOp();
  auto up = other.getDefiningOp<LinearOp>();
  auto down = mul->hasOneUse() ? mlir::dyn_cast<LinearOp>(*mul->getUsers().begin()) : LinearOp();
  if (!gate || !up || !down || !silu->hasOneUse() || !gate->hasOneUse() || !up->hasOneUse() ||
      down.getX() != mul.getResult())
    return mul.emitOpError() << "shard-tensor-parallel expects mul(silu(gate(x)), up(x)) feeding "
                                "one down linear: run it before fuse-gate-up";
  int64_t intermediate = widthOf(mul.getResult());
  if (failed(divisible(mul, intermediate, "intermediate_size")))
    return failure();
  int64_t local = intermediate / tp_;
  if (failed(shardOutputs(gate, rank_ * local, local)) ||
      failed(shardOutputs(up, rank_ * local, local)))
    return failure();
  auto type = activationType(mul.getContext(), local);
  silu->getResult(0).setType(type);
  mul.getResult().setType(type);
  return shardInputsAndReduce(down, rank_ * local, local);
}

// The same `slice` of each expert's tensor (the stacked weight's sources, one per expert part).
mlir::FailureOr<Value> Sharder::slicedExperts(MoeExpertsOp moe, Value weight, SourceSlice slice,
                                              llvm::ArrayRef<int64_t> shape) {
  auto op = weight.getDefiningOp<WeightOp>();
  if (!op || !op->hasOneUse())
    return moe.emitOpError() << "shard-tensor-parallel needs the experts' own kiln.weight "
                                "operands";
  // Quantized experts: as a Linear's weight, a rank's columns must keep whole groups.
  std::optional<WeightQuant> quant = weightQuant(op);
  const int64_t group = quant ? (quant->groupSize ? quant->groupSize : kQuantSubBlock) : 1;
  if (slice.colBegin % group != 0 || shape.back() % group != 0)
    return moe.emitOpError() << "--tp " << tp_ << " splits the " << group
                             << "-column groups of quantized weight '" << op.getName()
                             << "': a rank's share of its columns (" << shape.back()
                             << ") must be a multiple of the group size";
  llvm::SmallVector<std::string> sources;
  for (mlir::Attribute attr : op.getSources()) {
    std::optional<SourceSlice> source =
        parseSourceSlice(mlir::cast<mlir::StringAttr>(attr).strref());
    std::optional<SourceSlice> composed =
        source ? composeSourceSlices(*source, slice) : std::optional<SourceSlice>();
    if (!composed)
      return moe.emitOpError() << "weight '" << op.getName() << "' cannot be sharded";
    sources.push_back(formatSourceSlice(*composed));
  }
  b_.setInsertionPoint(op);
  llvm::SmallVector<llvm::StringRef> refs(sources.begin(), sources.end());
  auto sharded =
      b_.create<WeightOp>(op.getLoc(), mlir::RankedTensorType::get(shape, b_.getF32Type()),
                          op.getNameAttr(), b_.getStrArrayAttr(refs), op.getDtypeAttr());
  setWeightQuant(sharded, quant);
  replaceOperand(moe, weight, sharded.getResult());
  return sharded.getResult();
}

// Mixture-of-experts: every expert's intermediate dim column-parallel in gate / up (rows of each
// expert part) and row-parallel in down (its columns), the router replicated; the partial sums
// all_reduce, as a dense MLP's down_proj does.
LogicalResult Sharder::shardMoe(MoeExpertsOp moe) {
  const int64_t inter = moe.getIntermediate(), experts = moe.getNumExperts();
  if (failed(divisible(moe, inter, "the experts' intermediate size")))
    return failure();
  const int64_t local = inter / tp_, hidden = widthOf(moe.getX());
  SourceSlice rows, cols;
  rows.rowBegin = rank_ * local;
  rows.rowEnd = rows.rowBegin + local;
  cols.colBegin = rank_ * local;
  cols.colEnd = cols.colBegin + local;
  if (failed(slicedExperts(moe, moe.getGateUp(), rows, {experts * 2 * local, hidden})) ||
      failed(slicedExperts(moe, moe.getDown(), cols, {experts * hidden, local})))
    return failure();
  moe.setIntermediate(local);
  b_.setInsertionPointAfter(moe);
  auto reduce = b_.create<AllReduceOp>(namedLoc(moe.getContext(), opName(moe) + ".all_reduce"),
                                       moe.getResult().getType(), moe.getResult());
  moe.getResult().replaceAllUsesExcept(reduce.getResult(), reduce);
  return success();
}

// Qwen2-MoE's routed + gated shared expert: a + g b with a and b each summed over the ranks is
// the sum over the ranks of a_r + g b_r (g is replicated: x and the gate row are), so the two
// all_reduces become one after the add, as vLLM reduces a shared-expert MoE block once.
void Sharder::reduceOnceAfter(SigmoidGatedAddOp add) {
  auto a = add.getA().getDefiningOp<AllReduceOp>();
  auto b = add.getB().getDefiningOp<AllReduceOp>();
  if (!a || !b || !a->hasOneUse() || !b->hasOneUse())
    return;
  add->setOperand(0, a.getX());
  add->setOperand(1, b.getX());
  a->erase();
  b->erase();
  b_.setInsertionPointAfter(add);
  auto reduce = b_.create<AllReduceOp>(namedLoc(add.getContext(), opName(add) + ".all_reduce"),
                                       add.getResult().getType(), add.getResult());
  add.getResult().replaceAllUsesExcept(reduce.getResult(), reduce);
}

LogicalResult Sharder::shardLmHead(mlir::func::ReturnOp ret) {
  // Soft-capped logits (Gemma 2) are capped after the gather, on full rows.
  Value logits = ret.getNumOperands() == 1 ? ret.getOperand(0) : Value();
  auto cap = logits ? logits.getDefiningOp<SoftcapOp>() : SoftcapOp();
  auto head = logits ? (cap ? cap.getX() : logits).getDefiningOp<LinearOp>() : LinearOp();
  if (!head || !head->hasOneUse())
    return step_.emitError() << "shard-tensor-parallel expects @step to return the lm_head "
                                "linear's logits (soft-capped or not)";
  int64_t vocab = widthOf(head.getResult());
  int64_t shard = vocabShard(vocab); // the last rank's rows past vocab are zeros
  if (tiedTable_ && head.getW() == tiedTable_ && !head.getBias()) {
    // The embedding already holds these rows: read them rather than store them twice.
    auto original = tiedTable_.getDefiningOp<WeightOp>();
    mlir::StringAttr name = original.getNameAttr();
    replaceOperand(head, tiedTable_, tiedShard_);
    tiedShard_.getDefiningOp<WeightOp>().setNameAttr(name);
    head.getResult().setType(activationType(head.getContext(), shard));
  } else if (failed(shardOutputs(head, rank_ * shard, shard))) {
    return failure();
  }
  b_.setInsertionPointAfter(head);
  auto gather = b_.create<AllGatherOp>(namedLoc(head.getContext(), opName(head) + ".all_gather"),
                                       activationType(head.getContext(), vocab), head.getResult());
  if (cap)
    cap->setOperand(0, gather.getResult());
  else
    ret->setOperand(0, gather.getResult());
  return success();
}

LogicalResult Sharder::shardEmbedding(EmbeddingOp embedding) {
  Value table = embedding.getTable();
  auto shape = mlir::cast<mlir::RankedTensorType>(table.getType()).getShape();
  int64_t shard = vocabShard(shape[0]);
  SourceSlice rows;
  rows.rowBegin = rank_ * shard;
  rows.rowEnd = rows.rowBegin + shard;
  bool shared = !table.hasOneUse();
  auto sharded = slicedWeight(embedding, table, rows, {shard, shape[1]});
  if (failed(sharded))
    return failure();
  replaceOperand(embedding, table, *sharded);
  if (shared) {
    tiedTable_ = table;
    tiedShard_ = *sharded;
  }
  embedding.setVocabStart(rows.rowBegin);
  b_.setInsertionPointAfter(embedding);
  auto reduce =
      b_.create<AllReduceOp>(namedLoc(embedding.getContext(), opName(embedding) + ".all_reduce"),
                             embedding.getResult().getType(), embedding.getResult());
  embedding.getResult().replaceAllUsesExcept(reduce.getResult(), reduce);
  return success();
}

LogicalResult Sharder::run() {
  llvm::SmallVector<AttentionOp> attentions;
  llvm::SmallVector<MulOp> muls;
  llvm::SmallVector<MoeExpertsOp> moes;
  llvm::SmallVector<SigmoidGatedAddOp> gatedAdds;
  llvm::SmallVector<EmbeddingOp> embeddings;
  mlir::func::ReturnOp ret;
  for (mlir::Operation &op : step_.getBody().front()) {
    if (auto attention = mlir::dyn_cast<AttentionOp>(op))
      attentions.push_back(attention);
    else if (auto mul = mlir::dyn_cast<MulOp>(op))
      muls.push_back(mul);
    else if (auto moe = mlir::dyn_cast<MoeExpertsOp>(op))
      moes.push_back(moe);
    else if (auto add = mlir::dyn_cast<SigmoidGatedAddOp>(op))
      gatedAdds.push_back(add);
    else if (auto embedding = mlir::dyn_cast<EmbeddingOp>(op))
      embeddings.push_back(embedding);
    else if (auto r = mlir::dyn_cast<mlir::func::ReturnOp>(op))
      ret = r;
    else if (mlir::isa<SiluMulOp, GeluTanhMulOp, AllReduceOp, AllGatherOp>(op))
      return op.emitOpError() << "shard-tensor-parallel must run once, on the unfused graph";
  }
  for (AttentionOp attention : attentions)
    if (failed(shardAttention(attention)))
      return failure();
  for (MulOp mul : muls)
    if (failed(shardMlp(mul)))
      return failure();
  for (MoeExpertsOp moe : moes)
    if (failed(shardMoe(moe)))
      return failure();
  for (SigmoidGatedAddOp add : gatedAdds)
    reduceOnceAfter(add);
  if (embeddings.size() != 1)
    return step_.emitError() << "shard-tensor-parallel expects one kiln.embedding, found "
                             << embeddings.size();
  if (failed(shardEmbedding(embeddings.front())))
    return failure();
  return ret ? shardLmHead(ret) : step_.emitError() << "@step has no return";
}

struct ShardTensorParallelPass
    : mlir::PassWrapper<ShardTensorParallelPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ShardTensorParallelPass)
  ShardTensorParallelPass() = default;
  ShardTensorParallelPass(const ShardTensorParallelPass &other) : PassWrapper(other) {}
  ShardTensorParallelPass(int64_t r, int64_t n) {
    rank = r;
    tp = n;
  }

  llvm::StringRef getName() const override { return "ShardTensorParallelPass"; }
  llvm::StringRef getArgument() const override { return "kiln-shard-tensor-parallel"; }
  llvm::StringRef getDescription() const override {
    return "Shard the unfused step for one rank of tensor parallelism (column/row-parallel "
           "linears + all_reduce, vocab-parallel embedding + all_reduce and lm_head + "
           "all_gather)";
  }

  Option<int64_t> rank{*this, "rank", llvm::cl::desc("this rank"), llvm::cl::init(0)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("tensor-parallel degree"), llvm::cl::init(1)};

  void runOnOperation() override {
    auto step = getOperation().lookupSymbol<mlir::func::FuncOp>("step");
    if (!step || step.getBody().empty()) {
      getOperation().emitError() << "shard-tensor-parallel needs a func.func @step with a body";
      return signalPassFailure();
    }
    if (tp < 1 || rank < 0 || rank >= tp) {
      step.emitError() << "shard-tensor-parallel: rank " << static_cast<int64_t>(rank)
                       << " is not in [0, tp " << static_cast<int64_t>(tp) << ")";
      return signalPassFailure();
    }
    if (tp == 1)
      return;
    if (failed(Sharder(step, rank, tp).run()))
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<mlir::Pass> createShardTensorParallelPass(int64_t rank, int64_t tp) {
  return std::make_unique<ShardTensorParallelPass>(rank, tp);
}

void registerShardTensorParallelPass() {
  mlir::PassRegistration<ShardTensorParallelPass>();
}

} // namespace kiln::compiler
