// The kernels are chosen from the emitted plan rather than the MLIR module: the plan already holds
// the per-rank head counts (after tensor-parallel sharding) and the stored weight dtypes, which
// are exactly what the kernels' template constants must match.
#include "compiler/driver/gpu_kernels.h"

#ifdef KILN_HAVE_CODEGEN
#include "compiler/codegen/llama_kernels.h"
#include "compiler/codegen/nvrtc_compiler.h"
#include "kernels/cuda/params.h"
#endif

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

namespace kiln::compiler {

#ifndef KILN_HAVE_CODEGEN

bool gpuCodegenAvailable() {
  return false;
}

Status checkGpuTarget(const std::string &target) {
  return unimplemented("target " + target +
                       ": the CUDA code generator is not built into this kiln yet");
}

Status attachGpuKernels(const CompileOptions &options, const HfModelConfig &, schema::PlanT &,
                        std::ostream *) {
  for (const std::string &target : options.targets)
    if (target != "cpu")
      return checkGpuTarget(target);
  return okStatus();
}

#else

namespace {

using schema::OpParams;

std::string kernelDType(schema::DType dtype) {
  return dtype == schema::DType::F16 ? "f16" : dtype == schema::DType::BF16 ? "bf16" : "f32";
}

// The kernel op behind each plan op kind; Linear (cuBLASLt) and the collectives (communicator)
// are library ops and have none. Attention is handled separately (three kernels).
const char *kernelOpOf(OpParams kind) {
  switch (kind) {
  case OpParams::EmbeddingParams:
    return "embedding";
  case OpParams::RmsNormParams:
    return "rms_norm";
  case OpParams::AddRmsNormParams:
    return "add_rms_norm";
  case OpParams::RopeKvWriteParams:
    return "rope_kv_write";
  case OpParams::SiluMulParams:
    return "silu_mul";
  case OpParams::AddParams:
    return "add";
  case OpParams::GatherRowsParams:
    return "gather_rows";
  default:
    return nullptr;
  }
}

// Which input holds the op's weight (embedding table, norm weight), whose stored dtype becomes
// the kernel's weight_dtype.
int weightInputOf(const std::string &kernelOp) {
  if (kernelOp == "embedding" || kernelOp == "rms_norm")
    return 1;
  return kernelOp == "add_rms_norm" ? 2 : -1;
}

// The kernels are instantiated for the plan's activation dtype, which is also its KV cache's and
// that of every non-weight buffer a kernel op touches (the fp32 logits are only ever written by
// the lm_head Linear, a library op); --dtype is what set it, so the two must agree.
Result<std::string> activationKernelDType(const CompileOptions &options,
                                          const schema::PlanT &plan) {
  const std::string fromFlag = options.dtype == "fp32"   ? "f32"
                               : options.dtype == "fp16" ? "f16"
                                                         : "bf16";
  const std::string fromPlan = kernelDType(plan.activation_dtype);
  if (fromPlan != fromFlag || !plan.kv_cache || kernelDType(plan.kv_cache->dtype) != fromPlan)
    return internalError("--dtype " + options.dtype + ": the plan's activation dtype is " +
                         schema::EnumNameDType(plan.activation_dtype) + " and its KV cache's " +
                         (plan.kv_cache ? schema::EnumNameDType(plan.kv_cache->dtype) : "missing") +
                         "; the GPU kernels need them to agree");
  for (const auto &op : plan.ranks.at(0)->program)
    for (const auto *list : {&op->inputs, &op->outputs})
      for (uint32_t index : *list) {
        const schema::BufferT &b = *plan.ranks.at(0)->buffers.at(index);
        bool kernelOp = kernelOpOf(op->params.type) || op->params.type == OpParams::AttentionParams;
        if (kernelOp && b.kind == schema::BufferKind::Activation &&
            kernelDType(b.dtype) != fromPlan)
          return internalError("op '" + op->name + "' runs a " + fromPlan + " kernel on buffer '" +
                               b.name + "' of dtype " + schema::EnumNameDType(b.dtype));
      }
  return fromPlan;
}

Result<LlamaKernelParams> paramsFromPlan(const CompileOptions &options, const HfModelConfig &config,
                                         const schema::PlanT &plan) {
  const schema::RankT &rank = *plan.ranks.at(0);
  LlamaKernelParams params;
  params.hidden = config.hiddenSize;
  params.intermediate = config.intermediateSize / options.tp;
  params.blockSize = options.kvBlockSize;
  KILN_ASSIGN_OR_RETURN(params.dtype, activationKernelDType(options, plan));
  for (const auto &op : rank.program) {
    if (const auto *rope = op->params.AsRopeKvWriteParams())
      params.rotaryDim = rope->rotary_dim;
    if (const auto *attention = op->params.AsAttentionParams()) {
      params.numHeads = attention->num_heads;
      params.numKvHeads = attention->num_kv_heads;
      params.headDim = attention->head_dim;
    }
  }
  if (params.numHeads == 0)
    return invalidArgument("--target: the plan has no Attention op to specialize kernels for");
  return params;
}

// kernelsForLlama uses one weight dtype; the plan stores norm weights in fp32 and the embedding
// table in --dtype, so each instance takes the dtype its op actually reads.
void matchWeightDTypes(const schema::RankT &rank, std::vector<KernelInstance> &instances) {
  for (KernelInstance &instance : instances) {
    int input = weightInputOf(instance.op);
    if (input < 0)
      continue;
    for (const auto &op : rank.program) {
      const char *kernelOp = kernelOpOf(op->params.type);
      if (!kernelOp || instance.op != kernelOp || op->inputs.size() <= size_t(input))
        continue;
      auto constants = instance.constants;
      constants["weight_dtype"] = kernelDType(rank.buffers[op->inputs[input]]->dtype);
      instance = makeKernelInstance(instance.op, std::move(constants));
      break;
    }
  }
}

bool isFloatDType(schema::DType dtype) {
  return dtype == schema::DType::F32 || dtype == schema::DType::F16 || dtype == schema::DType::BF16;
}

// Every Linear the GEMV kernel can run (x and W of one float dtype, no bias or an F32 one) names
// its instance in Op.kernel; the runtime times it against cuBLASLt per row bucket at load and
// keeps it where it is faster (runtime/hal/cuda/cuda_gemv.h). Other Linears keep no kernel.
void attachGemvKernels(schema::PlanT &plan, std::vector<KernelInstance> &instances) {
  std::set<std::string> added;
  for (auto &rank : plan.ranks)
    for (auto &op : rank->program) {
      if (op->params.type != OpParams::LinearParams || op->inputs.size() < 2 || op->outputs.empty())
        continue;
      const schema::BufferT &x = *rank->buffers.at(op->inputs[0]);
      const schema::BufferT &w = *rank->buffers.at(op->inputs[1]);
      const schema::BufferT &y = *rank->buffers.at(op->outputs[0]);
      const bool f32Bias =
          op->inputs.size() < 3 || rank->buffers.at(op->inputs[2])->dtype == schema::DType::F32;
      if (x.dtype != w.dtype || !isFloatDType(x.dtype) || !isFloatDType(y.dtype) || !f32Bias ||
          w.shape.size() != 2 || w.shape[1] < 1 || w.shape[1] > (1u << 20))
        continue;
      KernelInstance instance = makeKernelInstance("gemv", {{"dtype", kernelDType(x.dtype)},
                                                            {"in", std::to_string(w.shape[1])},
                                                            {"y_dtype", kernelDType(y.dtype)}});
      op->kernel = instance.symbol;
      if (added.insert(instance.symbol).second)
        instances.push_back(std::move(instance));
    }
}

Status setOpKernels(const std::map<std::string, KernelInstance> &byOp, schema::RankT &rank) {
  for (auto &op : rank.program) {
    const char *kernelOp = kernelOpOf(op->params.type);
    bool attention = op->params.type == OpParams::AttentionParams;
    if (!kernelOp && !attention)
      continue;
    const KernelInstance &main = byOp.at(attention ? "attention_prefill" : kernelOp);
    op->kernel = main.symbol;
    if (attention)
      op->kernel += "," + byOp.at("attention_decode").symbol + "," +
                    byOp.at("attention_decode_reduce").symbol;
    KILN_ASSIGN_OR_RETURN(LaunchShape shape, launchShapeOf(main));
    if (!op->grid)
      op->grid = std::make_unique<schema::GridRuleT>();
    op->grid->x_rows = rank.buffers[op->outputs.front()]->rows;
    op->grid->x_per_block = 1;
    op->grid->y_fixed = static_cast<uint32_t>(shape.gridY);
    op->grid->block_x = static_cast<uint32_t>(shape.threads);
    op->grid->shared_bytes = static_cast<uint32_t>(shape.sharedBytes);
  }
  return okStatus();
}

std::unique_ptr<schema::KernelModuleT> toSchema(KernelModuleImage image) {
  auto module = std::make_unique<schema::KernelModuleT>();
  module->target = std::move(image.target);
  module->format = image.format == KernelImageFormat::kPtx ? schema::KernelFormat::Ptx
                                                           : schema::KernelFormat::Cubin;
  module->image = std::move(image.image);
  module->kernels = std::move(image.kernels);
  return module;
}

} // namespace

bool gpuCodegenAvailable() {
  return true;
}

Status checkGpuTarget(const std::string &target) {
  Result<SmTarget> sm = parseSmTarget(target);
  if (!sm.isOk())
    return invalidArgument("--target '" + target + "': " + sm.status().message());
  return okStatus();
}

Status attachGpuKernels(const CompileOptions &options, const HfModelConfig &config,
                        schema::PlanT &plan, std::ostream *log) {
  std::vector<std::string> smTargets;
  for (const std::string &target : options.targets)
    if (target != "cpu")
      smTargets.push_back(target);
  if (smTargets.empty() || plan.ranks.empty())
    return okStatus();
  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(LlamaKernelParams params, paramsFromPlan(options, config, plan));
  std::vector<KernelInstance> instances = kernelsForLlama(params);
  matchWeightDTypes(*plan.ranks[0], instances);
  attachGemvKernels(plan, instances);
  // Greedy sampling on the device (kernels/cuda/sampling.cuh), looked up by the runtime by name.
  instances.push_back(makeKernelInstance(
      "argmax_rows", {{"threads", std::to_string(kernels::cuda::kArgmaxThreads)}}));
  std::string names;
  for (const std::string &target : smTargets)
    names += (names.empty() ? "" : ", ") + target;
  Result<std::vector<KernelModuleImage>> images = compileKernelModules(instances, smTargets);
  if (!images.isOk())
    return images.status().withContext("codegen for --target " + names);
  std::map<std::string, KernelInstance> byOp;
  for (const KernelInstance &instance : instances)
    byOp[instance.op] = instance;
  for (auto &rank : plan.ranks)
    KILN_RETURN_IF_ERROR(setOpKernels(byOp, *rank));
  for (KernelModuleImage &image : *images)
    plan.kernel_modules.push_back(toSchema(std::move(image)));
  plan.cuda_version = nvrtcVersionString();
  if (log) {
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char elapsed[32];
    std::snprintf(elapsed, sizeof elapsed, "%.1f", seconds);
    *log << "codegen: " << instances.size() << " kernels for " << names << " (" << elapsed
         << " s)\n";
  }
  return okStatus();
}

#endif

} // namespace kiln::compiler
