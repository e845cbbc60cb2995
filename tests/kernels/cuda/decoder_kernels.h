// The kernel instances a Llama-shaped decoder's plan gets, derived the way `kiln compile` derives
// them: through the op table entries (runtime/ops/op_table.h) of a one-rank plan holding one op of
// each kernel kind. For kernel tests that need instances for a model shape without compiling one.
#pragma once

#include "runtime/ops/op_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kiln::testing {

struct DecoderKernelShape {
  int64_t hidden = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  int64_t intermediate = 0;
  int64_t blockSize = 16;     // KV cache block size
  int64_t rotaryDim = 0;      // 0: headDim
  std::string dtype = "bf16"; // activations and KV cache: "f32", "f16", "bf16"
  std::string weightDtype;    // embedding table and norm weights; empty: dtype
};

namespace decoder_kernels_detail {

inline schema::DType dtypeOf(const std::string &name) {
  return name == "f16"    ? schema::DType::F16
         : name == "bf16" ? schema::DType::BF16
                          : schema::DType::F32;
}

inline uint32_t addBuffer(schema::RankT &rank, schema::BufferKind kind, schema::DType dtype,
                          std::vector<uint64_t> shape, schema::RowScale rows) {
  auto b = std::make_unique<schema::BufferT>();
  b->name = "b" + std::to_string(rank.buffers.size());
  b->kind = kind;
  b->dtype = dtype;
  b->shape = std::move(shape);
  b->rows = rows;
  rank.buffers.push_back(std::move(b));
  return static_cast<uint32_t>(rank.buffers.size() - 1);
}

} // namespace decoder_kernels_detail

// In the order embedding, rms_norm, add_rms_norm, rope_kv_write, attention_decode,
// attention_decode_reduce, attention_prefill, silu_mul, add, gather_rows.
inline std::vector<rt::KernelInstance> decoderKernels(const DecoderKernelShape &s) {
  namespace d = decoder_kernels_detail;
  using schema::BufferKind;
  using schema::RowScale;
  const schema::DType act = d::dtypeOf(s.dtype);
  const schema::DType weight = d::dtypeOf(s.weightDtype.empty() ? s.dtype : s.weightDtype);
  const uint64_t hidden = s.hidden, t = 8;
  const int64_t rotary = s.rotaryDim > 0 ? s.rotaryDim : s.headDim;
  schema::RankT rank;
  auto activation = [&](uint64_t width, RowScale rows = RowScale::Tokens) {
    return d::addBuffer(rank, BufferKind::Activation, act, {t, width}, rows);
  };
  auto stepInput = [&]() {
    return d::addBuffer(rank, BufferKind::StepInput, schema::DType::I32, {t}, RowScale::Tokens);
  };
  const uint32_t ids = stepInput(), x = activation(hidden), y = activation(hidden);
  const uint32_t table =
      d::addBuffer(rank, BufferKind::Weight, weight, {64, hidden}, RowScale::Fixed);
  const uint32_t norm = d::addBuffer(rank, BufferKind::Weight, weight, {hidden}, RowScale::Fixed);
  const uint64_t qWidth = s.numHeads * s.headDim;
  const uint32_t qkv = activation((s.numHeads + 2 * s.numKvHeads) * s.headDim);
  const uint32_t q = activation(qWidth), o = activation(qWidth);
  const uint32_t invFreq = d::addBuffer(rank, BufferKind::Weight, schema::DType::F32,
                                        {static_cast<uint64_t>(rotary / 2)}, RowScale::Fixed);
  const uint32_t gu = activation(2 * s.intermediate), act1 = activation(s.intermediate);
  const uint32_t logits = activation(hidden, RowScale::Logits);
  struct OpSpec {
    schema::OpParamsUnion params;
    std::vector<uint32_t> in, out;
  };
  std::vector<OpSpec> ops(8);
  ops[0].params.Set(schema::EmbeddingParamsT{});
  ops[0].in = {ids, table};
  ops[0].out = {x};
  ops[1].params.Set(schema::RmsNormParamsT{});
  ops[1].in = {x, norm};
  ops[1].out = {y};
  ops[2].params.Set(schema::AddRmsNormParamsT{});
  ops[2].in = {y, x, norm};
  ops[2].out = {x, y};
  schema::RopeKvWriteParamsT rope;
  rope.num_heads = static_cast<uint32_t>(s.numHeads);
  rope.num_kv_heads = static_cast<uint32_t>(s.numKvHeads);
  rope.head_dim = static_cast<uint32_t>(s.headDim);
  rope.rotary_dim = static_cast<uint32_t>(rotary);
  ops[3].params.Set(rope);
  ops[3].in = {qkv, ids, ids, invFreq};
  ops[3].out = {q};
  schema::AttentionParamsT attention;
  attention.num_heads = rope.num_heads;
  attention.num_kv_heads = rope.num_kv_heads;
  attention.head_dim = rope.head_dim;
  attention.scale = 1.0f;
  ops[4].params.Set(attention);
  ops[4].in = {q, ids, ids, ids, ids};
  ops[4].out = {o};
  ops[5].params.Set(schema::SiluMulParamsT{});
  ops[5].in = {gu};
  ops[5].out = {act1};
  ops[6].params.Set(schema::AddParamsT{});
  ops[6].in = {x, y};
  ops[6].out = {y};
  ops[7].params.Set(schema::GatherRowsParamsT{});
  ops[7].in = {x, ids};
  ops[7].out = {logits};
  std::vector<rt::KernelInstance> all;
  for (OpSpec &spec : ops) {
    schema::OpT op;
    op.params = spec.params;
    op.inputs = spec.in;
    op.outputs = spec.out;
    const rt::OpEntry *entry = rt::findOp(op.params.type);
    rt::KernelPlanContext context{op, rank, static_cast<uint32_t>(s.blockSize), act};
    auto instances = entry->cuda.instances(context);
    EXPECT_TRUE(instances.isOk()) << instances.status().toString();
    if (!instances.isOk())
      return {};
    if (op.params.type == schema::OpParams::AttentionParams) // prefill, decode, reduce
      std::rotate(instances->begin(), instances->begin() + 1, instances->end());
    all.insert(all.end(), instances->begin(), instances->end());
  }
  return all;
}

} // namespace kiln::testing
