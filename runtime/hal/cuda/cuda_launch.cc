#include "runtime/hal/cuda/cuda_launch.h"

#include "kernels/cuda/params.h"
#include "runtime/artifact/artifact.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace kiln::rt {
namespace {

namespace kc = kiln::kernels::cuda;
using schema::DType;
using schema::OpParams;

std::string opLabel(const BoundOp &op) {
  return "op '" + (op.op->name() ? op.op->name()->str() : std::string()) + "' (" +
         opKindName(op.op->params_type()) + ")";
}

int32_t elementBytes(DType dtype) {
  return dtype == DType::F32 ? 4 : 2;
}

int32_t rowsOf(const BoundBuffer &b, const StepCounts &c) {
  return static_cast<int32_t>(c.rows(b.rows, b.fixedRows));
}

uint32_t ceilDiv(int64_t a, int64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

// checkPlan keeps vocab_start below the model's vocab_size, which fits int32.
int32_t embeddingVocabStart(const BoundOp &op) {
  const auto *params = op.op->params_as_EmbeddingParams();
  return params ? static_cast<int32_t>(params->vocab_start()) : 0;
}

template <typename Params> CudaLaunch launchWith(const Params &params, size_t kernel) {
  static_assert(sizeof(Params) <= sizeof(CudaLaunch::params), "params struct too large");
  CudaLaunch launch;
  launch.kernel = kernel;
  std::memcpy(launch.params.data(), &params, sizeof(Params));
  launch.paramBytes = sizeof(Params);
  return launch;
}

// The plan's GridRule for this step; grid.x == 0 means nothing to launch.
void applyGridRule(const schema::GridRule *rule, const StepCounts &counts, CudaLaunch &launch) {
  const int64_t rows = counts.rows(rule->x_rows(), rule->x_fixed());
  launch.grid[0] = rule->x_rows() == schema::RowScale::Fixed
                       ? rule->x_fixed()
                       : ceilDiv(rows, std::max<uint32_t>(rule->x_per_block(), 1));
  launch.grid[1] = rule->y_fixed();
  launch.grid[2] = rule->z_fixed();
  launch.block = rule->block_x();
  launch.sharedBytes = rule->shared_bytes();
}

CudaLaunch rowOpLaunch(const BoundOp &op, const StepCounts &c) {
  const auto &in = op.inputs;
  const auto &out = op.outputs;
  switch (op.op->params_type()) {
  case OpParams::EmbeddingParams:
    return launchWith(kc::EmbeddingParams{static_cast<const int32_t *>(in[0].data), in[1].data,
                                          out[0].data, c.numTokens, embeddingVocabStart(op),
                                          static_cast<int32_t>(in[1].fixedRows)},
                      0);
  case OpParams::RmsNormParams:
    return launchWith(kc::RmsNormParams{in[0].data, in[1].data, out[0].data, rowsOf(in[0], c),
                                        op.op->params_as_RmsNormParams()->eps()},
                      0);
  case OpParams::AddRmsNormParams:
    return launchWith(kc::AddRmsNormParams{in[0].data, in[1].data, in[2].data, out[1].data,
                                           rowsOf(in[0], c),
                                           op.op->params_as_AddRmsNormParams()->eps()},
                      0);
  case OpParams::RopeKvWriteParams: {
    const uint32_t layer = op.op->params_as_RopeKvWriteParams()->layer();
    return launchWith(kc::RopeKvWriteParams{in[0].data, static_cast<const int32_t *>(in[1].data),
                                            static_cast<const int32_t *>(in[2].data),
                                            static_cast<const float *>(in[3].data), out[0].data,
                                            op.kvCache->keys[layer], op.kvCache->values[layer],
                                            c.numTokens},
                      0);
  }
  case OpParams::SiluMulParams:
    return launchWith(kc::SiluMulParams{in[0].data, out[0].data, rowsOf(out[0], c)}, 0);
  case OpParams::AddParams:
    return launchWith(kc::AddParams{in[0].data, in[1].data, out[0].data, rowsOf(out[0], c)}, 0);
  default: // GatherRows (checkCudaOp admits nothing else here)
    return launchWith(kc::GatherRowsParams{in[0].data, static_cast<const int32_t *>(in[1].data),
                                           out[0].data, c.numLogits},
                      0);
  }
}

std::vector<CudaLaunch> attentionLaunches(const BoundOp &op, const StepCounts &c,
                                          const AttentionScratch &scratch) {
  if (c.numSeqs <= 0 || c.numTokens <= 0)
    return {};
  const auto *p = op.op->params_as_AttentionParams();
  const auto &in = op.inputs;
  kc::AttentionParams params{in[0].data,
                             static_cast<const int32_t *>(in[1].data),
                             static_cast<const int32_t *>(in[2].data),
                             static_cast<const int32_t *>(in[4].data),
                             op.kvCache->keys[p->layer()],
                             op.kvCache->values[p->layer()],
                             op.outputs[0].data,
                             scratch.partialOut,
                             scratch.partialMax,
                             scratch.partialSum,
                             static_cast<int32_t>(in[4].width),
                             c.numSeqs,
                             c.numTokens,
                             1,
                             p->scale()};
  const uint32_t heads = p->num_heads();
  const auto block = static_cast<uint32_t>(kc::kAttentionThreads);
  // Every sequence has one token: decode. Any longer query: the prefill kernel serves them all.
  if (c.numTokens != c.numSeqs) {
    const int32_t rows =
        kc::prefillBlockRows(static_cast<int32_t>(p->head_dim()), elementBytes(in[0].dtype));
    CudaLaunch prefill = launchWith(params, 0);
    prefill.grid[0] = ceilDiv(c.numTokens, rows) + static_cast<uint32_t>(c.numSeqs);
    prefill.grid[1] = heads;
    prefill.block = block;
    return {prefill};
  }
  params.numSplits = kc::decodeSplitsFor(std::max(c.maxContextLen, 1));
  CudaLaunch decode = launchWith(params, 1);
  decode.grid[0] = static_cast<uint32_t>(c.numSeqs);
  decode.grid[1] = p->num_kv_heads();
  decode.grid[2] = static_cast<uint32_t>(params.numSplits);
  decode.block = block;
  CudaLaunch reduce = launchWith(params, 2);
  reduce.grid[0] = static_cast<uint32_t>(c.numSeqs);
  reduce.grid[1] = heads;
  reduce.block = block;
  return {decode, reduce};
}

// Activations (and the KV cache) of one op share one float dtype: the kernel was instantiated
// for it. Weights may differ (an fp32-activation plan with a bf16 embedding table).
Status checkActivationDtypes(const BoundOp &op) {
  std::optional<DType> activation;
  auto visit = [&](const BoundBuffer &b, bool isInput, size_t index) -> Status {
    if (b.kind == schema::BufferKind::StepInput) {
      if (b.dtype != DType::I32)
        return invalidArgument("cuda backend: " + opLabel(op) + ": step input " +
                               std::to_string(index) + " has dtype " + dtypeName(b.dtype) +
                               "; step inputs are I32");
      return okStatus();
    }
    if (b.kind != schema::BufferKind::Activation)
      return okStatus();
    if (b.dtype != DType::F32 && b.dtype != DType::F16 && b.dtype != DType::BF16)
      return unimplemented("cuda backend: " + opLabel(op) + ": " +
                           (isInput ? "input " : "output ") + std::to_string(index) +
                           " has dtype " + dtypeName(b.dtype) + "; activations are F32/F16/BF16");
    if (activation && *activation != b.dtype)
      return unimplemented("cuda backend: " + opLabel(op) + ": mixes activation dtypes " +
                           dtypeName(*activation) + " and " + dtypeName(b.dtype));
    activation = b.dtype;
    return okStatus();
  };
  for (size_t i = 0; i < op.inputs.size(); ++i)
    KILN_RETURN_IF_ERROR(visit(op.inputs[i], true, i));
  for (size_t i = 0; i < op.outputs.size(); ++i)
    KILN_RETURN_IF_ERROR(visit(op.outputs[i], false, i));
  OpParams kind = op.op->params_type();
  if (kind != OpParams::RopeKvWriteParams && kind != OpParams::AttentionParams)
    return okStatus();
  const uint32_t layer = kind == OpParams::AttentionParams
                             ? op.op->params_as_AttentionParams()->layer()
                             : op.op->params_as_RopeKvWriteParams()->layer();
  if (!op.kvCache || layer >= op.kvCache->keys.size() || layer >= op.kvCache->values.size())
    return invalidArgument("cuda backend: " + opLabel(op) + ": no KV cache bound for layer " +
                           std::to_string(layer));
  if (activation && op.kvCache->dtype != *activation)
    return unimplemented("cuda backend: " + opLabel(op) + ": KV cache dtype " +
                         dtypeName(op.kvCache->dtype) + " differs from the activations' " +
                         dtypeName(*activation));
  return okStatus();
}

} // namespace

size_t attentionScratchBytes(const BoundOp &op) {
  if (op.op->params_type() != OpParams::AttentionParams || op.inputs.size() < 5)
    return 0;
  const auto *p = op.op->params_as_AttentionParams();
  const size_t maxBatch = static_cast<size_t>(std::max<int64_t>(op.inputs[4].fixedRows, 0));
  return maxBatch * p->num_heads() * kc::kMaxDecodeSplits * (p->head_dim() + 2) * sizeof(float);
}

Result<std::vector<std::string>> kernelSymbols(const BoundOp &op) {
  const std::string kernel = op.op->kernel() ? op.op->kernel()->str() : std::string();
  if (op.op->params_type() == OpParams::LinearParams)
    return invalidArgument("cuda backend: " + opLabel(op) +
                           ": Linear runs on cuBLASLt (cuda_linear.h), not as a kernel launch");
  std::vector<std::string> symbols;
  for (size_t start = 0; start <= kernel.size();) {
    size_t comma = std::min(kernel.find(',', start), kernel.size());
    symbols.push_back(kernel.substr(start, comma - start));
    start = comma + 1;
  }
  const size_t expected = op.op->params_type() == OpParams::AttentionParams ? 3 : 1;
  bool empty = std::any_of(symbols.begin(), symbols.end(), [](auto &s) { return s.empty(); });
  if (symbols.size() != expected || empty)
    return invalidArgument(
        "cuda backend: " + opLabel(op) + ": kernel '" + kernel + "' should " +
        (expected == 3 ? "name 3 kernels: <prefill>,<decode>,<decode_reduce>" : "name one kernel") +
        " (recompile with a GPU --target)");
  return symbols;
}

Status checkCudaOp(const BoundOp &op) {
  if (!op.op)
    return invalidArgument("cuda backend: bound op has no plan op");
  const size_t planIn = op.op->inputs() ? op.op->inputs()->size() : 0;
  const size_t planOut = op.op->outputs() ? op.op->outputs()->size() : 0;
  const OpParams kind = op.op->params_type();
  if (kind == OpParams::NONE)
    return invalidArgument("cuda backend: op '" +
                           (op.op->name() ? op.op->name()->str() : std::string()) +
                           "' has no kind (params)");
  const size_t minIn = kind == OpParams::AttentionParams     ? 5
                       : kind == OpParams::RopeKvWriteParams ? 4
                       : kind == OpParams::AddRmsNormParams  ? 3
                       : kind == OpParams::SiluMulParams     ? 1
                                                             : 2;
  const size_t minOut = kind == OpParams::AddRmsNormParams ? 2 : 1;
  if (op.inputs.size() != planIn || op.outputs.size() != planOut || planIn < minIn ||
      planOut < minOut)
    return invalidArgument("cuda backend: " + opLabel(op) + ": bound " +
                           std::to_string(op.inputs.size()) + "/" +
                           std::to_string(op.outputs.size()) + " buffers, the op has " +
                           std::to_string(planIn) + "/" + std::to_string(planOut));
  KILN_RETURN_IF_ERROR(kernelSymbols(op).status());
  if (kind != OpParams::AttentionParams && !op.op->grid())
    return invalidArgument("cuda backend: " + opLabel(op) + " has no grid rule");
  return checkActivationDtypes(op);
}

std::vector<CudaLaunch> planLaunches(const BoundOp &op, const StepCounts &counts,
                                     const AttentionScratch &scratch) {
  if (op.op->params_type() == OpParams::AttentionParams)
    return attentionLaunches(op, counts, scratch);
  CudaLaunch launch = rowOpLaunch(op, counts);
  applyGridRule(op.op->grid(), counts, launch);
  if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0)
    return {};
  return {launch};
}

} // namespace kiln::rt
