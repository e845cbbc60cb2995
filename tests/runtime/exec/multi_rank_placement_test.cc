// Where ranks run and which communicator connects them, as pure functions: placeRanks turns
// --device/--devices into one GPU per rank or an error naming the flag and the numbers;
// chooseCollectives picks cpu, NCCL or the staged communicator.
#include "runtime/exec/multi_rank_runner.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

RankPlacementRequest request(int tp, std::string device, std::vector<int> devices, int visible) {
  RankPlacementRequest r;
  r.artifactDir = "m.kiln";
  r.tp = tp;
  r.device = std::move(device);
  r.devices = std::move(devices);
  r.visible = {visible, visible ? "" : "no CUDA driver found (libcuda.so.1): no GPU"};
  return r;
}

std::string placementError(const RankPlacementRequest &r) {
  Result<RankPlacement> placed = placeRanks(r);
  EXPECT_FALSE(placed.isOk());
  return placed.isOk() ? "" : placed.status().message();
}

TEST(PlaceRanks, DefaultMappingIsOneGpuPerRank) {
  auto placed = placeRanks(request(2, "cuda", {}, 4));
  ASSERT_TRUE(placed.isOk()) << placed.status().toString();
  EXPECT_EQ(placed->kind, DeviceKind::kCuda);
  EXPECT_EQ(placed->ordinals, (std::vector<int>{0, 1}));
  EXPECT_EQ(placed->deviceName(1), "cuda:1");
  EXPECT_FALSE(placed->sharesGpu());
}

TEST(PlaceRanks, ExplicitListsMayRepeatAGpu) {
  auto placed = placeRanks(request(4, "cuda", {1, 1, 0, 0}, 2));
  ASSERT_TRUE(placed.isOk()) << placed.status().toString();
  EXPECT_EQ(placed->ordinals, (std::vector<int>{1, 1, 0, 0}));
  EXPECT_TRUE(placed->sharesGpu());
  placed = placeRanks(request(2, "cuda", {0, 0}, 1));
  ASSERT_TRUE(placed.isOk()) << placed.status().toString();
  EXPECT_EQ(placed->deviceName(1), "cuda:0");
}

TEST(PlaceRanks, CudaNPlacesASingleRank) {
  auto placed = placeRanks(request(1, "cuda:1", {}, 2));
  ASSERT_TRUE(placed.isOk()) << placed.status().toString();
  EXPECT_EQ(placed->ordinals, (std::vector<int>{1}));
  EXPECT_EQ(placementError(request(1, "cuda:3", {}, 2)),
            "--device cuda:3: only 2 CUDA devices are visible (0, 1)");
  EXPECT_EQ(placementError(request(2, "cuda:1", {}, 2)),
            "--device cuda:1 names one GPU but artifact 'm.kiln' has tp 2: place every rank "
            "with --devices (e.g. --devices 0,1)");
}

TEST(PlaceRanks, CpuNeedsNoGpuAndTakesNoList) {
  auto placed = placeRanks(request(4, "cpu", {}, 0));
  ASSERT_TRUE(placed.isOk()) << placed.status().toString();
  EXPECT_EQ(placed->kind, DeviceKind::kCpu);
  EXPECT_TRUE(placed->ordinals.empty());
  EXPECT_EQ(placed->deviceName(3), "cpu");
  EXPECT_EQ(placementError(request(2, "cpu", {0, 1}, 2)),
            "--devices places ranks on CUDA GPUs; it cannot be combined with --device cpu (cpu "
            "ranks share the host)");
}

TEST(PlaceRanks, ErrorsNameTheFlagAndTheNumbers) {
  EXPECT_EQ(placementError(request(2, "cuda", {1}, 2)),
            "artifact 'm.kiln' has tp 2; --devices lists 1 device");
  EXPECT_EQ(placementError(request(2, "cuda", {0, 0, 1}, 2)),
            "artifact 'm.kiln' has tp 2; --devices lists 3 devices");
  EXPECT_EQ(placementError(request(1, "cuda", {1}, 1)),
            "--devices 1: only 1 CUDA device is visible (0)");
  EXPECT_EQ(placementError(request(2, "cuda", {0, 2}, 2)),
            "--devices 0,2: only 2 CUDA devices are visible (0, 1)");
  EXPECT_EQ(placementError(request(4, "cuda", {0, 1, 2, 8}, 8)),
            "--devices 0,1,2,8: only 8 CUDA devices are visible (0-7)");
  EXPECT_EQ(placementError(request(4, "cuda", {}, 2)),
            "artifact 'm.kiln' has tp 4 but only 2 CUDA devices are visible (0, 1); pass "
            "--devices with repeated ordinals to share a GPU (e.g. --devices 0,0,1,1)");
  EXPECT_EQ(placementError(request(2, "cuda:0", {0, 1}, 2)),
            "--device cuda:0 and --devices both place ranks: give --device cuda with --devices");
  EXPECT_EQ(placementError(request(1, "gpu", {}, 2)),
            "unknown device 'gpu': expected cpu, cuda or cuda:N");
}

TEST(PlaceRanks, NoVisibleGpuSaysWhy) {
  Result<RankPlacement> placed = placeRanks(request(1, "cuda", {}, 0));
  ASSERT_FALSE(placed.isOk());
  EXPECT_EQ(placed.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(placed.status().message(), "--device cuda: no CUDA device is visible (no CUDA driver "
                                       "found (libcuda.so.1): no GPU)");
  EXPECT_EQ(placementError(request(2, "cuda", {0, 1}, 0)),
            "--devices 0,1: no CUDA device is visible (no CUDA driver found (libcuda.so.1): no "
            "GPU)");
}

TEST(ChooseCollectives, CpuRanksUseTheCpuCommunicator) {
  auto choice = chooseCollectives({DeviceKind::kCpu, DeviceKind::kCpu}, {-1, -1}, okStatus());
  EXPECT_EQ(choice.backend, CollectiveBackend::kCpu);
  EXPECT_EQ(choice.reason, "every rank is on the cpu");
}

TEST(ChooseCollectives, DistinctGpusUseNcclWhenItLoads) {
  const std::vector<DeviceKind> gpus(2, DeviceKind::kCuda);
  auto choice = chooseCollectives(gpus, {0, 1}, okStatus());
  EXPECT_EQ(choice.backend, CollectiveBackend::kNccl);
  EXPECT_EQ(choice.reason, "one GPU per rank");
  choice = chooseCollectives(gpus, {0, 1},
                             unavailable("NCCL unavailable: cannot load libnccl.so.2 (dlopen: x)"));
  EXPECT_EQ(choice.backend, CollectiveBackend::kStaged);
  EXPECT_EQ(choice.reason, "NCCL unavailable: cannot load libnccl.so.2 (dlopen: x)");
}

TEST(ChooseCollectives, SharedGpusAndMixedDevicesAreStaged) {
  const std::vector<DeviceKind> gpus(4, DeviceKind::kCuda);
  auto choice = chooseCollectives(gpus, {0, 1, 2, 1}, okStatus());
  EXPECT_EQ(choice.backend, CollectiveBackend::kStaged);
  EXPECT_EQ(choice.reason, "ranks 1 and 3 share GPU 1");
  choice = chooseCollectives({DeviceKind::kCuda, DeviceKind::kCpu}, {0, -1}, okStatus());
  EXPECT_EQ(choice.backend, CollectiveBackend::kStaged);
  EXPECT_EQ(choice.reason, "the ranks are on cpu and CUDA devices");
}

} // namespace
} // namespace kiln::rt
