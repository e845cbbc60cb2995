// NcclCommunicator's collectives on two GPUs (label gpu; skips, saying why, without two GPUs and
// a loadable NCCL): exact sums and gathers in every dtype, a rank that never arrives fails its
// partner within the timeout naming it, an abort ends a partner's wait at once with its reason,
// and reset() rebuilds the communicators so the next collective works. On cudasim (two simulated
// GPUs) this runs against the simulated NCCL (tools/cudasim/sim_nccl.cc); on a machine with two
// GPUs, against the real one.
#include "runtime/base/half.h"
#include "runtime/exec/nccl_communicator.h"
#include "tests/runtime/exec/on_ranks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace kiln::rt {
namespace {

using namespace std::chrono_literals;
using testing::onRanks;
constexpr int kRanks = 2;

size_t bytesOf(schema::DType dtype) {
  return dtype == schema::DType::F32 ? 4 : 2;
}

// Host values of `dtype` as bytes.
std::vector<uint8_t> encode(const std::vector<float> &values, schema::DType dtype) {
  std::vector<uint8_t> bytes(values.size() * bytesOf(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == schema::DType::F32) {
      std::memcpy(&bytes[i * 4], &values[i], 4);
      continue;
    }
    uint16_t h = dtype == schema::DType::BF16 ? f32ToBf16(values[i]) : f32ToF16(values[i]);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
  return bytes;
}

class NcclCommunicatorGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    CudaDeviceCount visible = countCudaDevices();
    if (visible.count < kRanks)
      GTEST_SKIP() << "needs " << kRanks << " GPUs, " << visible.count << " visible"
                   << (visible.reason.empty() ? "" : " (" + visible.reason + ")");
    Result<std::string> nccl = probeNccl();
    if (!nccl.isOk())
      GTEST_SKIP() << "NCCL does not load: " << nccl.status().message();
    for (int r = 0; r < kRanks; ++r) {
      auto device = createDevice("cuda:" + std::to_string(r));
      ASSERT_TRUE(device.isOk()) << device.status().toString();
      devices_.push_back(std::move(device).value());
    }
  }
  void TearDown() override {
    comm_.reset();
    for (size_t r = 0; r < memory_.size(); ++r)
      for (DeviceMemory &m : memory_[r])
        devices_[r]->free(m);
  }

  void makeCommunicator(size_t maxBytes, std::chrono::milliseconds timeout) {
    NcclOptions options;
    options.timeout = timeout;
    auto comm = NcclCommunicator::create({devices_[0].get(), devices_[1].get()}, {0, 1},
                                         {maxBytes, maxBytes}, options);
    ASSERT_TRUE(comm.isOk()) << comm.status().toString();
    comm_ = std::move(comm).value();
    EXPECT_EQ(comm_->worldSize(), kRanks);
    EXPECT_EQ(comm_->description().rfind("NCCL ", 0), 0u) << comm_->description();
  }

  // Device memory on rank r's GPU holding `bytes` (or `size` bytes of 0xAB when empty).
  void *onDevice(int rank, const std::vector<uint8_t> &bytes, size_t size = 0) {
    std::vector<uint8_t> host = bytes.empty() ? std::vector<uint8_t>(size, 0xAB) : bytes;
    memory_.resize(kRanks);
    auto memory = devices_[rank]->allocate(host.size(), MemoryKind::kDevice);
    EXPECT_TRUE(memory.isOk()) << memory.status().toString();
    if (!memory.isOk())
      return nullptr;
    memory_[rank].push_back(*memory);
    EXPECT_TRUE(devices_[rank]->copyToDevice(memory->data, host.data(), host.size()).isOk());
    return memory->data;
  }

  std::vector<uint8_t> toHost(int rank, const void *data, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    EXPECT_TRUE(devices_[rank]->synchronize().isOk());
    EXPECT_TRUE(devices_[rank]->copyToHost(host.data(), data, bytes).isOk());
    return host;
  }

