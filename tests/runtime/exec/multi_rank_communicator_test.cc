// CpuCommunicator: exact sums and gathers across rank threads, and every failure mode ends the
// collective on every rank with a message naming the rank, within the timeout, never a hang.
#include "runtime/exec/communicator.h"

#include "runtime/base/half.h"
#include "tests/runtime/exec/on_ranks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace kiln::rt {
namespace {

using namespace std::chrono_literals;
using testing::onRanks;
constexpr schema::DType kF32 = schema::DType::F32;

TEST(CpuCommunicatorTest, AllReduceSumsInRankOrderOnEveryRank) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 1000; // not a multiple of the rank count: uneven chunks
  CpuCommunicator comm(kRanks, 5000ms);
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(kCount)),
      out(kRanks, std::vector<float>(kCount, -1.0f));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kCount; ++i)
      in[r][i] = 0.1f * static_cast<float>(i) + 1e-3f * static_cast<float>(r + 1);
  for (int repeat = 0; repeat < 3; ++repeat) { // the barrier is reused across calls
    auto statuses = onRanks(
        kRanks, [&](int r) { return comm.allReduceSum(r, in[r].data(), out[r].data(), kCount, kF32); });
    for (const Status &s : statuses)
      ASSERT_TRUE(s.isOk()) << s.toString();
  }
  for (size_t i = 0; i < kCount; ++i) {
    float expected = (in[0][i] + in[1][i]) + in[2][i];
    for (int r = 0; r < kRanks; ++r)
      ASSERT_EQ(out[r][i], expected) << "rank " << r << " element " << i;
  }
}

// Half buffers are summed in fp32 in rank order and rounded once: the result is the rounding of
// the exact fp32 sum, identical on every rank (an fp32 check would differ for 1/3 of elements).
TEST(CpuCommunicatorTest, AllReduceHalfTypesRoundTheFp32SumOnce) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 257;
  CpuCommunicator comm(kRanks, 5000ms);
  for (schema::DType dtype : {schema::DType::BF16, schema::DType::F16}) {
    bool bf16 = dtype == schema::DType::BF16;
    auto toHalf = [&](float v) { return bf16 ? f32ToBf16(v) : f32ToF16(v); };
    auto toFloat = [&](uint16_t h) { return bf16 ? bf16ToF32(h) : f16ToF32(h); };
    std::vector<std::vector<uint16_t>> in(kRanks, std::vector<uint16_t>(kCount)),
        out(kRanks, std::vector<uint16_t>(kCount, 0xffff));
    for (int r = 0; r < kRanks; ++r)
      for (size_t i = 0; i < kCount; ++i)
        in[r][i] = toHalf(0.37f * static_cast<float>(i) - 11.0f * static_cast<float>(r));
    auto statuses = onRanks(kRanks, [&](int r) {
      return comm.allReduceSum(r, in[r].data(), out[r].data(), kCount, dtype);
    });
    for (const Status &s : statuses)
      ASSERT_TRUE(s.isOk()) << s.toString();
    for (size_t i = 0; i < kCount; ++i) {
      float sum = (toFloat(in[0][i]) + toFloat(in[1][i])) + toFloat(in[2][i]);
      for (int r = 0; r < kRanks; ++r)
        ASSERT_EQ(out[r][i], toHalf(sum)) << (bf16 ? "bf16" : "f16") << " rank " << r << " " << i;
    }
  }
}

TEST(CpuCommunicatorTest, AllGatherCopiesHalfElements) {
  constexpr int kRanks = 2;
  constexpr size_t kRows = 2, kShard = 3, kWidth = 5;
  CpuCommunicator comm(kRanks, 5000ms);
  std::vector<std::vector<uint16_t>> in(kRanks, std::vector<uint16_t>(kRows * kShard)),
      out(kRanks, std::vector<uint16_t>(kRows * kWidth, 0));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kRows * kShard; ++i)
      in[r][i] = static_cast<uint16_t>(1000 * r + i);
  auto statuses = onRanks(kRanks, [&](int r) {
    return comm.allGatherColumns(r, in[r].data(), out[r].data(), kRows, kShard, kWidth,
                                 schema::DType::BF16);
  });
  for (const Status &s : statuses)
    ASSERT_TRUE(s.isOk()) << s.toString();
  std::vector<uint16_t> want = {0, 1, 2, 1000, 1001, 3, 4, 5, 1003, 1004};
  EXPECT_EQ(out[0], want);
  EXPECT_EQ(out[1], want);
}

