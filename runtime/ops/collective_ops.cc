// The collectives of tensor parallelism (plan.fbs AllReduce, AllGather): run by the executor's
// communicator (runtime/exec/communicator.h), never by a device, so their entries have no kernels.
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

OpArity arity(const schema::Op &) {
  return {1, 1};
}

Status checkAllReduce(const PlanOpView &v) {
  if (!sameRowsAndWidth(v.in[0], v.out[0]) || v.in[0]->dtype() != v.out[0]->dtype())
    return shapeError("x and y rows/widths/dtypes differ");
  return okStatus();
}

Status checkAllGather(const PlanOpView &v) {
  uint64_t n = widthOf(v.in[0]), m = widthOf(v.out[0]), tp = v.plan.tp();
  if (v.in[0]->rows() != v.out[0]->rows() || v.in[0]->dtype() != v.out[0]->dtype() || m > tp * n ||
      m <= (tp - 1) * n)
    return shapeError("x(rows, n) -> y(rows, m) needs equal rows and (tp-1)*n < m <= tp*n (tp " +
                      std::to_string(tp) + ", n " + std::to_string(n) + ", m " + std::to_string(m) +
                      ")");
  return okStatus();
}

OpEntry collective(schema::OpParams kind, const char *name, Status (*check)(const PlanOpView &)) {
  OpEntry e;
  e.kind = kind;
  e.name = name;
  e.arity = &arity;
  e.checkShapes = check;
  e.collective = true;
  return e;
}

} // namespace

const OpEntry &allReduceOp() {
  static const OpEntry entry = [] {
    OpEntry e = collective(schema::OpParams::AllReduceParams, "all_reduce", &checkAllReduce);
    e.packParams = [](const OpParamValues &, schema::OpParamsUnion &out) {
      out.Set(schema::AllReduceParamsT{});
      return okStatus();
    };
    return e;
  }();
  return entry;
}

const OpEntry &allGatherOp() {
  static const OpEntry entry = [] {
    OpEntry e = collective(schema::OpParams::AllGatherParams, "all_gather", &checkAllGather);
    e.packParams = [](const OpParamValues &, schema::OpParamsUnion &out) {
      out.Set(schema::AllGatherParamsT{});
      return okStatus();
    };
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
