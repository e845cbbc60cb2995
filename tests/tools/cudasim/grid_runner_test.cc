// The grid runner against hand-written kernels in CUDA C++ (compiled here with the simulator's
// device header): built-in variables, __syncthreads through shared memory, warp shuffles and
// ballots with exact results, and the errors a GPU would turn into hangs or garbage.
#include "tools/cudasim/grid_runner.h"

#include "tools/cudasim/device/cudasim_device.h"

#include <gtest/gtest.h>

#include <sys/mman.h>

#include <numeric>
#include <vector>

// The kernels of this file call the runner directly (the JIT sets this in each kernel object).
const kiln_cudasim::DeviceApi *kiln_cudasim_api = &kiln::cudasim::deviceApi();

namespace kiln::cudasim {
namespace {

struct Buffers {
  const float *in;
  float *out;
  unsigned *ids;
};

// Tree reduction over 256 threads in shared memory: out[block] = sum of in[block * 256 + i].
__global__ void blockSumKernel(const void *raw) {
  const auto &p = *static_cast<const Buffers *>(raw);
  __shared__ float partial[256];
  const unsigned t = threadIdx.x;
  partial[t] = p.in[blockIdx.x * 256 + t];
  __syncthreads();
  for (unsigned stride = 128; stride > 0; stride >>= 1) {
    if (t < stride)
      partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0)
    p.out[blockIdx.x] = partial[0];
}

TEST(GridRunner, SharedMemoryTreeReductionPerBlock) {
  std::vector<float> in(3 * 256);
  std::iota(in.begin(), in.end(), 0.0f);
  std::vector<float> out(3, -1.0f);
  Buffers p{in.data(), out.data(), nullptr};
  ASSERT_TRUE(runGrid("blockSum", blockSumKernel, &p, {3, 1, 1}, {256, 1, 1}).isOk());
  // Block b sums 256 b*256 + (0 + ... + 255): exact in fp32 (integers below 2^24).
  EXPECT_EQ(out, (std::vector<float>{32640.0f, 98176.0f, 163712.0f}));
}

// ids[linear thread of the grid] = packed (block, thread) coordinates, written by that thread.
__global__ void coordinatesKernel(const void *raw) {
  const auto &p = *static_cast<const Buffers *>(raw);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  p.ids[block * threads + thread] = blockIdx.z << 24 | blockIdx.y << 20 | blockIdx.x << 16 |
                                    threadIdx.z << 8 | threadIdx.y << 4 | threadIdx.x;
}

TEST(GridRunner, EveryThreadSeesItsCoordinates) {
  const Dim3 grid{3, 2, 2}, block{4, 3, 2};
  std::vector<unsigned> ids(12 * 24, 0xffffffffu);
  Buffers p{nullptr, nullptr, ids.data()};
  ASSERT_TRUE(runGrid("coordinates", coordinatesKernel, &p, grid, block).isOk());
  size_t i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx, ++i)
              ASSERT_EQ(ids[i], bz << 24 | by << 20 | bx << 16 | tz << 8 | ty << 4 | tx) << i;
}

// out[t] = warp sum by xor butterfly; out[64 + t] = shfl_down by 1; out[128 + t] = broadcast of
// lane 5; ids[warp] = ballot of odd lanes.
__global__ void warpKernel(const void *raw) {
  const auto &p = *static_cast<const Buffers *>(raw);
  const unsigned t = threadIdx.x;
  float v = p.in[t];
  float sum = v;
  for (int offset = 16; offset > 0; offset >>= 1)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  p.out[t] = sum;
  p.out[64 + t] = __shfl_down_sync(0xffffffffu, v, 1);
  p.out[128 + t] = __shfl_sync(0xffffffffu, v, 5);
  const unsigned ballot = __ballot_sync(0xffffffffu, (t & 1) != 0);
  if (t % 32 == 0)
    p.ids[t / 32] = ballot;
}

TEST(GridRunner, WarpShufflesAndBallotsExchangeWithinEachWarp) {
  std::vector<float> in(64);
  std::iota(in.begin(), in.end(), 0.0f);
  std::vector<float> out(192, -1.0f);
  std::vector<unsigned> ids(2, 0);
  Buffers p{in.data(), out.data(), ids.data()};
  ASSERT_TRUE(runGrid("warp", warpKernel, &p, {1, 1, 1}, {64, 1, 1}).isOk());
  for (unsigned t = 0; t < 64; ++t) {
    const unsigned warp = t / 32, lane = t % 32;
    EXPECT_EQ(out[t], warp == 0 ? 496.0f : 1520.0f) << t;
    // The last lane reads past the warp: its own value.
    EXPECT_EQ(out[64 + t], lane == 31 ? in[t] : in[t + 1]) << t;
    EXPECT_EQ(out[128 + t], in[warp * 32 + 5]) << t;
  }
  EXPECT_EQ(ids, (std::vector<unsigned>{0xaaaaaaaau, 0xaaaaaaaau}));
}

// Half a warp in a shuffle, the other half at __syncthreads: a hang on a GPU.
__global__ void divergentKernel(const void *raw) {
  const auto &p = *static_cast<const Buffers *>(raw);
  if (threadIdx.x < 16)
    p.out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else
    __syncthreads();
}

TEST(GridRunner, DivergentCollectivesAreReportedAsADeadlock) {
  std::vector<float> out(32);
  Buffers p{nullptr, out.data(), nullptr};
  Status status = runGrid("divergent", divergentKernel, &p, {2, 1, 1}, {32, 1, 1});
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("kernel divergent block (0, 0, 0) deadlocks"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find(
                "warp 0: lanes 0-15 __shfl*_sync(mask 0xffffffff), lanes 16-31 __syncthreads"),
            std::string::npos)
      << status.message();
}

// Early exit before a block-wide barrier: exited threads count as arrived (as on the hardware),
// so the remaining threads complete.
__global__ void earlyExitKernel(const void *raw) {
  const auto &p = *static_cast<const Buffers *>(raw);
  __shared__ float value;
  if (threadIdx.x >= 40)
    return;
  if (threadIdx.x == 0)
    value = 7.0f;
  __syncthreads();
  p.out[threadIdx.x] = value;
}

TEST(GridRunner, ExitedThreadsDoNotBlockSyncthreads) {
  std::vector<float> out(64, 0.0f);
  Buffers p{nullptr, out.data(), nullptr};
  ASSERT_TRUE(runGrid("earlyExit", earlyExitKernel, &p, {1, 1, 1}, {64, 1, 1}).isOk());
  for (unsigned t = 0; t < 64; ++t)
    EXPECT_EQ(out[t], t < 40 ? 7.0f : 0.0f) << t;
}

__global__ void maskKernel(const void *raw) {
  const auto &p = *static_cast<const Buffers *>(raw);
  if (threadIdx.x < 16) // reads lane (t ^ 16), which is not in the mask
    p.out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 16);
}

