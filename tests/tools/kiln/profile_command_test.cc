// `kiln profile` through the binary on the tiny-llama fixture (bf16): the JSON's op groups carry
// the exact bytes and flops of the model's shapes, --roofline turns rates into fractions of its
// ceilings, the table names the step, and bad flags fail naming the flag and the limit. Timings
// are never compared with a threshold.
#include "tests/tools/kiln/kiln_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace kiln::tools {
namespace {

nlohmann::json profileJson(const std::string &flags) {
  CommandResult r =
      runCommand(kKiln + " profile " + fixtureArtifact() + " " + flags + " --json", false);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

const nlohmann::json &group(const nlohmann::json &j, const std::string &name) {
  for (const nlohmann::json &g : j["groups"])
    if (g["group"] == name)
      return g;
  ADD_FAILURE() << "no group " << name << " in " << j["groups"].dump();
  static const nlohmann::json none;
  return none;
}

// tiny-llama: hidden 64, 4 heads and 2 KV heads of 16, intermediate 128, 2 layers, bf16 weights.
TEST(ProfileCommand, JsonGroupsCarryTheModelsBytesAndFlops) {
  nlohmann::json j = profileJson("--batch 2 --context 50 --repeats 2");
  EXPECT_EQ(j["mode"], "decode");
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["context"], 50);
  EXPECT_EQ(j["new_tokens"], 1);
  EXPECT_EQ(j["device"], "cpu");
  const nlohmann::json &qkv = group(j, "layers.*.attn.qkv");
  EXPECT_EQ(qkv["kind"], "Linear");
  EXPECT_EQ(qkv["ops"], 2);
  EXPECT_EQ(qkv["weight_bytes"], 2 * 128 * 64 * 2);
  EXPECT_EQ(qkv["flops"], 2 * (2 * 2 * 64 * 128));
  // Attention reads 50 positions of K and V (2 heads x 16, bf16) per sequence and layer.
  const nlohmann::json &attention = group(j, "layers.*.attention");
  EXPECT_EQ(attention["flops"], 2 * 2 * (50 * 4 * 64));
  EXPECT_GE(attention["bytes_read"].get<uint64_t>(), 2u * 2 * 50 * (2 * 2 * 16 * 2));
  EXPECT_GT(j["step"]["us"].get<double>(), 0);
  EXPECT_TRUE(j["step"]["hbm_fraction"].is_null());
  CommandResult inspect = runCommand(kKiln + " inspect " + fixtureArtifact() + " --summary", false);
  ASSERT_EQ(inspect.exitCode, 0);
  EXPECT_EQ(j["ops"].size(), nlohmann::json::parse(inspect.output)["ranks"][0]["num_ops"]);
}

TEST(ProfileCommand, RooflineGivesFractionsOfItsCeilings) {
  const TempDir temp;
  const std::string roofline = temp.path + "/roofline.json";
  std::ofstream(roofline) << R"({"device_name": "test", "hbm_bytes_per_s": 2e10,)"
                          << R"( "bf16_flops_per_s": 5e11})";
  nlohmann::json j = profileJson("--prefill 16 --repeats 1 --roofline " + roofline);
  EXPECT_EQ(j["mode"], "prefill");
  EXPECT_EQ(j["new_tokens"], 16);
  const nlohmann::json &step = j["step"];
  EXPECT_NEAR(step["hbm_fraction"].get<double>(), step["bytes_per_s"].get<double>() / 2e10,
              1e-12 * step["bytes_per_s"].get<double>());
  EXPECT_NEAR(step["peak_fraction"].get<double>(), step["flops_per_s"].get<double>() / 5e11,
              1e-12 * step["flops_per_s"].get<double>());
  EXPECT_EQ(j["ceilings"]["device_name"], "test");
}

TEST(ProfileCommand, TableNamesTheStepAndItsTotals) {
  const TempDir temp;
  const std::string json = temp.path + "/profile.json";
  CommandResult r = runCommand(
      kKiln + " profile " + fixtureArtifact() + " --context 20 --repeats 1 --json-out " + json,
      false);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // --json-out writes the JSON beside the table.
  std::ifstream written(json);
  nlohmann::json j = nlohmann::json::parse(written, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["context"], 20);
  EXPECT_EQ(j["mode"], "decode");
  EXPECT_NE(r.output.find("decode step: batch 1, 1 new token(s) per sequence, context 20"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("layers.*.mlp.gate_up"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step, op by op"), std::string::npos) << r.output;
}

TEST(ProfileCommand, BadFlagsNameTheFlagAndTheLimit) {
  const std::string base = kKiln + " profile " + fixtureArtifact();
  CommandResult r = runCommand(base + " --context 161", true);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("--context 161 is outside 1..160 (the compiled --max-seq-len)"),
            std::string::npos)
      << r.output;
  r = runCommand(base + " --batch 5", true);
  EXPECT_NE(r.output.find("--batch 5 is outside 1..4 (the compiled --max-batch)"),
            std::string::npos)
      << r.output;
  r = runCommand(base + " --context 8 --prefill 8", true);
  EXPECT_NE(r.output.find("--context and --prefill choose different steps"), std::string::npos)
      << r.output;
  r = runCommand(base + " --roofline /nonexistent/roofline.json", true);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.output.find("/nonexistent/roofline.json"), std::string::npos) << r.output;
}

} // namespace
} // namespace kiln::tools
