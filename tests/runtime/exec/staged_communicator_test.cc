// StagedCommunicator on cpu devices: the same bits as the CpuCommunicator for sums and gathers
// (it stages through host buffers and runs the same math), and a rank whose staging fails or is
// too large fails its partners at once, naming the rank, instead of leaving them to time out.
#include "runtime/exec/staged_communicator.h"

#include "runtime/base/half.h"
#include "runtime/hal/cpu_device.h"
#include "tests/runtime/exec/forwarding_device.h"
#include "tests/runtime/exec/on_ranks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

namespace kiln::rt {
namespace {

using namespace std::chrono_literals;
using testing::onRanks;
constexpr schema::DType kF32 = schema::DType::F32;

// A cpu device whose copies to the host fail, as a lost GPU would.
class BrokenCopyDevice final : public testing::ForwardingDevice {
public:
  BrokenCopyDevice() : ForwardingDevice(std::make_unique<CpuDevice>()) {}
  const std::string &name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kCuda; } // any kind is staged
  Status copyToHost(void *, const void *, size_t) override {
    return internalError("cuMemcpyDtoHAsync failed: CUDA_ERROR_LAUNCH_FAILED");
  }

private:
  std::string name_ = "broken";
};

class StagedCommunicatorTest : public ::testing::Test {
protected:
  std::unique_ptr<StagedCommunicator> make(int ranks, size_t bytes,
                                           std::chrono::milliseconds timeout) {
    devices_.clear();
    std::vector<Device *> raw;
    for (int r = 0; r < ranks; ++r) {
      devices_.push_back(std::make_unique<CpuDevice>());
      raw.push_back(devices_.back().get());
    }
    auto comm = StagedCommunicator::create(raw, {bytes, bytes}, timeout);
    EXPECT_TRUE(comm.isOk()) << comm.status().toString();
    return comm.isOk() ? std::move(*comm) : nullptr;
  }
  std::vector<std::unique_ptr<Device>> devices_;
};

TEST_F(StagedCommunicatorTest, AllReduceEqualsTheCpuCommunicatorBitForBit) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 1001;
  auto staged = make(kRanks, kCount * 4, 5000ms);
  ASSERT_NE(staged, nullptr);
  EXPECT_TRUE(staged->supports(DeviceKind::kCuda));
  EXPECT_TRUE(staged->supports(DeviceKind::kCpu));
  CpuCommunicator cpu(kRanks, 5000ms);
  for (schema::DType dtype : {schema::DType::F32, schema::DType::BF16, schema::DType::F16}) {
    size_t bytes = dtype == kF32 ? 4 : 2;
    std::vector<std::vector<uint8_t>> in(kRanks, std::vector<uint8_t>(kCount * bytes)), viaCpu(in),
        viaStaged(in);
    for (int r = 0; r < kRanks; ++r)
      for (size_t i = 0; i < kCount; ++i) {
        float v = 0.013f * float(i) * float(r + 1) - 3.7f * float(r);
        if (dtype == kF32)
          std::memcpy(&in[r][i * 4], &v, 4);
        else {
          uint16_t h = dtype == schema::DType::BF16 ? f32ToBf16(v) : f32ToF16(v);
          std::memcpy(&in[r][i * 2], &h, 2);
        }
      }
    for (const Status &s : onRanks(kRanks, [&](int r) {
           return cpu.allReduceSum(r, in[r].data(), viaCpu[r].data(), kCount, dtype);
         }))
      ASSERT_TRUE(s.isOk()) << s.toString();
    for (const Status &s : onRanks(kRanks, [&](int r) {
           return staged->allReduceSum(r, in[r].data(), viaStaged[r].data(), kCount, dtype);
         }))
      ASSERT_TRUE(s.isOk()) << s.toString();
    for (int r = 0; r < kRanks; ++r)
      EXPECT_EQ(viaStaged[r], viaCpu[r]) << "rank " << r << " dtype " << int(dtype);
  }
}

