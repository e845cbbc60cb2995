// `kiln bench` through the binary: the JSON object's counts are exact (every prompt generates
// exactly --output-len tokens, each computed once) and bad flags fail naming the flag. Timings are
// only checked for being positive and ordered; they are never compared with a threshold.
#include "tests/command_runner.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace kiln::e2e {
namespace {

using testing::CommandResult;
using testing::runCommand;

const std::string &fixtureArtifact() {
  static const std::string dir = [] {
    compiler::CompileOptions options;
    options.maxBatch = 8;
    options.maxSeqLen = 128;
    return compileForTest(std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama", options);
  }();
  return dir;
}

const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln/kiln";

TEST(KilnBench, JsonCountsAreExact) {
  CommandResult r = runCommand(kKiln + " bench " + fixtureArtifact() +
                                   " --batch 4 --input-len 20 --output-len 12 --num-prompts 10 "
                                   "--json",
                               false);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["batch"], 4);
  EXPECT_EQ(j["num_prompts"], 10);
  const auto &e = j["engine"];
  EXPECT_EQ(e["generated_tokens"], 10 * 12);
  // Each prompt is prefilled once and each generated token but the last is decoded once.
  EXPECT_EQ(e["computed_tokens"], 10 * (20 + 12 - 1));
  EXPECT_EQ(e["preemptions"], 0);
  EXPECT_EQ(e["cached_prompt_tokens"], 0);
  // At most 4 sequences per step, at least one token each; 10 requests of 12 tokens need >= 30.
  EXPECT_GE(e["steps"].get<int>(), 30);
  const double seconds = j["elapsed_s"];
  ASSERT_GT(seconds, 0);
  EXPECT_NEAR(j["requests_per_s"].get<double>(), 10 / seconds, 1e-6 * (10 / seconds));
  EXPECT_NEAR(j["output_tokens_per_s"].get<double>(), 120 / seconds, 1e-6 * (120 / seconds));
  EXPECT_NEAR(j["total_tokens_per_s"].get<double>(), 320 / seconds, 1e-6 * (320 / seconds));
  for (const char *latency : {"ttft_ms", "itl_ms"}) {
    const auto &l = j[latency];
    EXPECT_GT(l["p50"].get<double>(), 0) << latency;
    EXPECT_LE(l["p50"].get<double>(), l["p99"].get<double>()) << latency;
  }
  EXPECT_GT(j["batch1_decode_tokens_per_s"].get<double>(), 0);
}

TEST(KilnBench, TooLongSequenceNamesTheFlags) {
  CommandResult r =
      runCommand(kKiln + " bench " + fixtureArtifact() + " --input-len 100 --output-len 40", true);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("--input-len 100 + --output-len 40 exceeds the max sequence length 128"),
            std::string::npos)
      << r.output;
}

TEST(KilnBench, BatchAboveTheCompiledMaximumNamesTheFlag) {
  CommandResult r = runCommand(kKiln + " bench " + fixtureArtifact() + " --batch 9", true);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.output.find("--batch 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recompile with a larger --max-batch"), std::string::npos) << r.output;
}

TEST(KilnBench, NumPromptsAboveTheLimitNamesTheFlag) {
  CommandResult r = runCommand(kKiln + " bench " + fixtureArtifact() + " --num-prompts 5000", true);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.output.find("--num-prompts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1024"), std::string::npos) << r.output;
}

} // namespace
} // namespace kiln::e2e
