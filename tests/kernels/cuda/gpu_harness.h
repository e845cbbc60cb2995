// A minimal GPU test bench: the run-time loaded driver, the primary context of device 0, kernels
// compiled by codegen for that device's SM, device buffers freed at the end, one launch at a time
// (synchronized). Host-side conversions between fp32 and the activation dtypes.
#pragma once

#include "compiler/codegen/kernel_catalog.h"
#include "compiler/codegen/nvrtc_compiler.h"
#include "runtime/base/fp8.h"
#include "runtime/base/half.h"
#include "runtime/hal/cuda/cuda_device.h"
#include "runtime/hal/cuda/cuda_driver.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace kiln::testing {

using compiler::KernelInstance;

// "f32", "f16", "bf16" or "f8" (fp8 E4M3, a KV cache's).
inline std::vector<uint8_t> encode(const std::vector<float> &values, const std::string &dtype) {
  const size_t bytes = dtype == "f32" ? 4 : dtype == "f8" ? 1 : 2;
  std::vector<uint8_t> out(values.size() * bytes);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == "f8") {
      out[i] = f32ToF8E4M3(values[i]);
      continue;
    }
    if (dtype == "f32") {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
      continue;
    }
    uint16_t h = dtype == "bf16" ? f32ToBf16(values[i]) : f32ToF16(values[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

inline std::vector<float> decode(const std::vector<uint8_t> &bytes, const std::string &dtype) {
  const size_t size = dtype == "f32" ? 4 : dtype == "f8" ? 1 : 2;
  std::vector<float> out(bytes.size() / size);
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == "f8") {
      out[i] = f8e4m3ToF32(bytes[i]);
      continue;
    }
    if (dtype == "f32") {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
      continue;
    }
    uint16_t h = 0;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = dtype == "bf16" ? bf16ToF32(h) : f16ToF32(h);
  }
  return out;
}

// Random values already representable in `dtype`, so GPU and CPU start from the same numbers.
inline std::vector<float> randomValues(size_t n, uint32_t seed, const std::string &dtype,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return decode(encode(v, dtype), dtype);
}

// |gpu - ref| <= atol + rtol |ref|, per dtype: fp32 differs only by operation order; fp16/bf16
// outputs are rounded (and some intermediates, as transformers rounds them).
inline void expectClose(const std::vector<float> &gpu, const std::vector<float> &ref,
                        const std::string &dtype, const std::string &what, float scale = 1.0f) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  const float atol = (dtype == "f32" ? 2e-5f : dtype == "f16" ? 2e-3f : 1.5e-2f) * scale;
  const float rtol = dtype == "f32" ? 1e-4f : dtype == "f16" ? 4e-3f : 2e-2f;
  int failures = 0;
  for (size_t i = 0; i < gpu.size() && failures < 5; ++i)
    if (!(std::fabs(gpu[i] - ref[i]) <= atol + rtol * std::fabs(ref[i]))) {
      ADD_FAILURE() << what << " [" << i << "]: gpu " << gpu[i] << " vs cpu " << ref[i];
      ++failures;
    }
}

