// The host half of GEMV Linears (cuda_gemv.h), without a GPU: which ops can run on their GEMV
// kernel, the launch (grid, block, parameters byte for byte) and which step rows it serves.
#include "runtime/hal/cuda/cuda_gemv.h"

#include "runtime/hal/cuda/cuda_linear.h"
#include "schema/version.h"
#include "tests/runtime/hal_cuda/fake_buffer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace kiln::rt {
namespace {

namespace kc = kiln::kernels::cuda;
using schema::DType;
using schema::RowScale;

class GemvTest : public ::testing::Test {
protected:
  // x [maxRows, in], W [out, in], optional bias [out], y [maxRows, out] at fake addresses.
  BoundOp linear(const std::string &kernel, DType x, DType w, bool bias, DType biasType,
                 int64_t in = 64, int64_t out = 17, int64_t maxRows = 300) {
    fbb_.Clear();
    std::vector<uint32_t> inputs = {0, 1}, outputs = {3};
    if (bias)
      inputs.push_back(2);
    fbb_.Finish(schema::CreateOpDirect(fbb_, "layers.0.attn.o", schema::OpParams::LinearParams,
                                       schema::CreateLinearParams(fbb_, bias).Union(), &inputs,
                                       &outputs, kernel.c_str()));
    BoundOp op;
    op.op = flatbuffers::GetRoot<schema::Op>(fbb_.GetBufferPointer());
    op.inputs = {fakeBuffer(0x1000, x, RowScale::Tokens, maxRows, in),
                 fakeBuffer(0x2000, w, RowScale::Fixed, out, in)};
    if (bias)
      op.inputs.push_back(fakeBuffer(0x3000, biasType, RowScale::Fixed, out, 1));
    op.outputs = {fakeBuffer(0x4000, x, RowScale::Tokens, maxRows, out)};
    return op;
  }

