#include "runtime/ops/op_table.h"

#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"

#include <cmath>

namespace kiln::rt {

std::span<const OpEntry *const> opTable() {
  static const std::vector<const OpEntry *> table = {
      &ops::embeddingOp(),       &ops::rmsNormOp(),    &ops::addRmsNormOp(), &ops::linearOp(),
      &ops::ropeKvWriteOp(),     &ops::attentionOp(),  &ops::siluMulOp(),    &ops::addOp(),
      &ops::gatherRowsOp(),      &ops::allReduceOp(),  &ops::allGatherOp(),  &ops::geluTanhMulOp(),
      &ops::softcapOp(),         &ops::moeExpertsOp(), &ops::layerNormOp(),  &ops::geluOp(),
      &ops::sigmoidGatedAddOp(),
  };
  return table;
}

const OpEntry *findOp(schema::OpParams kind) {
  for (const OpEntry *entry : opTable())
    if (entry->kind == kind)
      return entry;
  return nullptr;
}

const OpEntry *findOp(std::string_view name) {
  for (const OpEntry *entry : opTable())
    if (name == entry->name)
      return entry;
  return nullptr;
}

const std::vector<KernelTemplate> &auxiliaryKernelTemplates() {
  // Greedy sampling on the device (runtime/hal/device.h argmaxRows): every CUDA module carries
  // one instance, found by name (kernels/cuda/params.h kArgmaxRowsSymbol).
  static const std::vector<KernelTemplate> templates = {
      {"argmax_rows", "sampling.cuh", "ArgmaxRowsParams", "argmaxRows", {"threads"}}};
  return templates;
}

Result<double> OpParamValues::find(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return invalidArgument("missing attribute '" + name + "'");
  return it->second;
}

Result<float> OpParamValues::f32(const std::string &name) const {
  KILN_ASSIGN_OR_RETURN(double value, find(name));
  return static_cast<float>(value);
}

Result<uint32_t> OpParamValues::u32(const std::string &name) const {
  KILN_ASSIGN_OR_RETURN(double value, find(name));
  if (!(value >= 0 && value <= 4294967295.0) || std::floor(value) != value)
    return invalidArgument("attribute '" + name + "' is " + std::to_string(value) +
                           "; expected an integer in [0, 2^32)");
  return static_cast<uint32_t>(value);
}

} // namespace kiln::rt
