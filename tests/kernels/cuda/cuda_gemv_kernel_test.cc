// The GEMV kernel (kernels/cuda/gemv.cuh) against the CPU Linear (kernels/cpu linear): every row
// count 1..kGemvMaxRows at one and two W rows per warp, in-features that are and are not whole
// 16-byte vectors, out-features around a CTA's 4 and 8 outputs, fp32/fp16/bf16 with y of the
// same dtype or fp32 (the lm_head), with and without an fp32 bias, and two Llama-3.1-8B shapes.
// Label gpu: skips without a device.
#include "compiler/codegen/kernel_catalog.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/params.h"
#include "tests/kernels/cuda/gpu_harness.h"

namespace kiln::testing {
namespace {

namespace kc = kiln::kernels::cuda;
namespace cpu = kiln::kernels::cpu;

struct GemvCase {
  std::string dtype, yDtype;
  int32_t in, out;
  bool bias;
};

cpu::ElemType elemOf(const std::string &dtype) {
  return dtype == "f16"    ? cpu::ElemType::kF16
         : dtype == "bf16" ? cpu::ElemType::kBF16
                           : cpu::ElemType::kF32;
}

KernelInstance instanceFor(const GemvCase &c) {
  return compiler::makeKernelInstance(
      "gemv", {{"dtype", c.dtype}, {"in", std::to_string(c.in)}, {"y_dtype", c.yDtype}});
}

std::vector<GemvCase> cases() {
  std::vector<GemvCase> all;
  for (const char *dtype : {"f32", "f16", "bf16"})
    for (auto [in, out] :
         std::vector<std::pair<int32_t, int32_t>>{{8, 1}, {64, 15}, {64, 16}, {100, 17}, {128, 33}})
      for (bool bias : {false, true})
        all.push_back({dtype, dtype, in, out, bias});
  all.push_back({"bf16", "f32", 64, 40, false}); // a bf16 lm_head writing fp32 logits
  all.push_back({"f16", "f32", 100, 17, true});
  all.push_back({"bf16", "bf16", 4096, 64, false});  // Llama-3.1-8B qkv / gate_up rows
  all.push_back({"bf16", "bf16", 14336, 32, false}); // Llama-3.1-8B down rows
  return all;
}

// Outputs are sums of `in` products of values in [-1, 1]: tolerances grow with sqrt(in).
float scaleFor(int32_t in) {
  return std::sqrt(static_cast<float>(in) / 64.0f) + 1.0f;
}

void checkCase(GpuHarness &gpu, const GemvCase &c) {
  SCOPED_TRACE(instanceFor(c).symbol + (c.bias ? " with bias" : ""));
  const uint32_t seed = static_cast<uint32_t>(c.in * 131 + c.out * 7 + c.bias);
  const std::vector<float> x = randomValues(size_t(kc::kGemvMaxRows) * c.in, seed, c.dtype);
  const std::vector<float> w = randomValues(size_t(c.out) * c.in, seed + 1, c.dtype);
  const std::vector<float> bias = randomValues(size_t(c.out), seed + 2, "f32");
  const std::vector<uint8_t> xBytes = encode(x, c.dtype), wBytes = encode(w, c.dtype);
  void *dx = gpu.upload(xBytes);
  void *dw = gpu.upload(wBytes);
  void *dbias = gpu.uploadPod(bias);
  const size_t yBytes = size_t(kc::kGemvMaxRows) * c.out * (c.yDtype == "f32" ? 4 : 2);
  void *dy = nullptr;
  for (int32_t rows = 1; rows <= kc::kGemvMaxRows; ++rows)
    for (int32_t outs = 1; outs <= kc::kGemvMaxOutputsPerWarp; ++outs) {
      SCOPED_TRACE("rows " + std::to_string(rows) + ", W rows per warp " + std::to_string(outs));
      std::vector<uint8_t> expected(size_t(rows) * c.out * (c.yDtype == "f32" ? 4 : 2));
      cpu::linear({xBytes.data(), wBytes.data(), elemOf(c.dtype), c.bias ? bias.data() : nullptr,
                   expected.data(), rows, c.in, c.out, elemOf(c.dtype), elemOf(c.yDtype)});
      dy = gpu.upload(std::vector<uint8_t>(yBytes, 0xff)); // no output left from the last launch
      kc::GemvParams p{dx,    dw,  c.bias ? static_cast<const float *>(dbias) : nullptr, dy, rows,
                       c.out, outs};
      const uint32_t grid = (c.out + kc::gemvOutputsPerCta(outs) - 1) / kc::gemvOutputsPerCta(outs);
      ASSERT_TRUE(gpu.launch(instanceFor(c).symbol, grid, 1, 1, kc::kGemvThreads, p).isOk());
      const std::vector<float> got = decode(gpu.download(dy, expected.size()), c.yDtype);
      // y rounded once to its dtype; fp32 sums differ from the CPU's only by order.
      expectClose(got, decode(expected, c.yDtype), c.yDtype, "y", scaleFor(c.in));
    }
}

TEST(CudaGemv, MatchesTheCpuLinearForEveryRowCountAndShape) {
  KILN_GPU_OR_SKIP(gpu);
  std::vector<KernelInstance> instances;
  std::set<std::string> seen;
  for (const GemvCase &c : cases())
    if (seen.insert(instanceFor(c).symbol).second)
      instances.push_back(instanceFor(c));
  Status loaded = gpu->load(instances);
  ASSERT_TRUE(loaded.isOk()) << loaded.toString();
  for (const GemvCase &c : cases()) {
    checkCase(*gpu, c);
    if (HasFatalFailure())
      return;
  }
}

TEST(CudaGemv, CatalogNamesAndShapesTheKernel) {
  const KernelInstance k = instanceFor({"bf16", "f32", 4096, 1, false});
  EXPECT_EQ(k.symbol, "kiln_gemv_bf16_4096_f32");
  auto shape = compiler::launchShapeOf(k);
  ASSERT_TRUE(shape.isOk()) << shape.status().toString();
  EXPECT_EQ(shape->gridRows, compiler::GridRows::kGemv);
  EXPECT_EQ(shape->threads, kc::kGemvThreads);
  KernelInstance bad = k;
  bad.constants["y_dtype"] = "i32";
  EXPECT_FALSE(compiler::validateKernelInstance(bad).isOk());
}

} // namespace
} // namespace kiln::testing
