// Helpers the op table entries share (runtime/ops/*_op.cc): buffer widths for plan checks, bound
// buffer access for kernel arguments, and the element types of the CPU kernels. Not for use
// outside runtime/ops.
#pragma once

#include "kernels/cpu/kernels.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/plan_types.h"

#include <string>

namespace kiln::rt::ops {

// --- plan checks -------------------------------------------------------------------------------
// Product of the trailing dims (the row width); elements of the whole buffer.
uint64_t widthOf(const schema::Buffer *b);
uint64_t elementsOf(const schema::Buffer *b);
bool isStepInput(const schema::Buffer *b, schema::StepInputKind kind);
// A shape error: plan_check prefixes where it happened.
Status shapeError(const std::string &what);
// Heads of an op on the KV cache against the plan's kv_cache spec.
// `input` (a BlockTables or SlotMapping step input of `layer`'s op) belongs to the layer's KV cache
// group (plan.fbs "KV cache groups"), and a sliding-window group frees no block the layer's
// attention window (`window`, or -1 when the op has none) still reads.
Status checkKvGroup(const schema::Plan &plan, uint32_t layer, const schema::Buffer *input,
                    int64_t window);
Status checkHeads(const schema::Plan &plan, uint32_t layer, uint32_t heads, uint32_t kvHeads,
                  uint32_t headDim);
// An op that maps rows to rows: x and y have the same rows rule and width.
bool sameRowsAndWidth(const schema::Buffer *a, const schema::Buffer *b);

// --- compile time (kernel instances) -----------------------------------------------------------
uint64_t widthOf(const schema::BufferT &b);
std::string str(int64_t value);

// --- run time -----------------------------------------------------------------------------------
inline const float *f32(const BoundBuffer &b) {
  return static_cast<const float *>(b.data);
}
inline const int32_t *i32(const BoundBuffer &b) {
  return static_cast<const int32_t *>(b.data);
}
inline int32_t rowsOf(const BoundBuffer &b, const StepCounts &c) {
  return static_cast<int32_t>(c.rows(b.rows, b.fixedRows));
}
inline int32_t widthOf(const BoundBuffer &b) {
  return static_cast<int32_t>(b.width);
}
// ceil(a / b) for a launch's grid dimension (a >= 0, b > 0).
inline uint32_t ceilDiv(int64_t a, int64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}
// The cpu kernels' element type (the cpu backend admitted only F32/F16/BF16 where this is used).
kernels::cpu::ElemType elemType(schema::DType dtype);
inline kernels::cpu::ElemType elemType(const BoundBuffer &b) {
  return elemType(b.dtype);
}
// A weight matrix's quantization for the cpu kernels (groupSize 0: not quantized).
kernels::cpu::QuantWeight quantOf(const BoundBuffer &b);

} // namespace kiln::rt::ops
