// The simulated CUDA driver (libcuda.so.1 from tools/cudasim/sim_driver*.cc), loaded as kiln
// loads the NVIDIA one: memory, copies, stream capture and graphs, modules and launches, and
// the errors a GPU would report, checked by value.
#include "compiler/codegen/kernel_catalog.h"
#include "compiler/codegen/nvrtc_compiler.h"
#include "kernels/cuda/params.h"
#include "runtime/base/half.h"
#include "runtime/hal/cuda/cuda_driver.h"
#include "tests/tools/cudasim/sim_driver_fixture.h"
#include "tools/cudasim/sim_hooks.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace kiln::cudasim {
namespace {

// Read by the driver's first cuInit: two devices, sm_90 with 64 MiB and sm_80 with 32 MiB.
const bool kEnvironment = [] {
  setenv("KILN_CUDASIM_DEVICES", "2", 1);
  setenv("KILN_CUDASIM_SM", "90,80", 1);
  setenv("KILN_CUDASIM_MEMORY_MB", "64,32", 1);
  return true;
}();

constexpr size_t kMiB = size_t(1) << 20;

// The add and rms_norm kernels, compiled by NVRTC as kiln's codegen does: a CUBIN for sm_80
// and one for sm_90a, plus PTX for compute_80.
struct Images {
  std::vector<uint64_t> cubin80, cubin90a, ptx80; // 8-byte aligned, as CudaDevice passes them
  std::string ptxText;
  std::string error;
};
std::vector<uint64_t> aligned(const std::vector<uint8_t> &bytes) {
  std::vector<uint64_t> words(bytes.size() / 8 + 1, 0);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}
const Images &images() {
  static const Images built = [] {
    Images images;
    auto modules = compiler::compileKernelModules(
        {compiler::makeKernelInstance("add",
                                      {{"dtype", "f32"}, {"width", "64"}, {"threads", "32"}}),
         compiler::makeKernelInstance(
             "rms_norm",
             {{"dtype", "f32"}, {"weight_dtype", "f32"}, {"hidden", "64"}, {"threads", "64"}})},
        {"sm_80", "sm_90a"});
    if (!modules.isOk()) {
      images.error = modules.status().toString();
      return images;
    }
    for (const compiler::KernelModuleImage &m : *modules) {
      if (m.target == "sm_80")
        images.cubin80 = aligned(m.image);
      else if (m.target == "sm_90a")
        images.cubin90a = aligned(m.image);
      else if (m.target == "compute_80") {
        images.ptx80 = aligned(m.image);
        images.ptxText = reinterpret_cast<const char *>(m.image.data());
      }
    }
    return images;
  }();
  return built;
}

constexpr const char *kAdd = "kiln_add_f32_32_64";
constexpr const char *kRmsNorm = "kiln_rms_norm_f32_64_64_f32";

// Device 0's context and a stream (sim_driver_fixture.h), with allocation, module and launch
// helpers.
class SimDriverTest : public SimDriverContextTest {
protected:
  CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(d_->memAlloc(&p, bytes), CUDA_SUCCESS);
    return p;
  }
  std::vector<uint8_t> download(CUdeviceptr p, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(d_->memcpyDtoH(out.data(), p, bytes), CUDA_SUCCESS);
    return out;
  }
  CUmodule loadModule(const std::vector<uint64_t> &image) {
    CUmodule module = nullptr;
    EXPECT_EQ(d_->moduleLoadDataEx(&module, image.data(), 0, nullptr, nullptr), CUDA_SUCCESS);
    return module;
  }
  CUfunction function(const char *symbol) {
    if (!module_)
      module_ = loadModule(images().cubin90a);
    CUfunction fn = nullptr;
    CUresult rc = d_->moduleGetFunction(&fn, module_, symbol);
    EXPECT_EQ(rc, CUDA_SUCCESS) << describe(rc);
    return fn;
  }
  template <typename Params>
  CUresult launch(CUfunction fn, unsigned grid, unsigned block, Params &params) {
    void *args[] = {&params};
    return d_->launchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream_, args, nullptr);
  }

  CUmodule module_ = nullptr;
};

