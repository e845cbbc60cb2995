// The simulated NCCL (libnccl.so.2 from tools/cudasim/sim_nccl.cc) over the simulated driver,
// called directly from one thread with non-blocking communicators: what it refuses (blocking
// communicators, two ranks on one GPU, buffers or streams of another device, host memory, ranks
// disagreeing on a collective) and when it writes (only once every rank called; never after a
// rank aborted).
#include "tests/tools/cudasim/sim_driver_fixture.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln::cudasim {
namespace {

const bool kEnvironment = [] {
  setenv("KILN_CUDASIM_DEVICES", "2", 1);
  setenv("KILN_CUDASIM_MEMORY_MB", "64", 1);
  return true;
}();

// The entry points, resolved from the simulated library by name as kiln resolves NCCL's.
struct Nccl {
  decltype(&::ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) initRankConfig = nullptr;
  decltype(&::ncclGroupStart) groupStart = nullptr;
  decltype(&::ncclGroupEnd) groupEnd = nullptr;
  decltype(&::ncclCommGetAsyncError) asyncError = nullptr;
  decltype(&::ncclCommAbort) abort = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclAllReduce) allReduce = nullptr;
  decltype(&::ncclAllGather) allGather = nullptr;
};

const Nccl *loadNccl() {
  static const Nccl *loaded = []() -> const Nccl * {
    void *lib = dlopen((std::string(KILN_CUDASIM_LIB_DIR) + "/libnccl.so.2").c_str(),
                       RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return nullptr;
    auto *n = new Nccl();
    n->getUniqueId = reinterpret_cast<decltype(n->getUniqueId)>(dlsym(lib, "ncclGetUniqueId"));
    n->initRankConfig =
        reinterpret_cast<decltype(n->initRankConfig)>(dlsym(lib, "ncclCommInitRankConfig"));
    n->groupStart = reinterpret_cast<decltype(n->groupStart)>(dlsym(lib, "ncclGroupStart"));
    n->groupEnd = reinterpret_cast<decltype(n->groupEnd)>(dlsym(lib, "ncclGroupEnd"));
    n->asyncError = reinterpret_cast<decltype(n->asyncError)>(dlsym(lib, "ncclCommGetAsyncError"));
    n->abort = reinterpret_cast<decltype(n->abort)>(dlsym(lib, "ncclCommAbort"));
    n->destroy = reinterpret_cast<decltype(n->destroy)>(dlsym(lib, "ncclCommDestroy"));
    n->allReduce = reinterpret_cast<decltype(n->allReduce)>(dlsym(lib, "ncclAllReduce"));
    n->allGather = reinterpret_cast<decltype(n->allGather)>(dlsym(lib, "ncclAllGather"));
    return n;
  }();
  return loaded;
}

class SimNcclTest : public ::testing::Test {
protected:
  void SetUp() override {
    d_ = loadDriver();
    ASSERT_NE(d_, nullptr);
    n_ = loadNccl();
    ASSERT_NE(n_, nullptr) << dlerror();
    ASSERT_NE(n_->allGather, nullptr);
    ASSERT_EQ(d_->init(0), CUDA_SUCCESS);
    for (int g = 0; g < 2; ++g) {
      ASSERT_EQ(d_->devicePrimaryCtxRetain(&ctx_[g], g), CUDA_SUCCESS);
      ASSERT_EQ(d_->ctxSetCurrent(ctx_[g]), CUDA_SUCCESS);
      ASSERT_EQ(d_->streamCreate(&stream_[g], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    }
  }
  void TearDown() override {
    for (int g = 0; g < 2; ++g) {
      if (!ctx_[g])
        continue;
      d_->ctxSetCurrent(ctx_[g]);
      if (comm_[g])
        n_->abort(comm_[g]);
      d_->streamDestroy(stream_[g]);
      EXPECT_EQ(d_->devicePrimaryCtxRelease(g), CUDA_SUCCESS);
    }
    d_->ctxSetCurrent(nullptr);
  }

  // Ranks 0 and 1 of one clique, on devices `gpu0` and `gpu1`, created in one group.
  ncclResult_t initPair(int gpu0, int gpu1) {
    ncclUniqueId id;
    EXPECT_EQ(n_->getUniqueId(&id), ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    n_->groupStart();
    d_->ctxSetCurrent(ctx_[gpu0]);
    ncclResult_t first = n_->initRankConfig(&comm_[0], 2, id, 0, &config);
    d_->ctxSetCurrent(ctx_[gpu1]);
    ncclResult_t second = n_->initRankConfig(&comm_[1], 2, id, 1, &config);
    n_->groupEnd();
    return first != ncclSuccess ? first : second;
  }
  ncclResult_t stateOf(int rank) {
    ncclResult_t state = ncclInternalError;
    EXPECT_EQ(n_->asyncError(comm_[rank], &state), ncclSuccess);
    return state;
  }
  // `count` floats on device `gpu`, each set to `value`.
  float *floats(int gpu, size_t count, float value) {
    d_->ctxSetCurrent(ctx_[gpu]);
    CUdeviceptr p = 0;
    EXPECT_EQ(d_->memAlloc(&p, count * 4), CUDA_SUCCESS);
    std::vector<float> host(count, value);
    EXPECT_EQ(d_->memcpyHtoD(p, host.data(), count * 4), CUDA_SUCCESS);
    return reinterpret_cast<float *>(p);
  }
  std::vector<float> read(int gpu, const float *p, size_t count) {
    d_->ctxSetCurrent(ctx_[gpu]);
    std::vector<float> host(count);
    EXPECT_EQ(d_->memcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(p), count * 4),
              CUDA_SUCCESS);
    return host;
  }

  std::shared_ptr<const rt::CudaDriver> d_;
  const Nccl *n_ = nullptr;
  CUcontext ctx_[2] = {};
  CUstream stream_[2] = {};
  ncclComm_t comm_[2] = {};
};

TEST_F(SimNcclTest, TwoRanksOnOneGpuAreRefused) {
  EXPECT_EQ(initPair(0, 0), ncclInvalidUsage);
  EXPECT_EQ(comm_[1], nullptr);
}

TEST_F(SimNcclTest, BlockingCommunicatorsAreRefused) {
  ncclUniqueId id;
  ASSERT_EQ(n_->getUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER; // blocking unless set otherwise
  d_->ctxSetCurrent(ctx_[0]);
  EXPECT_EQ(n_->initRankConfig(&comm_[0], 2, id, 0, &config), ncclInvalidArgument);
  EXPECT_EQ(n_->initRankConfig(&comm_[0], 2, id, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(comm_[0], nullptr);
}

TEST_F(SimNcclTest, OutputsAreWrittenOnlyOnceEveryRankCalled) {
  ASSERT_EQ(initPair(0, 1), ncclSuccess);
  EXPECT_EQ(stateOf(0), ncclSuccess);
  float *in0 = floats(0, 4, 1.5f), *out0 = floats(0, 4, -1.0f);
  float *in1 = floats(1, 4, 2.25f), *out1 = floats(1, 4, -1.0f);
  ASSERT_EQ(n_->allReduce(in0, out0, 4, ncclFloat32, ncclSum, comm_[0], stream_[0]), ncclSuccess);
  EXPECT_EQ(stateOf(0), ncclInProgress);
  EXPECT_EQ(read(0, out0, 4), std::vector<float>(4, -1.0f)) << "written before rank 1 called";
  ASSERT_EQ(n_->allReduce(in1, out1, 4, ncclFloat32, ncclSum, comm_[1], stream_[1]), ncclSuccess);
  EXPECT_EQ(stateOf(0), ncclSuccess);
  EXPECT_EQ(stateOf(1), ncclSuccess);
  EXPECT_EQ(read(0, out0, 4), std::vector<float>(4, 3.75f));
  EXPECT_EQ(read(1, out1, 4), std::vector<float>(4, 3.75f));

  float *gathered0 = floats(0, 8, 0.0f), *gathered1 = floats(1, 8, 0.0f);
  ASSERT_EQ(n_->allGather(in0, gathered0, 4, ncclFloat32, comm_[0], stream_[0]), ncclSuccess);
  ASSERT_EQ(n_->allGather(in1, gathered1, 4, ncclFloat32, comm_[1], stream_[1]), ncclSuccess);
  const std::vector<float> want = {1.5f, 1.5f, 1.5f, 1.5f, 2.25f, 2.25f, 2.25f, 2.25f};
  EXPECT_EQ(read(0, gathered0, 8), want);
  EXPECT_EQ(read(1, gathered1, 8), want);
}

TEST_F(SimNcclTest, BuffersAndStreamsOfAnotherDeviceOrTheHostAreRefused) {
  ASSERT_EQ(initPair(0, 1), ncclSuccess);
  float *in0 = floats(0, 4, 1.0f), *onGpu1 = floats(1, 4, 0.0f);
  d_->ctxSetCurrent(ctx_[0]);
  EXPECT_EQ(n_->allReduce(in0, onGpu1, 4, ncclFloat32, ncclSum, comm_[0], stream_[0]),
            ncclInvalidArgument);
  EXPECT_EQ(n_->allReduce(in0, in0, 4, ncclFloat32, ncclSum, comm_[0], stream_[1]),
            ncclInvalidArgument);
  EXPECT_EQ(n_->allReduce(in0, in0, 8, ncclFloat32, ncclSum, comm_[0], stream_[0]),
            ncclInvalidArgument)
      << "8 floats run past the 4-float allocation";
  void *host = nullptr;
  ASSERT_EQ(d_->memHostAlloc(&host, 16, 0), CUDA_SUCCESS);
  EXPECT_EQ(n_->allReduce(host, in0, 4, ncclFloat32, ncclSum, comm_[0], stream_[0]),
            ncclInvalidArgument);
  EXPECT_EQ(d_->memFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(stateOf(0), ncclSuccess) << "a refused call leaves the communicator usable";
}

TEST_F(SimNcclTest, RanksDisagreeingOnACollectiveFailEveryRank) {
  ASSERT_EQ(initPair(0, 1), ncclSuccess);
  float *a = floats(0, 8, 1.0f), *b = floats(1, 8, 1.0f);
  ASSERT_EQ(n_->allReduce(a, a, 8, ncclFloat32, ncclSum, comm_[0], stream_[0]), ncclSuccess);
  ASSERT_EQ(n_->allReduce(b, b, 4, ncclFloat32, ncclSum, comm_[1], stream_[1]), ncclSuccess);
  EXPECT_EQ(stateOf(0), ncclInvalidUsage);
  EXPECT_EQ(stateOf(1), ncclInvalidUsage);
  EXPECT_EQ(read(0, a, 8), std::vector<float>(8, 1.0f)) << "nothing is summed";
}

TEST_F(SimNcclTest, AnAbortedRankLeavesItsPartnerWaiting) {
  ASSERT_EQ(initPair(0, 1), ncclSuccess);
  float *a = floats(0, 4, 1.0f);
  ASSERT_EQ(n_->abort(comm_[1]), ncclSuccess);
  comm_[1] = nullptr;
  ASSERT_EQ(n_->allReduce(a, a, 4, ncclFloat32, ncclSum, comm_[0], stream_[0]), ncclSuccess);
  EXPECT_EQ(stateOf(0), ncclInProgress) << "as a GPU kernel spins on a dead peer";
  EXPECT_EQ(read(0, a, 4), std::vector<float>(4, 1.0f));
  ASSERT_EQ(n_->abort(comm_[0]), ncclSuccess) << "aborting is the way out";
  comm_[0] = nullptr;
}

} // namespace
} // namespace kiln::cudasim
