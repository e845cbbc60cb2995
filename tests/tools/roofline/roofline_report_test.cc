#include "tools/bench/roofline_report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kiln::tools {
namespace {

TEST(RooflineReport, BestIsTheFastestPositiveRepetition) {
  EXPECT_EQ(bestMs({3.0f, 1.5f, 2.0f}), 1.5);
  EXPECT_EQ(bestMs({0.0f, -1.0f, 4.0f}), 4.0);
  EXPECT_FALSE(bestMs({}).has_value());
  EXPECT_FALSE(bestMs({0.0f, -2.0f}).has_value());
}

TEST(RooflineReport, Rates) {
  EXPECT_DOUBLE_EQ(perSecond(2e9, 1.0), 2e12);
  EXPECT_DOUBLE_EQ(perSecond(5e8, 0.25), 2e12);
  EXPECT_DOUBLE_EQ(gemmFlops(8192, 8192, 8192), 1099511627776.0);
  EXPECT_DOUBLE_EQ(gemmFlops(2, 3, 4), 48.0);
}

TEST(RooflineReport, SmTargetsMatchKilnTargets) {
  EXPECT_EQ(smTarget(9, 0), "sm_90a");
  EXPECT_EQ(smTarget(10, 0), "sm_100a");
  EXPECT_EQ(smTarget(8, 0), "sm_80");
  EXPECT_EQ(smTarget(8, 9), "sm_89");
  EXPECT_EQ(smTarget(12, 0), "sm_120");
}

RooflineReport exampleReport() {
  RooflineReport r;
  r.deviceName = "NVIDIA H100 80GB HBM3";
  r.ccMajor = 9;
  r.smCount = 132;
  r.memoryBytes = uint64_t(85) * 1000 * 1000 * 1000;
  r.driverVersion = 13000;
  r.runtimeVersion = 13000;
  r.repetitions = 30;
  r.copyBytes = r.readBytes = uint64_t(1) << 30;
  r.copyBestMs = 1.0; // 2 GiB moved in 1 ms
  r.readBestMs = 0.4; // 1 GiB read in 0.4 ms
  r.gemmM = r.gemmN = r.gemmK = 8192;
  r.gemmBestMs = 1.5;
  r.gemmAlgorithmsTried = 4;
  return r;
}

TEST(RooflineReport, JsonHoldsTheRatesCompareReads) {
  auto j = nlohmann::json::parse(toJson(exampleReport()));
  EXPECT_EQ(j["tool"], "kiln-roofline");
  EXPECT_EQ(j["device_name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(j["sm"], "sm_90a");
  EXPECT_EQ(j["compute_capability"], "9.0");
  EXPECT_EQ(j["sm_count"], 132);
  EXPECT_EQ(j["repetitions"], 30);
  // %.6g keeps six significant digits.
  EXPECT_NEAR(j["copy_bytes_per_s"].get<double>(), 2.0 * 1073741824 / 1e-3, 1e7);
  EXPECT_NEAR(j["read_bytes_per_s"].get<double>(), 1073741824 / 0.4e-3, 1e7);
  // The larger of the two figures.
  EXPECT_EQ(j["hbm_bytes_per_s"], j["read_bytes_per_s"]);
  EXPECT_NEAR(j["bf16_flops_per_s"].get<double>(), 1099511627776.0 / 1.5e-3, 1e9);
  EXPECT_EQ(j["gemm_mnk"], nlohmann::json::array({8192, 8192, 8192}));
  EXPECT_EQ(j["gemm_algorithms_tried"], 4);
  EXPECT_TRUE(j["errors"].empty());
}

TEST(RooflineReport, ExactJsonText) {
  RooflineReport r = exampleReport();
  r.errors = {"cublasLtMatmul: cublasStatus 7"};
  EXPECT_EQ(toJson(r),
            "{\"tool\": \"kiln-roofline\", \"device_name\": \"NVIDIA H100 80GB HBM3\", \"sm\": "
            "\"sm_90a\", \"compute_capability\": \"9.0\", \"sm_count\": 132, \"memory_bytes\": "
            "85000000000, \"driver_version\": 13000, \"runtime_version\": 13000, "
            "\"repetitions\": 30, \"hbm_bytes_per_s\": 2.68435e+12, \"copy_bytes_per_s\": "
            "2.14748e+12, \"copy_buffer_bytes\": 1073741824, \"copy_best_ms\": 1, "
            "\"read_bytes_per_s\": 2.68435e+12, \"read_buffer_bytes\": 1073741824, "
            "\"read_best_ms\": 0.4, \"bf16_flops_per_s\": 7.33008e+14, \"gemm_mnk\": [8192, "
            "8192, 8192], \"gemm_best_ms\": 1.5, \"gemm_algorithms_tried\": 4, \"errors\": "
            "[\"cublasLtMatmul: cublasStatus 7\"]}");
}

TEST(RooflineReport, UnmeasuredFiguresAreNull) {
  RooflineReport r = exampleReport();
  r.copyBestMs.reset();
  r.gemmBestMs.reset();
  r.errors = {"cannot load libcublasLt.so.13 (or .12): \"x\"\n"};
  auto j = nlohmann::json::parse(toJson(r));
  EXPECT_TRUE(j["copy_bytes_per_s"].is_null());
  EXPECT_TRUE(j["bf16_flops_per_s"].is_null());
  EXPECT_EQ(j["hbm_bytes_per_s"], j["read_bytes_per_s"]);
  EXPECT_EQ(j["errors"][0], "cannot load libcublasLt.so.13 (or .12): \"x\"\n");
}

TEST(RooflineReport, NoGpuJson) {
  auto j = nlohmann::json::parse(noGpuJson("cudaGetDeviceCount: cudaErrorNoDevice (\"none\")"));
  EXPECT_TRUE(j["device_name"].is_null());
  EXPECT_TRUE(j["hbm_bytes_per_s"].is_null());
  EXPECT_TRUE(j["bf16_flops_per_s"].is_null());
  EXPECT_EQ(j["errors"][0], "no GPU: cudaGetDeviceCount: cudaErrorNoDevice (\"none\")");
}

} // namespace
} // namespace kiln::tools