#define KILN_NEED_IMAGES()                                                                         \
  if (!images().error.empty())                                                                     \
  GTEST_SKIP() << "NVRTC could not build the test kernels: " << images().error

// cuInit reads the environment once per process, so these run in a child process of their own
// (a death test re-executes the binary for this test alone).
int exitWith(CUresult rc) {
  std::_Exit(static_cast<int>(rc));
}

TEST(SimDriverInit, CallsBeforeCuInitAreNotInitialized) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        size_t sizes[2] = {};
        exitWith(loadDriver()->memGetInfo(&sizes[0], &sizes[1]));
      },
      ::testing::ExitedWithCode(CUDA_ERROR_NOT_INITIALIZED), "cuInit has not succeeded");
}

TEST(SimDriverInit, ZeroDevicesIsNoDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("KILN_CUDASIM_DEVICES", "0", 1);
        exitWith(loadDriver()->init(0));
      },
      ::testing::ExitedWithCode(CUDA_ERROR_NO_DEVICE), "KILN_CUDASIM_DEVICES=0");
}

TEST(SimDriverInit, AMalformedEnvironmentFailsCuInitNamingTheVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("KILN_CUDASIM_SM", "90,sm_80", 1);
        exitWith(loadDriver()->init(0));
      },
      ::testing::ExitedWithCode(CUDA_ERROR_INVALID_VALUE),
      "KILN_CUDASIM_SM='90,sm_80': expected integers in 30..129");
}

