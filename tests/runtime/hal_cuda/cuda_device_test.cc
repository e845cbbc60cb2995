// The cuda backend on a machine without a GPU: createDevice("cuda") reports it cleanly, the
// driver table resolves against the toolkit's stub libcuda, and the artifact module choice.
#include "runtime/hal/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace kiln::rt {
namespace {

TEST(CudaDevice, CreateDeviceWithoutAGpuSaysSo) {
  auto device = createDevice("cuda");
  if (device.isOk())
    GTEST_SKIP() << "a CUDA device is present (" << (*device)->name()
                 << "): the no-GPU path cannot be checked here";
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  const std::string &message = device.status().message();
  const bool noDriver =
      message.rfind("no CUDA driver found (libcuda.so.1): this machine has no NVIDIA GPU", 0) == 0;
  const bool initFailed = message.rfind("cuInit failed: ", 0) == 0;
  const bool noDevice = message.rfind("no CUDA device", 0) == 0;
  EXPECT_TRUE(noDriver || initFailed || noDevice) << message;
}

TEST(CudaDevice, MissingDriverLibraryIsNamed) {
  auto device = createCudaDevice({"/nonexistent/libcuda.so.1", 0});
  ASSERT_FALSE(device.isOk());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(device.status().message().rfind("no CUDA driver found (/nonexistent/libcuda.so.1): "
                                            "this machine has no NVIDIA GPU or its driver is not "
                                            "installed (dlopen: ",
                                            0),
            0u)
      << device.status().message();
}

TEST(CudaDevice, StubDriverResolvesEveryEntryPointThenCuInitFails) {
  if (!std::filesystem::exists(KILN_CUDA_STUB_DRIVER))
    GTEST_SKIP() << "no stub driver at " << KILN_CUDA_STUB_DRIVER;
  auto driver = CudaDriver::load(KILN_CUDA_STUB_DRIVER);
  ASSERT_TRUE(driver.isOk()) << driver.status().toString();
  EXPECT_NE((*driver)->memAlloc, nullptr);                // cuMemAlloc_v2
  EXPECT_NE((*driver)->devicePrimaryCtxRelease, nullptr); // cuDevicePrimaryCtxRelease_v2
  EXPECT_NE((*driver)->launchKernel, nullptr);
  EXPECT_NE((*driver)->streamBeginCapture, nullptr); // cuStreamBeginCapture_v2
  EXPECT_NE((*driver)->graphInstantiate, nullptr);   // cuGraphInstantiateWithFlags
  EXPECT_NE((*driver)->graphLaunch, nullptr);
  EXPECT_NE((*driver)->graphExecDestroy, nullptr);
  EXPECT_NE((*driver)->memGetInfo, nullptr); // cuMemGetInfo_v2: CudaDevice::memoryInfo

  auto device = createCudaDevice({KILN_CUDA_STUB_DRIVER, 0});
  ASSERT_FALSE(device.isOk());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(device.status().message().rfind("cuInit failed: ", 0), 0u) << device.status().message();
  EXPECT_NE(device.status().message().find(KILN_CUDA_STUB_DRIVER), std::string::npos);
}

TEST(CudaDevice, TargetNames) {
  EXPECT_EQ(smTargetName(9, 0), "sm_90a");
  EXPECT_EQ(smTargetName(10, 0), "sm_100a");
  EXPECT_EQ(smTargetName(8, 0), "sm_80");
  EXPECT_EQ(smTargetName(8, 9), "sm_89");
}

using schema::KernelFormat;

TEST(CudaDevice, ModuleSelectionPrefersExactCubinThenSameMajorThenPtx) {
  const std::vector<KernelModuleRef> modules = {{"sm_80", KernelFormat::Cubin},
                                                {"sm_90a", KernelFormat::Cubin},
                                                {"compute_80", KernelFormat::Ptx}};
  auto pick = [&](int major, int minor) { return selectKernelModule(major, minor, modules); };
  EXPECT_EQ(*pick(9, 0), 1u);  // H100/H200: its own CUBIN
  EXPECT_EQ(*pick(8, 0), 0u);  // A100
  EXPECT_EQ(*pick(8, 6), 0u);  // A10: sm_80 SASS runs on later 8.x
  EXPECT_EQ(*pick(8, 9), 0u);  // L4
  EXPECT_EQ(*pick(10, 0), 2u); // B200: sm_90a is arch-specific, so JIT the PTX
  EXPECT_EQ(*pick(12, 0), 2u);

  auto old = pick(7, 5);
  ASSERT_FALSE(old.isOk());
  EXPECT_EQ(old.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(old.status().message(),
            "the artifact has no kernels for this GPU: it is sm_75 (compute capability 7.5), the "
            "artifact's kernel modules are sm_80 (CUBIN), sm_90a (CUBIN), compute_80 (PTX); "
            "recompile with --target sm_75");
}

TEST(CudaDevice, ModuleSelectionEdgeCases) {
  // Arch-specific CUBIN is not used on another minor; arch-specific PTX only on its own SM.
  std::vector<KernelModuleRef> hopper = {{"sm_90a", KernelFormat::Cubin},
                                         {"compute_90a", KernelFormat::Ptx}};
  EXPECT_FALSE(selectKernelModule(10, 0, hopper).isOk());
  // The highest usable PTX wins; a mislabelled module (PTX named sm_) is ignored.
  std::vector<KernelModuleRef> ptxOnly = {{"compute_80", KernelFormat::Ptx},
                                          {"compute_90", KernelFormat::Ptx},
                                          {"sm_90", KernelFormat::Ptx}};
  EXPECT_EQ(*selectKernelModule(9, 0, ptxOnly), 1u);
  EXPECT_EQ(*selectKernelModule(8, 6, ptxOnly), 0u);
  auto none = selectKernelModule(9, 0, {});
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("kernel modules are none; recompile with --target "
                                         "sm_90a"),
            std::string::npos)
      << none.status().message();
}

} // namespace
} // namespace kiln::rt
