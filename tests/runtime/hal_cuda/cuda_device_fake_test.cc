// CudaDevice against a fake libcuda that logs its calls (fake_cuda_driver.cc): which stream each
// copy, memset and graph call goes to, checked without a GPU.
#include "runtime/hal/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <string>
#include <vector>

namespace kiln::rt {
namespace {

// The fake's own log; the device loads the same library, so dlopen returns the same handle.
class FakeDriverLog {
public:
  FakeDriverLog() {
    handle_ = dlopen(KILN_FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL);
    if (!handle_)
      return;
    read_ = reinterpret_cast<size_t (*)(char *, size_t)>(dlsym(handle_, "kilnFakeCudaLog"));
    clear_ = reinterpret_cast<void (*)()>(dlsym(handle_, "kilnFakeCudaClear"));
  }
  ~FakeDriverLog() {
    if (handle_)
      dlclose(handle_);
  }
  bool ok() const { return read_ && clear_; }
  void clear() const { clear_(); }
  // The calls since the last clear(), one per entry.
  std::vector<std::string> calls() const {
    std::string text(read_(nullptr, 0) + 1, '\0');
    read_(text.data(), text.size());
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
      lines.push_back(text.substr(start, end - start));
    return lines;
  }

private:
  void *handle_ = nullptr;
  size_t (*read_)(char *, size_t) = nullptr;
  void (*clear_)() = nullptr;
};

TEST(CudaDeviceFakeDriver, ImportWeightsZeroesThenCopiesOnTheDeviceStream) {
  FakeDriverLog log;
  ASSERT_TRUE(log.ok()) << KILN_FAKE_CUDA_DRIVER;
  auto device = createCudaDevice({KILN_FAKE_CUDA_DRIVER, 0});
  ASSERT_TRUE(device.isOk()) << device.status().message();
  log.clear();
  const std::vector<uint8_t> weights(1000, 7);
  auto memory = (*device)->importWeights(weights);
  ASSERT_TRUE(memory.isOk()) << memory.status().message();
  // The stream is non-blocking: a legacy-stream cuMemcpyHtoD would not be ordered after the
  // zeroing, nor before the kernels on s1.
  EXPECT_EQ(log.calls(),
            (std::vector<std::string>{"cuMemAlloc 1000", "cuMemsetD8Async 1000 s1",
                                      "cuMemcpyHtoDAsync 1000 s1", "cuStreamSynchronize s1"}));
  (*device)->free(*memory);
}

TEST(CudaDeviceFakeDriver, StreamIsNonBlockingAndCopiesUseIt) {
  FakeDriverLog log;
  ASSERT_TRUE(log.ok()) << KILN_FAKE_CUDA_DRIVER;
  log.clear();
  auto device = createCudaDevice({KILN_FAKE_CUDA_DRIVER, 0});
  ASSERT_TRUE(device.isOk()) << device.status().message();
  EXPECT_EQ(log.calls(), (std::vector<std::string>{"cuStreamCreate flags=" +
                                                   std::to_string(CU_STREAM_NON_BLOCKING)}));
  log.clear();
  auto memory = (*device)->allocate(64, MemoryKind::kHostVisible);
  ASSERT_TRUE(memory.isOk()) << memory.status().message();
  uint8_t host[64] = {};
  ASSERT_TRUE((*device)->copyToDevice(memory->data, host, sizeof(host)).isOk());
  ASSERT_TRUE((*device)->copyToHost(host, memory->data, sizeof(host)).isOk());
  EXPECT_EQ(log.calls(), (std::vector<std::string>{
                             "cuMemAlloc 64", "cuMemsetD8Async 64 s1", "cuMemcpyHtoDAsync 64 s1",
                             "cuMemcpyDtoHAsync 64 s1", "cuStreamSynchronize s1"}));
  (*device)->free(*memory);
}

TEST(CudaDeviceFakeDriver, GraphCaptureIsThreadLocalAndReplaysOnTheStream) {
  FakeDriverLog log;
  ASSERT_TRUE(log.ok()) << KILN_FAKE_CUDA_DRIVER;
  auto device = createCudaDevice({KILN_FAKE_CUDA_DRIVER, 0});
  ASSERT_TRUE(device.isOk()) << device.status().message();
  ASSERT_TRUE((*device)->supportsGraphs());
  log.clear();
  ASSERT_TRUE((*device)->beginCapture().isOk());
  auto program = (*device)->endCapture();
  ASSERT_TRUE(program.isOk()) << program.status().message();
  ASSERT_TRUE((*device)->replay(**program).isOk());
  program->reset();
  // The graph is destroyed once instantiated; the executable graph lives with the program.
  EXPECT_EQ(log.calls(),
            (std::vector<std::string>{
                "cuStreamBeginCapture s1 mode=" + std::to_string(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                "cuStreamEndCapture s1", "cuGraphInstantiate graph=7 flags=0",
                "cuGraphDestroy graph=7", "cuGraphLaunch exec=8 s1", "cuGraphExecDestroy exec=8"}));
}

} // namespace
} // namespace kiln::rt
