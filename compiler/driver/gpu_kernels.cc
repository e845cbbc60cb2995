// The kernels are chosen from the emitted plan rather than the MLIR module: the plan already holds
// the per-rank head counts (after tensor-parallel sharding) and the stored weight dtypes, which
// are exactly what the kernels' template constants must match.
#include "compiler/driver/gpu_kernels.h"

#ifdef KILN_HAVE_CODEGEN
#include "compiler/codegen/kernel_catalog.h"
#include "compiler/codegen/nvrtc_compiler.h"
#include "kernels/cuda/params.h"
#include "runtime/ops/op_table.h"
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

using rt::OpEntry;

const OpEntry *kernelEntry(const schema::OpT &op) {
  const OpEntry *entry = rt::findOp(op.params.type);
  return entry && entry->cuda.instances ? entry : nullptr;
}

// The kernels are instantiated for the plan's activation dtype, which is that of every non-weight
// buffer a kernel op touches (the fp32 logits are only ever written by the lm_head Linear, a
// library op); --dtype is what set it, so the two must agree. The KV cache's dtype (--kv-dtype,
// else --dtype) is a constant of its own (kv_dtype) of the kernels that touch the cache.
Status checkActivationDtypes(const CompileOptions &options, const schema::PlanT &plan) {
  const std::string fromFlag = options.dtype == "fp32"   ? "f32"
                               : options.dtype == "fp16" ? "f16"
                                                         : "bf16";
  const std::string fromPlan = rt::kernelDType(plan.activation_dtype);
  if (fromPlan != fromFlag || !plan.kv_cache)
    return internalError("--dtype " + options.dtype + ": the plan's activation dtype is " +
                         schema::EnumNameDType(plan.activation_dtype) +
                         (plan.kv_cache ? "" : " and it has no KV cache") +
                         "; the GPU kernels need it to be --dtype's");
  for (const auto &op : plan.ranks.at(0)->program) {
    const OpEntry *entry = kernelEntry(*op);
    if (!entry || entry->cuda.libraryOp)
      continue;
    for (const auto *list : {&op->inputs, &op->outputs})
      for (uint32_t index : *list) {
        const schema::BufferT &b = *plan.ranks.at(0)->buffers.at(index);
        if (b.kind == schema::BufferKind::Activation && rt::kernelDType(b.dtype) != fromPlan)
          return internalError("op '" + op->name + "' runs a " + fromPlan + " kernel on buffer '" +
                               b.name + "' of dtype " + schema::EnumNameDType(b.dtype));
      }
  }
  return okStatus();
}

// Sets the grid rule of a kernel op from its first kernel's launch shape.
Status setGridRule(const KernelInstance &first, const schema::RankT &rank, schema::OpT &op) {
  KILN_ASSIGN_OR_RETURN(LaunchShape shape, launchShapeOf(first));
  if (!op.grid)
    op.grid = std::make_unique<schema::GridRuleT>();
  op.grid->x_rows = rank.buffers[op.outputs.front()]->rows;
  op.grid->x_per_block = 1;
  op.grid->y_fixed = static_cast<uint32_t>(shape.gridY);
  op.grid->block_x = static_cast<uint32_t>(shape.threads);
  op.grid->shared_bytes = static_cast<uint32_t>(shape.sharedBytes);
  return okStatus();
}

// Every op's kernels come from its op table entry, specialized for its own buffers and params
// (so the set of kernels follows the ops in the plan, whatever the model family). Op.kernel names
// them in template order; a library op's optional kernel (a Linear's GEMV) keeps its grid rule
// untouched: the runtime computes that grid itself.
Status attachOpKernels(const CompileOptions &options, schema::PlanT &plan,
                       std::vector<KernelInstance> &instances) {
  std::set<std::string> added;
  for (auto &rank : plan.ranks)
    for (auto &op : rank->program) {
      const OpEntry *entry = kernelEntry(*op);
      if (!entry)
        continue;
      rt::KernelPlanContext context{*op, *rank, static_cast<uint32_t>(options.kvBlockSize),
                                    plan.kv_cache ? plan.kv_cache->dtype : schema::DType::F32};
      Result<std::vector<KernelInstance>> opInstances = entry->cuda.instances(context);
      if (!opInstances.isOk())
        return opInstances.status().withContext("op '" + op->name + "'");
      if (opInstances->empty())
        continue;
      op->kernel.clear();
      for (KernelInstance &instance : *opInstances) {
        op->kernel += (op->kernel.empty() ? "" : ",") + instance.symbol;
        if (added.insert(instance.symbol).second)
          instances.push_back(instance);
      }
      if (!entry->cuda.libraryOp)
        KILN_RETURN_IF_ERROR(setGridRule(opInstances->front(), *rank, *op));
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

Status attachGpuKernels(const CompileOptions &options, const HfModelConfig &, schema::PlanT &plan,
                        std::ostream *log) {
  std::vector<std::string> smTargets;
  for (const std::string &target : options.targets)
    if (target != "cpu")
      smTargets.push_back(target);
  if (smTargets.empty() || plan.ranks.empty())
    return okStatus();
  auto start = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR(checkActivationDtypes(options, plan));
  std::vector<KernelInstance> instances;
  KILN_RETURN_IF_ERROR(attachOpKernels(options, plan, instances));
  // Greedy sampling on the device (kernels/cuda/sampling.cuh), looked up by the runtime by name.
  instances.push_back(makeKernelInstance(
      "argmax_rows", {{"threads", std::to_string(kernels::cuda::kArgmaxThreads)}}));
  std::string names;
  for (const std::string &target : smTargets)
    names += (names.empty() ? "" : ", ") + target;
  Result<std::vector<KernelModuleImage>> images = compileKernelModules(instances, smTargets);
  if (!images.isOk())
    return images.status().withContext("codegen for --target " + names);
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
