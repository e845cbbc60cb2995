// CudaDevice on a real GPU (label gpu): memory, copies, weights import, module loading errors.
// Skips with "no CUDA device: ..." without one. Kernel numerics are tests/kernels/cuda's job.
#include "runtime/hal/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::rt {
namespace {

std::unique_ptr<Device> openOrNull(std::string &why) {
  auto device = createDevice("cuda");
  if (!device.isOk()) {
    why = device.status().message();
    return nullptr;
  }
  return std::move(device).value();
}

TEST(CudaDeviceGpu, MemoryCopiesAndWeights) {
  std::string why;
  std::unique_ptr<Device> device = openOrNull(why);
  if (!device)
    GTEST_SKIP() << "no CUDA device: " << why;
  EXPECT_EQ(device->kind(), DeviceKind::kCuda);
  EXPECT_EQ(device->target().rfind("sm_", 0), 0u) << device->target();

  auto memory = device->allocate(1000, MemoryKind::kHostVisible);
  ASSERT_TRUE(memory.isOk()) << memory.status().toString();
  std::vector<uint8_t> back(1000, 0xff);
  ASSERT_TRUE(device->copyToHost(back.data(), memory->data, back.size()).isOk());
  EXPECT_EQ(back, std::vector<uint8_t>(1000, 0)); // zeroed at allocation
  std::vector<int32_t> values = {7, -8, 9, 1 << 30};
  ASSERT_TRUE(device->copyToDevice(memory->data, values.data(), 16).isOk());
  std::vector<int32_t> read(4);
  ASSERT_TRUE(device->copyToHost(read.data(), memory->data, 16).isOk());
  EXPECT_EQ(read, values);
  device->free(*memory);
  EXPECT_EQ(memory->data, nullptr);

  std::vector<uint8_t> weights(1 << 20);
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = static_cast<uint8_t>(i * 31);
  auto imported = device->importWeights(weights);
  ASSERT_TRUE(imported.isOk()) << imported.status().toString();
  EXPECT_FALSE(imported->borrowed); // copied to the GPU
  std::vector<uint8_t> copy(weights.size());
  ASSERT_TRUE(device->copyToHost(copy.data(), imported->data, copy.size()).isOk());
  EXPECT_EQ(copy, weights);
  device->free(*imported);
  EXPECT_TRUE(device->synchronize().isOk());
}

} // namespace
} // namespace kiln::rt
