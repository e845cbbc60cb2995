// Device names ("cpu", "cuda", "cuda:N") and counting the visible CUDA devices, which says why
// there are none on a machine without a driver or a GPU.
#include "runtime/hal/device.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

TEST(DeviceName, CpuCudaAndOrdinals) {
  auto cpu = parseDeviceName("cpu");
  ASSERT_TRUE(cpu.isOk());
  EXPECT_EQ(cpu->kind, DeviceKind::kCpu);
  auto cuda = parseDeviceName("cuda");
  ASSERT_TRUE(cuda.isOk());
  EXPECT_EQ(cuda->kind, DeviceKind::kCuda);
  EXPECT_EQ(cuda->ordinal, 0);
  EXPECT_FALSE(cuda->explicitOrdinal);
  auto one = parseDeviceName("cuda:1");
  ASSERT_TRUE(one.isOk());
  EXPECT_EQ(one->kind, DeviceKind::kCuda);
  EXPECT_EQ(one->ordinal, 1);
  EXPECT_TRUE(one->explicitOrdinal);
  auto zero = parseDeviceName("cuda:0");
  ASSERT_TRUE(zero.isOk());
  EXPECT_EQ(zero->ordinal, 0);
}

TEST(DeviceName, BadNamesSayWhatIsExpected) {
  for (const char *name :
       {"cuda:x", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999", "CUDA", "gpu", "cuda 1", ""}) {
    auto parsed = parseDeviceName(name);
    ASSERT_FALSE(parsed.isOk()) << name;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              "unknown device '" + std::string(name) + "': expected cpu, cuda or cuda:N");
    auto created = createDevice(name);
    ASSERT_FALSE(created.isOk()) << name;
    EXPECT_EQ(created.status().message(), parsed.status().message());
  }
}

TEST(CountCudaDevices, NoDriverLibraryMeansZeroWithTheReason) {
  CudaDeviceCount visible = countCudaDevices("/nonexistent/libcuda.so.1");
  EXPECT_EQ(visible.count, 0);
#ifdef KILN_HAVE_CUDA_BACKEND
  EXPECT_EQ(visible.reason.rfind("no CUDA driver found (/nonexistent/libcuda.so.1): this machine "
                                 "has no NVIDIA GPU or its driver is not installed (dlopen: ",
                                 0),
            0u)
      << visible.reason;
#else
  EXPECT_EQ(visible.reason, "this kiln was built without the CUDA backend (-DKILN_ENABLE_CUDA=ON)");
#endif
}

// Zero devices come with the reason (what CI checks); a GPU count comes with none.
TEST(CountCudaDevices, ACountComesWithAReasonExactlyWhenItIsZero) {
  CudaDeviceCount visible = countCudaDevices();
  if (visible.count == 0) {
    EXPECT_FALSE(visible.reason.empty());
    return;
  }
  EXPECT_TRUE(visible.reason.empty()) << visible.reason;
  EXPECT_GE(visible.count, 1);
}

} // namespace
} // namespace kiln::rt