TEST(CpuCommunicatorTest, RejectsIntegerBuffers) {
  CpuCommunicator comm(1, 1000ms);
  int32_t in[2] = {1, 2}, out[2] = {};
  Status status = comm.allReduceSum(0, in, out, 2, schema::DType::I32);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "tensor-parallel all_reduce: buffers must be F32, F16 or BF16");
}

TEST(CpuCommunicatorTest, AllGatherConcatenatesColumnsAndDropsPadding) {
  constexpr int kRanks = 4;
  constexpr size_t kRows = 3, kShard = 5, kWidth = 18; // 4 x 5 = 20: 2 padding columns dropped
  CpuCommunicator comm(kRanks, 5000ms);
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(kRows * kShard)),
      out(kRanks, std::vector<float>(kRows * kWidth, -1.0f));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kRows; ++i)
      for (size_t j = 0; j < kShard; ++j)
        in[r][i * kShard + j] = static_cast<float>(100 * i + r * kShard + j);
  auto statuses = onRanks(kRanks, [&](int r) {
    return comm.allGatherColumns(r, in[r].data(), out[r].data(), kRows, kShard, kWidth, kF32);
  });
  for (const Status &s : statuses)
    ASSERT_TRUE(s.isOk()) << s.toString();
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kRows; ++i)
      for (size_t j = 0; j < kWidth; ++j)
        ASSERT_EQ(out[r][i * kWidth + j], static_cast<float>(100 * i + j)) << r << " " << i;
}

TEST(CpuCommunicatorTest, AMissingRankTimesOutNamingItAndResetRecovers) {
  CpuCommunicator comm(3, 100ms);
  float in[4] = {1, 2, 3, 4}, out[3][4] = {};
  auto begin = std::chrono::steady_clock::now();
  auto statuses = onRanks(3, [&](int r) {
    if (r == 2)
      return okStatus(); // rank 2 never arrives
    return comm.allReduceSum(r, in, out[r], 4, kF32);
  });
  auto elapsed = std::chrono::steady_clock::now() - begin;
  EXPECT_LT(elapsed, 2000ms);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(statuses[r].isOk());
    EXPECT_EQ(statuses[r].code(), StatusCode::kUnavailable);
    EXPECT_NE(statuses[r].message().find("for rank(s) 2, which failed or stalled"),
              std::string::npos)
        << statuses[r].message();
  }
  // Failed until reset: a late rank gets the same error at once.
  Status late = comm.allReduceSum(2, in, out[2], 4, kF32);
  EXPECT_EQ(late.message(), statuses[0].message());
  comm.reset();
  EXPECT_TRUE(comm.failure().isOk());
  statuses = onRanks(3, [&](int r) { return comm.allReduceSum(r, in, out[r], 4, kF32); });
  for (const Status &s : statuses)
    ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(out[1][3], 12.0f);
}

TEST(CpuCommunicatorTest, AbortWakesWaitingRanksAtOnceWithTheReason) {
  CpuCommunicator comm(2, 60000ms); // a long timeout: only the abort can end the wait quickly
  float in[2] = {1, 2}, out[2] = {};
  auto begin = std::chrono::steady_clock::now();
  auto statuses = onRanks(2, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(50ms);
      comm.abort(1, internalError("rank 1: kernel failed"));
      return okStatus();
    }
    return comm.allReduceSum(0, in, out, 2, kF32);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 5000ms);
  ASSERT_FALSE(statuses[0].isOk());
  EXPECT_EQ(statuses[0].message(), "rank 1: kernel failed");
  EXPECT_EQ(comm.failure().message(), "rank 1: kernel failed");
}

TEST(CpuCommunicatorTest, RanksDisagreeingOnSizesFailInsteadOfReadingOutOfBounds) {
  CpuCommunicator comm(2, 5000ms);
  std::vector<float> in(8, 1.0f), out0(8), out1(4);
  auto statuses = onRanks(2, [&](int r) {
    return r == 0 ? comm.allReduceSum(0, in.data(), out0.data(), 8, kF32)
                  : comm.allReduceSum(1, in.data(), out1.data(), 4, kF32);
  });
  for (const Status &s : statuses) {
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("the ranks' plans disagree"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(comm.allReduceSum(5, in.data(), out0.data(), 8, kF32).isOk()); // rank out of range
}

} // namespace
} // namespace kiln::rt
