// The host half of quantized Linears on the GPU (cuda_quant_linear.h), without a GPU: the kernels
// an op must name (three, or two in a plan from before the tile GEMM), the sections and launches
// filled from bound buffers, which path each row bucket takes, the op cuBLASLt runs on the
// dequantized W, the workspace a plan asks for, and KILN_QUANT_GEMM's values.
#include "runtime/hal/cuda/cuda_quant_linear.h"

#include "runtime/base/quant_layout.h"
#include "tests/runtime/hal_cuda/fake_buffer.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::rt {
namespace {

namespace kc = kiln::kernels::cuda;
using schema::DType;
using schema::RowScale;

class QuantLinearTest : public ::testing::Test {
protected:
  // x [300, 128] bf16, W Q4M [72, 128] g64, bias [72] f32, y [300, 72] bf16 at fake addresses.
  BoundOp linear(const std::string &kernel, DType w = DType::Q4M) {
    fbb_.Clear();
    std::vector<uint32_t> inputs = {0, 1, 2}, outputs = {3};
    fbb_.Finish(schema::CreateOpDirect(fbb_, "layers.0.mlp.down", schema::OpParams::LinearParams,
                                       schema::CreateLinearParams(fbb_, true).Union(), &inputs,
                                       &outputs, kernel.c_str()));
    BoundOp op;
    op.op = flatbuffers::GetRoot<schema::Op>(fbb_.GetBufferPointer());
    op.inputs = {
        fakeBuffer(0x10000, DType::BF16, RowScale::Tokens, 300, 128),
        fakeBuffer(0x20000, w, RowScale::Fixed, 72, 128, schema::BufferKind::Weight),
        fakeBuffer(0x30000, DType::F32, RowScale::Fixed, 72, 1, schema::BufferKind::Weight)};
    op.inputs[1].groupSize = 64;
    op.outputs = {fakeBuffer(0x40000, DType::BF16, RowScale::Tokens, 300, 72)};
    return op;
  }
  flatbuffers::FlatBufferBuilder fbb_;
};

const std::string kKernels = "kiln_gemv_quant_bf16_3_64_128_bf16,kiln_gemm_quant_bf16_3_64_128_"
                             "256_bf16,kiln_dequant_weights_bf16_3_64_128";
// A plan compiled before the tile GEMM.
const std::string kOlderKernels =
    "kiln_gemv_quant_bf16_3_64_128_bf16,kiln_dequant_weights_bf16_3_64_128";

TEST_F(QuantLinearTest, PlansEveryKernelOnTheLayoutsSections) {
  BoundOp op = linear(kKernels);
  ASSERT_TRUE(isQuantLinear(op));
  Result<QuantLinearPlan> plan = planQuantLinear(op, fake(0x90000), false);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->gemvSymbol, "kiln_gemv_quant_bf16_3_64_128_bf16");
  EXPECT_EQ(plan->gemmSymbol, "kiln_gemm_quant_bf16_3_64_128_256_bf16");
  EXPECT_EQ(plan->dequantSymbol, "kiln_dequant_weights_bf16_3_64_128");
  // Q4M [72, 128]: 4,608 bytes of values, 64-byte aligned; 72 x 2 fp16 scales (288 bytes), the
  // mins 64-byte aligned after them.
  const QuantLayout layout = quantLayout(QuantFormat::kQ4Min, 72, 128, 64);
  EXPECT_EQ(layout.scalesOffset, 4608u);
  EXPECT_EQ(layout.minsOffset, 4608u + 320u);
  EXPECT_EQ(plan->gemv.w.values, fake(0x20000));
  EXPECT_EQ(plan->gemv.w.scales, fake(0x20000 + 4608));
  EXPECT_EQ(plan->gemv.w.mins, fake(0x20000 + 4608 + 320));
  EXPECT_EQ(plan->gemv.bias, fake(0x30000));
  EXPECT_EQ(plan->gemv.y, fake(0x40000));
  EXPECT_EQ(plan->dequant.out, fake(0x90000));

  CudaLaunch gemv = quantGemvLaunch(*plan, 3);
  kc::GemvQuantParams p;
  ASSERT_EQ(gemv.paramBytes, sizeof(p));
  std::memcpy(&p, gemv.params.data(), sizeof(p));
  EXPECT_EQ(p.rows, 3);
  EXPECT_EQ(p.out, 72);
  EXPECT_EQ(gemv.kernel, 0u);
  EXPECT_EQ(gemv.grid[0], 18u); // 4 W rows a CTA
  EXPECT_EQ(gemv.block, uint32_t(kc::kGemvThreads));

  CudaLaunch dequant = dequantLaunch(*plan);
  EXPECT_EQ(dequant.grid[0], 3u); // 72 x 4 runs of 32, 128 a CTA

  CudaLaunch gemm = quantGemmLaunch(*plan, 130);
  kc::GemmQuantParams g;
  ASSERT_EQ(gemm.paramBytes, sizeof(g));
  std::memcpy(&g, gemm.params.data(), sizeof(g));
  EXPECT_EQ(g.rows, 130);
  EXPECT_EQ(g.out, 72);
  EXPECT_EQ(g.x, fake(0x10000));
  EXPECT_EQ(g.w.mins, fake(0x20000 + 4608 + 320));
  EXPECT_EQ(g.bias, fake(0x30000));
  EXPECT_EQ(g.y, fake(0x40000));
  EXPECT_EQ(gemm.grid[0], 3u); // 130 rows, 64 a tile
  EXPECT_EQ(gemm.grid[1], 2u); // 72 outputs, 64 a tile
  EXPECT_EQ(gemm.block, uint32_t(kc::kTileThreads));
}