TEST_F(StagedCommunicatorTest, AllGatherConcatenatesColumnsAndDropsPadding) {
  constexpr int kRanks = 4;
  constexpr size_t kRows = 3, kShard = 5, kWidth = 18; // 2 padding columns dropped
  auto staged = make(kRanks, kRows * kShard * kRanks * 4, 5000ms);
  ASSERT_NE(staged, nullptr);
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(kRows * kShard)),
      out(kRanks, std::vector<float>(kRows * kWidth, -1.0f));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kRows; ++i)
      for (size_t j = 0; j < kShard; ++j)
        in[r][i * kShard + j] = float(100 * i + r * kShard + j);
  for (const Status &s : onRanks(kRanks, [&](int r) {
         return staged->allGatherColumns(r, in[r].data(), out[r].data(), kRows, kShard, kWidth,
                                         kF32);
       }))
    ASSERT_TRUE(s.isOk()) << s.toString();
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kRows; ++i)
      for (size_t j = 0; j < kWidth; ++j)
        ASSERT_EQ(out[r][i * kWidth + j], float(100 * i + j)) << r << " " << i << " " << j;
}

TEST_F(StagedCommunicatorTest, ACollectiveLargerThanTheStagingFailsEveryRankAtOnce) {
  auto staged = make(2, 16, 60000ms); // a long timeout: only the abort ends rank 1's wait
  ASSERT_NE(staged, nullptr);
  std::vector<float> big(8, 1.0f), out(8);
  auto begin = std::chrono::steady_clock::now();
  auto statuses = onRanks(2, [&](int r) {
    return staged->allReduceSum(r, big.data(), out.data(), r == 0 ? 8 : 4, kF32);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 5000ms);
  const std::string want = "tensor-parallel all_reduce on rank 0: 32 bytes in, 32 bytes out "
                           "exceed the staging buffers sized from the plan (16 in, 16 out)";
  EXPECT_EQ(statuses[0].message(), want);
  EXPECT_EQ(statuses[1].message(), want);
  staged->reset();
  for (const Status &s :
       onRanks(2, [&](int r) { return staged->allReduceSum(r, big.data(), out.data(), 4, kF32); }))
    ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(out[3], 2.0f);
}

TEST_F(StagedCommunicatorTest, AFailedCopyAbortsThePartnersNamingTheRank) {
  CpuDevice good;
  BrokenCopyDevice broken;
  auto staged = StagedCommunicator::create({&good, &broken}, {64, 64}, 60000ms);
  ASSERT_TRUE(staged.isOk()) << staged.status().toString();
  float in[4] = {1, 2, 3, 4}, out[2][4] = {};
  auto statuses =
      onRanks(2, [&](int r) { return (*staged)->allGatherColumns(r, in, out[r], 1, 4, 8, kF32); });
  const std::string want = "rank 1: staging the all_gather input: cuMemcpyDtoHAsync failed: "
                           "CUDA_ERROR_LAUNCH_FAILED";
  EXPECT_EQ(statuses[0].message(), want);
  EXPECT_EQ(statuses[1].message(), want);
  EXPECT_EQ((*staged)->failure().message(), want);
}

TEST_F(StagedCommunicatorTest, AMissingRankTimesOutWithTheCpuCommunicatorsMessage) {
  auto staged = make(3, 64, 100ms);
  ASSERT_NE(staged, nullptr);
  float in[4] = {1, 2, 3, 4}, out[3][4] = {};
  auto statuses = onRanks(
      3, [&](int r) { return r == 2 ? okStatus() : staged->allReduceSum(r, in, out[r], 4, kF32); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kUnavailable);
    EXPECT_NE(statuses[r].message().find(" waited 100 ms for rank(s) 2, which failed or stalled"),
              std::string::npos)
        << statuses[r].message();
  }
}

TEST(StagedCommunicatorCreate, RejectsMissingDevicesAndTimeouts) {
  CpuDevice cpu;
  auto none = StagedCommunicator::create({&cpu, nullptr}, {}, 1000ms);
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().message(), "staged communicator: rank 1 has no device");
  auto zero = StagedCommunicator::create({&cpu}, {}, 0ms);
  ASSERT_FALSE(zero.isOk());
  EXPECT_EQ(zero.status().message(), "collective timeout must be positive, got 0 ms");
}

} // namespace
} // namespace kiln::rt
