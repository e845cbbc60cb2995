// NVRTC compiles every kernel a Llama plan needs, for the test fixtures' and Llama-3.1-8B's
// shapes, to CUBIN for sm_80 and sm_90a plus PTX. No GPU needed.
#include "compiler/codegen/kernel_catalog.h"
#include "compiler/codegen/nvrtc_compiler.h"
#include "tests/kernels/cuda/decoder_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string_view>

namespace kiln::compiler {
namespace {

struct Shape {
  const char *name;
  kiln::testing::DecoderKernelShape params;
};

std::vector<Shape> modelShapes() {
  return {
      {"tiny-llama", {64, 4, 2, 16, 128, 16, 0, "f32", ""}},
      {"tiny-llama-tied", {64, 4, 2, 16, 128, 16, 0, "f32", "bf16"}},
      {"tiny-llama3", {64, 4, 1, 32, 128, 16, 0, "f32", ""}},
      {"tinystories-656K", {128, 8, 4, 16, 384, 16, 0, "f32", ""}},
      {"stories260K", {64, 8, 4, 8, 172, 16, 0, "f32", ""}},
      {"llama-3.1-8B", {4096, 32, 8, 128, 14336, 16, 0, "f32", ""}},
  };
}

// Every shape in fp32 and bf16, plus fp16 for the fp16 fixture, deduplicated by symbol.
std::vector<KernelInstance> allInstances() {
  std::vector<KernelInstance> all;
  std::set<std::string> seen;
  for (const Shape &shape : modelShapes()) {
    std::vector<std::string> dtypes = {"f32", "bf16"};
    if (std::string_view(shape.name) == "tiny-llama3")
      dtypes.push_back("f16");
    for (const std::string &dtype : dtypes) {
      kiln::testing::DecoderKernelShape params = shape.params;
      params.dtype = dtype;
      if (dtype != "f32") // a bf16 table with fp32 activations is the tied fixture's case only
        params.weightDtype = "";
      for (KernelInstance &instance : kiln::testing::decoderKernels(params))
        if (seen.insert(instance.symbol).second)
          all.push_back(std::move(instance));
    }
  }
  return all;
}

bool containsBytes(const std::vector<uint8_t> &haystack, std::string_view needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

// One test for the whole batch: ctest runs every TEST in its own process, and the batch is the
// expensive part (two NVRTC compiles of ~110 kernels).
TEST(NvrtcCompiler, EveryLlamaKernelOfTheTestModelsCompilesForSm80AndSm90a) {
  const std::vector<KernelInstance> instances = allInstances();
  EXPECT_GT(instances.size(), 90u); // 6 shapes x 10 kernels x 2 dtypes, minus shared kernels
  auto compiled = compileKernelModules(instances, {"cpu", "sm_80", "sm_90a"});
  ASSERT_TRUE(compiled.isOk()) << compiled.status().toString();
  const std::vector<KernelModuleImage> &modules = *compiled;

  ASSERT_EQ(modules.size(), 3u);
  EXPECT_EQ(modules[0].target, "sm_80");
  EXPECT_EQ(modules[0].format, KernelImageFormat::kCubin);
  EXPECT_EQ(modules[1].target, "sm_90a");
  EXPECT_EQ(modules[1].format, KernelImageFormat::kCubin);
  EXPECT_EQ(modules[2].target, "compute_80");
  EXPECT_EQ(modules[2].format, KernelImageFormat::kPtx);

  for (size_t m = 0; m < 2; ++m) {
    const KernelModuleImage &module = modules[m];
    ASSERT_GT(module.image.size(), 4u);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char *>(module.image.data()), 4), "\x7f"
                                                                                        "ELF");
    ASSERT_EQ(module.kernels.size(), instances.size());
    for (const KernelInstance &instance : instances)
      EXPECT_TRUE(containsBytes(module.image, instance.symbol + '\0'))
          << module.target << " lacks " << instance.symbol;
  }

