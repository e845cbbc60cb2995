// The op table: one declarative entry per plan op kind (plan.fbs OpParams), the one home of what
// the rest of kiln needs to know about an op. Readers:
//   - the compiler's plan emitter (compiler/emit/plan_emitter.cc): the kiln dialect op named
//     `name` becomes this plan op; packParams turns its attributes into the schema params;
//   - plan_check (runtime/artifact/plan_check.cc): arity, in-place outputs and shapes;
//   - the cpu backend (runtime/hal/cpu_ops.cc): runCpu and the dtype rules;
//   - the cuda backend (runtime/hal/cuda/cuda_launch.cc) and codegen (compiler/driver/
//     gpu_kernels.cc, compiler/codegen/kernel_catalog.cc): the kernel templates, the instances a
//     plan op needs and its launches;
//   - the profiler's cost model (runtime/exec/op_cost.cc).
// Each entry lives in its own file (runtime/ops/<name>_op.cc) beside the functions it points to;
// op_table.cc lists them. Adding an op: its schema params (plan.fbs), its kiln dialect op
// (compiler/dialect/kiln_ops.td), its entry file, its kernels and their tests.
#pragma once

#include "runtime/base/status.h"
#include "runtime/ops/bound_op.h"
#include "runtime/ops/cuda_launch.h"
#include "runtime/ops/kernel_template.h"
#include "runtime/ops/op_cost.h"

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

struct OpArity {
  uint32_t inputs = 0;
  uint32_t outputs = 0;
};

// An op and its buffers as plan_check sees them (indices already checked to be in range).
struct PlanOpView {
  const schema::Plan &plan;
  const schema::Op &op;
  std::span<const schema::Buffer *const> in;
  std::span<const schema::Buffer *const> out;
};

// The scalar attributes of a compiler op by name (what packParams reads), and its operand count.
class OpParamValues {
public:
  void set(const std::string &name, double value) { values_[name] = value; }
  bool has(const std::string &name) const { return values_.count(name) != 0; }
  Result<float> f32(const std::string &name) const;
  Result<double> f64(const std::string &name) const { return find(name); }
  // An integral value in [0, 2^32).
  Result<uint32_t> u32(const std::string &name) const;
  uint32_t numInputs = 0;

private:
  Result<double> find(const std::string &name) const;
  std::map<std::string, double> values_;
};

// What the kernel instances of one plan op are derived from at compile time.
struct KernelPlanContext {
  const schema::OpT &op;
  const schema::RankT &rank;
  uint32_t kvBlockSize = 16;
  schema::DType kvDtype = schema::DType::F32; // the plan's KV cache's (attention, rope_kv_write)
  const schema::BufferT &input(size_t i) const { return *rank.buffers.at(op.inputs.at(i)); }
  const schema::BufferT &output(size_t i) const { return *rank.buffers.at(op.outputs.at(i)); }
};

using CpuOpFn = void (*)(const BoundOp &op, const StepCounts &counts);

struct CudaOpSpec {
  // The templates the op's kernels come from, in Op.kernel order; empty: no kernel (collectives).
  std::vector<KernelTemplate> templates;
  // A library op (Linear: cuBLASLt); its template (GEMV) is optional and chosen at load.
  bool libraryOp = false;
  // 0: Op.kernel names one instance of each template, in order. Else how many it names, each of
  // any one template (the embedding: of a float table or of a quantized one).
  size_t kernelsPerOp = 0;
  // true: Op.kernel may leave out the last template's instance (an optional fast path).
  bool lastTemplateOptional = false;
  // The instances this plan op needs, one per template; an empty list: none (a Linear GEMV
  // cannot run).
  Result<std::vector<KernelInstance>> (*instances)(const KernelPlanContext &) = nullptr;
  // The launches of one step, in order; empty when the step has no rows for the op.
  std::vector<CudaLaunch> (*launches)(const BoundOp &, const StepCounts &,
                                      const OpScratch &) = nullptr;
  // Device scratch bytes the launches need (OpScratch: split-K attention, routed MoE rows); null:
  // none.
  size_t (*scratchBytes)(const BoundOp &) = nullptr;
};

struct OpEntry {
  schema::OpParams kind = schema::OpParams::NONE;
  const char *name = ""; // the kiln dialect op: kiln.<name>
  OpArity (*arity)(const schema::Op &op) = nullptr;
  Status (*packParams)(const OpParamValues &values, schema::OpParamsUnion &out) = nullptr;
  // Widths, rows and step inputs of the op's buffers against plan.fbs; the message names what
  // disagrees (plan_check adds where).
  Status (*checkShapes)(const PlanOpView &view) = nullptr;
  int32_t inPlaceInput = -1; // >= 0: output 0 is this input, updated in place
  bool collective = false;   // run by the executor's communicator, not a device
  // Bit i: input i is a weight matrix that may be F16/BF16 or quantized (Q8/Q4/Q4M/Q4Z); other
  // weights are F32.
  uint32_t matrixWeightInputs = 0;
  bool outputDtypeMayDiffer = false; // outputs may have another dtype than the inputs (logits)
  // Ops on the KV cache: the layer they read or write.
  uint32_t (*kvLayer)(const schema::Op &op) = nullptr;
  CpuOpFn runCpu = nullptr;
  // cpu: weights its kernel reads faster in a layout of its own at this CPU's level, packed once
  // when the op is prepared (runtime/hal/cpu_device.cc) into BoundOp::cpuPackedWeights: the bytes
  // that takes (0: none at this level), and the packing into that many 64-byte aligned bytes,
  // which returns the stored weights the kernel no longer reads (the device hands their pages
  // back).
  size_t (*cpuPackedBytes)(const BoundOp &op) = nullptr;
  std::vector<std::span<const uint8_t>> (*packCpuWeights)(const BoundOp &op,
                                                          void *packed) = nullptr;
  CudaOpSpec cuda;
  OpCost (*cost)(const OpCostInputs &in) = nullptr; // null: everyBufferCost
};

// Every entry, in plan.fbs OpParams order.
std::span<const OpEntry *const> opTable();
// The entry of a plan op kind, or null.
const OpEntry *findOp(schema::OpParams kind);
// The entry whose kiln dialect op is kiln.<name>, or null.
const OpEntry *findOp(std::string_view name);
// Kernel templates that are not a plan op's (greedy sampling on the device).
const std::vector<KernelTemplate> &auxiliaryKernelTemplates();

} // namespace kiln::rt
