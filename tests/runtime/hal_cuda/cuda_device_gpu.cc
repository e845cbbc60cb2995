// CudaDevice on a real GPU (label gpu): memory, copies, weights import, memoryInfo, graph capture
// and replay. Skips with "no CUDA device: ..." without one. Kernel numerics are
// tests/kernels/cuda's job, Linear's cuda_linear_gpu.cc's.
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

TEST(CudaDeviceGpu, MemoryInfoFollowsAllocations) {
  std::string why;
  std::unique_ptr<Device> device = openOrNull(why);
  if (!device)
    GTEST_SKIP() << "no CUDA device: " << why;
  auto before = device->memoryInfo();
  ASSERT_TRUE(before.isOk()) << before.status().toString();
  EXPECT_GT(before->totalBytes, size_t(1) << 30);
  EXPECT_LE(before->freeBytes, before->totalBytes);
  constexpr size_t kBytes = size_t(512) << 20;
  auto memory = device->allocate(kBytes, MemoryKind::kDevice);
  ASSERT_TRUE(memory.isOk()) << memory.status().toString();
  auto during = device->memoryInfo();
  ASSERT_TRUE(during.isOk());
  EXPECT_EQ(during->totalBytes, before->totalBytes);
  // The driver rounds allocations up (2 MiB pages); other processes may allocate meanwhile.
  EXPECT_GE(before->freeBytes - during->freeBytes, kBytes)
      << before->freeBytes << " -> " << during->freeBytes;
  device->free(*memory);
  auto after = device->memoryInfo();
  ASSERT_TRUE(after.isOk());
  EXPECT_GE(after->freeBytes + (size_t(64) << 20), before->freeBytes);
}

// The recorded ops replay with the inputs of the moment: a graph of one copy-free program (a
// Linear) captured once, replayed after the input changed, gives the new result.
TEST(CudaDeviceGpu, CapturedGraphsReplayWithNewInputs) {
  std::string why;
  std::unique_ptr<Device> device = openOrNull(why);
  if (!device)
    GTEST_SKIP() << "no CUDA device: " << why;
  ASSERT_TRUE(device->supportsGraphs());
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint32_t> inputs = {0, 1}, outputs = {2};
  fbb.Finish(schema::CreateOpDirect(fbb, "linear", schema::OpParams::LinearParams,
                                    schema::CreateLinearParams(fbb, false).Union(), &inputs,
                                    &outputs, ""));
  auto alloc = [&](size_t bytes) {
    auto m = device->allocate(bytes, MemoryKind::kDevice);
    EXPECT_TRUE(m.isOk());
    return m.isOk() ? *m : DeviceMemory();
  };
  DeviceMemory x = alloc(4 * 4), w = alloc(4 * 4), y = alloc(4 * 4);
  BoundOp op;
  op.op = flatbuffers::GetRoot<schema::Op>(fbb.GetBufferPointer());
  BoundBuffer bx{
      x.data, schema::DType::F32, schema::RowScale::Tokens, schema::BufferKind::Activation, 1, 4};
  BoundBuffer bw{w.data, schema::DType::F32, schema::RowScale::Fixed, schema::BufferKind::Weight, 1,
                 4};
  BoundBuffer by{
      y.data, schema::DType::F32, schema::RowScale::Tokens, schema::BufferKind::Activation, 1, 1};
  op.inputs = {bx, bw};
  op.outputs = {by};
  const float weights[4] = {1, 2, 3, 4};
  ASSERT_TRUE(device->copyToDevice(w.data, weights, sizeof(weights)).isOk());
  auto prepared = device->prepareOp(op);
  ASSERT_TRUE(prepared.isOk()) << prepared.status().toString();
  const StepCounts counts{1, 1, 1, 1};
  const float first[4] = {1, 1, 1, 1};
  ASSERT_TRUE(device->copyToDevice(x.data, first, sizeof(first)).isOk());
  ASSERT_TRUE(device->runOp(**prepared, counts).isOk()); // warm-up outside the capture
  ASSERT_TRUE(device->beginCapture().isOk());
  ASSERT_TRUE(device->runOp(**prepared, counts).isOk());
  auto graph = device->endCapture();
  ASSERT_TRUE(graph.isOk()) << graph.status().toString();
  const float second[4] = {1, 0, 0, 2};
  ASSERT_TRUE(device->copyToDevice(x.data, second, sizeof(second)).isOk());
  ASSERT_TRUE(device->replay(**graph).isOk());
  float result = 0;
  ASSERT_TRUE(device->copyToHost(&result, y.data, sizeof(result)).isOk());
  EXPECT_EQ(result, 9.0f); // 1*1 + 2*4, not the captured-time 10
  graph->reset();
  prepared->reset();
  for (DeviceMemory *m : {&x, &w, &y})
    device->free(*m);
}

} // namespace
} // namespace kiln::rt
