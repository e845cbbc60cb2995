// NcclCommunicator where NCCL or GPUs are missing: every error is clean and starts with
// "NCCL unavailable: ". The collectives themselves need GPUs (tests/e2e/tp_gpu_test.cc).
#include "runtime/exec/nccl_communicator.h"

#include "runtime/hal/cpu_device.h"

#include <gtest/gtest.h>

#include <regex>

namespace kiln::rt {
namespace {

TEST(NcclCommunicator, AMissingLibraryIsNamed) {
  Result<std::string> probed = probeNccl("libnccl-missing.so.2");
  ASSERT_FALSE(probed.isOk());
  EXPECT_EQ(probed.status().code(), StatusCode::kUnavailable);
#ifdef KILN_HAVE_CUDA_BACKEND
  EXPECT_EQ(probed.status().message().rfind(
                "NCCL unavailable: cannot load libnccl-missing.so.2 (dlopen: ", 0),
            0u)
      << probed.status().message();
#else
  EXPECT_EQ(probed.status().message(), "NCCL unavailable: this kiln was built without the CUDA "
                                       "backend (-DKILN_ENABLE_CUDA=ON)");
#endif
}

TEST(NcclCommunicator, TheInstalledLibraryReportsItsVersion) {
  Result<std::string> probed = probeNccl();
  if (!probed.isOk())
    GTEST_SKIP() << "no usable libnccl.so.2 here: " << probed.status().message();
  EXPECT_TRUE(std::regex_match(*probed, std::regex(R"(\d+\.\d+\.\d+)"))) << *probed;
}

TEST(NcclCommunicator, CpuDevicesAreRefusedNamingTheRank) {
  CpuDevice a, b;
  auto comm = NcclCommunicator::create({&a, &b}, {0, 1}, {64, 64});
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
#ifdef KILN_HAVE_CUDA_BACKEND
  EXPECT_EQ(comm.status().message(), "NCCL unavailable: rank 0 is on device 'cpu', not a CUDA GPU");
#else
  EXPECT_EQ(comm.status().message().rfind("NCCL unavailable: ", 0), 0u);
#endif
}

TEST(NcclCommunicator, MismatchedListsAreRefused) {
  CpuDevice a;
  auto comm = NcclCommunicator::create({&a}, {0, 1}, {64, 64});
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().message().rfind("NCCL unavailable: ", 0), 0u) << comm.status().message();
}

} // namespace
} // namespace kiln::rt