// Buckets of x's 300 rows: 1, 2, ..., 256, 300. Every one takes the path asked for, except in a
// plan without the tile GEMM.
TEST_F(QuantLinearTest, EveryBucketTakesThePathAskedForWhereThePlanHasIt) {
  Result<QuantLinearPlan> tiles = planQuantLinear(linear(kKernels), nullptr, true);
  ASSERT_TRUE(tiles.isOk()) << tiles.status().toString();
  EXPECT_EQ(tiles->buckets.back(), 300u);
  ASSERT_EQ(tiles->tilesForBucket.size(), tiles->buckets.size());
  for (int64_t rows : {9, 64, 257, 300})
    EXPECT_TRUE(quantUsesTiles(*tiles, rows)) << rows;
  Result<QuantLinearPlan> dequantize = planQuantLinear(linear(kKernels), fake(0x90000), false);
  ASSERT_TRUE(dequantize.isOk());
  EXPECT_FALSE(quantUsesTiles(*dequantize, 100));
  Result<QuantLinearPlan> older = planQuantLinear(linear(kOlderKernels), fake(0x90000), true);
  ASSERT_TRUE(older.isOk()) << older.status().toString();
  EXPECT_EQ(older->gemmSymbol, "");
  EXPECT_EQ(older->dequantSymbol, "kiln_dequant_weights_bf16_3_64_128");
  EXPECT_FALSE(quantUsesTiles(*older, 100));
}

TEST(QuantGemmMode, TakesAutoTilesOrDequantizeAndNamesTheVariableOtherwise) {
  EXPECT_EQ(*parseQuantGemmMode("auto"), QuantGemmMode::kAuto);
  EXPECT_EQ(*parseQuantGemmMode("tiles"), QuantGemmMode::kTiles);
  EXPECT_EQ(*parseQuantGemmMode("dequantize"), QuantGemmMode::kDequantize);
  Result<QuantGemmMode> bad = parseQuantGemmMode("tile");
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(),
            "KILN_QUANT_GEMM is 'tile'; it takes auto, tiles or dequantize (how a quantized "
            "Linear runs more than 8 rows on a GPU)");
}

TEST_F(QuantLinearTest, CublasRunsOnTheWorkspaceInXsDtype) {
  BoundOp op = linear(kKernels);
  BoundOp bound = dequantizedLinear(op, fake(0x90000));
  EXPECT_EQ(bound.inputs[1].data, fake(0x90000));
  EXPECT_EQ(bound.inputs[1].dtype, DType::BF16);
  EXPECT_EQ(bound.inputs[1].groupSize, 0);
  EXPECT_EQ(bound.inputs[1].fixedRows, 72);
  EXPECT_EQ(bound.inputs[0].data, op.inputs[0].data);
  EXPECT_FALSE(isQuantLinear(bound));
}

TEST_F(QuantLinearTest, AnArtifactWithoutTheKernelsIsRefusedNamingTheOp) {
  for (const std::string kernel :
       {std::string(), std::string("kiln_gemv_bf16_128_bf16"),
        std::string("kiln_dequant_weights_x,kiln_gemv_quant_y"),
        std::string("kiln_gemv_quant_y,kiln_gemv_bf16_128_bf16,kiln_dequant_weights_x"),
        std::string("kiln_gemv_quant_y,kiln_gemm_quant_z,kiln_dequant_weights_x,extra")}) {
    Result<QuantLinearPlan> plan = planQuantLinear(linear(kernel), fake(0x90000), true);
    ASSERT_FALSE(plan.isOk()) << kernel;
    EXPECT_NE(plan.status().message().find("'layers.0.mlp.down' (Linear): its W is Q4M"),
              std::string::npos)
        << plan.status().message();
    EXPECT_NE(plan.status().message().find("recompile with a GPU --target"), std::string::npos);
  }
}

TEST(QuantLinearWorkspace, IsTheLargestQuantizedWInItsXDtype) {
  flatbuffers::FlatBufferBuilder fbb;
  auto buffer = [&](DType dtype, std::vector<uint64_t> shape) {
    return schema::CreateBufferDirect(fbb, "b", schema::BufferKind::Weight, dtype, &shape);
  };
  // Linear 0: bf16 x, Q8 [96, 64]; Linear 1: f32 x, Q4 [40, 128]; Linear 2: a bf16 W (not counted).
  std::vector<flatbuffers::Offset<schema::Buffer>> buffers = {
      buffer(DType::BF16, {8, 64}), buffer(DType::Q8, {96, 64}), buffer(DType::F32, {8, 128}),
      buffer(DType::Q4, {40, 128}), buffer(DType::BF16, {500, 64})};
  auto linearOp = [&](uint32_t x, uint32_t w) {
    std::vector<uint32_t> in = {x, w}, out = {0};
    return schema::CreateOpDirect(fbb, "l", schema::OpParams::LinearParams,
                                  schema::CreateLinearParams(fbb, false).Union(), &in, &out);
  };
  std::vector<flatbuffers::Offset<schema::Op>> program = {linearOp(0, 1), linearOp(2, 3),
                                                          linearOp(0, 4)};
  std::vector<flatbuffers::Offset<schema::Rank>> ranks = {
      schema::CreateRankDirect(fbb, 0, "w", 0, nullptr, &buffers, &program)};
  schema::PlanBuilder plan(fbb);
  plan.add_ranks(fbb.CreateVector(ranks));
  fbb.Finish(plan.Finish());
  const auto *root = flatbuffers::GetRoot<schema::Plan>(fbb.GetBufferPointer());
  EXPECT_EQ(dequantWorkspaceBytes(*root), uint64_t(40 * 128 * 4)); // > 96 x 64 x 2
}

} // namespace
} // namespace kiln::rt
