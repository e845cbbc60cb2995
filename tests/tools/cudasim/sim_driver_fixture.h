// What the simulated-driver tests share: the library loaded as kiln loads the NVIDIA one, and a
// fixture holding device 0's primary context and a stream. Each test retains the context and
// releases it at the end: the last release destroys what the test left (and any sticky error),
// so tests do not see each other. The simulator reads its KILN_CUDASIM_* environment at the
// first cuInit: each test file sets it before (a static initializer).
#pragma once

#include "runtime/hal/cuda/cuda_driver.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace kiln::cudasim {

inline const std::string kLibrary = std::string(KILN_CUDASIM_LIB_DIR) + "/libcuda.so.1";

inline std::shared_ptr<const rt::CudaDriver> loadDriver() {
  static Result<std::shared_ptr<const rt::CudaDriver>> loaded = rt::CudaDriver::load(kLibrary);
  return loaded.isOk() ? loaded.value() : nullptr;
}

class SimDriverContextTest : public ::testing::Test {
protected:
  void SetUp() override {
    d_ = loadDriver();
    ASSERT_NE(d_, nullptr) << rt::CudaDriver::load(kLibrary).status().toString();
    ASSERT_EQ(d_->init(0), CUDA_SUCCESS);
    ASSERT_EQ(d_->devicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(d_->ctxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(d_->streamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (!ctx_)
      return;
    d_->ctxSetCurrent(ctx_);
    d_->streamDestroy(stream_);
    EXPECT_EQ(d_->devicePrimaryCtxRelease(0), CUDA_SUCCESS);
    d_->ctxSetCurrent(nullptr);
  }
  std::string describe(CUresult rc) { return d_->describe(rc); }

  std::shared_ptr<const rt::CudaDriver> d_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
};

} // namespace kiln::cudasim