  // Both ranks all-reduce `count` values; returns each rank's output.
  std::vector<std::vector<uint8_t>> allReduce(const std::vector<std::vector<float>> &in,
                                              schema::DType dtype) {
    const size_t count = in[0].size(), bytes = count * bytesOf(dtype);
    void *send[kRanks], *recv[kRanks];
    for (int r = 0; r < kRanks; ++r) {
      send[r] = onDevice(r, encode(in[r], dtype));
      recv[r] = onDevice(r, {}, bytes);
    }
    for (const Status &s : onRanks(
             kRanks, [&](int r) { return comm_->allReduceSum(r, send[r], recv[r], count, dtype); }))
      EXPECT_TRUE(s.isOk()) << s.toString();
    return {toHost(0, recv[0], bytes), toHost(1, recv[1], bytes)};
  }

  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::vector<DeviceMemory>> memory_;
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(NcclCommunicatorGpuTest, AllReduceGivesEveryRankTheSumRoundedOnce) {
  constexpr size_t kCount = 1001;
  makeCommunicator(kCount * 4, 30000ms);
  for (schema::DType dtype : {schema::DType::F32, schema::DType::BF16, schema::DType::F16}) {
    std::vector<std::vector<float>> in(kRanks, std::vector<float>(kCount));
    std::vector<float> sum(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      // Values the dtype holds exactly, so the expected sum is one rounding of a + b.
      for (int r = 0; r < kRanks; ++r)
        in[r][i] = static_cast<float>(static_cast<int>(i % 97) * (r + 1) - 40 * r) / 8.0f;
      sum[i] = in[0][i] + in[1][i];
    }
    std::vector<std::vector<uint8_t>> out = allReduce(in, dtype);
    const std::vector<uint8_t> want = encode(sum, dtype);
    EXPECT_EQ(out[0], want) << "dtype " << static_cast<int>(dtype);
    EXPECT_EQ(out[1], want) << "dtype " << static_cast<int>(dtype);
  }
  EXPECT_TRUE(comm_->failure().isOk());
}

TEST_F(NcclCommunicatorGpuTest, AllGatherPlacesShardsSideBySideAndDropsPadding) {
  constexpr size_t kRows = 3, kShard = 5, kWidth = 9; // one padding column of rank 1 dropped
  makeCommunicator(kRows * kShard * 4, 30000ms);
  void *send[kRanks], *recv[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    std::vector<float> shard(kRows * kShard);
    for (size_t i = 0; i < kRows; ++i)
      for (size_t j = 0; j < kShard; ++j)
        shard[i * kShard + j] = static_cast<float>(100 * i + r * kShard + j);
    send[r] = onDevice(r, encode(shard, schema::DType::F32));
    recv[r] = onDevice(r, {}, kRows * kWidth * 4);
  }
  for (const Status &s : onRanks(kRanks, [&](int r) {
         return comm_->allGatherColumns(r, send[r], recv[r], kRows, kShard, kWidth,
                                        schema::DType::F32);
       }))
    ASSERT_TRUE(s.isOk()) << s.toString();
  for (int r = 0; r < kRanks; ++r) {
    std::vector<uint8_t> bytes = toHost(r, recv[r], kRows * kWidth * 4);
    std::vector<float> got(kRows * kWidth);
    std::memcpy(got.data(), bytes.data(), bytes.size());
    for (size_t i = 0; i < kRows; ++i)
      for (size_t j = 0; j < kWidth; ++j)
        EXPECT_EQ(got[i * kWidth + j], static_cast<float>(100 * i + j))
            << "rank " << r << " row " << i << " column " << j;
  }
}

TEST_F(NcclCommunicatorGpuTest, AMissingRankTimesOutNamingItAndResetRebuilds) {
  makeCommunicator(64, 300ms);
  void *send = onDevice(0, encode({1, 2, 3, 4}, schema::DType::F32));
  void *recv = onDevice(0, {}, 16);
  Status alone = comm_->allReduceSum(0, send, recv, 4, schema::DType::F32);
  const std::string want =
      "tensor-parallel all_reduce: rank 0 waited 300 ms for rank(s) 1, which failed or stalled";
  EXPECT_EQ(alone.message(), want);
  EXPECT_EQ(comm_->failure().message(), want);
  EXPECT_EQ(comm_->allReduceSum(1, send, recv, 4, schema::DType::F32).message(), want)
      << "a failed communicator fails every later call until reset()";
  comm_->reset();
  EXPECT_TRUE(comm_->failure().isOk()) << comm_->failure().toString();
  std::vector<std::vector<uint8_t>> out =
      allReduce({{1, 2, 3, 4}, {10, 20, 30, 40}}, schema::DType::F32);
  EXPECT_EQ(out[0], encode({11, 22, 33, 44}, schema::DType::F32));
  EXPECT_EQ(out[1], out[0]);
}

TEST_F(NcclCommunicatorGpuTest, AnAbortEndsThePartnersWaitWithItsReason) {
  makeCommunicator(64, 60000ms); // a long timeout: only the abort ends rank 0's wait
  void *send = onDevice(0, encode({1, 2, 3, 4}, schema::DType::F32));
  void *recv = onDevice(0, {}, 16);
  const auto begin = std::chrono::steady_clock::now();
  std::vector<Status> statuses = onRanks(kRanks, [&](int r) {
    if (r == 0)
      return comm_->allReduceSum(0, send, recv, 4, schema::DType::F32);
    std::this_thread::sleep_for(100ms);
    comm_->abort(1, internalError("rank 1: cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED"));
    return okStatus();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 10s);
  EXPECT_EQ(statuses[0].message(), "rank 1: cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED");
  comm_->reset();
  std::vector<std::vector<uint8_t>> out = allReduce({{1, 2}, {0.5f, -2}}, schema::DType::F32);
  EXPECT_EQ(out[0], encode({1.5f, 0}, schema::DType::F32));
  EXPECT_EQ(out[1], out[0]);
}

} // namespace
} // namespace kiln::rt
