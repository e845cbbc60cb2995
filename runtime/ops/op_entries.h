// The entries op_table.cc lists, one per file (runtime/ops/<name>_op.cc), and the kernel-instance
// helpers entries share. Not for use outside runtime/ops: read the table (op_table.h).
#pragma once

#include "runtime/ops/op_table.h"

namespace kiln::rt::ops {

const OpEntry &embeddingOp();
const OpEntry &rmsNormOp();
const OpEntry &addRmsNormOp();
const OpEntry &linearOp();
const OpEntry &ropeKvWriteOp();
const OpEntry &attentionOp();
const OpEntry &siluMulOp();
const OpEntry &addOp();
const OpEntry &gatherRowsOp();
const OpEntry &allReduceOp();
const OpEntry &allGatherOp();
const OpEntry &geluTanhMulOp();
const OpEntry &softcapOp();
const OpEntry &layerNormOp();
const OpEntry &geluOp();
const OpEntry &moeExpertsOp();
const OpEntry &sigmoidGatedAddOp();

// silu_mul / gelu_tanh_mul: a gated activation's entry, y = act(gu[:, :I]) * gu[:, I:], with
// its kernel function in elementwise.cuh (silu_mul_op.cc).
OpEntry gatedMulEntry(schema::OpParams kind, const char *name, const char *kernelFunction,
                      Status (*packParams)(const OpParamValues &, schema::OpParamsUnion &),
                      CpuOpFn cpu);
// rms_norm / add_rms_norm / layer_norm / sigmoid_gated_add: w is input `weightInput`
// (rms_norm_op.cc).
KernelInstance normInstance(const char *op, const KernelPlanContext &k, size_t weightInput);
// add / gather_rows: rows of the output's width in chunks (add_op.cc).
KernelInstance rowChunkInstance(const char *op, const KernelPlanContext &k);

} // namespace kiln::rt::ops