class GpuHarness {
public:
  // An error means no usable GPU: callers skip with "no CUDA device: <message>".
  static Result<std::unique_ptr<GpuHarness>> open() {
    KILN_ASSIGN_OR_RETURN(auto driver, rt::CudaDriver::load("libcuda.so.1"));
    KILN_RETURN_IF_ERROR(driver->check(driver->init(0), "cuInit"));
    int count = 0;
    KILN_RETURN_IF_ERROR(driver->check(driver->deviceGetCount(&count), "cuDeviceGetCount"));
    if (count == 0)
      return unavailable("the driver sees no GPU");
    std::unique_ptr<GpuHarness> h(new GpuHarness(std::move(driver)));
    const rt::CudaDriver &d = *h->driver_;
    KILN_RETURN_IF_ERROR(d.check(d.deviceGet(&h->device_, 0), "cuDeviceGet"));
    int major = 0, minor = 0;
    d.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, h->device_);
    d.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, h->device_);
    h->target_ = rt::smTargetName(major, minor);
    KILN_RETURN_IF_ERROR(
        d.check(d.devicePrimaryCtxRetain(&h->context_, h->device_), "cuDevicePrimaryCtxRetain"));
    KILN_RETURN_IF_ERROR(d.check(d.ctxSetCurrent(h->context_), "cuCtxSetCurrent"));
    return h;
  }

  ~GpuHarness() {
    for (CUdeviceptr p : allocations_)
      driver_->memFree(p);
    if (module_)
      driver_->moduleUnload(module_);
    if (context_)
      driver_->devicePrimaryCtxRelease(device_);
  }

  const std::string &target() const { return target_; }

  Status load(const std::vector<KernelInstance> &instances) {
    KILN_ASSIGN_OR_RETURN(auto modules, compiler::compileKernelModules(instances, {target_}));
    const auto &cubin = modules.front().image;
    std::vector<uint64_t> aligned((cubin.size() + 7) / 8);
    std::memcpy(aligned.data(), cubin.data(), cubin.size());
    return driver_->check(driver_->moduleLoadDataEx(&module_, aligned.data(), 0, nullptr, nullptr),
                          "cuModuleLoadDataEx(" + target_ + ")");
  }

  void *upload(const std::vector<uint8_t> &bytes) {
    void *p = alloc(bytes.size());
    EXPECT_EQ(driver_->memcpyHtoD(reinterpret_cast<CUdeviceptr>(p), bytes.data(), bytes.size()),
              CUDA_SUCCESS);
    return p;
  }
  template <typename T> void *uploadPod(const std::vector<T> &values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return upload(bytes);
  }
  void *alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(driver_->memAlloc(&p, std::max<size_t>(bytes, 16)), CUDA_SUCCESS);
    driver_->memsetD8Async(p, 0, std::max<size_t>(bytes, 16), nullptr);
    allocations_.push_back(p);
    return reinterpret_cast<void *>(p);
  }
  // Frees every allocation so far (a test that checks many cases keeps the device small).
  void freeAll() {
    for (CUdeviceptr p : allocations_)
      driver_->memFree(p);
    allocations_.clear();
  }
  std::vector<uint8_t> download(const void *p, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(driver_->memcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(p), bytes),
              CUDA_SUCCESS);
    return out;
  }

  template <typename Params>
  Status launch(const std::string &symbol, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t block,
                Params params) {
    CUfunction fn = nullptr;
    KILN_RETURN_IF_ERROR(driver_->check(driver_->moduleGetFunction(&fn, module_, symbol.c_str()),
                                        "cuModuleGetFunction(" + symbol + ")"));
    void *args[] = {&params};
    KILN_RETURN_IF_ERROR(driver_->check(
        driver_->launchKernel(fn, gx, gy, gz, block, 1, 1, 0, nullptr, args, nullptr),
        "cuLaunchKernel(" + symbol + ")"));
    return driver_->check(driver_->streamSynchronize(nullptr), "sync after " + symbol);
  }

private:
  explicit GpuHarness(std::shared_ptr<const rt::CudaDriver> driver) : driver_(std::move(driver)) {}
  std::shared_ptr<const rt::CudaDriver> driver_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  std::string target_;
  std::vector<CUdeviceptr> allocations_;
};

// Opens the GPU or skips the test: GPU_OR_SKIP(harness);
#define KILN_GPU_OR_SKIP(var)                                                                      \
  auto var##Result = ::kiln::testing::GpuHarness::open();                                          \
  if (!var##Result.isOk())                                                                         \
    GTEST_SKIP() << "no CUDA device: " << var##Result.status().message();                          \
  std::unique_ptr<::kiln::testing::GpuHarness> var = std::move(var##Result).value()

} // namespace kiln::testing