  const KernelModuleImage &ptx = modules.back();
  ASSERT_FALSE(ptx.image.empty());
  EXPECT_EQ(ptx.image.back(), 0) << "PTX must be NUL-terminated for cuModuleLoadData";
  std::string_view text(reinterpret_cast<const char *>(ptx.image.data()), ptx.image.size() - 1);
  EXPECT_NE(text.find(".target sm_80"), std::string_view::npos);
  for (const KernelInstance &instance : instances)
    EXPECT_NE(text.find(".entry " + instance.symbol + "("), std::string_view::npos)
        << instance.symbol;
}

TEST(NvrtcCompiler, ArchSpecificLowestTargetGetsPortablePtx) {
  auto modules = compileKernelModules(
      {makeKernelInstance(
          "rms_norm",
          {{"dtype", "bf16"}, {"weight_dtype", "bf16"}, {"hidden", "64"}, {"threads", "32"}})},
      {"sm_90a"});
  ASSERT_TRUE(modules.isOk()) << modules.status().toString();
  ASSERT_EQ(modules->size(), 2u);
  EXPECT_EQ((*modules)[1].target, "compute_90");
  std::string_view text(reinterpret_cast<const char *>((*modules)[1].image.data()));
  EXPECT_NE(text.find(".target sm_90\n"), std::string_view::npos);
}

TEST(NvrtcCompiler, KernelErrorIncludesNvrtcLog) {
  // 64 query heads on one kv head of dim 256 in fp32 exceeds the decode kernel's shared memory:
  // the template's static_assert fires inside NVRTC.
  KernelInstance instance = makeKernelInstance("attention_decode", {{"dtype", "f32"},
                                                                    {"num_heads", "64"},
                                                                    {"num_kv_heads", "1"},
                                                                    {"head_dim", "256"},
                                                                    {"block_size", "16"},
                                                                    {"kv_dtype", "f32"}});
  auto modules = compileKernelModules({instance}, {"sm_80"});
  ASSERT_FALSE(modules.isOk());
  const std::string &message = modules.status().message();
  EXPECT_NE(message.find("NVRTC failed to compile the kernels for sm_80"), std::string::npos)
      << message;
  EXPECT_NE(message.find("shared memory over 48 KiB"), std::string::npos) << message;
}

TEST(NvrtcCompiler, SyntaxErrorIncludesNvrtcLog) {
  auto compiled = compileCudaSource("extern \"C\" __global__ void broken( { }\n", "sm_80");
  ASSERT_FALSE(compiled.isOk());
  const std::string &message = compiled.status().message();
  EXPECT_NE(message.find("log:"), std::string::npos) << message;
  EXPECT_NE(message.find("kiln_kernels.cu(1): error"), std::string::npos) << message;
}

TEST(NvrtcCompiler, UnsupportedTargetIsAClearError) {
  auto modules = compileKernelModules(
      kiln::testing::decoderKernels({64, 4, 2, 16, 128, 16, 0, "f32", ""}), {"sm_10"});
  ASSERT_FALSE(modules.isOk());
  const std::string &message = modules.status().message();
  EXPECT_NE(message.find("unsupported GPU target 'sm_10'"), std::string::npos) << message;
  EXPECT_NE(message.find("sm_90"), std::string::npos) << message;
  for (const char *bad : {"sm_", "sm_80b", "sm_80a", "compute_80", "gfx90a", ""})
    EXPECT_FALSE(parseSmTarget(bad).isOk()) << bad;
  auto sm = parseSmTarget("sm_90a");
  ASSERT_TRUE(sm.isOk());
  EXPECT_EQ(sm->number, 90);
  EXPECT_EQ(sm->suffix, "a");
}

TEST(NvrtcCompiler, CpuOnlyTargetsCompileNothing) {
  auto modules = compileKernelModules(
      kiln::testing::decoderKernels({64, 4, 2, 16, 128, 16, 0, "f32", ""}), {"cpu"});
  ASSERT_TRUE(modules.isOk());
  EXPECT_TRUE(modules->empty());
  auto twice = compileKernelModules({}, {"sm_80", "sm_80"});
  ASSERT_FALSE(twice.isOk());
  EXPECT_NE(twice.status().message().find("listed twice"), std::string::npos);
}

} // namespace
} // namespace kiln::compiler
