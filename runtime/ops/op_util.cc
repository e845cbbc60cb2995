#include "runtime/ops/op_util.h"

#include <algorithm>
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

Status checkKvGroup(const schema::Plan &plan, uint32_t layer, const schema::Buffer *input,
                    int64_t window) {
  const auto *groups = plan.kv_cache()->groups();
  uint32_t group = 0, groupWindow = 0;
  for (uint32_t g = 0; groups && g < groups->size(); ++g) {
    const auto *layers = groups->Get(g)->layers();
    if (layers && std::find(layers->begin(), layers->end(), layer) != layers->end()) {
      group = g;
      groupWindow = groups->Get(g)->sliding_window();
    }
  }
  if (input->kv_group() != group)
    return shapeError("layer " + std::to_string(layer) + " is in kv_cache group " +
                      std::to_string(group) + " but its " +
                      schema::EnumNameStepInputKind(input->step_input()) + " input is group " +
                      std::to_string(input->kv_group()) + "'s");
  if (window >= 0 && groupWindow > 0 && window != groupWindow)
    return shapeError("sliding_window " + std::to_string(window) + " differs from kv_cache group " +
                      std::to_string(group) + "'s " + std::to_string(groupWindow) +
                      ": the group would free blocks the attention reads");
  return okStatus();
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