  flatbuffers::FlatBufferBuilder fbb_;
};

TEST_F(GemvTest, OnlyOpsWithAKernelOneDtypeAndAnF32BiasCanRunOnIt) {
  const std::string kernel = "kiln_gemv_bf16_64_bf16";
  EXPECT_EQ(gemvSymbol(linear(kernel, DType::BF16, DType::BF16, false, DType::F32)), kernel);
  EXPECT_EQ(gemvSymbol(linear(kernel, DType::BF16, DType::BF16, true, DType::F32)), kernel);
  EXPECT_EQ(gemvSymbol(linear("", DType::BF16, DType::BF16, false, DType::F32)), "");
  EXPECT_EQ(gemvSymbol(linear(kernel, DType::F32, DType::BF16, false, DType::F32)), "");
  EXPECT_EQ(gemvSymbol(linear(kernel, DType::BF16, DType::BF16, true, DType::BF16)), "");
}

TEST_F(GemvTest, PlanCarriesTheBuffersAndNoBucketUntilChosen) {
  GemvPlan plan = planGemv(linear("k", DType::F16, DType::F16, true, DType::F32, 64, 17, 300));
  EXPECT_EQ(plan.params.x, reinterpret_cast<const void *>(0x1000));
  EXPECT_EQ(plan.params.w, reinterpret_cast<const void *>(0x2000));
  EXPECT_EQ(plan.params.bias, reinterpret_cast<const float *>(0x3000));
  EXPECT_EQ(plan.params.y, reinterpret_cast<void *>(0x4000));
  EXPECT_EQ(plan.params.out, 17);
  EXPECT_EQ(plan.rowsRule, RowScale::Tokens);
  EXPECT_EQ(plan.maxRows, 300);
  EXPECT_EQ(plan.outsPerWarpForBucket, std::vector<int32_t>(linearRowBuckets(300).size(), 0));
  EXPECT_EQ(planGemv(linear("k", DType::F16, DType::F16, false, DType::F32)).params.bias, nullptr);
}

TEST_F(GemvTest, RunsOnlyForRowsOfChosenBucketsUpToTheMaximum) {
  GemvPlan plan = planGemv(linear("k", DType::BF16, DType::BF16, false, DType::F32));
  // Buckets of 300 rows: 1, 2, 4, 8, 16, ...; choose 1 (one W row per warp) and 4 (rows 3..4,
  // two per warp).
  plan.outsPerWarpForBucket[0] = 1;
  plan.outsPerWarpForBucket[2] = 2;
  EXPECT_EQ(gemvOutsPerWarp(plan, 0), 0);
  EXPECT_EQ(gemvOutsPerWarp(plan, 1), 1);
  EXPECT_EQ(gemvOutsPerWarp(plan, 2), 0);
  EXPECT_EQ(gemvOutsPerWarp(plan, 3), 2);
  EXPECT_EQ(gemvOutsPerWarp(plan, 4), 2);
  EXPECT_EQ(gemvOutsPerWarp(plan, 5), 0);
  plan.outsPerWarpForBucket.assign(plan.outsPerWarpForBucket.size(), 1);
  EXPECT_EQ(gemvOutsPerWarp(plan, kc::kGemvMaxRows), 1);
  EXPECT_EQ(gemvOutsPerWarp(plan, kc::kGemvMaxRows + 1), 0); // never above the kernel's maximum
  GemvPlan small = planGemv(linear("k", DType::BF16, DType::BF16, false, DType::F32, 64, 17, 3));
  small.outsPerWarpForBucket.assign(small.outsPerWarpForBucket.size(), 1);
  EXPECT_EQ(gemvOutsPerWarp(small, 3), 1);
  EXPECT_EQ(gemvOutsPerWarp(small, 4), 0); // above the op's compiled rows
}

TEST_F(GemvTest, LaunchCoversEveryOutputWithWholeCtas) {
  GemvPlan plan = planGemv(linear("k", DType::BF16, DType::BF16, true, DType::F32, 64, 17));
  CudaLaunch launch = gemvLaunch(plan, 5, 1);
  EXPECT_EQ(launch.grid[0], 5u); // 17 outputs, 4 per CTA (4 warps of one W row)
  EXPECT_EQ(launch.grid[1], 1u);
  EXPECT_EQ(launch.grid[2], 1u);
  EXPECT_EQ(launch.block, uint32_t(kc::kGemvThreads));
  EXPECT_EQ(launch.sharedBytes, 0u);
  ASSERT_EQ(launch.paramBytes, sizeof(kc::GemvParams));
  kc::GemvParams params;
  std::memcpy(&params, launch.params.data(), sizeof(params));
  EXPECT_EQ(params.rows, 5);
  EXPECT_EQ(params.out, 17);
  EXPECT_EQ(params.outsPerWarp, 1);
  EXPECT_EQ(params.x, plan.params.x);
  EXPECT_EQ(params.bias, plan.params.bias);
  EXPECT_EQ(gemvLaunch(plan, 5, 2).grid[0], 3u); // 8 per CTA
  std::memcpy(&params, gemvLaunch(plan, 5, 2).params.data(), sizeof(params));
  EXPECT_EQ(params.outsPerWarp, 2);
  plan.params.out = 16;
  EXPECT_EQ(gemvLaunch(plan, 1, 1).grid[0], 4u);
  plan.params.out = 4096;
  EXPECT_EQ(gemvLaunch(plan, 1, 1).grid[0], 1024u);
  EXPECT_EQ(gemvLaunch(plan, 1, 2).grid[0], 512u);
}

TEST(GemvPlanVersion, OnlyPlansOfTodaysLaunchContractRunTheirGemvKernels) {
  EXPECT_FALSE(planGemvUsable(3)); // 16 outputs per 256-thread CTA, no outsPerWarp
  EXPECT_TRUE(planGemvUsable(4));
  EXPECT_TRUE(planGemvUsable(kSchemaVersion));
}

TEST(GemvOutsPerWarp, TwoWRowsPerWarpOnlyForWideLinears) {
  EXPECT_EQ(defaultGemvOutsPerWarp(4096), 1);
  EXPECT_EQ(defaultGemvOutsPerWarp(16383), 1);
  EXPECT_EQ(defaultGemvOutsPerWarp(16384), 2);
  EXPECT_EQ(defaultGemvOutsPerWarp(28672), 2);
}

TEST(GemvMode, FromTheEnvironment) {
  const char *saved = std::getenv("KILN_LINEAR_GEMV");
  const std::string restore = saved ? saved : "";
  unsetenv("KILN_LINEAR_GEMV");
  EXPECT_EQ(gemvModeFromEnvironment(), GemvMode::kAuto);
  setenv("KILN_LINEAR_GEMV", "always", 1);
  EXPECT_EQ(gemvModeFromEnvironment(), GemvMode::kAlways);
  setenv("KILN_LINEAR_GEMV", "never", 1);
  EXPECT_EQ(gemvModeFromEnvironment(), GemvMode::kNever);
  setenv("KILN_LINEAR_GEMV", "sometimes", 1);
  EXPECT_EQ(gemvModeFromEnvironment(), GemvMode::kAuto);
  if (saved)
    setenv("KILN_LINEAR_GEMV", restore.c_str(), 1);
  else
    unsetenv("KILN_LINEAR_GEMV");
}

} // namespace
} // namespace kiln::rt
