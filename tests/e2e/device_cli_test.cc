// Device selection through the real kiln binary: --device, --devices and --gpu-memory-utilization
// errors in generate, serve, bench and verify, exact text and a non-zero exit. Written for a
// machine without a GPU (the tests that need "no GPU" skip where one is visible); a --tp 2
// artifact verifies on cpu against a --tp 1 golden.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <array>
#include <sys/wait.h>

namespace kiln::e2e {
namespace {

const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln/kiln";

class DeviceCli : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    compiler::CompileOptions options;
    options.maxBatch = 4;
    options.maxSeqLen = 64;
    const std::string model = std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama";
    tp1_ = new std::string(compileForTest(model, options));
    options.tp = 2;
    tp2_ = new std::string(compileForTest(model, options));
  }
  static void TearDownTestSuite() {
    delete tp1_;
    delete tp2_;
  }
  // `kiln generate ARTIFACT --prompt-ids "1 5 9" FLAGS`: expects a failure whose output is
  // exactly `error` (one line).
  static void expectGenerateError(const std::string &artifact, const std::string &flags,
                                  const std::string &error) {
    auto [code, output] =
        runCommand(kKiln + " generate " + artifact + " --prompt-ids \"1 5 9\" " + flags);
    EXPECT_NE(code, 0) << flags;
    EXPECT_EQ(output, "kiln generate: error: " + error + "\n") << flags;
  }
  static std::string *tp1_, *tp2_;
};
std::string *DeviceCli::tp1_ = nullptr;
std::string *DeviceCli::tp2_ = nullptr;

TEST_F(DeviceCli, CudaWithoutAGpuSaysSoCleanly) {
  rt::CudaDeviceCount visible = rt::countCudaDevices();
  if (visible.count > 0)
    GTEST_SKIP() << visible.count << " CUDA device(s) visible: the no-GPU answer cannot be seen";
  for (const std::string flags : {"--device cuda", "--device cuda:1"}) {
    auto [code, output] =
        runCommand(kKiln + " generate " + *tp1_ + " --prompt-ids \"1 5\" " + flags);
    EXPECT_EQ(code, 1) << output;
    EXPECT_EQ(output, "kiln generate: error: " + flags + ": no CUDA device is visible (" +
                          visible.reason + ")\n");
  }
  auto [code, output] = runCommand(kKiln + " generate " + *tp2_ + " --prompt-ids 1 --devices 0,1");
  EXPECT_EQ(code, 1) << output;
  EXPECT_EQ(output, "kiln generate: error: --devices 0,1: no CUDA device is visible (" +
                        visible.reason + ")\n");
}

TEST_F(DeviceCli, DeviceListsMustMatchTheArtifactsTp) {
  expectGenerateError(*tp2_, "--devices 0,0,1",
                      "artifact '" + *tp2_ + "' has tp 2; --devices lists 3 devices");
  expectGenerateError(*tp2_, "--device cuda --devices 1",
                      "artifact '" + *tp2_ + "' has tp 2; --devices lists 1 device");
  expectGenerateError(*tp1_, "--devices 0,1",
                      "artifact '" + *tp1_ + "' has tp 1; --devices lists 2 devices");
}

TEST_F(DeviceCli, DeviceListsAreCudaOnlyAndWellFormed) {
  expectGenerateError(*tp2_, "--device cpu --devices 0,1",
                      "--devices places ranks on CUDA GPUs; it cannot be combined with --device "
                      "cpu (cpu ranks share the host)");
  expectGenerateError(*tp2_, "--device cuda:1 --devices 0,1",
                      "--device cuda:1 and --devices both place ranks: give --device cuda with "
                      "--devices");
  expectGenerateError(*tp2_, "--devices 0,x",
                      "--devices: 'x' is not a CUDA device ordinal (a non-negative integer)");
  expectGenerateError(*tp2_, "--devices=,",
                      "--devices is empty: give one CUDA device ordinal per rank (e.g. --devices "
                      "0,1)");
  expectGenerateError(*tp1_, "--device cuda:x",
                      "unknown device 'cuda:x': expected cpu, cuda or cuda:N");
}

TEST_F(DeviceCli, GpuMemoryUtilizationIsAFractionOnCudaOnly) {
  for (const std::string value : {"0", "1.5", "-0.1"})
    expectGenerateError(*tp1_, "--device cuda --gpu-memory-utilization " + value,
                        "--gpu-memory-utilization " + value + " is outside (0, 1]");
  expectGenerateError(*tp1_, "--device cuda --gpu-memory-utilization abc",
                      "--gpu-memory-utilization expects a number in (0, 1], got 'abc'");
  expectGenerateError(*tp1_, "--gpu-memory-utilization 0.5",
                      "--gpu-memory-utilization applies to CUDA devices; on cpu the KV cache size "
                      "is --kv-cache-mb");
  expectGenerateError(*tp1_, "--device cuda --kv-cache-mb 64 --gpu-memory-utilization 0.5",
                      "--kv-cache-mb and --gpu-memory-utilization both size the KV cache: give "
                      "one of them");
}

TEST_F(DeviceCli, BenchServeAndVerifyTakeTheSameFlags) {
  auto [code, output] = runCommand(kKiln + " bench " + *tp2_ + " --devices 0,0,1 --json");
  EXPECT_NE(code, 0);
  EXPECT_EQ(output,
            "kiln bench: error: artifact '" + *tp2_ + "' has tp 2; --devices lists 3 devices\n");
  std::tie(code, output) =
      runCommand(kKiln + " verify " + *tp2_ + " --write /dev/null --devices 0,0,1");
  EXPECT_NE(code, 0);
  EXPECT_EQ(output,
            "kiln verify: error: artifact '" + *tp2_ + "' has tp 2; --devices lists 3 devices\n");
  std::tie(code, output) =
      runCommand(kKiln + " serve " + *tp1_ + " --port 0 --gpu-memory-utilization 2");
  EXPECT_NE(code, 0);
  EXPECT_EQ(output, "kiln serve: error: --gpu-memory-utilization 2 is outside (0, 1]\n");
  // Placement errors come while loading, after the port opened: the server exits with them.
  std::tie(code, output) =
      runCommand(kKiln + " serve " + *tp2_ + " --host 127.0.0.1 --port 0 --devices 0,0,1");
  EXPECT_NE(code, 0);
  EXPECT_NE(output.find("kiln serve: error: loading " + *tp2_ + ": artifact '" + *tp2_ +
                        "' has tp 2; --devices lists 3 devices\n"),
            std::string::npos)
      << output;
}

TEST_F(DeviceCli, VerifyRunsEveryRankOfATp2Artifact) {
  const std::string golden = ::testing::TempDir() + "/device-cli-tp1.json";
  auto [code, output] = runCommand(kKiln + " verify " + *tp1_ + " --write " + golden +
                                   " --prompt-ids \"1 5 9; 7 3\" --max-tokens 6");
  ASSERT_EQ(code, 0) << output;
  std::tie(code, output) = runCommand(kKiln + " verify " + *tp2_ + " --golden " + golden);
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("verify: PASS (2 cases)"), std::string::npos) << output;
}

} // namespace
} // namespace kiln::e2e