TEST(GridRunner, ShuffleFromALaneOutsideTheMaskFails) {
  std::vector<float> out(32);
  Buffers p{nullptr, out.data(), nullptr};
  Status status = runGrid("mask", maskKernel, &p, {1, 1, 1}, {32, 1, 1});
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("reads lane 16, outside its mask 0x0000ffff"), std::string::npos)
      << status.message();
}

__global__ void trapKernel(const void *) {
  if (blockIdx.x == 1 && threadIdx.x == 3)
    __trap();
}

TEST(GridRunner, TrapNamesTheThread) {
  Status status = runGrid("trapper", trapKernel, nullptr, {2, 1, 1}, {8, 1, 1});
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "kernel trapper block (1, 0, 0) thread (3, 0, 0): __trap()");
}

TEST(GridRunner, RejectsDimensionsAGpuRejects) {
  auto message = [](Dim3 grid, Dim3 block, unsigned maxThreads) {
    return runGrid("k", trapKernel, nullptr, grid, block, maxThreads).message();
  };
  EXPECT_EQ(message({0, 1, 1}, {32, 1, 1}, 0),
            "launch of k with grid (0, 1, 1) block (32, 1, 1): a dimension is 0");
  EXPECT_EQ(message({1, 1, 1}, {2048, 1, 1}, 0),
            "launch of k with grid (1, 1, 1) block (2048, 1, 1): block over 1024 threads or "
            "(1024, 1024, 64)");
  EXPECT_EQ(message({1, 70000, 1}, {32, 1, 1}, 0),
            "launch of k with grid (1, 70000, 1) block (32, 1, 1): grid over (2^31 - 1, 65535, "
            "65535)");
  EXPECT_EQ(message({1, 1, 1}, {256, 1, 1}, 128),
            "launch of k with grid (1, 1, 1) block (256, 1, 1): 256 threads exceed the kernel's "
            "__launch_bounds__ of 128 (a GPU fails this launch: too many resources)");
}

// Thread 5 reads one element past its buffer, into a page nobody may touch.
__global__ void overrunKernel(const void *raw) {
  const auto &p = *static_cast<const Buffers *>(raw);
  if (threadIdx.x == 5)
    p.out[0] = p.in[1024];
}

TEST(GridRunnerDeathTest, AFaultNamesTheKernelAndThread) {
  const long page = sysconf(_SC_PAGESIZE);
  void *region =
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char *>(region) + page, page, PROT_NONE), 0);
  // 1024 floats end exactly where the protected page starts.
  const float *in = reinterpret_cast<const float *>(static_cast<char *>(region) + page) - 1024;
  float out = 0.0f;
  Buffers p{in, &out, nullptr};
  EXPECT_DEATH((void)runGrid("overrun", overrunKernel, &p, {1, 1, 1}, {32, 1, 1}),
               "cudasim: kernel overrun block \\(0, 0, 0\\) thread \\(5, 0, 0\\): invalid "
               "memory access at 0x");
  munmap(region, 2 * page);
}

} // namespace
} // namespace kiln::cudasim
