// `kiln bench --json` through the binary on the tiny-llama fixture compiled with --dtype bf16:
// every documented field is present (docs/benchmarks.md), the rates are exactly the counts over the
// elapsed time, the model section matches the artifact, and --ttft-len reports a consistent
// long-prompt TTFT. Timings are never compared with a threshold.
#include "tests/tools/kiln/kiln_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace kiln::tools {
namespace {

nlohmann::json benchJson(const std::string &flags) {
  CommandResult r =
      runCommand(kKiln + " bench " + fixtureArtifact() + " " + flags + " --json", false);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

void expectRelNear(double actual, double expected, const char *what) {
  EXPECT_NEAR(actual, expected, 1e-9 * expected) << what;
}

TEST(BenchCommand, JsonHasEveryDocumentedField) {
  nlohmann::json j = benchJson("--batch 2 --input-len 12 --output-len 6 --num-prompts 5 "
                               "--ttft-len 100 --ttft-repeats 2");
  for (const char *key :
       {"artifact", "device", "batch", "input_len", "output_len", "num_prompts", "ignore_eos",
        "weights_dtype", "model", "elapsed_s", "requests_per_s", "output_tokens_per_s",
        "total_tokens_per_s", "ttft_ms", "itl_ms", "engine", "batch1_decode_tokens_per_s",
        "prefill_tokens_per_s", "long_prompt_ttft_ms"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["input_len"], 12);
  EXPECT_EQ(j["output_len"], 6);
  EXPECT_EQ(j["num_prompts"], 5);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["weights_dtype"], "BF16");
  for (const char *latency : {"ttft_ms", "itl_ms"})
    for (const char *stat : {"mean", "p50", "p99"})
      EXPECT_TRUE(j[latency].contains(stat)) << latency << "." << stat;
}

TEST(BenchCommand, RatesAreTheCountsOverTheElapsedTime) {
  nlohmann::json j = benchJson("--batch 4 --input-len 20 --output-len 9 --num-prompts 7");
  const double seconds = j["elapsed_s"];
  ASSERT_GT(seconds, 0);
  // ignore_eos: every prompt generates exactly --output-len tokens.
  EXPECT_EQ(j["engine"]["generated_tokens"], 7 * 9);
  expectRelNear(j["requests_per_s"], 7 / seconds, "requests_per_s");
  expectRelNear(j["output_tokens_per_s"], 7 * 9 / seconds, "output_tokens_per_s");
  expectRelNear(j["total_tokens_per_s"], 7 * (20 + 9) / seconds, "total_tokens_per_s");
  EXPECT_FALSE(j.contains("long_prompt_ttft_ms")); // only with --ttft-len
  EXPECT_FALSE(j.contains("prefill_tokens_per_s"));
}

TEST(BenchCommand, ModelSectionDescribesTheArtifact) {
  nlohmann::json j = benchJson("--input-len 4 --output-len 2 --num-prompts 1 --no-batch1");
  const nlohmann::json &m = j["model"];
  EXPECT_EQ(m["vocab_size"], 512);
  EXPECT_EQ(m["hidden_size"], 64);
  EXPECT_EQ(m["intermediate_size"], 128);
  EXPECT_EQ(m["num_layers"], 2);
  EXPECT_EQ(m["num_heads"], 4);
  EXPECT_EQ(m["num_kv_heads"], 2);
  EXPECT_EQ(m["head_dim"], 16);
  EXPECT_EQ(m["tie_word_embeddings"], false);
  EXPECT_EQ(m["tp"], 1);
  EXPECT_EQ(m["weights_dtype"], "BF16");
  EXPECT_FALSE(j.contains("batch1_decode_tokens_per_s"));
  // weight_bytes is what `kiln inspect` counts for the rank.
  CommandResult inspect = runCommand(kKiln + " inspect " + fixtureArtifact() + " --summary", false);
  ASSERT_EQ(inspect.exitCode, 0);
  nlohmann::json summary = nlohmann::json::parse(inspect.output);
  EXPECT_EQ(m["weight_bytes"], summary["ranks"][0]["weight_bytes"]);
  EXPECT_EQ(m["kv_dtype"], summary["kv_cache"]["dtype"]);
  EXPECT_EQ(m["activation_dtype"], summary["activation_dtype"]);
  // bf16 matrices (2 bytes per element) plus the fp32 norms and rope table: 2 layers of
  // qkv 128x64, o 64x64, gate_up 256x64, down 64x128; embed and lm_head 512x64.
  const uint64_t matrices = 2 * (128 * 64 + 64 * 64 + 256 * 64 + 64 * 128) + 2 * 512 * 64;
  EXPECT_GE(m["weight_bytes"].get<uint64_t>(), 2 * matrices);
  EXPECT_LT(m["weight_bytes"].get<uint64_t>(), 2 * matrices + 4096);
}

TEST(BenchCommand, LongPromptTtftIsConsistent) {
  nlohmann::json j = benchJson("--input-len 8 --output-len 4 --num-prompts 2 --no-batch1 "
                               "--ttft-len 150 --ttft-repeats 3");
  const nlohmann::json &t = j["long_prompt_ttft_ms"];
  EXPECT_EQ(t["input_len"], 150);
  EXPECT_EQ(t["repeats"], 3);
  const double mean = t["mean"], p50 = t["p50"], low = t["min"], high = t["max"];
  EXPECT_GT(low, 0);
  EXPECT_LE(low, p50);
  EXPECT_LE(p50, high);
  EXPECT_LE(low, mean * (1 + 1e-12));
  EXPECT_LE(mean, high * (1 + 1e-12));
  expectRelNear(j["prefill_tokens_per_s"], 150 / (mean * 1e-3), "prefill_tokens_per_s");
}

TEST(BenchCommand, TableShowsTheLongPromptLine) {
  CommandResult r = runCommand(kKiln + " bench " + fixtureArtifact() +
                                   " --input-len 8 --output-len 2 --num-prompts 1 --no-batch1 "
                                   "--ttft-len 40 --ttft-repeats 1 --ignore-eos",
                               false);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("long-prompt TTFT ms   40 tokens: mean "), std::string::npos) << r.output;
}

TEST(BenchCommand, TtftLenBeyondTheMaxSequenceLengthNamesTheFlag) {
  CommandResult r = runCommand(kKiln + " bench " + fixtureArtifact() + " --ttft-len 160", true);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("--ttft-len 160 + 1 generated token exceeds the max sequence length 160"),
            std::string::npos)
      << r.output;
}

TEST(BenchCommand, TtftRepeatsOutOfRangeNamesTheFlag) {
  CommandResult r =
      runCommand(kKiln + " bench " + fixtureArtifact() + " --ttft-len 10 --ttft-repeats 0", true);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.output.find("--ttft-repeats"), std::string::npos) << r.output;
}

} // namespace
} // namespace kiln::tools
