// The kernel JIT: codegen symbols parse back into their instances, and a kernel compiled from
// kernels/cuda on the host runs through the grid runner with exact results.
#include "tools/cudasim/kernel_jit.h"

#include "compiler/codegen/kernel_catalog.h"
#include "kernels/cuda/params.h"
#include "tests/kernels/cuda/decoder_kernels.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::cudasim {
namespace {

TEST(KernelJit, EveryLlamaKernelSymbolParsesBackIntoItsInstance) {
  for (const char *dtype : {"f32", "bf16", "f16"}) {
    kiln::testing::DecoderKernelShape params{4096, 32, 8, 128, 14336, 16, 0, dtype, "f32"};
    for (const compiler::KernelInstance &instance : kiln::testing::decoderKernels(params)) {
      Result<compiler::KernelInstance> parsed = parseKernelSymbol(instance.symbol);
      ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
      EXPECT_EQ(parsed->op, instance.op);
      EXPECT_EQ(parsed->constants, instance.constants) << instance.symbol;
    }
  }
}

TEST(KernelJit, MalformedSymbolsAreNotFoundWithTheReason) {
  EXPECT_EQ(parseKernelSymbol("matmul").status().message(),
            "kernel symbol 'matmul' is not a kiln codegen symbol (kiln_<op>_...)");
  EXPECT_EQ(parseKernelSymbol("kiln_softmax_f32").status().message(),
            "kernel symbol 'kiln_softmax_f32' names no kernel op");
  EXPECT_EQ(parseKernelSymbol("kiln_add_f32_32").status().message(),
            "kernel symbol 'kiln_add_f32_32' has 2 constants; op add takes 3");
  Result<compiler::KernelInstance> badThreads = parseKernelSymbol("kiln_add_f32_33_64");
  ASSERT_FALSE(badThreads.isOk());
  EXPECT_NE(badThreads.status().message().find("constant 'threads' is 33"), std::string::npos)
      << badThreads.status().message();
}

// kiln_add_f32_32_64: dtype f32, threads 32, width 64 -> 16-byte vectors of 4 floats, one
// chunk of 128 elements covers the row, so grid (rows, 1).
TEST(KernelJit, CompilesAndRunsTheAddKernelExactly) {
  Result<const HostKernel *> kernel = KernelJit::instance().kernel("kiln_add_f32_32_64");
  ASSERT_TRUE(kernel.isOk()) << kernel.status().toString();
  EXPECT_EQ((*kernel)->paramsBytes, sizeof(kernels::cuda::AddParams));
  EXPECT_EQ((*kernel)->maxThreads, 32u);
  const int rows = 3;
  std::vector<float> a(rows * 64), b(rows * 64), out(rows * 64, -1.0f);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = 0.5f * static_cast<float>(i);
    b[i] = 1000.0f - static_cast<float>(i);
  }
  kernels::cuda::AddParams params{a.data(), b.data(), out.data(), rows};
  ASSERT_TRUE(runGrid((*kernel)->symbol, (*kernel)->entry, &params, {rows, 1, 1}, {32, 1, 1},
                      (*kernel)->maxThreads)
                  .isOk());
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], a[i] + b[i]) << i;
  // The same symbol again is the same compiled kernel.
  EXPECT_EQ(*KernelJit::instance().kernel("kiln_add_f32_32_64"), *kernel);
}

TEST(KernelJit, UnknownSymbolsAreNotCompiled) {
  Result<const HostKernel *> kernel = KernelJit::instance().kernel("kiln_add_f99_32_64");
  ASSERT_FALSE(kernel.isOk());
  EXPECT_EQ(kernel.status().code(), StatusCode::kNotFound);
  EXPECT_NE(kernel.status().message().find("constant 'dtype' is 'f99'"), std::string::npos)
      << kernel.status().message();
}

} // namespace
} // namespace kiln::cudasim