TEST_F(SimDriverTest, DevicesFollowTheEnvironment) {
  int count = 0, version = 0, major = 0, minor = 0, warp = 0;
  ASSERT_EQ(d_->deviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  ASSERT_EQ(d_->driverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  char name[64] = {};
  ASSERT_EQ(d_->deviceGetName(name, sizeof name, 1), CUDA_SUCCESS);
  EXPECT_STREQ(name, "kiln cudasim (CPU)");
  d_->deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
  d_->deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  EXPECT_EQ(major * 10 + minor, 90);
  d_->deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 1);
  d_->deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1);
  EXPECT_EQ(major * 10 + minor, 80);
  ASSERT_EQ(d_->deviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_SUCCESS);
  EXPECT_EQ(warp, 32);
  CUdevice device = 0;
  EXPECT_EQ(d_->deviceGet(&device, 2), CUDA_ERROR_INVALID_DEVICE);
  const char *text = nullptr;
  ASSERT_EQ(d_->getErrorName(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  EXPECT_EQ(d_->getErrorName(static_cast<CUresult>(12345), &text), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d_->getErrorString(CUDA_ERROR_NOT_READY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "device not ready"); // no detail was raised for it
}

TEST_F(SimDriverTest, CallsNeedACurrentContextOnTheCallingThread) {
  CUresult rc = CUDA_SUCCESS;
  std::string detail; // error details are per thread, like the current context
  std::thread other([&] {
    CUdeviceptr p = 0;
    rc = d_->memAlloc(&p, 64);
    detail = describe(rc);
  });
  other.join();
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_NE(detail.find("no current context on this thread"), std::string::npos) << detail;
}

TEST_F(SimDriverTest, MemoryRoundTripsThroughEveryCopy) {
  std::vector<uint8_t> pattern(1000);
  for (size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  CUdeviceptr a = alloc(pattern.size()), b = alloc(pattern.size());
  EXPECT_EQ(a % 256, 0u);
  ASSERT_EQ(d_->memcpyHtoD(a, pattern.data(), pattern.size()), CUDA_SUCCESS);
  EXPECT_EQ(download(a, pattern.size()), pattern);
  ASSERT_EQ(d_->memcpyHtoDAsync(b, pattern.data(), pattern.size(), stream_), CUDA_SUCCESS);
  ASSERT_EQ(d_->memsetD8Async(b + 10, 0x5A, 20, stream_), CUDA_SUCCESS);
  std::vector<uint8_t> back(pattern.size());
  ASSERT_EQ(d_->memcpyDtoHAsync(back.data(), b, back.size(), stream_), CUDA_SUCCESS);
  ASSERT_EQ(d_->streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(d_->streamQuery(stream_), CUDA_SUCCESS);
  std::vector<uint8_t> expected = pattern;
  std::memset(expected.data() + 10, 0x5A, 20);
  EXPECT_EQ(back, expected);
  EXPECT_EQ(d_->memFree(a), CUDA_SUCCESS);
  EXPECT_EQ(d_->memFree(b), CUDA_SUCCESS);
}

TEST_F(SimDriverTest, FreshAllocationsReadAsNaN) {
  CUdeviceptr p = alloc(64 * sizeof(float));
  std::vector<uint8_t> bytes = download(p, 64 * sizeof(float));
  for (uint8_t byte : bytes)
    ASSERT_EQ(byte, 0xFF);
  float f32 = 0;
  std::memcpy(&f32, bytes.data(), 4);
  EXPECT_TRUE(std::isnan(f32));
  EXPECT_TRUE(std::isnan(f16ToF32(0xFFFF)));
  EXPECT_TRUE(std::isnan(bf16ToF32(0xFFFF)));
}

TEST_F(SimDriverTest, MemGetInfoAccountsEachDeviceAndRefusesOverAllocation) {
  size_t freeBytes = 0, total = 0;
  ASSERT_EQ(d_->memGetInfo(&freeBytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(freeBytes, 64 * kMiB);
  CUdeviceptr small = alloc(1000); // accounted in 256-byte units
  ASSERT_EQ(d_->memGetInfo(&freeBytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(freeBytes, 64 * kMiB - 1024);
  CUdeviceptr p = 0;
  CUresult rc = d_->memAlloc(&p, freeBytes + 1);
  EXPECT_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(describe(rc).find("has 67107840 of 67108864 bytes free"), std::string::npos)
      << describe(rc);
  CUdeviceptr rest = alloc(freeBytes);
  ASSERT_EQ(d_->memGetInfo(&freeBytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(freeBytes, 0u);
  EXPECT_EQ(d_->memAlloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(d_->memAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  // Device 1 keeps its own books.
  CUcontext other = nullptr;
  ASSERT_EQ(d_->devicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(other), CUDA_SUCCESS);
  ASSERT_EQ(d_->memGetInfo(&freeBytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 32 * kMiB);
  EXPECT_EQ(freeBytes, 32 * kMiB);
  ASSERT_EQ(d_->devicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(d_->memFree(rest), CUDA_SUCCESS);
  EXPECT_EQ(d_->memFree(small), CUDA_SUCCESS);
  ASSERT_EQ(d_->memGetInfo(&freeBytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(freeBytes, 64 * kMiB);
}

TEST_F(SimDriverTest, RangesOutsideOneLiveAllocationAreRejected) {
  CUdeviceptr p = alloc(100);
  std::vector<uint8_t> host(200, 1);
  CUresult rc = d_->memcpyHtoD(p, host.data(), 101);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(describe(rc).find("runs 1 bytes past the end of the allocation"), std::string::npos)
      << describe(rc);
  EXPECT_EQ(d_->memcpyDtoHAsync(host.data(), p + 50, 51, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d_->memsetD8Async(p + 99, 0, 2, stream_), CUDA_ERROR_INVALID_VALUE);
  rc = d_->memcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(host.data()), 4);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(describe(rc).find("starts outside every live allocation"), std::string::npos);
  EXPECT_EQ(d_->memcpyHtoD(p + 99, host.data(), 1), CUDA_SUCCESS); // the last byte is fine
  EXPECT_EQ(d_->memFree(p + 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d_->memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(d_->memFree(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d_->memcpyHtoD(p, host.data(), 1), CUDA_ERROR_INVALID_VALUE); // freed
}

TEST_F(SimDriverTest, AnOverrunFaultsOnTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto *p = reinterpret_cast<volatile uint8_t *>(alloc(100));
  EXPECT_EQ(p[255], 0xFF); // the allocation's 256-byte rounding still reads
  EXPECT_DEATH(p[256] = 1, "");
}

TEST_F(SimDriverTest, HostAllocationsAreTheirOwnDevicePointers) {
  void *host = nullptr;
  ASSERT_EQ(d_->memHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  CUdeviceptr device = 0;
  ASSERT_EQ(d_->memHostGetDevicePointer(&device, host, 0), CUDA_SUCCESS);
  EXPECT_EQ(device, reinterpret_cast<CUdeviceptr>(host));
  std::vector<uint8_t> bytes(64, 9);
  ASSERT_EQ(d_->memcpyHtoD(device, bytes.data(), bytes.size()), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<uint8_t *>(host)[63], 9);
  size_t freeBytes = 0, total = 0;
  ASSERT_EQ(d_->memGetInfo(&freeBytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(freeBytes, total); // host memory is not device memory
  EXPECT_EQ(d_->memFree(device), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d_->memFreeHost(host), CUDA_SUCCESS);
}

// As NcclCommunicator places a gathered shard: rows of one pitch into columns of another, here
// from device 1's memory into device 0's (unified addressing: a peer copy is a copy).
TEST_F(SimDriverTest, Memcpy2DCopiesRowsBetweenDevices) {
  CUcontext other = nullptr;
  ASSERT_EQ(d_->devicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(other), CUDA_SUCCESS);
  std::vector<uint8_t> shard(3 * 4);
  for (size_t i = 0; i < shard.size(); ++i)
    shard[i] = static_cast<uint8_t>(i + 1);
  CUdeviceptr src = alloc(shard.size());
  ASSERT_EQ(d_->memcpyHtoD(src, shard.data(), shard.size()), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(ctx_), CUDA_SUCCESS);
  CUdeviceptr dst = alloc(3 * 8);
  ASSERT_EQ(d_->memsetD8Async(dst, 0, 3 * 8, stream_), CUDA_SUCCESS);
  CUDA_MEMCPY2D copy = {};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = src;
  copy.srcPitch = 4;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = dst + 4;
  copy.dstPitch = 8;
  copy.WidthInBytes = 4;
  copy.Height = 3;
  ASSERT_EQ(d_->memcpy2DAsync(&copy, stream_), CUDA_SUCCESS);
  EXPECT_EQ(download(dst, 24), (std::vector<uint8_t>{0, 0, 0, 0, 1, 2, 3, 4, 0, 0,  0,  0,
                                                     5, 6, 7, 8, 0, 0, 0, 0, 9, 10, 11, 12}));
  copy.Height = 4; // the fourth row reads past the shard
  EXPECT_EQ(d_->memcpy2DAsync(&copy, stream_), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d_->devicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

TEST_F(SimDriverTest, StreamsOfAnotherContextAreRejected) {
  CUcontext other = nullptr;
  ASSERT_EQ(d_->devicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(other), CUDA_SUCCESS);
  CUdeviceptr p = alloc(16);
  EXPECT_EQ(d_->memsetD8Async(p, 0, 16, stream_), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(d_->devicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(ctx_), CUDA_SUCCESS);
}

TEST_F(SimDriverTest, CapturedCopiesReadTheirSourceWhenTheGraphRuns) {
  std::vector<float> host = {1, 2, 3, 4};
  CUdeviceptr p = alloc(16);
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(d_->memcpyHtoDAsync(p, host.data(), 16, stream_), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(download(p, 16), std::vector<uint8_t>(16, 0xFF)); // recorded, not run
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d_->graphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(d_->graphDestroy(graph), CUDA_SUCCESS);
  host = {5, 6, 7, 8};
  ASSERT_EQ(d_->graphLaunch(exec, stream_), CUDA_SUCCESS);
  std::vector<float> back(4);
  ASSERT_EQ(d_->memcpyDtoH(back.data(), p, 16), CUDA_SUCCESS);
  EXPECT_EQ(back, (std::vector<float>{5, 6, 7, 8}));
  // A replay after the destination was freed faults like a GPU: sticky illegal address.
  ASSERT_EQ(d_->memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(d_->graphLaunch(exec, stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(d_->memAlloc(&p, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(d_->graphExecDestroy(exec), CUDA_SUCCESS);
}

TEST_F(SimDriverTest, UnsafeCallsInvalidateAGlobalCapture) {
  CUdeviceptr p = alloc(16);
  std::vector<uint8_t> host(16);
  struct Case {
    const char *what;
    std::function<CUresult()> call;
  };
  const std::vector<Case> cases = {
      {"cuMemAlloc",
       [&] {
         CUdeviceptr q = 0;
         return d_->memAlloc(&q, 16);
       }},
      {"cuMemFree", [&] { return d_->memFree(p); }},
      {"cuMemcpyHtoD", [&] { return d_->memcpyHtoD(p, host.data(), 16); }},
      {"cuMemcpyDtoH", [&] { return d_->memcpyDtoH(host.data(), p, 16); }},
      {"cuStreamSynchronize", [&] { return d_->streamSynchronize(stream_); }},
      {"cuStreamQuery", [&] { return d_->streamQuery(stream_); }},
  };
  for (const Case &c : cases) {
    ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(c.call(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) << c.what;
    EXPECT_EQ(d_->memsetD8Async(p, 0, 16, stream_), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CUgraph graph = reinterpret_cast<CUgraph>(1);
    CUresult rc = d_->streamEndCapture(stream_, &graph);
    EXPECT_EQ(rc, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) << c.what;
    EXPECT_NE(describe(rc).find(std::string("invalidated by ") + c.what), std::string::npos)
        << describe(rc);
    EXPECT_EQ(graph, nullptr);
  }
  EXPECT_EQ(d_->memFree(p), CUDA_SUCCESS); // nothing was freed by the refused call
}

TEST_F(SimDriverTest, CaptureModesDecideWhoseUnsafeCallsAreRefused) {
  auto allocOnOtherThread = [&] {
    CUresult rc = CUDA_SUCCESS;
    std::thread other([&] {
      d_->ctxSetCurrent(ctx_);
      CUdeviceptr q = 0;
      rc = d_->memAlloc(&q, 16);
      if (rc == CUDA_SUCCESS)
        d_->memFree(q);
    });
    other.join();
    return rc;
  };
  CUgraph graph = nullptr;
  // Global: another thread's allocation is refused and invalidates the capture.
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(allocOnOtherThread(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // Thread-local (kiln's mode): other threads are free, this one is not.
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(allocOnOtherThread(), CUDA_SUCCESS);
  CUdeviceptr q = 0;
  EXPECT_EQ(d_->memAlloc(&q, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // Relaxed: allocation is allowed; waiting on the capturing stream never is.
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(d_->memAlloc(&q, 16), CUDA_SUCCESS);
  ASSERT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(d_->graphDestroy(graph), CUDA_SUCCESS);
  // Ending a thread-local capture from another thread is refused; the capture goes on.
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CUresult rc = CUDA_SUCCESS;
  std::thread other([&] {
    d_->ctxSetCurrent(ctx_);
    CUgraph stolen = nullptr;
    rc = d_->streamEndCapture(stream_, &stolen);
  });
  other.join();
  EXPECT_EQ(rc, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  ASSERT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(d_->graphDestroy(graph), CUDA_SUCCESS);
}

TEST_F(SimDriverTest, TheLegacyStreamCannotBeCapturedNorUsedBesideABlockingCapture) {
  EXPECT_EQ(d_->streamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUdeviceptr p = alloc(16);
  CUstream blocking = nullptr;
  ASSERT_EQ(d_->streamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(d_->streamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(d_->memsetD8Async(p, 0, 16, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CUgraph graph = nullptr;
  EXPECT_EQ(d_->streamEndCapture(blocking, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // A non-blocking stream's capture leaves the legacy stream alone.
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(d_->memsetD8Async(p, 7, 16, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(d_->graphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(download(p, 16), std::vector<uint8_t>(16, 7));
  EXPECT_EQ(d_->streamDestroy(blocking), CUDA_SUCCESS);
}

struct HostLog {
  std::vector<int> seen;
  int released = 0;
};
struct WorkData {
  HostLog *log;
  const uint8_t *device;
};
void recordFirstByte(void *data) {
  auto *work = static_cast<WorkData *>(data);
  work->log->seen.push_back(*work->device);
}
void releaseWork(void *data) {
  auto *work = static_cast<WorkData *>(data);
  ++work->log->released;
  delete work;
}

TEST_F(SimDriverTest, HostWorkIsOrderedOnTheStreamAndReleasedWhenNothingCanRunIt) {
  void *handle = dlopen(kLibrary.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  ASSERT_NE(handle, nullptr);
  auto enqueue = reinterpret_cast<decltype(&kilnCudasimEnqueueHostWork)>(
      dlsym(handle, kKilnCudasimEnqueueHostWork));
  ASSERT_NE(enqueue, nullptr);
  CUdeviceptr p = alloc(4);
  const auto *device = reinterpret_cast<const uint8_t *>(p);
  HostLog log;
  // Uncaptured: runs at once and is released right after.
  ASSERT_EQ(d_->memsetD8Async(p, 3, 4, stream_), CUDA_SUCCESS);
  ASSERT_EQ(enqueue(stream_, recordFirstByte, new WorkData{&log, device}, releaseWork),
            CUDA_SUCCESS);
  EXPECT_EQ(log.seen, std::vector<int>{3});
  EXPECT_EQ(log.released, 1);
  // Captured between two memsets: recorded in order, released with the last graph.
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  ASSERT_EQ(d_->memsetD8Async(p, 1, 4, stream_), CUDA_SUCCESS);
  ASSERT_EQ(enqueue(stream_, recordFirstByte, new WorkData{&log, device}, releaseWork),
            CUDA_SUCCESS);
  ASSERT_EQ(d_->memsetD8Async(p, 2, 4, stream_), CUDA_SUCCESS);
  ASSERT_EQ(enqueue(stream_, recordFirstByte, new WorkData{&log, device}, releaseWork),
            CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(log.seen, std::vector<int>{3});
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d_->graphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(d_->graphLaunch(exec, stream_), CUDA_SUCCESS);
  ASSERT_EQ(d_->graphLaunch(exec, stream_), CUDA_SUCCESS);
  EXPECT_EQ(log.seen, (std::vector<int>{3, 1, 2, 1, 2}));
  ASSERT_EQ(d_->graphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(log.released, 1); // the executable graph still holds both
  ASSERT_EQ(d_->graphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(log.released, 3);
  // A refused enqueue releases at once: the work can never run.
  EXPECT_EQ(enqueue(reinterpret_cast<CUstream>(&log), recordFirstByte, new WorkData{&log, device},
                    releaseWork),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(log.released, 4);
  dlclose(handle);
}

TEST_F(SimDriverTest, ModuleImagesAreCheckedAsAGpuChecksThem) {
  KILN_NEED_IMAGES();
  const Images &im = images();
  CUmodule module = nullptr;
  // Device 0 is sm_90: its own CUBIN and older PTX load; an sm_80 CUBIN does not run there.
  ASSERT_EQ(d_->moduleLoadDataEx(&module, im.cubin90a.data(), 0, nullptr, nullptr), CUDA_SUCCESS);
  CUfunction fn = nullptr;
  EXPECT_EQ(d_->moduleGetFunction(&fn, module, kAdd), CUDA_SUCCESS);
  CUresult rc = d_->moduleGetFunction(&fn, module, "kiln_add_f32_32_128");
  EXPECT_EQ(rc, CUDA_ERROR_NOT_FOUND);
  EXPECT_NE(describe(rc).find("has no kernel 'kiln_add_f32_32_128' (it has: " + std::string(kAdd) +
                              ", " + kRmsNorm + ")"),
            std::string::npos)
      << describe(rc);
  EXPECT_EQ(d_->moduleUnload(module), CUDA_SUCCESS);
  ASSERT_EQ(d_->moduleLoadDataEx(&module, im.ptx80.data(), 0, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d_->moduleGetFunction(&fn, module, kRmsNorm), CUDA_SUCCESS);
  EXPECT_EQ(d_->moduleUnload(module), CUDA_SUCCESS);
  char log[512] = {};
  CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(uintptr_t{sizeof log})};
  EXPECT_EQ(d_->moduleLoadDataEx(&module, im.cubin80.data(), 2, keys, values),
            CUDA_ERROR_NO_BINARY_FOR_GPU);
  EXPECT_NE(std::string(log).find("a sm_80 CUBIN image cannot run on device 0 (sm_90"),
            std::string::npos)
      << log;
  // Device 1 is sm_80: the sm_90a CUBIN and PTX for a newer target are refused.
  CUcontext other = nullptr;
  ASSERT_EQ(d_->devicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(other), CUDA_SUCCESS);
  EXPECT_EQ(d_->moduleLoadDataEx(&module, im.cubin80.data(), 0, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d_->moduleLoadDataEx(&module, im.cubin90a.data(), 0, nullptr, nullptr),
            CUDA_ERROR_NO_BINARY_FOR_GPU);
  std::string ptx90 = im.ptxText;
  ptx90.replace(ptx90.find(".target sm_80"), 13, ".target sm_90");
  EXPECT_EQ(d_->moduleLoadDataEx(&module, ptx90.c_str(), 0, nullptr, nullptr),
            CUDA_ERROR_NO_BINARY_FOR_GPU);
  ASSERT_EQ(d_->devicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(ctx_), CUDA_SUCCESS);
}

TEST_F(SimDriverTest, MalformedImagesAreInvalid) {
  KILN_NEED_IMAGES();
  CUmodule module = nullptr;
  const uint8_t garbage[] = {0x13, 0x37, 0x00, 0xFE, 0x01, 0x02, 0x03, 0x04, 0};
  EXPECT_EQ(d_->moduleLoadDataEx(&module, garbage, 0, nullptr, nullptr), CUDA_ERROR_INVALID_IMAGE);
  std::vector<uint64_t> x86 = images().cubin90a;
  reinterpret_cast<uint8_t *>(x86.data())[18] = 62; // e_machine EM_X86_64
  CUresult rc = d_->moduleLoadDataEx(&module, x86.data(), 0, nullptr, nullptr);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_IMAGE);
  EXPECT_NE(describe(rc).find("machine 62, not EM_CUDA"), std::string::npos) << describe(rc);
  std::string future = images().ptxText;
  future.replace(future.find(".version "), 12, ".version 9.9");
  EXPECT_EQ(d_->moduleLoadDataEx(&module, future.c_str(), 0, nullptr, nullptr),
            CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  EXPECT_EQ(d_->moduleLoadDataEx(&module, "hello, not ptx", 0, nullptr, nullptr),
            CUDA_ERROR_INVALID_PTX);
}

// kiln_add_f32_32_64 over 3 rows of 64: grid (3), block 32, exact sums.
TEST_F(SimDriverTest, TheAddKernelRunsEndToEndWithExactSums) {
  KILN_NEED_IMAGES();
  const int rows = 3, n = rows * 64;
  std::vector<float> a(n), b(n), out(n);
  for (int i = 0; i < n; ++i) {
    a[i] = 0.25f * static_cast<float>(i);
    b[i] = 4096.0f - static_cast<float>(3 * i);
  }
  CUdeviceptr da = alloc(n * 4), db = alloc(n * 4), dout = alloc(n * 4);
  ASSERT_EQ(d_->memcpyHtoDAsync(da, a.data(), n * 4, stream_), CUDA_SUCCESS);
  ASSERT_EQ(d_->memcpyHtoDAsync(db, b.data(), n * 4, stream_), CUDA_SUCCESS);
  kernels::cuda::AddParams params{reinterpret_cast<void *>(da), reinterpret_cast<void *>(db),
                                  reinterpret_cast<void *>(dout), rows};
  CUfunction add = function(kAdd);
  CUresult rc = launch(add, rows, 32, params);
  ASSERT_EQ(rc, CUDA_SUCCESS) << describe(rc);
  ASSERT_EQ(d_->memcpyDtoHAsync(out.data(), dout, n * 4, stream_), CUDA_SUCCESS);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(out[i], 4096.0f - 2.75f * static_cast<float>(i)) << i;
}

// The launch copies its parameters: changing the struct after capture changes nothing.
TEST_F(SimDriverTest, CapturedLaunchesKeepTheParametersOfTheirCapture) {
  KILN_NEED_IMAGES();
  const int n = 64;
  std::vector<float> ones(n, 1.0f), twos(n, 2.0f);
  CUdeviceptr da = alloc(n * 4), db = alloc(n * 4), first = alloc(n * 4), second = alloc(n * 4);
  ASSERT_EQ(d_->memcpyHtoD(da, ones.data(), n * 4), CUDA_SUCCESS);
  ASSERT_EQ(d_->memcpyHtoD(db, twos.data(), n * 4), CUDA_SUCCESS);
  CUfunction add = function(kAdd);
  kernels::cuda::AddParams params{reinterpret_cast<void *>(da), reinterpret_cast<void *>(db),
                                  reinterpret_cast<void *>(first), 1};
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  ASSERT_EQ(launch(add, 1, 32, params), CUDA_SUCCESS);
  params.out = reinterpret_cast<void *>(second);
  CUgraph graph = nullptr;
  ASSERT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d_->graphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(download(first, n * 4), std::vector<uint8_t>(n * 4, 0xFF)); // nothing ran yet
  ASSERT_EQ(d_->graphLaunch(exec, stream_), CUDA_SUCCESS);
  std::vector<float> out(n);
  ASSERT_EQ(d_->memcpyDtoH(out.data(), first, n * 4), CUDA_SUCCESS);
  EXPECT_EQ(out, std::vector<float>(n, 3.0f));
  EXPECT_EQ(download(second, n * 4), std::vector<uint8_t>(n * 4, 0xFF));
  EXPECT_EQ(d_->graphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(d_->graphDestroy(graph), CUDA_SUCCESS);
}

TEST_F(SimDriverTest, LaunchConfigurationErrorsAreNotSticky) {
  KILN_NEED_IMAGES();
  CUdeviceptr p = alloc(64 * 4);
  kernels::cuda::AddParams params{reinterpret_cast<void *>(p), reinterpret_cast<void *>(p),
                                  reinterpret_cast<void *>(p), 1};
  CUfunction add = function(kAdd);
  CUresult rc = launch(add, 1, 64, params); // __launch_bounds__(32)
  EXPECT_EQ(rc, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  EXPECT_NE(describe(rc).find("64 threads exceed the kernel's __launch_bounds__ (32)"),
            std::string::npos)
      << describe(rc);
  EXPECT_EQ(launch(add, 0, 32, params), CUDA_ERROR_INVALID_VALUE);
  void *args[] = {&params};
  EXPECT_EQ(d_->launchKernel(add, 1, 1, 1, 32, 1, 1, 1024, stream_, args, nullptr),
            CUDA_ERROR_NOT_SUPPORTED); // dynamic shared memory
  EXPECT_EQ(d_->memsetD8Async(p, 0, 4, stream_), CUDA_SUCCESS);
}

// rms_norm's block reduction shuffles with a full warp mask; with 16 threads the other 16 lanes
// never arrive, which a GPU does not survive either: the launch fails and so does every later
// call in the context, until its last release.
TEST_F(SimDriverTest, AFailedLaunchPoisonsItsContext) {
  KILN_NEED_IMAGES();
  CUdeviceptr x = alloc(64 * 4), w = alloc(64 * 4), out = alloc(64 * 4);
  kernels::cuda::RmsNormParams params{reinterpret_cast<void *>(x), reinterpret_cast<void *>(w),
                                      reinterpret_cast<void *>(out), 1, 1e-5f};
  CUfunction norm = function(kRmsNorm);
  CUresult rc = launch(norm, 1, 16, params);
  EXPECT_EQ(rc, CUDA_ERROR_LAUNCH_FAILED);
  const std::string detail = describe(rc);
  EXPECT_NE(detail.find("deadlocks"), std::string::npos) << detail;
  CUdeviceptr p = 0;
  EXPECT_EQ(d_->memAlloc(&p, 16), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(describe(CUDA_ERROR_LAUNCH_FAILED), detail);
  EXPECT_EQ(d_->streamSynchronize(stream_), CUDA_ERROR_LAUNCH_FAILED);
  // Device 1's context is unaffected; device 0's recovers after its last release.
  CUcontext other = nullptr;
  ASSERT_EQ(d_->devicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(other), CUDA_SUCCESS);
  EXPECT_EQ(d_->memAlloc(&p, 16), CUDA_SUCCESS);
  ASSERT_EQ(d_->devicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(ctx_), CUDA_SUCCESS);
  d_->streamDestroy(stream_);
  ASSERT_EQ(d_->devicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(d_->memAlloc(&p, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(d_->devicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
  EXPECT_EQ(d_->memAlloc(&p, 16), CUDA_SUCCESS);
  ASSERT_EQ(d_->streamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
}

} // namespace
} // namespace kiln::cudasim
