// The roofline binary as scripts run it. Without a GPU it must say so cleanly (exit 2, a JSON
// object with null figures); with one, quick small measurements must give positive figures.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <iostream>
#include <string>
#include <sys/wait.h>

namespace {

struct RooflineRun {
  int exitCode = -1;
  std::string out;
};

RooflineRun runRoofline(const std::string &args) {
  const std::string command =
      std::string(KILN_BINARY_DIR) + "/tools/bench/roofline " + args + " 2>/dev/null";
  RooflineRun run;
  FILE *pipe = popen(command.c_str(), "r");
  if (pipe == nullptr)
    return run;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    run.out.append(buffer.data(), n);
  int status = pclose(pipe);
  run.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(RooflineCli, MeasuresOrSaysNoGpu) {
  RooflineRun run = runRoofline("--repetitions 3 --copy-mib 256 --gemm-size 2048 --gemm-algorithms 2");
  ASSERT_TRUE(run.exitCode == 0 || run.exitCode == 2) << "exit " << run.exitCode << ": " << run.out;
  auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["tool"], "kiln-roofline");
  if (run.exitCode == 2) {
    EXPECT_TRUE(j["device_name"].is_null());
    EXPECT_TRUE(j["hbm_bytes_per_s"].is_null());
    ASSERT_EQ(j["errors"].size(), 1u);
    EXPECT_EQ(j["errors"][0].get<std::string>().rfind("no GPU: ", 0), 0u) << j["errors"][0];
    // Without a GPU the clean "no GPU" report is the behaviour under test.
    std::cout << "no CUDA device (checked the no-GPU report): " << j["errors"][0] << "\n";
    return;
  }
  EXPECT_TRUE(j["errors"].empty()) << j["errors"];
  EXPECT_EQ(j["gemm_mnk"], nlohmann::json::array({2048, 2048, 2048}));
  EXPECT_EQ(j["copy_buffer_bytes"], 256u << 20);
  // Any GPU kiln targets moves more than 100 GB/s and does more than 10 bf16 TFLOP/s.
  EXPECT_GT(j["hbm_bytes_per_s"].get<double>(), 1e11);
  EXPECT_GT(j["bf16_flops_per_s"].get<double>(), 1e13);
}

TEST(RooflineCli, BadArgumentIsAUsageError) {
  RooflineRun run = runRoofline("--gemm-size 7");
  EXPECT_EQ(run.exitCode, 64);
  EXPECT_TRUE(run.out.empty());
}

} // namespace
