// ExecutorOptions.memoryUtilization (--gpu-memory-utilization): the KV cache is sized from the
// device's free and total memory after everything else is allocated. A cpu device whose
// memoryInfo reports chosen numbers checks the exact block count and the error text.
#include "runtime/exec/executor.h"

#include "tests/runtime/exec/forwarding_device.h"
#include "tests/runtime/exec/tiny_llama.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

constexpr size_t kTotal = 1 << 20; // what the fake driver reports
constexpr size_t kFree = 600000;

// Reports `info` (or `error`) as its memory and logs every allocation's size.
class FixedMemoryDevice final : public testing::ForwardingDevice {
public:
  using ForwardingDevice::ForwardingDevice;
  Result<DeviceMemoryInfo> memoryInfo() const override {
    infoAfterAllocations = allocations.size();
    if (!error.isOk())
      return error;
    return info;
  }
  Result<DeviceMemory> allocate(size_t bytes, MemoryKind kind) override {
    allocations.push_back(bytes);
    return inner_.allocate(bytes, kind);
  }

  DeviceMemoryInfo info{kFree, kTotal};
  Status error;
  std::vector<size_t> allocations;
  mutable size_t infoAfterAllocations = 0;
};

class ExecutorMemoryTest : public testing::TinyLlamaOnCpuTest {
protected:
  static void SetUpTestSuite() { setUpTinyLlama("kiln-executor-memory-test"); }

  // 2 layers x (K + V) x 2 kv heads x 4 positions x 8 dims x 4 bytes.
  static size_t blockBytes() {
    const testing::TinyLlamaConfig &c = model_->config;
    return size_t(2) * c.layers * c.kvHeads * c.blockSize * c.headDim * sizeof(float);
  }

  Result<std::unique_ptr<Executor>> create(double utilization) {
    ExecutorOptions options;
    options.memoryUtilization = utilization;
    options.numKvBlocks = 7; // ignored when a utilization is given
    return Executor::create(*artifact_, device_, options);
  }

  FixedMemoryDevice device_{*cpu_};
};

TEST_F(ExecutorMemoryTest, TheCacheTakesWhatKeepsUsedMemoryUnderTheFraction) {
  auto executor = create(0.9);
  ASSERT_TRUE(executor.isOk()) << executor.status().toString();
  ASSERT_EQ((*executor)->kvBlockBytes(), blockBytes());
  ASSERT_EQ(blockBytes(), 1024u);
  // used = 1048576 - 600000 = 448576; limit = floor(0.9 * 1048576) = 943718;
  // (943718 - 448576) / 1024 = 483.5 -> 483 blocks.
  EXPECT_EQ((*executor)->limits().numKvBlocks, 483);
  // memoryInfo is asked once everything else is allocated; the cache is the one allocation after.
  ASSERT_EQ(device_.infoAfterAllocations + 1, device_.allocations.size());
  EXPECT_EQ(device_.allocations.back(), 483u * 1024u);

  // The cache is usable: a step with the last block works.
  StepBatch batch;
  SequenceStep seq;
  seq.tokenIds = {1, 2, 3};
  seq.blockTables = {{482}};
  batch.sequences.push_back(seq);
  auto out = (*executor)->execute(batch);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ(out->numRows(), 1);
}

TEST_F(ExecutorMemoryTest, ExactlyOneBlock) {
  // limit = 0.5 * 2^20 = 524288; used = 524288 - 1024 leaves one block of budget.
  device_.info = {kTotal - (524288 - 1024), kTotal};
  auto executor = create(0.5);
  ASSERT_TRUE(executor.isOk()) << executor.status().toString();
  EXPECT_EQ((*executor)->limits().numKvBlocks, 1);
}

TEST_F(ExecutorMemoryTest, NoRoomForABlockNamesTheFlagAndTheBytes) {
  auto executor = create(0.4);
  ASSERT_FALSE(executor.isOk());
  EXPECT_EQ(executor.status().code(), StatusCode::kResourceExhausted);
  const std::string weights = std::to_string(artifact_->weightsFile(0).size());
  const std::string arena = std::to_string(artifact_->plan().ranks()->Get(0)->arena_bytes());
  EXPECT_EQ(
      executor.status().message(),
      "--gpu-memory-utilization 0.40 leaves no room for the KV cache on cpu: 448576 of "
      "1048576 bytes are in use after loading the weights (" +
          weights + " bytes) and the activation arena (" + arena +
          " bytes), the limit is 419430 bytes, and one KV block (K and V of every layer it holds) "
          "needs 1024 bytes; raise --gpu-memory-utilization or free device memory");

  device_.info = {kTotal - (524288 - 1023), kTotal}; // one byte short of a block
  EXPECT_EQ(create(0.5).status().code(), StatusCode::kResourceExhausted);
}

TEST_F(ExecutorMemoryTest, UtilizationOutsideZeroToOneIsRejected) {
  EXPECT_EQ(create(1.5).status().message(),
            "--gpu-memory-utilization is 1.50; it must be in (0, 1]");
  EXPECT_EQ(create(-0.25).status().message(),
            "--gpu-memory-utilization is -0.25; it must be in (0, 1]");
  EXPECT_EQ(create(1.0).status().code(), StatusCode::kOk);
}

TEST_F(ExecutorMemoryTest, DriverErrorsPropagate) {
  device_.error = unavailable("cuMemGetInfo failed: CUDA_ERROR_UNKNOWN");
  auto executor = create(0.9);
  EXPECT_EQ(executor.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(executor.status().message(), "cuMemGetInfo failed: CUDA_ERROR_UNKNOWN");
}

TEST_F(ExecutorMemoryTest, ZeroMeansTheExplicitBlockCount) {
  auto executor = create(0.0);
  ASSERT_TRUE(executor.isOk()) << executor.status().toString();
  EXPECT_EQ((*executor)->limits().numKvBlocks, 7);
  EXPECT_EQ(device_.allocations.back(), 7u * 1024u);
}

} // namespace
} // namespace kiln::rt
