// Linear (plan.fbs): y = x W^T (+ b). A library op on GPUs (cuBLASLt, runtime/hal/cuda/
// cuda_linear.h); its GEMV template runs decode-sized row counts where it beats cuBLASLt
// (runtime/hal/cuda/cuda_gemv.h). A quantized W runs on kernels/cuda/quant.cuh's GEMV for decode
// rows, and for more rows on the tile GEMM of kernels/cuda/quant_gemm.cuh or its weights written
// in x's dtype for cuBLASLt (runtime/hal/cuda/cuda_quant_linear.h).
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"
#include "runtime/ops/plan_types.h"
#include "runtime/ops/quant_sections.h"

namespace kiln::rt::ops {
namespace {

OpArity arity(const schema::Op &op) {
  const auto *params = op.params_as_LinearParams();
  return {params && params->has_bias() ? 3u : 2u, 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::LinearParamsT params;
  params.has_bias = values.numInputs == 3;
  out.Set(std::move(params));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  const schema::Buffer *x = v.in[0], *w = v.in[1], *y = v.out[0];
  if (w->shape()->size() != 2 || widthOf(x) != w->shape()->Get(1) ||
      widthOf(y) != w->shape()->Get(0) || x->rows() != y->rows() ||
      (v.in.size() == 3 && elementsOf(v.in[2]) != widthOf(y)))
    return shapeError("x(rows, in), W[out, in], bias[out], y(rows, out) do not agree");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  const BoundBuffer &w = op.inputs[1];
  const BoundBuffer &y = op.outputs[0];
  const float *bias = op.inputs.size() == 3 ? f32(op.inputs[2]) : nullptr;
  kernels::cpu::linear({x.data, w.data, elemType(w), bias, y.data, rowsOf(x, c), widthOf(w),
                        static_cast<int32_t>(w.fixedRows), elemType(x), elemType(y),
                        op.cpuPackedWeights, quantOf(w)});
}

// At amx, bf16 weights in the tiles' layout (kernels/cpu/linear_amx.cc); from avx2 up, fp32
// weights in panels (kernels/cpu/linear_panels_impl.inc: 16 outputs at avx2, 32 from avx512 up);
// from avx512 up, quantized ones in 16-output panels (kernels/cpu/linear_quant.h).
size_t cpuPackedBytes(const BoundOp &op) {
  const BoundBuffer &w = op.inputs[1];
  return kernels::cpu::linearPackedWeightBytes(elemType(w), static_cast<int32_t>(w.fixedRows),
                                               static_cast<int32_t>(w.width), quantOf(w));
}

std::vector<std::span<const uint8_t>> packCpuWeights(const BoundOp &op, void *packed) {
  const BoundBuffer &w = op.inputs[1];
  kernels::cpu::packLinearWeights(w.data, elemType(w), static_cast<int32_t>(w.fixedRows),
                                  static_cast<int32_t>(w.width), packed, quantOf(w));
  const uint64_t shape[2] = {static_cast<uint64_t>(w.fixedRows), static_cast<uint64_t>(w.width)};
  return {
      {static_cast<const uint8_t *>(w.data),
       static_cast<size_t>(weightSize(w.dtype, shape, static_cast<uint64_t>(w.groupSize)).bytes)}};
}

// A quantized W: the GEMV on its packed bytes (decode rows), the tile GEMM decoding it into shared
// memory and the kernel that writes it in x's dtype for cuBLASLt (more rows, whichever runs
// faster), in that order (runtime/hal/cuda/cuda_quant_linear.h).
std::vector<KernelInstance> quantInstances(const schema::BufferT &x, const schema::BufferT &w,
                                           const schema::BufferT &y) {
  std::map<std::string, std::string> dequant = quantKernelConstants(w);
  dequant["dtype"] = kernelDType(x.dtype);
  dequant["in"] = str(w.shape[1]);
  std::map<std::string, std::string> gemv = dequant;
  gemv["y_dtype"] = kernelDType(y.dtype);
  std::map<std::string, std::string> gemm = gemv;
  gemm["threads"] = str(kernels::cuda::kTileThreads);
  return {makeKernelInstance("gemv_quant", std::move(gemv)),
          makeKernelInstance("gemm_quant", std::move(gemm)),
          makeKernelInstance("dequant_weights", std::move(dequant))};
}

// The GEMV kernel runs a Linear whose x and W share one float dtype, with no bias or an F32 one;
// other Linears get no instance and always run on cuBLASLt. A quantized W needs float x and y and
// no bias or an F32 one (else no instance: the CUDA backend refuses the op at load).
Result<std::vector<KernelInstance>> instances(const KernelPlanContext &k) {
  const schema::BufferT &x = k.input(0), &w = k.input(1), &y = k.output(0);
  const bool f32Bias = k.op.inputs.size() < 3 || k.input(2).dtype == schema::DType::F32;
  if (isQuantDType(w.dtype) && w.shape.size() == 2 && isFloatDType(x.dtype) &&
      isFloatDType(y.dtype) && f32Bias)
    return quantInstances(x, w, y);
  if (x.dtype != w.dtype || !isFloatDType(x.dtype) || !isFloatDType(y.dtype) || !f32Bias ||
      w.shape.size() != 2 || w.shape[1] < 1 || w.shape[1] > (1u << 20))
    return std::vector<KernelInstance>{};
  return std::vector<KernelInstance>{
      makeKernelInstance("gemv", {{"dtype", kernelDType(x.dtype)},
                                  {"in", str(w.shape[1])},
                                  {"y_dtype", kernelDType(y.dtype)}})};
}

// x, W (+ bias) read, y written; 2 * rows * in * out flops.
OpCost cost(const OpCostInputs &in) {
  OpCost cost = everyBufferCost(in);
  const BoundBuffer &x = in.input(0), &w = in.input(1);
  const auto rows = static_cast<uint64_t>(in.counts.rows(x.rows, x.fixedRows));
  cost.flops = 2 * rows * static_cast<uint64_t>(w.width) * static_cast<uint64_t>(w.fixedRows);
  return cost;
}

} // namespace

const OpEntry &linearOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::LinearParams;
    e.name = "linear";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.matrixWeightInputs = 1u << 1;
    e.outputDtypeMayDiffer = true; // the lm_head writes F32 logits from half activations
    e.runCpu = &runCpu;
    e.cpuPackedBytes = &cpuPackedBytes;
    e.packCpuWeights = &packCpuWeights;
    e.cuda.libraryOp = true;
    e.cuda.templates = {
        {"gemv", "gemv.cuh", "GemvParams", "gemv", {"dtype", "in", "y_dtype"}, KernelGrid::kGemv},
        {"gemv_quant",
         "quant.cuh",
         "GemvQuantParams",
         "gemvQuant",
         {"dtype", "in", "y_dtype", "format", "group"},
         KernelGrid::kGemv},
        {"gemm_quant",
         "quant_gemm.cuh",
         "GemmQuantParams",
         "GemmQuant",
         {"dtype", "in", "y_dtype", "format", "group", "threads"},
         KernelGrid::kRowCta},
        {"dequant_weights",
         "quant.cuh",
         "DequantParams",
         "dequantWeights",
         {"dtype", "in", "format", "group"},
         KernelGrid::kGemv}};
    e.cuda.instances = &instances;
    e.cost = &cost;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
