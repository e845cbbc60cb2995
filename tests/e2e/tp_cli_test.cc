// The command line on a --tp 2 artifact: `kiln inspect` shows each rank's shapes and bytes and its
// collectives; `kiln generate` (ServingModel -> MultiRankRunner) gives the --tp 1 artifact's ids.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <sys/wait.h>

namespace kiln::e2e {
namespace {

const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln/kiln";

std::string compileTinyLlama(int64_t tp) {
  compiler::CompileOptions options;
  options.tp = tp;
  options.maxBatch = 4;
  options.maxSeqLen = 64;
  return compileForTest(std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama", options);
}

nlohmann::json weightNamed(const nlohmann::json &rank, const std::string &name) {
  for (const auto &w : rank["weights"])
    if (w["name"] == name)
      return w;
  ADD_FAILURE() << name << " not in rank " << rank["rank"];
  return {};
}

TEST(TpCli, InspectShowsPerRankShapesAndBytes) {
  std::string artifact = compileTinyLlama(2);
  auto [code, output] = runCommand(kKiln + " inspect " + artifact + " --summary");
  ASSERT_EQ(code, 0) << output;
  nlohmann::json j = nlohmann::json::parse(output);
  EXPECT_EQ(j["tp"], 2);
  EXPECT_EQ(j["kv_cache"]["num_kv_heads"], 1); // 2 KV heads split over 2 ranks
  ASSERT_EQ(j["ranks"].size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const auto &rank = j["ranks"][r];
    EXPECT_EQ(rank["weights_file"], "weights.rank" + std::to_string(r) + ".bin");
    // tiny-llama: hidden 64, 4 heads / 2 KV heads of 16, intermediate 128, vocab 512.
    auto qkv = weightNamed(rank, "layers.0.attn.qkv.weight");
    EXPECT_EQ(qkv["shape"], nlohmann::json({64, 64})); // (2 + 2 * 1) heads x 16 rows
    EXPECT_EQ(qkv["bytes"], 64 * 64 * 4);
    EXPECT_EQ(weightNamed(rank, "layers.1.attn.o.weight")["shape"], nlohmann::json({64, 32}));
    EXPECT_EQ(weightNamed(rank, "layers.1.mlp.gate_up.weight")["shape"], nlohmann::json({128, 64}));
    EXPECT_EQ(weightNamed(rank, "layers.1.mlp.down.weight")["shape"], nlohmann::json({64, 64}));
    EXPECT_EQ(weightNamed(rank, "lm_head.weight")["bytes"], 256 * 64 * 4);
    EXPECT_EQ(weightNamed(rank, "embed.weight")["shape"], nlohmann::json({256, 64})); // vocab shard
  }
  std::tie(code, output) = runCommand(kKiln + " inspect " + artifact);
  ASSERT_EQ(code, 0) << output;
  j = nlohmann::json::parse(output);
  int reduces = 0, gathers = 0;
  for (const auto &op : j["ranks"][1]["program"]) {
    reduces += op["kind"] == "AllReduce";
    gathers += op["kind"] == "AllGather";
  }
  EXPECT_EQ(reduces, 5); // after the embedding, and o_proj and down_proj of 2 layers
  EXPECT_EQ(gathers, 1); // the lm_head logits
}

TEST(TpCli, GenerateOnTp2EqualsTp1) {
  std::string command = " generate {} --prompt-ids \"1 5 9 200 13\" --max-tokens 12";
  auto generate = [&](const std::string &artifact) {
    std::string c = command;
    c.replace(c.find("{}"), 2, artifact);
    return runCommand(kKiln + c);
  };
  auto [code1, out1] = generate(compileTinyLlama(1));
  auto [code2, out2] = generate(compileTinyLlama(2));
  ASSERT_EQ(code1, 0) << out1;
  ASSERT_EQ(code2, 0) << out2;
  auto ids = [](const std::string &out) {
    return nlohmann::json::parse(out.substr(out.rfind("{\"prompt_ids\"")))["output_ids"];
  };
  EXPECT_EQ(ids(out2), ids(out1));
  EXPECT_EQ(ids(out1).size(), 12u);
}

} // namespace
} // namespace kiln::e2e
