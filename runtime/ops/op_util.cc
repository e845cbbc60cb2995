#include "runtime/ops/op_util.h"

#include <limits>

namespace kiln::rt::ops {
namespace {

uint64_t checkedProduct(const flatbuffers::Vector<uint64_t> *dims, size_t first) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t product = 1;
  for (size_t i = first; dims && i < dims->size(); ++i) {
    uint64_t d = dims->Get(i);
    if (d != 0 && product > kMax / d)
      return kMax;
    product *= d;
  }
  return product;
}

} // namespace

uint64_t widthOf(const schema::Buffer *b) {
  return checkedProduct(b->shape(), 1);
}
uint64_t elementsOf(const schema::Buffer *b) {
  return checkedProduct(b->shape(), 0);
}

bool isStepInput(const schema::Buffer *b, schema::StepInputKind kind) {
  return b->kind() == schema::BufferKind::StepInput && b->step_input() == kind;
}

Status shapeError(const std::string &what) {
  return dataLoss(what);
}

bool sameRowsAndWidth(const schema::Buffer *a, const schema::Buffer *b) {
  return a->rows() == b->rows() && widthOf(a) == widthOf(b);
}

Status checkHeads(const schema::Plan &plan, uint32_t layer, uint32_t heads, uint32_t kvHeads,
                  uint32_t headDim) {
  const schema::KvCacheSpec &kv = *plan.kv_cache();
  if (layer >= kv.num_layers())
    return shapeError("layer " + std::to_string(layer) + " >= kv_cache.num_layers " +
                      std::to_string(kv.num_layers()));
  if (kvHeads != kv.num_kv_heads() || headDim != kv.head_dim())
    return shapeError("num_kv_heads/head_dim " + std::to_string(kvHeads) + "/" +
                      std::to_string(headDim) + " differ from kv_cache " +
                      std::to_string(kv.num_kv_heads()) + "/" + std::to_string(kv.head_dim()));
  if (heads == 0 || heads % kvHeads != 0)
    return shapeError("num_heads " + std::to_string(heads) + " is not a multiple of num_kv_heads " +
                      std::to_string(kvHeads));
  return okStatus();
}

uint64_t widthOf(const schema::BufferT &b) {
  uint64_t width = 1;
  for (size_t i = 1; i < b.shape.size(); ++i)
    width *= b.shape[i];
  return width;
}

std::string str(int64_t value) {
  return std::to_string(value);
}

kernels::cpu::ElemType elemType(schema::DType dtype) {
  using kernels::cpu::ElemType;
  return dtype == schema::DType::BF16     ? ElemType::kBF16
         : dtype == schema::DType::F16    ? ElemType::kF16
         : dtype == schema::DType::F8E4M3 ? ElemType::kF8E4M3
                                          : ElemType::kF32;
}

kernels::cpu::QuantWeight quantOf(const BoundBuffer &b) {
  if (!isQuantDType(b.dtype))
    return {};
  return {quantFormatOf(b.dtype), static_cast<int32_t>(b.groupSize)};
}

} // namespace kiln::rt::ops
